// Tokenizer::load and Tokenizer::from_json: tokenizer.json and tokenizer_config.json to stages.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_impl.h"

namespace strata::tokenizer {
namespace {

// Classes whose transformers implementation rebuilds the post-processor from add_bos_token /
// add_eos_token (their update_post_processor), with these defaults.
struct ClassDefaults {
  const char* name;
  bool add_bos, add_eos;
};
constexpr std::array<ClassDefaults, 6> kBosEosClasses = {{
    {"LlamaTokenizer", true, false},
    {"LlamaTokenizerFast", true, false},
    {"CodeLlamaTokenizer", true, false},
    {"CodeLlamaTokenizerFast", true, false},
    {"GemmaTokenizer", true, false},
    {"GemmaTokenizerFast", true, false},
}};

// bos_token / eos_token: a string or an AddedToken object {"content": ...}; "" when absent.
std::string token_content(const nlohmann::json& config, const char* key, const std::string& ctx) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return json_string(*it, "content", ctx + " " + key);
  throw Error(ctx + ": '" + std::string(key) + "' must be a string or an object with 'content'");
}

std::string chat_template_of(const nlohmann::json& config, const std::string& ctx) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": ..., "template": ...}]: the "default" one, else the first
    for (const nlohmann::json& t : *it) {
      if (json_optional_string(t, "name", ctx) == "default") return json_string(t, "template", ctx);
    }
    if (!it->empty()) return json_string((*it)[0], "template", ctx);
  }
  throw Error(ctx + ": 'chat_template' must be a string or a list of named templates");
}

std::optional<int32_t> lookup(const Tokenizer& t, const std::string& content, const char* what,
                              const std::string& ctx) {
  if (content.empty()) return std::nullopt;
  const std::optional<int32_t> id = t.token_to_id(content);
  if (!id) {
    throw Error(ctx + ": " + what + " " + quote(content) + " is not a token of tokenizer.json");
  }
  return id;
}

// bos/eos ids, and for the classes of kBosEosClasses the post-processor add_bos_token and
// add_eos_token describe.
void apply_config(const nlohmann::json& config, const std::string& ctx, const Tokenizer& tokenizer,
                  Tokenizer::Impl& impl) {
  impl.bos_id = lookup(tokenizer, token_content(config, "bos_token", ctx), "bos_token", ctx);
  impl.eos_id = lookup(tokenizer, token_content(config, "eos_token", ctx), "eos_token", ctx);
  const std::string cls = json_optional_string(config, "tokenizer_class", ctx);
  for (const ClassDefaults& d : kBosEosClasses) {
    if (cls != d.name) continue;
    const bool add_bos = json_bool(config, "add_bos_token", d.add_bos, ctx);
    const bool add_eos = json_bool(config, "add_eos_token", d.add_eos, ctx);
    if ((add_bos && !impl.bos_id) || (add_eos && !impl.eos_id)) {
      throw Error(ctx + ": add_bos_token/add_eos_token is set but the token is not");
    }
    impl.post_processor =
        PostProcessor(add_bos ? std::vector<int32_t>{*impl.bos_id} : std::vector<int32_t>{},
                      add_eos ? std::vector<int32_t>{*impl.eos_id} : std::vector<int32_t>{});
  }
}

// Through core's one entry point for files: nesting is bounded there (kMaxFileJsonDepth), which
// also bounds the stages' recursion over nested Sequences (one call per level).
nlohmann::json parse(std::string_view text, const std::string& name) {
  return parse_json_file(text, name, "the file");
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& origin) {
  const std::string where = origin + "/tokenizer.json";
  const std::string config_where = origin + "/tokenizer_config.json";
  const nlohmann::json j = parse(tokenizer_json, where);
  const nlohmann::json config =
      config_json.empty() ? nlohmann::json::object() : parse(config_json, config_where);
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  if (!config.is_object()) throw Error(config_where + ": expected a JSON object");
  try {
    auto impl = std::make_unique<Impl>();
    impl->normalizer = Normalizer::from_json(j.value("normalizer", nlohmann::json()), where);
    impl->pre_tokenizer =
        PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()), where);
    impl->model =
        BpeModel::from_json(json_field(j, "model", where), impl->pre_tokenizer.byte_level(), where);
    impl->added = AddedVocabulary::from_json(j.value("added_tokens", nlohmann::json()),
                                             impl->normalizer, where);
    impl->post_processor =
        PostProcessor::from_json(j.value("post_processor", nlohmann::json()), where);
    impl->decoder = Decoder::from_json(j.value("decoder", nlohmann::json()), where);
    impl->chat_template = chat_template_of(config, config_where);
    impl->vocab_size = impl->model.id_bound();
    for (const AddedToken& t : impl->added.tokens()) {
      impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
    }
    Impl* raw = impl.get();
    Tokenizer tokenizer(std::move(impl));
    apply_config(config, config_where, tokenizer, *raw);
    for (const auto* list : {&raw->post_processor.prefix(), &raw->post_processor.suffix()}) {
      for (const int32_t id : *list) {
        if (!tokenizer.id_to_token(id)) {
          throw Error(where + ": post_processor adds id " + std::to_string(id) +
                      ", which is not a token");
        }
      }
    }
    return tokenizer;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": unexpected structure (" + e.what() + ")");
  }
}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "tokenizer.json";
  // Absent files are named as missing; anything else at the path that is not a readable regular
  // file (a directory, a FIFO, a symlink loop) is refused by MappedFile with its reason.
  const std::optional<MappedFile> file = MappedFile::open_if_exists(path);
  if (!file) {
    throw Error(path.string() + " not found: --model must be a directory with tokenizer.json");
  }
  const std::optional<MappedFile> config =
      MappedFile::open_if_exists(dir / "tokenizer_config.json");
  if (!config) return from_json(file->text(), {}, dir.string());
  const std::string_view config_text = config->text();
  return from_json(file->text(), config_text.empty() ? std::string_view("{}") : config_text,
                   dir.string());
}

}  // namespace strata::tokenizer
