// Tool calls pulled out of generated text (server/tool_call_parser.h) on outputs shaped like real
// models' -- Qwen3 and Hermes <tool_call> blocks, Llama 3.1 JSON calls -- and the streaming
// parser's contract: any split of any text gives the whole parse, content is released as soon as
// it cannot start a call, and the format names and template detection.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/tool_call_parser.h"

namespace strata::server {

void PrintTo(const ParsedToolCall& call, std::ostream* os) {
  *os << call.name << "(" << call.arguments << ")";
}

namespace {

constexpr ToolCallFormat kHermes = ToolCallFormat::kHermes;
constexpr ToolCallFormat kLlama3 = ToolCallFormat::kLlama3Json;

using Calls = std::vector<ParsedToolCall>;

ToolCallParse parse(ToolCallFormat f, std::string_view text) { return parse_tool_calls(f, text); }

void add(ToolCallParse& to, const ToolCallParse& from) {
  to.content += from.content;
  to.calls.insert(to.calls.end(), from.calls.begin(), from.calls.end());
}

ToolCallParse stream(ToolCallFormat f, const std::vector<std::string_view>& pieces) {
  ToolCallStreamParser parser(f);
  ToolCallParse all;
  for (const std::string_view piece : pieces) add(all, parser.feed(piece));
  add(all, parser.finish());
  return all;
}

std::string show(std::string_view text) { return nlohmann::json(std::string(text)).dump(); }

// A Qwen3 / Hermes block as the models write it.
std::string block(std::string_view json) {
  return "<tool_call>\n" + std::string(json) + "\n</tool_call>";
}

const std::string kWeather =
    R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})";
const std::string kTime = R"({"name": "get_time", "arguments": {"timezone": "Europe/Paris"}})";
const ParsedToolCall kWeatherCall{"get_weather", R"({"city":"Paris","unit":"celsius"})"};
const ParsedToolCall kTimeCall{"get_time", R"({"timezone":"Europe/Paris"})"};

// ---- kHermes ----------------------------------------------------------------------------------

TEST(HermesToolCallTest, OneBlockIsOneCall) {
  const ToolCallParse p = parse(kHermes, block(kWeather));
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
}

TEST(HermesToolCallTest, WhitespaceBetweenAndAfterCallsIsDropped) {
  // Qwen2.5's parallel calls: one block per line, then the end of the turn.
  const ToolCallParse p = parse(kHermes, block(kWeather) + "\n" + block(kTime) + "\n");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (Calls{kWeatherCall, kTimeCall}));
  // Blocks back to back, or with blank lines between.
  EXPECT_EQ(parse(kHermes, block(kWeather) + block(kTime)).calls, (Calls{kWeatherCall, kTimeCall}));
  EXPECT_EQ(parse(kHermes, block(kWeather) + " \n\n\t" + block(kTime)).content, "");
}

TEST(HermesToolCallTest, ContentBeforeAndAfterCallsStays) {
  const ToolCallParse p = parse(
      kHermes, "I'll look that up for you.\n" + block(kWeather) + "\n\nThe call is on its way.");
  EXPECT_EQ(p.content, "I'll look that up for you.\nThe call is on its way.")
      << "whitespace before a call stays, whitespace after one is dropped";
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  const ToolCallParse between = parse(kHermes, block(kWeather) + "\nand then\n" + block(kTime));
  EXPECT_EQ(between.content, "and then\n");
  EXPECT_EQ(between.calls, (Calls{kWeatherCall, kTimeCall}));
}

TEST(HermesToolCallTest, ThinkBlockBeforeACallStaysContent) {
  const std::string think =
      "<think>\nThe user wants the weather in Paris. I have get_weather, so I call it.\n"
      "</think>\n\n";
  const ToolCallParse p = parse(kHermes, think + block(kWeather));
  EXPECT_EQ(p.content, think);
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
}

TEST(HermesToolCallTest, MarkerMentionedWhileThinkingDoesNotSwallowTheCall) {
  const std::string think = "<think>\nI answer with a <tool_call> block.\n</think>\n\n";
  const ToolCallParse p = parse(kHermes, think + block(kWeather));
  EXPECT_EQ(p.content, think) << "the abandoned opening marker and its text are content";
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  // A whole block in the thinking that is no call stays content too.
  const std::string quoted = "<think>Format: <tool_call>JSON</tool_call>.</think>\n";
  const ToolCallParse q = parse(kHermes, quoted + block(kTime));
  EXPECT_EQ(q.content, quoted);
  EXPECT_EQ(q.calls, Calls{kTimeCall});
}

TEST(HermesToolCallTest, OpeningMarkerInsideArgumentsDoesNotSplitTheCall) {
  const ToolCallParse p = parse(
      kHermes, block(R"({"name": "write", "arguments": {"text": "wrap it in <tool_call> tags"}})"));
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (Calls{{"write", R"({"text":"wrap it in <tool_call> tags"})"}}));
}

TEST(HermesToolCallTest, BlockThatIsNoCallIsRetriedFromItsLastOpeningMarker) {
  const std::string broken = "<tool_call>\n{\"name\": \"get_weather\", \"arg";
  ToolCallParse p = parse(kHermes, broken + "\n" + block(kWeather) + "\n");
  EXPECT_EQ(p.content, broken + "\n");
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  p = parse(kHermes, broken + "<tool_call>{\"name\": 3}</tool_call>");
  EXPECT_EQ(p.content, broken + "<tool_call>{\"name\": 3}</tool_call>");
  EXPECT_TRUE(p.calls.empty());
}

TEST(HermesToolCallTest, MalformedJsonStaysContentMarkersIncluded) {
  const std::string bad = block(R"({"name": "get_weather", "arguments": {"city": "Paris"})");
  ToolCallParse p = parse(kHermes, bad);
  EXPECT_EQ(p.content, bad);
  EXPECT_TRUE(p.calls.empty());
  // A bad block does not spoil a good one after it, and the whitespace after it stays.
  p = parse(kHermes, bad + "\n" + block(kTime));
  EXPECT_EQ(p.content, bad + "\n");
  EXPECT_EQ(p.calls, Calls{kTimeCall});
  for (const std::string_view body :
       {"", "get_weather(city='Paris')", R"({"name": "f", "arguments": {}} extra)",
        R"({"name": "f", "arguments": {}}{"name": "g", "arguments": {}})",
        R"([{"name": "f", "arguments": {}}])", "{'name': 'f', 'arguments': {}}"}) {
    const std::string text = block(body);
    p = parse(kHermes, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty()) << show(text);
  }
}

TEST(HermesToolCallTest, BlockWithoutAStringNameIsContent) {
  for (const std::string_view body :
       {R"({"arguments": {"city": "Paris"}})", R"({"name": "", "arguments": {}})",
        R"({"name": 7, "arguments": {}})", R"({"name": null, "arguments": {}})",
        R"({"function": {"name": "get_weather", "arguments": {}}})"}) {
    const std::string text = "Calling.\n" + block(body) + "\n";
    const ToolCallParse p = parse(kHermes, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty()) << show(text);
  }
}

TEST(HermesToolCallTest, ArgumentsThatAreNoObjectAreContent) {
  for (const std::string_view body :
       {R"({"name": "f", "arguments": [1, 2]})", R"({"name": "f", "arguments": 3})",
        R"({"name": "f", "arguments": "Paris"})", R"({"name": "f", "arguments": null})",
        R"({"name": "f", "arguments": "[1]"})", R"({"name": "f", "parameters": true})"}) {
    const std::string text = block(body);
    const ToolCallParse p = parse(kHermes, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty()) << show(text);
  }
}

TEST(HermesToolCallTest, ParametersStringArgumentsAndNoArgumentsAreAccepted) {
  EXPECT_EQ(parse(kHermes, block(R"({"name": "f", "parameters": {"x": 1}})")).calls,
            (Calls{{"f", R"({"x":1})"}}));
  EXPECT_EQ(parse(kHermes, block(R"({"name": "f", "arguments": "{\"x\": [1, 2]}"})")).calls,
            (Calls{{"f", R"({"x":[1,2]})"}}));
  EXPECT_EQ(parse(kHermes, block(R"({"name": "get_time"})")).calls, (Calls{{"get_time", "{}"}}));
  EXPECT_EQ(parse(kHermes, block(R"({"arguments": {}, "name": "f", "id": 3})")).calls,
            (Calls{{"f", "{}"}}))
      << "key order and other keys do not matter";
}

TEST(HermesToolCallTest, ArgumentsKeepTheModelsKeyOrder) {
  const ToolCallParse p =
      parse(kHermes, block(R"({"name": "book", "arguments": {"to": "NYC", "from": "SFO",)"
                           R"( "legs": [{"z": 1, "a": 2}], "adults": 2, "price": 12.5}})"));
  EXPECT_EQ(p.calls,
            (Calls{{"book", R"({"to":"NYC","from":"SFO","legs":[{"z":1,"a":2}],"adults":2,)"
                            R"("price":12.5})"}}));
}

TEST(HermesToolCallTest, UnclosedFinalBlockIsACallOnlyWhenItsJsonIsComplete) {
  // The model stopped (EOS, max_tokens, a stop string) before the closing marker.
  ToolCallParse p = parse(kHermes, "Checking.\n<tool_call>\n" + kWeather + "\n");
  EXPECT_EQ(p.content, "Checking.\n");
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  p = parse(kHermes, block(kTime) + "\n<tool_call>\n" + kWeather);
  EXPECT_EQ(p.calls, (Calls{kTimeCall, kWeatherCall}));
  const std::string cut = R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Par)";
  p = parse(kHermes, block(kTime) + "\n" + cut);
  EXPECT_EQ(p.content, cut);
  EXPECT_EQ(p.calls, Calls{kTimeCall});
  EXPECT_EQ(parse(kHermes, "<tool_call>").content, "<tool_call>");
  EXPECT_EQ(parse(kHermes, "<tool_call>\n ").content, "<tool_call>\n ");
  // Cut inside the closing marker (several tokens in some tokenizers).
  p = parse(kHermes, "<tool_call>\n" + kWeather + "\n</tool_");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
}

TEST(HermesToolCallTest, UnicodeInArgumentsIsKeptAsUtf8) {
  ToolCallParse p =
      parse(kHermes, "Je regarde 🌦️\n" +
                         block(R"({"name": "get_weather", "arguments": {"city": "São Paulo",)"
                               R"( "note": "東京 \u00e9\ud83c\udf27", "q": "a\"b\\c\n"}})"));
  EXPECT_EQ(p.content, "Je regarde 🌦️\n");
  EXPECT_EQ(
      p.calls,
      (Calls{{"get_weather", R"({"city":"São Paulo","note":"東京 é🌧","q":"a\"b\\c\n"})"}}));
  p = parse(kHermes, block(R"({"name": "überprüfen", "arguments": {}})"));
  EXPECT_EQ(p.calls, (Calls{{"überprüfen", "{}"}}));
}

TEST(HermesToolCallTest, BodiesJsonInputRefusesAreContent) {
  // Invalid UTF-8, a NUL byte, nesting beyond kMaxToolCallJsonDepth.
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  for (const std::string& body :
       {std::string(R"({"name": "f", "arguments": {"x": ")") + "\xC3\x28" + "\"}}",
        std::string(R"({"name": "f", "arguments": {"x": 1}})") + std::string(1, '\0'),
        R"({"name": "f", "arguments": {"x": )" + deep + "}}"}) {
    const std::string text = block(body);
    const ToolCallParse p = parse(kHermes, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty());
  }
}

TEST(HermesToolCallTest, TextWithoutBlocksIsContent) {
  for (const std::string_view text : {"", "Paris is sunny today.", "a < b and </tool_call> alone",
                                      "<tool_call", "<tool_call >{}</tool_call>", "\n\n"}) {
    const ToolCallParse p = parse(kHermes, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty());
  }
}

// ---- kLlama3Json ------------------------------------------------------------------------------

const std::string kLlamaWeather =
    R"({"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}})";
const std::string kLlamaTime =
    R"({"name": "get_time", "parameters": {"timezone": "Europe/Paris"}})";

TEST(Llama3JsonToolCallTest, TheWholeOutputIsOneCall) {
  ToolCallParse p = parse(kLlama3, kLlamaWeather);
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  p = parse(kLlama3, "\n\n<|python_tag|>" + kLlamaWeather + "\n");
  EXPECT_EQ(p.content, "") << "leading whitespace and <|python_tag|> belong to the call";
  EXPECT_EQ(p.calls, Calls{kWeatherCall});
  EXPECT_EQ(parse(kLlama3, "<|python_tag|> \n" + kLlamaWeather).calls, Calls{kWeatherCall});
}

TEST(Llama3JsonToolCallTest, CallsSeparatedBySemicolons) {
  for (const std::string& text :
       {kLlamaWeather + "; " + kLlamaTime, kLlamaWeather + ";" + kLlamaTime + ";",
        "<|python_tag|>" + kLlamaWeather + " ;\n" + kLlamaTime + " ; \n"}) {
    const ToolCallParse p = parse(kLlama3, text);
    EXPECT_EQ(p.content, "") << show(text);
    EXPECT_EQ(p.calls, (Calls{kWeatherCall, kTimeCall})) << show(text);
  }
  const std::string two_semicolons = kLlamaWeather + ";;" + kLlamaTime;
  EXPECT_EQ(parse(kLlama3, two_semicolons).content, two_semicolons);
  const std::string no_separator = kLlamaWeather + " " + kLlamaTime;
  EXPECT_EQ(parse(kLlama3, no_separator).content, no_separator);
}

TEST(Llama3JsonToolCallTest, ArgumentsIsASynonymAndMayBeAString) {
  EXPECT_EQ(parse(kLlama3, kWeather).calls, Calls{kWeatherCall});
  EXPECT_EQ(parse(kLlama3, R"({"name": "f", "arguments": "{\"x\": 1}"})").calls,
            (Calls{{"f", R"({"x":1})"}}));
}

TEST(Llama3JsonToolCallTest, ProseAroundTheJsonMakesItAllContent) {
  for (const std::string& text : std::vector<std::string>{
           "Here is the call: " + kLlamaWeather, kLlamaWeather + "\nThis gets the weather.",
           kLlamaWeather + "; and more", "The weather in Paris is sunny.", "<|python_tag|>",
           "<|python_tag|>brave_search.call(query=\"Paris weather\")", "<|python_ta",
           "<|eom_id|>" + kLlamaWeather}) {
    const ToolCallParse p = parse(kLlama3, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty()) << show(text);
  }
}

TEST(Llama3JsonToolCallTest, JsonThatIsNoCallIsContent) {
  for (const std::string& text :
       {std::string(R"({"name": "Bob", "age": 3})"), std::string(R"({"name": "get_time"})"),
        std::string(R"({"name": "f", "parameters": [1]})"),
        std::string(R"({"parameters": {"x": 1}})"),
        std::string(R"({"name": "f", "parameters": {})"), std::string(R"(["name", "f"])"),
        kLlamaWeather + "; " + R"({"name": "Bob"})",
        std::string(R"({"name": "f", "parameters": {}])")}) {
    const ToolCallParse p = parse(kLlama3, text);
    EXPECT_EQ(p.content, text) << show(text);
    EXPECT_TRUE(p.calls.empty()) << show(text);
  }
}

TEST(Llama3JsonToolCallTest, BracesAndQuotesInStringsDoNotEndTheObject) {
  const ToolCallParse p = parse(
      kLlama3, R"({"name": "run", "parameters": {"code": "if (a) { b(\"}\"); } // ;{", "n": 1}})"
               R"(; {"name": "f", "parameters": {"s": "\\"}})");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (Calls{{"run", R"({"code":"if (a) { b(\"}\"); } // ;{","n":1})"},
                            {"f", R"({"s":"\\"})"}}));
}

TEST(Llama3JsonToolCallTest, UnicodeInArgumentsIsKeptAsUtf8) {
  const ToolCallParse p = parse(
      kLlama3, R"({"name": "translate", "parameters": {"text": "Grüße, 世界 👋", "to": "\u00e9"}})");
  EXPECT_EQ(p.calls, (Calls{{"translate", R"({"text":"Grüße, 世界 👋","to":"é"})"}}));
}

TEST(Llama3JsonToolCallTest, EmptyAndWhitespaceOutputsAreContent) {
  for (const std::string_view text : {"", " ", "\n\t\n"}) {
    const ToolCallParse p = parse(kLlama3, text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
  }
}

// ---- Streaming ------------------------------------------------------------------------------

struct Case {
  ToolCallFormat format;
  std::string text;
};

std::vector<Case> streaming_cases() {
  std::vector<Case> cases;
  const std::vector<std::string> hermes = {
      block(kWeather),
      "I'll check both.\n" + block(kWeather) + "\n" + block(kTime) + "\n",
      "<think>\nMaybe a <tool_call> block.\n</think>\n\n" + block(kWeather) + "\n\nDone.",
      block(R"({"name": "f", "arguments": {"x": 1})") + "\n" + block(kTime),
      "Temperature in São Paulo: 25 °C 🌡️ <tool" + std::string("_call> ") + block(kTime) +
          "<tool_call>\n" + kWeather,
      "a <<tool_call>x</tool_call> <tool_call><tool_call>\n" + kTime + "</tool_call></tool_call>",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
      "Use <tool_call> \n tags: <tool_call>\n{\"name\": \"f\", \"arg <tool_call>" + kTime +
          "</tool_call>\n<tool_call>" + kWeather + "\n</tool_",
      block(R"({"name": "w", "arguments": {"t": "<tool_call>x"}})") + "<tool_call>\t",
      "no calls at all, just text < with <tool_ bits </tool_call> and \xE6\x9D\xB1\xE4\xBA\xAC"};
  const std::vector<std::string> llama = {
      kLlamaWeather,
      "\n <|python_tag|>" + kLlamaWeather + " ; " + kLlamaTime + ";\n",
      kLlamaWeather + " is the call I would make.",
      "Sure! " + kLlamaWeather,
      "<|python_tag|>brave_search.call(query=\"x\")",
      R"({"name": "run", "parameters": {"code": "}{\"; ;"}} ; {"name": "Bob"})",
      R"({"name": "f", "parameters": {"city": "Zürich 🇨🇭"}})",
      R"(  {"name": "f", "parameters": {)"};
  for (const std::string& t : hermes) {
    cases.push_back({kHermes, t});
    cases.push_back({kLlama3, t});
  }
  for (const std::string& t : llama) {
    cases.push_back({kLlama3, t});
    cases.push_back({kHermes, t});
  }
  return cases;
}

void expect_stream_matches(const Case& c, const std::vector<std::string_view>& pieces,
                           const ToolCallParse& whole) {
  const ToolCallParse streamed = stream(c.format, pieces);
  std::string split;
  for (const std::string_view p : pieces) split += std::to_string(p.size()) + " ";
  EXPECT_EQ(streamed.content, whole.content)
      << tool_call_format_name(c.format) << " " << show(c.text) << " split " << split;
  EXPECT_EQ(streamed.calls, whole.calls)
      << tool_call_format_name(c.format) << " " << show(c.text) << " split " << split;
}

TEST(ToolCallStreamTest, EverySplitPointGivesTheWholeParse) {
  for (const Case& c : streaming_cases()) {
    const std::string_view text = c.text;
    const ToolCallParse whole = parse(c.format, text);
    for (size_t i = 0; i <= text.size(); ++i) {
      expect_stream_matches(c, {text.substr(0, i), text.substr(i)}, whole);
    }
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    expect_stream_matches(c, bytes, whole);
  }
}

TEST(ToolCallStreamTest, RandomSplitsGiveTheWholeParse) {
  std::mt19937 rng(20240611);
  for (const Case& c : streaming_cases()) {
    const std::string_view text = c.text;
    const ToolCallParse whole = parse(c.format, text);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::string_view> pieces;
      const size_t max_piece = 1 + static_cast<size_t>(rng() % 16);
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::min(text.size() - at, static_cast<size_t>(rng() % (max_piece + 1)));
        pieces.push_back(text.substr(at, n));  // empty pieces too
        at += n;
      }
      expect_stream_matches(c, pieces, whole);
    }
  }
}

TEST(ToolCallStreamTest, HermesContentBeforeACallIsReleasedBeforeTheCallArrives) {
  ToolCallStreamParser p(kHermes);
  EXPECT_EQ(p.feed("I'll check the weather").content, "I'll check the weather");
  EXPECT_EQ(p.feed(" in Paris.\n<").content, " in Paris.\n") << "only '<' may start a marker";
  ToolCallParse r = p.feed("tool");
  EXPECT_EQ(r.content, "");
  r = p.feed("_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.calls.empty());
  r = p.feed("{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_");
  EXPECT_TRUE(r.calls.empty()) << "not closed yet";
  r = p.feed("call>\n");
  EXPECT_EQ(r.calls, Calls{kWeatherCall});
  EXPECT_EQ(r.content, "");
  r = p.feed("Anything else?");
  EXPECT_EQ(r.content, "Anything else?");
  r = p.finish();
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallStreamTest, HermesHoldsOnlyAPossibleMarkerOrAnUnfinishedCodePoint) {
  ToolCallStreamParser p(kHermes);
  EXPECT_EQ(p.feed("a <tool_cal").content, "a ");
  EXPECT_EQ(p.feed("m").content, "<tool_calm") << "no longer a marker: released at once";
  EXPECT_EQ(p.feed("<<").content, "<");
  EXPECT_EQ(p.feed("b").content, "<b");
  EXPECT_EQ(p.feed("caf\xC3").content, "caf");
  EXPECT_EQ(p.feed("\xA9 \xF0\x9F").content, "\xC3\xA9 ");
  EXPECT_EQ(p.feed("\x8C\xA7").content, "\xF0\x9F\x8C\xA7");
  EXPECT_EQ(p.feed("</tool_call>").content, "</tool_call>");
  EXPECT_EQ(p.feed("x<").content, "x");
  EXPECT_EQ(p.finish().content, "<");
  // Over a whole text with no blocks, fed byte by byte, at most a marker's prefix is ever held.
  const std::string text = "Use <b>bold</b>, a < b, <tool_ and <tool_call ok. 東京";
  ToolCallStreamParser q(kHermes);
  size_t released = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    released += q.feed(text.substr(i, 1)).content.size();
    EXPECT_LE(i + 1 - released, std::string_view("<tool_call>").size() - 1) << i;
  }
  EXPECT_EQ(released + q.finish().content.size(), text.size());
}

TEST(ToolCallStreamTest, HermesMarkerInProseIsReleasedAtItsNextByte) {
  ToolCallStreamParser p(kHermes);
  EXPECT_EQ(p.feed("Wrap it in <tool_call>").content, "Wrap it in ");
  EXPECT_EQ(p.feed(" \n").content, "") << "a block may still start";
  EXPECT_EQ(p.feed("tags.").content, "<tool_call> \ntags.");
  EXPECT_EQ(p.feed(" <tool_call>").content, " ");
  EXPECT_EQ(p.finish().content, "<tool_call>");
}

TEST(ToolCallStreamTest, HermesBlockThatIsNoCallIsReleasedAtItsEnd) {
  ToolCallStreamParser p(kHermes);
  EXPECT_EQ(p.feed("<tool_call>\n{\"name\"").content, "");
  const ToolCallParse r = p.feed(": 1}</tool_call>\nNo.");
  EXPECT_EQ(r.content, "<tool_call>\n{\"name\": 1}</tool_call>\nNo.")
      << "the whitespace after a block that is no call stays";
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallStreamTest, Llama3ProseStreamsThroughAtOnce) {
  ToolCallStreamParser p(kLlama3);
  EXPECT_EQ(p.feed("\n ").content, "") << "leading whitespace waits for the first other byte";
  EXPECT_EQ(p.feed("The weather").content, "\n The weather");
  EXPECT_EQ(p.feed(" is {\"sunny\"}").content, " is {\"sunny\"}");
  EXPECT_EQ(p.finish().content, "");
  ToolCallStreamParser q(kLlama3);
  EXPECT_EQ(q.feed("<|python").content, "");
  EXPECT_EQ(q.feed("_tig|>").content, "<|python_tig|>") << "not the tag after all";
}

TEST(ToolCallStreamTest, Llama3CallsAreHeldUntilFinish) {
  ToolCallStreamParser p(kLlama3);
  ToolCallParse r = p.feed("<|python_tag|>" + kLlamaWeather);
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.calls.empty()) << "more text could still make it content";
  r = p.feed("; " + kLlamaTime + "\n");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.calls.empty());
  r = p.finish();
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls, (Calls{kWeatherCall, kTimeCall}));
}

TEST(ToolCallStreamTest, Llama3JsonIsReleasedAsSoonAsItCannotBeCalls) {
  ToolCallStreamParser p(kLlama3);
  EXPECT_EQ(p.feed(kLlamaWeather + "\n").content, "");
  EXPECT_EQ(p.feed("That").content, kLlamaWeather + "\nThat");
  EXPECT_EQ(p.feed(" call gets the weather.").content, " call gets the weather.");
  ToolCallParse r = p.finish();
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.calls.empty());
  ToolCallStreamParser q(kLlama3);
  EXPECT_EQ(q.feed(R"({"name": "Bob", "age": 3)").content, "");
  EXPECT_EQ(q.feed("}").content, R"({"name": "Bob", "age": 3})")
      << "an object that is no call is content when it closes";
}

TEST(ToolCallStreamTest, LongOutputsFedByteByByteTakeLinearTime) {
  // A quadratic rescan per piece would take minutes here.
  const std::string filler(1 << 20, 'x');
  const std::string hermes = "Let me see. " + filler + "\n<tool_call>\n" +
                             R"({"name": "f", "arguments": {"s": ")" + filler +
                             "\"}}\n</tool_call>";
  const std::string llama = R"({"name": "f", "parameters": {"s": ")" + filler + "\"}}";
  for (const auto& [format, text] : {std::pair{kHermes, hermes}, std::pair{kLlama3, llama}}) {
    ToolCallStreamParser p(format);
    ToolCallParse all;
    for (size_t i = 0; i < text.size(); ++i) add(all, p.feed(std::string_view(text).substr(i, 1)));
    add(all, p.finish());
    ASSERT_EQ(all.calls.size(), 1u);
    EXPECT_EQ(all.calls[0].arguments.size(), filler.size() + 8);
  }
}

// ---- Format names and detection -------------------------------------------------------------

TEST(ToolCallFormatTest, NamesAreVllmsToolCallParserNames) {
  EXPECT_EQ(tool_call_format_from_name("hermes"), kHermes);
  EXPECT_EQ(tool_call_format_from_name("llama3_json"), kLlama3);
  for (const std::string_view name :
       {"", "Hermes", "qwen", "qwen3", "llama3", "llama3_json ", "llama4_json", "pythonic"}) {
    EXPECT_EQ(tool_call_format_from_name(name), std::nullopt) << name;
  }
  for (const ToolCallFormat f : {kHermes, kLlama3}) {
    EXPECT_EQ(tool_call_format_from_name(tool_call_format_name(f)), f);
  }
}

std::optional<std::string> template_of(const char* tokenizer) {
  const std::filesystem::path path = std::filesystem::path(STRATA_TEST_DATA_DIR) / "tokenizers" /
                                     tokenizer / "tokenizer_config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return nlohmann::json::parse(in).at("chat_template").get<std::string>();
}

TEST(ToolCallFormatTest, Qwen3TemplateIsHermes) {
  const std::optional<std::string> source = template_of("qwen3");
  if (!source) GTEST_SKIP() << "tests/data/tokenizers/qwen3 is absent: run scripts/install_deps.sh";
  EXPECT_EQ(detect_tool_call_format(*source), kHermes);
}

TEST(ToolCallFormatTest, Llama3TemplateWithoutToolsIsNoFormat) {
  // tests/data/tokenizers/llama3_1 carries Llama 3's chat template, which renders no tools.
  const std::optional<std::string> source = template_of("llama3_1");
  if (!source)
    GTEST_SKIP() << "tests/data/tokenizers/llama3_1 is absent: run scripts/install_deps.sh";
  ASSERT_EQ(source->find("tool"), std::string::npos) << "the fixture changed: update this test";
  EXPECT_EQ(detect_tool_call_format(*source), std::nullopt);
}

TEST(ToolCallFormatTest, Llama31ToolTemplateIsLlama3Json) {
  // How Llama 3.1 / 3.2 Instruct templates write an assistant's tool call, and the tag of its
  // built-in tools.
  const std::string renders_call =
      "{%- set tool_call = message.tool_calls[0].function %}\n"
      "{{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
      "{{- '\"parameters\": ' }}\n"
      "{{- tool_call.arguments | tojson }}\n"
      "{{- \"}\" }}";
  EXPECT_EQ(detect_tool_call_format(renders_call), kLlama3);
  EXPECT_EQ(detect_tool_call_format("{{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}"),
            kLlama3);
  EXPECT_EQ(detect_tool_call_format(
                "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content }}"
                "{%- endfor %}"),
            std::nullopt);
  EXPECT_EQ(detect_tool_call_format(""), std::nullopt);
}

}  // namespace
}  // namespace strata::server
