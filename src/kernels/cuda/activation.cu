// silu_and_mul(): the gated MLP's activation, bf16 in and out (model_ops.h).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;

struct SiluAndMulArgs {
  const __nv_bfloat16* gate_up;
  __nv_bfloat16* out;
  int32_t num_tokens;
  int32_t intermediate;
};

// Grid: x covers one output row in chunks of kThreads * kVec elements, y strides over tokens.
// kVec = 8: two 16-byte loads (gate, up) and one 16-byte store per thread; kVec = 1 otherwise.
// Each element is silu_mul.cuh's, which the GEMV's SiLU-and-mul epilogue forms the same way.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_kernel(const __grid_constant__ SiluAndMulArgs a) {
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (col >= a.intermediate) return;
  for (int32_t t = blockIdx.y; t < a.num_tokens; t += gridDim.y) {
    const __nv_bfloat16* gate = a.gate_up + static_cast<int64_t>(t) * 2 * a.intermediate + col;
    const __nv_bfloat16* up = gate + a.intermediate;
    __nv_bfloat16* out = a.out + static_cast<int64_t>(t) * a.intermediate + col;
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(out) =
          detail::silu_mul8_bf16(detail::load_stream16(gate), detail::load_stream16(up));
    } else {
      *out = detail::silu_mul_bf16(__bfloat162float(*gate), __bfloat162float(*up));
    }
  }
}

template <int kVec>
void launch(const SiluAndMulArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(a.intermediate, int64_t{kThreads} * kVec)),
                  static_cast<unsigned>(std::min(a.num_tokens, kMaxGridY)));
  detail::launch_pdl(silu_and_mul_kernel<kVec>, grid, dim3(kThreads), 0, stream, a);
}

}  // namespace

Status silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.intermediate <= 0) {
    return Status::InvalidArgument("silu_and_mul needs num_tokens >= 0 and intermediate > 0");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.gate_up == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("silu_and_mul needs gate_up and out");
  }
  const SiluAndMulArgs a{static_cast<const __nv_bfloat16*>(p.gate_up),
                         static_cast<__nv_bfloat16*>(p.out), p.num_tokens, p.intermediate};
  if (p.intermediate % 8 == 0 && detail::aligned_to(p.gate_up, 16) &&
      detail::aligned_to(p.out, 16)) {
    launch<8>(a, stream);
  } else {
    launch<1>(a, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
