// libFuzzer target: parse_model_config_text and parse_generation_config_text on arbitrary text.
// A strata::Error is the expected way to reject input; any other exception, a crash, a sanitizer
// report, or a config that breaks the documented invariants is a bug.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "core/error.h"
#include "model/generation_config.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const strata::model::ModelConfig c = strata::model::parse_model_config_text(text, "fuzz");
    STRATA_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.head_dim > 0, "sizes positive");
    STRATA_CHECK(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0,
                 "heads divisible by kv heads");
    STRATA_CHECK(static_cast<int64_t>(c.layer_sliding_window.size()) == c.num_hidden_layers,
                 "one sliding window per layer");
    for (const int32_t w : c.layer_sliding_window) STRATA_CHECK(w >= 0, "window >= 0");
  } catch (const strata::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  try {
    (void)strata::model::parse_generation_config_text(text, "fuzz");
  } catch (const strata::Error&) {
  }
  return 0;
}
