#pragma once
// The synthetic workloads: random, sharegpt-like and agentic. Each is a pure function of its
// config (seed included): same config, same requests, token for token. Token ids are drawn
// uniformly from [0, vocab_size).
//
//   random         input and output lengths uniform over inclusive ranges (a fixed length is the
//                  range N:N), after an optional prefix of prefix_len tokens shared by every
//                  prompt (vLLM's --random-prefix-len).
//   sharegpt-like  log-normal lengths: length = round(length_scale * exp(N(ln median, sigma^2))),
//                  at least 1; the output is clamped to max_model_len - 1 and then the input to
//                  max_model_len - output. Defaults give the means the vLLM paper reports for
//                  ShareGPT (input 161, output 338 tokens).
//   agentic        num_sessions multi-turn sessions. Every session opens with the same
//                  system/tool prefix; each turn adds new user/tool tokens, and each later turn's
//                  prompt is the previous prompt + its output + the new tokens. A session ends
//                  after its turns, or before the first turn that would pass max_model_len.
//                  length_scale shrinks every length (system prefix, new tokens, outputs) so the
//                  same shape runs on a CPU.

#include <cstdint>
#include <string_view>

#include "bench/workload.h"

namespace strata::bench {

// An inclusive range of token counts, min <= max.
struct LengthRange {
  int32_t min = 1;
  int32_t max = 1;
};
// "N" or "A:B" (A <= B), every value in [min_value, 2^30]; throws strata::Error naming flag.
LengthRange parse_length_range(std::string_view text, std::string_view flag, int32_t min_value = 1);

// A log-normal length: median exp(mu) and shape sigma (mean = median * exp(sigma^2 / 2)).
struct LogNormalLength {
  double median = 1.0;
  double sigma = 0.0;
};

struct RandomWorkloadConfig {
  int64_t num_prompts = 1000;
  LengthRange input_len{1024, 1024};
  LengthRange output_len{128, 128};
  int32_t prefix_len = 0;
};

struct ShareGptWorkloadConfig {
  int64_t num_prompts = 1000;
  // Means 161 and 338 tokens (the vLLM paper's ShareGPT figures); the sigmas are our choice.
  LogNormalLength input{97.84, 1.0};
  LogNormalLength output{245.42, 0.8};
  double length_scale = 1.0;
};

struct AgenticWorkloadConfig {
  int64_t num_sessions = 8;
  LengthRange turns{30, 30};
  int32_t system_prompt_len = 2000;
  LengthRange turn_input_len{200, 3800};
  LengthRange turn_output_len{100, 500};
  double length_scale = 1.0;
  double think_s = 0.0;
};

// What every generator needs to know about the engine.
struct WorkloadLimits {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  uint64_t seed = 0;
};

// Each throws strata::Error for a config no request can satisfy (e.g. lengths beyond
// max_model_len).
Workload make_random_workload(const RandomWorkloadConfig& config, const WorkloadLimits& limits);
Workload make_sharegpt_workload(const ShareGptWorkloadConfig& config, const WorkloadLimits& limits);
Workload make_agentic_workload(const AgenticWorkloadConfig& config, const WorkloadLimits& limits);

}  // namespace strata::bench
