#include "server/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>
#include <variant>

#include "core/check.h"
#include "core/json_input.h"

namespace strata::server {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The length of the longest suffix of `text` that is a proper prefix of `marker`: the bytes that
// may still become the marker when more text comes.
size_t marker_prefix_at_end(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// The bytes at the end of `text` that start a UTF-8 sequence without finishing it (0 when the
// text ends on a code point boundary or in bytes that are invalid anyway).
size_t incomplete_utf8_at_end(std::string_view text) {
  size_t continuation = 0;
  while (continuation < 3 && continuation < text.size() &&
         (static_cast<unsigned char>(text[text.size() - 1 - continuation]) & 0xC0) == 0x80) {
    ++continuation;
  }
  if (continuation == text.size()) return 0;
  const auto lead = static_cast<unsigned char>(text[text.size() - 1 - continuation]);
  size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
  }
  return length > continuation + 1 ? continuation + 1 : 0;
}

// Moves held[0, size - keep) to out's content.
void release(std::string& held, size_t keep, ToolCallParse& out) {
  const size_t n = held.size() - keep;
  out.content.append(held, 0, n);
  held.erase(0, n);
}

std::optional<ordered_json> parse_json(std::string_view text) {
  std::variant<ordered_json, JsonInputError> parsed =
      parse_ordered_json_input(text, kMaxToolCallJsonDepth);
  if (auto* value = std::get_if<ordered_json>(&parsed)) return std::move(*value);
  return std::nullopt;
}

std::string compact(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// The call `text` holds (one JSON object, whitespace around it allowed), or nullopt when it is
// not one. Missing arguments are {} unless `arguments_required`.
std::optional<ParsedToolCall> parse_call(std::string_view text, bool arguments_required) {
  std::optional<ordered_json> value = parse_json(text);
  if (!value || !value->is_object()) return std::nullopt;
  const auto name = value->find("name");
  if (name == value->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ParsedToolCall call{name->get<std::string>(), "{}"};
  auto args = value->find("arguments");
  if (args == value->end()) args = value->find("parameters");
  if (args == value->end()) {
    if (arguments_required) return std::nullopt;
  } else if (args->is_object()) {
    call.arguments = compact(*args);
  } else if (args->is_string()) {
    // Some models write the arguments as a JSON string, as OpenAI's API carries them.
    std::optional<ordered_json> inner = parse_json(args->get_ref<const std::string&>());
    if (!inner || !inner->is_object()) return std::nullopt;
    call.arguments = compact(*inner);
  } else {
    return std::nullopt;
  }
  return call;
}

void append(ToolCallParse& to, ToolCallParse&& from) {
  to.content += from.content;
  for (ParsedToolCall& call : from.calls) to.calls.push_back(std::move(call));
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
  }
  STRATA_CHECK(false, "unknown ToolCallFormat");
  return {};
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find(kOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (chat_template.find(kPythonTag) != std::string_view::npos ||
      chat_template.find("\"parameters\": ") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view text) {
  ToolCallStreamParser parser(format);
  ToolCallParse result = parser.feed(text);
  append(result, parser.finish());
  return result;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format) : format_(format) {}

ToolCallParse ToolCallStreamParser::feed(std::string_view piece) {
  STRATA_CHECK(!finished_, "ToolCallStreamParser::feed after finish");
  ToolCallParse out;
  switch (format_) {
    case ToolCallFormat::kHermes:
      feed_hermes(piece, out);
      break;
    case ToolCallFormat::kLlama3Json:
      feed_llama3(piece, out);
      break;
  }
  return out;
}

ToolCallParse ToolCallStreamParser::finish() {
  STRATA_CHECK(!finished_, "ToolCallStreamParser::finish called twice");
  finished_ = true;
  ToolCallParse out;
  switch (format_) {
    case ToolCallFormat::kHermes:
      finish_hermes(out);
      break;
    case ToolCallFormat::kLlama3Json:
      finish_llama3(out);
      break;
  }
  return out;
}

// ---- kHermes ----------------------------------------------------------------------------------

void ToolCallStreamParser::feed_hermes(std::string_view piece, ToolCallParse& out) {
  std::string rest;  // owns the text after a closing marker while `piece` views it
  while (!piece.empty()) {
    switch (hermes_) {
      case HermesState::kAfterCall: {
        size_t n = 0;
        while (n < piece.size() && is_space(piece[n])) ++n;
        piece.remove_prefix(n);
        if (!piece.empty()) hermes_ = HermesState::kText;
        break;
      }
      case HermesState::kText: {
        held_.append(piece);
        piece = {};
        const size_t at = held_.find(kOpen);
        if (at == std::string::npos) {
          release(held_,
                  std::max(marker_prefix_at_end(held_, kOpen), incomplete_utf8_at_end(held_)), out);
          break;
        }
        out.content.append(held_, 0, at);
        rest = held_.substr(at + kOpen.size());
        piece = rest;
        held_.clear();
        body_.clear();
        hermes_ = HermesState::kOpened;
        break;
      }
      case HermesState::kOpened: {
        size_t n = 0;
        while (n < piece.size() && is_space(piece[n])) ++n;
        body_.append(piece.substr(0, n));
        piece.remove_prefix(n);
        if (piece.empty()) break;
        if (piece[0] == '{') {
          body_scanned_ = 0;
          hermes_ = HermesState::kBlock;
        } else {
          // A marker in prose ("wrap it in <tool_call> tags"): content, streamed on.
          out.content += kOpen;
          out.content += body_;
          body_.clear();
          hermes_ = HermesState::kText;
        }
        break;
      }
      case HermesState::kBlock: {
        body_.append(piece);
        piece = {};
        const size_t close = body_.find(kClose, body_scanned_);
        if (close == std::string::npos) {
          // A marker that ends in the next piece starts in the last kClose.size() - 1 bytes.
          body_scanned_ = body_.size() - std::min(body_.size(), kClose.size() - 1);
          break;
        }
        std::string after = body_.substr(close + kClose.size());
        end_block(close, /*closed=*/true, out);
        rest = std::move(after);
        piece = rest;
        break;
      }
    }
  }
}

void ToolCallStreamParser::end_block(size_t end, bool closed, ToolCallParse& out) {
  std::string_view body = std::string_view(body_).substr(0, end);
  // An output cut short inside the closing marker still holds its whole call.
  const auto json_of = [closed](std::string_view b) {
    return closed ? b : b.substr(0, b.size() - marker_prefix_at_end(b, kClose));
  };
  std::optional<ParsedToolCall> call = parse_call(json_of(body), /*arguments_required=*/false);
  if (!call && body.size() >= kOpen.size()) {
    // The first marker's block is no call: retry from the last marker inside it (the first one
    // was a mention whose text runs into a real call), the text before that being content.
    const size_t last = body.rfind(kOpen, body.size() - kOpen.size());
    if (last != std::string_view::npos) {
      out.content += kOpen;
      out.content += body.substr(0, last);
      body.remove_prefix(last + kOpen.size());
      call = parse_call(json_of(body), /*arguments_required=*/false);
    }
  }
  if (call) {
    out.calls.push_back(std::move(*call));
    hermes_ = HermesState::kAfterCall;
  } else {
    out.content += kOpen;
    out.content += body;
    if (closed) out.content += kClose;
    hermes_ = HermesState::kText;
  }
  body_.clear();
  body_scanned_ = 0;
}

void ToolCallStreamParser::finish_hermes(ToolCallParse& out) {
  switch (hermes_) {
    case HermesState::kText:
      release(held_, 0, out);
      break;
    case HermesState::kOpened:
      out.content += kOpen;
      out.content += body_;
      break;
    case HermesState::kBlock:
      end_block(body_.size(), /*closed=*/false, out);
      break;
    case HermesState::kAfterCall:
      break;
  }
}

// ---- kLlama3Json ------------------------------------------------------------------------------

void ToolCallStreamParser::feed_llama3(std::string_view piece, ToolCallParse& out) {
  for (size_t i = 0; i < piece.size() && llama3_ != Llama3State::kContent; ++i) {
    held_ += piece[i];
    if (!step_llama3(piece[i])) {
      // Not calls after all: everything so far, and everything after, is content.
      llama3_ = Llama3State::kContent;
      llama3_calls_.clear();
      piece.remove_prefix(i + 1);
      held_.append(piece);
      release(held_, incomplete_utf8_at_end(held_), out);
      return;
    }
  }
  if (llama3_ == Llama3State::kContent) {
    held_.append(piece);
    release(held_, incomplete_utf8_at_end(held_), out);
  }
}

bool ToolCallStreamParser::step_llama3(char c) {
  const auto begin_object = [this] {
    object_start_ = held_.size() - 1;
    depth_ = 1;
    in_string_ = false;
    escaped_ = false;
    llama3_ = Llama3State::kInObject;
  };
  switch (llama3_) {
    case Llama3State::kLeading:
      if (is_space(c)) return true;
      if (c == '{') {
        begin_object();
        return true;
      }
      if (c != kPythonTag[0]) return false;
      tag_matched_ = 1;
      llama3_ = Llama3State::kTag;
      return true;
    case Llama3State::kTag:
      if (c != kPythonTag[tag_matched_]) return false;
      if (++tag_matched_ == kPythonTag.size()) llama3_ = Llama3State::kBeforeObject;
      return true;
    case Llama3State::kBeforeObject:
      if (is_space(c)) return true;
      if (c != '{') return false;
      begin_object();
      return true;
    case Llama3State::kInObject:
      return step_object(c);
    case Llama3State::kAfterObject:
      if (is_space(c)) return true;
      if (c != ';') return false;
      after_semicolon_ = true;
      llama3_ = Llama3State::kBeforeObject;
      return true;
    case Llama3State::kContent:
      break;
  }
  STRATA_CHECK(false, "step_llama3 in kContent");
  return false;
}

bool ToolCallStreamParser::step_object(char c) {
  // Only finds where the object ends (strings and escapes skipped); nlohmann judges the text.
  if (in_string_) {
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
    return true;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    --depth_;
  }
  if (depth_ > 0) return true;
  std::optional<ParsedToolCall> call =
      parse_call(std::string_view(held_).substr(object_start_), /*arguments_required=*/true);
  if (!call) return false;
  llama3_calls_.push_back(std::move(*call));
  llama3_ = Llama3State::kAfterObject;
  return true;
}

void ToolCallStreamParser::finish_llama3(ToolCallParse& out) {
  const bool calls = llama3_ == Llama3State::kAfterObject ||
                     (llama3_ == Llama3State::kBeforeObject && after_semicolon_);
  if (calls) {
    out.calls = std::move(llama3_calls_);
    held_.clear();
  } else {
    release(held_, 0, out);
  }
}

}  // namespace strata::server
