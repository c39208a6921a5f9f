// Tool calling on POST /v1/chat/completions without HTTP: tools rendered by the chat template
// (Qwen3's, on strata-tiny's tokenizer), tool_choice none / auto / required / named, the
// constraint a forced choice decodes under (its language checked with the grammar layer's
// automaton), assistant turns' tool calls passed back to the template, every bad field a 400
// naming it, and the output side: calls parsed out of the text, whole and streamed, as OpenAI's
// tool_calls with finish_reason "tool_calls".

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/grammar_compiler.h"
#include "grammar/regex.h"
#include "server/completion_output.h"
#include "server/completion_request.h"
#include "server/response_json.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {
namespace {

using nlohmann::json;

constexpr const char* kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Weather",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"},)"
    R"("unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}}},)"
    R"({"type":"function","function":{"name":"get_time"}}])";

std::string qwen3_template() {
  std::ifstream in(std::string(STRATA_TEST_DATA_DIR) + "/tokenizers/qwen3/tokenizer_config.json");
  return json::parse(in).at("chat_template").get<std::string>();
}

class ToolCallingTest : public ::testing::Test {
 protected:
  ToolCallingTest() : tok_(tokenizer::Tokenizer::load(STRATA_MODEL_DIR)) {
    tok_.set_chat_template(qwen3_template());
    model_ = ServedModel{"strata-tiny", 8192, 4096, &tok_, 16};
    model_.tool_call_format = detect_tool_call_format(tok_.chat_template());
  }

  std::variant<CompletionRequest, ApiError> parse(const std::string& fields) {
    return parse_chat_request(
        R"({"messages":[{"role":"user","content":"Weather in Paris?"}],)" + fields + "}", model_);
  }
  CompletionRequest ok(const std::string& fields) {
    auto r = parse(fields);
    if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << fields << ": " << e->message;
    return std::holds_alternative<CompletionRequest>(r) ? std::get<CompletionRequest>(r)
                                                        : CompletionRequest{};
  }
  ApiError error(const std::string& fields) {
    auto r = parse(fields);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << fields << " was accepted";
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
  }
  std::string prompt(const CompletionRequest& r) { return tok_.decode(r.prompts.at(0), false); }
  // Whether the request's constraint accepts `text` as a whole output.
  static bool accepts(const StructuredOutput& c, const std::string& text) {
    auto regex = grammar::structured_output_regex(c, {});
    EXPECT_TRUE(regex.ok()) << regex.status().message();
    auto nfa = grammar::compile_regex(*regex, {});
    EXPECT_TRUE(nfa.ok()) << nfa.status().message();
    auto dfa = grammar::ByteDfa::build(*nfa, 1 << 16);
    EXPECT_TRUE(dfa.ok());
    return dfa->matches(text);
  }

  tokenizer::Tokenizer tok_;
  ServedModel model_;
};

TEST_F(ToolCallingTest, TheTemplateShowsTheToolsAndTheOutputIsParsedInItsFormat) {
  ASSERT_EQ(model_.tool_call_format, ToolCallFormat::kHermes) << "Qwen3's template: <tool_call>";
  const CompletionRequest r = ok(kTools);
  EXPECT_EQ(r.tool_call_format, ToolCallFormat::kHermes) << "tool_choice defaults to auto";
  EXPECT_FALSE(r.params.structured.active()) << "auto: the model decides";
  const std::string text = prompt(r);
  EXPECT_NE(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"get_time\""), std::string::npos);
}

TEST_F(ToolCallingTest, ToolChoiceNoneHidesTheToolsAndParsesNothing) {
  const CompletionRequest r = ok(std::string(kTools) + R"(,"tool_choice":"none")");
  EXPECT_FALSE(r.tool_call_format);
  EXPECT_EQ(prompt(r).find("<tools>"), std::string::npos);
  EXPECT_FALSE(ok(R"("tool_choice":"auto")").tool_call_format) << "auto without tools";
  EXPECT_FALSE(ok(R"("tools":[])").tool_call_format);
}

TEST_F(ToolCallingTest, RequiredConstrainsTheOutputToCallsOfAnyToolWithValidArguments) {
  const CompletionRequest r = ok(std::string(kTools) + R"(,"tool_choice":"required")");
  const StructuredOutput& c = r.params.structured;
  ASSERT_TRUE(c.active());
  EXPECT_EQ(r.structured_field, "tool_choice");
  EXPECT_TRUE(c.repeated) << "parallel_tool_calls defaults to true";
  const std::string weather =
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"c\"}}"
      "\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>";
  EXPECT_TRUE(accepts(c, weather));
  EXPECT_TRUE(accepts(c, time));
  EXPECT_TRUE(accepts(c, weather + "\n" + time));
  EXPECT_FALSE(accepts(c, "")) << "at least one call";
  EXPECT_FALSE(accepts(c, "Sure. " + weather)) << "no text around the calls";
  EXPECT_FALSE(accepts(
      c,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"))
      << "a required argument missing";
  EXPECT_FALSE(accepts(
      c,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\",\"unit\":\"k\"}}"
      "\n</tool_call>"))
      << "an enum's value outside it";
  EXPECT_FALSE(accepts(c, "<tool_call>\n{\"name\":\"rm_rf\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(
      accepts(c, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"x\":1}}\n</tool_call>"))
      << "a tool without parameters takes none";

  const CompletionRequest one =
      ok(std::string(kTools) + R"(,"tool_choice":"required","parallel_tool_calls":false)");
  EXPECT_TRUE(accepts(one.params.structured, weather));
  EXPECT_FALSE(accepts(one.params.structured, weather + "\n" + time));
}

TEST_F(ToolCallingTest, ANamedToolChoiceAllowsOnlyOneCallOfThatTool) {
  const CompletionRequest r = ok(
      std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})");
  const std::string time = "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>";
  EXPECT_TRUE(accepts(r.params.structured, time));
  EXPECT_FALSE(accepts(r.params.structured, time + "\n" + time));
  EXPECT_FALSE(accepts(
      r.params.structured,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\",\"unit\":\"c\"}}"
      "\n</tool_call>"));
}

TEST_F(ToolCallingTest, Llama3JsonCallsAreBareObjectsWithParameters) {
  std::ifstream in(std::string(STRATA_TEST_DATA_DIR) +
                   "/tokenizers/llama3_2/tokenizer_config.json");
  ASSERT_TRUE(in) << "scripts/install_deps.sh fetches the llama3_2 tokenizer";
  const std::string llama = json::parse(in).at("chat_template").get<std::string>();
  ASSERT_EQ(detect_tool_call_format(llama), ToolCallFormat::kLlama3Json);
  model_.tool_call_format = ToolCallFormat::kLlama3Json;
  const CompletionRequest r = ok(std::string(kTools) + R"(,"tool_choice":"required")");
  EXPECT_TRUE(accepts(r.params.structured, R"({"name":"get_time","parameters":{}})"));
  EXPECT_TRUE(
      accepts(r.params.structured,
              R"({"name":"get_time","parameters":{}}; {"name":"get_time","parameters":{}})"));
  EXPECT_FALSE(accepts(r.params.structured, R"({"name":"get_time","arguments":{}})"));
}

TEST_F(ToolCallingTest, BadToolsAndChoicesAre400sNamingTheField) {
  EXPECT_EQ(error(R"("tools":{"a":1})").param, "tools");
  EXPECT_EQ(error(R"("tools":[{"type":"code_interpreter"}])").param, "tools");
  EXPECT_EQ(error(R"("tools":[{"type":"function","function":{"name":"has space"}}])").param,
            "tools");
  EXPECT_EQ(
      error(R"("tools":[{"type":"function","function":{"name":"f","parameters":[1]}}])").param,
      "tools");
  EXPECT_EQ(error(R"("tools":[{"type":"function","function":{"name":"f"}},)"
                  R"({"type":"function","function":{"name":"f"}}])")
                .param,
            "tools")
      << "two tools of one name";
  EXPECT_EQ(error(R"("tool_choice":"required")").param, "tool_choice") << "no tools";
  EXPECT_EQ(error(std::string(kTools) + R"(,"tool_choice":"always")").param, "tool_choice");
  EXPECT_EQ(error(std::string(kTools) +
                  R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})")
                .param,
            "tool_choice");
  EXPECT_EQ(error(std::string(kTools) + R"(,"parallel_tool_calls":1)").param,
            "parallel_tool_calls");
  EXPECT_EQ(error(std::string(kTools) + R"(,"tool_choice":"required",)" +
                  R"("response_format":{"type":"json_object"})")
                .param,
            "tool_choice")
      << "two constraints";
  EXPECT_EQ(error(R"("functions":[{"name":"f"}])").param, "functions") << "legacy functions";
  model_.tool_call_format.reset();
  const ApiError no_format = error(kTools);
  EXPECT_EQ(no_format.param, "tools");
  EXPECT_NE(no_format.message.find("--tool-call-parser"), std::string::npos);
}

TEST_F(ToolCallingTest, AnAssistantTurnsCallsGoBackToTheTemplateWithObjectArguments) {
  auto r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"Weather?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},)"
      R"({"role":"tool","tool_call_id":"call_1","content":"18"}],)" +
          std::string(kTools) + "}",
      model_);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const std::string text = prompt(std::get<CompletionRequest>(r));
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\n18\n</tool_response>"), std::string::npos) << text;
}

TEST_F(ToolCallingTest, ArgumentsNestedPastTheRequestsBoundStayText) {
  // A string may hold JSON nested deeper than the body may be: parsed, the template's tojson
  // would recurse through all of it (a few hundred thousand levels overflow the stack).
  const std::string deep = R"({\"a\":)" + std::string(500, '[') + std::string(500, ']') + "}";
  auto r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"Weather?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":")" +
          deep + R"("}}]},{"role":"tool","tool_call_id":"call_1","content":"18"}],)" +
          std::string(kTools) + "}",
      model_);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  EXPECT_NE(prompt(std::get<CompletionRequest>(r)).find(R"({"a":[[[[[[[[)"), std::string::npos)
      << "rendered as the text it was sent as, not as an object through tojson";
}

// The output of `ids` fed one token a step, its streamed deltas kept.
std::vector<CompletionOutput::ChoiceDelta> stream(CompletionOutput& out,
                                                  const std::vector<int32_t>& ids) {
  std::vector<CompletionOutput::ChoiceDelta> deltas;
  for (size_t i = 0; i < ids.size(); ++i) {
    RequestOutput o;
    o.deltas.push_back({0, {ids[i]}, {}, std::nullopt});
    if (i + 1 == ids.size()) {
      o.deltas.back().finish_reason = FinishReason::kStop;
      o.finished = true;
    }
    out.add(o);
    for (auto& d : out.take_deltas()) deltas.push_back(std::move(d));
  }
  return deltas;
}

TEST_F(ToolCallingTest, CallsInTheOutputBecomeToolCallsWholeAndStreamed) {
  const CompletionRequest r = ok(kTools);
  const std::string generated =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {}}\n</tool_call>";
  const std::vector<int32_t> ids = tok_.encode(generated, false);
  CompletionOutput out(r, model_, 0);
  const auto deltas = stream(out, ids);

  const auto whole = out.choices().at(0);
  EXPECT_EQ(whole.text, "Let me look.\n");
  EXPECT_EQ(whole.finish_reason, "tool_calls");
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(whole.tool_calls[1].name, "get_time");
  EXPECT_EQ(whole.tool_calls[1].index, 1);
  EXPECT_NE(whole.tool_calls[0].id, whole.tool_calls[1].id);
  EXPECT_TRUE(whole.tool_calls[0].id.starts_with("call_"));

  std::string text;
  std::vector<CompletionOutput::ToolCall> calls;
  for (const auto& d : deltas) {
    text += d.text;
    calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    if (!d.tool_calls.empty()) {
      EXPECT_EQ(d.text.find("<tool_call>"), std::string::npos);
    }
  }
  EXPECT_EQ(text, whole.text);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].id, whole.tool_calls[0].id) << "one id per call, streamed or not";
  EXPECT_EQ(calls[1].arguments, whole.tool_calls[1].arguments);
  EXPECT_EQ(deltas.back().finish_reason, "tool_calls");
  EXPECT_TRUE(deltas.front().tool_calls.empty()) << "the text before the calls streams first";

  const json message = choice_json(whole, /*chat=*/true, /*stream=*/false, true)["message"];
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","unit":"c"})");
  EXPECT_FALSE(message["tool_calls"][0].contains("index"));
  for (const auto& d : deltas) {
    if (d.tool_calls.empty()) continue;
    const json delta = choice_json(d, true, /*stream=*/true, false)["delta"];
    EXPECT_EQ(delta["tool_calls"][0]["index"], d.tool_calls[0].index);
    EXPECT_TRUE(delta["tool_calls"][0]["function"].contains("arguments"));
  }
}

TEST_F(ToolCallingTest, OutputWithoutCallsIsContentAndAMessageOfCallsAloneHasNullContent) {
  const CompletionRequest r = ok(kTools);
  CompletionOutput plain(r, model_, 0);
  stream(plain, tok_.encode("It is sunny.", false));
  EXPECT_EQ(plain.choices()[0].text, "It is sunny.");
  EXPECT_EQ(plain.choices()[0].finish_reason, "stop");
  EXPECT_TRUE(plain.choices()[0].tool_calls.empty());

  CompletionOutput calls(r, model_, 0);
  stream(
      calls,
      tok_.encode("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", false));
  const json message = choice_json(calls.choices()[0], true, false, true)["message"];
  EXPECT_TRUE(message["content"].is_null()) << message.dump();
  EXPECT_EQ(message["tool_calls"].size(), 1u);

  const CompletionRequest none = ok(std::string(kTools) + R"(,"tool_choice":"none")");
  CompletionOutput raw(none, model_, 0);
  const std::string call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  stream(raw, tok_.encode(call, false));
  EXPECT_EQ(raw.choices()[0].text, call) << "tool_choice none: the text as generated";
  EXPECT_EQ(raw.choices()[0].finish_reason, "stop");
}

}  // namespace
}  // namespace strata::server
