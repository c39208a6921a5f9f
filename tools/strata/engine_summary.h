#pragma once
// The start-up line every engine-running command prints: where the model runs and what the KV
// pool holds, in blocks, tokens and KV bytes per token.

#include "strata/engine.h"

namespace strata::cli {

// "strata: cuda: KV cache 12345 blocks x 16 tokens = 197520 tokens, 131072 bytes per token
// (24.1 GiB); weights 15.0 GiB" on stderr.
void print_pool(const Engine& engine);

}  // namespace strata::cli
