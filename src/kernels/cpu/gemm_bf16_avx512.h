#pragma once
// The AVX-512 BF16 micro-kernel behind cpu::linear at LinearPrecision::kBf16: x W^T with BF16
// weights and activations rounded to BF16, on the dot-product instruction vdpbf16ps (32
// multiply-adds of BF16 pairs into 16 fp32 lanes). Only call it when cpu_supports_avx512_bf16().
//
// Arithmetic: each output has ONE 16-lane fp32 accumulator; step s (32 elements of k) adds
// x[32s + 2l] * w[32s + 2l] + x[32s + 2l + 1] * w[32s + 2l + 1] into lane l with one vdpbf16ps
// (its own fixed rounding); the k % 32 tail is a step over zero-padded x and masked w (zeros add
// nothing). The 16 lanes are then summed in the fixed tree of linear_avx512.h, then + bias. A
// register tile (up to 4 rows x 6 columns) only decides which registers hold which outputs: an
// output's bits depend on its x row and weight row alone, never on m, the row's place in the
// batch, the tile or the thread count -- so a request's results are the same alone or batched,
// provided every row count of a BF16 weight takes this kernel (linear.cc).

#include <cstdint>

namespace strata::cpu::detail {

// Columns of W one register tile covers (linear.cc splits work in groups of this many rows of W).
inline constexpr int64_t kBf16TileCols = 6;
// Rows of x one register tile covers: the height of the packed row tiles below.
inline constexpr int64_t kBf16TileRows = 4;

// Rounds fp32 rows to BF16 (round to nearest even, as vcvtneps2bf16): out row r = x row r, zero
// padded from k to ldo (a multiple of 32, >= k). x: [m, k] fp32, rows ldx apart; out: [m, ldo].
// The layout gemv_bf16_avx512 reads.
void round_rows_to_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out,
                        int64_t ldo);

// The same rounding (the same bits) into the packed layout matmul_nt_bf16_avx512 reads, for rows
// [r0, r1) of x (x points at row 0, rows ldx apart). Rows go in tiles of kBf16TileRows; within a
// tile, each 32-element step of k holds the tile's rows one after another, so a register tile
// reads one contiguous run instead of four rows ldo apart:
//
//   tile t, at out + t * 4 * ldo:
//   [ row 4t: k 0..31 | 4t+1: k 0..31 | 4t+2: .. | 4t+3: .. ][ row 4t: k 32..63 | 4t+1: .. ] ...
//
// ldo = round_up(k, 32); out holds round_up(m, 4) * ldo elements; elements past k are zero. Rows
// write disjoint elements, so callers may pack row ranges in parallel; slots of rows past m are
// never read.
void pack_rows_to_bf16(const float* x, int64_t ldx, int64_t r0, int64_t r1, int64_t k,
                       uint16_t* out, int64_t ldo);

// out[c] = dot(x, w row c) (+ bias[c]) for c < n: a decode step's single row (m = 1), each weight
// row read start to end with a software prefetch ahead (a thread's weights are one sequential run).
// x: [round_up(k, 32)] BF16 (round_rows_to_bf16), zero past k; w: [n, k] BF16; bias: [n] fp32 or
// nullptr; out: [n] fp32. Bit-identical to matmul_nt_bf16_avx512's result for the same row.
void gemv_bf16_avx512(const uint16_t* x, const uint16_t* w, int64_t n, int64_t k, const float* bias,
                      float* out);

// out[r * ldo + c] = dot(x row r, w row c) (+ bias[c] when bias != nullptr) for r < m, c < n.
// x:    rows 0..m-1 of a pack_rows_to_bf16 buffer, starting at a row tile (x = buffer + r * ldx
//       with r a multiple of kBf16TileRows), ldx = round_up(k, 32).
// w:    [n, k] BF16, rows k elements apart.
// bias: [n] fp32 or nullptr.
// out:  [m, n] fp32, rows ldo apart; must not overlap the inputs.
void matmul_nt_bf16_avx512(const uint16_t* x, int64_t ldx, int64_t m, const uint16_t* w, int64_t n,
                           int64_t k, const float* bias, float* out, int64_t ldo);

}  // namespace strata::cpu::detail
