#include "grammar/regex.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "core/utf8.h"
#include "grammar/utf8_ranges.h"

namespace strata::grammar {
namespace {

// The pattern as a tree: a code point set, a sequence, an alternation or a repetition.
struct Node {
  enum class Kind { kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;
  CodePointSet set;                          // kSet
  std::vector<std::unique_ptr<Node>> items;  // kConcat, kAlt; kRepeat: the one repeated
  int32_t min = 0, max = 0;                  // kRepeat; max -1: unbounded
};

using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind kind) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  return n;
}

NodePtr make_set(CodePointSet set) {
  NodePtr n = make(Node::Kind::kSet);
  n->set = std::move(set);
  return n;
}

constexpr int32_t kMaxGroupNesting = 256;  // groups within groups: the parser recurses per level

class RegexParser {
 public:
  RegexParser(std::string_view p, const RegexLimits& limits) : p_(p), limits_(limits) {}

  Result<NodePtr> parse() {
    NodePtr n = alternation(0);
    if (error_.ok() && pos_ < p_.size()) fail("an unmatched ')'");
    if (!error_.ok()) return error_;
    return n;
  }

 private:
  void fail(const std::string& what) {
    if (error_.ok()) {
      error_ = Status::InvalidArgument("regex at offset " + std::to_string(pos_) + ": " + what);
    }
  }
  bool done() const { return pos_ >= p_.size() || !error_.ok(); }
  char peek() const { return p_[pos_]; }

  NodePtr alternation(int32_t depth) {
    if (depth > kMaxGroupNesting) {
      fail("groups nested more than " + std::to_string(kMaxGroupNesting) + " deep");
      return make(Node::Kind::kConcat);
    }
    NodePtr alt = make(Node::Kind::kAlt);
    alt->items.push_back(sequence(depth));
    while (!done() && peek() == '|') {
      ++pos_;
      alt->items.push_back(sequence(depth));
    }
    if (alt->items.size() == 1) return std::move(alt->items.front());
    return alt;
  }

  NodePtr sequence(int32_t depth) {
    NodePtr seq = make(Node::Kind::kConcat);
    while (!done() && peek() != '|' && peek() != ')') {
      NodePtr atom = this->atom(depth);
      if (!error_.ok()) break;
      seq->items.push_back(quantified(std::move(atom)));
    }
    return seq;
  }

  NodePtr quantified(NodePtr atom) {
    if (done()) return atom;
    int32_t min = 0, max = 0;
    switch (peek()) {
      case '*':
        min = 0, max = -1, ++pos_;
        break;
      case '+':
        min = 1, max = -1, ++pos_;
        break;
      case '?':
        min = 0, max = 1, ++pos_;
        break;
      case '{':
        if (!counted(min, max)) return atom;
        break;
      default:
        return atom;
    }
    if (!done() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      fail("a quantifier after a quantifier (lazy and possessive ones are not supported)");
    }
    NodePtr r = make(Node::Kind::kRepeat);
    r->min = min;
    r->max = max;
    r->items.push_back(std::move(atom));
    return r;
  }

  // {n}, {n,}, {n,m} at pos_.
  bool counted(int32_t& min, int32_t& max) {
    ++pos_;
    const auto number = [&](int32_t& out) {
      const size_t start = pos_;
      int64_t v = 0;
      while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[pos_] - '0'), int64_t{1} << 40);
        ++pos_;
      }
      out = static_cast<int32_t>(std::min<int64_t>(v, limits_.max_repeat + int64_t{1}));
      return pos_ > start;
    };
    if (!number(min)) {
      fail("'{' must start a repetition {n}, {n,} or {n,m} (escape a literal one)");
      return false;
    }
    max = min;
    if (pos_ < p_.size() && p_[pos_] == ',') {
      ++pos_;
      if (!number(max)) max = -1;
    }
    if (pos_ >= p_.size() || p_[pos_] != '}') {
      fail("a repetition must end with '}'");
      return false;
    }
    ++pos_;
    if (min > limits_.max_repeat || max > limits_.max_repeat) {
      fail("a repetition count above " + std::to_string(limits_.max_repeat));
      return false;
    }
    if (max >= 0 && max < min) {
      fail("a repetition {n,m} with m < n");
      return false;
    }
    return true;
  }

  NodePtr atom(int32_t depth) {
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (p_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (!done() && peek() == '?') {
          fail("only (?:...) groups are supported (no lookaround, named groups or flags)");
          return make(Node::Kind::kConcat);
        }
        NodePtr inner = alternation(depth + 1);
        if (done() || peek() != ')') {
          fail("a '(' without its ')'");
          return inner;
        }
        ++pos_;
        return inner;
      }
      case '[':
        return make_set(char_class());
      case '.':
        ++pos_;
        return make_set(CodePointSet::all().minus(CodePointSet::of('\n', '\n')));
      case '\\': {
        ++pos_;
        CodePointSet s;
        if (!escape(s, /*in_class=*/false)) return make(Node::Kind::kConcat);
        return make_set(std::move(s));
      }
      case '*':
      case '+':
      case '?':
      case '{':
        fail("nothing to repeat");
        return make(Node::Kind::kConcat);
      case ']':
      case '}':
        fail(std::string("an unescaped '") + c + "'");
        return make(Node::Kind::kConcat);
      case '^':
      case '$':
        fail("anchors are not supported (a pattern always matches the whole output)");
        return make(Node::Kind::kConcat);
      default: {
        uint32_t cp = 0;
        if (!code_point(cp)) return make(Node::Kind::kConcat);
        return make_set(CodePointSet::of(cp, cp));
      }
    }
  }

  // One UTF-8 encoded code point at pos_.
  bool code_point(uint32_t& cp) {
    if (utf8_valid_length(p_, pos_) == 0) {
      fail("invalid UTF-8");
      return false;
    }
    char32_t c = 0;
    pos_ += utf8_decode(p_, pos_, c);
    cp = static_cast<uint32_t>(c);
    return true;
  }

  bool hex(size_t digits, uint32_t& out) {
    out = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (pos_ >= p_.size()) {
        fail("a short hex escape");
        return false;
      }
      const char h = p_[pos_++];
      uint32_t v = 0;
      if (h >= '0' && h <= '9') {
        v = static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v = static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v = static_cast<uint32_t>(h - 'A' + 10);
      } else {
        fail("a hex escape needs hex digits");
        return false;
      }
      out = out * 16 + v;
    }
    return true;
  }

  // The escape after a '\' at pos_, as a set (one code point, or a shorthand class).
  bool escape(CodePointSet& out, bool in_class) {
    if (pos_ >= p_.size()) {
      fail("a pattern ending in '\\'");
      return false;
    }
    const char e = p_[pos_++];
    const CodePointSet digit = CodePointSet::of('0', '9');
    const CodePointSet word = digit.plus(CodePointSet::of('a', 'z'))
                                  .plus(CodePointSet::of('A', 'Z'))
                                  .plus(CodePointSet::of('_', '_'));
    const CodePointSet space = CodePointSet::of(' ', ' ').plus(CodePointSet::of('\t', '\r'));
    uint32_t cp = 0;
    switch (e) {
      case 'd':
        out = digit;
        return true;
      case 'w':
        out = word;
        return true;
      case 's':
        out = space;
        return true;
      case 'D':
        out = CodePointSet::all().minus(digit);
        return true;
      case 'W':
        out = CodePointSet::all().minus(word);
        return true;
      case 'S':
        out = CodePointSet::all().minus(space);
        return true;
      case 'n':
        cp = '\n';
        break;
      case 'r':
        cp = '\r';
        break;
      case 't':
        cp = '\t';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'v':
        cp = '\v';
        break;
      case 'x':
        if (!hex(2, cp)) return false;
        break;
      case 'u':
        if (!hex(4, cp)) return false;
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          fail("a surrogate code point");
          return false;
        }
        break;
      default:
        // Any other ASCII punctuation stands for itself; letters and digits are reserved.
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') ||
            static_cast<unsigned char>(e) >= 0x80) {
          --pos_;
          fail(std::string("an unsupported escape '\\") + e + "'" +
               (in_class ? " in a class" : ""));
          return false;
        }
        cp = static_cast<unsigned char>(e);
    }
    out = CodePointSet::of(cp, cp);
    return true;
  }

  CodePointSet char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    CodePointSet set;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) {
        fail("a '[' without its ']'");
        return set;
      }
      if (p_[pos_] == ']' && !first) break;
      first = false;
      // One member: a code point (perhaps the start of a range) or a shorthand class.
      CodePointSet member;
      uint32_t lo = 0;
      bool single = true;
      if (p_[pos_] == '\\') {
        ++pos_;
        if (!escape(member, /*in_class=*/true)) return set;
        single =
            member.ranges().size() == 1 && member.ranges()[0].first == member.ranges()[0].second;
        lo = single ? member.ranges()[0].first : 0;
      } else {
        if (!code_point(lo)) return set;
        member = CodePointSet::of(lo, lo);
      }
      // A range lo-hi (a '-' before ']' is a literal).
      if (single && pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (p_[pos_] == '\\') {
          ++pos_;
          CodePointSet end;
          if (!escape(end, /*in_class=*/true)) return set;
          if (end.ranges().size() != 1 || end.ranges()[0].first != end.ranges()[0].second) {
            fail("a class shorthand cannot end a range");
            return set;
          }
          hi = end.ranges()[0].first;
        } else if (!code_point(hi)) {
          return set;
        }
        if (hi < lo) {
          fail("a class range out of order");
          return set;
        }
        member = CodePointSet::of(lo, hi);
      }
      set = set.plus(member);
    }
    ++pos_;  // ']'
    if (negated) set = CodePointSet::all().minus(set);
    if (set.empty()) fail("a class that matches nothing");
    return set;
  }

  std::string_view p_;
  const RegexLimits& limits_;
  size_t pos_ = 0;
  Status error_;
};

// Thompson construction: each node becomes a fragment (start, end) of fresh states.
class RegexNfaBuilder {
 public:
  explicit RegexNfaBuilder(const RegexLimits& limits) : limits_(limits) {}

  Result<Nfa> build(const Node& root) {
    const int32_t start = state();
    const int32_t end = fragment(root, start);
    if (!error_.ok()) return error_;
    nfa_.accept = end;
    return std::move(nfa_);
  }

 private:
  int32_t state() {
    if (static_cast<int64_t>(nfa_.edges.size()) >= limits_.max_nfa_states) {
      if (error_.ok()) {
        error_ =
            Status::ResourceExhausted("regex: more than " + std::to_string(limits_.max_nfa_states) +
                                      " automaton states (RegexLimits::max_nfa_states)");
      }
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

  // Builds node from state `from`; returns the fragment's end state.
  int32_t fragment(const Node& n, int32_t from) {
    if (!error_.ok()) return from;
    switch (n.kind) {
      case Node::Kind::kSet: {
        const int32_t end = state();
        for (const Utf8Sequence& seq : utf8_sequences(n.set)) {
          int32_t at = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int32_t to = i + 1 == seq.size() ? end : state();
            bytes(at, to, seq[i].first, seq[i].second);
            at = to;
          }
        }
        return end;
      }
      case Node::Kind::kConcat: {
        int32_t at = from;
        for (const NodePtr& item : n.items) at = fragment(*item, at);
        return at;
      }
      case Node::Kind::kAlt: {
        const int32_t end = state();
        for (const NodePtr& item : n.items) {
          const int32_t start = state();
          epsilon(from, start);
          epsilon(fragment(*item, start), end);
        }
        return end;
      }
      case Node::Kind::kRepeat: {
        const Node& item = *n.items.front();
        int32_t at = from;
        for (int32_t i = 0; i < n.min; ++i) at = fragment(item, at);
        if (n.max < 0) {  // a loop: at -> item -> back to at, and out
          const int32_t loop = state();
          epsilon(at, loop);
          epsilon(fragment(item, loop), loop);
          return loop;
        }
        // Up to max - min more, each skippable to the end.
        const int32_t end = state();
        for (int32_t i = n.min; i < n.max; ++i) {
          epsilon(at, end);
          at = fragment(item, at);
        }
        epsilon(at, end);
        return end;
      }
    }
    return from;
  }

  const RegexLimits& limits_;
  Nfa nfa_;
  Status error_;
};

}  // namespace

Result<Nfa> compile_regex(std::string_view pattern, const RegexLimits& limits) {
  RegexParser parser(pattern, limits);
  Result<NodePtr> root = parser.parse();
  if (!root.ok()) return root.status();
  return RegexNfaBuilder(limits).build(**root);
}

}  // namespace strata::grammar
