#pragma once
// Test helpers for the GPU model runner: steps of CudaModel driven by hand (teacher-forced rows
// of several sequences in one forward, with their blocks from a simple counter), and the L2
// distance of two logits rows. Shared by cuda_model_test.cc and cuda_kv_quant_test.cc.
//
// INT4 models (num_kv_pools() > 1): the newest-blocks group's pool mirrors the main pool's block
// ids (its block b holds block b's bf16 rows, so it needs as many blocks as the main pool), and
// each step's entries of that group run from the first block its first new position reads at
// full precision (R = kNewestBlocks) through its last block, as KvCacheManager::allocate_slots
// leaves them.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "model/cuda/cuda_model.h"

namespace strata::model {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNewestBlocks = 1;  // R of INT4 steps

inline bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// L2 distance of two rows of vocab floats.
inline double row_dist(const float* a, const float* b, int64_t vocab) {
  double d = 0.0;
  for (int64_t v = 0; v < vocab; ++v) d += (double{a[v]} - b[v]) * (double{a[v]} - b[v]);
  return std::sqrt(d);
}

// One sequence's tokens and its blocks in the pool.
struct Seq {
  explicit Seq(std::vector<int32_t> t) : tokens(std::move(t)) {}
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int32_t num_computed = 0;
};

// Runs steps of CudaModel by hand: each step computes the next `n` tokens of some sequences and
// returns the logits of every computed row (teacher forcing).
class Runner {
 public:
  explicit Runner(CudaModel& model) : model_(model), vocab_(model.config().vocab_size) {}

  int32_t new_block() { return next_block_++; }

  // A step's INT4 newest-blocks group (none for other models): add() each sequence after its
  // blocks, with its first new position, then set() its view on the batch as group 1.
  struct Newest {
    bool on = false;
    std::vector<int32_t> indptr = {0};
    std::vector<int32_t> indices = {};
    std::vector<int32_t> first_block = {};
    std::vector<int64_t> slots = {};
    GroupBatchView view = {};

    void add(const Seq& seq, int32_t first_pos, int32_t num_blocks) {
      if (!on) return;
      const int32_t first = std::max(0, first_pos / kBlockSize - kNewestBlocks + 1);
      indices.insert(indices.end(), seq.blocks.begin() + first, seq.blocks.begin() + num_blocks);
      indptr.push_back(static_cast<int32_t>(indices.size()));
      first_block.push_back(first);
    }
    void set(ForwardBatch& b, const std::vector<int64_t>& main_slots) {
      if (!on) return;
      slots = main_slots;      // mirrored block ids: the same slot in the newest-blocks pool
      view.layout = b.layout;  // group 0's last-block lengths, sequences and block size
      view.layout.kv_indptr = indptr.data();
      view.layout.kv_indices = indices.data();
      view.layout.first_block = first_block.data();
      view.slot_mapping = slots;
      view.newest_blocks = kNewestBlocks;
      b.groups = std::span<const GroupBatchView>(&view, 1);
    }
  };

  // One decode step of several sequences, each row sampled greedily on the device (the path
  // that replays CUDA graphs); returns each sequence's drawn token.
  std::vector<int32_t> sample_step(const std::vector<Seq*>& seqs) {
    std::vector<int32_t> ids, pos, q_indptr{0}, kv_indptr{0}, kv_indices, last_len, rows;
    std::vector<int64_t> slots;
    std::vector<DeviceSampleSpec> specs;
    Newest newest{.on = model_.num_kv_pools() > 1};
    for (Seq* seq : seqs) {
      const int32_t p = seq->num_computed;
      while (static_cast<int32_t>(seq->blocks.size()) * kBlockSize < p + 1) {
        seq->blocks.push_back(new_block());
      }
      rows.push_back(static_cast<int32_t>(ids.size()));
      ids.push_back(seq->tokens[static_cast<size_t>(p)]);
      pos.push_back(p);
      slots.push_back(int64_t{seq->blocks[static_cast<size_t>(p / kBlockSize)]} * kBlockSize +
                      p % kBlockSize);
      q_indptr.push_back(static_cast<int32_t>(ids.size()));
      const int32_t num_blocks = p / kBlockSize + 1;
      kv_indices.insert(kv_indices.end(), seq->blocks.begin(), seq->blocks.begin() + num_blocks);
      kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
      last_len.push_back(p + 1 - (num_blocks - 1) * kBlockSize);
      specs.push_back(DeviceSampleSpec{.temperature = 0.0f});
      newest.add(*seq, p, num_blocks);
    }
    ForwardBatch b;
    b.token_ids = ids;
    b.positions = pos;
    b.q_indptr = q_indptr;
    b.layout = {kv_indptr.data(), kv_indices.data(), last_len.data(),
                static_cast<int32_t>(seqs.size()), kBlockSize};
    b.slot_mapping = slots;
    b.sample_rows = rows;
    b.sample_specs = specs;
    newest.set(b, slots);
    std::vector<SampledToken> sampled(seqs.size());
    const Status s = model_.forward(b, {}, sampled);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::vector<int32_t> out;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ++seqs[i]->num_computed;
      out.push_back(sampled[i].token);
    }
    return out;
  }

  // (sequence, number of new tokens) pairs; returns per pair its rows' logits.
  std::vector<std::vector<float>> step(const std::vector<std::pair<Seq*, int32_t>>& work) {
    std::vector<int32_t> ids, pos, q_indptr{0}, kv_indptr{0}, kv_indices, last_len, rows;
    std::vector<int64_t> slots;
    Newest newest{.on = model_.num_kv_pools() > 1};
    for (auto [seq, n] : work) {
      const int32_t kv_len = seq->num_computed + n;
      while (static_cast<int32_t>(seq->blocks.size()) * kBlockSize < kv_len) {
        seq->blocks.push_back(new_block());
      }
      for (int32_t p = seq->num_computed; p < kv_len; ++p) {
        rows.push_back(static_cast<int32_t>(ids.size()));
        ids.push_back(seq->tokens[static_cast<size_t>(p)]);
        pos.push_back(p);
        slots.push_back(int64_t{seq->blocks[static_cast<size_t>(p / kBlockSize)]} * kBlockSize +
                        p % kBlockSize);
      }
      q_indptr.push_back(static_cast<int32_t>(ids.size()));
      const int32_t num_blocks = (kv_len + kBlockSize - 1) / kBlockSize;
      kv_indices.insert(kv_indices.end(), seq->blocks.begin(), seq->blocks.begin() + num_blocks);
      kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
      last_len.push_back(kv_len - (num_blocks - 1) * kBlockSize);
      newest.add(*seq, seq->num_computed, num_blocks);
    }
    ForwardBatch b;
    b.token_ids = ids;
    b.positions = pos;
    b.q_indptr = q_indptr;
    b.layout.kv_indptr = kv_indptr.data();
    b.layout.kv_indices = kv_indices.data();
    b.layout.kv_last_page_len = last_len.data();
    b.layout.num_seqs = static_cast<int32_t>(work.size());
    b.layout.block_size = kBlockSize;
    b.slot_mapping = slots;
    b.logits_rows = rows;
    newest.set(b, slots);
    std::vector<float> logits(rows.size() * static_cast<size_t>(vocab_));
    const Status s = model_.forward(b, logits, {});
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::vector<std::vector<float>> out;
    size_t row = 0;
    for (auto [seq, n] : work) {
      const auto begin = logits.begin() + static_cast<std::ptrdiff_t>(row * vocab_);
      out.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(n * vocab_));
      row += static_cast<size_t>(n);
      seq->num_computed += n;
    }
    return out;
  }

 private:
  CudaModel& model_;
  int64_t vocab_;
  int32_t next_block_ = 1;  // block 0 is the null block
};

// One sequence of `prompt` steps eagerly with its logits on the host; three copies of it step
// together with every row sampled greedily on the device, which replays CUDA graphs (batch 3
// padded to 4; the first step of each shape runs eagerly and is captured), over the prompt's
// last 40 tokens. Wherever the eager logits' top-2 gap is clear of bf16 noise, every
// graph-drawn token must be their argmax. Returns how many positions were compared.
inline int expect_graph_draws_match_eager(Runner& runner, const std::vector<int32_t>& prompt) {
  const auto len = static_cast<int32_t>(prompt.size());
  const int32_t prefill = len - 40;
  Seq eager(prompt), g1(prompt), g2(prompt), g3(prompt);
  runner.step({{&eager, prefill}, {&g1, prefill}, {&g2, prefill}, {&g3, prefill}});
  int compared = 0;
  for (int32_t pos = prefill; pos < len; ++pos) {
    const std::vector<float> row = runner.step({{&eager, 1}})[0];
    const std::vector<int32_t> drawn = runner.sample_step({&g1, &g2, &g3});
    std::vector<float> sorted = row;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] < 0.05f) continue;
    ++compared;
    const auto argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    for (int32_t t : drawn) EXPECT_EQ(t, argmax) << "position " << pos;
  }
  return compared;
}

// The logits of `tokens` computed as one chunk of all but the last `tail` tokens, then one token
// per step: every row, in order.
inline std::vector<float> chunk_then_decode_logits(Runner& runner, const std::vector<int32_t>& tokens,
                                                   int32_t tail) {
  const auto len = static_cast<int32_t>(tokens.size());
  Seq seq{tokens};
  std::vector<float> all = runner.step({{&seq, len - tail}})[0];
  while (seq.num_computed < len) {
    const auto out = runner.step({{&seq, 1}});
    all.insert(all.end(), out[0].begin(), out[0].end());
  }
  return all;
}

}  // namespace strata::model
