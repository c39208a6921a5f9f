#include "grammar/token_masker.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <utility>

namespace strata::grammar {

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())), token_bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const size_t bytes = token_bytes_[static_cast<size_t>(id)].size();
    if (bytes > 0) order.push_back(id);
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(bytes));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[static_cast<size_t>(a)] < token_bytes_[static_cast<size_t>(b)];
  });
  // Breadth first over ranges of the sorted ids sharing a prefix of `depth` bytes, so that a
  // node's children are made together, contiguous and in byte order.
  struct Pending {
    int32_t node;
    size_t begin, end, depth;
  };
  nodes_.push_back(Node{});
  std::vector<Pending> level = {{0, 0, order.size(), 0}};
  while (!level.empty()) {
    std::vector<Pending> next;
    for (const Pending& p : level) {
      size_t i = p.begin;
      Node& node = nodes_[static_cast<size_t>(p.node)];
      node.first_token = static_cast<int32_t>(ids_.size());
      while (i < p.end && token_bytes_[static_cast<size_t>(order[i])].size() == p.depth) {
        ids_.push_back(order[i++]);
      }
      nodes_[static_cast<size_t>(p.node)].num_tokens =
          static_cast<int32_t>(ids_.size()) - nodes_[static_cast<size_t>(p.node)].first_token;
      nodes_[static_cast<size_t>(p.node)].first_child = static_cast<int32_t>(nodes_.size());
      while (i < p.end) {
        const auto byte =
            static_cast<uint8_t>(token_bytes_[static_cast<size_t>(order[i])][p.depth]);
        size_t j = i;
        while (j < p.end &&
               static_cast<uint8_t>(token_bytes_[static_cast<size_t>(order[j])][p.depth]) == byte) {
          ++j;
        }
        const auto child = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{.byte = byte});
        ++nodes_[static_cast<size_t>(p.node)].num_children;
        next.push_back({child, i, j, p.depth + 1});
        i = j;
      }
    }
    level = std::move(next);
  }
}

int32_t TokenMask::count() const {
  int32_t n = 0;
  for (const uint64_t w : words) n += std::popcount(w);
  return n;
}

std::shared_ptr<const TokenMask> MaskCache::find(int32_t state) {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(state);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void MaskCache::insert(int32_t state, std::shared_ptr<const TokenMask> mask) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (index_.contains(state)) return;  // another thread walked it too
  if (lru_.size() >= capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(state, std::move(mask));
  index_[state] = lru_.begin();
}

size_t MaskCache::size() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

TokenMasker::TokenMasker(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const VocabTrie> vocab,
                         std::shared_ptr<MaskCache> cache,
                         std::shared_ptr<const std::vector<int32_t>> mask_keys)
    : dfa_(std::move(dfa)),
      vocab_(std::move(vocab)),
      cache_(cache ? std::move(cache) : std::make_shared<MaskCache>()),
      mask_keys_(mask_keys && !mask_keys->empty() ? std::move(mask_keys) : nullptr) {}

std::shared_ptr<const TokenMask> TokenMasker::mask(int32_t state) {
  const int32_t key = mask_keys_ ? (*mask_keys_)[static_cast<size_t>(state)] : state;
  if (std::shared_ptr<const TokenMask> m = cache_->find(key)) return m;
  auto m = std::make_shared<TokenMask>();
  compute(state, *m);
  ++num_computed_;
  cache_->insert(key, m);
  return m;
}

void TokenMasker::compute(int32_t state, TokenMask& out) const {
  out.words.assign((static_cast<size_t>(vocab_->vocab_size()) + 63) / 64, 0);
  if (state == ByteDfa::kDead) return;
  const std::vector<VocabTrie::Node>& nodes = vocab_->nodes();
  const std::vector<int32_t>& ids = vocab_->ids();
  // Depth first: (node, the DFA state after its bytes), children visited only from live states.
  std::vector<std::pair<int32_t, int32_t>> stack = {{0, state}};
  while (!stack.empty()) {
    const auto [n, s] = stack.back();
    stack.pop_back();
    const VocabTrie::Node& node = nodes[static_cast<size_t>(n)];
    for (int32_t t = node.first_token; t < node.first_token + node.num_tokens; ++t) {
      const auto id = static_cast<size_t>(ids[static_cast<size_t>(t)]);
      out.words[id / 64] |= uint64_t{1} << (id % 64);
    }
    for (int32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      const int32_t to = dfa_->next(s, nodes[static_cast<size_t>(c)].byte);
      if (to != ByteDfa::kDead) stack.emplace_back(c, to);
    }
  }
}

}  // namespace strata::grammar
