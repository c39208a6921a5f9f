#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_avx2.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/elementwise_avx512.h"
#include "kernels/cpu/linear_avx512.h"

namespace strata::cpu {
namespace {

// Per-thread buffers reused across calls; sized for the largest tile seen so far. A tile's rows
// are its tokens x the group's query heads, token-major: row r = i * group + h.
struct Scratch {
  std::vector<float> q;       // [rows, head_dim]: the tile's query rows, packed
  std::vector<float> scores;  // [rows, n]: scores, then softmax numerators (n: the tile's keys)
  std::vector<float> acc;     // [rows, head_dim]: sum over blocks of the block partials
  std::vector<float> tile;    // [block_size, head_dim]: one block's K or V rows as fp32
  std::vector<float> keys_t;  // AVX2: [head_dim, block_size rounded up to 8]: the block's K^T
  std::vector<float> max;     // [rows]
  std::vector<float> sum;     // [rows]
  std::vector<const float*> weight_rows;  // [rows]: p.v operands
  std::vector<float*> acc_rows;           // [rows]
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// One unit of work: `tokens` consecutive query tokens of one sequence and one KV head, i.e. the
// tokens x group query rows sharing that KV head. Token i sits at position pos0 + i and attends
// to [first(i), pos(i)]; both ends grow with i, so the tile's keys are [first(0), pos(tokens - 1)]
// and the rows reading any one block are a contiguous run of tokens.
struct TileTask {
  int32_t seq_idx;
  int32_t kv_head;
  int32_t token;   // the first token's q row
  int32_t tokens;  // 1 .. the tile size
  int32_t pos0;    // the first token's position
  int32_t window;  // AttentionParams::sliding_window
  // The instruction-set path: fused multiply-adds and a polynomial exp (AVX-512, AVX2), or the
  // portable path's separate multiply and add and std::exp. One fixed order per output element
  // on each; paged_attention uses best_cpu_isa() for every task of the process.
  CpuIsa isa;
  bool avx512() const { return isa == CpuIsa::kAvx512; }
  int32_t pos(int32_t i) const { return pos0 + i; }
  int32_t first(int32_t i) const { return window > 0 ? std::max(0, pos(i) - window + 1) : 0; }
  int32_t num_keys() const { return pos(tokens - 1) - first(0) + 1; }
};

// The tokens [lo, hi] of a tile that attend to some key of logical block b, and the keys of b
// any of them attends to, [key_first, key_last].
struct BlockRows {
  int32_t lo, hi, key_first, key_last;
};

BlockRows block_rows_of(const TileTask& t, int32_t b, int32_t bs) {
  const int32_t begin = b * bs, end = b * bs + bs - 1;
  BlockRows r;
  r.lo = std::max(0, begin - t.pos0);
  r.hi = t.window > 0 ? std::min(t.tokens - 1, end - t.pos0 + t.window - 1) : t.tokens - 1;
  r.key_first = std::max(begin, t.first(r.lo));
  r.key_last = std::min(end, t.pos(r.hi));
  return r;
}

// The dtype and, for quantized caches, the scales the view must carry.
Status validate_kv_encoding(const PagedKvCacheView& cache, const char* who) {
  if (!is_attention_kv_dtype(cache.dtype)) {
    return Status::Unsupported(std::string(who) + ": KV cache dtype " +
                               std::string(dtype_name(cache.dtype)) +
                               " (supported: F32, BF16, F16, F8_E4M3, F8_E5M2, I8, I4)");
  }
  if (cache.dtype == DType::kF8E4M3 || cache.dtype == DType::kF8E5M2) {
    const auto ok = [](float s) { return std::isfinite(s) && s > 0.0f; };
    if (!ok(cache.k_scale) || !ok(cache.v_scale)) {
      return Status::InvalidArgument(std::string(who) +
                                     ": fp8 k_scale and v_scale must be finite and positive");
    }
  }
  if (cache.dtype == DType::kI8 &&
      (cache.k_scale_data == nullptr || cache.v_scale_data == nullptr ||
       cache.scale_head_stride < cache.block_size || cache.scale_block_stride < 0)) {
    return Status::InvalidArgument(std::string(who) + ": int8 cache without its scale areas");
  }
  if (cache.dtype == DType::kI4 &&
      (cache.head_dim % 2 != 0 || cache.k_scale_data == nullptr || cache.v_scale_data == nullptr ||
       cache.k_zero_data == nullptr || cache.v_zero_data == nullptr ||
       cache.scale_head_stride < cache.block_size || cache.k_stat_head_stride < cache.head_dim ||
       cache.scale_block_stride < 0)) {
    return Status::InvalidArgument(std::string(who) +
                                   ": int4 cache without an even head_dim or its statistics");
  }
  return Status::Ok();
}

// Bytes (I4) or elements of one token's row: the least token_stride a view can have.
int64_t row_extent(const PagedKvCacheView& cache) {
  return cache.dtype == DType::kI4 ? cache.head_dim / 2 : cache.head_dim;
}

// An I4 cache's newest-blocks view: F32, the cache's shape.
Status validate_newest_view(const PagedKvCacheView& newest, const PagedKvCacheView& cache,
                            const char* who) {
  if (newest.dtype != DType::kF32 || newest.k_data == nullptr || newest.v_data == nullptr ||
      newest.num_kv_heads != cache.num_kv_heads || newest.head_dim != cache.head_dim ||
      newest.block_size != cache.block_size || newest.token_stride < newest.head_dim ||
      newest.head_stride < 0 || newest.block_stride < 0) {
    return Status::InvalidArgument(
        std::string(who) + ": an int4 cache needs an F32 view of its newest blocks, of its shape");
  }
  return Status::Ok();
}

Status validate_shapes(const AttentionParams& p) {
  const PagedKvLayout& layout = p.layout;
  const PagedKvCacheView& cache = p.cache;
  if (p.q_indptr == nullptr || layout.kv_indptr == nullptr) {
    return Status::InvalidArgument("attention: q_indptr and kv_indptr must not be null");
  }
  if (layout.num_seqs < 0) return Status::InvalidArgument("attention: negative num_seqs");
  if (cache.k_data == nullptr || cache.v_data == nullptr) {
    return Status::InvalidArgument("attention: cache k_data and v_data must not be null");
  }
  if (cache.num_kv_heads <= 0 || cache.head_dim <= 0) {
    return Status::InvalidArgument("attention: num_kv_heads and head_dim must be positive");
  }
  if (p.num_q_heads <= 0 || p.num_q_heads % cache.num_kv_heads != 0) {
    return Status::InvalidArgument("attention: num_q_heads (" + std::to_string(p.num_q_heads) +
                                   ") must be a positive multiple of num_kv_heads (" +
                                   std::to_string(cache.num_kv_heads) + ")");
  }
  if (layout.block_size <= 0 || layout.block_size != cache.block_size) {
    return Status::InvalidArgument(
        "attention: layout and cache block sizes differ or are not positive");
  }
  if (cache.token_stride < row_extent(cache) || cache.head_stride < 0 || cache.block_stride < 0) {
    return Status::InvalidArgument("attention: bad cache strides");
  }
  if (p.sliding_window < 0) return Status::InvalidArgument("attention: negative sliding_window");
  STRATA_RETURN_IF_ERROR(validate_kv_encoding(cache, "attention"));
  if (cache.dtype != DType::kI4) return Status::Ok();
  STRATA_RETURN_IF_ERROR(validate_newest_view(p.newest.cache, cache, "attention"));
  const PagedKvLayout& newest = p.newest.layout;
  if (newest.kv_indptr == nullptr || newest.kv_indices == nullptr ||
      newest.first_block == nullptr || newest.num_seqs != layout.num_seqs ||
      newest.block_size != layout.block_size || p.newest.blocks < 1) {
    return Status::InvalidArgument(
        "attention: an int4 cache needs its newest-blocks layout (first_block set, the batch's "
        "sequences and block size) and R >= 1");
  }
  return Status::Ok();
}

// I4: sequence s's newest-blocks entries cover every block its query rows read at full
// precision (from the first row's window block p0 / B - R + 1 on) through its last block.
Status validate_newest_entries(const AttentionParams& p, int32_t s, int32_t q_len) {
  const PagedKvLayout& layout = p.layout;
  const PagedKvLayout& newest = p.newest.layout;
  const std::string where = "attention: sequence " + std::to_string(s) + ": ";
  const int32_t first = newest.first(s);
  const int32_t first_pos = layout.kv_len(s) - q_len;
  const int32_t needed = std::max(0, first_pos / layout.block_size - p.newest.blocks + 1);
  if (first < 0 || first > needed) {
    return Status::InvalidArgument(where + "newest blocks from " + std::to_string(first) +
                                   " do not cover the full-precision window from block " +
                                   std::to_string(needed));
  }
  if (newest.num_blocks(s) != layout.num_blocks(s) - first) {
    return Status::InvalidArgument(where +
                                   "newest-blocks entries must run from its first block through "
                                   "the last block");
  }
  for (int32_t i = newest.kv_indptr[s]; i < newest.kv_indptr[s + 1]; ++i) {
    if (newest.kv_indices[i] < 0) {
      return Status::InvalidArgument(where + "negative newest-blocks block id");
    }
  }
  return Status::Ok();
}

Status validate_sequence(const AttentionParams& p, int32_t s) {
  const PagedKvLayout& layout = p.layout;
  const std::string where = "attention: sequence " + std::to_string(s) + ": ";
  const int32_t q_len = p.q_indptr[s + 1] - p.q_indptr[s];
  if (q_len < 0) return Status::InvalidArgument(where + "q_indptr decreases");
  const int32_t num_blocks = layout.num_blocks(s);
  if (num_blocks < 0) return Status::InvalidArgument(where + "kv_indptr decreases");
  if (num_blocks > 0) {
    if (layout.kv_indices == nullptr || layout.kv_last_page_len == nullptr) {
      return Status::InvalidArgument(where + "kv_indices and kv_last_page_len must not be null");
    }
    const int32_t last = layout.kv_last_page_len[s];
    if (last < 1 || last > layout.block_size) {
      return Status::InvalidArgument(where + "kv_last_page_len " + std::to_string(last) +
                                     " outside 1..block_size");
    }
    for (int32_t i = layout.kv_indptr[s]; i < layout.kv_indptr[s + 1]; ++i) {
      if (layout.kv_indices[i] < 0) return Status::InvalidArgument(where + "negative block id");
    }
  }
  const int32_t kv_len = layout.kv_len(s);
  if (q_len > kv_len) {
    return Status::InvalidArgument(where + "q_len " + std::to_string(q_len) + " > kv_len " +
                                   std::to_string(kv_len));
  }
  if (p.cache.dtype == DType::kI4 && q_len > 0) return validate_newest_entries(p, s, q_len);
  return Status::Ok();
}

Status validate(const AttentionParams& p) {
  STRATA_RETURN_IF_ERROR(validate_shapes(p));
  if (p.q_indptr[0] != 0) return Status::InvalidArgument("attention: q_indptr[0] must be 0");
  for (int32_t s = 0; s < p.layout.num_seqs; ++s) STRATA_RETURN_IF_ERROR(validate_sequence(p, s));
  if (p.q_indptr[p.layout.num_seqs] > 0 && (p.q == nullptr || p.out == nullptr)) {
    return Status::InvalidArgument("attention: q and out must not be null");
  }
  if ((p.mass == nullptr) != (p.mass_offsets == nullptr)) {
    return Status::InvalidArgument("attention: mass and mass_offsets are both set or both null");
  }
  return Status::Ok();
}

// Rows [token, token + count) of one block and KV head as fp32; *ld receives the row stride.
// F32 caches are read in place, every other dtype is decoded into the scratch tile.
const float* block_rows(const PagedKvCacheView& cache, KvPart part, int32_t block_id,
                        int32_t kv_head, int32_t token, int32_t count, bool avx512,
                        std::vector<float>& tile, int64_t* ld) {
  if (cache.dtype == DType::kF32) {
    *ld = cache.token_stride;
    const void* data = part == KvPart::kK ? cache.k_data : cache.v_data;
    return static_cast<const float*>(data) + cache.offset(block_id, kv_head, token);
  }
  *ld = cache.head_dim;
  load_kv_rows(cache, part, block_id, kv_head, token, count, tile.data(), avx512);
  return tile.data();
}

// Rows [token, token + count) of logical block b of the task's sequence, as block_rows. An I4
// cache's rows come from the newest-blocks group for the R blocks ending with the row's own block
// (b > pos / B - R), else from the int4 codes: a function of (pos, b) alone, which is why an I4
// tile holds one token.
const float* logical_block_rows(const AttentionParams& p, const TileTask& t, KvPart part, int32_t b,
                                int32_t token, int32_t count, std::vector<float>& tile,
                                int64_t* ld) {
  const PagedKvLayout& layout = p.layout;
  if (p.cache.dtype == DType::kI4 && b > t.pos(0) / layout.block_size - p.newest.blocks) {
    return block_rows(p.newest.cache, part, p.newest.layout.block_at(t.seq_idx, b), t.kv_head,
                      token, count, t.avx512(), tile, ld);
  }
  const int32_t block_id = layout.kv_indices[layout.kv_indptr[t.seq_idx] + b];
  return block_rows(p.cache, part, block_id, t.kv_head, token, count, t.avx512(), tile, ld);
}

// Pass 1: scores[r][j] = scale * q_r . k_(first(0) + j), block by block, for the rows whose token
// attends to some key of the block (keys of the block another row of the tile needs are computed
// too and never read). Each score is the same fp32 operations whatever the tile: no path's
// micro-kernel result depends on its row count, a row's place in it or a key's place in the block
// (AVX2 transposes the block's keys and scales in the kernel; attention_avx2.h).
void compute_scores(const AttentionParams& p, const TileTask& t, int32_t group, Scratch& s) {
  const int32_t bs = p.layout.block_size;
  const int32_t d = p.cache.head_dim;
  const int32_t n = t.num_keys();
  for (int32_t b = t.first(0) / bs; b <= t.pos(t.tokens - 1) / bs; ++b) {
    const BlockRows br = block_rows_of(t, b, bs);
    const int32_t count = br.key_last - br.key_first + 1;
    int64_t ld = 0;
    const float* k =
        logical_block_rows(p, t, KvPart::kK, b, br.key_first - b * bs, count, s.tile, &ld);
    const int64_t row0 = static_cast<int64_t>(br.lo) * group;
    const int64_t rows = static_cast<int64_t>(br.hi - br.lo + 1) * group;
    const float* q = s.q.data() + row0 * d;
    float* scores = s.scores.data() + row0 * n + (br.key_first - t.first(0));
    switch (t.isa) {
      case CpuIsa::kAvx512:
        detail::matmul_nt_f32_avx512(q, d, rows, k, ld, count, d, scores, n);
        break;
      case CpuIsa::kAvx2:
        detail::transpose_keys_avx2(k, ld, count, d, s.keys_t.data());
        detail::scores_avx2(q, d, rows, s.keys_t.data(), count, d, p.scale, scores, n);
        continue;  // scaled in the kernel
      case CpuIsa::kPortable:
        detail::matmul_nt(q, d, rows, k, ld, count, d, scores, n);
        break;
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* row = scores + r * n;
      for (int32_t j = 0; j < count; ++j) row[j] *= p.scale;
    }
  }
}

// acc[h][c .. c + 4 * V) += sum_j w[h][j] * v[j * ld + c ..] for H heads sharing each V load. The
// block partial is summed over j in order from 0 in registers, then added to acc once.
template <int H, int V>
void accumulate_chunk(const float* const* w, const float* v, int64_t ld, int32_t count, int32_t c,
                      float* const* acc) {
  using detail::F32x4;
  F32x4 part[H][V] = {};
  for (int32_t j = 0; j < count; ++j) {
    const float* vj = v + j * ld + c;
    F32x4 vv[V];
    for (int q = 0; q < V; ++q) vv[q] = detail::load4(vj + 4 * q);
    for (int h = 0; h < H; ++h) {
      const F32x4 wj = {w[h][j], w[h][j], w[h][j], w[h][j]};
      for (int q = 0; q < V; ++q) part[h][q] += wj * vv[q];
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) {
      const F32x4 sum = detail::load4(acc[h] + c + 4 * q) + part[h][q];
      std::memcpy(acc[h] + c + 4 * q, &sum, sizeof(sum));
    }
  }
}

// acc[h][c] += sum_j w[h][j] * v[j * ld + c] for c < d: 16 channels at a time, then 4, then one;
// every path does the same fp32 operations per element (partial over j from 0, then + acc).
template <int H>
void accumulate_weighted_v(const float* const* w, const float* v, int64_t ld, int32_t count,
                           int32_t d, float* const* acc) {
  int32_t c = 0;
  for (; c + 16 <= d; c += 16) accumulate_chunk<H, 4>(w, v, ld, count, c, acc);
  for (; c + 4 <= d; c += 4) accumulate_chunk<H, 1>(w, v, ld, count, c, acc);
  for (; c < d; ++c) {
    for (int h = 0; h < H; ++h) {
      float part = 0.0f;
      for (int32_t j = 0; j < count; ++j) part += w[h][j] * v[j * ld + c];
      acc[h][c] += part;
    }
  }
}

// acc rows += w rows . V for `rows` rows sharing one V range: the AVX-512 kernel, the AVX2 one or
// the portable one two rows at a time; no path's per-element operations depend on how many rows
// share a call.
void accumulate_rows(CpuIsa isa, const float* const* w, int32_t rows, const float* v, int64_t ld,
                     int32_t count, int32_t d, float* const* acc) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return detail::accumulate_pv_avx512(w, rows, v, ld, count, d, acc);
    case CpuIsa::kAvx2:
      return detail::accumulate_pv_avx2(w, rows, v, ld, count, d, acc);
    case CpuIsa::kPortable:
      break;
  }
  int32_t r = 0;
  for (; r + 2 <= rows; r += 2) accumulate_weighted_v<2>(w + r, v, ld, count, d, acc + r);
  if (r < rows) accumulate_weighted_v<1>(w + r, v, ld, count, d, acc + r);
}

// The row maxima: scores of row (i, h) over [first(i), pos(i)], the row's own keys only.
void row_maxima(const TileTask& t, int32_t group, Scratch& s) {
  const int32_t n = t.num_keys();
  for (int32_t i = 0; i < t.tokens; ++i) {
    const int32_t begin = t.first(i) - t.first(0);
    const int32_t len = t.pos(i) - t.first(i) + 1;
    for (int32_t h = 0; h < group; ++h) {
      const int64_t r = static_cast<int64_t>(i) * group + h;
      const float* scores = s.scores.data() + r * n + begin;
      switch (t.isa) {
        case CpuIsa::kAvx512:
          s.max[r] = detail::max_avx512(scores, len);
          break;
        case CpuIsa::kAvx2:
          s.max[r] = detail::max_avx2(scores, len);
          break;
        case CpuIsa::kPortable:
          s.max[r] = *std::max_element(scores, scores + len);
          break;
      }
      s.sum[r] = 0.0f;
    }
  }
}

// Row r's numerators exp(score - max) over keys [first, first + count), their sum added to sum[r].
void exp_block(const TileTask& t, int64_t r, int32_t first, int32_t count, Scratch& s) {
  float* weights = s.scores.data() + r * t.num_keys() + (first - t.first(0));
  switch (t.isa) {
    case CpuIsa::kAvx512:
      s.sum[r] += detail::exp_sub_and_sum_avx512(weights, count, s.max[r]);
      return;
    case CpuIsa::kAvx2:
      s.sum[r] += detail::exp_sub_and_sum_avx2(weights, count, s.max[r]);
      return;
    case CpuIsa::kPortable:
      break;
  }
  float block_sum = 0.0f;
  for (int32_t j = 0; j < count; ++j) {
    weights[j] = std::exp(weights[j] - s.max[r]);
    block_sum += weights[j];
  }
  s.sum[r] += block_sum;
}

// Pass 2: two-pass softmax. Per block, each row's weights exp(score - max) over its own keys of
// the block are summed and applied to V into block partials that are then added to the row's
// accumulators (blocked summation: a fixed order, and error growing with block_size + blocks
// rather than with the window length). The block's V rows are read once for the tile; tokens
// whose keys of the block are the same range (all but the causal diagonal and the window's edge)
// share each V load.
void weighted_sum(const AttentionParams& p, const TileTask& t, int32_t group, Scratch& s) {
  const int32_t bs = p.layout.block_size;
  const int32_t d = p.cache.head_dim;
  const int32_t n = t.num_keys();
  row_maxima(t, group, s);
  std::fill(s.acc.begin(), s.acc.begin() + static_cast<int64_t>(t.tokens) * group * d, 0.0f);
  for (int32_t b = t.first(0) / bs; b <= t.pos(t.tokens - 1) / bs; ++b) {
    const BlockRows br = block_rows_of(t, b, bs);
    const auto keys_of = [&](int32_t i) {
      const int32_t first = std::max(t.first(i), b * bs);
      return std::pair{first, std::min(t.pos(i), b * bs + bs - 1) - first + 1};
    };
    for (int32_t i = br.lo; i <= br.hi; ++i) {
      const auto [first, count] = keys_of(i);
      for (int64_t r = int64_t{i} * group; r < int64_t{i + 1} * group; ++r) {
        exp_block(t, r, first, count, s);
      }
    }
    int64_t ld = 0;
    const float* v = logical_block_rows(p, t, KvPart::kV, b, br.key_first - b * bs,
                                        br.key_last - br.key_first + 1, s.tile, &ld);
    for (int32_t i = br.lo; i <= br.hi;) {
      const auto keys = keys_of(i);
      int32_t end = i + 1;
      while (end <= br.hi && keys_of(end) == keys) ++end;
      const int32_t rows = (end - i) * group;
      for (int32_t r = 0; r < rows; ++r) {
        const int64_t row = static_cast<int64_t>(i) * group + r;
        s.weight_rows[static_cast<size_t>(r)] =
            s.scores.data() + row * n + (keys.first - t.first(0));
        s.acc_rows[static_cast<size_t>(r)] = s.acc.data() + row * d;
      }
      accumulate_rows(t.isa, s.weight_rows.data(), rows, v + (keys.first - br.key_first) * ld, ld,
                      keys.second, d, s.acc_rows.data());
      i = end;
    }
  }
}

// Where query head h of KV head kv_head's group sits in token row `token` of q and out.
int64_t row_offset(const AttentionParams& p, int32_t token, int32_t kv_head, int32_t h) {
  const int32_t group = p.num_q_heads / p.cache.num_kv_heads;
  return (static_cast<int64_t>(token) * p.num_q_heads + static_cast<int64_t>(kv_head) * group + h) *
         p.cache.head_dim;
}

// The tile's outputs acc / sum, each row to its place in out.
void write_out(const AttentionParams& p, const TileTask& t, int32_t group, const Scratch& s) {
  const int32_t d = p.cache.head_dim;
  for (int32_t i = 0; i < t.tokens; ++i) {
    for (int32_t h = 0; h < group; ++h) {
      const int64_t r = static_cast<int64_t>(i) * group + h;
      const float* acc = s.acc.data() + r * d;
      float* out = p.out + row_offset(p, t.token + i, t.kv_head, h);
      for (int32_t c = 0; c < d; ++c) out[c] = acc[c] / s.sum[r];
    }
  }
}

// Token i's attention-mass row (AttentionParams::mass): after weighted_sum, s.scores holds
// exp(score - max) and s.sum the row sums, so slot first(i) + j gets sum_h scores[h][j] / sum[h]
// in head order; every other slot gets 0.
void write_mass(const TileTask& t, int32_t i, int32_t group, int32_t kv_len, const Scratch& s,
                float* row) {
  const int32_t n = t.num_keys();
  const int32_t first = t.first(i), pos = t.pos(i);
  std::fill(row, row + first, 0.0f);
  for (int32_t j = first; j <= pos; ++j) {
    float mass = 0.0f;
    for (int32_t h = 0; h < group; ++h) {
      const int64_t r = static_cast<int64_t>(i) * group + h;
      mass += s.scores.data()[r * n + (j - t.first(0))] / s.sum.data()[r];
    }
    row[j] = mass;
  }
  std::fill(row + pos + 1, row + kv_len, 0.0f);
}

void reserve(Scratch& s, int32_t rows, int32_t n, int32_t d, int32_t block_size) {
  const auto grow = [](auto& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  const auto r = static_cast<size_t>(rows);
  grow(s.q, r * static_cast<size_t>(d));
  grow(s.scores, r * static_cast<size_t>(n));
  grow(s.acc, r * static_cast<size_t>(d));
  grow(s.tile, static_cast<size_t>(block_size) * static_cast<size_t>(d));
  grow(s.keys_t,
       static_cast<size_t>(detail::transposed_keys_stride(block_size)) * static_cast<size_t>(d));
  grow(s.max, r);
  grow(s.sum, r);
  grow(s.weight_rows, r);
  grow(s.acc_rows, r);
}

void attend(const AttentionParams& p, const TileTask& t, Scratch& s) {
  const int32_t group = p.num_q_heads / p.cache.num_kv_heads;
  const int32_t d = p.cache.head_dim;
  reserve(s, t.tokens * group, t.num_keys(), d, p.layout.block_size);
  for (int32_t i = 0; i < t.tokens; ++i) {
    const float* q = p.q + row_offset(p, t.token + i, t.kv_head, 0);
    std::copy(q, q + static_cast<int64_t>(group) * d,
              s.q.data() + static_cast<int64_t>(i) * group * d);
  }
  compute_scores(p, t, group, s);
  weighted_sum(p, t, group, s);
  write_out(p, t, group, s);
  if (p.mass == nullptr) return;
  const int32_t kv_len = p.layout.kv_len(t.seq_idx);
  for (int32_t i = 0; i < t.tokens; ++i) {
    const int64_t offset = p.mass_offsets[t.token + i];
    if (offset < 0) continue;
    write_mass(t, i, group, kv_len, s, p.mass + offset + static_cast<int64_t>(t.kv_head) * kv_len);
  }
}

// The batch's tiles: each sequence's q rows in runs of up to tile_tokens from its first row.
struct Tile {
  int32_t seq_idx, token, tokens;
};

std::vector<Tile> make_tiles(const AttentionParams& p, int32_t tile_tokens) {
  std::vector<Tile> tiles;
  for (int32_t s = 0; s < p.layout.num_seqs; ++s) {
    for (int32_t i = p.q_indptr[s]; i < p.q_indptr[s + 1]; i += tile_tokens) {
      tiles.push_back(Tile{s, i, std::min(tile_tokens, p.q_indptr[s + 1] - i)});
    }
  }
  return tiles;
}

// I4: the newest-blocks view, and each token's slot there: -1 exactly where its slot is, inside
// that pool, at the same offset in its block as the slot (the full-precision block mirrors the
// int4 block token for token).
Status validate_newest_append(const AppendKvParams& p) {
  STRATA_RETURN_IF_ERROR(validate_newest_view(p.newest, p.cache, "append_kv"));
  if (p.num_newest_blocks < 0 || (p.num_tokens > 0 && p.newest_slot_mapping == nullptr)) {
    return Status::InvalidArgument(
        "append_kv: an int4 cache needs newest_slot_mapping and num_newest_blocks >= 0");
  }
  const int64_t bs = p.cache.block_size;
  const int64_t limit = p.num_newest_blocks * bs;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    const int64_t res = p.newest_slot_mapping[t];
    if (res < -1 || (p.num_newest_blocks > 0 && res >= limit)) {
      return Status::OutOfRange("append_kv: token " + std::to_string(t) +
                                " has newest-blocks slot " + std::to_string(res));
    }
    if ((slot == -1) != (res == -1) || (slot != -1 && slot % bs != res % bs)) {
      return Status::InvalidArgument("append_kv: token " + std::to_string(t) +
                                     ": newest-blocks slot " + std::to_string(res) +
                                     " does not mirror slot " + std::to_string(slot));
    }
  }
  return Status::Ok();
}

Status validate_append(const AppendKvParams& p) {
  const PagedKvCacheView& cache = p.cache;
  if (p.num_tokens < 0) return Status::InvalidArgument("append_kv: negative num_tokens");
  if (p.num_tokens > 0 && (p.k == nullptr || p.v == nullptr || p.slot_mapping == nullptr)) {
    return Status::InvalidArgument("append_kv: k, v and slot_mapping must not be null");
  }
  if (cache.k_data == nullptr || cache.v_data == nullptr) {
    return Status::InvalidArgument("append_kv: cache k_data and v_data must not be null");
  }
  if (cache.num_kv_heads <= 0 || cache.head_dim <= 0 || cache.block_size <= 0 ||
      cache.token_stride < row_extent(cache) || p.num_cache_blocks < 0) {
    return Status::InvalidArgument("append_kv: bad cache view or num_cache_blocks");
  }
  STRATA_RETURN_IF_ERROR(validate_kv_encoding(cache, "append_kv"));
  const int64_t limit = p.num_cache_blocks * cache.block_size;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < -1 || (p.num_cache_blocks > 0 && slot >= limit)) {
      return Status::OutOfRange("append_kv: token " + std::to_string(t) + " has slot " +
                                std::to_string(slot));
    }
  }
  return cache.dtype == DType::kI4 ? validate_newest_append(p) : Status::Ok();
}

// I4: every token's K/V to its newest-blocks slot at full precision; then each block whose last
// slot was written is quantized whole from its full-precision copy (after all rows are in, so a
// block filled by this call's earlier tokens sees them).
void append_int4(const AppendKvParams& p, ThreadPool& pool) {
  const PagedKvCacheView& newest = p.newest;
  const int64_t d = newest.head_dim;
  const int64_t row_elems = static_cast<int64_t>(newest.num_kv_heads) * d;
  pool.parallel_for(
      p.num_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t slot = p.newest_slot_mapping[t];
          if (slot == -1) continue;
          for (int32_t h = 0; h < newest.num_kv_heads; ++h) {
            store_kv_row(newest, KvPart::kK, slot, h, p.k + t * row_elems + h * d);
            store_kv_row(newest, KvPart::kV, slot, h, p.v + t * row_elems + h * d);
          }
        }
      },
      /*min_chunk=*/16);
  const int64_t bs = p.cache.block_size;
  std::vector<int64_t> filling;  // tokens that fill their block
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    if (p.slot_mapping[t] % bs == bs - 1) filling.push_back(t);
  }
  pool.parallel_for(
      static_cast<int64_t>(filling.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t t = filling[static_cast<size_t>(i)];
          quantize_int4_block(newest, static_cast<int32_t>(p.newest_slot_mapping[t] / bs), p.cache,
                              static_cast<int32_t>(p.slot_mapping[t] / bs));
        }
      },
      /*min_chunk=*/1);
}

}  // namespace

namespace detail {

Status paged_attention_with(const AttentionParams& params, ThreadPool& pool, CpuIsa isa,
                            int32_t tile_tokens) {
  STRATA_RETURN_IF_ERROR(validate(params));
  if (tile_tokens < 1) return Status::InvalidArgument("attention: tile_tokens must be positive");
  // best_cpu_isa() is cached; cpu_supports() runs CPUID, which traps to the hypervisor in a
  // virtual machine (microseconds, every layer of every step), so only other paths are checked.
  if (isa != best_cpu_isa() && !cpu_supports(isa)) {
    return Status::Unsupported("attention: this CPU lacks the path");
  }
  // I4: which blocks a row reads at full precision depends on its position, so rows never share.
  if (params.cache.dtype == DType::kI4) tile_tokens = 1;
  const std::vector<Tile> tiles = make_tiles(params, tile_tokens);
  const int32_t num_kv_heads = params.cache.num_kv_heads;
  const auto num_items = static_cast<int64_t>(tiles.size()) * num_kv_heads;
  // Costliest first (a sequence's last tiles attend to the most keys), so the threads finish
  // together; the order never changes a result.
  detail::parallel_dynamic(pool, num_items, 1, [&](int64_t begin, int64_t end) {
    Scratch& scratch = thread_scratch();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t index = num_items - 1 - item;
      const Tile& tile = tiles[static_cast<size_t>(index / num_kv_heads)];
      const int32_t q_begin = params.q_indptr[tile.seq_idx];
      const int32_t q_len = params.q_indptr[tile.seq_idx + 1] - q_begin;
      TileTask t;
      t.seq_idx = tile.seq_idx;
      t.kv_head = static_cast<int32_t>(index % num_kv_heads);
      t.token = tile.token;
      t.tokens = tile.tokens;
      t.pos0 = params.layout.kv_len(tile.seq_idx) - q_len + (tile.token - q_begin);
      t.window = params.sliding_window;
      t.isa = isa;
      attend(params, t, scratch);
    }
  });
  return Status::Ok();
}

}  // namespace detail

Status paged_attention(const AttentionParams& params, ThreadPool& pool) {
  return detail::paged_attention_with(params, pool, best_cpu_isa(), kAttentionTileTokens);
}

Status append_kv(const AppendKvParams& params, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate_append(params));
  if (params.cache.dtype == DType::kI4) {
    append_int4(params, pool);
    return Status::Ok();
  }
  const PagedKvCacheView& cache = params.cache;
  const int64_t d = cache.head_dim;
  const int64_t row_elems = static_cast<int64_t>(cache.num_kv_heads) * d;
  pool.parallel_for(
      params.num_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t slot = params.slot_mapping[t];
          if (slot == -1) continue;
          for (int32_t h = 0; h < cache.num_kv_heads; ++h) {
            store_kv_row(cache, KvPart::kK, slot, h, params.k + t * row_elems + h * d);
            store_kv_row(cache, KvPart::kV, slot, h, params.v + t * row_elems + h * d);
          }
        }
      },
      /*min_chunk=*/16);
  return Status::Ok();
}

}  // namespace strata::cpu
