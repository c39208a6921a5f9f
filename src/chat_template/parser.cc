#include "chat_template/parser.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include "chat_template/lexer.h"
#include "chat_template/template_error.h"

namespace strata::chat_template {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, size_t max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  Body parse_all() {
    std::string stop;
    Body body = parse_body({}, stop);
    if (peek().kind != TokenKind::kEnd) error("unexpected '{% " + stop + " %}'");
    return body;
  }

 private:
  // Depth guard for recursion: brackets, unary chains and nested blocks.
  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > p_.max_depth_) p_.error("template nested too deeply");
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  [[noreturn]] void error(const std::string& what) const {
    throw TemplateError(
        TemplateErrorKind::kSyntax,
        "template syntax error at offset " + std::to_string(peek().offset) + ": " + what);
  }
  const Token& peek(size_t ahead = 0) const {
    size_t i = pos_ + ahead;
    return tokens_[i < tokens_.size() ? i : tokens_.size() - 1];
  }
  Token next() {
    Token t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).value == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).value == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op))
      error(std::string("expected '") + op + "', found '" + describe(peek()) + "'");
  }
  void expect_kind(TokenKind kind, const char* what) {
    if (peek().kind != kind)
      error(std::string("expected ") + what + ", found '" + describe(peek()) + "'");
    next();
  }
  std::string expect_identifier() {
    if (peek().kind != TokenKind::kName) error("expected a name, found '" + describe(peek()) + "'");
    return next().value;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kText:
        return "text";
      default:
        return t.value;
    }
  }

  // ---- statements ---------------------------------------------------------------------------
  // Parses until `{% <one of stops> ...`, leaving the position at that keyword (stop is set to
  // it), or until the end of the tokens (stop is "").
  Body parse_body(std::initializer_list<const char*> stops, std::string& stop) {
    Nest nest(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (stops.size() > 0)
            error(std::string("unclosed block: expected '{% ") + *stops.begin() + " %}'");
          stop.clear();
          return body;
        case TokenKind::kText: {
          auto s = make_stmt(StmtKind::kText);
          s->text = next().value;
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kComment:
          next();
          break;
        case TokenKind::kOpenExpression: {
          next();
          auto s = make_stmt(StmtKind::kOutput);
          s->expr = parse_expression();
          expect_kind(TokenKind::kCloseExpression, "'}}'");
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kOpenStatement: {
          const Token& keyword = peek(1);
          if (keyword.kind != TokenKind::kName) {
            next();
            error("expected a statement keyword");
          }
          for (const char* s : stops) {
            if (keyword.value == s) {
              next();
              stop = s;
              return body;
            }
          }
          next();
          if (auto s = parse_statement()) body.push_back(std::move(s));
          break;
        }
        default:
          error("unexpected '" + describe(t) + "'");
      }
    }
  }

  std::unique_ptr<Stmt> make_stmt(StmtKind kind) const {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->offset = peek().offset;
    return s;
  }
  void close_statement() { expect_kind(TokenKind::kCloseStatement, "'%}'"); }
  // After a stop keyword: consume `endX %}`.
  void end_block(const char* keyword) {
    if (!accept_name(keyword)) error(std::string("expected '") + keyword + "'");
    close_statement();
  }

  std::unique_ptr<Stmt> parse_statement() {
    std::string keyword = expect_identifier();
    if (keyword == "set") return parse_set();
    if (keyword == "if") return parse_if();
    if (keyword == "for") return parse_for();
    if (keyword == "macro") return parse_macro();
    if (keyword == "break" || keyword == "continue") {
      auto s = make_stmt(keyword == "break" ? StmtKind::kBreak : StmtKind::kContinue);
      close_statement();
      return s;
    }
    if (keyword == "generation" || keyword == "endgeneration") {  // assistant-mask markers
      close_statement();
      return nullptr;
    }
    pos_ -= 1;
    error("unknown or unsupported statement '" + keyword + "'");
  }

  std::unique_ptr<Stmt> parse_set() {
    auto s = make_stmt(StmtKind::kSet);
    s->targets.push_back(expect_identifier());
    if (accept_op(".")) {
      s->attribute = expect_identifier();
    } else {
      while (accept_op(",")) s->targets.push_back(expect_identifier());
    }
    if (accept_op("=")) {
      s->expr = parse_expression();
      close_statement();
      return s;
    }
    if (!s->attribute.empty() || s->targets.size() != 1) error("expected '='");
    close_statement();
    s->kind = StmtKind::kSetBlock;
    std::string stop;
    s->body = parse_body({"endset"}, stop);
    end_block("endset");
    return s;
  }

  std::unique_ptr<Stmt> parse_if() {
    auto s = make_stmt(StmtKind::kIf);
    ExprPtr condition = parse_expression();
    close_statement();
    while (true) {
      std::string stop;
      Body body = parse_body({"elif", "else", "endif"}, stop);
      s->branches.emplace_back(std::move(condition), std::move(body));
      next();  // the stop keyword
      if (stop == "endif") break;
      if (stop == "else") {
        close_statement();
        std::string end;
        Body else_body = parse_body({"endif"}, end);
        s->branches.emplace_back(nullptr, std::move(else_body));
        end_block("endif");
        return s;
      }
      condition = parse_expression();
      close_statement();
    }
    close_statement();
    return s;
  }

  std::unique_ptr<Stmt> parse_for() {
    auto s = make_stmt(StmtKind::kFor);
    s->targets.push_back(expect_identifier());
    while (accept_op(",")) s->targets.push_back(expect_identifier());
    if (!accept_name("in")) error("expected 'in' in for loop");
    s->expr = parse_or();
    if (accept_name("if")) s->condition = parse_expression();
    close_statement();
    std::string stop;
    s->body = parse_body({"else", "endfor"}, stop);
    if (stop == "else") {
      next();
      close_statement();
      s->else_body = parse_body({"endfor"}, stop);
    }
    end_block("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_macro() {
    auto s = make_stmt(StmtKind::kMacro);
    s->name = expect_identifier();
    expect_op("(");
    while (!accept_op(")")) {
      if (!s->params.empty()) expect_op(",");
      std::string param = expect_identifier();
      ExprPtr default_value;
      if (accept_op("=")) default_value = parse_expression();
      s->params.emplace_back(std::move(param), std::move(default_value));
    }
    close_statement();
    std::string stop;
    s->body = parse_body({"endmacro"}, stop);
    end_block("endmacro");
    return s;
  }

  // ---- expressions --------------------------------------------------------------------------
  ExprPtr make(ExprKind kind, std::string name = {}) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = peek().offset;
    e->name = std::move(name);
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr lhs, ExprPtr rhs) const {
    auto e = make(ExprKind::kBinary, std::move(op));
    e->children.push_back(std::move(lhs));
    e->children.push_back(std::move(rhs));
    return checked_depth(std::move(e));
  }
  // Long operator or postfix chains (`1+1+...`, `x.a.a...`) build deep trees without deep parser
  // recursion; bounding the tree's depth keeps evaluation and destruction off a deep stack.
  ExprPtr checked_depth(ExprPtr e) const {
    size_t depth = 0;
    for (const auto& c : e->children) depth = std::max(depth, c ? c->depth : 0);
    for (const auto& [k, c] : e->keywords) depth = std::max(depth, c->depth);
    e->depth = depth + 1;
    if (e->depth > max_depth_) error("expression nested too deeply");
    return e;
  }

  ExprPtr parse_expression() {
    Nest nest(*this);
    ExprPtr value = parse_or();
    if (!accept_name("if")) return value;
    auto e = make(ExprKind::kTernary);
    e->children.push_back(std::move(value));
    e->children.push_back(parse_or());
    e->children.push_back(accept_name("else") ? parse_expression() : nullptr);
    return checked_depth(std::move(e));
  }
  ExprPtr parse_or() {
    ExprPtr lhs = parse_and();
    while (accept_name("or")) lhs = binary("or", std::move(lhs), parse_and());
    return lhs;
  }
  ExprPtr parse_and() {
    ExprPtr lhs = parse_not();
    while (accept_name("and")) lhs = binary("and", std::move(lhs), parse_not());
    return lhs;
  }
  ExprPtr parse_not() {
    if (!is_name("not")) return parse_compare();
    Nest nest(*this);
    next();
    auto e = make(ExprKind::kUnary, "not");
    e->children.push_back(parse_not());
    return checked_depth(std::move(e));
  }
  ExprPtr parse_compare() {
    ExprPtr lhs = parse_additive();
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().value == "==" || peek().value == "!=" || peek().value == "<" ||
           peek().value == "<=" || peek().value == ">" || peek().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return lhs;
      }
      lhs = binary(op, std::move(lhs), parse_additive());
    }
  }
  ExprPtr parse_additive() {
    ExprPtr lhs = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().value;
      lhs = binary(op, std::move(lhs), parse_concat());
    }
    return lhs;
  }
  ExprPtr parse_concat() {
    ExprPtr lhs = parse_multiplicative();
    while (accept_op("~")) lhs = binary("~", std::move(lhs), parse_multiplicative());
    return lhs;
  }
  ExprPtr parse_multiplicative() {
    ExprPtr lhs = parse_power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().value;
      lhs = binary(op, std::move(lhs), parse_power());
    }
    return lhs;
  }
  ExprPtr parse_power() {
    ExprPtr lhs = parse_unary();
    while (accept_op("**")) lhs = binary("**", std::move(lhs), parse_unary());
    return lhs;
  }
  ExprPtr parse_unary() {
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      auto e = make(ExprKind::kUnary, next().value);
      e->children.push_back(parse_unary());
      return checked_depth(std::move(e));
    }
    return parse_postfix(parse_primary());
  }

  ExprPtr parse_primary() {
    Nest nest(*this);
    const Token t = next();
    switch (t.kind) {
      case TokenKind::kString: {
        auto e = make(ExprKind::kLiteral);
        std::string s = t.value;
        while (peek().kind == TokenKind::kString) s += next().value;  // adjacent literals join
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::kInteger: {
        auto e = make(ExprKind::kLiteral);
        e->literal = Value::integer(std::strtoll(t.value.c_str(), nullptr, 10));
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(ExprKind::kLiteral);
        e->literal = Value::number(std::strtod(t.value.c_str(), nullptr));
        return e;
      }
      case TokenKind::kName:
        return name_or_constant(t.value);
      case TokenKind::kOperator:
        if (t.value == "(") {
          ExprPtr inner = parse_expression();
          if (!is_op(",")) {
            expect_op(")");
            return inner;
          }
          auto tuple = make(ExprKind::kList);  // tuples behave as lists here
          tuple->children.push_back(std::move(inner));
          while (accept_op(",") && !is_op(")")) tuple->children.push_back(parse_expression());
          expect_op(")");
          return tuple;
        }
        if (t.value == "[") {
          auto e = make(ExprKind::kList);
          while (!accept_op("]")) {
            if (!e->children.empty()) {
              expect_op(",");
              if (accept_op("]")) break;
            }
            e->children.push_back(parse_expression());
          }
          return e;
        }
        if (t.value == "{") {
          auto e = make(ExprKind::kDict);
          while (!accept_op("}")) {
            if (!e->children.empty()) {
              expect_op(",");
              if (accept_op("}")) break;
            }
            e->children.push_back(parse_expression());
            expect_op(":");
            e->children.push_back(parse_expression());
          }
          return e;
        }
        break;
      default:
        break;
    }
    pos_ -= 1;
    error("expected an expression, found '" + describe(t) + "'");
  }

  ExprPtr name_or_constant(const std::string& name) const {
    auto e = make(ExprKind::kLiteral);
    if (name == "true" || name == "True") {
      e->literal = Value::boolean(true);
    } else if (name == "false" || name == "False") {
      e->literal = Value::boolean(false);
    } else if (name == "none" || name == "None") {
      e->literal = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = name;
    }
    return e;
  }

  void parse_call_args(Expr& call) {
    // The "(" is already consumed.
    bool first = true;
    while (!accept_op(")")) {
      if (!first) {
        expect_op(",");
        if (accept_op(")")) break;
      }
      first = false;
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string key = next().value;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keywords.empty()) error("positional argument after a keyword argument");
        call.children.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      e = checked_depth(std::move(e));
      if (accept_op(".")) {
        auto a = make(ExprKind::kAttribute);
        if (peek().kind == TokenKind::kInteger) {  // x.0 is x[0]
          a->kind = ExprKind::kSubscript;
          a->children.push_back(std::move(e));
          auto index = make(ExprKind::kLiteral);
          index->literal = Value::integer(std::strtoll(next().value.c_str(), nullptr, 10));
          a->children.push_back(std::move(index));
        } else {
          a->name = expect_identifier();
          a->children.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (accept_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (accept_op("(")) {
        auto call = make(ExprKind::kCall);
        call->children.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else if (accept_op("|")) {
        auto f = make(ExprKind::kFilter, expect_identifier());
        f->children.push_back(std::move(e));
        if (accept_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        auto t = make(ExprKind::kTest);
        t->negated = accept_name("not");
        const Token name = next();
        if (name.kind != TokenKind::kName) error("expected a test name after 'is'");
        t->name = name.value;
        t->children.push_back(std::move(e));
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (starts_test_argument()) {  // `x is equalto 'a'`: one argument, no parentheses
          t->children.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
        t.kind == TokenKind::kFloat) {
      return true;
    }
    if (t.kind != TokenKind::kName) return false;
    for (const char* keyword : {"and", "or", "if", "else", "not", "in", "is"}) {
      if (t.value == keyword) return false;
    }
    return true;
  }

  ExprPtr parse_subscript(ExprPtr object) {
    // The "[" is already consumed.
    ExprPtr parts[3];
    size_t part = 0;
    bool slice = false;
    while (!is_op("]")) {
      if (accept_op(":")) {
        slice = true;
        if (++part > 2) error("too many ':' in a slice");
        continue;
      }
      if (parts[part]) error("expected ':' or ']'");
      parts[part] = parse_expression();
    }
    next();
    if (!slice) {
      if (!parts[0]) error("empty subscript");
      auto e = make(ExprKind::kSubscript);
      e->children.push_back(std::move(object));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(ExprKind::kSlice);
    e->children.push_back(std::move(object));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  size_t depth_ = 0;
  size_t max_depth_;
};

}  // namespace

Body parse_template(std::string_view source, size_t max_depth) {
  Parser parser(tokenize(source), max_depth);
  return parser.parse_all();
}

}  // namespace strata::chat_template
