#pragma once
// `strata generate`: run one prompt (token ids) through a model on the CPU and print the
// generated ids, optionally with logprobs, as a table or as JSON.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv_cache_options.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct GenerateOptions {
  std::string model_dir;
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
  bool json = false;
  std::string load_format = "auto";
  std::string dummy_dtype = "bfloat16";
  int32_t block_size = 16;
  int32_t threads = 0;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  KvCacheOptions kv_cache;
};

void add_generate_command(CLI::App& app, GenerateOptions& options);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_generate(const GenerateOptions& options);

}  // namespace strata::cli
