#pragma once
// Warpgroup tensor-core products (wgmma, sm_90a): Hopper's FP8 path. mma.sync with e4m3 inputs
// is compiled on Hopper into conversions and fp16 products, so FP8 operands reach the FP8 tensor
// cores only through wgmma (docs/kernels.md). Internal (.cuh).
//
// A wgmma is issued by the four warps of a warpgroup (warps 4i .. 4i + 3) together. In
// m64nNk32 with A in registers, warp w of the group owns rows 16w .. 16w + 15 of A and of D, and
// lane (g, t) holds, per 32-wide k-step, the A bytes
//   a0 = A[16w + g][4t .. 4t + 3]       a1 = A[16w + g + 8][4t .. 4t + 3]
//   a2 = A[16w + g][16 + 4t .. + 3]     a3 = A[16w + g + 8][16 + 4t .. + 3]
// and of D, per n-tile j of 8 columns, d[4j + 0, 1] = D[16w + g][8j + 2t, +1] and
// d[4j + 2, 3] = D[16w + g + 8][8j + 2t, +1]: each warp's rows in mma.sync m16n8's C layout.
// B (N x K, K-major) is read from shared memory through a descriptor. Without swizzle it is a
// grid of core matrices of 8 rows x 16 bytes (each 128 contiguous bytes); the descriptor's
// leading byte offset is the distance between core matrices adjacent in K, the stride byte
// offset between those adjacent in N. Checked on an H200 GPU: an FP8 prefill kernel with K read
// this way passed the prefill kernel tests (docs/kernels.md, "FP8 prefill on the FP8 tensor
// cores"), and strata_tensor_core_bench checks it on every GPU run.

#include <cstdint>

namespace strata::cuda::detail {

// A shared-memory matrix descriptor without swizzle (layout type 0): start address, leading
// (K) and stride (N) byte offsets, each stored >> 4.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t k_stride,
                                               uint32_t n_stride) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((addr >> 4) & 0x3fff) |
         (static_cast<uint64_t>((k_stride >> 4) & 0x3fff) << 16) |
         (static_cast<uint64_t>((n_stride >> 4) & 0x3fff) << 32);
}

// Before the first wgmma of a group: orders the warpgroup's register accesses to A and D.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until every committed group has completed (D readable).
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Shared memory written by this thread (stores, cp.async) that a wgmma reads next: each writing
// thread fences, then the block synchronizes.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#define STRATA_WGMMA_D32                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define STRATA_WGMMA_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define STRATA_WGMMA_D32_OPERANDS                                                             \
  STRATA_WGMMA_D4(0), STRATA_WGMMA_D4(1), STRATA_WGMMA_D4(2), STRATA_WGMMA_D4(3),              \
      STRATA_WGMMA_D4(4), STRATA_WGMMA_D4(5), STRATA_WGMMA_D4(6), STRATA_WGMMA_D4(7)

// D (64 x 64 fp32; this thread's 32 as d[n-tile][4]) = A B^T (+ D when accumulate), A e4m3 in
// registers, B e4m3 through descriptor b: one 32-wide k-step.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[8][4], const uint32_t (&a)[4],
                                                     uint64_t b, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " STRATA_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}"
      : STRATA_WGMMA_D32_OPERANDS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0));
}

// The same product with bf16 inputs (a 16-wide k-step; B K-major, not transposed).
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[8][4], const uint32_t (&a)[4],
                                                     uint64_t b, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " STRATA_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
      : STRATA_WGMMA_D32_OPERANDS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0));
}

#undef STRATA_WGMMA_D32
#undef STRATA_WGMMA_D4
#undef STRATA_WGMMA_D32_OPERANDS

}  // namespace strata::cuda::detail
