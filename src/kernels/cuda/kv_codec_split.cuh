#pragma once
// Device side of the split KV codec (kv_codec_split.h), shared by its encoder and decoder: the
// stream's layout, how a 16-bit element splits, 16-byte loads and stores at any alignment, and a
// team's scan. A team is one thread block of kThreads threads working on one chunk (4096
// elements), 32 consecutive elements a thread. Internal (.cuh).
//
// Codes, raw bytes and escapes sit at any byte offset of a stream (a segment starts where the
// previous one's escapes end), so:
//   reads   load16 takes the two aligned 16-byte vectors around an address and funnel-shifts
//           them together; near the end of a buffer it reads byte by byte, never past it;
//   writes  a team lays its bytes out in shared memory and store_region writes them as aligned
//           16-byte vectors, byte by byte only at the region's two ends, where the neighbouring
//           bytes belong to another team.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kv_codec_split.h"

namespace strata::cuda::split {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kGroup = 32;  // elements a thread
static_assert(kThreads * kGroup == kKvSplitChunk);
inline constexpr uint32_t kEscape = 15;
inline constexpr int64_t kSplitHeaderBytes = 8;     // format, 0[3], segment bytes u32
inline constexpr int64_t kSegmentHeaderBytes = 20;  // escapes u32, codebook size, symbols[15]

// Shared memory that holds a region of up to kKvSplitChunk bytes for store_region.
inline constexpr int kNatBytes = 16 + static_cast<int>(kKvSplitChunk) + 32;

// A segment of n elements: header, codes, raw bytes and chunk index, escapes not counted.
__host__ __device__ constexpr int64_t segment_fixed_bytes(int64_t n) {
  return kSegmentHeaderBytes + (n + 1) / 2 + n + 4 * ((n + kKvSplitChunk - 1) / kKvSplitChunk);
}

template <KvSplitFormat F>
__device__ __forceinline__ uint32_t symbol_of(uint32_t x) {
  if constexpr (F == KvSplitFormat::kBf16) return (x >> 7) & 0xff;
  return x >> 8;
}
template <KvSplitFormat F>
__device__ __forceinline__ uint32_t raw_of(uint32_t x) {
  if constexpr (F == KvSplitFormat::kBf16) return ((x >> 8) & 0x80) | (x & 0x7f);
  return x & 0xff;
}
template <KvSplitFormat F>
__device__ __forceinline__ uint32_t element_of(uint32_t symbol, uint32_t raw) {
  if constexpr (F == KvSplitFormat::kBf16)
    return ((raw & 0x80) << 8) | (symbol << 7) | (raw & 0x7f);
  return (symbol << 8) | raw;
}

// Little-endian integers at any alignment.
__device__ __forceinline__ uint32_t read_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
__device__ __forceinline__ uint64_t read_u64(const uint8_t* p) {
  return uint64_t{read_u32(p)} | uint64_t{read_u32(p + 4)} << 32;
}
__device__ __forceinline__ void write_u32(uint8_t* p, uint32_t v) {
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
__device__ __forceinline__ void write_u64(uint8_t* p, uint64_t v) {
  write_u32(p, static_cast<uint32_t>(v));
  write_u32(p + 4, static_cast<uint32_t>(v >> 32));
}

// Bytes [o, o + 16) of the 32 bytes lo, hi; o in 0..16.
__device__ __forceinline__ uint4 extract16(const uint4& lo, const uint4& hi, uint32_t o) {
  if (o == 0) return lo;
  if (o == 16) return hi;
  const uint32_t c[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const uint32_t q = o >> 2;  // 0..3
  uint32_t w[5];
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    w[k] = q == 0 ? c[k] : q == 1 ? c[k + 1] : q == 2 ? c[k + 2] : c[k + 3];
  }
  const uint32_t shift = (o & 3) * 8;
  return make_uint4(__funnelshift_r(w[0], w[1], shift), __funnelshift_r(w[1], w[2], shift),
                    __funnelshift_r(w[2], w[3], shift), __funnelshift_r(w[3], w[4], shift));
}

// The 16 bytes at p, those outside [lo, hi) read as 0 and never touched. lo, hi: the readable
// bytes around p (a stream, a block).
__device__ __forceinline__ uint4 load16(const uint8_t* p, const uint8_t* lo, const uint8_t* hi) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const uint32_t r = static_cast<uint32_t>(at & 15);
  const uintptr_t a = at - r;
  if (a >= reinterpret_cast<uintptr_t>(lo) &&
      a + (r == 0 ? 16 : 32) <= reinterpret_cast<uintptr_t>(hi)) {
    const uint4 v0 = __ldg(reinterpret_cast<const uint4*>(a));
    if (r == 0) return v0;
    return extract16(v0, __ldg(reinterpret_cast<const uint4*>(a + 16)), r);
  }
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (p + i >= lo && p + i < hi) w[i / 4] |= uint32_t{p[i]} << (8 * (i % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Writes region bytes [0, len) to dst, any alignment, from nat (shared, 16-byte aligned): nat[i]
// holds region byte i, and the 16 bytes before nat and the 32 after nat + len are readable
// (their values unused). The whole team calls it; it reads nat only.
__device__ __forceinline__ void store_region(uint8_t* dst, int64_t len, const uint8_t* nat) {
  const auto at = reinterpret_cast<uintptr_t>(dst);
  const int64_t r = static_cast<int64_t>(at & 15);
  uint8_t* const aligned = dst - r;
  const int64_t num_vecs = (r + len + 15) / 16;
  const uint4* vec = reinterpret_cast<const uint4*>(nat);
  for (int64_t v = threadIdx.x; v < num_vecs; v += kThreads) {
    // Aligned vector v holds region bytes [16 v - r, 16 v - r + 16): the tail of nat vector v - 1
    // and the head of vector v.
    const uint4 out = extract16(vec[v - 1], vec[v], static_cast<uint32_t>(16 - r));
    uint8_t* p = aligned + 16 * v;
    const int64_t first = 16 * v - r;  // region index of p[0]
    if (first >= 0 && first + 16 <= len) {
      *reinterpret_cast<uint4*>(p) = out;
    } else {
      const uint32_t w[4] = {out.x, out.y, out.z, out.w};
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        if (first + i >= 0 && first + i < len)
          p[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
      }
    }
  }
}

// Exclusive prefix of v over the team's threads and (in *total) their sum. Every thread of the
// team calls it; scratch: kWarps words of shared memory, free again on return.
__device__ __forceinline__ uint32_t team_scan(uint32_t v, uint32_t* total, uint32_t* scratch) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  uint32_t x = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  uint32_t before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const uint32_t s = scratch[w];
    if (w < warp) before += s;
    sum += s;
  }
  __syncthreads();
  *total = sum;
  return before + x - v;
}

// Copies len bytes from src to dst (any alignments) through nat: kNatBytes of shared memory,
// 16-byte aligned. The whole team calls it.
__device__ __forceinline__ void copy_region(uint8_t* dst, const uint8_t* src, int64_t len,
                                            uint8_t* nat) {
  constexpr int64_t kStep = kKvSplitChunk;  // 32 bytes a thread
  for (int64_t off = 0; off < len; off += kStep) {
    const int64_t n = len - off < kStep ? len - off : kStep;
    const uint8_t* from = src + off + 32 * threadIdx.x;
    uint4* to = reinterpret_cast<uint4*>(nat + 16 + 32 * threadIdx.x);
    to[0] = load16(from, src + off, src + off + n);
    to[1] = load16(from + 16, src + off, src + off + n);
    __syncthreads();
    store_region(dst + off, n, nat + 16);
    __syncthreads();
  }
}

}  // namespace strata::cuda::split
