#pragma once
// ByteDfa: a regex's NFA (regex.h) made deterministic over bytes, for constrained decoding to
// walk a token's bytes in one table lookup each (docs/grammar.md).
//
// Built whole by subset construction over byte classes (bytes no edge of the NFA tells apart
// share a column), so a state costs 4 bytes per class; a state from which no accepting state can
// be reached is merged into the dead state, so a live state always has a way to finish. Immutable
// once built: thread-safe to read.

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/regex.h"

namespace strata::grammar {

class ByteDfa {
 public:
  static constexpr int32_t kDead = 0;  // no continuation matches

  // ResourceExhausted when it would take more than max_states states.
  static Result<ByteDfa> build(const Nfa& nfa, int32_t max_states = 1 << 16);

  int32_t start() const { return start_; }
  int32_t next(int32_t state, uint8_t byte) const {
    return table_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
  }
  // The state after bytes from state (kDead as soon as one fails).
  int32_t walk(int32_t state, std::string_view bytes) const;
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)]; }
  // True when the whole of bytes matches.
  bool matches(std::string_view bytes) const { return accepting(walk(start_, bytes)); }

  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }

  // Each state's class under `depth`-bounded liveness: two states share a class exactly when
  // every byte string of at most depth bytes stays live from both or dies from both (partition
  // refinement, depth rounds at most, stopping at a fixed point). A token of at most depth
  // bytes is then allowed at one exactly where it is at the other, so a class has one token
  // mask: [a-z]{1000}'s thousand counting states are one class past the longest token. The dead
  // state is class 0. Empty when the work (states x classes x rounds) would pass `max_work`.
  std::vector<int32_t> liveness_classes(int32_t depth, int64_t max_work = int64_t{1} << 27) const;
  int32_t num_classes() const { return num_classes_; }

 private:
  ByteDfa() = default;

  std::array<uint8_t, 256> class_of_{};
  int32_t num_classes_ = 0;
  int32_t start_ = kDead;
  std::vector<int32_t> table_;   // [state][class] -> state
  std::vector<bool> accepting_;  // [state]
};

}  // namespace strata::grammar
