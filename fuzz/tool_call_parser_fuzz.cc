// libFuzzer target: the tool-call parsers (server/tool_call_parser.h) on arbitrary generated
// text. The first byte picks the format (bit 0) and seeds the split; the rest is the text. A
// crash, a sanitizer report or a broken contract is a bug:
//   - the streaming parser fed the text in pieces (sizes drawn from the seed, empty ones too) and
//     byte by byte gives exactly parse_tool_calls's content and calls;
//   - every call has a name and arguments that are a JSON object's text;
//   - text without an opening marker (hermes) or without calls (llama3_json) is all content,
//     byte for byte, and llama3_json content is empty when there are calls;
//   - hermes fed byte by byte holds back at most a marker's prefix while no marker has appeared.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "server/tool_call_parser.h"

namespace {

using strata::server::ParsedToolCall;
using strata::server::ToolCallFormat;
using strata::server::ToolCallParse;
using strata::server::ToolCallStreamParser;

constexpr std::string_view kOpen = "<tool_call>";

void add(ToolCallParse& to, ToolCallParse&& from) {
  to.content += from.content;
  for (ParsedToolCall& call : from.calls) to.calls.push_back(std::move(call));
}

void check_same(const ToolCallParse& a, const ToolCallParse& b, const char* what) {
  STRATA_CHECK(a.content == b.content, what);
  STRATA_CHECK(a.calls == b.calls, what);
}

void check_calls(const ToolCallParse& whole) {
  for (const ParsedToolCall& call : whole.calls) {
    STRATA_CHECK(!call.name.empty(), "a call without a name");
    const auto args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    STRATA_CHECK(args.is_object(), "arguments that are no JSON object");
  }
}

ToolCallParse stream_in_pieces(ToolCallFormat format, std::string_view text, uint32_t seed) {
  ToolCallStreamParser parser(format);
  ToolCallParse all;
  uint32_t state = seed * 2654435761u + 1;
  for (size_t at = 0; at < text.size();) {
    state = state * 1664525u + 1013904223u;
    const size_t n = std::min<size_t>(text.size() - at, (state >> 24) % 19);
    add(all, parser.feed(text.substr(at, n)));
    at += n;
  }
  add(all, parser.finish());
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ToolCallFormat format =
      (data[0] & 1) != 0 ? ToolCallFormat::kLlama3Json : ToolCallFormat::kHermes;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const ToolCallParse whole = strata::server::parse_tool_calls(format, text);
  check_calls(whole);
  if (format == ToolCallFormat::kHermes) {
    STRATA_CHECK(whole.content.size() <= text.size(), "hermes content longer than the text");
    if (text.find(kOpen) == std::string_view::npos) {
      STRATA_CHECK(whole.content == text && whole.calls.empty(), "text without a marker changed");
    }
  } else {
    STRATA_CHECK(whole.calls.empty() ? whole.content == text : whole.content.empty(),
                 "llama3_json output is neither all content nor all calls");
  }

  check_same(stream_in_pieces(format, text, data[0] >> 1), whole, "split stream differs");

  ToolCallStreamParser bytes(format);
  ToolCallParse all;
  size_t released = 0;
  bool marker_seen = false;
  for (size_t i = 0; i < text.size(); ++i) {
    ToolCallParse r = bytes.feed(text.substr(i, 1));
    released += r.content.size();
    marker_seen = marker_seen || (i + 1 >= kOpen.size() &&
                                  text.substr(i + 1 - kOpen.size(), kOpen.size()) == kOpen);
    if (format == ToolCallFormat::kHermes && !marker_seen) {
      STRATA_CHECK(i + 1 - released < kOpen.size(), "hermes held back more than a marker prefix");
    }
    add(all, std::move(r));
  }
  add(all, bytes.finish());
  check_same(all, whole, "byte-by-byte stream differs");
  return 0;
}
