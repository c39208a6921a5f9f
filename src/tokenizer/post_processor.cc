#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"

namespace strata::tokenizer {
namespace {

int32_t json_id(const nlohmann::json& v, const std::string& ctx) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 30)) {
    throw Error(ctx + ": token id must be an integer in [0, 2^30)");
  }
  return v.get<int32_t>();
}

// ["[CLS]", 101] as BertProcessing / RobertaProcessing store their tokens.
int32_t json_pair_id(const nlohmann::json& j, const char* key, const std::string& ctx) {
  const nlohmann::json& v = json_field(j, key, ctx);
  if (!v.is_array() || v.size() != 2) throw Error(ctx + ": '" + key + "' must be [token, id]");
  return json_id(v[1], ctx);
}

// TemplateProcessing's "single": SpecialToken items become ids, the Sequence item "A" splits
// them into what goes before and after.
void add_template(const nlohmann::json& j, const std::string& ctx, std::vector<int32_t>& prefix,
                  std::vector<int32_t>& suffix) {
  const nlohmann::json& specials = json_field(j, "special_tokens", ctx);
  bool seen_sequence = false;
  for (const nlohmann::json& item : json_array(j, "single", ctx)) {
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken")) {
      throw Error(ctx + ": template items must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
    const std::string name = json_string(item["SpecialToken"], "id", ctx);
    if (!specials.is_object() || !specials.contains(name)) {
      throw Error(ctx + ": special token " + quote(name) + " is not in 'special_tokens'");
    }
    for (const nlohmann::json& id : json_array(specials[name], "ids", ctx)) {
      (seen_sequence ? suffix : prefix).push_back(json_id(id, ctx));
    }
  }
}

}  // namespace

void PostProcessor::add_json(const nlohmann::json& j, const std::string& where, PostProcessor& p) {
  if (j.is_null()) return;
  const std::string type = json_string(j, "type", where + ": post_processor");
  const std::string ctx = where + ": post_processor " + type;
  if (type == "Sequence") {
    for (const auto& child : json_array(j, "processors", ctx)) add_json(child, where, p);
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    add_template(j, ctx, p.prefix_, p.suffix_);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    p.prefix_.push_back(json_pair_id(j, "cls", ctx));
    p.suffix_.push_back(json_pair_id(j, "sep", ctx));
  } else {
    throw Error(where + ": post_processor type " + quote(type) + " is not supported");
  }
}

PostProcessor PostProcessor::from_json(const nlohmann::json& j, const std::string& where) {
  PostProcessor p;
  add_json(j, where, p);
  return p;
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  if (prefix_.empty() && suffix_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

}  // namespace strata::tokenizer
