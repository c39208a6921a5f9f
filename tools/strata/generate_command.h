#pragma once
// `strata generate`: run one prompt (token ids or text) through a model and print the generated
// ids, optionally with logprobs, as a table or as JSON: one request submitted to strata::Engine
// and stepped to its end, on the fp32 CPU runner (`--device cpu`, its KV pool sized for the
// request) or the GPU runner (`--device cuda`, bf16); `--device auto` (the default) picks cuda
// when a GPU is present, as bench and serve do. Both print the same fields.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine_options.h"

namespace CLI {
class App;
}

namespace strata::cli {

// The engine flags (--model, --device, --block-size, the KV cache flags, ...) are EngineOptions'
// (add_engine_options with EngineFlags::kOneRequest).
struct GenerateOptions : EngineOptions {
  // --prompt-ids and --stop-token-ids as given; run_generate parses them (parse_token_id_list)
  // into prompt_ids and stop_token_ids.
  std::optional<std::string> prompt_ids_text, stop_token_ids_text;
  std::vector<int32_t> prompt_ids;
  std::string prompt;  // text, encoded with the model directory's tokenizer.json
  int32_t max_tokens = 16;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  std::vector<int32_t> stop_token_ids;
  int32_t logprobs = -1;
  bool echo = false;
  bool ignore_eos = false;
  std::string structured_output;  // --structured-output (structured_output_option.h)
  bool json = false;
};

void add_generate_command(CLI::App& app, GenerateOptions& options);
// Returns the process exit code; throws strata::Error for bad files or options, and for
// --device cuda where the build has no CUDA backend or no GPU is present.
int run_generate(const GenerateOptions& options);

}  // namespace strata::cli
