#include "grammar/ebnf.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/utf8.h"

namespace strata::grammar {

bool EbnfExpr::operator==(const EbnfExpr& o) const {
  return kind == o.kind && bytes == o.bytes && set.ranges() == o.set.ranges() && items == o.items &&
         min == o.min && max == o.max && rule == o.rule;
}

namespace {

// Groups within groups, and quantifiers on one item: every pass over the tree recurses per level.
constexpr int32_t kMaxNesting = 100;
constexpr int32_t kMaxStackedQuantifiers = 4;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

EbnfExpr make(EbnfExpr::Kind kind) {
  EbnfExpr e;
  e.kind = kind;
  return e;
}

// A sequence's items, with nested sequences flattened into it (so that a left-recursive
// alternative's first item is the reference itself).
void append_flat(EbnfExpr& seq, EbnfExpr item) {
  if (item.kind == EbnfExpr::Kind::kConcat) {
    for (EbnfExpr& i : item.items) seq.items.push_back(std::move(i));
  } else {
    seq.items.push_back(std::move(item));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const EbnfLimits& limits) : t_(text), limits_(limits) {}

  Result<EbnfGrammar> parse() {
    if (static_cast<int64_t>(t_.size()) > limits_.max_grammar_bytes) {
      return Status::ResourceExhausted("the grammar is longer than the limit of " +
                                       std::to_string(limits_.max_grammar_bytes) + " bytes");
    }
    while (error_.ok()) {
      skip_space();
      if (pos_ >= t_.size()) break;
      rule();
    }
    if (error_.ok()) resolve();
    if (!error_.ok()) return error_;
    return std::move(g_);
  }

 private:
  void fail_at(size_t at, const std::string& what) {
    if (!error_.ok()) return;
    int64_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line, column = 1;
      } else if ((static_cast<unsigned char>(t_[i]) & 0xC0) != 0x80) {
        ++column;  // a character, not a UTF-8 continuation byte
      }
    }
    error_ = Status::InvalidArgument("grammar line " + std::to_string(line) + ", column " +
                                     std::to_string(column) + ": " + what);
  }
  void fail(const std::string& what) { fail_at(pos_, what); }
  bool more() const { return pos_ < t_.size() && error_.ok(); }

  void skip_space() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view name_at(size_t at) const {
    size_t end = at;
    while (end < t_.size() && is_name_char(t_[end])) ++end;
    return t_.substr(at, end - at);
  }

  // True when a rule's head, `name ::=`, starts at pos_ (where a body ends).
  bool at_rule_head() const {
    const std::string_view name = name_at(pos_);
    if (name.empty()) return false;
    size_t at = pos_ + name.size();
    while (at < t_.size() &&
           (t_[at] == ' ' || t_[at] == '\t' || t_[at] == '\r' || t_[at] == '\n' || t_[at] == '#')) {
      if (t_[at] == '#') {
        while (at < t_.size() && t_[at] != '\n') ++at;
      } else {
        ++at;
      }
    }
    return t_.substr(at, 3) == "::=";
  }

  int32_t rule_index(std::string_view name, size_t at) {
    const auto [it, fresh] =
        index_.emplace(std::string(name), static_cast<int32_t>(g_.names.size()));
    if (fresh) {
      if (static_cast<int64_t>(g_.names.size()) >= limits_.max_rules) {
        fail_at(at, "more than " + std::to_string(limits_.max_rules) + " rules");
        return 0;
      }
      g_.names.emplace_back(name);
      g_.rules.emplace_back();
      defined_at_.push_back(std::string_view::npos);
      first_use_.push_back(at);
    }
    return it->second;
  }

  void rule() {
    const size_t head = pos_;
    const std::string_view name = name_at(pos_);
    if (name.empty()) return fail("expected a rule name (letters, digits, '-', '_')");
    pos_ += name.size();
    skip_space();
    if (t_.substr(pos_, 3) != "::=") return fail("expected '::=' after the rule name");
    pos_ += 3;
    const int32_t r = rule_index(name, head);
    if (!error_.ok()) return;
    if (defined_at_[static_cast<size_t>(r)] != std::string_view::npos) {
      return fail_at(head, "rule '" + std::string(name) + "' is defined twice");
    }
    defined_at_[static_cast<size_t>(r)] = head;
    EbnfExpr body = alternatives(0);
    g_.rules[static_cast<size_t>(r)] = std::move(body);
    if (error_.ok() && pos_ < t_.size() && t_[pos_] == ')') fail("an unmatched ')'");
  }

  EbnfExpr alternatives(int32_t depth) {
    if (depth > kMaxNesting) {
      fail("groups nested more than " + std::to_string(kMaxNesting) + " deep");
      return make(EbnfExpr::Kind::kConcat);
    }
    EbnfExpr alt = make(EbnfExpr::Kind::kAlt);
    alt.items.push_back(sequence(depth));
    while (more() && t_[pos_] == '|') {
      ++pos_;
      alt.items.push_back(sequence(depth));
    }
    if (alt.items.size() == 1) return std::move(alt.items.front());
    return alt;
  }

  EbnfExpr sequence(int32_t depth) {
    EbnfExpr seq = make(EbnfExpr::Kind::kConcat);
    while (true) {
      skip_space();
      if (!more() || t_[pos_] == '|' || t_[pos_] == ')') break;
      if (depth == 0 && at_rule_head()) break;  // the next rule starts
      EbnfExpr a = atom(depth);
      if (!error_.ok()) break;
      append_flat(seq, quantified(std::move(a)));
    }
    if (seq.items.size() == 1) return std::move(seq.items.front());
    return seq;
  }

  EbnfExpr quantified(EbnfExpr a) {
    for (int32_t stacked = 0;; ++stacked) {
      skip_space();
      if (!more()) return a;
      if (stacked == kMaxStackedQuantifiers &&
          std::string_view("*+?{").find(t_[pos_]) != std::string_view::npos) {
        fail("more than " + std::to_string(kMaxStackedQuantifiers) + " quantifiers on one item");
        return a;
      }
      int32_t min = 0, max = 0;
      const char c = t_[pos_];
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{') {
        if (!counted(min, max)) return a;
      } else {
        return a;
      }
      EbnfExpr r = make(EbnfExpr::Kind::kRepeat);
      r.min = min;
      r.max = max;
      r.items.push_back(std::move(a));
      a = std::move(r);
    }
  }

  bool number(int32_t& out) {
    skip_space();
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = std::min<int64_t>(v * 10 + (t_[pos_] - '0'), int64_t{1} << 40);
      ++pos_;
    }
    out = static_cast<int32_t>(std::min<int64_t>(v, limits_.max_repeat + int64_t{1}));
    if (out > limits_.max_repeat) {
      fail_at(start, "a repetition count above " + std::to_string(limits_.max_repeat));
      return false;
    }
    return pos_ > start;
  }

  // {m}, {m,}, {m,n} at pos_.
  bool counted(int32_t& min, int32_t& max) {
    const size_t open = pos_++;
    if (!number(min)) {
      fail("'{' must start a repetition {m}, {m,} or {m,n}");
      return false;
    }
    max = min;
    skip_space();
    if (pos_ < t_.size() && t_[pos_] == ',') {
      ++pos_;
      if (!number(max)) {
        if (!error_.ok()) return false;
        max = -1;
      }
      skip_space();
    }
    if (pos_ >= t_.size() || t_[pos_] != '}') {
      fail("a repetition must end with '}'");
      return false;
    }
    ++pos_;
    if (max >= 0 && max < min) {
      fail_at(open, "a repetition {m,n} with n < m");
      return false;
    }
    return true;
  }

  EbnfExpr atom(int32_t depth) {
    const char c = t_[pos_];
    if (c == '"') return literal();
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      EbnfExpr e = make(EbnfExpr::Kind::kSet);
      e.set = CodePointSet::all();
      return e;
    }
    if (c == '(') {
      const size_t open = pos_++;
      EbnfExpr inner = alternatives(depth + 1);
      skip_space();
      if (error_.ok() && (pos_ >= t_.size() || t_[pos_] != ')'))
        fail_at(open, "a '(' without its ')'");
      ++pos_;
      return inner;
    }
    if (is_name_char(c)) {
      const std::string_view name = name_at(pos_);
      EbnfExpr e = make(EbnfExpr::Kind::kRule);
      e.rule = rule_index(name, pos_);
      pos_ += name.size();
      return e;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      fail(std::string("nothing to repeat before '") + c + "'");
    } else if (t_.substr(pos_, 3) == "::=") {
      fail("'::=' without a rule name before it");
    } else {
      fail("expected a literal \"...\", a class [...], '.', '(' or a rule name");
    }
    return make(EbnfExpr::Kind::kConcat);
  }

  bool hex(size_t digits, uint32_t& out) {
    out = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = pos_ < t_.size() ? t_[pos_] : '\0';
      uint32_t v = 0;
      if (h >= '0' && h <= '9') {
        v = static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v = static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v = static_cast<uint32_t>(h - 'A' + 10);
      } else {
        fail("a hex escape needs " + std::to_string(digits) + " hex digits");
        return false;
      }
      ++pos_;
      out = out * 16 + v;
    }
    return true;
  }

  // One character of a literal or class at pos_: a UTF-8 code point or an escape.
  bool character(uint32_t& cp) {
    const size_t at = pos_;
    if (t_[pos_] != '\\') {
      if (utf8_valid_length(t_, pos_) == 0) {
        fail("invalid UTF-8");
        return false;
      }
      char32_t c = 0;
      pos_ += utf8_decode(t_, pos_, c);
      cp = static_cast<uint32_t>(c);
      return true;
    }
    if (++pos_ >= t_.size()) {
      fail("the grammar ends in '\\'");
      return false;
    }
    const char e = t_[pos_++];
    switch (e) {
      case 'n':
        cp = '\n';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 't':
        cp = '\t';
        return true;
      case 'x':
        return hex(2, cp);
      case 'u':
      case 'U':
        if (!hex(e == 'u' ? 4 : 8, cp)) return false;
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > kMaxCodePoint) {
          fail_at(at, "an escape that is not a Unicode scalar value");
          return false;
        }
        return true;
      default:
        // Any other ASCII punctuation stands for itself; letters, digits and the rest are
        // reserved.
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') ||
            static_cast<unsigned char>(e) >= 0x80 || static_cast<unsigned char>(e) <= 0x20) {
          fail_at(at,
                  std::string("an unknown escape '\\") +
                      (static_cast<unsigned char>(e) > 0x20 && static_cast<unsigned char>(e) < 0x80
                           ? std::string(1, e)
                           : "?") +
                      "'");
          return false;
        }
        cp = static_cast<unsigned char>(e);
        return true;
    }
  }

  EbnfExpr literal() {
    const size_t open = pos_++;
    EbnfExpr e = make(EbnfExpr::Kind::kBytes);
    while (true) {
      if (pos_ >= t_.size() || t_[pos_] == '\n') {
        fail_at(open, "a '\"' without its closing '\"'");
        return e;
      }
      if (t_[pos_] == '"') break;
      uint32_t cp = 0;
      if (!character(cp)) return e;
      utf8_append(e.bytes, static_cast<char32_t>(cp));
    }
    ++pos_;
    return e;
  }

  EbnfExpr char_class() {
    const size_t open = pos_++;
    EbnfExpr e = make(EbnfExpr::Kind::kSet);
    bool negated = false;
    if (pos_ < t_.size() && t_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    CodePointSet set;
    while (true) {
      if (pos_ >= t_.size()) {
        fail_at(open, "a '[' without its ']'");
        return e;
      }
      if (t_[pos_] == ']') break;
      uint32_t lo = 0, hi = 0;
      if (!character(lo)) return e;
      hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        const size_t at = pos_;
        if (!character(hi)) return e;
        if (hi < lo) {
          fail_at(at, "a class range out of order");
          return e;
        }
      }
      set = set.plus(CodePointSet::of(lo, hi));
    }
    ++pos_;
    e.set = negated ? CodePointSet::all().minus(set) : set;
    if (e.set.empty()) fail_at(open, "a class that matches nothing");
    return e;
  }

  void resolve() {
    const auto root = index_.find("root");
    if (root == index_.end() ||
        defined_at_[static_cast<size_t>(root->second)] == std::string_view::npos) {
      error_ = Status::InvalidArgument("the grammar has no 'root' rule (its start symbol)");
      return;
    }
    g_.root = root->second;
    // The first undefined rule in the text's order.
    size_t first = std::string_view::npos;
    int32_t which = -1;
    for (size_t r = 0; r < g_.names.size(); ++r) {
      if (defined_at_[r] == std::string_view::npos && first_use_[r] < first) {
        first = first_use_[r];
        which = static_cast<int32_t>(r);
      }
    }
    if (which >= 0) {
      fail_at(first, "rule '" + g_.names[static_cast<size_t>(which)] + "' is not defined");
    }
  }

  std::string_view t_;
  const EbnfLimits& limits_;
  size_t pos_ = 0;
  Status error_;
  EbnfGrammar g_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<size_t> defined_at_;  // [rule]: its head's offset, npos until defined
  std::vector<size_t> first_use_;   // [rule]: where its name first appears
};

bool productive(const EbnfExpr& e, const std::vector<bool>& rules) {
  using Kind = EbnfExpr::Kind;
  switch (e.kind) {
    case Kind::kBytes:
    case Kind::kSet:
      return true;
    case Kind::kConcat:
      return std::all_of(e.items.begin(), e.items.end(),
                         [&](const EbnfExpr& i) { return productive(i, rules); });
    case Kind::kAlt:
      return std::any_of(e.items.begin(), e.items.end(),
                         [&](const EbnfExpr& i) { return productive(i, rules); });
    case Kind::kRepeat:
      return e.min == 0 || productive(e.items.front(), rules);
    case Kind::kRule:
      return rules[static_cast<size_t>(e.rule)];
  }
  return false;
}

}  // namespace

Result<EbnfGrammar> parse_ebnf(std::string_view text, const EbnfLimits& limits) {
  return Parser(text, limits).parse();
}

void rewrite_left_recursion(EbnfGrammar& g) {
  using Kind = EbnfExpr::Kind;
  for (size_t r = 0; r < g.rules.size(); ++r) {
    EbnfExpr& body = g.rules[r];
    std::vector<EbnfExpr> alternatives;
    if (body.kind == Kind::kAlt) {
      alternatives = std::move(body.items);
    } else {
      alternatives.push_back(std::move(body));
    }
    const auto is_self = [&](const EbnfExpr& e) {
      return e.kind == Kind::kRule && e.rule == static_cast<int32_t>(r);
    };
    EbnfExpr base = make(Kind::kAlt), tails = make(Kind::kAlt);
    for (EbnfExpr& a : alternatives) {
      if (is_self(a)) {
        tails.items.push_back(make(Kind::kConcat));  // A ::= A: adds nothing
      } else if (a.kind == Kind::kConcat && !a.items.empty() && is_self(a.items.front())) {
        a.items.erase(a.items.begin());
        tails.items.push_back(a.items.size() == 1 ? std::move(a.items.front()) : std::move(a));
      } else {
        base.items.push_back(std::move(a));
      }
    }
    if (tails.items.empty()) {  // no left recursion: as it was
      body = base.items.size() == 1 ? std::move(base.items.front()) : std::move(base);
      continue;
    }
    // A ::= base tail*, where base has no alternative at all when every one was recursive (the
    // empty language, which empty_rules reports).
    EbnfExpr loop = make(Kind::kRepeat);
    loop.min = 0;
    loop.max = -1;
    loop.items.push_back(tails.items.size() == 1 ? std::move(tails.items.front())
                                                 : std::move(tails));
    EbnfExpr seq = make(Kind::kConcat);
    append_flat(seq, base.items.size() == 1 ? std::move(base.items.front()) : std::move(base));
    seq.items.push_back(std::move(loop));
    body = std::move(seq);
  }
}

std::vector<bool> empty_rules(const EbnfGrammar& g) {
  std::vector<bool> ok(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (!ok[r] && productive(g.rules[r], ok)) {
        ok[r] = true;
        changed = true;
      }
    }
  }
  std::vector<bool> empty(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) empty[r] = !ok[r];
  return empty;
}

}  // namespace strata::grammar
