#include "kernels/cuda/random_fill.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

// splitmix64 finalizer of (seed, index): a counter-based generator, identical on host and device.
__host__ __device__ inline float hash_uniform(uint64_t seed, int64_t i, float lo, float hi) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
  return lo + (hi - lo) * unit;
}

template <DType kDType>
__global__ void random_fill_kernel(void* data, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = hash_uniform(seed, i, lo, hi);
    if constexpr (kDType == DType::kF32) {
      static_cast<float*>(data)[i] = x;
    } else if constexpr (kDType == DType::kBF16) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(x);
    } else {
      static_cast<__half*>(data)[i] = __float2half_rn(x);
    }
  }
}

}  // namespace

float random_fill_value(uint64_t seed, int64_t i, float lo, float hi) {
  return hash_uniform(seed, i, lo, hi);
}

Status random_fill(const RandomFillParams& p, cudaStream_t stream) {
  if (p.num_elements < 0 || (p.num_elements > 0 && p.data == nullptr)) {
    return Status::InvalidArgument("random_fill needs data for num_elements > 0");
  }
  if (p.num_elements == 0) return Status::Ok();
  const int64_t blocks = std::clamp<int64_t>(detail::ceil_div(p.num_elements, 256), 1, 8192);
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (p.dtype) {
    case DType::kF32:
      random_fill_kernel<DType::kF32>
          <<<grid, 256, 0, stream>>>(p.data, p.num_elements, p.seed, p.lo, p.hi);
      break;
    case DType::kBF16:
      random_fill_kernel<DType::kBF16>
          <<<grid, 256, 0, stream>>>(p.data, p.num_elements, p.seed, p.lo, p.hi);
      break;
    case DType::kF16:
      random_fill_kernel<DType::kF16>
          <<<grid, 256, 0, stream>>>(p.data, p.num_elements, p.seed, p.lo, p.hi);
      break;
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kI4:
      return Status::Unsupported("random_fill of " + std::string(dtype_name(p.dtype)));
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
