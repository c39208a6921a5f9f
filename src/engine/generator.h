#pragma once
// Generator: runs a fixed batch of requests from prompt to their last token on the CPU, over the
// paged KV cache: prompts are prefilled in chunks under a token budget, then every unfinished
// sequence decodes one token per step, all in one forward batch. Finished sequences give their
// blocks back at once.
//
// This is the walking skeleton's step loop. The time layer (continuous batching, admission by
// free blocks, preemption) replaces the fixed batch with a scheduler but keeps the same step:
// build the batch (token ids, positions, slot mapping, paged layout) -> Model::forward -> sample.
//
// Models whose layers all use a sliding window give the blocks wholly outside a sequence's window
// back every step, so a sequence holds at most ceil(window / block_size) + 1 blocks.
//
// Owns the KV cache manager (block pool + prefix cache) and the KV buffer; borrows the model and
// the thread pool. With prefix caching on (the default) both live across generate() calls (an
// auto-sized pool that is too small for a later call grows, keeping its cached blocks), so a
// prompt whose leading blocks an earlier sequence computed skips them: the sequence starts with
// those blocks shared and prefills only the rest (sequences that want every prompt position's
// logits -- prompt_logits(), prompt_logprobs -- always compute the whole prompt, but still fill
// the cache). Not thread-safe. Cost per step: one forward pass over the step's tokens, plus one
// SHA-256 per newly full block.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/sequence.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace strata::engine {

struct GeneratorConfig {
  int32_t block_size = 16;              // one of kSupportedBlockSizes
  // Blocks in the pool including the null block; 0 = exactly enough for the batch's
  // prompts + max_tokens.
  int32_t num_blocks = 0;
  int32_t max_num_batched_tokens = 2048;  // prefill tokens per step (chunked prefill)
  int64_t max_model_len = 0;              // 0 = the model's max_position_embeddings
  DType kv_dtype = DType::kF32;           // kv::is_kv_pool_dtype
  // FP8 KV: the per-layer static scales (engine::resolve_kv_scales); required for F8E4M3/F8E5M2.
  kv::KvStaticScales kv_scales;
  // Per-layer exceptions (engine::resolve_kv_layout): empty = kv_dtype in every layer; else one
  // pool dtype per layer.
  std::vector<DType> kv_layer_dtypes;
  // INT4 pools (some layer I4): --kv-int4-residual, tokens read at full precision, a positive
  // multiple of block_size; 0 = block_size. The residual pool is sized for each batch
  // (kv::residual_pool_blocks over its requests).
  int32_t kv_int4_residual = 0;
  std::vector<int32_t> eos_token_ids;     // the model's EOS ids (config and generation config)
  bool enable_prefix_caching = true;      // --no-enable-prefix-caching turns it off
  // Key of the per-tenant cache salts (kv::derive_tenant_salt); empty = a random one per engine.
  std::string tenant_salt_secret;
};

// Where the time of the last generate() / prompt_logits() call went. A step that runs any prefill
// token counts as a prefill step (its decodes ride along).
struct GeneratorStats {
  int64_t num_prefill_tokens = 0;
  int64_t num_decode_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int32_t num_steps = 0;
  int32_t num_blocks = 0;  // pool size, the null block included
  int32_t num_residual_blocks = 0;  // INT4: the residual pool's size, the null block included
  int32_t peak_used_blocks = 0;  // most blocks in use at the end of any step's scheduling
  int64_t num_cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  kv::PrefixCacheStats prefix_cache;     // the cache's counters since it was created
};


struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, non-empty
  SamplingParams params;
  // Tenant isolation for the prefix cache: requests with different salts never share KV.
  std::string cache_salt = {};
  // The engine salts a tenant's requests itself (with cache_salt mixed in): tenants never share
  // KV whatever salts their clients send. Empty = no tenant.
  std::string tenant = {};
};

class Generator {
 public:
  // config.block_size must be supported (checked by validate_config before).
  Generator(model::Model& model, ThreadPool& pool, GeneratorConfig config);

  // InvalidArgument for a block size, budget or dtype the engine does not support.
  static Status validate_config(const GeneratorConfig& config);

  // Runs the requests to completion together. Errors (nothing generated): InvalidArgument for a
  // bad request (empty prompt, token id outside the vocabulary, invalid sampling params, prompt +
  // max_tokens beyond max_model_len); ResourceExhausted when the KV pool cannot hold the batch.
  Result<std::vector<GenerationResult>> generate(std::span<const GenerationRequest> requests);

  // Logits at every position of each prompt ([len, vocab] row-major per prompt), prefilled
  // together in chunks of at most max_num_batched_tokens. For verification and scoring.
  Result<std::vector<std::vector<float>>> prompt_logits(
      std::span<const std::vector<int32_t>> prompts);

  // Blocks in use after the last call (0 unless something leaked).
  int32_t num_used_blocks() const { return last_used_blocks_; }
  const GeneratorStats& stats() const { return stats_; }

 private:
  Status validate_request(const GenerationRequest& request) const;
  int32_t blocks_for(std::span<const GenerationRequest> requests) const;
  Result<std::vector<Sequence>> make_sequences(std::span<const GenerationRequest> requests,
                                               bool all_logits);
  void prepare_cache(int32_t num_blocks, int32_t num_seqs);
  Status run(std::vector<Sequence>& seqs, int32_t num_blocks);
  Status step(std::vector<Sequence>& seqs);
  // Tokens the sequence runs this step (0 = none), its slots allocated; a first prefill starts
  // with the longest cached prefix. ResourceExhausted when the pool is too small.
  Result<int32_t> schedule(Sequence& seq, int32_t& prefill_budget);
  Status consume_logits(Sequence& seq, int32_t first_pos, int32_t num_rows, const float* logits);

  model::Model& model_;
  ThreadPool& pool_;
  GeneratorConfig config_;
  std::unique_ptr<kv::KvCacheManager> cache_;
  std::unique_ptr<kv::HostKvBuffer> kv_;
  std::unique_ptr<kv::HostKvBuffer> residual_;  // INT4 pools: the full-precision residual pool
  int32_t residual_blocks_ = 0;                 // its R, or 0 without one
  int32_t window_ = 0;  // kv::pool_sliding_window of the model's layers: 0 = keep every block
  int32_t last_used_blocks_ = 0;
  GeneratorStats stats_;
  std::vector<float> logits_;
};

}  // namespace strata::engine
