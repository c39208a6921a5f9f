#pragma once
// Token sampling on the GPU: one launch turns a batch's fp32 logits into one token per row
// (greedy, temperature, min-p, top-k, top-p, seeded draw) and, optionally, the chosen token's raw
// logprob. The semantics are the CPU sampler's (src/engine/sampler.h, vLLM V1); the two differ
// only in the random draw (see sample()) and in the tie rule at the top-p boundary.
// Host-only header; the kernel lives in sampling.cu. docs/gpu-engine.md, "GPU sampling".

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace strata::cuda {

// A temperature below this samples greedily (SamplingParams::kGreedyTemperature, vLLM's eps).
inline constexpr float kSampleGreedyTemperature = 1e-5f;

struct SampleParams {
  const float* logits = nullptr;  // [num_rows, vocab] fp32, row stride = vocab
  int32_t num_rows = 0;
  int32_t vocab = 0;
  // Per-row sampling parameters, [num_rows] each. A null array means "off" for every row
  // (temperature: greedy for every row).
  const float* temperature = nullptr;  // < kSampleGreedyTemperature (or NaN) = greedy
  const int32_t* top_k = nullptr;      // <= 0 or >= vocab = off; 1 = greedy
  const float* top_p = nullptr;        // in (0, 1]; >= 1 (or NaN) = off
  const float* min_p = nullptr;        // in [0, 1]; <= 0 (or NaN) = off
  // This draw's random seed per row (the caller derives it from the request's seed and the
  // token position). May be null only when temperature is null (every row greedy).
  const uint64_t* seeds = nullptr;  // [num_rows]
  int32_t* out_tokens = nullptr;    // [num_rows]; -1 for a row whose logits are all -inf / NaN
  // Nullable [num_rows]: log_softmax of the unmodified logits at the chosen token (raw logprob,
  // vLLM's default); -inf for a row whose token is -1.
  float* out_logprobs = nullptr;
};

// Structured outputs' token masks over a batch's fp32 logits, in place: row r's logit i becomes
// -inf where bit i of masks[mask_row[r]] (words ceil(vocab / 64) apart, bit i of word i / 64) is
// clear; rows whose mask_row is negative are left as they are. Run before sample() on the same
// logits, which then draws only allowed tokens (and reports logprobs over the masked row).
struct TokenMaskParams {
  float* logits = nullptr;  // [num_rows, vocab]
  int32_t num_rows = 0;
  int32_t vocab = 0;
  const int32_t* mask_row = nullptr;  // [num_rows]
  const uint64_t* masks = nullptr;    // [*, mask_words]
  int64_t mask_words = 0;
};
// InvalidArgument for a negative count, vocab <= 0, a null pointer or mask_words below
// ceil(vocab / 64). Asynchronous on stream; masks may be pinned host memory (read uncached, so
// what the host wrote before the launch ran is what is read); the other pointers are device memory.
Status apply_token_masks(const TokenMaskParams& params, cudaStream_t stream);

// Holds stream until the host says what follows may run: signal is two words of pinned host
// memory, [0] the value awaited and [1] the value reached. One thread spins, reading both
// uncached, until [1] - [0] >= 0 (as int32, so the values may wrap). The host sets [0] before
// the launch runs and [1] once what later launches read (masks it makes meanwhile, say) is
// written; a launch whose [1] is never set never ends. Asynchronous on stream; capturable.
Status wait_host_signal(const uint32_t* signal, cudaStream_t stream);

// Samples one token per row. Every pointer is device memory; out_* must not alias the inputs.
//
// Per row, in vLLM V1's order (the CPU sampler's): NaN logits count as -inf. Greedy rows take the
// argmax, ties to the lowest id. Other rows: y = logit / temperature; min-p keeps y with
// y - max(y) >= log(min_p); top-k keeps the k largest y of those and every y tied with the k-th;
// top-p keeps, of those, the largest y down to the first value v at which the probability mass of
// {y >= v} (renormalised over the survivors) reaches top_p, and every token tied with v (the CPU
// sampler keeps only as many tied tokens as it needs). Then one token is drawn from the survivors
// in proportion to exp(y) by the Gumbel-max trick: the argmax over survivors of y + g(seed, token)
// (ties to the lowest id), g a Gumbel variate from a counter-based hash of (seeds[row], token id).
// So the token depends only on (the row's logits, parameters and seed): the same on every run,
// at any row index and in any batch. +inf logits share the probability equally, as on the CPU.
//
// Cost: a cluster of eight thread blocks per row for the first pass (each over an eighth of the
// row), then one block. Greedy: one pass over the row. Temperature / min-p only: two.
// With top-k or top-p: three passes (statistics, a histogram of y - max(y), a compaction of the
// survivors' bracket into shared memory) and the exact thresholds in shared memory, as long as
// the bracket holds at most ~6K tokens; otherwise about eight passes over the row.
// InvalidArgument for a negative count, vocab <= 0 or a missing required pointer (nothing is
// launched). Asynchronous on stream.
Status sample(const SampleParams& params, cudaStream_t stream);

}  // namespace strata::cuda
