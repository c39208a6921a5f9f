#pragma once
// Device and host helpers shared by the model ops (embedding.cu, rms_norm.cu, qk_norm_rope.cu,
// activation.cu, convert.cu): loads of 8 elements of any float dtype as floats, fixed-order
// reductions, and the host-side checks every launcher repeats. Internal (.cuh).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

inline bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Element i of a bf16 / f16 / f32 array as a float.
template <DType kDType>
__device__ __forceinline__ float load1(const void* base, int64_t i) {
  if constexpr (kDType == DType::kF32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (kDType == DType::kBF16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  } else {
    return __half2float(static_cast<const __half*>(base)[i]);
  }
}

// Elements [i, i + 8) of a bf16 / f16 / f32 array as floats; base + i must be 16-byte aligned
// (32 for f32 is not needed: two 16-byte loads).
template <DType kDType>
__device__ __forceinline__ void load8(const void* base, int64_t i, float (&f)[8]) {
  if constexpr (kDType == DType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 a = p[0];
    const float4 b = p[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i);
    unpack8<kDType>(v, f);
  }
}

// Loads kN consecutive elements [i, i + kN) of a bf16 / f16 / f32 array (kN in {1, 2, 8}; the
// address must be aligned to kN elements).
template <DType kDType, int kN>
__device__ __forceinline__ void load_n(const void* base, int64_t i, float (&f)[kN]) {
  if constexpr (kN == 8) {
    load8<kDType>(base, i, f);
  } else if constexpr (kN == 2 && kDType == DType::kBF16) {
    const float2 v = __bfloat1622float2(
        *reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(base) + i));
    f[0] = v.x, f[1] = v.y;
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) f[j] = load1<kDType>(base, i + j);
  }
}

// Stores kN floats as bf16 at [i, i + kN) (round to nearest even), aligned to kN elements.
template <int kN>
__device__ __forceinline__ void store_bf16_n(void* base, int64_t i, const float (&f)[kN]) {
  __nv_bfloat16* p = static_cast<__nv_bfloat16*>(base) + i;
  if constexpr (kN == 8) {
    *reinterpret_cast<uint4*>(p) = pack8<DType::kBF16>(f);
  } else if constexpr (kN == 2) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(f[0], f[1]);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) p[j] = __float2bfloat16_rn(f[j]);
  }
}

// Sum over the kWidth lanes of an aligned lane group (kWidth a power of two <= 32), by an xor
// butterfly: a fixed tree, and every lane of the group ends with the same bits (a + b == b + a).
// Every lane of the warp must call it.
__device__ __forceinline__ float group_sum(float x, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset, width);
  }
  return x;
}

// Sum of x over the block (blockDim.x a multiple of 32, at most 1024) in a fixed order that
// depends only on blockDim.x: each warp's butterfly, then warp 0 sums the warp totals the same
// way. Every thread receives the total. `scratch` holds 33 floats of shared memory; the call ends
// with a barrier after the total is read, so scratch may be reused right away.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  x = group_sum(x, 32);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    float t = lane < num_warps ? scratch[lane] : 0.0f;
    t = group_sum(t, 32);
    if (lane == 0) scratch[32] = t;
  }
  __syncthreads();
  const float total = scratch[32];
  __syncthreads();
  return total;
}

}  // namespace strata::cuda::detail
