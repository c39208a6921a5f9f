// strata::Engine: creation, request submission and cancellation (one step: engine_step.cc).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/engine_impl.h"
#include "engine/engine_on_model.h"
#include "engine/runner_factory.h"
#include "kv/block_hash.h"
#include "kv/kv_accounting.h"
#include "kv/kv_eviction.h"
#include "kv/kv_group.h"
#include "kv/redis_client.h"
#include "kv/redis_shards.h"
#include "kv/ucx_peer_transport.h"
#include "kv/ucx_worker.h"
#include "model/generation_config.h"
#include "tokenizer/vocab_bytes.h"

namespace strata {

bool RequestState::all_finished() const {
  if (!forked && request.n > 1 && !cancelled) return false;
  return std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s->finished; });
}

Status EngineImpl::validate_config(const EngineConfig& c) {
  if (std::find(engine::kSupportedBlockSizes.begin(), engine::kSupportedBlockSizes.end(),
                c.block_size) == engine::kSupportedBlockSizes.end()) {
    return Status::InvalidArgument("block size " + std::to_string(c.block_size) +
                                   " is not supported (use 8, 16, 32, 64 or 128)");
  }
  if (c.max_num_seqs < 1) return Status::InvalidArgument("max_num_seqs must be at least 1");
  if (c.max_num_batched_tokens < 1) {
    return Status::InvalidArgument("max_num_batched_tokens must be at least 1");
  }
  if (c.num_blocks < 0 || c.max_model_len < 0 || c.kv_cache_memory_bytes < 0) {
    return Status::InvalidArgument("num_blocks, max_model_len and the KV memory must not be negative");
  }
  if (!(c.watermark >= 0.0 && c.watermark < 1.0)) {
    return Status::InvalidArgument("watermark must be in [0, 1)");
  }
  if (c.kv_cache_dtype != KvCacheDType::kAuto && !kv::kv_pool_dtype(c.kv_cache_dtype)) {
    return Status::InvalidArgument("KV cache dtype " +
                                   std::to_string(static_cast<int>(c.kv_cache_dtype)) +
                                   " is not a KvCacheDType");
  }
  if (const std::optional<std::string> e = kv::int4_residual_error(
          c.kv_int4_residual, c.block_size, c.kv_cache_dtype == KvCacheDType::kInt4)) {
    return Status::InvalidArgument(*e);
  }
  if (c.quantization == WeightQuantization::kFp8 && c.device != Device::kCuda) {
    return Status::Unsupported(
        "--quantization fp8 is not supported on --device cpu yet (FP8 weights run on --device "
        "cuda)");
  }
  if (c.device == Device::kCuda &&
      (c.kv_cache_dtype == KvCacheDType::kF16 || c.kv_cache_dtype == KvCacheDType::kF32)) {
    return Status::Unsupported(
        "--kv-cache-dtype " + std::string(kv_cache_dtype_name(c.kv_cache_dtype)) +
        " is not supported on --device cuda (the GPU engine's activations are bfloat16: use "
        "auto, bfloat16, fp8_e4m3, fp8_e5m2, int8 or int4)");
  }
  // Checked here, before any device work: a bf16 pool on the GPU never reaches the measurement
  // (resolve_kv_layout) that checks it too.
  if (c.kv_quant_check &&
      !(std::isfinite(c.kv_quant_check_threshold) && c.kv_quant_check_threshold >= 0.0)) {
    return Status::InvalidArgument("--kv-quant-check-threshold must be a finite number >= 0");
  }
  if (c.swap_space_bytes < 0) return Status::InvalidArgument("swap space must not be negative");
  if (c.kv_offload_bytes < 0 || c.kv_disk_bytes < 0) {
    return Status::InvalidArgument("--kv-offload-bytes and --kv-disk-bytes must not be negative");
  }
  if (c.kv_remote_cluster && c.kv_remote_urls.empty()) {
    return Status::InvalidArgument("--kv-remote-cluster needs --kv-remote with the seed nodes");
  }
  if (!c.kv_remote_urls.empty() && c.kv_offload_bytes == 0) {
    return Status::InvalidArgument(
        "--kv-remote needs --kv-offload-bytes: blocks come back from Redis through the host tier");
  }
  if (c.kv_remote_timeout_ms < 1 || c.kv_remote_ttl_seconds < 0) {
    return Status::InvalidArgument("--kv-remote-timeout-ms must be >= 1, --kv-remote-ttl >= 0");
  }
  if (c.kv_role != KvRole::kBoth && c.kv_offload_bytes == 0) {
    return Status::InvalidArgument(
        "--role prefill and decode move blocks through the host tier: give it --kv-offload-bytes");
  }
  if (c.kv_role == KvRole::kDecode && c.kv_peers.empty()) {
    return Status::InvalidArgument(
        "--role decode needs --kv-peer, the prefill instance's --kv-peer-listen address");
  }
  if (c.kv_role == KvRole::kPrefill) {
    std::string host;
    int port = 0;
    if (const Status at = kv::split_host_port(c.kv_peer_listen, &host, &port, /*any_port=*/true);
        !at.ok()) {
      return Status::InvalidArgument("--kv-peer-listen: " + at.message());
    }
  }
  if (c.kv_peer_wait_ms < 0 || c.kv_peer_timeout_ms < 1 || c.kv_peer_outbox_bytes < 0 ||
      c.kv_peer_region_bytes < 0) {
    return Status::InvalidArgument(
        "--kv-peer-wait-ms must be >= 0, --kv-peer-timeout-ms >= 1, --kv-peer-outbox-bytes and "
        "--kv-peer-region-bytes >= 0");
  }
  if (c.kv_peer_region_bytes > 0 && c.kv_role != KvRole::kPrefill) {
    return Status::InvalidArgument("--kv-peer-region-bytes is for --role prefill");
  }
  if (c.kv_peer_region && c.kv_role != KvRole::kDecode) {
    return Status::InvalidArgument("--kv-peer-region is for --role decode");
  }
  if (!c.kv_disk_path.empty() && c.kv_offload_bytes == 0) {
    return Status::InvalidArgument(
        "--kv-disk-path needs --kv-offload-bytes: the disk tier reads and writes through the host "
        "tier");
  }
  if (c.structured_output_max_states < 2 || c.structured_output_max_regex_bytes < 1 ||
      c.structured_output_cache_size < 1 || c.structured_output_max_grammar_depth < 0 ||
      c.structured_output_max_grammar_depth > 64) {
    return Status::InvalidArgument(
        "structured_output_max_states must be >= 2, structured_output_max_regex_bytes and "
        "structured_output_cache_size >= 1, structured_output_max_grammar_depth in [0, 64]");
  }
  if (c.kv_events_endpoint.empty() && !c.kv_events_replay_endpoint.empty()) {
    return Status::InvalidArgument(
        "--kv-events-replay-endpoint needs --kv-events-endpoint, the events' PUB socket");
  }
  if (c.kv_events_buffer_steps < 1 || c.kv_events_hwm < 0 || c.kv_events_max_queue_batches < 1) {
    return Status::InvalidArgument(
        "--kv-events-buffer-steps and the queue size must be >= 1, the hwm >= 0");
  }
  if (c.max_batch_size < 1 || !(c.batch_timeout_ms >= 0.0)) {
    return Status::InvalidArgument("max_batch_size must be >= 1 and batch_timeout_ms >= 0");
  }
  // The default eviction alone must resolve (a policy needs a budget); the engine checks that
  // it can run it once its cache exists (start).
  if (Status s = validate_kv_eviction(c.kv_eviction); !s.ok()) {
    return Status::InvalidArgument("--kv-eviction-*: " + s.message());
  }
  if (Result<ResolvedKvEviction> e = resolve_kv_eviction(std::nullopt, c.kv_eviction); !e.ok()) {
    return Status::InvalidArgument("--kv-eviction-*: " + e.status().message());
  }
  if (c.kv_eviction_prefill_interval_tokens < 0 ||
      c.kv_eviction_prefill_interval_tokens % c.block_size != 0) {
    return Status::InvalidArgument("--kv-eviction-prefill-interval (" +
                                   std::to_string(c.kv_eviction_prefill_interval_tokens) +
                                   ") must be a multiple of the block size (" +
                                   std::to_string(c.block_size) + "), or 0 for automatic");
  }
  return Status::Ok();
}

EngineImpl::EngineImpl(std::unique_ptr<ThreadPool> owned_pool,
                       std::unique_ptr<model::ModelRunner> runner,
                       std::vector<kv::KvGroupSpec> groups, EngineConfig config)
    : config_(std::move(config)), owned_pool_(std::move(owned_pool)), runner_(std::move(runner)) {
  const model::ModelConfig& mc = runner_->config();
  const int32_t num_blocks = runner_->num_blocks();
  if (config_.max_model_len == 0) config_.max_model_len = mc.max_position_embeddings;
  if (config_.tenant_salt_secret.empty()) config_.tenant_salt_secret = kv::random_tenant_secret();
  const std::string& tokenizer_dir =
      config_.tokenizer_dir.empty() ? config_.model_dir : config_.tokenizer_dir;
  if (!tokenizer_dir.empty() &&
      file_exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json")) {
    tokenizer_.emplace(tokenizer::Tokenizer::load(tokenizer_dir));
    grammar::GrammarLimits limits;
    limits.json.max_regex_bytes = config_.structured_output_max_regex_bytes;
    limits.max_dfa_states = config_.structured_output_max_states;
    limits.ebnf.max_depth = config_.structured_output_max_grammar_depth;
    limits.max_grammars = static_cast<size_t>(config_.structured_output_cache_size);
    const tokenizer::Tokenizer* tok = &*tokenizer_;
    grammars_ = std::make_unique<grammar::GrammarCompiler>(
        [tok] { return tokenizer::vocab_bytes(*tok); }, limits);
  }
  // The KV cache groups the plan made, one per runner pool, each over the pool as the runner
  // finally laid it out (--kv-quant-check may have kept more layers at full precision).
  STRATA_CHECK(static_cast<int32_t>(groups.size()) == runner_->num_kv_pools(),
               "a KV cache group per runner pool");
  kv::KvCacheConfig kv_config;
  kv_config.block_size = config_.block_size;
  kv_config.enable_prefix_caching = config_.enable_prefix_caching;
  for (int32_t g = 0; g < runner_->num_kv_pools(); ++g) {
    kv::KvGroupSpec spec = groups[static_cast<size_t>(g)];
    spec.kv = runner_->kv_layout(g).spec();
    kv_config.groups.push_back({spec, runner_->num_blocks(g)});
  }
  const kv::KvGroupSpec& group0 = kv_config.groups.front().spec;
  window_ = group0.kind == kv::KvGroupKind::kSlidingWindow ? group0.window : 0;
  cache_ = std::make_unique<kv::KvCacheManager>(kv_config);
  if (config_.preemption_mode == PreemptionMode::kSwap) {
    // Group 0's swap space holds swap_space_bytes; a newest-blocks group's (INT4) holds as many
    // blocks as its pool: each swapped sequence keeps at most R of them.
    for (int32_t g = 0; g < cache_->num_groups(); ++g) {
      const kv::KvLayout& layout = runner_->kv_layout(g);
      const int64_t blocks = g == 0 ? config_.swap_space_bytes / layout.block_bytes()
                                    : runner_->num_blocks(g) - 1;
      swaps_.push_back(std::make_unique<kv::SwapSpace>(
          layout, static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30)),
          runner_->block_mover(g)));
    }
  }
  scheduler_ = std::make_unique<engine::Scheduler>(
      engine::SchedulerConfig{
          .max_num_seqs = config_.max_num_seqs,
          .max_num_batched_tokens = config_.max_num_batched_tokens,
          .max_model_len = config_.max_model_len,
          .watermark = config_.watermark,
          .policy = config_.policy,
          .kind = config_.scheduler,
          .max_batch_size = config_.max_batch_size,
          .batch_timeout_s = config_.batch_timeout_ms / 1000.0,
          .allocator = config_.allocator,
          .preemption = config_.preemption_mode,
      },
      *cache_, swap_spaces());
  last_step_.num_free_blocks = cache_->pool().num_free_blocks();
  last_step_.capacity_token_slots = static_cast<int64_t>(num_blocks - 1) * config_.block_size;
}

Status EngineImpl::start_tiers() {
  if (config_.kv_offload_bytes == 0) return Status::Ok();
  std::vector<kv::KvGroupSpec> groups;
  groups.reserve(static_cast<size_t>(cache_->num_groups()));
  for (int32_t g = 0; g < cache_->num_groups(); ++g) groups.push_back(cache_->group_spec(g));
  kv::KvTierConfig c;
  c.host_bytes = config_.kv_offload_bytes;
  c.disk_path = config_.kv_disk_path;
  c.disk_bytes = config_.kv_disk_bytes;
  c.policy = config_.kv_offload_write_through ? kv::OffloadPolicy::kWriteThrough
                                              : kv::OffloadPolicy::kEvict;
  c.prefetch = config_.kv_prefetch;
  if (!config_.kv_remote_urls.empty()) {
    kv::RedisTarget target;
    target.cluster = config_.kv_remote_cluster;
    for (const std::string& url : config_.kv_remote_urls) {
      Result<kv::RedisEndpoint> ep = kv::parse_redis_url(url);
      if (!ep.ok()) return Status::InvalidArgument("--kv-remote: " + ep.status().message());
      // Each independent server once: the shards are told apart by their names.
      for (const kv::RedisEndpoint& seen : target.nodes) {
        if (!target.cluster && kv::shard_name(seen) == kv::shard_name(*ep)) {
          return Status::InvalidArgument("--kv-remote: " + url + " is named twice");
        }
      }
      target.nodes.push_back(*ep);
    }
    c.remote = std::move(target);
    c.remote_options.client.timeout = std::chrono::milliseconds(config_.kv_remote_timeout_ms);
    c.remote_options.ttl_seconds = config_.kv_remote_ttl_seconds;
    c.remote_codec = config_.kv_remote_compress;
    c.remote_read_always = config_.kv_remote_read_always;
  }
  if (config_.kv_role == KvRole::kPrefill) {
    c.policy = kv::OffloadPolicy::kWriteThrough;  // every block the decode instances may read
    c.peer_outbox_bytes = config_.kv_peer_outbox_bytes > 0 ? config_.kv_peer_outbox_bytes
                                                           : config_.kv_offload_bytes;
    c.peer_region_bytes = config_.kv_peer_region_bytes;
    c.peer_region = engine::peer_region_factory(config_);
  }
  if (config_.kv_role == KvRole::kDecode) {
    for (const std::string& address : config_.kv_peers) {
      c.peer_connects.emplace_back(
          [address, timeout = std::chrono::milliseconds(config_.kv_peer_timeout_ms)] {
            return kv::connect_ucx_peer(address, timeout);
          });
    }
    c.peer_options.wait = std::chrono::milliseconds(config_.kv_peer_wait_ms);
    if (config_.kv_peer_region) c.peer_options.open_region = engine::peer_region_opener();
  }
  c.peer_codec = config_.kv_peer_compress;
  c.ns = kv::tier_namespace(kv::checkpoint_identity(config_.model_dir, config_.dummy_weights),
                            config_.block_size, groups, runner_->kv_layout(0).static_scales());
  // The tiers' movers are their own: swap's copy thread uses the runner's meanwhile.
  std::vector<kv::BlockMover*> movers;
  for (int32_t g = 0; g < cache_->num_groups(); ++g) {
    tier_movers_.push_back(runner_->new_block_mover(g));
    movers.push_back(tier_movers_.back().get());
  }
  Result<std::unique_ptr<kv::KvTiers>> tiers = kv::KvTiers::create(c, *cache_, movers);
  if (!tiers.ok()) return tiers.status();
  tiers_ = std::move(tiers).value();
  scheduler_->set_tiers(tiers_.get());
  if (kv_events_ != nullptr) tiers_->set_event_sink(kv_events_.get());
  if (kv::PeerOutbox* const outbox = tiers_->outbox()) {
    kv::PeerSlots* const slots = tiers_->peer_slots();
    std::string host;
    int port = 0;
    STRATA_RETURN_IF_ERROR(kv::split_host_port(config_.kv_peer_listen, &host, &port,
                                               /*any_port=*/true));  // checked at validation
    Result<std::unique_ptr<kv::PeerServer>> server =
        kv::start_ucx_peer_server(host, port,
                                  [outbox, slots](std::span<const kv::TierKey> keys, uint16_t flags,
                                                  std::vector<std::string>& values) {
                                    kv::peer_lookup(slots, outbox, keys, flags, values);
                                  });
    if (!server.ok()) return server.status();
    peer_server_ = std::move(server).value();
  }
  return Status::Ok();
}

Status EngineImpl::start_kv_events() {
  if (config_.kv_events_endpoint.empty()) return Status::Ok();
  kv::KvEventPublisherConfig c;
  c.endpoint = config_.kv_events_endpoint;
  c.replay_endpoint = config_.kv_events_replay_endpoint;
  c.topic = config_.kv_events_topic;
  c.buffer_steps = config_.kv_events_buffer_steps;
  c.hwm = config_.kv_events_hwm;
  c.max_queue_batches = config_.kv_events_max_queue_batches;
  c.block_size = config_.block_size;
  Result<std::unique_ptr<kv::KvEventPublisher>> publisher = kv::KvEventPublisher::create(c);
  if (!publisher.ok()) return publisher.status();
  kv_events_ = std::move(publisher).value();
  cache_->pool().set_event_sink(kv_events_.get());
  return Status::Ok();
}

Status EngineImpl::validate_request(const EngineRequest& r,
                                    const ResolvedKvEviction& eviction) const {
  const int32_t vocab = vocab_size();
  if (r.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  for (const int32_t id : r.prompt) {
    if (id < 0 || id >= vocab) {
      return Status::InvalidArgument("prompt token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " + std::to_string(vocab) +
                                     ")");
    }
  }
  STRATA_RETURN_IF_ERROR(r.params.validate(vocab));
  if (r.n < 1 || r.n > 1024) return Status::InvalidArgument("n must be in [1, 1024]");
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
  if (total > config_.max_model_len) {
    return Status::InvalidArgument("prompt (" + std::to_string(r.prompt.size()) +
                                   " tokens) + max_tokens (" + std::to_string(r.params.max_tokens) +
                                   ") exceeds the maximum model length " +
                                   std::to_string(config_.max_model_len));
  }
  // It must fit the whole pool on its own, or it could never run (preemption would loop). Under
  // a budget it never holds more than kv::max_held_slots.
  const int64_t held = eviction.active() ? kv::max_held_slots(eviction, config_.block_size,
                                                              static_cast<int64_t>(r.prompt.size()),
                                                              r.params.max_tokens)
                                         : total;
  if (!fits_pool(held)) {
    return Status::InvalidArgument("prompt + max_tokens (" + std::to_string(total) +
                                   " tokens) needs more KV blocks than the pool has (" +
                                   std::to_string(cache_->pool().num_blocks() - 1) + ")");
  }
  return Status::Ok();
}

bool EngineImpl::fits_pool(int64_t total) const {
  const int32_t bs = config_.block_size;
  const int64_t held =
      kv::blocks_needed_per_request(total, window_, config_.max_num_batched_tokens, bs);
  const int64_t usable = cache_->pool().num_blocks() - 1;
  return held <= usable && !(config_.allocator == KvAllocatorKind::kContiguous &&
                             config_.max_model_len > usable * bs);
}

int64_t EngineImpl::max_request_tokens() const {
  // fits_pool is monotonic in the total: the largest total it accepts, up to max_model_len.
  int64_t lo = 0, hi = config_.max_model_len;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits_pool(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

engine::Sequence& EngineImpl::new_sequence(RequestState& r, int32_t index) {
  const int32_t vocab = vocab_size();
  auto seq = std::make_unique<engine::Sequence>(config_.block_size, vocab);
  seq->request_id = r.id;
  seq->index = index;
  seq->priority = r.request.priority;
  seq->arrival_order = r.id;
  seq->arrival_time = r.metrics.arrival_time;
  seq->params = r.request.params;
  seq->eviction = r.eviction;
  if (index > 0 && seq->params.seed) *seq->params.seed += static_cast<uint64_t>(index);
  seq->sampler.emplace(seq->params, vocab);
  if (r.grammar != nullptr) {
    // What ends it where the output is complete: its stop ids and the model's EOS ids.
    std::vector<int32_t> ends = seq->params.stop_token_ids;
    ends.insert(ends.end(), config_.eos_token_ids.begin(), config_.eos_token_ids.end());
    seq->constraint.emplace(r.grammar, grammars_->vocab(), std::move(ends), vocab);
  }
  r.seqs.push_back(std::move(seq));
  return *r.seqs.back();
}

Result<RequestId> EngineImpl::submit(EngineRequest request) {
  if (request.prompt.empty() && !request.prompt_text.empty()) {
    if (!tokenizer_) {
      return Status::InvalidArgument("a text prompt needs tokenizer.json in the model directory");
    }
    request.prompt = tokenizer_->encode(request.prompt_text, /*add_special_tokens=*/true);
  }
  Result<ResolvedKvEviction> eviction =
      resolve_kv_eviction(request.kv_eviction, config_.kv_eviction);
  if (!eviction.ok()) return Status::InvalidArgument("kv_eviction: " + eviction.status().message());
  if (eviction->active()) eviction->prefill_interval_tokens = eviction_prefill_interval();
  STRATA_RETURN_IF_ERROR(check_eviction(*eviction));
  STRATA_RETURN_IF_ERROR(validate_request(request, *eviction));
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  if (request.params.structured.active()) {
    Result<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
        compile_structured_output(request.params.structured);
    if (!compiled.ok()) return compiled.status();
    grammar = std::move(compiled).value();
  }
  const RequestId id = next_id_++;
  RequestState& r = requests_[id];
  r.id = id;
  r.grammar = std::move(grammar);
  r.eviction = *eviction;
  r.request = std::move(request);
  r.metrics.arrival_time = now();
  r.metrics.num_prompt_tokens = static_cast<int32_t>(r.request.prompt.size());
  engine::Sequence& seq = new_sequence(r, 0);
  seq.tokens = r.request.prompt;
  seq.num_prompt = static_cast<int32_t>(seq.tokens.size());
  seq.cache_keys.cache_salt =
      kv::request_cache_salt(config_.tenant_salt_secret, r.request.tenant, r.request.cache_salt);
  seq.prefetch.remote_prefill_running = r.request.remote_prefill_running;
  seq.counts.add_prompt(seq.tokens);
  if (r.request.params.prompt_logprobs >= 0) r.prompt_logprobs.resize(seq.tokens.size());
  if (r.request.prompt_logits) {
    seq.all_logits = true;
    r.prompt_logits.resize(seq.tokens.size() * static_cast<size_t>(vocab_size()));
  }
  scheduler_->add_waiting(&seq);
  return id;
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> EngineImpl::compile_structured_output(
    const StructuredOutput& constraint) const {
  if (grammars_ == nullptr) {
    return Status::InvalidArgument(
        "structured outputs need the model's tokenizer.json (its vocabulary's bytes)");
  }
  Result<std::shared_ptr<const grammar::CompiledGrammar>> compiled = grammars_->compile(constraint);
  // Past the limits is the request's fault too: the server answers 400 with the reason.
  if (!compiled.ok() && compiled.status().code() == StatusCode::kResourceExhausted) {
    return Status::InvalidArgument(compiled.status().message());
  }
  return compiled;
}

void EngineImpl::cancel(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end() || it->second.cancelled) return;
  RequestState& r = it->second;
  r.cancelled = true;
  for (auto& seq : r.seqs) {
    if (seq->status != engine::SeqStatus::kFinished) scheduler_->finish(seq.get(), true);
    seq->finished = true;
  }
}

Status EngineImpl::warm_up() {
  const bool on = config_.warm_up == WarmUp::kOn ||
                  (config_.warm_up == WarmUp::kAuto && config_.device == Device::kCuda);
  if (!on) return Status::Ok();
  const int64_t prompt_len =
      std::min<int64_t>(config_.max_num_batched_tokens, max_request_tokens() - 2);
  if (prompt_len < 1) return Status::Ok();
  const double start = now();
  EngineRequest request;
  request.prompt.resize(static_cast<size_t>(prompt_len));
  const int64_t vocab = vocab_size();
  for (int64_t i = 0; i < prompt_len; ++i) {
    request.prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 1) % vocab);
  }
  request.params.max_tokens = 2;  // the prompt's step, then one decode step
  request.params.ignore_eos = true;
  request.params.temperature = 0.0f;
  if (Result<RequestId> id = submit(std::move(request)); !id.ok()) {
    return Status::Internal("the warm-up request: " + id.status().message());
  }
  int32_t steps = 0;
  for (; !requests_.empty(); ++steps) {
    if (Result<std::vector<RequestOutput>> out = step(); !out.ok()) {
      return Status::Internal("the warm-up request: " + out.status().message());
    }
  }
  STRATA_RETURN_IF_ERROR(reset_prefix_cache());
  warm_up_info_ = {prompt_len, steps, now() - start};
  totals_ = {};
  last_step_ = {};
  next_id_ = 1;
  return Status::Ok();
}

Status EngineImpl::reset_prefix_cache() {
  if (!requests_.empty()) {
    return Status::Unavailable(std::to_string(requests_.size()) +
                               " requests are in flight: their blocks are in use");
  }
  if (tiers_ != nullptr && tiers_->promotion_under_way()) {
    return Status::Unavailable("the KV tiers are bringing blocks into the pool");
  }
  STRATA_RETURN_IF_ERROR(finish_compactions());  // the last compactions' blocks come back
  for (int32_t g = 0; g < cache_->num_groups(); ++g) {
    if (const int32_t used = cache_->pool(g).num_used_blocks(); used != 0) {
      return Status::Unavailable(std::to_string(used) + " blocks are in use");
    }
  }
  for (int32_t g = 0; g < cache_->num_groups(); ++g) {
    STRATA_CHECK(cache_->pool(g).reset_prefix_cache(), "a pool with no block in use resets");
  }
  last_step_.num_cached_blocks = cache_->pool().num_cached_blocks();  // what /metrics shows
  if (kv_events_ != nullptr) {
    kv_events_->end_step();  // AllBlocksCleared now, not at a next step
    const kv::KvEventPublisherStats e = kv_events_->stats();
    totals_.kv_events_published_blocks = e.queued_blocks;
    totals_.kv_events_dropped_blocks = e.dropped_blocks;
  }
  return Status::Ok();
}

// ---- Engine: the public face ------------------------------------------------------------------

namespace {

// Unless the config names them, the EOS ids are the checkpoint's: config.json's, then
// generation_config.json's (in config.model_dir, when set), as `strata generate` takes them.
void fill_eos_ids(EngineConfig& c, const model::ModelConfig& model) {
  if (!c.eos_token_ids.empty()) return;
  const model::GenerationConfig g =
      c.model_dir.empty() ? model::GenerationConfig{} : model::load_generation_config(c.model_dir);
  for (const auto& list : {model.eos_token_ids, g.eos_token_ids}) {
    for (const int64_t eos : list) {
      const auto id = static_cast<int32_t>(eos);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
        c.eos_token_ids.push_back(id);
      }
    }
  }
}

ModelInfo model_info(const model::ModelRunner& runner) {
  const model::ModelConfig& c = runner.config();
  ModelInfo m;
  m.architecture = std::string(model::architecture_name(c.architecture));
  m.num_layers = c.num_hidden_layers;
  m.hidden_size = c.hidden_size;
  m.num_attention_heads = c.num_attention_heads;
  m.num_kv_heads = c.num_key_value_heads;
  m.head_dim = c.head_dim;
  m.vocab_size = static_cast<int32_t>(c.vocab_size);
  m.max_position_embeddings = c.max_position_embeddings;
  m.weight_bytes = runner.weight_bytes();
  return m;
}

// Each model layer's element type in the pool of its group.
std::vector<DType> layer_dtypes(const model::ModelRunner& r) {
  const std::span<const kv::KvLayerSlot> slots = r.kv_layer_slots();
  std::vector<DType> dtypes;
  if (!slots.empty()) {  // layers in groups: each layer's dtype in its group's pool
    for (const kv::KvLayerSlot& s : slots) {
      dtypes.push_back(r.kv_layout(s.group).spec().layer_dtype(s.index));
    }
    return dtypes;
  }
  const kv::KvSpec& spec = r.kv_layout().spec();
  for (int32_t l = 0; l < spec.num_layers; ++l) dtypes.push_back(spec.layer_dtype(l));
  return dtypes;
}

// The engine's state over a built runner; the EOS ids default to the checkpoint's.
std::unique_ptr<EngineImpl> make_impl(engine::BuiltRunner built, EngineConfig c) {
  fill_eos_ids(c, built.runner->config());
  auto impl = std::make_unique<EngineImpl>(std::move(built.pool), std::move(built.runner),
                                           std::move(built.groups), std::move(c));
  const model::ModelRunner& r = *impl->runner_;
  impl->model_info_ = model_info(r);
  KvCacheInfo& kv = impl->kv_cache_info_;
  kv.dtype = r.kv_layout().spec().dtype;
  kv.layer_dtypes = layer_dtypes(r);
  kv.bytes_per_token = std::llround(r.kv_layout().bytes_per_token());
  kv.scale_bytes_per_token = std::llround(r.kv_layout().scale_bytes_per_token());
  kv.num_blocks = r.num_blocks();
  kv.max_request_tokens = impl->max_request_tokens();
  kv.scales_source = std::move(built.scales_source);
  kv.quant_check = std::move(built.quant_check);
  return impl;
}

// The engine, with its KV tiers when the config asks for them (their directory may not open).
Result<std::unique_ptr<Engine>> start(std::unique_ptr<EngineImpl> impl) {
  if (Status s = impl->check_default_eviction(); !s.ok()) {
    return Status::InvalidArgument("--kv-eviction-policy: " + s.message());
  }
  STRATA_RETURN_IF_ERROR(impl->warm_up());
  STRATA_RETURN_IF_ERROR(impl->start_kv_events());
  STRATA_RETURN_IF_ERROR(impl->start_tiers());
  return std::make_unique<Engine>(std::move(impl));
}

}  // namespace

const char* device_name(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  STRATA_RETURN_IF_ERROR(EngineImpl::validate_config(config));
  Result<engine::BuiltRunner> built = engine::make_runner(config);
  if (!built.ok()) return built.status();
  return start(make_impl(std::move(built).value(), config));
}

Result<RequestId> Engine::submit(EngineRequest request) { return impl_->submit(std::move(request)); }
void Engine::cancel(RequestId id) { impl_->cancel(id); }
Status Engine::reset_prefix_cache() { return impl_->reset_prefix_cache(); }
Status Engine::compile_structured_output(const StructuredOutput& constraint) const {
  return impl_->compile_structured_output(constraint).status();
}
Result<std::vector<RequestOutput>> Engine::step() { return impl_->step(); }
bool Engine::has_unfinished() const { return impl_->has_unfinished(); }
const EngineStepStats& Engine::last_step() const { return impl_->last_step_; }
EngineTotals Engine::totals() const { return impl_->totals_; }
const EngineConfig& Engine::config() const { return impl_->config_; }
const ModelInfo& Engine::model() const { return impl_->model_info_; }
const KvCacheInfo& Engine::kv_cache() const { return impl_->kv_cache_info_; }
const WarmUpInfo& Engine::warm_up() const { return impl_->warm_up_info_; }
std::vector<KvGroupStats> Engine::kv_groups() const {
  const kv::KvCacheManager& cache = impl_->cache();
  std::vector<KvGroupStats> groups;
  for (int32_t g = 0; g < cache.num_groups(); ++g) {
    const kv::KvGroupSpec& spec = cache.group_spec(g);
    // Group 0's blocks a compaction gave up are free once its copies are done (next step).
    const int32_t compacting = g == 0 ? impl_->num_compacting_blocks() : 0;
    groups.push_back({kv::kv_group_kind_name(spec.kind), spec.window, spec.newest_blocks,
                      cache.pool(g).num_blocks(), cache.pool(g).num_used_blocks() - compacting,
                      impl_->runner_->kv_layout(g).block_bytes()});
  }
  return groups;
}
double Engine::now() const { return impl_->now(); }
std::string Engine::kv_peer_address() const { return impl_->peer_address(); }

namespace engine {

Result<std::unique_ptr<Engine>> create_engine(model::Model& model, ThreadPool& pool,
                                              const EngineConfig& config) {
  STRATA_RETURN_IF_ERROR(EngineImpl::validate_config(config));
  if (config.device != Device::kCpu) {
    return Status::InvalidArgument("an engine borrowing a loaded model runs on the CPU");
  }
  Result<BuiltRunner> built = make_cpu_runner(config, model, pool);
  if (!built.ok()) return built.status();
  return start(make_impl(std::move(built).value(), config));
}

}  // namespace engine

}  // namespace strata
