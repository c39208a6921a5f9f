#pragma once
// GenerationConfig: the optional generation_config.json of a Hugging Face checkpoint, giving the
// stop tokens and the model author's default sampling settings.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace strata::model {

// Every field is empty/nullopt when the file or key is absent (or the value is null); the engine
// decides what an absent value means. Values present are validated: top_k >= 0,
// temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty > 0, max_new_tokens > 0,
// token ids >= 0.
struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;  // "eos_token_id": an integer or a list
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;

  bool operator==(const GenerationConfig&) const = default;
};

// Reads `dir`/generation_config.json. A missing file gives a default GenerationConfig (not an
// error); a malformed one throws strata::Error naming the file and the key.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

// Parses generation_config.json text; `source_name` is used in messages. Throws strata::Error.
GenerationConfig parse_generation_config_text(std::string_view json_text,
                                              std::string_view source_name);

}  // namespace strata::model
