#include "model/generation_config.h"

#include <cmath>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/json_fields.h"

namespace strata::model {
namespace {

using nlohmann::json;

std::optional<int64_t> opt_token_id(const JsonFields& f, std::string_view key) {
  const std::optional<int64_t> id = f.opt_int(key);
  if (id && *id < 0) f.fail(f.name(key) + " must be >= 0, got " + std::to_string(*id));
  return id;
}

// Reads an optional number and checks lo <= x <= hi (lo excluded when `lo_open`).
std::optional<double> opt_number_in(const JsonFields& f, std::string_view key, double lo,
                                    bool lo_open, double hi) {
  const std::optional<double> x = f.opt_number(key);
  if (x && (!std::isfinite(*x) || *x < lo || (lo_open && *x == lo) || *x > hi)) {
    f.fail(f.name(key) + " must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
           (std::isinf(hi) ? "inf)" : std::to_string(hi) + "]") + ", got " + std::to_string(*x));
  }
  return x;
}

GenerationConfig parse_generation_config(const json& config, std::string_view source) {
  const JsonFields f(config, source);
  constexpr double kInf = INFINITY;
  GenerationConfig g;
  g.eos_token_ids = f.id_list("eos_token_id");
  g.bos_token_id = opt_token_id(f, "bos_token_id");
  g.pad_token_id = opt_token_id(f, "pad_token_id");
  g.do_sample = f.opt_bool("do_sample");
  g.temperature = opt_number_in(f, "temperature", 0.0, false, kInf);
  g.top_p = opt_number_in(f, "top_p", 0.0, true, 1.0);
  g.min_p = opt_number_in(f, "min_p", 0.0, false, 1.0);
  g.repetition_penalty = opt_number_in(f, "repetition_penalty", 0.0, true, kInf);
  g.top_k = f.opt_int("top_k");
  if (g.top_k && *g.top_k < 0) f.fail("'top_k' must be >= 0, got " + std::to_string(*g.top_k));
  g.max_new_tokens = f.opt_int("max_new_tokens");
  if (g.max_new_tokens && *g.max_new_tokens <= 0) {
    f.fail("'max_new_tokens' must be > 0, got " + std::to_string(*g.max_new_tokens));
  }
  return g;
}

}  // namespace

GenerationConfig parse_generation_config_text(std::string_view json_text,
                                              std::string_view source_name) {
  const json config = parse_json_object(json_text, source_name, "generation config");
  try {
    return parse_generation_config(config, source_name);
  } catch (const json::exception& e) {
    // JsonFields checks types before reading, so this is a safety net, not the normal path.
    throw Error(std::string(source_name) + ": malformed generation config: " + e.what());
  }
}

GenerationConfig load_generation_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "generation_config.json";
  // Absent: the defaults. Present but not a readable regular file: an error, not the defaults.
  const std::optional<MappedFile> file = MappedFile::open_if_exists(path);
  if (!file) return {};
  return parse_generation_config_text(file->text(), path.string());
}

}  // namespace strata::model
