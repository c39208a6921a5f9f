// RenderLimits: a template or message that would burn CPU or memory stops with a clear
// resource-exhausted error, never a crash or a hang.

#include <gtest/gtest.h>

#include <string>

#include "render_helper.h"

namespace strata::chat_template {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

TEST(ChatTemplateLimitsTest, HugeLoopRunsOutOfSteps) {
  std::string out = render("{% for i in range(1000000000) %}x{% endfor %}");
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: chat template exceeded its step budget"))
      << out;
}

TEST(ChatTemplateLimitsTest, NestedLoopsRunOutOfSteps) {
  RenderLimits limits;
  limits.max_steps = 100'000;
  std::string out = render(
      "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", "{}", limits);
  EXPECT_TRUE(starts_with(out, "error: resource exhausted")) << out;
}

TEST(ChatTemplateLimitsTest, DoublingStringHitsOutputBudget) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  std::string out = render(
      "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
      "{}", limits);
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: chat template built a string")) << out;
}

TEST(ChatTemplateLimitsTest, HugeOutputHitsOutputBudget) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  std::string out = render("{% for i in range(100) %}0123456789abcdef{% endfor %}", "{}", limits);
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: chat template output exceeded")) << out;
  EXPECT_TRUE(
      starts_with(render("{{ 'ab' * 100000 }}", "{}", limits), "error: resource exhausted"));
}

TEST(ChatTemplateLimitsTest, RecursiveMacroHitsDepthLimit) {
  std::string out = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: macro calls nested deeper")) << out;
}

TEST(ChatTemplateLimitsTest, DeepNestingIsASyntaxErrorNotAStackOverflow) {
  std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_TRUE(starts_with(render(deep), "error: invalid argument: template syntax error"))
      << render(deep);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(starts_with(render(blocks), "error: invalid argument: template syntax error"));
  EXPECT_TRUE(starts_with(render("{{ " + std::string(100000, '-') + "1 }}"), "error:"));
  EXPECT_TRUE(starts_with(render("{{ " + std::string(50000, '[') + " }}"), "error:"));
}

TEST(ChatTemplateLimitsTest, LongChainsAreBoundedNotDeepTrees) {
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_TRUE(starts_with(render(sum + " }}"), "error: invalid argument: template syntax error"));
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".a";
  EXPECT_TRUE(starts_with(render(attrs + " }}"), "error: invalid argument: template syntax error"));
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  EXPECT_TRUE(
      starts_with(render(filters + " }}"), "error: invalid argument: template syntax error"));
}

TEST(ChatTemplateLimitsTest, DeepValuesAreRejected) {
  // Nesting a list in itself in a loop stops at the value depth limit.
  std::string out = render(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | tojson }}");
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: value nested deeper")) << out;
  // So does a deeply nested message.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string context = R"({"messages": [{"role": "user", "content": )" + deep + "}]}";
  out = render("{{ messages | tojson }}", context.c_str());
  EXPECT_TRUE(starts_with(out, "error: resource exhausted: context nested deeper")) << out;
}

TEST(ChatTemplateLimitsTest, NamespaceCannotContainItself) {
  std::string out = render("{% set ns = namespace(x=1) %}{% set ns.self = ns %}{{ ns | tojson }}");
  EXPECT_TRUE(starts_with(out, "error: invalid argument: a namespace cannot be stored")) << out;
  out = render("{% set ns = namespace() %}{% set ns.l = [ns] %}");
  EXPECT_TRUE(starts_with(out, "error: invalid argument: a namespace cannot be stored")) << out;
}

TEST(ChatTemplateLimitsTest, LongMessagesWithinBudgetRender) {
  std::string content(1 << 20, 'a');
  std::string context = R"({"messages": [{"role": "user", "content": ")" + content + R"("}]})";
  std::string out = render(
      "{% for m in messages %}{{ m.role + ': ' + m.content | trim }}{% endfor %}", context.c_str());
  EXPECT_EQ(out.size(), content.size() + 6);
}

}  // namespace
}  // namespace strata::chat_template
