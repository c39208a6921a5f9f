// embedding(): gathers token rows of a bf16 / f16 table into fp32 rows, times a scale (Gemma 3's
// sqrt(hidden_size); 1 leaves every value exact) (model_ops.h).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;

struct EmbeddingArgs {
  const int32_t* token_ids;
  const void* table;
  float* out;
  int32_t num_tokens;
  int32_t hidden;
  float scale;
};

// Grid: x covers one row in chunks of kThreads * kVec elements, y strides over tokens. Each
// thread moves kVec elements: one 16-byte load of the table and two 16-byte stores (kVec = 8),
// or one element (kVec = 1, for a hidden size or pointer the vector path cannot take).
template <DType kDType, int kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const __grid_constant__ EmbeddingArgs a) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (col >= a.hidden) return;
  for (int32_t t = blockIdx.y; t < a.num_tokens; t += gridDim.y) {
    const int64_t src = static_cast<int64_t>(a.token_ids[t]) * a.hidden + col;
    float* dst = a.out + static_cast<int64_t>(t) * a.hidden + col;
    if constexpr (kVec == 8) {
      float f[8];
      detail::unpack8<kDType>(detail::load_stream16(static_cast<const uint16_t*>(a.table) + src),
                              f);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] *= a.scale;
      reinterpret_cast<float4*>(dst)[0] = make_float4(f[0], f[1], f[2], f[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
      *dst = detail::load1<kDType>(a.table, src) * a.scale;
    }
  }
}

template <DType kDType, int kVec>
void launch(const EmbeddingArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(a.hidden, int64_t{kThreads} * kVec)),
                  static_cast<unsigned>(std::min(a.num_tokens, kMaxGridY)));
  embedding_kernel<kDType, kVec><<<grid, kThreads, 0, stream>>>(a);
}

template <DType kDType>
void launch_dtype(const EmbeddingArgs& a, bool vec, cudaStream_t stream) {
  if (vec) {
    launch<kDType, 8>(a, stream);
  } else {
    launch<kDType, 1>(a, stream);
  }
}

}  // namespace

Status embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.table_dtype != DType::kBF16 && p.table_dtype != DType::kF16) {
    return Status::Unsupported("embedding table dtype " + std::string(dtype_name(p.table_dtype)) +
                               " (supported: BF16, F16)");
  }
  if (p.num_tokens < 0 || p.hidden <= 0 || !(p.scale > 0.0f && p.scale < INFINITY)) {
    return Status::InvalidArgument(
        "embedding needs num_tokens >= 0, hidden > 0 and a positive finite scale");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.token_ids == nullptr || p.table == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("embedding needs token_ids, table and out");
  }
  const EmbeddingArgs a{p.token_ids, p.table, p.out, p.num_tokens, p.hidden, p.scale};
  const bool vec =
      p.hidden % 8 == 0 && detail::aligned_to(p.table, 16) && detail::aligned_to(p.out, 16);
  if (p.table_dtype == DType::kBF16) {
    launch_dtype<DType::kBF16>(a, vec, stream);
  } else {
    launch_dtype<DType::kF16>(a, vec, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
