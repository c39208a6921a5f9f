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

#include "core/dtype.h"

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

// The same for the 128-byte swizzle (layout type 1): rows of 128 bytes whose 16-byte chunks are
// permuted by the row's index mod 8, 8-row atoms of 1024 bytes (1024-byte aligned). K-major:
// the stride byte offset is the distance between atoms along M / N, the leading one unused (16)
// while a k-step stays inside a 128-byte row. MN-major: the leading byte offset is the distance
// between atom columns along M / N (each 64 16-bit elements wide), the stride one between atoms
// along K.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* smem, uint32_t leading,
                                                     uint32_t stride) {
  return wgmma_desc(smem, leading, stride) | (1ull << 62);
}

// The same for the 64-byte swizzle (layout type 2), K-major: rows of 64 bytes whose four 16-byte
// chunks are permuted by (row / 2) mod 4 (address bits 4-5 XOR 7-8, as the bulk tensor copy's
// 64-byte swizzle writes them), 8-row atoms of 512 bytes (512-byte aligned); the stride byte
// offset is the distance between atoms along M / N.
__device__ __forceinline__ uint64_t wgmma_desc_sw64(const void* smem, uint32_t leading,
                                                    uint32_t stride) {
  return wgmma_desc(smem, leading, stride) | (2ull << 62);
}

// The descriptor as a value the compiler cannot see through (a volatile move): in a loop, the
// k-step offsets added to it are then computed where each wgmma is issued, instead of one
// 64-bit register pair per k-step being hoisted out of the loop and held (or spilled) across it.
__device__ __forceinline__ uint64_t wgmma_desc_opaque(uint64_t desc) {
  uint64_t r;
  asm volatile("mov.b64 %0, %1;" : "=l"(r) : "l"(desc));
  return r;
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
// Waits until at most kPending of the committed groups are still in flight (groups complete in
// the order they were committed).
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Pins a product's register operands in place: an empty volatile asm that reads and writes each
// of them. The compiler sees only the asm statements, not the asynchrony between them, and would
// otherwise be free to compute an A fragment after the wgmma_fence that must follow its last
// write, or to read an accumulator before the wgmma_wait_all that completes it (both observed as
// wrong products). Call it on A and D before wgmma_fence, and on D after wgmma_wait_all.
template <int kTiles>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
  }
}
template <int kTiles>
__device__ __forceinline__ void wgmma_fence_operands(int32_t (&d)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(d[j][e])::"memory");
  }
}
template <int kSteps>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[kSteps][4]) {
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[j][e])::"memory");
  }
}

// Shared memory written by this thread (stores, cp.async) that a wgmma reads next: each writing
// thread fences, then the block synchronizes.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The accumulator operands of an m64nN product: N / 2 floats per thread, d[n-tile][4].
#define STRATA_WGMMA_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define STRATA_WGMMA_D32_OPERANDS                                                             \
  STRATA_WGMMA_D4(0), STRATA_WGMMA_D4(1), STRATA_WGMMA_D4(2), STRATA_WGMMA_D4(3),              \
      STRATA_WGMMA_D4(4), STRATA_WGMMA_D4(5), STRATA_WGMMA_D4(6), STRATA_WGMMA_D4(7)
#define STRATA_WGMMA_D64_OPERANDS                                                             \
  STRATA_WGMMA_D32_OPERANDS, STRATA_WGMMA_D4(8), STRATA_WGMMA_D4(9), STRATA_WGMMA_D4(10),      \
      STRATA_WGMMA_D4(11), STRATA_WGMMA_D4(12), STRATA_WGMMA_D4(13), STRATA_WGMMA_D4(14),      \
      STRATA_WGMMA_D4(15)
#define STRATA_WGMMA_D32                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define STRATA_WGMMA_D64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// D (64 x N fp32; this thread's N / 2 as d[n-tile][4]) = A B^T (+ D when accumulate): A e4m3 in
// registers, B (N x 32, K-major) e4m3 or e5m2 through descriptor b. One 32-wide k-step.
template <DType kB, int kN>
__device__ __forceinline__ void wgmma_fp8(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                          uint64_t b, bool accumulate) {
  static_assert(kB == DType::kF8E4M3 || kB == DType::kF8E5M2);
  static_assert(kN == 64 || kN == 128);
#define STRATA_WGMMA_FP8(PRED, SHAPE, BTYPE, DREGS, AB, DOPS)                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " PRED ", 0;\n"                            \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32.e4m3." BTYPE " " DREGS ", " AB     \
               ", p, 1, 1;\n}"                                                                \
               : DOPS                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0))
  if constexpr (kN == 64 && kB == DType::kF8E4M3) {
    STRATA_WGMMA_FP8("%37", "m64n64k32", "e4m3", STRATA_WGMMA_D32,
                     "{%32, %33, %34, %35}, %36", STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kN == 64) {
    STRATA_WGMMA_FP8("%37", "m64n64k32", "e5m2", STRATA_WGMMA_D32,
                     "{%32, %33, %34, %35}, %36", STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kB == DType::kF8E4M3) {
    STRATA_WGMMA_FP8("%69", "m64n128k32", "e4m3", STRATA_WGMMA_D64,
                     "{%64, %65, %66, %67}, %68", STRATA_WGMMA_D64_OPERANDS);
  } else {
    STRATA_WGMMA_FP8("%69", "m64n128k32", "e5m2", STRATA_WGMMA_D64,
                     "{%64, %65, %66, %67}, %68", STRATA_WGMMA_D64_OPERANDS);
  }
#undef STRATA_WGMMA_FP8
}

// D (64 x 128 fp32) = A B^T (+ D when accumulate): A (64 x 32, K-major) e4m3 and B (128 x 32,
// K-major) e4m3 or e5m2, both from shared memory through descriptors. One 32-wide k-step.
template <DType kB>
__device__ __forceinline__ void wgmma_fp8_ss(float (&d)[16][4], uint64_t a, uint64_t b,
                                             bool accumulate) {
  static_assert(kB == DType::kF8E4M3 || kB == DType::kF8E5M2);
#define STRATA_WGMMA_FP8_SS(BTYPE)                                                             \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                 \
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." BTYPE " " STRATA_WGMMA_D64  \
               ", %64, %65, p, 1, 1;\n}"                                                       \
               : STRATA_WGMMA_D64_OPERANDS                                                    \
               : "l"(a), "l"(b), "r"(accumulate ? 1 : 0))
  if constexpr (kB == DType::kF8E4M3) {
    STRATA_WGMMA_FP8_SS("e4m3");
  } else {
    STRATA_WGMMA_FP8_SS("e5m2");
  }
#undef STRATA_WGMMA_FP8_SS
}

// D (64 x 128 int32) = A B^T (+ D when accumulate): A (64 x 32, K-major) and B (128 x 32,
// K-major) int8, both from shared memory through descriptors. One 32-wide k-step; the sums are
// exact.
__device__ __forceinline__ void wgmma_s8_ss(int32_t (&d)[16][4], uint64_t a, uint64_t b,
                                            bool accumulate) {
#define STRATA_WGMMA_I4(j) "+r"(d[j][0]), "+r"(d[j][1]), "+r"(d[j][2]), "+r"(d[j][3])
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " STRATA_WGMMA_D64
               ", %64, %65, p;\n}"
               : STRATA_WGMMA_I4(0), STRATA_WGMMA_I4(1), STRATA_WGMMA_I4(2), STRATA_WGMMA_I4(3),
                 STRATA_WGMMA_I4(4), STRATA_WGMMA_I4(5), STRATA_WGMMA_I4(6), STRATA_WGMMA_I4(7),
                 STRATA_WGMMA_I4(8), STRATA_WGMMA_I4(9), STRATA_WGMMA_I4(10), STRATA_WGMMA_I4(11),
                 STRATA_WGMMA_I4(12), STRATA_WGMMA_I4(13), STRATA_WGMMA_I4(14), STRATA_WGMMA_I4(15)
               : "l"(a), "l"(b), "r"(accumulate ? 1 : 0));
#undef STRATA_WGMMA_I4
}

__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[8][4], const uint32_t (&a)[4],
                                                     uint64_t b, bool accumulate) {
  wgmma_fp8<DType::kF8E4M3, 64>(d, a, b, accumulate);
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

// 16-bit products (bf16 or f16 in, fp32 out), one 16-wide k-step, D (64 x kN; this thread's
// kN / 2 as d[n-tile][4]) = A B (+ D when accumulate).
//
// wgmma_16_ss: A (64 x 16, K-major) and B (kN x 16, K-major) both from shared memory through
// descriptors (core matrices as above).
// wgmma_16_rs_mn: A in registers (this warp's 16 rows in mma.sync m16n8k16's A layout: a0 =
// A[g][2t, +1], a1 = A[g + 8][2t, +1], a2 = A[g][8 + 2t, +1], a3 = A[g + 8][8 + 2t, +1]) and B
// (16 x kN) MN-major: each core matrix is 8 k-rows of 16 bytes (8 consecutive n), the
// descriptor's leading byte offset the distance between core matrices adjacent in K, its stride
// byte offset between those adjacent in N. A row-major V tile ([key][channel]) read as B of
// P V is this layout without a transposition.
template <DType kT, int kN>
__device__ __forceinline__ void wgmma_16_ss(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                            bool accumulate) {
  static_assert(kT == DType::kBF16 || kT == DType::kF16);
  static_assert(kN == 64 || kN == 128);
#define STRATA_WGMMA16_SS(SHAPE, TYPE, DREGS, AB, PRED, DOPS)                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " PRED ", 0;\n"                            \
               "wgmma.mma_async.sync.aligned." SHAPE TYPE DREGS ", " AB ", p, 1, 1, 0, 0;\n}"  \
               : DOPS                                                                         \
               : "l"(a), "l"(b), "r"(accumulate ? 1 : 0))
  if constexpr (kN == 64 && kT == DType::kBF16) {
    STRATA_WGMMA16_SS("m64n64k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D32, "%32, %33", "%34",
                      STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kN == 64) {
    STRATA_WGMMA16_SS("m64n64k16", ".f32.f16.f16 ", STRATA_WGMMA_D32, "%32, %33", "%34",
                      STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kT == DType::kBF16) {
    STRATA_WGMMA16_SS("m64n128k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D64, "%64, %65", "%66",
                      STRATA_WGMMA_D64_OPERANDS);
  } else {
    STRATA_WGMMA16_SS("m64n128k16", ".f32.f16.f16 ", STRATA_WGMMA_D64, "%64, %65", "%66",
                      STRATA_WGMMA_D64_OPERANDS);
  }
#undef STRATA_WGMMA16_SS
}

// wgmma_16_ss_first: D = A B, the first k-step of a product whose D registers hold something
// else (the last tile's P). D's operands are write-only, so the compiler neither keeps their old
// values alive nor zero-fills them for an accumulation the scale-d predicate (false) turns off.
template <DType kT, int kN>
__device__ __forceinline__ void wgmma_16_ss_first(float (&d)[kN / 8][4], uint64_t a, uint64_t b) {
  static_assert(kT == DType::kBF16 || kT == DType::kF16);
  static_assert(kN == 64 || kN == 128);
#define STRATA_WGMMA_W4(j) "=f"(d[j][0]), "=f"(d[j][1]), "=f"(d[j][2]), "=f"(d[j][3])
#define STRATA_WGMMA_W32_OPERANDS                                                 \
  STRATA_WGMMA_W4(0), STRATA_WGMMA_W4(1), STRATA_WGMMA_W4(2), STRATA_WGMMA_W4(3), \
      STRATA_WGMMA_W4(4), STRATA_WGMMA_W4(5), STRATA_WGMMA_W4(6), STRATA_WGMMA_W4(7)
#define STRATA_WGMMA_W64_OPERANDS                                                         \
  STRATA_WGMMA_W32_OPERANDS, STRATA_WGMMA_W4(8), STRATA_WGMMA_W4(9), STRATA_WGMMA_W4(10), \
      STRATA_WGMMA_W4(11), STRATA_WGMMA_W4(12), STRATA_WGMMA_W4(13), STRATA_WGMMA_W4(14), \
      STRATA_WGMMA_W4(15)
#define STRATA_WGMMA16_SS_FIRST(SHAPE, TYPE, DREGS, AB, PRED, DOPS)                           \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " PRED                                     \
               ", 0;\n"                                                                       \
               "wgmma.mma_async.sync.aligned." SHAPE TYPE DREGS ", " AB ", p, 1, 1, 0, 0;\n}" \
               : DOPS                                                                         \
               : "l"(a), "l"(b), "r"(0))
  if constexpr (kN == 64 && kT == DType::kBF16) {
    STRATA_WGMMA16_SS_FIRST("m64n64k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D32, "%32, %33", "%34",
                            STRATA_WGMMA_W32_OPERANDS);
  } else if constexpr (kN == 64) {
    STRATA_WGMMA16_SS_FIRST("m64n64k16", ".f32.f16.f16 ", STRATA_WGMMA_D32, "%32, %33", "%34",
                            STRATA_WGMMA_W32_OPERANDS);
  } else if constexpr (kT == DType::kBF16) {
    STRATA_WGMMA16_SS_FIRST("m64n128k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D64, "%64, %65", "%66",
                            STRATA_WGMMA_W64_OPERANDS);
  } else {
    STRATA_WGMMA16_SS_FIRST("m64n128k16", ".f32.f16.f16 ", STRATA_WGMMA_D64, "%64, %65", "%66",
                            STRATA_WGMMA_W64_OPERANDS);
  }
#undef STRATA_WGMMA16_SS_FIRST
#undef STRATA_WGMMA_W64_OPERANDS
#undef STRATA_WGMMA_W32_OPERANDS
#undef STRATA_WGMMA_W4
}

template <DType kT, int kN>
__device__ __forceinline__ void wgmma_16_rs_mn(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                               uint64_t b, bool accumulate) {
  static_assert(kT == DType::kBF16 || kT == DType::kF16);
  static_assert(kN == 64 || kN == 128);
#define STRATA_WGMMA16_RS(SHAPE, TYPE, DREGS, AB, PRED, DOPS)                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " PRED ", 0;\n"                            \
               "wgmma.mma_async.sync.aligned." SHAPE TYPE DREGS ", " AB ", p, 1, 1, 1;\n}"     \
               : DOPS                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0))
  if constexpr (kN == 64 && kT == DType::kBF16) {
    STRATA_WGMMA16_RS("m64n64k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D32,
                      "{%32, %33, %34, %35}, %36", "%37", STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kN == 64) {
    STRATA_WGMMA16_RS("m64n64k16", ".f32.f16.f16 ", STRATA_WGMMA_D32,
                      "{%32, %33, %34, %35}, %36", "%37", STRATA_WGMMA_D32_OPERANDS);
  } else if constexpr (kT == DType::kBF16) {
    STRATA_WGMMA16_RS("m64n128k16", ".f32.bf16.bf16 ", STRATA_WGMMA_D64,
                      "{%64, %65, %66, %67}, %68", "%69", STRATA_WGMMA_D64_OPERANDS);
  } else {
    STRATA_WGMMA16_RS("m64n128k16", ".f32.f16.f16 ", STRATA_WGMMA_D64,
                      "{%64, %65, %66, %67}, %68", "%69", STRATA_WGMMA_D64_OPERANDS);
  }
#undef STRATA_WGMMA16_RS
}

#undef STRATA_WGMMA_D32
#undef STRATA_WGMMA_D64
#undef STRATA_WGMMA_D4
#undef STRATA_WGMMA_D32_OPERANDS
#undef STRATA_WGMMA_D64_OPERANDS

}  // namespace strata::cuda::detail
