#include "grammar/ebnf_nfa.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <unordered_map>
#include <utility>

namespace strata::grammar {
namespace {

using Kind = EbnfExpr::Kind;

constexpr int32_t kNoWay = -1;         // a fragment with no way through (cut at the depth bound)
constexpr int32_t kLooped = -2;        // every way through loops back to a rule of the tail chain
constexpr int32_t kMaxListItems = 16;  // the longest x of `x (s x)*` looked for
// The builder's recursion (expressions within expressions, through every open rule), so that a
// chain of rules each nesting groups deep cannot overflow the stack of the thread compiling it.
constexpr int32_t kMaxBuildNesting = 1000;

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

  bool cut() const { return cut_; }

  Result<Nfa> build(const EbnfExpr& start) {
    const int32_t from = state();
    const int32_t end = expr(start, from, /*tail=*/false);
    if (!error_.ok()) return error_;
    // No way through: the automaton of the empty language (its start can never accept).
    nfa_.accept = end < 0 ? state() : end;
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

  // Builds e from state `from`; returns its end state, kNoWay, or kLooped. `tail`: nothing of
  // the rule being built follows e (a rule reference there may loop back, below).
  int32_t expr(const EbnfExpr& e, int32_t from, bool tail) {
    if (!error_.ok()) return kNoWay;
    if (++work_ > max_work_) {
      exhausted("grammar: its expansion passes " + std::to_string(max_work_) + " steps");
      return kNoWay;
    }
    if (nesting_ >= kMaxBuildNesting) {
      exhausted("grammar: rules and groups nested more than " + std::to_string(kMaxBuildNesting) +
                " deep in its expansion");
      return kNoWay;
    }
    ++nesting_;
    const int32_t end = build(e, from, tail);
    --nesting_;
    return end;
  }

  int32_t build(const EbnfExpr& e, int32_t from, bool tail) {
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
        return sequence(as_sequence(e), from, &lists_of(e), tail);
      case Kind::kAlt:
        return alternatives(e, from, tail);
      case Kind::kRepeat:
        return repeat(e, from, tail);
      case Kind::kRule:
        return rule(e.rule, from, tail);
    }
    return kNoWay;
  }

  int32_t alternatives(const EbnfExpr& e, int32_t from, bool tail) {
    // A branch is joined only once it is built whole, so a cut one leaves no edge in.
    int32_t end = kNoWay;
    bool looped = false;
    for (const EbnfExpr& item : e.items) {
      const int32_t start = state();
      const int32_t to = expr(item, start, tail);
      if (to == kNoWay || !error_.ok()) continue;
      epsilon(from, start);
      if (to == kLooped) {
        looped = true;
        continue;
      }
      if (end < 0) end = state();
      epsilon(to, end);
    }
    return end >= 0 ? end : looped ? kLooped : kNoWay;
  }

  // A reference to rule r. In tail position, a rule of the current tail chain (the rules
  // entered in tail position since the last call that had something left to do) is a loop back
  // to that rule's entry: its end is this end, so no copy is needed and right recursion is
  // exact. Any other reference inlines the rule's body, counting against the depth bound; one
  // that has something left to do starts a new chain.
  int32_t rule(int32_t r, int32_t from, bool tail) {
    if (tail) {
      for (const ChainLink& link : chain_) {
        if (link.rule != r) continue;
        epsilon(from, link.entry);
        return kLooped;
      }
    }
    int32_t& open = open_[static_cast<size_t>(r)];
    if (open > limits_.max_depth) {  // the depth bound: this derivation is cut
      cut_ = true;
      return kNoWay;
    }
    if (num_open_ >= limits_.max_open_rules) {
      exhausted("grammar: rules nested more than " + std::to_string(limits_.max_open_rules) +
                " deep");
      return kNoWay;
    }
    std::vector<ChainLink> outer;
    if (!tail) outer.swap(chain_);
    const int32_t entry = state();  // fresh: only the body leaves it, so loops may enter it
    epsilon(from, entry);
    chain_.push_back({r, entry});
    ++open, ++num_open_;
    int32_t end = expr(g_.rules[static_cast<size_t>(r)], entry, /*tail=*/true);
    --open, --num_open_;
    chain_.pop_back();
    if (!tail) {
      chain_.swap(outer);
      if (end == kLooped) end = kNoWay;  // every way loops inside the body: none comes out
    }
    return end;
  }

  int32_t repeat(const EbnfExpr& e, int32_t from, bool tail) {
    const EbnfExpr& item = e.items.front();
    if (e.max == 1) {  // x? or x{1}: x is in tail position where the repetition is
      const int32_t to = expr(item, from, tail);
      if (e.min == 1 || !error_.ok()) return to;
      const int32_t end = state();
      epsilon(from, end);
      if (to >= 0) epsilon(to, end);
      return end;
    }
    int32_t at = from;
    for (int32_t i = 0; i < e.min; ++i) {
      at = expr(item, at, false);
      if (at == kNoWay) return kNoWay;
    }
    if (e.max < 0) {  // a loop from a fresh state, so that nothing else at `at` repeats
      const int32_t loop = state();
      epsilon(at, loop);
      const int32_t back = expr(item, loop, false);
      if (back >= 0) epsilon(back, loop);
      return loop;
    }
    if (e.max == e.min) return at;
    const int32_t end = state();
    for (int32_t i = e.min; i < e.max; ++i) {
      epsilon(at, end);
      at = expr(item, at, false);
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

  // list_at for each item of a sequence node, found once per node (the node is built once per
  // expansion of its rule).
  const std::vector<size_t>& lists_of(const EbnfExpr& concat) {
    const auto [it, fresh] = lists_.try_emplace(&concat);
    if (fresh) {
      const std::vector<const EbnfExpr*> items = as_sequence(concat);
      it->second.resize(items.size(), 0);
      for (size_t j = 0; j + 1 < items.size(); ++j) it->second[j] = list_at(items, j);
    }
    return it->second;
  }

  // lists: list_at of each item, or null to build the items as they are (a list's pieces).
  int32_t sequence(const std::vector<const EbnfExpr*>& items, int32_t from,
                   const std::vector<size_t>* lists, bool tail) {
    int32_t at = from;
    for (size_t j = 0; j < items.size() && at >= 0; ++j) {
      const size_t k = lists != nullptr ? (*lists)[j] : 0;
      if (k == 0) {
        at = expr(*items[j], at, tail && j + 1 == items.size());
        continue;
      }
      // x (s x)*: head -> x -> tail, tail -> s -> head (a fresh state: only x leaves it).
      const int32_t head = state();
      epsilon(at, head);
      const std::vector<const EbnfExpr*> x(items.begin() + static_cast<std::ptrdiff_t>(j),
                                           items.begin() + static_cast<std::ptrdiff_t>(j + k));
      const int32_t tail_end = sequence(x, head, nullptr, false);
      if (tail_end < 0) return kNoWay;
      const std::vector<const EbnfExpr*> body = as_sequence(items[j + k]->items.front());
      const std::vector<const EbnfExpr*> s(body.begin(),
                                           body.end() - static_cast<std::ptrdiff_t>(k));
      const int32_t back = sequence(s, tail_end, nullptr, false);
      if (back >= 0) epsilon(back, head);
      at = tail_end;
      j += k;
    }
    return at;
  }

  const EbnfGrammar& g_;
  const EbnfLimits& limits_;
  int64_t max_states_, max_work_;
  int64_t work_ = 0;
  struct ChainLink {
    int32_t rule = 0;
    int32_t entry = 0;  // the state its inlined body starts from
  };
  std::vector<ChainLink> chain_;  // the current tail chain, outermost first
  std::vector<int32_t> open_;     // [rule]: how many expansions of it are open
  std::unordered_map<const EbnfExpr*, std::vector<size_t>> lists_;
  int32_t num_open_ = 0;
  int32_t nesting_ = 0;  // expr calls open
  bool cut_ = false;
  Nfa nfa_;
  Status error_;
};

// Appends the rules e refers to.
void references(const EbnfExpr& e, std::vector<int32_t>& out) {
  if (e.kind == Kind::kRule) out.push_back(e.rule);
  for (const EbnfExpr& item : e.items) references(item, out);
}

EbnfExpr literal(std::string bytes) {
  EbnfExpr e;
  e.kind = Kind::kBytes;
  e.bytes = std::move(bytes);
  return e;
}

}  // namespace

Result<Nfa> ebnf_nfa(const EbnfGrammar& grammar, const EbnfExpr& start, const EbnfLimits& limits,
                     int64_t max_nfa_states, bool* cut) {
  Builder builder(grammar, limits, max_nfa_states);
  Result<Nfa> nfa = builder.build(start);
  if (cut != nullptr) *cut = builder.cut();
  return nfa;
}

Result<Nfa> compile_ebnf(std::string_view text, const EbnfMarkers& markers,
                         const EbnfLimits& limits, int64_t max_nfa_states, bool* cut) {
  Result<EbnfGrammar> grammar = parse_ebnf(text, limits);
  if (!grammar.ok()) return grammar.status();
  rewrite_left_recursion(*grammar);
  const std::vector<bool> empty = empty_rules(*grammar);
  if (empty[static_cast<size_t>(grammar->root)]) {
    // Name the last rule that never ends found from root (root itself when it is alone).
    int32_t culprit = grammar->root;
    std::vector<bool> seen(empty.size(), false);
    std::vector<int32_t> stack = {grammar->root};
    while (!stack.empty()) {
      const int32_t r = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(r)] || !empty[static_cast<size_t>(r)]) continue;
      seen[static_cast<size_t>(r)] = true;
      culprit = r;
      references(grammar->rules[static_cast<size_t>(r)], stack);
    }
    return Status::InvalidArgument(
        "the grammar's language is empty: no derivation of 'root' ends (rule '" +
        grammar->names[static_cast<size_t>(culprit)] +
        "' has no alternative without a rule that never ends)");
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
  return ebnf_nfa(*grammar, start, limits, max_nfa_states, cut);
}

Result<EbnfDfa> compile_ebnf_dfa(std::string_view text, const EbnfMarkers& markers,
                                 const EbnfLimits& limits, int64_t max_nfa_states,
                                 int32_t max_dfa_states) {
  std::optional<EbnfDfa> kept;
  EbnfLimits at = limits;
  for (at.max_depth = 0; at.max_depth <= limits.max_depth; ++at.max_depth) {
    bool cut = false;
    Result<Nfa> nfa = compile_ebnf(text, markers, at, max_nfa_states, &cut);
    Result<ByteDfa> dfa =
        nfa.ok() ? ByteDfa::build(*nfa, max_dfa_states) : Result<ByteDfa>(nfa.status());
    if (!dfa.ok()) {
      if (dfa.status().code() != StatusCode::kResourceExhausted) return dfa.status();
      if (!kept) {
        return nfa.ok() ? Status::ResourceExhausted("grammar: its DFA passes " +
                                                    std::to_string(max_dfa_states) + " states")
                        : dfa.status();
      }
      break;  // the previous depth is the deepest that fits
    }
    kept = EbnfDfa{std::move(dfa).value(), at.max_depth, cut};
    if (!cut) break;  // no recursion reached the bound: deeper builds the same automaton
  }
  return std::move(*kept);
}

}  // namespace strata::grammar
