#pragma once
// A reference for EBNF grammars (src/grammar/ebnf.h), written independently of the automaton:
// a backtracking matcher over the parsed grammar, and a random derivation of its texts, both
// bounded by the automaton's rule (ebnf_nfa.h): a reference in tail position to a rule of the
// current tail chain goes back to that rule's entry, with the counts and chain it had there;
// any other reference enters the rule if it is open at most max_depth times, and one with
// something left to do starts a new chain. Exponential in the worst case; for short strings and
// small grammars.

#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"
#include "grammar/ebnf.h"

namespace strata::grammar {

class EbnfReference {
 public:
  EbnfReference(const EbnfGrammar& g, int32_t max_depth) : g_(g), max_depth_(max_depth) {}

  bool matches(std::string_view s) {
    s_ = s;
    open_.assign(g_.rules.size(), 0);
    chain_.clear();
    EbnfExpr root;
    root.kind = EbnfExpr::Kind::kRule;
    root.rule = g_.root;
    return match(root, 0, false, [&](size_t end) { return end == s_.size(); });
  }

  // A random text of the grammar (derivations cut at the depth bound are backtracked), or
  // false when none was found within max_bytes.
  bool generate(std::mt19937& rng, size_t max_bytes, std::string& out) {
    rng_ = &rng;
    max_bytes_ = max_bytes;
    open_.assign(g_.rules.size(), 0);
    chain_.clear();
    out.clear();
    EbnfExpr root;
    root.kind = EbnfExpr::Kind::kRule;
    root.rule = g_.root;
    steps_ = 0;
    return gen(root, false, out);
  }

 private:
  using Next = std::function<bool(size_t)>;
  using Kind = EbnfExpr::Kind;

  struct Link {
    int32_t rule = 0;
    std::vector<int32_t> open;  // the counts just after it was entered
  };
  struct State {
    std::vector<int32_t> open;
    std::vector<Link> chain;
  };

  // Enters rule r (tail: in tail position) into the state; false where the depth bound cuts it.
  bool enter(int32_t r, bool tail) {
    if (tail) {
      for (size_t i = 0; i < chain_.size(); ++i) {
        if (chain_[i].rule != r) continue;
        open_ = chain_[i].open;  // back to the rule's entry, as the automaton's loop goes
        chain_.resize(i + 1);
        return true;
      }
    }
    if (open_[static_cast<size_t>(r)] > max_depth_) return false;
    if (!tail) chain_.clear();
    ++open_[static_cast<size_t>(r)];
    chain_.push_back({r, open_});
    return true;
  }

  bool match(const EbnfExpr& e, size_t i, bool tail, const Next& k) {
    switch (e.kind) {
      case Kind::kBytes:
        return s_.substr(i, e.bytes.size()) == e.bytes && k(i + e.bytes.size());
      case Kind::kSet: {
        const size_t len = i < s_.size() ? utf8_valid_length(s_, i) : 0;
        if (len == 0) return false;
        char32_t cp = 0;
        utf8_decode(s_, i, cp);
        return e.set.contains(static_cast<uint32_t>(cp)) && k(i + len);
      }
      case Kind::kConcat:
        return sequence(e, 0, i, tail, k);
      case Kind::kAlt:
        for (const EbnfExpr& item : e.items) {
          if (match(item, i, tail, k)) return true;
        }
        return false;
      case Kind::kRepeat:
        if (e.max == 1) return (e.min == 0 && k(i)) || match(e.items.front(), i, tail, k);
        return repeat(e, 0, i, k);
      case Kind::kRule: {
        State saved{open_, chain_};
        if (!enter(e.rule, tail)) return false;
        // What follows the rule runs in the caller's state again.
        const bool ok = match(g_.rules[static_cast<size_t>(e.rule)], i, true, [&](size_t j) {
          State inside{open_, chain_};
          open_ = saved.open, chain_ = saved.chain;
          const bool r = k(j);
          open_ = std::move(inside.open), chain_ = std::move(inside.chain);
          return r;
        });
        open_ = std::move(saved.open), chain_ = std::move(saved.chain);
        return ok;
      }
    }
    return false;
  }

  bool sequence(const EbnfExpr& e, size_t at, size_t i, bool tail, const Next& k) {
    if (at == e.items.size()) return k(i);
    return match(e.items[at], i, tail && at + 1 == e.items.size(),
                 [&](size_t j) { return sequence(e, at + 1, j, tail, k); });
  }

  bool repeat(const EbnfExpr& e, int32_t n, size_t i, const Next& k) {
    if (n >= e.min && k(i)) return true;
    if (e.max >= 0 && n >= e.max) return false;
    return match(e.items.front(), i, false, [&](size_t j) {
      if (j == i && n >= e.min) return false;  // an empty round adds nothing
      return repeat(e, n + 1, j, k);
    });
  }

  bool gen(const EbnfExpr& e, bool tail, std::string& out) {
    if (out.size() > max_bytes_ || ++steps_ > 100000) return false;
    switch (e.kind) {
      case Kind::kBytes:
        out += e.bytes;
        return true;
      case Kind::kSet: {
        const auto& ranges = e.set.ranges();
        const auto& [lo, hi] = ranges[(*rng_)() % ranges.size()];
        const uint32_t span = std::min<uint32_t>(hi - lo, 200);
        utf8_append(out, static_cast<char32_t>(lo + (*rng_)() % (span + 1)));
        return true;
      }
      case Kind::kConcat: {
        const size_t mark = out.size();
        for (size_t i = 0; i < e.items.size(); ++i) {
          if (!gen(e.items[i], tail && i + 1 == e.items.size(), out)) {
            out.resize(mark);
            return false;
          }
        }
        return true;
      }
      case Kind::kAlt: {
        std::vector<size_t> order(e.items.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), *rng_);
        for (const size_t i : order) {
          if (gen(e.items[i], tail, out)) return true;
        }
        return false;
      }
      case Kind::kRepeat: {
        if (e.max == 1) {
          if (e.min == 0 && (*rng_)() % 2 == 0) return true;
          return gen(e.items.front(), tail, out) || e.min == 0;
        }
        const int32_t extra = e.max < 0 ? static_cast<int32_t>((*rng_)() % 4)
                                        : static_cast<int32_t>((*rng_)() % (e.max - e.min + 1));
        const size_t mark = out.size();
        for (int32_t n = 0; n < e.min + extra; ++n) {
          if (!gen(e.items.front(), false, out)) {
            if (n >= e.min) return true;  // fewer rounds are a text too
            out.resize(mark);
            return false;
          }
        }
        return true;
      }
      case Kind::kRule: {
        State saved{open_, chain_};
        const bool ok =
            enter(e.rule, tail) && gen(g_.rules[static_cast<size_t>(e.rule)], true, out);
        open_ = std::move(saved.open), chain_ = std::move(saved.chain);
        return ok;
      }
    }
    return false;
  }

  const EbnfGrammar& g_;
  int32_t max_depth_;
  std::string_view s_;
  std::vector<int32_t> open_;
  std::vector<Link> chain_;
  std::mt19937* rng_ = nullptr;
  size_t max_bytes_ = 0;
  int64_t steps_ = 0;
};

}  // namespace strata::grammar
