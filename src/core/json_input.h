#pragma once
// The one entry point for JSON text that comes from outside the process (request bodies, model
// files, traces, a server's responses), and the bounded ways back out into messages.
//
// parse_json_input checks the raw bytes before any value is built: valid UTF-8, no NUL byte
// (nlohmann's lexer takes NUL for the end of input and would ignore what follows), and arrays
// and objects nested no deeper than the caller's limit. nlohmann parses iteratively, but copying,
// comparing and dumping a value recurse once per level, and so does code that walks one (the
// tokenizer's Sequence stages): a value nested a million levels deep overflows any thread's stack.
// With the depth checked first, every later recursion over the value is bounded by the limit.
// Only then is the text parsed, as one whole value (trailing bytes are an error). Everything
// here is thread-safe and linear in the input.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

namespace strata {

// The limit for files (config.json, generation_config.json, safetensors headers and their index,
// tokenizer.json, tokenizer_config.json, traces, plan inputs) and other machine-written JSON.
// Real ones nest under 10 levels (tokenizer.json: model/normalizer Sequence/normalizers/item;
// config.json: text_config/rope_scaling/...); 128 leaves a wide margin for exporters that nest
// Sequences in Sequences, and keeps the deepest recursion over a value (a few hundred bytes of
// stack per level) far inside even a 1 MiB thread stack.
inline constexpr int kMaxFileJsonDepth = 128;

enum class JsonInputFault { kInvalidUtf8, kNulByte, kTooDeep, kSyntax };

struct JsonInputError {
  JsonInputFault fault;
  size_t offset = 0;  // byte offset in the text where the fault was found
  // One line, bounded: "invalid UTF-8 at byte offset 7", "NUL byte at byte offset 3", "arrays and
  // objects nest deeper than 128 levels (at byte offset 9000)", or the parser's syntax error.
  std::string message;
};

// The parsed value, or what is wrong with the text. `callback` (optional) sees the parser's
// events as nlohmann::json::parse's does.
std::variant<nlohmann::json, JsonInputError> parse_json_input(
    std::string_view text, int max_depth,
    const nlohmann::json::parser_callback_t& callback = nullptr);

// The same checks and parse into an ordered_json, whose objects keep their keys in the text's
// order (a JSON schema's properties, which a structured output follows).
std::variant<nlohmann::ordered_json, JsonInputError> parse_ordered_json_input(std::string_view text,
                                                                              int max_depth);

// parse_json_input with kMaxFileJsonDepth for a file's text; a failure throws strata::Error
// "<source>: <what> is not valid JSON: <message>".
nlohmann::json parse_json_file(std::string_view text, std::string_view source,
                               std::string_view what,
                               const nlohmann::json::parser_callback_t& callback = nullptr);

// `value` serialized with invalid UTF-8 replaced (U+FFFD) instead of throwing.
std::string safe_dump(const nlohmann::json& value);

// `value` serialized for an error message: at most about max_bytes (then "..."), invalid UTF-8
// replaced, one line. It stops at the limit: time, memory and recursion are bounded by max_bytes
// however large or deeply nested the value is.
std::string bounded_dump(const nlohmann::json& value, size_t max_bytes = 80);

}  // namespace strata
