#pragma once
// The start-up line every engine-running command prints: where the model runs and what the KV
// pool holds, in blocks, tokens and KV bytes per token.

#include "strata/engine.h"

namespace strata::cli {

// "strata: cpu: KV cache int8, 12345 blocks x 16 tokens = 197520 tokens, 66048 bytes per token
// at block size 16 (512 of them scales) (12.1 GiB); weights 15.0 GiB" on stderr (FP8 adds where
// its scales came from; per-layer exceptions read "KV cache int8 (layers 0,5 float32)"). With
// --kv-quant-check, the check's per-layer table comes first.
void print_pool(const Engine& engine);

}  // namespace strata::cli
