#include "core/json_input.h"

#include <optional>
#include <utility>

#include "core/error.h"
#include "core/quote.h"
#include "core/utf8.h"

namespace strata {
namespace {

using nlohmann::json;

// Syntax errors quote the token they stopped at, which can be a whole multi-megabyte string.
constexpr size_t kMaxSyntaxMessageBytes = 300;

size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_valid_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// The first NUL byte, or the first bracket that opens level max_depth + 1 (brackets inside
// strings do not count), whichever comes first; nothing when neither occurs.
std::optional<JsonInputError> scan_structure(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      return JsonInputError{JsonInputFault::kNulByte, i,
                            "NUL byte at byte offset " + std::to_string(i)};
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return JsonInputError{JsonInputFault::kTooDeep, i,
                              "arrays and objects nest deeper than " + std::to_string(max_depth) +
                                  " levels (at byte offset " + std::to_string(i) + ")"};
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// Appends `s` as a JSON string, its first bytes only when it would not fit in `limit`.
void append_string(const std::string& s, std::string& out, size_t limit) {
  const size_t room = out.size() < limit ? limit - out.size() : 0;
  const json head(s.substr(0, room));
  out += head.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Appends `v`'s JSON text to `out` until out holds `limit` bytes. Every array or object level
// writes a byte before it descends, so the recursion is at most `limit` deep and the time is
// bounded by the limit too, however large or deep `v` is.
void dump_until(const json& v, std::string& out, size_t limit) {
  if (out.size() >= limit) return;
  switch (v.type()) {
    case json::value_t::array:
    case json::value_t::object: {
      const bool array = v.is_array();
      out += array ? '[' : '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it) {
        if (!first) out += ',';
        first = false;
        if (!array) {
          append_string(it.key(), out, limit);
          out += ':';
        }
        dump_until(*it, out, limit);
      }
      out += array ? ']' : '}';
      return;
    }
    case json::value_t::string:
      append_string(v.get_ref<const std::string&>(), out, limit);
      return;
    case json::value_t::null:
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
    case json::value_t::binary:
    case json::value_t::discarded:
      out += v.dump(-1, ' ', false, json::error_handler_t::replace);
      return;
  }
}

}  // namespace

namespace {

// The checks, then one parse into Json (json, or ordered_json which keeps an object's key order).
template <typename Json>
std::variant<Json, JsonInputError> parse_checked(std::string_view text, int max_depth,
                                                 const typename Json::parser_callback_t& callback) {
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    return JsonInputError{JsonInputFault::kInvalidUtf8, bad,
                          "invalid UTF-8 at byte offset " + std::to_string(bad)};
  }
  if (std::optional<JsonInputError> fault = scan_structure(text, max_depth)) return *fault;
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const typename Json::parse_error& e) {
    return JsonInputError{JsonInputFault::kSyntax, e.byte > 0 ? e.byte - 1 : 0,
                          one_line(e.what(), kMaxSyntaxMessageBytes)};
  } catch (const typename Json::exception& e) {
    // Also raised while parsing: out_of_range 406, a number too large for a double (1e999).
    return JsonInputError{JsonInputFault::kSyntax, 0, one_line(e.what(), kMaxSyntaxMessageBytes)};
  }
}

}  // namespace

std::variant<json, JsonInputError> parse_json_input(std::string_view text, int max_depth,
                                                    const json::parser_callback_t& callback) {
  return parse_checked<json>(text, max_depth, callback);
}

std::variant<nlohmann::ordered_json, JsonInputError> parse_ordered_json_input(
    std::string_view text, int max_depth) {
  return parse_checked<nlohmann::ordered_json>(text, max_depth, nullptr);
}

json parse_json_file(std::string_view text, std::string_view source, std::string_view what,
                     const json::parser_callback_t& callback) {
  std::variant<json, JsonInputError> parsed = parse_json_input(text, kMaxFileJsonDepth, callback);
  if (auto* error = std::get_if<JsonInputError>(&parsed)) {
    throw Error(std::string(source) + ": " + std::string(what) +
                " is not valid JSON: " + error->message);
  }
  return std::move(std::get<json>(parsed));
}

std::string safe_dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string bounded_dump(const json& value, size_t max_bytes) {
  std::string text;
  dump_until(value, text, max_bytes);
  // one_line cuts at the limit (on a code point boundary) and appends "..." when it cuts.
  return one_line(text, max_bytes);
}

}  // namespace strata
