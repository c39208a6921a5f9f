// parse_json_input (the one entry point for outside JSON), bounded_dump and quote: hostile text
// is refused before any value is built, and nothing quoted into a message is unbounded.

#include "core/json_input.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "core/error.h"
#include "core/quote.h"

namespace strata {
namespace {

using nlohmann::json;

std::string nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

JsonInputError error_of(std::string_view text, int max_depth = kMaxFileJsonDepth) {
  auto parsed = parse_json_input(text, max_depth);
  EXPECT_TRUE(std::holds_alternative<JsonInputError>(parsed)) << text.substr(0, 80);
  return std::holds_alternative<JsonInputError>(parsed) ? std::get<JsonInputError>(parsed)
                                                        : JsonInputError{};
}

TEST(JsonInputTest, ParsesAWholeValueUpToTheDepthLimit) {
  auto parsed = parse_json_input(nested(kMaxFileJsonDepth), kMaxFileJsonDepth);
  ASSERT_TRUE(std::holds_alternative<json>(parsed));
  parsed = parse_json_input(R"({"a": [1, {"b": "x"}]})", 3);
  ASSERT_TRUE(std::holds_alternative<json>(parsed));
  EXPECT_EQ(std::get<json>(parsed)["a"][1]["b"], "x");
}

TEST(JsonInputTest, NestingPastTheLimitIsRefusedWhereItStarts) {
  const JsonInputError e = error_of(nested(kMaxFileJsonDepth + 1));
  EXPECT_EQ(e.fault, JsonInputFault::kTooDeep);
  EXPECT_EQ(e.offset, static_cast<size_t>(kMaxFileJsonDepth));
  EXPECT_EQ(e.message, "arrays and objects nest deeper than 128 levels (at byte offset 128)");
  // A million levels (what overflowed the stack when a message dumped the value) fail the same
  // way, after reading only up to the first bracket past the limit.
  EXPECT_EQ(error_of(nested(1'000'000)).fault, JsonInputFault::kTooDeep);
  EXPECT_EQ(error_of(R"({"a": {"b": [1]}})", 2).fault, JsonInputFault::kTooDeep);
}

TEST(JsonInputTest, BracketsInsideStringsDoNotCount) {
  const std::string text = "[\"" + std::string(1000, '[') + "\\\"[[\"]";
  auto parsed = parse_json_input(text, 1);
  ASSERT_TRUE(std::holds_alternative<json>(parsed));
  EXPECT_EQ(std::get<json>(parsed)[0].get<std::string>().size(), 1003u);
}

TEST(JsonInputTest, InvalidUtf8AndNulBytesAreRefusedBeforeParsing) {
  JsonInputError e = error_of("{\"a\": \"\xff\"}");
  EXPECT_EQ(e.fault, JsonInputFault::kInvalidUtf8);
  EXPECT_EQ(e.offset, 7u);
  // nlohmann would stop at the NUL and accept {"a": 1}.
  e = error_of(std::string("{\"a\": 1}\0garbage", 16));
  EXPECT_EQ(e.fault, JsonInputFault::kNulByte);
  EXPECT_EQ(e.message, "NUL byte at byte offset 8");
}

TEST(JsonInputTest, SyntaxErrorsAreOneBoundedLine) {
  EXPECT_EQ(error_of("{\"a\": ").fault, JsonInputFault::kSyntax);
  EXPECT_EQ(error_of("{} {}").fault, JsonInputFault::kSyntax);  // one whole value only
  // nlohmann reports a number too large for a double as out_of_range, not parse_error.
  EXPECT_NE(error_of("[1e999]").message.find("number overflow"), std::string::npos);
  // The parser quotes the token it stopped at: here a 1 MB unterminated string with newlines.
  const std::string text = "[\"" + std::string(1 << 20, 'x') + "\n\"]";
  const JsonInputError e = error_of(text);
  EXPECT_EQ(e.fault, JsonInputFault::kSyntax);
  EXPECT_LT(e.message.size(), 400u);
  EXPECT_EQ(e.message.find('\n'), std::string::npos);
}

TEST(JsonInputTest, ParseJsonFileNamesTheSourceAndWhat) {
  try {
    parse_json_file(nested(200'000), "m/config.json", "config");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m/config.json: config is not valid JSON: arrays and objects nest deeper than 128 "
              "levels (at byte offset 128)");
  }
}

TEST(JsonInputTest, BoundedDumpStopsAtTheLimitHoweverDeepOrLargeTheValue) {
  EXPECT_EQ(bounded_dump(json::parse(R"({"a": [1, "x"]})")), R"({"a":[1,"x"]})");
  json deep = 0;
  for (int i = 0; i < 100'000; ++i) {  // built in memory: no parser limit applies
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(bounded_dump(deep, 10), std::string(10, '[') + "...");
  const json big = json::array({std::string(1 << 20, 'y'), 1});
  const std::string dumped = bounded_dump(big, 80);
  EXPECT_EQ(dumped, "[\"" + std::string(78, 'y') + "...");
  EXPECT_EQ(bounded_dump(json("\xff\n")), "\"\xEF\xBF\xBD\\n\"");  // replaced, escaped
}

TEST(QuoteTest, QuotesOneBoundedLineOfValidUtf8) {
  EXPECT_EQ(quote("model.norm"), "'model.norm'");
  EXPECT_EQ(quote("a\nb\x7f"), "'a?b?'");
  EXPECT_EQ(quote("a\xff"), "'a\xEF\xBF\xBD'");
  EXPECT_EQ(quote(std::string(200, 'z')), "'" + std::string(120, 'z') + "...'");
  // A cut never splits a code point: 'é' is two bytes and would straddle byte 3.
  EXPECT_EQ(one_line("abcé", 3), "abc...");
  EXPECT_EQ(one_line("abé", 3), "abé");
}

}  // namespace
}  // namespace strata
