#pragma once
// Cacheable share: the fraction of a workload's prompt tokens that a prefix cache of unlimited
// size could serve, the ceiling of the engine's prefix hit rate.
//
// A request's cacheable tokens are the longest prefix of its prompt, in whole blocks of
// block_size, that equals a prefix of the tokens an earlier request had put in the cache: its
// prompt once it was submitted, and its prompt + output (without the last output token, whose
// K/V is never computed) once it finished. Like the engine's lookup, it leaves at least the
// prompt's last token to compute: at most floor((prompt_len - 1) / block_size) blocks.
//
// PrefixBlockTrie holds every block chain added so far, keyed exactly by (parent node, block
// tokens), so the answer is exact (no hash collisions). Cost: O(tokens) per add and per lookup;
// memory O(distinct blocks x block_size).

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace strata::bench {

class PrefixBlockTrie {
 public:
  explicit PrefixBlockTrie(int32_t block_size);

  // Adds the chain of every full block of tokens.
  void add(std::span<const int32_t> tokens);
  // Tokens of the prompt a cache holding the added chains serves (whole blocks, capped as above).
  int64_t cacheable_tokens(std::span<const int32_t> prompt) const;

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(nodes_.size()); }

 private:
  struct Key {
    int64_t parent;
    std::vector<int32_t> tokens;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // The child of parent for this block, or -1.
  int64_t find(int64_t parent, std::span<const int32_t> block) const;

  int32_t block_size_;
  std::unordered_map<Key, int64_t, KeyHash> nodes_;  // -> node id; the root is -1
  mutable Key probe_;                                // lookup scratch, saves an allocation
};

// Running tally over a run: cacheable tokens against prompt tokens.
struct CacheableShare {
  int64_t prompt_tokens = 0;
  int64_t cacheable_tokens = 0;
  double share() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(cacheable_tokens) / prompt_tokens;
  }
};

// One request of a finished run, in submission order.
struct RequestTokens {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
};

// The share for requests submitted one after another, each finishing before the next is
// submitted (so each earlier request's output counts). The bench driver tallies the same thing
// incrementally, with real submit and finish order.
CacheableShare compute_cacheable_share(std::span<const RequestTokens> requests, int32_t block_size);

}  // namespace strata::bench
