#include "engine/generator.h"

#include <algorithm>
#include <string>

#include "kv/block_hash.h"
#include "kv/block_table.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_accounting.h"
#include "kv/kv_cache_manager.h"

namespace strata::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
  }
  return "?";
}

Generator::Generator(model::Model& model, ThreadPool& pool, GeneratorConfig config)
    : model_(model), pool_(pool), config_(std::move(config)) {
  STRATA_CHECK(validate_config(config_).ok(), "Generator built from an invalid config");
  STRATA_CHECK(config_.kv_layer_dtypes.empty() ||
                   config_.kv_layer_dtypes.size() ==
                       static_cast<size_t>(model_.config().num_hidden_layers),
               "GeneratorConfig::kv_layer_dtypes: one per layer of the model");
  if (config_.max_model_len == 0) config_.max_model_len = model_.config().max_position_embeddings;
  window_ = kv::pool_sliding_window(model_.config().layer_sliding_window);
  if (config_.tenant_salt_secret.empty()) config_.tenant_salt_secret = kv::random_tenant_secret();
}

Status Generator::validate_config(const GeneratorConfig& config) {
  if (std::find(kSupportedBlockSizes.begin(), kSupportedBlockSizes.end(), config.block_size) ==
      kSupportedBlockSizes.end()) {
    return Status::InvalidArgument("block size " + std::to_string(config.block_size) +
                                   " is not supported (use 8, 16, 32, 64 or 128)");
  }
  if (config.max_num_batched_tokens < 1) {
    return Status::InvalidArgument("max_num_batched_tokens must be at least 1");
  }
  if (config.num_blocks < 0 || config.max_model_len < 0) {
    return Status::InvalidArgument("num_blocks and max_model_len must not be negative");
  }
  if (!kv::is_kv_pool_dtype(config.kv_dtype)) {
    return Status::InvalidArgument("KV cache dtype " + std::string(dtype_name(config.kv_dtype)) +
                                   " is not supported (F32, BF16, F16, F8_E4M3, F8_E5M2, I8)");
  }
  for (const DType d : config.kv_layer_dtypes) {
    if (!kv::is_kv_pool_dtype(d)) {
      return Status::InvalidArgument("KV cache layer dtype " + std::string(dtype_name(d)) +
                                     " is not supported");
    }
  }
  if (config.kv_int4_residual < 0 || config.kv_int4_residual % config.block_size != 0) {
    return Status::InvalidArgument("--kv-int4-residual " + std::to_string(config.kv_int4_residual) +
                                   " must be a positive multiple of the block size (" +
                                   std::to_string(config.block_size) + ")");
  }
  const bool fp8 = config.kv_dtype == DType::kF8E4M3 || config.kv_dtype == DType::kF8E5M2;
  if (fp8 != !config.kv_scales.k.empty()) {
    return Status::InvalidArgument(fp8 ? "an fp8 KV cache needs its per-layer scales"
                                       : "KV scales are only for fp8 KV caches");
  }
  return Status::Ok();
}

Status Generator::validate_request(const GenerationRequest& request) const {
  const auto vocab = static_cast<int32_t>(model_.vocab_size());
  if (request.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= vocab) {
      return Status::InvalidArgument("prompt token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  STRATA_RETURN_IF_ERROR(request.params.validate(vocab));
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (total > config_.max_model_len) {
    return Status::InvalidArgument(
        "prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
        std::to_string(request.params.max_tokens) + ") exceeds the maximum model length " +
        std::to_string(config_.max_model_len));
  }
  return Status::Ok();
}

// An auto-sized pool holds every request at its longest at once; with a sliding window, a
// sequence's window and one prefill chunk (the most it holds in any step).
int32_t Generator::blocks_for(std::span<const GenerationRequest> requests) const {
  if (config_.num_blocks > 0) return config_.num_blocks;
  int64_t blocks = 1;  // the null block
  for (const GenerationRequest& r : requests) {
    const int64_t len = static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
    const int64_t held =
        window_ > 0 ? std::min<int64_t>(len, window_ + config_.max_num_batched_tokens) : len;
    blocks += (held + config_.block_size - 1) / config_.block_size + (window_ > 0 ? 1 : 0);
  }
  return static_cast<int32_t>(blocks);
}

Result<std::vector<Sequence>> Generator::make_sequences(
    std::span<const GenerationRequest> requests, bool all_logits) {
  const auto vocab = static_cast<int32_t>(model_.vocab_size());
  std::vector<Sequence> seqs;
  seqs.reserve(requests.size());
  for (const GenerationRequest& r : requests) {
    STRATA_RETURN_IF_ERROR(validate_request(r));
    Sequence& s = seqs.emplace_back(config_.block_size, vocab);
    s.tokens = r.prompt;
    s.num_prompt = static_cast<int32_t>(r.prompt.size());
    s.params = r.params;
    s.cache_keys.cache_salt =
        r.tenant.empty() ? r.cache_salt
                         : kv::derive_tenant_salt(config_.tenant_salt_secret, r.tenant, r.cache_salt);
    s.all_logits = all_logits;
    s.counts.add_prompt(r.prompt);
    if (!all_logits) s.sampler.emplace(r.params, vocab);
    if (r.params.prompt_logprobs >= 0) s.result.prompt_logprobs.resize(r.prompt.size());
  }
  return seqs;
}

Result<std::vector<GenerationResult>> Generator::generate(
    std::span<const GenerationRequest> requests) {
  auto seqs = make_sequences(requests, /*all_logits=*/false);
  if (!seqs.ok()) return seqs.status();
  STRATA_RETURN_IF_ERROR(run(*seqs, blocks_for(requests)));
  std::vector<GenerationResult> out;
  out.reserve(seqs->size());
  for (Sequence& s : *seqs) out.push_back(std::move(s.result));
  return out;
}

Result<std::vector<std::vector<float>>> Generator::prompt_logits(
    std::span<const std::vector<int32_t>> prompts) {
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].params.max_tokens = 1;
  }
  auto seqs = make_sequences(requests, /*all_logits=*/true);
  if (!seqs.ok()) return seqs.status();
  STRATA_RETURN_IF_ERROR(run(*seqs, blocks_for(requests)));
  std::vector<std::vector<float>> out;
  out.reserve(seqs->size());
  for (Sequence& s : *seqs) out.push_back(std::move(s.logits));
  return out;
}

// Keeps the pool (and its cached prefixes) when prefix caching is on, growing it if it is too
// small; otherwise starts from an empty one, as a cache-less engine would.
void Generator::prepare_cache(int32_t num_blocks, int32_t num_seqs) {
  kv::KvSpec spec = model_.kv_spec(config_.kv_dtype);
  spec.layer_dtypes = config_.kv_layer_dtypes;
  const bool int4 = kv::needs_residual_pool(spec);
  const int32_t r =
      config_.kv_int4_residual > 0 ? config_.kv_int4_residual / config_.block_size : 1;
  const int32_t residual_blocks =
      int4 ? kv::residual_pool_blocks(std::max(num_seqs, 1), r, config_.max_num_batched_tokens,
                                      config_.block_size)
           : 0;
  if (config_.enable_prefix_caching && cache_) {
    if (cache_->pool().num_blocks() < num_blocks) {
      kv_->grow(num_blocks);
      cache_->pool().grow(num_blocks);
    }
    if (int4 && cache_->residual_pool().num_blocks() < residual_blocks) {
      residual_->grow(residual_blocks);
      cache_->residual_pool().grow(residual_blocks);
    }
    return;
  }
  kv_.reset();
  residual_.reset();
  residual_blocks_ = int4 ? r : 0;
  cache_ = std::make_unique<kv::KvCacheManager>(kv::KvCacheConfig{
      .num_blocks = num_blocks,
      .block_size = config_.block_size,
      .enable_prefix_caching = config_.enable_prefix_caching,
      .sliding_window = window_,
      .residual_num_blocks = residual_blocks,
      .residual_blocks = residual_blocks_,
  });
  kv_ = std::make_unique<kv::HostKvBuffer>(
      kv::KvLayout(spec, config_.block_size, config_.kv_scales), num_blocks);
  if (int4) {
    residual_ = std::make_unique<kv::HostKvBuffer>(
        kv::KvLayout(kv::residual_spec(spec), config_.block_size), residual_blocks);
  }
}

Status Generator::run(std::vector<Sequence>& seqs, int32_t num_blocks) {
  prepare_cache(num_blocks, static_cast<int32_t>(seqs.size()));
  stats_ = GeneratorStats{};
  stats_.num_blocks = cache_->pool().num_blocks();
  stats_.num_residual_blocks = cache_->has_residual() ? cache_->residual_pool().num_blocks() : 0;
  Status status;
  while (status.ok() &&
         std::any_of(seqs.begin(), seqs.end(), [](const Sequence& s) { return !s.finished; })) {
    status = step(seqs);
  }
  for (Sequence& s : seqs) cache_->free(s.table);  // after an error, too
  last_used_blocks_ = cache_->pool().num_used_blocks() + cache_->residual_pool().num_used_blocks();
  stats_.prefix_cache = cache_->stats();
  return status;
}

}  // namespace strata::engine
