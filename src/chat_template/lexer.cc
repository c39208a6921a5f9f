#include "chat_template/lexer.h"

#include <array>
#include <cstdint>

#include "chat_template/template_error.h"

namespace strata::chat_template {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

[[noreturn]] void syntax_error(const std::string& what, size_t offset) {
  throw TemplateError(TemplateErrorKind::kSyntax,
                      "template syntax error at offset " + std::to_string(offset) + ": " + what);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (!in_tag_) {
        lex_text();
      } else {
        lex_tag_token();
      }
    }
    if (in_tag_) syntax_error("unclosed tag at end of template", pos_);
    tokens_.push_back({TokenKind::kEnd, "", pos_});
    return std::move(tokens_);
  }

 private:
  bool at(std::string_view s) const { return src_.substr(pos_, s.size()) == s; }

  void strip_trailing_whitespace() {
    if (tokens_.empty() || tokens_.back().kind != TokenKind::kText) return;
    std::string& text = tokens_.back().value;
    while (!text.empty() && is_space(text.back())) text.pop_back();
    if (text.empty()) tokens_.pop_back();
  }
  void skip_leading_whitespace() {
    while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
  }

  void lex_text() {
    size_t start = pos_;
    while (pos_ < src_.size() &&
           !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
             (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#'))) {
      ++pos_;
    }
    if (pos_ > start)
      tokens_.push_back({TokenKind::kText, std::string(src_.substr(start, pos_ - start)), start});
    if (pos_ >= src_.size()) return;
    size_t open = pos_;
    char second = src_[pos_ + 1];
    pos_ += 2;
    bool strip = pos_ < src_.size() && src_[pos_] == '-';
    if (strip) {
      ++pos_;
      strip_trailing_whitespace();
    }
    if (second == '#') {
      lex_comment(open);
      return;
    }
    last_open_ = second == '%' ? TokenKind::kOpenStatement : TokenKind::kOpenExpression;
    tokens_.push_back({last_open_, second == '%' ? "{%" : "{{", open});
    in_tag_ = true;
    brace_depth_ = 0;
  }

  void lex_comment(size_t open) {
    size_t end = src_.find("#}", pos_);
    if (end == std::string_view::npos) syntax_error("unclosed comment", open);
    bool strip_after = end > pos_ && src_[end - 1] == '-';
    tokens_.push_back({TokenKind::kComment, "", open});
    pos_ = end + 2;
    if (strip_after) skip_leading_whitespace();
  }

  void lex_tag_token() {
    skip_leading_whitespace();
    if (pos_ >= src_.size()) return;
    const bool statement = last_open_ == TokenKind::kOpenStatement;
    if (at("-%}") || at("%}")) {
      close_tag(TokenKind::kCloseStatement, "%}", statement);
      return;
    }
    if (brace_depth_ == 0 && (at("-}}") || at("}}"))) {
      close_tag(TokenKind::kCloseExpression, "}}", !statement);
      return;
    }
    if (at("{{") || at("{%")) syntax_error("a tag opened inside another tag", pos_);
    char c = src_[pos_];
    if (c == '\'' || c == '"') {
      lex_string(c);
    } else if (is_digit(c)) {
      lex_number();
    } else if (is_name_start(c)) {
      size_t start = pos_;
      while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
      tokens_.push_back({TokenKind::kName, std::string(src_.substr(start, pos_ - start)), start});
    } else {
      lex_operator();
    }
  }

  void close_tag(TokenKind kind, const char* text, bool matches) {
    if (!matches) syntax_error(std::string("unexpected '") + text + "'", pos_);
    bool strip = src_[pos_] == '-';
    tokens_.push_back({kind, text, pos_});
    pos_ += strip ? 3 : 2;
    in_tag_ = false;
    if (strip) skip_leading_whitespace();
  }

  void lex_string(char quote) {
    size_t start = pos_++;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) syntax_error("unterminated string literal", start);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) syntax_error("unterminated string literal", start);
      char e = src_[pos_++];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\\':
          value += '\\';
          break;
        case 'x':
        case 'u': {
          size_t len = e == 'x' ? 2 : 4;
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            char h = pos_ < src_.size() ? src_[pos_++] : '\0';
            int digit = is_digit(h)              ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
            if (digit < 0) syntax_error("invalid hexadecimal escape in string", pos_);
            cp = cp * 16 + static_cast<uint32_t>(digit);
          }
          append_utf8(value, cp);
          break;
        }
        default:
          syntax_error(std::string("unknown escape '\\") + e + "' in string", pos_ - 2);
      }
    }
    tokens_.push_back({TokenKind::kString, std::move(value), start});
  }

  void lex_number() {
    size_t start = pos_;
    while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    bool is_float = false;
    bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator &&
                     tokens_.back().value == ".";
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    }
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInteger,
                       std::string(src_.substr(start, pos_ - start)), start});
  }

  void lex_operator() {
    static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (at(op)) {
        tokens_.push_back({TokenKind::kOperator, std::string(op), pos_});
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    static constexpr std::string_view kOne = "()[]{},.:|+-*/%~=<>";
    if (kOne.find(c) == std::string_view::npos) {
      syntax_error(std::string("unexpected character '") + c + "'", pos_);
    }
    if (c == '{') ++brace_depth_;
    if (c == '}') --brace_depth_;
    tokens_.push_back({TokenKind::kOperator, std::string(1, c), pos_});
    ++pos_;
  }

  std::string_view src_;
  size_t pos_ = 0;
  bool in_tag_ = false;
  int brace_depth_ = 0;
  TokenKind last_open_ = TokenKind::kOpenExpression;
  std::vector<Token> tokens_;
};

}  // namespace

std::string preprocess_source(std::string_view source) {
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  // lstrip_blocks: at each line start, drop spaces and tabs before "{%", "{#" or "{-".
  std::string lstripped;
  lstripped.reserve(source.size());
  size_t n = 0;
  while (n < source.size()) {
    size_t ws_end = n;
    while (ws_end < source.size() && (source[ws_end] == ' ' || source[ws_end] == '\t')) ++ws_end;
    bool tag =
        ws_end + 1 < source.size() && source[ws_end] == '{' &&
        (source[ws_end + 1] == '%' || source[ws_end + 1] == '#' || source[ws_end + 1] == '-');
    size_t line_end = n;
    if (tag) n = ws_end;
    while (line_end < source.size() && source[line_end] != '\n' && source[line_end] != '\r')
      ++line_end;
    if (line_end < source.size()) ++line_end;  // keep the terminator
    lstripped.append(source.substr(n, line_end - n));
    n = line_end;
  }
  // trim_blocks: drop the newline right after "%}", "#}" or "-}".
  std::string out;
  out.reserve(lstripped.size());
  for (size_t k = 0; k < lstripped.size(); ++k) {
    out += lstripped[k];
    if (lstripped[k] == '}' && k > 0 && k + 1 < lstripped.size() && lstripped[k + 1] == '\n' &&
        (lstripped[k - 1] == '%' || lstripped[k - 1] == '#' || lstripped[k - 1] == '-')) {
      ++k;
    }
  }
  return out;
}

std::vector<Token> tokenize(std::string_view source) {
  const std::string preprocessed = preprocess_source(source);
  Lexer lexer(preprocessed);
  return lexer.run();
}

}  // namespace strata::chat_template
