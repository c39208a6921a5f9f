#include "structured_output_option.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strata::cli {

StructuredOutput parse_structured_output(const std::string& spec) {
  using Kind = StructuredOutput::Kind;
  if (spec.empty()) return {};
  if (spec == "json_object") return {Kind::kJsonObject, "", {}};
  const size_t eq = spec.find('=');
  const std::string kind = spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : spec.substr(eq + 1);
  if ((kind == "json_schema" || kind == "grammar") && value.starts_with("@")) {
    std::ifstream in(value.substr(1));
    if (!in) throw Error("--structured-output: cannot read " + value.substr(1));
    std::stringstream text;
    text << in.rdbuf();
    return {kind == "grammar" ? Kind::kGrammar : Kind::kJsonSchema, text.str(), {}};
  }
  if (kind == "regex" && !value.empty()) return {Kind::kRegex, value, {}};
  if (kind == "choice" && !value.empty()) {
    std::vector<std::string> choices;
    for (size_t at = 0; at <= value.size();) {
      const size_t bar = std::min(value.find('|', at), value.size());
      choices.push_back(value.substr(at, bar - at));
      at = bar + 1;
    }
    return {Kind::kChoice, "", std::move(choices)};
  }
  throw Error("--structured-output must be json_object, json_schema=@FILE, grammar=@FILE, "
              "regex=PATTERN or choice=A|B|...");
}

}  // namespace strata::cli
