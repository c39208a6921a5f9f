#pragma once
// Tensor-core helpers shared by the attention kernels: mma.sync m16n8k16 (16-bit inputs, fp32
// accumulators), ldmatrix fragment loads from shared memory, and a zero-filling cp.async. Internal
// (.cuh).
//
// Fragment layout of m16n8k16 (lane = 4 * g + t, g in 0..7, t in 0..3), which every caller
// relies on:
//   A (16 x 16, row-major):  a0 = A[g][2t, 2t+1]    a1 = A[g+8][2t, 2t+1]
//                            a2 = A[g][2t+8, 2t+9]  a3 = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col"):       b0 = B[2t, 2t+1][g]    b1 = B[2t+8, 2t+9][g]
//   C/D (16 x 8, fp32):      c0, c1 = C[g][2t, 2t+1]  c2, c3 = C[g+8][2t, 2t+1]
// The accumulator of S = Q K^T (16 rows x 16 tokens, two n-tiles) is therefore, once rounded in
// pairs, the A fragment of P for O += P V: no data moves between the two products.
//
// ldmatrix.x4 loads four 8 x 8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses
// of matrix i. Without .trans lane (g, t) receives row g, columns 2t, 2t+1 of each matrix: with
// rows = tokens and columns = channels of K that is the B fragment of Q K^T. With .trans it
// receives rows 2t, 2t+1 of column g: with rows = tokens of V, the B fragment of P V.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

template <DType kDType>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (kDType == DType::kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The transpose of an 8x8 matrix of 16-bit values held as the warp's fragment (lane l: row l / 4,
// columns 2 (l % 4), +1): the same lane then holds row l / 4 of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

// cp.async of 16 bytes of which only the first src_bytes (0..16) are read from gmem and the rest
// are written as zeros (with 0, gmem is not read, but must still be a valid address: callers pass
// the head's base).
__device__ __forceinline__ void cp_async16_prefix(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

// cp.async of 16 bytes that writes zeros instead when !valid.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  cp_async16_prefix(smem, gmem, valid ? 16 : 0);
}

// Two floats rounded into one register of two 16-bit values (lo = first element).
template <DType kDType>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (kDType == DType::kBF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, sizeof(r));
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, sizeof(r));
  }
  return r;
}

// The inverse: one register of two 16-bit values as floats (x = first element).
template <DType kDType>
__device__ __forceinline__ float2 unpack2(uint32_t pair) {
  if constexpr (kDType == DType::kBF16) {
    return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &pair, sizeof(h));
    return __half22float2(h);
  }
}

}  // namespace strata::cuda::detail
