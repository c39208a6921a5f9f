// json_schema_regex against PCRE2 as the reference matcher: for real-world schemas, hand-written
// and randomly generated valid instances must match (compact and indented), invalid ones must not;
// then the whitespace option, json_object_regex and every error path.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/json_schema.h"
#include "grammar/json_text_regex.h"
#include "grammar/regex.h"

namespace strata::grammar {
namespace {

using json = nlohmann::ordered_json;  // a schema keeps its properties in declaration order

// A whole-subject PCRE2 match; the flags read \uHHHH and \xHH as the dialect does.
class Matcher {
 public:
  explicit Matcher(const std::string& regex) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                              PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF | PCRE2_ALT_BSUX,
                              &error, &offset, nullptr));
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      error_ = std::string(reinterpret_cast<char*>(message)) + " at " + std::to_string(offset);
    }
  }
  const std::string& error() const { return error_; }
  bool matches(const std::string& subject) const {
    if (!code_) return false;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    return pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0,
                       0, data.get(), nullptr) >= 0;
  }

 private:
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code_{nullptr, &pcre2_code_free};
  std::string error_;
};

std::string regex_of(const std::string& schema, const JsonSchemaOptions& options = {}) {
  Result<std::string> regex = json_schema_regex(json::parse(schema), options);
  EXPECT_TRUE(regex.ok()) << regex.status().to_string() << "\n" << schema;
  return regex.ok() ? *regex : std::string("\\x00");
}

Status error_of(const std::string& schema, const JsonSchemaOptions& options = {}) {
  Result<std::string> regex = json_schema_regex(json::parse(schema), options);
  EXPECT_FALSE(regex.ok()) << schema << " compiled to " << (regex.ok() ? *regex : "");
  return regex.status();
}

// Samples for the patterns the cases use (a pattern cannot be sampled generically).
const std::map<std::string, std::vector<std::string>>& pattern_samples() {
  static const std::map<std::string, std::vector<std::string>> k = {
      {"^[A-Z]{3}-[0-9]{4}$", {"ABC-1234", "XYZ-0000"}},
      {"^[0-9]{5}$", {"01234", "99999"}},
      {"^\\+?[0-9 ()-]{7,20}$", {"+1 (555) 010-9999", "0123456"}},
  };
  return k;
}

// Random instances of a schema: the subset of JSON Schema the cases use, within the regex's
// simplifications (properties in nlohmann's order, bounded numbers in plain decimal).
class InstanceGenerator {
 public:
  InstanceGenerator(const json& root, uint32_t seed) : root_(root), rng_(seed) {}

  json generate(const json& schema, int depth = 0) {
    if (schema.is_boolean()) return any(2);
    if (schema.contains("$ref")) {
      return generate(root_.at(json::json_pointer(schema["$ref"].get<std::string>().substr(1))),
                      depth);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (schema.contains(key)) return generate(pick(schema[key]), depth);
    }
    if (schema.contains("const")) return schema["const"];
    if (schema.contains("enum")) return pick(schema["enum"]);
    std::string type;
    if (schema.contains("type")) {
      type = schema["type"].is_array() ? pick(schema["type"]).get<std::string>()
                                       : schema["type"].get<std::string>();
    } else if (schema.contains("properties")) {
      type = "object";
    } else {
      return any(2);
    }
    if (type == "object") return object(schema, depth);
    if (type == "array") return array(schema, depth);
    if (type == "string") return string(schema);
    if (type == "integer") return integer(schema);
    if (type == "number") return number(schema);
    if (type == "boolean") return coin();
    return nullptr;
  }

 private:
  bool coin() { return std::uniform_int_distribution<int>(0, 1)(rng_) == 1; }
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  json pick(const json& array) {
    return array[static_cast<size_t>(uniform(0, static_cast<int64_t>(array.size()) - 1))];
  }

  json any(int depth) {
    switch (uniform(0, depth > 0 ? 7 : 5)) {
      case 0:
        return random_text(0, 6);
      case 1:
        return uniform(-1000, 1000);
      case 2:
        return static_cast<double>(uniform(-400, 400)) / 8.0;
      case 3:
        return coin();
      case 4:
        return nullptr;
      case 5:
        return random_text(0, 3);
      case 6: {
        json a = json::array();
        for (int64_t i = uniform(0, 3); i > 0; --i) a.push_back(any(depth - 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int64_t i = uniform(0, 3); i > 0; --i) o[random_text(0, 4)] = any(depth - 1);
        return o;
      }
    }
  }

  json object(const json& schema, int depth) {
    json o = json::object();
    const json required = schema.value("required", json::array());
    if (!schema.contains("properties")) {
      const json additional = schema.value("additionalProperties", json(true));
      if (additional == false) return o;
      const int64_t lo = schema.value("minProperties", 0);
      const int64_t hi = schema.value("maxProperties", lo + 3);
      for (int64_t i = uniform(lo, hi); static_cast<int64_t>(o.size()) < i;) {
        o[random_text(1, 5)] = additional == true ? any(1) : generate(additional, depth + 1);
      }
      return o;
    }
    for (const auto& [name, sub] : schema["properties"].items()) {
      const bool needed = std::find(required.begin(), required.end(), name) != required.end();
      if (needed || coin()) o[name] = generate(sub, depth + 1);
    }
    return o;
  }

  json array(const json& schema, int depth) {
    json a = json::array();
    const json prefix = schema.value("prefixItems", json::array());
    const json items = schema.value("items", json(true));
    const int64_t lo = schema.value("minItems", 0);
    int64_t hi = schema.value("maxItems", lo + 4);
    if (items == false) hi = std::min<int64_t>(hi, static_cast<int64_t>(prefix.size()));
    for (int64_t n = uniform(lo, std::min(hi, lo + 4)), i = 0; i < n; ++i) {
      a.push_back(i < static_cast<int64_t>(prefix.size())
                      ? generate(prefix[static_cast<size_t>(i)], depth + 1)
                  : items == true ? any(1)
                                  : generate(items, depth + 1));
    }
    return a;
  }

  std::string random_text(int64_t lo, int64_t hi) {
    static const std::vector<std::string> kPool = {"a",  "Z",  "0",  " ",    "\"",   "\\",
                                                   "/",  "\n", "\t", "\x01", "\x7f", "é",
                                                   "中", "😀",  "-",  "{",    "}"};
    std::string out;
    for (int64_t n = uniform(lo, hi); n > 0; --n) out += pick(kPool).get<std::string>();
    return out;
  }

  std::string two(int64_t lo, int64_t hi) {
    const int64_t v = uniform(lo, hi);
    return (v < 10 ? "0" : "") + std::to_string(v);
  }

  json string(const json& schema) {
    const std::string format = schema.value("format", "");
    const std::string date =
        std::to_string(uniform(1000, 9999)) + "-" + two(1, 12) + "-" + two(1, 28);
    const std::string time = two(0, 23) + ":" + two(0, 59) + ":" + two(0, 59) +
                             (coin() ? ".25" : "") + (coin() ? "Z" : "+05:30");
    if (format == "date") return date;
    if (format == "time") return time;
    if (format == "date-time") return date + "T" + time;
    if (format == "email") return coin() ? "jane.doe+news@mail.example.com" : "x@y.io";
    if (format == "uuid")
      return "123e4567-e89b-12d3-a456-42661417400" + std::to_string(uniform(0, 9));
    if (schema.contains("pattern")) return pick(pattern_samples().at(schema["pattern"]));
    const int64_t lo = schema.value("minLength", 0);
    return random_text(lo, std::min<int64_t>(schema.value("maxLength", lo + 8), lo + 8));
  }

  std::pair<double, double> range(const json& schema) {
    double lo = schema.value("minimum", -1000.0), hi = schema.value("maximum", 1000.0);
    if (schema.contains("exclusiveMinimum")) lo = schema["exclusiveMinimum"].get<double>() + 0.125;
    if (schema.contains("exclusiveMaximum")) hi = schema["exclusiveMaximum"].get<double>() - 0.125;
    return {lo, hi};
  }

  json integer(const json& schema) {
    const auto [lo, hi] = range(schema);
    return uniform(static_cast<int64_t>(std::ceil(lo)), static_cast<int64_t>(std::floor(hi)));
  }

  json number(const json& schema) {  // multiples of 1/8: exact, and dumped without exponent
    const auto [lo, hi] = range(schema);
    return static_cast<double>(uniform(static_cast<int64_t>(std::ceil(lo * 8)),
                                       static_cast<int64_t>(std::floor(hi * 8)))) /
           8.0;
  }

  const json& root_;
  std::mt19937 rng_;
};

struct SchemaCase {
  std::string name;
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

void PrintTo(const SchemaCase& c, std::ostream* os) { *os << c.name; }

class JsonSchemaCaseTest : public testing::TestWithParam<SchemaCase> {};

TEST_P(JsonSchemaCaseTest, HandWrittenValidInstancesMatch) {
  const Matcher matcher(regex_of(GetParam().schema));
  ASSERT_EQ(matcher.error(), "");
  for (const std::string& text : GetParam().valid) {
    EXPECT_TRUE(json::accept(text)) << "not JSON: " << text;
    EXPECT_TRUE(matcher.matches(text)) << text;
  }
}

TEST_P(JsonSchemaCaseTest, InvalidInstancesDoNotMatch) {
  const Matcher matcher(regex_of(GetParam().schema));
  ASSERT_EQ(matcher.error(), "");
  for (const std::string& text : GetParam().invalid) EXPECT_FALSE(matcher.matches(text)) << text;
}

// The dialect's own parser (regex.h) accepts what PCRE2 matched: no PCRE-only syntax slipped in.
TEST_P(JsonSchemaCaseTest, RegexIsInTheDialect) {
  for (const int32_t ws : {0, 4}) {
    const Result<Nfa> nfa = compile_regex(regex_of(GetParam().schema, {.max_whitespace = ws}));
    EXPECT_TRUE(nfa.ok()) << nfa.status().to_string();
  }
}

TEST_P(JsonSchemaCaseTest, GeneratedInstancesMatchCompactAndIndented) {
  const json schema = json::parse(GetParam().schema);
  const Matcher compact(regex_of(GetParam().schema));
  const Matcher indented(regex_of(GetParam().schema, {.max_whitespace = 16}));
  ASSERT_EQ(compact.error(), "");
  ASSERT_EQ(indented.error(), "");
  InstanceGenerator generator(schema, 20240611);
  for (int i = 0; i < 60; ++i) {
    const json instance = generator.generate(schema);
    const std::string text = instance.dump();
    ASSERT_TRUE(json::accept(text));
    EXPECT_TRUE(compact.matches(text)) << text;
    EXPECT_TRUE(indented.matches(instance.dump(2))) << instance.dump(2);
    EXPECT_TRUE(indented.matches(instance.dump(1, '\t'))) << instance.dump(1, '\t');
    // Indentation is whitespace the compact regex must refuse.
    if (instance.is_structured() && !instance.empty()) {
      EXPECT_FALSE(compact.matches(instance.dump(1))) << instance.dump(1);
    }
  }
}

// Property order in these instances is nlohmann::json's (keys sorted): the order the regex keeps.
std::vector<SchemaCase> cases() {
  return {
      {"OpenAiFunctionWeather",
       R"({"type":"object","properties":{"location":{"type":"string","description":"City, e.g. Paris"},
           "unit":{"type":"string","enum":["celsius","fahrenheit"]}},
           "required":["location","unit"],"additionalProperties":false})",
       {R"({"location":"Paris, France","unit":"celsius"})",
        R"({"location":"","unit":"fahrenheit"})",
        R"({"location":"S\u00e3o Paulo \"SP\"","unit":"celsius"})"},
       {R"({"location":"Paris"})", R"({"unit":"celsius","location":"Paris"})",
        R"({"location":"Paris","unit":"kelvin"})", R"({"location":"Paris","unit":"celsius",})",
        R"({"location":"Paris","unit":"celsius","x":1})", R"({"location":5,"unit":"celsius"})",
        R"({"location":"a\qb","unit":"celsius"})", R"(["Paris","celsius"])"}},
      {"LangChainZodJoke",
       R"({"type":"object","properties":{"punchline":{"type":"string","description":"The punchline"},
           "rating":{"type":"number","description":"How funny, 1 to 10"},
           "setup":{"type":"string"}},"required":["setup","punchline"],
           "additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"})",
       {R"({"punchline":"p","rating":7.5,"setup":"s"})", R"({"punchline":"p","setup":"s"})",
        R"({"punchline":"p","rating":-1.5e3,"setup":"s"})"},
       {R"({"punchline":"p","rating":7.5})", R"({"punchline":"p","rating":"7","setup":"s"})",
        R"({"punchline":"p","rating":07,"setup":"s"})",
        R"({"punchline":"p","rating":1.,"setup":"s"})",
        R"({"punchline":"p","rating":.5,"setup":"s"})",
        R"({"punchline":"p","setup":"s","rating":1})"}},
      {"PersonWithBoundsAndFormat",
       R"({"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":150},
           "email":{"type":"string","format":"email"},"name":{"type":"string","minLength":1,"maxLength":20},
           "tags":{"type":"array","items":{"type":"string"},"maxItems":3}},
           "required":["age","name"],"additionalProperties":false})",
       {R"({"age":0,"name":"A"})", R"({"age":150,"email":"a.b@c.org","name":"Ann","tags":[]})",
        R"({"age":42,"name":"Bob","tags":["x","y","z"]})"},
       {R"({"age":151,"name":"A"})", R"({"age":-1,"name":"A"})", R"({"age":1.5,"name":"A"})",
        R"({"age":1,"name":""})", R"({"age":1,"name":"123456789012345678901"})",
        R"({"age":1,"email":"not-an-email","name":"A"})",
        R"({"age":1,"name":"A","tags":["1","2","3","4"]})", R"({"age":1,"name":"A","tags":[1]})",
        R"({"age":007,"name":"A"})"}},
      {"NullableTypeArray",
       R"({"type":"object","properties":{"middle_name":{"type":["string","null"]},
           "score":{"type":["integer","null"]}},"required":["middle_name","score"],"additionalProperties":false})",
       {R"({"middle_name":null,"score":null})", R"({"middle_name":"Q","score":-3})"},
       {R"({"middle_name":1,"score":null})", R"({"middle_name":null,"score":1.5})",
        R"({"middle_name":null})", R"({"middle_name":"null","score":"null"})"}},
      {"ZodNullableAnyOf",
       R"({"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]})",
       {R"("abc")", R"(null)", R"("")", R"("\n\t")"},
       {R"("abcd")", R"(1)", R"(nul)", R"("\n\t\r\f")"}},
      {"DefsReusedTwice",
       R"({"$defs":{"address":{"type":"object","properties":{"city":{"type":"string"},
           "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city","zip"],"additionalProperties":false}},
           "type":"object","properties":{"home":{"$ref":"#/$defs/address"},"work":{"$ref":"#/$defs/address"}},
           "required":["home"],"additionalProperties":false})",
       {R"({"home":{"city":"Oslo","zip":"01234"}})",
        R"({"home":{"city":"Oslo","zip":"01234"},"work":{"city":"Rome","zip":"99999"}})"},
       {R"({"work":{"city":"Rome","zip":"99999"}})", R"({"home":{"city":"Oslo","zip":"0123"}})",
        R"({"home":{"city":"Oslo","zip":"0123a"}})", R"({"home":{"city":"Oslo"}})"}},
      {"Draft07DefinitionsFromZodToJsonSchema",
       R"({"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"Item":{"type":"object",
           "properties":{"id":{"type":"integer","exclusiveMinimum":0},"qty":{"type":"integer","minimum":1,"maximum":99}},
           "required":["id","qty"],"additionalProperties":false}},
           "type":"array","items":{"$ref":"#/definitions/Item"},"minItems":1,"maxItems":3})",
       {R"([{"id":1,"qty":1}])", R"([{"id":7,"qty":99},{"id":12345,"qty":10},{"id":2,"qty":3}])"},
       {R"([])", R"([{"id":0,"qty":1}])", R"([{"id":1,"qty":100}])", R"([{"id":1,"qty":0}])",
        R"([{"id":1,"qty":1},{"id":1,"qty":1},{"id":1,"qty":1},{"id":1,"qty":1}])",
        R"([{"id":1,"qty":1},])", R"([{"id":-1,"qty":1}])"}},
      {"OrderNested",
       R"({"title":"Order","type":"object","properties":{
           "customer":{"type":"object","properties":{"email":{"type":"string","format":"email"},
             "name":{"type":"string"}},"required":["name"],"additionalProperties":false},
           "items":{"type":"array","items":{"type":"object","properties":{"price":{"type":"number","minimum":0},
             "sku":{"type":"string"}},"required":["price","sku"],"additionalProperties":false},"minItems":1},
           "notes":{"type":"string"},"status":{"enum":["new","paid","shipped"]}},
           "required":["customer","items","status"],"additionalProperties":false})",
       {R"({"customer":{"name":"Li"},"items":[{"price":0,"sku":"A1"}],"status":"new"})",
        R"({"customer":{"email":"li@x.cn","name":"Li"},"items":[{"price":9.99,"sku":"A1"},{"price":10,"sku":"B"}],"notes":"","status":"paid"})"},
       {R"({"customer":{"name":"Li"},"items":[],"status":"new"})",
        R"({"customer":{"name":"Li"},"items":[{"price":-0.5,"sku":"A1"}],"status":"new"})",
        R"({"customer":{"name":"Li"},"items":[{"price":1,"sku":"A1"}],"status":"lost"})",
        R"({"customer":{},"items":[{"price":1,"sku":"A1"}],"status":"new"})",
        R"({"customer":{"name":"Li"},"items":[{"price":1e2,"sku":"A1"}],"status":"new"})"}},
      {"OptionalFirstRequiredLast",
       R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
           "required":["c"],"additionalProperties":false})",
       {R"({"c":1})", R"({"a":1,"c":3})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
       {R"({})", R"({"a":1})", R"({"a":1,"b":2})", R"({,"c":1})", R"({"a":1,,"c":1})",
        R"({"c":1,"a":1})"}},
      {"RequiredInTheMiddle",
       R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"boolean"}},
           "required":["b"],"additionalProperties":false})",
       {R"({"b":null})", R"({"a":true,"b":null})", R"({"b":null,"c":false})",
        R"({"a":false,"b":null,"c":true})"},
       {R"({"a":true})", R"({"b":null,})", R"({"a":true,"b":null,"c":true,"a":true})",
        R"({"b":false})"}},
      {"AllOptional",
       R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}}})",
       {R"({})", R"({"a":1})", R"({"b":"x"})", R"({"c":true})", R"({"a":1,"c":true})",
        R"({"a":1,"b":"","c":false})"},
       {R"({,})", R"({"a":1,})", R"({,"b":"x"})", R"({"b":"x","a":1})", R"({"a":"1"})",
        R"({"a":1"b":"x"})"}},
      {"Tuple",
       R"({"type":"array","prefixItems":[{"type":"number"},{"type":"number"},{"type":"string"}],"items":false,"minItems":2})",
       {R"([1,2])", R"([1.5,-2,"m"])"},
       {R"([1])", R"([1,2,"m",3])", R"([1,"2"])", R"(["m",1,2])", R"([])"}},
      {"ArrayCounts",
       R"({"type":"array","items":{"type":"integer","minimum":-20,"maximum":125},"minItems":2,"maxItems":4})",
       {R"([0,0])", R"([-20,125,7,99])", R"([-9,-10,100])"},
       {R"([0])", R"([0,0,0,0,0])", R"([-21,0])", R"([126,0])", R"([1000,0])", R"([0,-0.5])",
        R"([0 ,0])"}},
      {"StringFormats",
       R"({"type":"object","properties":{"at":{"type":"string","format":"date-time"},
           "day":{"type":"string","format":"date"},"id":{"type":"string","format":"uuid"},
           "time":{"type":"string","format":"time"}},"required":["at","day","id","time"],"additionalProperties":false})",
       {R"({"at":"2024-02-29T23:59:60.5Z","day":"1999-12-31","id":"123E4567-e89b-12d3-a456-426614174000","time":"08:00:00+01:00"})"},
       {R"({"at":"2024-02-29 23:59:60Z","day":"1999-12-31","id":"123e4567-e89b-12d3-a456-426614174000","time":"08:00:00Z"})",
        R"({"at":"2024-02-29T23:59:60Z","day":"1999-13-01","id":"123e4567-e89b-12d3-a456-426614174000","time":"08:00:00Z"})",
        R"({"at":"2024-02-29T23:59:60Z","day":"1999-04-31","id":"123e4567-e89b-12d3-a456-426614174000","time":"08:00:00Z"})",
        R"({"at":"2024-02-29T23:59:60Z","day":"1999-12-31","id":"123e4567e89b12d3a456426614174000","time":"08:00:00Z"})",
        R"({"at":"2024-02-29T23:59:60Z","day":"1999-12-31","id":"123e4567-e89b-12d3-a456-426614174000","time":"24:00:00Z"})",
        R"({"at":"2024-02-29T23:59:60Z","day":"1999-12-31","id":"123e4567-e89b-12d3-a456-426614174000","time":"08:00:00"})"}},
      {"MixedEnum",
       R"({"enum":["red",1,null,true,{"a":[1,2]},"with \"quote\"",2.5]})",
       {R"("red")", R"(1)", R"(null)", R"(true)", R"({"a":[1,2]})", R"("with \"quote\"")",
        R"(2.5)"},
       {R"("blue")", R"(false)", R"({"a":[1]})", R"("red" )", R"("with "quote"")", R"(2)"}},
      {"ConstDiscriminatedToolCalls",
       R"({"oneOf":[{"type":"object","properties":{"query":{"type":"string"},"tool":{"const":"search"}},
           "required":["query","tool"],"additionalProperties":false},
           {"type":"object","properties":{"expression":{"type":"string","maxLength":50},"tool":{"const":"calculator"}},
           "required":["expression","tool"],"additionalProperties":false}]})",
       {R"({"query":"weather","tool":"search"})", R"({"expression":"1+2","tool":"calculator"})"},
       {R"({"query":"weather","tool":"calculator"})", R"({"expression":"1+2","tool":"search"})",
        R"({"tool":"search"})", R"({"query":"q","tool":"search","expression":"1"})"}},
      {"PatternPhone",
       R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
           "phone":{"type":"string","pattern":"^\\+?[0-9 ()-]{7,20}$"}},"required":["code","phone"],"additionalProperties":false})",
       {R"({"code":"ABC-1234","phone":"+1 (555) 010-9999"})",
        R"({"code":"QQQ-0000","phone":"0123456"})"},
       {R"({"code":"AB-1234","phone":"0123456"})", R"({"code":"abc-1234","phone":"0123456"})",
        R"({"code":"ABC-1234","phone":"012345"})", R"({"code":"ABC-1234x","phone":"0123456"})"}},
      {"NumberRanges",
       R"({"type":"object","properties":{"p":{"type":"number","minimum":0,"maximum":1},
           "t":{"type":"number","exclusiveMinimum":-10,"exclusiveMaximum":10}},"required":["p","t"],"additionalProperties":false})",
       {R"({"p":0,"t":0})", R"({"p":1,"t":9.999})", R"({"p":1.000,"t":-9.5})",
        R"({"p":0.5,"t":-0.0})"},
       {R"({"p":1.01,"t":0})", R"({"p":-0.1,"t":0})", R"({"p":2,"t":0})", R"({"p":0.5,"t":10})",
        R"({"p":0.5,"t":-10})", R"({"p":0.5,"t":-10.5})", R"({"p":0.5,"t":10.0})",
        R"({"p":5e-1,"t":0})"}},
      {"EmptySchemaAnyValue",
       R"({})",
       {R"(1)", R"("s")", R"(null)", R"([1,[2]])", R"({"a":{"b":1}})", R"(-0.5E+3)", R"([{},[]])"},
       {R"([[[1]]])", R"({"a":{"b":[]}})", R"({"a":{"b":{"c":1}}})", R"(tru)", R"([1,])",
        R"({"a"})", R"('s')"}},
      {"FreeFormObjectWithValueSchema",
       R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})",
       {R"({"a":1})", R"({"a":1,"b":-2})", R"({"":0})"},
       {R"({})", R"({"a":1,"b":2,"c":3})", R"({"a":"1"})", R"({"a":1.5})"}},
      {"BooleanAndNull",
       R"({"type":"object","properties":{"done":{"type":"boolean"},"nothing":{"type":"null"}},
           "required":["done","nothing"]})",
       {R"({"done":true,"nothing":null})", R"({"done":false,"nothing":null})"},
       {R"({"done":"true","nothing":null})", R"({"done":true,"nothing":0})",
        R"({"done":True,"nothing":null})"}},
      {"AllOfSingleAndAnnotations",
       R"({"allOf":[{"type":"object","properties":{"x":{"type":"integer","default":3,"examples":[1]}},
           "required":["x"],"additionalProperties":false}],"description":"wrapper","$id":"urn:x","title":"T"})",
       {R"({"x":3})"},
       {R"({"x":"3"})", R"({})"}},
      {"UntypedPropertiesImplyObject",
       R"({"properties":{"k":{"type":"string","enum":["v"]}},"required":["k"]})",
       {R"({"k":"v"})"},
       {R"({"k":"w"})", R"("v")"}},
  };
}

INSTANTIATE_TEST_SUITE_P(RealWorldSchemas, JsonSchemaCaseTest, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<SchemaCase>& info) {
                           return info.param.name;
                         });

// The largest n or m of any {n}, {n,}, {n,m} in `regex` (escaped braces skipped).
int64_t largest_count(const std::string& regex) {
  int64_t largest = 0;
  for (size_t i = 0; i < regex.size(); ++i) {
    if (regex[i] == '\\') {
      ++i;
    } else if (regex[i] == '{') {
      for (size_t j = i + 1; j < regex.size() && regex[j] != '}'; ++j) {
        if (regex[j] == ',') continue;
        const size_t end = regex.find_first_not_of("0123456789", j);
        largest = std::max<int64_t>(largest, std::stoll(regex.substr(j, end - j)));
        j = end - 1;
      }
    }
  }
  return largest;
}

TEST(JsonSchemaTest, RepetitionPastMaxRepeatCountsExactly) {
  const Matcher matcher(json_regex::repeat("a", 1001, 2500));
  ASSERT_EQ(matcher.error(), "");
  for (const size_t n : {0, 1000, 2501, 3000})
    EXPECT_FALSE(matcher.matches(std::string(n, 'a'))) << n;
  for (const size_t n : {1001, 1999, 2000, 2001, 2500})
    EXPECT_TRUE(matcher.matches(std::string(n, 'a'))) << n;
  const Matcher unbounded(json_regex::repeat("a", 2001, json_regex::kUnbounded));
  EXPECT_FALSE(unbounded.matches(std::string(2000, 'a')));
  EXPECT_TRUE(unbounded.matches(std::string(2001, 'a')));
  EXPECT_TRUE(unbounded.matches(std::string(5000, 'a')));
}

TEST(JsonSchemaTest, LongStringBoundsStayWithinMaxRepeat) {
  const std::string regex = regex_of(R"({"type":"string","minLength":1001,"maxLength":2500})");
  EXPECT_EQ(largest_count(regex), 1000);
  EXPECT_TRUE(compile_regex(regex).ok());
  EXPECT_TRUE(compile_regex(*json_object_regex()).ok());
  EXPECT_EQ(largest_count(regex_of(R"({"type":"array","maxItems":1500})")), 1000);
}

TEST(JsonSchemaTest, StringContentIsExactlyJsonStringSyntax) {
  const Matcher matcher(regex_of(R"({"type":"string"})"));
  for (const char* text : {R"("")", R"("\"\\\/\b\f\n\r\t")", R"("\u00e9\uD83D\uDE00\u0000")",
                           "\"é中😀\x7f\"", R"("a'b")"}) {
    EXPECT_TRUE(json::accept(text)) << text;
    EXPECT_TRUE(matcher.matches(text)) << text;
  }
  for (const char* text : {R"("\x41")", R"("\u12")", R"("\uZZZZ")", "\"a\nb\"", "\"\x01\"",
                           R"("\")", R"("a"b")", R"('a')", R"("\U0041")"}) {
    EXPECT_FALSE(json::accept(text)) << text;
    EXPECT_FALSE(matcher.matches(text)) << text;
  }
  // A length counts a code point or one escape as one character.
  const Matcher two(regex_of(R"({"type":"string","minLength":2,"maxLength":2})"));
  EXPECT_TRUE(two.matches(R"("\n中")"));
  EXPECT_TRUE(two.matches(R"("\u0041b")"));
  EXPECT_FALSE(two.matches(R"("\n")"));
  EXPECT_FALSE(two.matches(R"("abc")"));
}

TEST(JsonSchemaTest, PatternMatchesTheDecodedValue) {
  // A quote and a backslash in the value appear escaped in the JSON text.
  const Matcher quoted(regex_of(R"({"type":"string","pattern":"^a\"b\\\\c$"})"));
  EXPECT_TRUE(quoted.matches(R"("a\"b\\c")"));
  EXPECT_FALSE(quoted.matches(R"("a"b\c")"));
  // Unanchored: a search anywhere in the value.
  const Matcher search(regex_of(R"({"type":"string","pattern":"[0-9]{3}"})"));
  EXPECT_TRUE(search.matches(R"("id 123 \n")"));
  EXPECT_TRUE(search.matches(R"("123")"));
  EXPECT_FALSE(search.matches(R"("12 3")"));
  // '.' and a negated class stand for any character, a newline or quote included, escaped.
  const Matcher dot(regex_of(R"({"type":"string","pattern":"^[^x].$"})"));
  EXPECT_TRUE(dot.matches(R"("\"\t")"));
  EXPECT_TRUE(dot.matches(R"("ab")"));
  EXPECT_FALSE(dot.matches(R"("xb")"));
  EXPECT_FALSE(dot.matches(R"("a\n")"));
  EXPECT_FALSE(dot.matches("\"a\tb\""));
}

TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  const Matcher m(regex_of(R"({"type":"integer","exclusiveMinimum":-3.5,"maximum":1234.9})"));
  for (int64_t v = -2000; v <= 2000; ++v) {
    EXPECT_EQ(m.matches(std::to_string(v)), v >= -3 && v <= 1234) << v;
  }
  EXPECT_TRUE(m.matches("-0"));
  EXPECT_FALSE(m.matches("01"));
  EXPECT_FALSE(m.matches("1e2"));
  const Matcher draft4(regex_of(R"({"type":"integer","minimum":10,"exclusiveMinimum":true})"));
  EXPECT_FALSE(draft4.matches("10"));
  EXPECT_TRUE(draft4.matches("11"));
  EXPECT_TRUE(draft4.matches("123456789"));
  // A lower bound >= 0 writes no minus sign: -0 is 0, and nobody expects it.
  const Matcher non_negative(regex_of(R"({"type":"integer","minimum":0,"maximum":150})"));
  EXPECT_TRUE(non_negative.matches("0"));
  EXPECT_FALSE(non_negative.matches("-0"));
  const Matcher fraction(regex_of(R"({"type":"number","minimum":0})"));
  EXPECT_TRUE(fraction.matches("0.000"));
  EXPECT_FALSE(fraction.matches("-0.000"));
  EXPECT_FALSE(fraction.matches("-0"));
}

TEST(JsonSchemaTest, NumberBoundsAreExactWithoutExponent) {
  const Matcher m(regex_of(R"({"type":"number","minimum":-2,"exclusiveMaximum":3})"));
  for (int i = -40; i <= 40; ++i) {
    const double v = i / 8.0;
    EXPECT_EQ(m.matches(json(v).dump()), v >= -2 && v < 3) << json(v).dump();
  }
  EXPECT_TRUE(m.matches("2.999"));
  EXPECT_TRUE(m.matches("-2.000"));
  EXPECT_FALSE(m.matches("-2.001"));
  EXPECT_FALSE(m.matches("3.000"));
  EXPECT_FALSE(m.matches("1e0"));
}

TEST(JsonSchemaTest, WhitespaceIsBoundedAndOnlyBetweenTokens) {
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})";
  const Matcher compact(regex_of(schema));
  const Matcher spaced(regex_of(schema, {.max_whitespace = 2}));
  EXPECT_TRUE(compact.matches(R"({"a":[1,2]})"));
  EXPECT_FALSE(compact.matches(R"({"a": [1,2]})"));
  EXPECT_TRUE(spaced.matches(R"({"a":[1,2]})"));
  EXPECT_TRUE(spaced.matches("{\n \"a\" : [ 1 ,\t2 ]\n}"));
  EXPECT_TRUE(spaced.matches(" {\"a\":[]} "));
  EXPECT_FALSE(spaced.matches("{   \"a\":[1]}"));
  EXPECT_FALSE(spaced.matches(R"({"a":[1 2]})"));
  EXPECT_FALSE(spaced.matches("{\"a\":[1]}\r"));
}

TEST(JsonSchemaTest, AnnotationsDoNotChangeTheRegex) {
  EXPECT_EQ(regex_of(R"({"type":"integer"})"),
            regex_of(R"({"type":"integer","title":"n","description":"d","examples":[1],"default":2,
                         "$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:n",
                         "$comment":"c","deprecated":false,"x-vendor":1})"));
}

TEST(JsonObjectRegexTest, MatchesObjectsOnly) {
  const Matcher m(*json_object_regex());
  ASSERT_EQ(m.error(), "");
  for (const char* text :
       {R"({})", R"({"a":1})", R"({"a":{"b":1},"c":[true,"x",null]})", R"({"":""})"}) {
    EXPECT_TRUE(json::accept(text)) << text;
    EXPECT_TRUE(m.matches(text)) << text;
  }
  for (const char* text : {R"([])", R"("{}")", R"(1)", R"(null)", R"({"a":1,})", R"({"a"})",
                           R"({a:1})", R"({"a":{"b":{"c":{}}}})", R"({"a":1}})", R"( {})"}) {
    EXPECT_FALSE(m.matches(text)) << text;
  }
  EXPECT_FALSE(m.matches(R"({"a":{"b":[]}})"));
  const Matcher deep(*json_object_regex({.max_whitespace = 1, .max_untyped_depth = 3}));
  ASSERT_EQ(deep.error(), "");
  EXPECT_TRUE(deep.matches(R"({ "a": { "b": { "c": 1 } } })"));
  EXPECT_FALSE(deep.matches(R"({"a":{"b":{"c":{}}}})"));
}

TEST(JsonSchemaErrorTest, UnsupportedKeywordsNameTheirPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","properties":{"a":{"type":"array","items":{"not":{"type":"string"}}}}})",
       "/properties/a/items: keyword 'not' is not supported"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "/: keyword 'patternProperties'"},
      {R"({"if":{},"then":{},"else":{}})", "/: keyword '"},
      {R"({"type":"object","properties":{"a~b/c":{"dependentRequired":{}}}})",
       "/properties/a~0b~1c: keyword 'dependentRequired'"},
      {R"({"type":"array","uniqueItems":true})", "/: keyword 'uniqueItems'"},
      {R"({"type":"number","multipleOf":0.5})", "/: keyword 'multipleOf'"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf of more than one"},
      {R"({"type":"string","anyOf":[{"maxLength":3}]})", "'anyOf' beside 'type'"},
      {R"({"type":"string","format":"hostname"})", "/format: format 'hostname' is not supported"},
      {R"({"type":"string","pattern":"(?=a)b"})", "/pattern: pattern offset 0: lookaround"},
      {R"({"type":"string","pattern":"(a)\\1"})", "escape \\1 is not supported"},
      {R"({"type":"string","pattern":"a*?"})", "lazy and possessive"},
      {R"({"type":"string","pattern":"a^b"})", "anchors"},
      {R"({"type":"string","pattern":"\\bword"})", "escape \\b"},
      {R"({"type":"string","pattern":"^a|b$"})", "top-level '|'"},
      {R"({"type":"string","pattern":"x{2000}"})", "n <= m <= 1000"},
      {R"({"type":"string","pattern":"^x$","maxLength":3})", "together are not supported"},
  };
  for (const auto& [schema, message] : cases) {
    const Status status = error_of(schema);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
  }
}

TEST(JsonSchemaErrorTest, InvalidSchemasAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"array","minItems":3,"maxItems":2})", "minItems exceeds maxItems"},
      {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})",
       "number of items allowed"},
      {R"({"type":"string","minLength":5,"maxLength":4})", "minLength exceeds maxLength"},
      {R"({"type":"string","minLength":-1})", "minLength must be a non-negative integer"},
      {R"({"type":"string","maxLength":"3"})", "maxLength must be a non-negative integer"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no number is within the bounds"},
      {R"({"type":"integer","minimum":2.2,"maximum":2.8})", "no number is within the bounds"},
      {R"({"type":"number","minimum":0.5})", "fractional bound"},
      {R"({"type":"number","maximum":1e300})", "past 1e15"},
      {R"({"type":5})", "type must be one of"},
      {R"({"type":"strin"})", "type must be one of"},
      {R"({"type":[]})", "empty array"},
      {R"({"type":"string","enum":[1,2]})", "no enum or const value has the declared type"},
      {R"({"properties":{"a":false},"required":["a"]})", "/properties/a: the schema false"},
      {R"({"type":"object","required":["b"],"properties":{"a":{}},"additionalProperties":false})",
       "required property \"b\" is not in properties"},
      {R"({"properties":{"a":{"$ref":"#/$defs/missing"}}})",
       "/properties/a: $ref '#/$defs/missing' does not resolve"},
      {R"({"$ref":"other.json#/x"})", "within the document"},
      {R"({"anyOf":[]})", "non-empty array"},
      {R"([1])", "a schema must be an object or a boolean"},
      {R"({"type":"object","nullable":["a"]})", "'nullable' must be true or false"},
  };
  for (const auto& [schema, message] : cases) {
    const Status status = error_of(schema);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
  }
}

TEST(JsonSchemaErrorTest, RecursiveRefIsRefusedWithItsPath) {
  const Status status = error_of(R"({"$defs":{"node":{"type":"object","properties":{
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}},"value":{"type":"integer"}}}},
      "$ref":"#/$defs/node"})");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "/$defs/node/properties/children/items: recursive $ref at "
            "/$defs/node/properties/children/items is not supported");
  // The same definition used twice, side by side, is not a cycle.
  EXPECT_TRUE(json_schema_regex(json::parse(R"({"$defs":{"n":{"type":"integer"}},"type":"array",
      "prefixItems":[{"$ref":"#/$defs/n"},{"$ref":"#/$defs/n"}]})"))
                  .ok());
}

TEST(JsonSchemaErrorTest, RegexPastTheBoundIsResourceExhausted) {
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"string","format":"date-time"},
      "b":{"type":"string","format":"email"}},"required":["a","b"]})";
  const Status status = error_of(schema, {.max_regex_bytes = 200});
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.to_string();
  EXPECT_TRUE(json_schema_regex(json::parse(schema), {.max_regex_bytes = 4000}).ok());
  // Untyped values grow with their depth: a deep bound refuses the default limit's worth.
  const Status deep = error_of("{}", {.max_untyped_depth = 30});
  EXPECT_EQ(deep.code(), StatusCode::kResourceExhausted) << deep.to_string();
}

TEST(JsonSchemaErrorTest, BadOptionsAreRefused) {
  EXPECT_EQ(error_of("{}", {.max_whitespace = -1}).code(), StatusCode::kInvalidArgument);
}

TEST(JsonSchemaTest, PropertiesComeInTheSchemasOrder) {
  const char* schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},
                           "alpha":{"type":"integer"}},"required":["zeta","alpha"],
                           "additionalProperties":false})";
  const Matcher declared(*json_schema_regex(nlohmann::ordered_json::parse(schema)));
  EXPECT_TRUE(declared.matches(R"({"zeta":1,"alpha":2})"));
  EXPECT_FALSE(declared.matches(R"({"alpha":2,"zeta":1})"));
  // A nlohmann::json has sorted its keys before the compiler sees them.
  const Matcher sorted(*json_schema_regex(nlohmann::json::parse(schema)));
  EXPECT_TRUE(sorted.matches(R"({"alpha":2,"zeta":1})"));
}

}  // namespace
}  // namespace strata::grammar
