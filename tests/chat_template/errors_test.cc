// Malformed templates and runtime errors: each is a clear invalid-argument status, never a crash.

#include <gtest/gtest.h>

#include <string>

#include "render_helper.h"

namespace strata::chat_template {
namespace {

void expect_error(const std::string& source, const std::string& fragment) {
  std::string out = render(source, R"({"messages": [], "s": "str"})");
  EXPECT_EQ(out.rfind("error: invalid argument: ", 0), 0u) << source << " -> " << out;
  EXPECT_NE(out.find(fragment), std::string::npos) << source << " -> " << out;
}

TEST(ChatTemplateErrorsTest, UnclosedTagsAndBlocks) {
  expect_error("{{ 1 ", "unclosed tag");
  expect_error("{% if true %}x", "unclosed block: expected '{% elif %}'");
  expect_error("{% for x in messages %}", "unclosed block");
  expect_error("{# comment", "unclosed comment");
  expect_error("{{ 'abc }}", "unterminated string");
  expect_error("{% macro m() %}", "unclosed block");
  expect_error("{% endif %}", "unknown or unsupported statement 'endif'");
}

TEST(ChatTemplateErrorsTest, BadSyntax) {
  expect_error("{{ }}", "expected an expression");
  expect_error("{{ 1 + }}", "expected an expression");
  expect_error("{% for in x %}{% endfor %}", "expected 'in' in for loop");
  expect_error("{% if %}{% endif %}", "expected an expression");
  expect_error("{{ a ? b }}", "unexpected character '?'");
  expect_error("{% set x %}", "unclosed block");
  expect_error("{% include 'x' %}", "unsupported statement 'include'");
  expect_error("{{ 'a' %}", "unexpected '%}'");
}

TEST(ChatTemplateErrorsTest, RuntimeErrors) {
  expect_error("{{ s | no_such_filter }}", "unknown filter 'no_such_filter'");
  expect_error("{{ s is no_such_test }}", "unknown test 'no_such_test'");
  expect_error("{{ s.nope() }}", "not callable");
  expect_error("{{ undefined_thing.attr }}", "undefined");
  expect_error("{{ 1 // 0 }}", "division or modulo by zero");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expect_error("{{ 'a' - 1 }}", "cannot apply '-'");
  expect_error("{% for x in 5 %}{% endfor %}", "cannot iterate");
  expect_error("{% set s.x = 1 %}", "only a namespace");
  expect_error("{{ messages[0].content }}", "");  // undefined.content
  expect_error("{{ raise_exception('bad role') }}", "raise_exception: bad role");
}

TEST(ChatTemplateErrorsTest, ContextMustBeAnObject) {
  Result<std::string> r = render_chat_template("x", nlohmann::ordered_json::array());
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace strata::chat_template
