#pragma once
// Device helpers shared by the kernels: the CUDA type of a KV dtype, 16-byte vector loads, and
// 8-element conversions between a 16-byte vector of bf16/fp16 and floats. Internal (.cuh).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace strata::cuda::detail {

template <DType kDType>
struct CudaType;
template <>
struct CudaType<DType::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaType<DType::kF16> {
  using type = __half;
};

// 16-byte load through the non-coherent path without allocating in L1: KV bytes are read once
// per step, so they should not evict what is reused (block tables, q).
__device__ __forceinline__ uint4 load_stream16(const void* ptr) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr));
  return r;
}

// Asynchronous 16-byte global -> shared copy (cp.async, L2 only), and its group fences. A thread
// that reads back only what it copied itself needs no barrier, only cp_async_wait.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A softmax row's log-sum-exp in log2 units from its running maximum m and sum l (of 2^(s - m)):
// -inf for a row that attended to nothing.
__device__ __forceinline__ float row_lse2(float m, float l) {
  return l > 0.0f ? m + log2f(l) : -INFINITY;
}

// The 8 elements of a 16-byte vector as floats.
template <DType kDType>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kDType == DType::kBF16) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      __half2 h;
      static_assert(sizeof(h) == sizeof(uint32_t));
      memcpy(&h, &w[i], sizeof(h));
      const float2 t = __half22float2(h);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
}

// 8 floats rounded to nearest into one 16-byte vector.
template <DType kDType>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kDType == DType::kBF16) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      memcpy(&w[i], &h, sizeof(uint32_t));
    } else {
      const __half2 h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
      memcpy(&w[i], &h, sizeof(uint32_t));
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace strata::cuda::detail
