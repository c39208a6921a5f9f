// Each construct of the chat-template subset on small templates. Expected strings are what
// @huggingface/jinja 0.5.11 renders for the same input, except where it departs from Python's Jinja
// (marked "Python:"; docs/chat-templates.md lists these).

#include <gtest/gtest.h>

#include <string>

#include "render_helper.h"

namespace strata::chat_template {
namespace {

constexpr const char* kMessages = R"({"messages": [
  {"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
  {"role": "assistant", "content": "yo"}], "d": {"b": 1, "a": "x"}, "n": null, "flag": true})";

TEST(ChatTemplateTest, TextAndOutput) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("a{{ 'b' }}c{# comment #}d"), "abcd");
  EXPECT_EQ(render("{{ 1 + 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 1 / 2 }}"),
            "3 3 1 -4 1024 0.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ 'b' }} {{ 'x' + 'y' }}"), "a1b xy");
  // Python: floor modulo and value equality of lists.
  EXPECT_EQ(render("{{ -7 % 3 }} {{ [1, 'a'] == [1, 'a'] }} {{ 1 == 1.0 }}"), "2 true true");
  EXPECT_EQ(render("{{ n }}|{{ undefined_name }}|{{ flag }}|{{ 2.0 }}", kMessages), "||true|2.0");
}

TEST(ChatTemplateTest, WhitespaceControl) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b\n{%- endif %}"), "ab");
  // trim_blocks and lstrip_blocks, as transformers sets them.
  EXPECT_EQ(render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("line\n    {# note #}\nnext"), "line\nnext");
  // One trailing newline of the source is dropped.
  EXPECT_EQ(render("x\n"), "x");
}

TEST(ChatTemplateTest, Conditionals) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, R"({"x": 1})"), "one");
  EXPECT_EQ(render(t, R"({"x": 2})"), "two");
  EXPECT_EQ(render(t, R"({"x": 3})"), "many");
  EXPECT_EQ(render("{{ 'y' if flag else 'n' }}{{ 'y' if n else 'n' }}", kMessages), "yn");
  EXPECT_EQ(render("{{ 1 and 'b' }} {{ 0 or 'c' }} {{ not 0 }}"), "b c true");
  EXPECT_EQ(render("{{ 'x' in d }} {{ 'z' not in d }} {{ 'ell' in 'hello' }} {{ 2 in [1, 2] }}",
                   kMessages),
            "false true true true");
}

TEST(ChatTemplateTest, ForLoopVariables) {
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                   kMessages),
            "103truefalse3;212falsefalse3;321falsetrue3;");
  EXPECT_EQ(render("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}"
                   "{% endfor %}",
                   kMessages),
            "1user2assistant");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", kMessages),
            "b=1,a=x,");
  EXPECT_EQ(render("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", kMessages), "aus");
  EXPECT_EQ(
      render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
      "012");
}

TEST(ChatTemplateTest, ScopesAndNamespace) {
  // A set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
                   "{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}in {{ 'block' }}{% endset %}[{{ s }}]"), "[in block]");
}

TEST(ChatTemplateTest, Macros) {
  EXPECT_EQ(render("{% macro tag(name, close=false) %}<{{ '/' if close }}{{ name }}>{% endmacro %}"
                   "{{ tag('b') }}x{{ tag('b', close=true) }}"),
            "<b>x</b>");
  // A macro sees the top level, not the caller's loop variables.
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{{ g }}{{ i }}{% endmacro %}"
                   "{% for i in [1] %}{{ m() }}{% endfor %}"),
            "G");
}

TEST(ChatTemplateTest, LiteralsSubscriptsAndSlices) {
  EXPECT_EQ(render("{{ [1, 'a', none, true] | tojson }}"), "[1, \"a\", null, true]");
  EXPECT_EQ(render("{{ {'k': [1, 2], 'j': {}} | tojson }}"), "{\"k\": [1, 2], \"j\": {}}");
  EXPECT_EQ(
      render("{{ messages[1]['content'] }}{{ messages[-1].role }}{{ messages[9] is defined }}",
             kMessages),
      "hiassistantfalse");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abc'[-1] }} {{ 'héllo'[1] }}"),
            "bcd ace c é");
  EXPECT_EQ(render("{{ [1, 2, 3, 4][1:] | tojson }} {{ [1, 2, 3][:-1] | tojson }}"),
            "[2, 3, 4] [1, 2]");
}

TEST(ChatTemplateTest, Tests) {
  EXPECT_EQ(render("{{ x is defined }}{{ n is none }}{{ n is not none }}{{ 's' is string }}"
                   "{{ 1 is number }}{{ d is mapping }}{{ flag is true }}{{ flag is false }}",
                   R"({"n": null, "d": {}, "flag": true})"),
            "falsetruefalsetruetruetruetruefalse");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 3 is even }}{{ [1] is iterable }}{{ 'a' is equalto 'a' }}"),
            "truefalsetruetrue");
  EXPECT_EQ(render("{% if not x is defined %}undefined{% endif %}"), "undefined");
}

TEST(ChatTemplateTest, Filters) {
  EXPECT_EQ(render("[{{ '  a b  ' | trim }}]{{ 'Ab' | upper }}{{ 'Ab' | lower }}"), "[a b]ABab");
  EXPECT_EQ(render("{{ messages | length }}{{ 'héllo' | length }}{{ d | length }}", kMessages),
            "352");
  EXPECT_EQ(render("{{ [1, 2, 3] | join(', ') }}|{{ ['a', 'b'] | join }}"), "1, 2, 3|ab");
  EXPECT_EQ(render("{{ x | default('dflt') }}{{ '' | default('e', true) }}{{ n | default('k') }}",
                   R"({"n": null})"),
            "dflte");
  EXPECT_EQ(
      render("{{ [3, 4] | first }}{{ [3, 4] | last }}{{ d | items | list | tojson }}", kMessages),
      "34[[\"b\", 1], [\"a\", \"x\"]]");
  EXPECT_EQ(
      render(
          "{{ 'a-b-c' | replace('-', '+') }}{{ 12 | string }}{{ '42' | int + 1 }}{{ 2.7 | int }}"),
      "a+b+c12432");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", kMessages), "{\n  \"b\": 1,\n  \"a\": \"x\"\n}");
  EXPECT_EQ(
      render(
          "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list "
          "| tojson }}{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}",
          kMessages),
      "[\"hi\"]2");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
}

TEST(ChatTemplateTest, StringAndDictMethods) {
  // Python: strip('x') strips the given characters.
  EXPECT_EQ(render("[{{ '  x '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n a'.lstrip() }}|"
                   "{{ 'a \\n'.rstrip() }}]"),
            "[x|hi|a|a]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') | tojson }}{{ ' a  b '.split() | tojson }}"
                   "{{ 'a</think>b'.split('</think>')[-1] }}"),
            "[\"a\", \"b\", \"\", \"c\"][\"a\", \"b\"]b");
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}"
                   "{{ 'hello'.startswith('lo') }}"),
            "truetruefalse");
  // Python: title() capitalises each word.
  EXPECT_EQ(render("{{ 'aXa'.replace('a', 'b') }}{{ 'ab'.upper() }}{{ 'AB'.lower() }}"
                   "{{ 'hello wORLD'.title() }}"),
            "bXbABabHello World");
  EXPECT_EQ(
      render("{{ d.get('a') }}{{ d.get('z', 'none') }}{{ d.keys() | list | tojson }}", kMessages),
      "xnone[\"b\", \"a\"]");
}

TEST(ChatTemplateTest, TransformersVariables) {
  const char* t =
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor "
      "%}"
      "{% if add_generation_prompt %}<assistant>{% endif %}"
      "{% if enable_thinking is defined and enable_thinking is false %}<nothink>{% endif %}"
      "{% if tools %}tools{% endif %}";
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "q"}], "bos_token": "<s>",
                          "eos_token": "</s>", "add_generation_prompt": true, "enable_thinking": false})"),
            "<s><user>q</s><assistant><nothink>");
}

TEST(ChatTemplateTest, RaiseException) {
  std::string out = render(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation "
      "must start with a user turn') }}{% endif %}",
      kMessages);
  EXPECT_EQ(out,
            "error: invalid argument: raise_exception: Conversation must start with a user turn");
}

}  // namespace
}  // namespace strata::chat_template
