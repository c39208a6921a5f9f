#include "engine/output_constraint.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::engine {

OutputConstraint::OutputConstraint(const std::shared_ptr<const grammar::CompiledGrammar>& grammar,
                                   std::shared_ptr<const grammar::VocabTrie> vocab,
                                   std::vector<int32_t> end_tokens, int32_t vocab_size)
    : masker_(grammar->dfa, std::move(vocab), grammar->masks, grammar->mask_keys),
      end_tokens_(std::move(end_tokens)),
      vocab_size_(vocab_size),
      state_(grammar->dfa->start()) {}

bool OutputConstraint::ends(int32_t token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

OutputConstraint::Next OutputConstraint::allowed(std::vector<uint64_t>& allowed) {
  allowed.resize((static_cast<size_t>(vocab_size_) + 63) / 64);
  return this->allowed(std::span<uint64_t>(allowed));
}

OutputConstraint::Next OutputConstraint::allowed(std::span<uint64_t> allowed) {
  const std::shared_ptr<const grammar::TokenMask> mask = masker_.mask(state_);
  const size_t words = (static_cast<size_t>(vocab_size_) + 63) / 64;
  STRATA_CHECK(allowed.size() == words, "OutputConstraint: a mask of the wrong size");
  std::fill(allowed.begin(), allowed.end(), 0);
  // The trie's vocabulary is the tokenizer's; the model's may be larger (padded rows), and
  // those ids are never allowed.
  const size_t shared = std::min(words, mask->words.size());
  std::copy_n(mask->words.begin(), shared, allowed.begin());
  if (words * 64 > static_cast<size_t>(vocab_size_) && shared == words) {
    allowed.back() &= (uint64_t{1} << (vocab_size_ % 64)) - 1;
  }
  const bool any = std::any_of(allowed.begin(), allowed.end(), [](uint64_t w) { return w != 0; });
  if (!complete()) return any ? Next::kSample : Next::kDeadEnd;
  if (!any) return Next::kComplete;
  for (const int32_t id : end_tokens_) {
    if (id >= 0 && id < vocab_size_) allowed[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
  return Next::kSample;
}

void OutputConstraint::advance(int32_t token) {
  state_ = masker_.advance(state_, token);
  STRATA_CHECK(state_ != grammar::ByteDfa::kDead,
               "OutputConstraint: a token outside the mask was sampled");
}

}  // namespace strata::engine
