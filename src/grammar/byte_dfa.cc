#include "grammar/byte_dfa.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <string>

namespace strata::grammar {
namespace {

// The epsilon closure of set (sorted on return), with a visit mark per NFA state.
void close(const Nfa& nfa, std::vector<int32_t>& set, std::vector<uint32_t>& mark, uint32_t stamp) {
  std::vector<int32_t> stack(set.begin(), set.end());
  for (const int32_t s : set) mark[static_cast<size_t>(s)] = stamp;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (const Nfa::Edge& e : nfa.edges[static_cast<size_t>(s)]) {
      if (!e.epsilon || mark[static_cast<size_t>(e.to)] == stamp) continue;
      mark[static_cast<size_t>(e.to)] = stamp;
      set.push_back(e.to);
      stack.push_back(e.to);
    }
  }
  std::sort(set.begin(), set.end());
}

}  // namespace

Result<ByteDfa> ByteDfa::build(const Nfa& nfa, int32_t max_states) {
  ByteDfa dfa;
  // Byte classes: a new class starts at every edge's lo and after every edge's hi.
  std::array<bool, 257> starts{};
  starts[0] = true;
  for (const auto& edges : nfa.edges) {
    for (const Nfa::Edge& e : edges) {
      if (e.epsilon) continue;
      starts[e.lo] = true;
      starts[static_cast<size_t>(e.hi) + 1] = true;
    }
  }
  std::vector<uint8_t> representative;
  for (int b = 0; b < 256; ++b) {
    if (starts[static_cast<size_t>(b)]) representative.push_back(static_cast<uint8_t>(b));
    dfa.class_of_[static_cast<size_t>(b)] = static_cast<uint8_t>(representative.size() - 1);
  }
  dfa.num_classes_ = static_cast<int32_t>(representative.size());
  const auto classes = static_cast<size_t>(dfa.num_classes_);

  std::vector<uint32_t> mark(static_cast<size_t>(nfa.num_states()), 0);
  uint32_t stamp = 0;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  const auto intern = [&](std::vector<int32_t> set) -> int32_t {
    const auto [it, fresh] = ids.emplace(std::move(set), static_cast<int32_t>(sets.size()));
    if (fresh) {
      sets.push_back(it->first);
      dfa.table_.resize(sets.size() * classes, kDead);
    }
    return it->second;
  };
  intern({});  // the dead state
  std::vector<int32_t> start = {0};
  close(nfa, start, mark, ++stamp);
  dfa.start_ = intern(std::move(start));
  for (size_t s = 1; s < sets.size(); ++s) {
    if (static_cast<int64_t>(sets.size()) > max_states) {
      return Status::ResourceExhausted("regex: its automaton passes " + std::to_string(max_states) +
                                       " states");
    }
    for (size_t c = 0; c < classes; ++c) {
      const uint8_t byte = representative[c];
      std::vector<int32_t> moved;
      ++stamp;
      for (const int32_t n : sets[s]) {
        for (const Nfa::Edge& e : nfa.edges[static_cast<size_t>(n)]) {
          if (e.epsilon || byte < e.lo || byte > e.hi) continue;
          if (mark[static_cast<size_t>(e.to)] == stamp) continue;
          mark[static_cast<size_t>(e.to)] = stamp;
          moved.push_back(e.to);
        }
      }
      close(nfa, moved, mark, ++stamp);
      const int32_t to = intern(std::move(moved));
      dfa.table_[s * classes + c] = to;
    }
  }
  const size_t n = sets.size();
  dfa.accepting_.assign(n, false);
  for (size_t s = 0; s < n; ++s) {
    dfa.accepting_[s] = std::binary_search(sets[s].begin(), sets[s].end(), nfa.accept);
  }
  // States that cannot reach an accepting one become the dead state.
  std::vector<std::vector<int32_t>> into(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < classes; ++c) {
      into[static_cast<size_t>(dfa.table_[s * classes + c])].push_back(static_cast<int32_t>(s));
    }
  }
  std::vector<bool> live(n, false);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s) {
    if (dfa.accepting_[s]) {
      live[s] = true;
      stack.push_back(static_cast<int32_t>(s));
    }
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (const int32_t p : into[static_cast<size_t>(s)]) {
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = true;
        stack.push_back(p);
      }
    }
  }
  for (int32_t& to : dfa.table_) {
    if (!live[static_cast<size_t>(to)]) to = kDead;
  }
  if (!live[static_cast<size_t>(dfa.start_)]) dfa.start_ = kDead;
  return dfa;
}

int32_t ByteDfa::walk(int32_t state, std::string_view bytes) const {
  for (const char c : bytes) {
    if (state == kDead) return kDead;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

namespace {

// FNV-1a over a signature's classes.
struct SignatureHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 14695981039346656037ull;
    for (const int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

std::vector<int32_t> ByteDfa::liveness_classes(int32_t depth, int64_t max_work) const {
  const auto n = static_cast<size_t>(num_states());
  const auto classes = static_cast<size_t>(num_classes_);
  if (static_cast<int64_t>(n) * num_classes_ * std::max(depth, 1) > max_work) return {};
  std::vector<int32_t> cls(n);
  for (size_t s = 0; s < n; ++s) cls[s] = s == static_cast<size_t>(kDead) ? 0 : 1;
  int32_t count = n > 1 ? 2 : 1;
  std::vector<int32_t> signature(classes + 1);
  for (int32_t round = 0; round < depth; ++round) {
    // A state's next class: its class and its successors' classes, numbered in order of first
    // appearance from state 0 (so the dead state stays class 0).
    std::unordered_map<std::vector<int32_t>, int32_t, SignatureHash> ids;
    ids.reserve(n);
    std::vector<int32_t> next(n);
    for (size_t s = 0; s < n; ++s) {
      signature[0] = cls[s];
      for (size_t c = 0; c < classes; ++c) signature[c + 1] = cls[static_cast<size_t>(table_[s * classes + c])];
      next[s] = ids.try_emplace(signature, static_cast<int32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (static_cast<int32_t>(ids.size()) == count) break;  // a fixed point: no round splits more
    count = static_cast<int32_t>(ids.size());
  }
  return cls;
}

}  // namespace strata::grammar
