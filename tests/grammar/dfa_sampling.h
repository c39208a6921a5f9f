#pragma once
// Strings for testing automata: a random walk of a ByteDfa to an accepting state (a string it
// matches), and one-character mutations of a string (insert, delete, replace).

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"

namespace strata::grammar {

// Bytes from each state to the nearest accepting one (kDead: unreachable, the maximum).
inline std::vector<int32_t> distances_to_accept(const ByteDfa& dfa) {
  constexpr int32_t kFar = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> d(static_cast<size_t>(dfa.num_states()), kFar);
  for (int32_t s = 0; s < dfa.num_states(); ++s) {
    if (dfa.accepting(s)) d[static_cast<size_t>(s)] = 0;
  }
  for (bool changed = true; changed;) {  // Bellman-Ford over unit edges: the DFAs here are small
    changed = false;
    for (int32_t s = 1; s < dfa.num_states(); ++s) {
      for (int b = 0; b < 256; ++b) {
        const int32_t to = dfa.next(s, static_cast<uint8_t>(b));
        if (to == ByteDfa::kDead || d[static_cast<size_t>(to)] == kFar) continue;
        if (d[static_cast<size_t>(to)] + 1 < d[static_cast<size_t>(s)]) {
          d[static_cast<size_t>(s)] = d[static_cast<size_t>(to)] + 1;
          changed = true;
        }
      }
    }
  }
  return d;
}

// A random string the DFA matches: at each state a random live byte, stopping at an accepting
// state with probability 1/4; past max_len bytes it takes the bytes nearest to acceptance (far:
// distances_to_accept(dfa), computed here when not given).
inline std::string sample_match(const ByteDfa& dfa, std::mt19937& rng, size_t max_len,
                                const std::vector<int32_t>& distances = {}) {
  const std::vector<int32_t> far = distances.empty() ? distances_to_accept(dfa) : distances;
  std::string s;
  int32_t state = dfa.start();
  while (true) {
    if (dfa.accepting(state) && (s.size() >= max_len || rng() % 4 == 0)) return s;
    std::vector<uint8_t> live;
    for (int b = 0; b < 256; ++b) {
      const int32_t to = dfa.next(state, static_cast<uint8_t>(b));
      if (to == ByteDfa::kDead) continue;
      if (s.size() >= max_len && far[static_cast<size_t>(to)] >= far[static_cast<size_t>(state)]) {
        continue;
      }
      live.push_back(static_cast<uint8_t>(b));
    }
    if (live.empty()) return s;  // accepting with nowhere to go (a live state never has none)
    const uint8_t b = live[rng() % live.size()];
    s.push_back(static_cast<char>(b));
    state = dfa.next(state, b);
  }
}

inline std::vector<std::string> mutations(const std::string& s,
                                          const std::vector<std::string>& alphabet,
                                          std::mt19937& rng) {
  std::vector<std::string> out;
  const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
  const std::string& c = alphabet[rng() % alphabet.size()];
  out.push_back(s.substr(0, at) + c + s.substr(at));
  if (!s.empty()) {
    const size_t i = rng() % s.size();
    out.push_back(s.substr(0, i) + s.substr(i + 1));
    out.push_back(s.substr(0, i) + c + s.substr(i + 1));
  }
  return out;
}

}  // namespace strata::grammar
