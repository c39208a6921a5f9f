#include "engine/step_batch.h"

#include "core/check.h"

namespace strata::engine {

namespace {

std::vector<kv::KvGroupSpec> group_specs(const kv::KvCacheManager& cache) {
  std::vector<kv::KvGroupSpec> specs;
  specs.reserve(static_cast<size_t>(cache.num_groups()));
  for (int32_t g = 0; g < cache.num_groups(); ++g) specs.push_back(cache.group_spec(g));
  return specs;
}

}  // namespace

StepBatch::StepBatch(const kv::KvCacheManager& cache)
    : builder_(cache.block_size(), group_specs(cache)) {}

model::ForwardBatch StepBatch::view() const {
  group_views_.clear();
  for (int32_t g = 1; g < builder_.num_groups(); ++g) {
    group_views_.push_back(
        {builder_.layout(g), builder_.group(g).slot_mapping, builder_.group_spec(g).newest_blocks});
  }
  model::ForwardBatch b{
      token_ids_,   positions_,   q_indptr_,    builder_.layout(), builder_.slot_mapping(),
      logits_rows_, sample_rows_, sample_specs_};
  b.groups = group_views_;
  if (mass_size_ > 0) {
    b.mass_offsets = mass_offsets_;
    b.mass_modes = mass_modes_;
  }
  return b;
}

StepBatch::MassRows StepBatch::want_mass(int32_t first, int32_t count, model::MassMode mode,
                                         int32_t num_heads) {
  STRATA_CHECK(first >= 0 && count > 0 && first + count <= last_rows_,
               "want_mass: rows outside the last-added sequence");
  STRATA_CHECK(num_heads >= 1, "want_mass: num_heads must be positive");
  mass_offsets_.resize(token_ids_.size(), -1);
  mass_modes_.resize(token_ids_.size(), model::MassMode::kSum);
  const int64_t offset = mass_size_;
  const int64_t row_size =
      mode == model::MassMode::kPerHead ? int64_t{num_heads} * last_kv_len_ : last_kv_len_;
  const auto row0 = static_cast<size_t>(last_row0_) + static_cast<size_t>(first);
  for (size_t j = 0; j < static_cast<size_t>(count); ++j) {
    mass_modes_[row0 + j] = mode;
    mass_offsets_[row0 + j] = mass_size_;
    mass_size_ += row_size;
  }
  return {offset, count, last_kv_len_, row_size};
}

int32_t StepBatch::add_tokens(const Sequence& s, int32_t n) {
  // The table's slots run behind the positions by what token eviction took out (K keeps the
  // RoPE of its original position; the new tokens' positions count on from the full length).
  const int32_t kv_len = s.num_computed - s.table.num_evicted_tokens() + n;
  builder_.add_sequence(s.table, kv_len, n);
  const auto row0 = static_cast<int32_t>(token_ids_.size());
  last_row0_ = row0;
  last_rows_ = n;
  last_kv_len_ = kv_len;
  for (int32_t j = 0; j < n; ++j) {
    token_ids_.push_back(s.tokens[static_cast<size_t>(s.num_computed) + static_cast<size_t>(j)]);
    positions_.push_back(s.num_computed + j);
  }
  q_indptr_.push_back(static_cast<int32_t>(token_ids_.size()));
  if (!mass_offsets_.empty()) {
    mass_offsets_.resize(token_ids_.size(), -1);
    mass_modes_.resize(token_ids_.size(), model::MassMode::kSum);
  }
  return row0;
}

int32_t StepBatch::add_sampled(const Sequence& s, int32_t n, const model::DeviceSampleSpec& spec) {
  STRATA_CHECK(!s.wants_all_rows() && s.num_computed + n == static_cast<int32_t>(s.tokens.size()),
               "add_sampled: the sequence must complete with one wanted row");
  const int32_t row0 = add_tokens(s, n);
  sample_rows_.push_back(row0 + n - 1);
  sample_specs_.push_back(spec);
  return static_cast<int32_t>(sample_rows_.size()) - 1;
}

int32_t StepBatch::add(const Sequence& s, int32_t n) {
  const int32_t row0 = add_tokens(s, n);
  const auto first_logits_row = static_cast<int32_t>(logits_rows_.size());
  if (s.wants_all_rows()) {
    for (int32_t j = 0; j < n; ++j) logits_rows_.push_back(row0 + j);
    return first_logits_row;
  }
  if (s.num_computed + n == static_cast<int32_t>(s.tokens.size())) {
    logits_rows_.push_back(row0 + n - 1);
    return first_logits_row;
  }
  return -1;
}

}  // namespace strata::engine
