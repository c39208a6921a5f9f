#include "grammar/ebnf_nfa.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace strata::grammar {
namespace {

using Kind = EbnfExpr::Kind;

constexpr int32_t kNoWay = -1;  // a fragment with no way through (cut at the depth bound)
constexpr int32_t kMaxListItems = 16;  // the longest x of `x (s x)*` looked for

bool is_star(const EbnfExpr& e) { return e.kind == Kind::kRepeat && e.min == 0 && e.max < 0; }

// The items of e as a sequence (one item, unless it is one).
std::vector<const EbnfExpr*> as_sequence(const EbnfExpr& e) {
  std::vector<const EbnfExpr*> out;
  if (e.kind == Kind::kConcat) {
    for (const EbnfExpr& i : e.items) out.push_back(&i);
  } else {
    out.push_back(&e);
  }
  return out;
}

// Thompson construction over the grammar, inlining rules to the depth bound.
class Builder {
 public:
  Builder(const EbnfGrammar& g, const EbnfLimits& limits, int64_t max_nfa_states)
      : g_(g),
        limits_(limits),
        max_states_(max_nfa_states),
        max_work_(4 * max_nfa_states),
        open_(g.rules.size(), 0) {}

  Result<Nfa> build(const EbnfExpr& start) {
    const int32_t from = state();
    const int32_t end = expr(start, from);
    if (!error_.ok()) return error_;
    // No way through: the automaton of the empty language (its start can never accept).
    nfa_.accept = end == kNoWay ? state() : end;
    if (!error_.ok()) return error_;
    return std::move(nfa_);
  }

 private:
  void exhausted(const std::string& what) {
    if (error_.ok()) error_ = Status::ResourceExhausted(what);
  }
  int32_t state() {
    if (static_cast<int64_t>(nfa_.edges.size()) >= max_states_) {
      exhausted("grammar: its expansion passes " + std::to_string(max_states_) +
                " automaton states");
      return 0;
    }
    nfa_.edges.emplace_back();
    return static_cast<int32_t>(nfa_.edges.size()) - 1;
  }
  void epsilon(int32_t from, int32_t to) {
    if (error_.ok()) nfa_.edges[static_cast<size_t>(from)].push_back({to, 0, 0, true});
  }
  void bytes(int32_t from, int32_t to, uint8_t lo, uint8_t hi) {
    if (error_.ok()) nfa_.edges[static_cast<size_t>(from)].push_back({to, lo, hi, false});
  }

  // Builds e from state `from`; returns its end state, or kNoWay.
  int32_t expr(const EbnfExpr& e, int32_t from) {
    if (!error_.ok()) return kNoWay;
    if (++work_ > max_work_) {
      exhausted("grammar: its expansion passes " + std::to_string(max_work_) + " steps");
      return kNoWay;
    }
    switch (e.kind) {
      case Kind::kBytes: {
        int32_t at = from;
        for (const char c : e.bytes) {
          const int32_t to = state();
          bytes(at, to, static_cast<uint8_t>(c), static_cast<uint8_t>(c));
          at = to;
        }
        return at;
      }
      case Kind::kSet: {
        const int32_t end = state();
        for (const Utf8Sequence& seq : utf8_sequences(e.set)) {
          int32_t at = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int32_t to = i + 1 == seq.size() ? end : state();
            bytes(at, to, seq[i].first, seq[i].second);
            at = to;
          }
        }
        return end;
      }
      case Kind::kConcat:
        return sequence(as_sequence(e), from);
      case Kind::kAlt: {
        // A branch is joined only once it is built whole, so a cut one leaves no edge in.
        int32_t end = kNoWay;
        for (const EbnfExpr& item : e.items) {
          const int32_t start = state();
          const int32_t to = expr(item, start);
          if (to == kNoWay || !error_.ok()) continue;
          if (end == kNoWay) end = state();
          epsilon(from, start);
          epsilon(to, end);
        }
        return end;
      }
      case Kind::kRepeat:
        return repeat(e, from);
      case Kind::kRule:
        return rule(e.rule, from);
    }
    return kNoWay;
  }

  int32_t rule(int32_t r, int32_t from) {
    int32_t& open = open_[static_cast<size_t>(r)];
    if (open > limits_.max_depth) return kNoWay;  // the depth bound: this derivation is cut
    if (num_open_ >= limits_.max_open_rules) {
      exhausted("grammar: rules nested more than " + std::to_string(limits_.max_open_rules) +
                " deep");
      return kNoWay;
    }
    ++open, ++num_open_;
    const int32_t end = expr(g_.rules[static_cast<size_t>(r)], from);
    --open, --num_open_;
    return end;
  }

  int32_t repeat(const EbnfExpr& e, int32_t from) {
    const EbnfExpr& item = e.items.front();
    int32_t at = from;
    for (int32_t i = 0; i < e.min; ++i) {
      at = expr(item, at);
      if (at == kNoWay) return kNoWay;
    }
    if (e.max < 0) {  // a loop from a fresh state, so that nothing else at `at` repeats
      const int32_t loop = state();
      epsilon(at, loop);
      const int32_t back = expr(item, loop);
      if (back != kNoWay) epsilon(back, loop);
      return loop;
    }
    if (e.max == e.min) return at;
    const int32_t end = state();
    for (int32_t i = e.min; i < e.max; ++i) {
      epsilon(at, end);
      at = expr(item, at);
      if (at == kNoWay) return end;
    }
    epsilon(at, end);
    return end;
  }

  // The length k of the longest x such that items[j..j+k) is x and items[j+k] is (s x)*.
  static size_t list_at(const std::vector<const EbnfExpr*>& items, size_t j) {
    for (size_t k = std::min<size_t>(kMaxListItems, items.size() - j - 1); k >= 1; --k) {
      const EbnfExpr& star = *items[j + k];
      if (!is_star(star)) continue;
      const std::vector<const EbnfExpr*> body = as_sequence(star.items.front());
      if (body.size() < k) continue;
      bool same = true;
      for (size_t i = 0; i < k && same; ++i) same = *body[body.size() - k + i] == *items[j + i];
      if (same) return k;
    }
    return 0;
  }

  int32_t sequence(const std::vector<const EbnfExpr*>& items, int32_t from) {
    int32_t at = from;
    for (size_t j = 0; j < items.size() && at != kNoWay; ++j) {
      const size_t k = j + 1 < items.size() ? list_at(items, j) : 0;
      if (k == 0) {
        at = expr(*items[j], at);
        continue;
      }
      // x (s x)*: head -> x -> tail, tail -> s -> head (a fresh state: only x leaves it).
      const int32_t head = state();
      epsilon(at, head);
      const std::vector<const EbnfExpr*> x(items.begin() + static_cast<std::ptrdiff_t>(j),
                                           items.begin() + static_cast<std::ptrdiff_t>(j + k));
      const int32_t tail = sequence(x, head);
      if (tail == kNoWay) return kNoWay;
      const std::vector<const EbnfExpr*> body = as_sequence(items[j + k]->items.front());
      const std::vector<const EbnfExpr*> s(body.begin(), body.end() - static_cast<std::ptrdiff_t>(k));
      const int32_t back = sequence(s, tail);
      if (back != kNoWay) epsilon(back, head);
      at = tail;
      j += k;
    }
    return at;
  }

  const EbnfGrammar& g_;
  const EbnfLimits& limits_;
  int64_t max_states_, max_work_;
  int64_t work_ = 0;
  std::vector<int32_t> open_;  // [rule]: how many expansions of it are open
  int32_t num_open_ = 0;
  Nfa nfa_;
  Status error_;
};

EbnfExpr literal(std::string bytes) {
  EbnfExpr e;
  e.kind = Kind::kBytes;
  e.bytes = std::move(bytes);
  return e;
}

}  // namespace

Result<Nfa> ebnf_nfa(const EbnfGrammar& grammar, const EbnfExpr& start, const EbnfLimits& limits,
                     int64_t max_nfa_states) {
  return Builder(grammar, limits, max_nfa_states).build(start);
}

Result<Nfa> compile_ebnf(std::string_view text, const EbnfMarkers& markers,
                         const EbnfLimits& limits, int64_t max_nfa_states) {
  Result<EbnfGrammar> grammar = parse_ebnf(text, limits);
  if (!grammar.ok()) return grammar.status();
  rewrite_left_recursion(*grammar);
  const std::vector<bool> empty = empty_rules(*grammar);
  if (empty[static_cast<size_t>(grammar->root)]) {
    std::string why = "the grammar's language is empty: no derivation of 'root' ends";
    for (size_t r = 0; r < empty.size(); ++r) {
      if (empty[r] && static_cast<int32_t>(r) != grammar->root) {
        why += " (rule '" + grammar->names[r] + "' never ends: every alternative refers to itself)";
        break;
      }
    }
    return Status::InvalidArgument(why);
  }
  // prefix root suffix, and with `repeated` one or more of those joined by the separator.
  EbnfExpr root;
  root.kind = Kind::kRule;
  root.rule = grammar->root;
  EbnfExpr one;
  one.kind = Kind::kConcat;
  if (!markers.prefix.empty()) one.items.push_back(literal(markers.prefix));
  one.items.push_back(std::move(root));
  if (!markers.suffix.empty()) one.items.push_back(literal(markers.suffix));
  EbnfExpr start = one;
  if (markers.repeated) {
    EbnfExpr more;
    more.kind = Kind::kRepeat;
    more.min = 0;
    more.max = -1;
    EbnfExpr body;
    body.kind = Kind::kConcat;
    body.items.push_back(literal(markers.separator));
    body.items.insert(body.items.end(), one.items.begin(), one.items.end());
    more.items.push_back(std::move(body));
    start.items.push_back(std::move(more));
  }
  return ebnf_nfa(*grammar, start, limits, max_nfa_states);
}

}  // namespace strata::grammar
