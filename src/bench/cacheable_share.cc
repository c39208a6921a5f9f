#include "bench/cacheable_share.h"

#include "core/check.h"

namespace strata::bench {

PrefixBlockTrie::PrefixBlockTrie(int32_t block_size) : block_size_(block_size) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
}

size_t PrefixBlockTrie::KeyHash::operator()(const Key& k) const {
  // FNV-1a over the parent and the tokens; equality decides, this only spreads.
  uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(k.parent);
  for (const int32_t t : k.tokens) h = (h ^ static_cast<uint32_t>(t)) * 0x100000001b3ULL;
  return static_cast<size_t>(h ^ (h >> 29));
}

int64_t PrefixBlockTrie::find(int64_t parent, std::span<const int32_t> block) const {
  probe_.parent = parent;
  probe_.tokens.assign(block.begin(), block.end());
  const auto it = nodes_.find(probe_);
  return it == nodes_.end() ? -1 : it->second;
}

void PrefixBlockTrie::add(std::span<const int32_t> tokens) {
  int64_t parent = -1;
  const size_t bs = static_cast<size_t>(block_size_);
  for (size_t begin = 0; begin + bs <= tokens.size(); begin += bs) {
    const std::span<const int32_t> block = tokens.subspan(begin, bs);
    const int64_t child = find(parent, block);
    if (child >= 0) {
      parent = child;
      continue;
    }
    const auto id = static_cast<int64_t>(nodes_.size());
    nodes_.emplace(Key{parent, {block.begin(), block.end()}}, id);
    parent = id;
  }
}

int64_t PrefixBlockTrie::cacheable_tokens(std::span<const int32_t> prompt) const {
  if (prompt.empty()) return 0;
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t max_blocks = (prompt.size() - 1) / bs;
  int64_t parent = -1;
  size_t blocks = 0;
  while (blocks < max_blocks) {
    parent = find(parent, prompt.subspan(blocks * bs, bs));
    if (parent < 0) break;
    ++blocks;
  }
  return static_cast<int64_t>(blocks * bs);
}

CacheableShare compute_cacheable_share(std::span<const RequestTokens> requests,
                                       int32_t block_size) {
  PrefixBlockTrie trie(block_size);
  CacheableShare share;
  std::vector<int32_t> kv_tokens;
  for (const RequestTokens& r : requests) {
    share.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    share.cacheable_tokens += trie.cacheable_tokens(r.prompt);
    kv_tokens.assign(r.prompt.begin(), r.prompt.end());
    if (!r.output.empty()) kv_tokens.insert(kv_tokens.end(), r.output.begin(), r.output.end() - 1);
    trie.add(kv_tokens);
  }
  return share;
}

}  // namespace strata::bench
