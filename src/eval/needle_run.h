#pragma once
// Runs needle prompts through the engine and scores each one: greedy decoding of exactly as many
// tokens as the answer has (EOS ignored), correct when the generated ids equal the answer's ids.
// All prompts are submitted at once; the engine's continuous batching admits them as KV blocks
// allow, so a run is batched however large the grid.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "eval/needle_prompt.h"

namespace strata {
class Engine;
}

namespace strata::eval {

// One prompt's result, index-aligned with the prompts it came from.
struct NeedleOutcome {
  std::vector<int32_t> output_ids;
  bool correct = false;
};

// Progress callback: (prompts finished, prompts in all). May be empty.
using NeedleProgress = void (*)(int64_t done, int64_t total);

// InvalidArgument when the engine rejects a prompt (e.g. longer than max_model_len); Internal
// when a step fails. The engine is left with no unfinished request either way.
Result<std::vector<NeedleOutcome>> run_needle(Engine& engine,
                                              const std::vector<NeedlePrompt>& prompts,
                                              NeedleProgress progress = nullptr);

}  // namespace strata::eval
