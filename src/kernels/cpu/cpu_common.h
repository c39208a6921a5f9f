#pragma once
// Shared pieces of the CPU kernels (src/kernels/cpu). Public: kCpuFloatDTypes, the element types
// every CPU kernel reads for weights and KV (tests iterate over it). Everything in detail:: is an
// implementation helper for the kernel sources and their tests, not an API for other layers.
//
// Determinism contract of the helpers: each output is produced by one fixed sequence of fp32
// operations that depends only on the input values and lengths -- never on the thread count, on the
// tile a row lands in, or on the row's position in a batch. The kernel library is compiled with
// -ffp-contract=off so that no code path (a 2x2 tile, a 1x1 remainder) fuses a multiply-add that
// another path leaves unfused.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace strata::cpu {

// Weight and KV element types the CPU kernels read (converted to fp32 on read).
inline constexpr std::array<DType, 3> kCpuFloatDTypes = {DType::kF32, DType::kBF16, DType::kF16};

constexpr bool is_cpu_float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

namespace detail {

// Independent partial sums per dot product: enough for the compiler to vectorize the k loop
// without reassociation (no -ffast-math), and a pairwise-ish error bound.
inline constexpr int kLanes = 8;

// dst[i] = element (offset + i) of src as fp32, for i in [0, n). dtype must satisfy
// is_cpu_float_dtype (callers validate first and return Status::Unsupported otherwise).
inline void load_f32(const void* src, DType dtype, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(src) + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(p[i]);
      return;
    }
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
      break;
  }
  STRATA_CHECK(false, "load_f32: dtype is not F32, BF16 or F16 (validate before calling)");
}

// Four fp32 lanes (GCC/Clang vector extension; one SSE register on x86-64). Arithmetic on it is
// IEEE per lane, exactly like the scalar code it replaces; it only fixes which axis is vectorized.
using F32x4 = float __attribute__((vector_size(16)));

inline F32x4 load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Sum of kLanes lanes in one fixed tree: (l, l+4), then (l, l+2), then (0, 1).
inline float reduce_lanes(const float* acc) {
  const float s0 = acc[0] + acc[4];
  const float s1 = acc[1] + acc[5];
  const float s2 = acc[2] + acc[6];
  const float s3 = acc[3] + acc[7];
  return (s0 + s2) + (s1 + s3);
}

// out[r * ldo + c] = dot(x[r][0..k), w[c][0..k)) for an R x C tile. Every output uses the same
// order whatever R and C are: lane l in [0, 8) accumulates elements l, l + 8, l + 16, ... (lanes
// 0..3 in `lo`, 4..7 in `hi`), the k % 8 tail elements go to lanes 0.., then reduce_lanes. So a
// row's result is bit-identical in any tile, alone or in a batch.
template <int R, int C>
inline void dot_tile(const float* const* x, const float* const* w, int64_t k, float* out,
                     int64_t ldo) {
  static_assert(kLanes == 8, "dot_tile keeps lanes in two F32x4 halves");
  F32x4 lo[R][C] = {};
  F32x4 hi[R][C] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    F32x4 x_lo[R];
    F32x4 x_hi[R];
    for (int r = 0; r < R; ++r) {
      x_lo[r] = load4(x[r] + i);
      x_hi[r] = load4(x[r] + i + 4);
    }
    for (int c = 0; c < C; ++c) {
      const F32x4 w_lo = load4(w[c] + i);
      const F32x4 w_hi = load4(w[c] + i + 4);
      for (int r = 0; r < R; ++r) {
        lo[r][c] += x_lo[r] * w_lo;
        hi[r][c] += x_hi[r] * w_hi;
      }
    }
  }
  const int64_t tail = k - i;
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float acc[kLanes];
      std::memcpy(acc, &lo[r][c], sizeof(F32x4));
      std::memcpy(acc + 4, &hi[r][c], sizeof(F32x4));
      for (int64_t l = 0; l < tail; ++l) acc[l] += x[r][i + l] * w[c][i + l];
      out[r * ldo + c] = reduce_lanes(acc);
    }
  }
}

inline float dot(const float* a, const float* b, int64_t k) {
  float out;
  dot_tile<1, 1>(&a, &b, k, &out, 1);
  return out;
}

template <int R, int C>
inline void matmul_nt_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k,
                           float* out, int64_t ldo) {
  const float* x_rows[R];
  const float* w_rows[C];
  for (int r = 0; r < R; ++r) x_rows[r] = x + r * ldx;
  for (int c = 0; c < C; ++c) w_rows[c] = w + c * ldw;
  dot_tile<R, C>(x_rows, w_rows, k, out, ldo);
}

// out[r * ldo + c] = dot(x row r, w row c) for r < m, c < n: a small x W^T block. Rows of x are
// ldx apart, rows of w ldw apart, each k long. 2x2 tiles load each x and w value once per two
// outputs; remainders use narrower tiles with the same per-output arithmetic (see dot_tile).
inline void matmul_nt(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                      int64_t n, int64_t k, float* out, int64_t ldo) {
  int64_t r = 0;
  for (; r + 2 <= m; r += 2) {
    int64_t c = 0;
    for (; c + 2 <= n; c += 2) {
      matmul_nt_tile<2, 2>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      matmul_nt_tile<2, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
  }
  for (; r < m; ++r) {
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
      matmul_nt_tile<1, 4>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      matmul_nt_tile<1, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
  }
}

// Calls fn(begin, end) on consecutive ranges of `grain` items taken from a shared counter, so
// items of uneven cost (attention rows late in a prompt) balance across the pool's threads. Which
// thread runs an item never changes its result: items write disjoint outputs.
template <typename Fn>
void parallel_dynamic(ThreadPool& pool, int64_t num_items, int64_t grain, const Fn& fn) {
  if (num_items <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t num_grains = (num_items + grain - 1) / grain;
  const int64_t participants = std::min<int64_t>(pool.num_threads(), num_grains);
  std::atomic<int64_t> next{0};
  pool.parallel_for(participants, [&](int64_t, int64_t) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= num_items) return;
      fn(begin, std::min(num_items, begin + grain));
    }
  });
}

}  // namespace detail
}  // namespace strata::cpu
