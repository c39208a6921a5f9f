#pragma once
// StepBatch: one forward pass's input, built sequence by sequence -- token ids, positions,
// q_indptr, the paged layout and slot mapping (kv::PagedLayoutBuilder), and the rows whose logits
// the step needs. The engine builds every step with it, so Model::forward is fed
// one way. Owns its vectors; view() borrows them. Cost: O(tokens + blocks) per step.

#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"
#include "kv/paged_layout_builder.h"
#include "model/model.h"

namespace strata::engine {

class StepBatch {
 public:
  // A batch over the cache's KV groups (one layout and slot mapping each).
  explicit StepBatch(const kv::KvCacheManager& cache);

  // Adds seq's next n tokens, from position seq.num_computed (their slots already allocated).
  // Returns the index of seq's first logits row -- every row when seq.wants_all_rows(), else the
  // last row when the n tokens complete the sequence -- or -1 when it needs none.
  int32_t add(const Sequence& seq, int32_t n);
  // As add(), for a sequence whose n tokens complete it and whose next token the runner draws
  // where the logits are (spec): its last row becomes a sample row. Returns the sample index.
  int32_t add_sampled(const Sequence& seq, int32_t n, const model::DeviceSampleSpec& spec);

  // Token-level eviction (H2O, SnapKV): asks the forward pass for the attention mass of token
  // rows [first, first + count) of the sequence added last (relative to its first row), combined
  // over layers and KV heads as mode says (ForwardBatch::mass_modes). Each row gets row_size
  // floats -- kv_len (the sequence's slots after this step), or num_heads x kv_len for kPerHead,
  // num_heads being the model's layers x KV heads -- in the mass buffer, the rows row_size apart
  // from `offset` on.
  struct MassRows {
    int64_t offset = -1;  // -1: none wanted
    int32_t count = 0;
    int32_t kv_len = 0;
    int64_t row_size = 0;
  };
  MassRows want_mass(int32_t first, int32_t count, model::MassMode mode = model::MassMode::kSum,
                     int32_t num_heads = 1);
  // Floats the mass buffer needs (ForwardBatch::attention_mass).
  int64_t mass_size() const { return mass_size_; }
  bool empty() const { return token_ids_.empty(); }
  size_t num_logits_rows() const { return logits_rows_.size(); }
  size_t num_sample_rows() const { return sample_rows_.size(); }
  model::ForwardBatch view() const;

 private:
  // Appends seq's next n tokens; returns the first one's row.
  int32_t add_tokens(const Sequence& seq, int32_t n);

  kv::PagedLayoutBuilder builder_;
  std::vector<int32_t> token_ids_, positions_, q_indptr_{0}, logits_rows_, sample_rows_;
  std::vector<model::DeviceSampleSpec> sample_specs_;
  // Per token row, where its attention mass goes (-1: not wanted); empty while none is.
  std::vector<int64_t> mass_offsets_;
  int64_t mass_size_ = 0;
  std::vector<model::MassMode> mass_modes_;  // per token row, as mass_offsets_
  int32_t last_row0_ = 0;          // the last-added sequence's first row
  int32_t last_rows_ = 0;          // and its row count
  int32_t last_kv_len_ = 0;        // and its slots after the step
  // Later attention groups' views (a hybrid model's windowed layers), rebuilt by view().
  mutable std::vector<model::GroupBatchView> group_views_;
};

}  // namespace strata::engine
