#pragma once
// PagedBatch: a test batch for paged attention built by hand -- CSR block tables with shuffled,
// non-contiguous block ids (block 0, the null block, never used), a real pool laid out by
// kv::KvLayout, the queries -- plus a float64 reference over contiguous K/V.
//
// Q/K/V values are a function of (data_id, position, head, channel) only, so one sequence can be
// rebuilt in another batch, with other block ids or as a different prefill chunk, with identical
// inputs. Pool bytes that hold no token are 0xFF (NaN in F32, BF16, F16 and both fp8 formats, a
// NaN fp16 scale for I8), and the output starts as NaN, so a read past kv_len or an unwritten
// output shows up as NaN in the error.
//
// Quantized caches are written with the kernels' encoder (store_kv_row; append_kv_test checks it
// against the documented formulas), FP8 with non-trivial static scales; the reference decodes
// the stored bytes itself, so the tolerance bounds the attention arithmetic, not the storage.
//
// I4 (KIVI) caches are written through append_kv with a full-precision F32 newest-blocks pool
// that mirrors every block (shuffled ids of its own); the newest-blocks layout then lists only
// each sequence's window -- from max(0, first query position / B - R + 1) through its last block,
// or from extra_newest_blocks earlier -- and every mirrored block before that is poisoned with NaN,
// as is the int4 area of every partial block, so reading the wrong precision shows up as NaN. The
// reference reads, per (query position p, key position j), the F32 value when j / B > p / B - R
// and the decoded int4 value otherwise: exactly what the rule says the kernel must read.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/attention.h"
#include "kv/kv_layout.h"

namespace strata::cpu::test_util {

struct SeqSpec {
  int32_t q_len = 0;
  int32_t kv_len = 0;
  uint64_t data_id = 0;  // which sequence's values
};

struct AttnConfig {
  int32_t num_q_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 64;
  int32_t block_size = 16;
  DType dtype = DType::kF32;
  int32_t sliding_window = 0;
  float scale_multiplier = 2.0f;  // scale = multiplier / sqrt(head_dim); > 1 sharpens the softmax
  int32_t newest_blocks = 1;      // I4: R
  int32_t extra_newest_blocks = 0;  // I4: newest-blocks entries kept before the window's first
};

inline float q_value(uint64_t id, int32_t pos, int32_t head, int32_t c) {
  return 2.0f * hashed_uniform(3 * id, static_cast<uint64_t>(pos), static_cast<uint64_t>(head),
                               static_cast<uint64_t>(c));
}
inline float k_value(uint64_t id, int32_t pos, int32_t head, int32_t c) {
  return hashed_uniform(3 * id + 1, static_cast<uint64_t>(pos), static_cast<uint64_t>(head),
                        static_cast<uint64_t>(c));
}
inline float v_value(uint64_t id, int32_t pos, int32_t head, int32_t c) {
  return hashed_uniform(3 * id + 2, static_cast<uint64_t>(pos), static_cast<uint64_t>(head),
                        static_cast<uint64_t>(c));
}

class PagedBatch {
 public:
  static constexpr int32_t kLayerIdx = 1;  // of 2 layers, so the layer offset is exercised
  static constexpr int32_t kSpareBlocks = 3;

  PagedBatch(const AttnConfig& cfg, std::vector<SeqSpec> seqs, uint32_t shuffle_seed)
      : cfg_(cfg),
        seqs_(std::move(seqs)),
        kv_layout_(kv::KvSpec{2, cfg.num_kv_heads, cfg.head_dim, cfg.dtype}, cfg.block_size,
                   test_scales(cfg.dtype)),
        newest_layout_(kv::KvSpec{2, cfg.num_kv_heads, cfg.head_dim, DType::kF32}, cfg.block_size) {
    build_block_tables(shuffle_seed);
    pool_.assign(static_cast<size_t>(kv_layout_.pool_bytes(num_pool_blocks_)), 0xFF);
    view_ = kv_layout_.layer_view(pool_.data(), kLayerIdx);
    if (is_int4()) {
      build_newest_tables(shuffle_seed);
      newest_pool_.assign(static_cast<size_t>(newest_layout_.pool_bytes(num_pool_blocks_)), 0xFF);
      newest_view_ = newest_layout_.layer_view(newest_pool_.data(), kLayerIdx);
    }
    for (size_t s = 0; s < seqs_.size(); ++s) write_sequence(static_cast<int32_t>(s));
    if (is_int4()) poison_outside_windows();
    fill_queries();
  }

  bool is_int4() const { return cfg_.dtype == DType::kI4; }

  int32_t num_seqs() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t num_tokens() const { return q_indptr_.back(); }
  int32_t num_pool_blocks() const { return num_pool_blocks_; }
  int64_t row_elems() const { return static_cast<int64_t>(cfg_.num_q_heads) * cfg_.head_dim; }
  // First q/out row of sequence s.
  int32_t q_begin(int32_t s) const { return q_indptr_[static_cast<size_t>(s)]; }
  const std::vector<float>& out() const { return out_; }
  const float* out_row(int32_t token) const { return out_.data() + token * row_elems(); }
  const PagedKvCacheView& view() const { return view_; }
  std::vector<uint8_t>& pool() { return pool_; }

  PagedKvLayout layout() const {
    PagedKvLayout layout;
    layout.kv_indptr = kv_indptr_.data();
    layout.kv_indices = kv_indices_.data();
    layout.kv_last_page_len = kv_last_page_len_.data();
    layout.num_seqs = num_seqs();
    layout.block_size = cfg_.block_size;
    return layout;
  }
  // I4: the newest-blocks group's layout (first_block set) and view.
  PagedKvLayout newest_layout() const {
    PagedKvLayout layout = this->layout();
    layout.kv_indptr = newest_indptr_.data();
    layout.kv_indices = newest_indices_.data();
    layout.first_block = newest_first_block_.data();
    return layout;
  }
  const PagedKvCacheView& newest_view() const { return newest_view_; }
  std::vector<uint8_t>& newest_pool() { return newest_pool_; }

  AttentionParams params() {
    AttentionParams p;
    p.q = q_.data();
    p.out = out_.data();
    p.q_indptr = q_indptr_.data();
    p.layout = layout();
    p.cache = view_;
    if (is_int4()) p.newest = {newest_view_, newest_layout(), cfg_.newest_blocks};
    p.num_q_heads = cfg_.num_q_heads;
    p.scale = cfg_.scale_multiplier / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.sliding_window = cfg_.sliding_window;
    return p;
  }

  // FP8's static scales for the two layers: not powers of two, and small enough that [-1, 1)
  // values use the formats' full range (1 / 0.0025 = 400 < 448).
  static kv::KvStaticScales test_scales(DType dtype) {
    if (dtype != DType::kF8E4M3 && dtype != DType::kF8E5M2) return {};
    return kv::KvStaticScales{{0.003f, 0.0031f}, {0.0025f, 0.0027f}};
  }

  // Float64 attention over contiguous K/V as stored (after rounding to the cache dtype),
  // [num_tokens, num_q_heads, head_dim].
  std::vector<double> reference() {
    const double scale = params().scale;
    std::vector<double> ref(out_.size());
    for (int32_t s = 0; s < num_seqs(); ++s) {
      const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
      const Stored k = {contiguous(s, KvPart::kK), full_precision(s, KvPart::kK)};
      const Stored v = {contiguous(s, KvPart::kV), full_precision(s, KvPart::kV)};
      for (int32_t i = 0; i < spec.q_len; ++i) {
        const int32_t pos = spec.kv_len - spec.q_len + i;
        const int32_t token = q_begin(s) + i;
        for (int32_t h = 0; h < cfg_.num_q_heads; ++h) {
          reference_row(k, v, token, h, pos, scale,
                        ref.data() + (token * row_elems()) + h * cfg_.head_dim);
        }
      }
    }
    return ref;
  }

  // The largest rel_l2_error over all (token, head) rows of out() against reference().
  double max_row_error() {
    const std::vector<double> ref = reference();
    double worst = 0.0;
    for (int64_t row = 0; row < static_cast<int64_t>(out_.size()) / cfg_.head_dim; ++row) {
      const double e = rel_l2_error(out_.data() + row * cfg_.head_dim,
                                    ref.data() + row * cfg_.head_dim, cfg_.head_dim);
      worst = std::isnan(e) ? e : std::max(worst, e);
      if (std::isnan(worst)) break;
    }
    return worst;
  }

 private:
  int32_t blocks_for(int32_t kv_len) const {
    return (kv_len + cfg_.block_size - 1) / cfg_.block_size;
  }

  void build_block_tables(uint32_t shuffle_seed) {
    int32_t total = 0;
    for (const SeqSpec& s : seqs_) total += blocks_for(s.kv_len);
    num_pool_blocks_ = total + 1 + kSpareBlocks;
    std::vector<int32_t> ids(static_cast<size_t>(num_pool_blocks_ - 1));
    std::iota(ids.begin(), ids.end(), 1);  // block 0 is the reserved null block
    std::mt19937 rng(shuffle_seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    kv_indptr_ = {0};
    q_indptr_ = {0};
    for (const SeqSpec& s : seqs_) {
      const int32_t n = blocks_for(s.kv_len);
      for (int32_t j = 0; j < n; ++j) kv_indices_.push_back(ids[next++]);
      kv_indptr_.push_back(static_cast<int32_t>(kv_indices_.size()));
      kv_last_page_len_.push_back(n == 0 ? 0 : s.kv_len - (n - 1) * cfg_.block_size);
      q_indptr_.push_back(q_indptr_.back() + s.q_len);
    }
  }

  // I4: the mirror (one newest-blocks block per cache block, its own shuffled ids), and the
  // window each sequence's newest-blocks layout lists.
  void build_newest_tables(uint32_t shuffle_seed) {
    std::vector<int32_t> ids(static_cast<size_t>(num_pool_blocks_ - 1));
    std::iota(ids.begin(), ids.end(), 1);
    std::mt19937 rng(shuffle_seed + 7919);
    std::shuffle(ids.begin(), ids.end(), rng);
    mirror_.assign(static_cast<size_t>(num_pool_blocks_), 0);
    for (size_t i = 0; i < kv_indices_.size(); ++i) {
      mirror_[static_cast<size_t>(kv_indices_[i])] = ids[i];
    }
    newest_indptr_ = {0};
    for (size_t s = 0; s < seqs_.size(); ++s) {
      const SeqSpec& spec = seqs_[s];
      const int32_t n = blocks_for(spec.kv_len);
      const int32_t first_pos = spec.kv_len - spec.q_len;
      const int32_t first = std::max(
          0, first_pos / cfg_.block_size - cfg_.newest_blocks + 1 - cfg_.extra_newest_blocks);
      newest_first_block_.push_back(std::min(first, n));
      for (int32_t j = newest_first_block_.back(); j < n; ++j) {
        newest_indices_.push_back(mirror_[static_cast<size_t>(kv_indices_[kv_indptr_[s] + j])]);
      }
      newest_indptr_.push_back(static_cast<int32_t>(newest_indices_.size()));
    }
  }

  // I4: NaN over every newest-blocks block outside the layout (the engine frees those).
  void poison_outside_windows() {
    const int64_t bytes = newest_layout_.block_bytes();
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int32_t j = 0; j < newest_first_block_[s]; ++j) {
        const int32_t id = mirror_[static_cast<size_t>(kv_indices_[kv_indptr_[s] + j])];
        std::fill_n(newest_pool_.begin() + id * bytes, bytes, uint8_t{0xFF});
      }
    }
  }

  // I4: every token of the sequence through append_kv (int4 blocks made when they fill).
  void append_sequence(int32_t s) {
    const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
    const PagedKvLayout l = layout();
    const int64_t row = static_cast<int64_t>(cfg_.num_kv_heads) * cfg_.head_dim;
    std::vector<float> k(static_cast<size_t>(spec.kv_len * row));
    std::vector<float> v(k.size());
    std::vector<int64_t> slots;
    std::vector<int64_t> newest_slots;
    for (int32_t pos = 0; pos < spec.kv_len; ++pos) {
      const int32_t block = l.block_of(s, pos);
      const int32_t offset = pos % cfg_.block_size;
      slots.push_back(static_cast<int64_t>(block) * cfg_.block_size + offset);
      newest_slots.push_back(
          static_cast<int64_t>(mirror_[static_cast<size_t>(block)]) * cfg_.block_size + offset);
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h) {
        for (int32_t c = 0; c < cfg_.head_dim; ++c) {
          const size_t i = static_cast<size_t>(pos * row + h * cfg_.head_dim + c);
          k[i] = k_value(spec.data_id, pos, h, c);
          v[i] = v_value(spec.data_id, pos, h, c);
        }
      }
    }
    AppendKvParams p;
    p.k = k.data();
    p.v = v.data();
    p.slot_mapping = slots.data();
    p.num_tokens = spec.kv_len;
    p.cache = view_;
    p.num_cache_blocks = num_pool_blocks_;
    p.newest_slot_mapping = newest_slots.data();
    p.newest = newest_view_;
    p.num_newest_blocks = num_pool_blocks_;
    ThreadPool pool(1);
    const Status status = append_kv(p, pool);
    STRATA_CHECK(status.ok(), "PagedBatch: append_kv failed");
  }

  void write_sequence(int32_t s) {
    if (is_int4()) {
      append_sequence(s);
      return;
    }
    const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
    const PagedKvLayout l = layout();
    std::vector<float> k(static_cast<size_t>(cfg_.head_dim));
    std::vector<float> v(k.size());
    for (int32_t pos = 0; pos < spec.kv_len; ++pos) {
      const int64_t slot = static_cast<int64_t>(l.block_of(s, pos)) * cfg_.block_size +
                           pos % cfg_.block_size;
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h) {
        for (int32_t c = 0; c < cfg_.head_dim; ++c) {
          k[static_cast<size_t>(c)] = k_value(spec.data_id, pos, h, c);
          v[static_cast<size_t>(c)] = v_value(spec.data_id, pos, h, c);
        }
        store_kv_row(view_, KvPart::kK, slot, h, k.data());
        store_kv_row(view_, KvPart::kV, slot, h, v.data());
      }
    }
  }

  // Channel c of a stored row, decoded from the pool bytes by the documented formulas.
  double stored(KvPart part, int32_t block_id, int32_t head, int32_t tok, int32_t c) const {
    const void* area = part == KvPart::kK ? view_.k_data : view_.v_data;
    const int64_t idx = view_.offset(block_id, head, tok) + c;
    switch (cfg_.dtype) {
      case DType::kF32:
        return static_cast<const float*>(area)[idx];
      case DType::kBF16:
        return bf16_to_f32(static_cast<const uint16_t*>(area)[idx]);
      case DType::kF16:
        return f16_to_f32(static_cast<const uint16_t*>(area)[idx]);
      case DType::kF8E4M3:
      case DType::kF8E5M2: {
        const uint8_t code = static_cast<const uint8_t*>(area)[idx];
        const double scale = part == KvPart::kK ? view_.k_scale : view_.v_scale;
        return scale * (cfg_.dtype == DType::kF8E4M3 ? fp8_e4m3_to_f32(code)
                                                      : fp8_e5m2_to_f32(code));
      }
      case DType::kI8: {
        const void* scales = part == KvPart::kK ? view_.k_scale_data : view_.v_scale_data;
        const uint16_t s = static_cast<const uint16_t*>(
            scales)[view_.scale_offset(block_id, head, tok)];
        return static_cast<const int8_t*>(area)[idx] * static_cast<double>(f16_to_f32(s));
      }
      case DType::kI4: {
        // Bytes: the row's byte c / 2, low nibble for even c; code * s + z in fp32 (mul, add).
        const uint8_t byte =
            static_cast<const uint8_t*>(area)[view_.offset(block_id, head, tok) + c / 2];
        const auto code = static_cast<float>((c % 2 == 0 ? byte : byte >> 4) & 0x0f);
        const auto* scales = static_cast<const uint16_t*>(part == KvPart::kK ? view_.k_scale_data
                                                                             : view_.v_scale_data);
        const auto* zeros = static_cast<const uint16_t*>(part == KvPart::kK ? view_.k_zero_data
                                                                            : view_.v_zero_data);
        const int64_t at = part == KvPart::kK ? block_id * view_.scale_block_stride +
                                                    head * view_.k_stat_head_stride + c
                                              : view_.scale_offset(block_id, head, tok);
        volatile float scaled = code * f16_to_f32(scales[at]);  // no fused multiply-add
        return scaled + f16_to_f32(zeros[at]);
      }
      default:
        return std::numeric_limits<double>::quiet_NaN();
    }
  }

  void fill_queries() {
    q_.resize(static_cast<size_t>(num_tokens() * row_elems()));
    out_.assign(q_.size(), std::numeric_limits<float>::quiet_NaN());
    for (int32_t s = 0; s < num_seqs(); ++s) {
      const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
      for (int32_t i = 0; i < spec.q_len; ++i) {
        const int32_t pos = spec.kv_len - spec.q_len + i;
        float* row = q_.data() + (q_begin(s) + i) * row_elems();
        for (int32_t h = 0; h < cfg_.num_q_heads; ++h) {
          for (int32_t c = 0; c < cfg_.head_dim; ++c) {
            row[h * cfg_.head_dim + c] = q_value(spec.data_id, pos, h, c);
          }
        }
      }
    }
  }

  // [kv_len, num_kv_heads, head_dim] of sequence s as the cache stores them, widened to double.
  std::vector<double> contiguous(int32_t s, KvPart part) const {
    const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
    const PagedKvLayout l = layout();
    std::vector<double> out;
    out.reserve(static_cast<size_t>(spec.kv_len) * cfg_.num_kv_heads * cfg_.head_dim);
    for (int32_t pos = 0; pos < spec.kv_len; ++pos) {
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h) {
        for (int32_t c = 0; c < cfg_.head_dim; ++c) {
          out.push_back(stored(part, l.block_of(s, pos), h, pos % cfg_.block_size, c));
        }
      }
    }
    return out;
  }

  // I4: the same positions as the newest-blocks pool holds them (the F32 inputs); empty otherwise.
  std::vector<double> full_precision(int32_t s, KvPart part) const {
    if (!is_int4()) return {};
    const SeqSpec& spec = seqs_[static_cast<size_t>(s)];
    std::vector<double> out;
    out.reserve(static_cast<size_t>(spec.kv_len) * cfg_.num_kv_heads * cfg_.head_dim);
    for (int32_t pos = 0; pos < spec.kv_len; ++pos) {
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h) {
        for (int32_t c = 0; c < cfg_.head_dim; ++c) {
          out.push_back(part == KvPart::kK ? k_value(spec.data_id, pos, h, c)
                                           : v_value(spec.data_id, pos, h, c));
        }
      }
    }
    return out;
  }

  // One sequence's K (or V) as stored, and (I4) at full precision.
  struct Stored {
    std::vector<double> cache;
    std::vector<double> full;
    // What a query at position pos reads for key position j (the INT4 rule for I4).
    const double* row(const PagedBatch& b, int32_t pos, int32_t j, size_t at) const {
      const int32_t bs = b.cfg_.block_size;
      const bool newest = b.is_int4() && j / bs > pos / bs - b.cfg_.newest_blocks;
      return (newest ? full : cache).data() + at;
    }
  };

  void reference_row(const Stored& k, const Stored& v, int32_t token, int32_t h, int32_t pos,
                     double scale, double* out) const {
    const int32_t d = cfg_.head_dim;
    const int32_t kv_head = h / (cfg_.num_q_heads / cfg_.num_kv_heads);
    const int32_t first = cfg_.sliding_window > 0 ? std::max(0, pos - cfg_.sliding_window + 1) : 0;
    const float* q = q_.data() + token * row_elems() + h * d;
    const auto at = [&](int32_t p) {
      return (static_cast<size_t>(p) * cfg_.num_kv_heads + kv_head) * d;
    };
    std::vector<double> w(static_cast<size_t>(pos - first + 1));
    for (int32_t p = first; p <= pos; ++p) {
      const double* kp = k.row(*this, pos, p, at(p));
      double dot = 0.0;
      for (int32_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * kp[c];
      w[static_cast<size_t>(p - first)] = dot * scale;
    }
    const double max = *std::max_element(w.begin(), w.end());
    double sum = 0.0;
    for (double& x : w) sum += (x = std::exp(x - max));
    std::fill(out, out + d, 0.0);
    for (int32_t p = first; p <= pos; ++p) {
      const double weight = w[static_cast<size_t>(p - first)] / sum;
      const double* vp = v.row(*this, pos, p, at(p));
      for (int32_t c = 0; c < d; ++c) out[c] += weight * vp[c];
    }
  }

  AttnConfig cfg_;
  std::vector<SeqSpec> seqs_;
  kv::KvLayout kv_layout_;
  kv::KvLayout newest_layout_;  // I4 only
  int32_t num_pool_blocks_ = 0;
  std::vector<int32_t> kv_indptr_, kv_indices_, kv_last_page_len_, q_indptr_;
  std::vector<uint8_t> pool_;
  PagedKvCacheView view_;
  // I4: mirror_[cache block id] = its newest-blocks block id; that group's layout and pool.
  std::vector<int32_t> mirror_, newest_indptr_, newest_indices_, newest_first_block_;
  std::vector<uint8_t> newest_pool_;
  PagedKvCacheView newest_view_;
  std::vector<float> q_, out_;
};

}  // namespace strata::cpu::test_util
