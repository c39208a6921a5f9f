// strata::Engine: creation, request submission and cancellation (one step: engine_step.cc).

#include <algorithm>
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
#include "engine/kv_layout_setup.h"
#include "kv/block_hash.h"
#include "kv/kv_accounting.h"
#include "model/cpu_model_runner.h"
#include "model/generation_config.h"
#include "model/kv_scales.h"
#include "model/weight_store.h"
#if STRATA_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#endif

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
  if (!kv::is_kv_pool_dtype(c.kv_dtype)) {
    return Status::InvalidArgument("KV cache dtype " + std::string(dtype_name(c.kv_dtype)) +
                                   " is not supported (F32, BF16, F16, F8_E4M3, F8_E5M2, I8, I4)");
  }
  if (const std::optional<std::string> e =
          kv::int4_residual_error(c.kv_int4_residual, c.block_size, c.kv_dtype == DType::kI4)) {
    return Status::InvalidArgument(*e);
  }
  if (c.quantization == WeightQuantization::kFp8 && c.device != Device::kCuda) {
    return Status::Unsupported(
        "--quantization fp8 is not supported on --device cpu yet (FP8 weights run on --device "
        "cuda)");
  }
  if (c.device == Device::kCuda && c.kv_dtype == DType::kF16) {
    return Status::Unsupported(
        "--kv-cache-dtype float16 is not supported on --device cuda (the GPU engine's activations "
        "are bfloat16: use bfloat16, fp8_e4m3, fp8_e5m2, int8 or int4)");
  }
  // Checked here, before any device work: a bf16 pool on the GPU never reaches the measurement
  // (resolve_kv_layout) that checks it too.
  if (c.kv_quant_check &&
      !(std::isfinite(c.kv_quant_check_threshold) && c.kv_quant_check_threshold >= 0.0)) {
    return Status::InvalidArgument("--kv-quant-check-threshold must be a finite number >= 0");
  }
  if (c.swap_space_bytes < 0) return Status::InvalidArgument("swap space must not be negative");
  if (c.max_batch_size < 1 || !(c.batch_timeout_ms >= 0.0)) {
    return Status::InvalidArgument("max_batch_size must be >= 1 and batch_timeout_ms >= 0");
  }
  return Status::Ok();
}

int32_t EngineImpl::residual_window_blocks(const EngineConfig& c) {
  return kv::int4_residual_blocks(c.kv_int4_residual, c.block_size);
}

Result<int32_t> EngineImpl::pool_blocks(const EngineConfig& c, int64_t block_bytes,
                                        int64_t reserved_bytes, const std::string& reserved_what) {
  constexpr int64_t kDefaultCpuKvBytes = int64_t{1} << 30;
  if (c.num_blocks > 0) {
    if (c.num_blocks < 2) return Status::InvalidArgument("the KV pool needs at least 2 blocks");
    return c.num_blocks;
  }
  const int64_t total = c.kv_cache_memory_bytes > 0 ? c.kv_cache_memory_bytes : kDefaultCpuKvBytes;
  if (reserved_bytes >= total) {
    return Status::InvalidArgument(
        "the KV cache memory (" + std::to_string(total) +
        " bytes) does not exceed the " + reserved_what + " " + std::to_string(reserved_bytes) +
        " bytes (lower --max-num-seqs, --max-num-batched-tokens" +
        (reserved_what == kInt4Residual ? std::string(" or --kv-int4-residual)") : std::string(")")));
  }
  const int64_t kv_bytes = total - reserved_bytes;
  const int64_t blocks = kv_bytes / block_bytes;
  if (blocks < 2) {
    return Status::InvalidArgument("the KV cache memory (" + std::to_string(kv_bytes) +
                                   " bytes) holds fewer than 2 blocks of " +
                                   std::to_string(block_bytes) + " bytes");
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

EngineImpl::EngineImpl(std::unique_ptr<ThreadPool> owned_pool,
                       std::unique_ptr<model::ModelRunner> runner, EngineConfig config)
    : config_(std::move(config)), owned_pool_(std::move(owned_pool)), runner_(std::move(runner)) {
  const model::ModelConfig& mc = runner_->config();
  const int32_t num_blocks = runner_->num_blocks();
  if (config_.max_model_len == 0) config_.max_model_len = mc.max_position_embeddings;
  if (config_.tenant_salt_secret.empty()) config_.tenant_salt_secret = kv::random_tenant_secret();
  window_ = kv::pool_sliding_window(mc.layer_sliding_window);
  if (!config_.model_dir.empty() &&
      file_exists(std::filesystem::path(config_.model_dir) / "tokenizer.json")) {
    tokenizer_.emplace(tokenizer::Tokenizer::load(config_.model_dir));
  }
  // The KV cache groups, one per runner pool: group 0 every layer (a sliding window when every
  // layer has one), and an INT4 cache's full-precision newest blocks.
  kv::KvCacheConfig kv_config;
  kv_config.block_size = config_.block_size;
  kv_config.enable_prefix_caching = config_.enable_prefix_caching;
  kv_config.groups.push_back(
      {window_ > 0 ? kv::KvGroupSpec::windowed(window_, runner_->kv_layout().spec())
                   : kv::KvGroupSpec::full(runner_->kv_layout().spec()),
       num_blocks});
  if (!runner_->kv_layer_slots().empty()) {  // a hybrid model's windowed layers
    const std::optional<kv::HybridKvLayers> hybrid = kv::hybrid_kv_layers(mc.layer_sliding_window);
    STRATA_CHECK(hybrid.has_value() && runner_->num_kv_pools() == 2,
                 "a runner with layers in groups serves a hybrid model");
    kv_config.groups.push_back(
        {kv::KvGroupSpec::windowed(hybrid->window, runner_->kv_layout(1).spec()),
         runner_->num_blocks(1)});
  } else if (runner_->num_kv_pools() > 1) {
    residual_blocks_ = residual_window_blocks(config_);
    kv_config.groups.push_back(
        {kv::KvGroupSpec::newest(residual_blocks_, runner_->kv_layout(1).spec()),
         runner_->num_blocks(1)});
  }
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

Status EngineImpl::validate_request(const EngineRequest& r) const {
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
  // It must fit the whole pool on its own, or it could never run (preemption would loop).
  if (!fits_pool(total)) {
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
  if (index > 0 && seq->params.seed) *seq->params.seed += static_cast<uint64_t>(index);
  seq->sampler.emplace(seq->params, vocab);
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
  STRATA_RETURN_IF_ERROR(validate_request(request));
  const RequestId id = next_id_++;
  RequestState& r = requests_[id];
  r.id = id;
  r.request = std::move(request);
  r.metrics.arrival_time = now();
  r.metrics.num_prompt_tokens = static_cast<int32_t>(r.request.prompt.size());
  engine::Sequence& seq = new_sequence(r, 0);
  seq.tokens = r.request.prompt;
  seq.num_prompt = static_cast<int32_t>(seq.tokens.size());
  seq.cache_keys.cache_salt =
      r.request.tenant.empty()
          ? r.request.cache_salt
          : kv::derive_tenant_salt(config_.tenant_salt_secret, r.request.tenant,
                                   r.request.cache_salt);
  seq.counts.add_prompt(seq.tokens);
  if (r.request.params.prompt_logprobs >= 0) r.prompt_logprobs.resize(seq.tokens.size());
  if (r.request.prompt_logits) {
    seq.all_logits = true;
    r.prompt_logits.resize(seq.tokens.size() * static_cast<size_t>(vocab_size()));
  }
  scheduler_->add_waiting(&seq);
  return id;
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

model::LoadFormat load_format(const EngineConfig& c) {
  return c.dummy_weights ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
}

#if STRATA_HAVE_CUDA
// The GPU pool's per-layer dtypes for the quantized `kv_dtype` from --kv-cache-dtype-skip-layers
// (empty when no layer is excepted): the excepted layers hold bf16, the GPU engine's model
// precision.
Result<std::vector<DType>> gpu_skip_layer_dtypes(const EngineConfig& c, DType kv_dtype) {
  if (kv_dtype == DType::kBF16 || c.kv_skip_layers.empty()) return std::vector<DType>{};
  const Result<std::vector<bool>> mask = kv::kv_skip_layer_mask(
      c.kv_skip_layers, model::load_model_config(c.model_dir).layer_sliding_window);
  if (!mask.ok()) return mask.status();
  return kv::kv_layer_dtypes(kv_dtype, DType::kBF16, mask.value());
}

// --kv-quant-check on the GPU, with the GPU's own kernels (CudaModel::kv_quant_check: num_layers
// + 1 passes of the calibration prompt through scratch pools, each a few milliseconds to tens of
// milliseconds of GPU time, and the host's KL over the logits). The layers above the threshold
// join the skipped ones at bf16, and the pool is laid out again before the first step;
// *quant_check takes the report.
Status run_gpu_kv_quant_check(const EngineConfig& c, model::CudaModel& gpu,
                              std::optional<engine::KvQuantCheckReport>* quant_check) {
  const kv::KvSpec& spec = gpu.kv_layout().spec();
  const std::vector<int32_t> tokens =
      engine::kv_calibration_tokens(gpu.config().vocab_size, c.model_dir);
  ThreadPool pool(c.num_threads);
  const int32_t passes = spec.num_layers + 1;
  int32_t done = 0;
  const auto after_pass = [&] {
    if (c.kv_quant_check_progress) c.kv_quant_check_progress(++done, passes);
  };
  Result<model::CudaModel::KvQuantFigures> figures = gpu.kv_quant_check(tokens, pool, after_pass);
  if (!figures.ok()) return figures.status();
  engine::KvQuantCheckReport report = engine::kv_quant_check_report(
      spec.dtype, c.kv_quant_check_threshold, static_cast<int32_t>(tokens.size()),
      figures.value().output_kl, figures.value().attn_error);
  std::vector<bool> kept(static_cast<size_t>(spec.num_layers));
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    kept[static_cast<size_t>(l)] = spec.layer_dtype(l) != spec.dtype;
  }
  bool changed = false;
  for (const int32_t l : report.kept_layers()) {
    changed = changed || !kept[static_cast<size_t>(l)];
    kept[static_cast<size_t>(l)] = true;
  }
  const DType dtype = spec.dtype;
  *quant_check = std::move(report);
  if (!changed) return Status::Ok();
  return gpu.set_kv_layer_dtypes(kv::kv_layer_dtypes(dtype, DType::kBF16, kept));
}
#endif

// The GPU runner (throws strata::Error for unusable files or options; a refused FP8 scale source
// is an InvalidArgument). Per-layer exceptions: gpu_skip_layer_dtypes, then --kv-quant-check's
// (run_gpu_kv_quant_check, whose report lands in *quant_check). An FP8 pool starts with unit
// scales and takes the resolved ones before its first step (and before the check, which
// measures with them): --calculate-kv-scales calibrates on the device itself. An INT4 pool's
// residual pool is sized as cpu_runner sizes it (bf16 blocks there); CudaModel takes its bytes
// out of the KV memory before sizing the int4 pool.
Result<std::unique_ptr<model::ModelRunner>> cuda_runner(
    const EngineConfig& c, std::string* scales_source,
    std::optional<engine::KvQuantCheckReport>* quant_check) {
#if STRATA_HAVE_CUDA
  model::CudaModelOptions o;
  o.model_dir = c.model_dir;
  o.load_format = load_format(c);
  o.weight_dtype = c.quantization == WeightQuantization::kFp8 ? DType::kF8E4M3 : DType::kBF16;
  o.kv_dtype = c.kv_dtype == DType::kF32 ? DType::kBF16 : c.kv_dtype;
  Result<std::vector<DType>> layer_dtypes = gpu_skip_layer_dtypes(c, o.kv_dtype);
  if (!layer_dtypes.ok()) return layer_dtypes.status();
  o.kv_layer_dtypes = std::move(layer_dtypes).value();
  o.block_size = c.block_size;
  o.max_num_tokens = std::max(c.max_num_batched_tokens, c.max_num_seqs);
  o.max_num_seqs = c.max_num_seqs;
  o.num_blocks = c.num_blocks;
  o.kv_cache_memory_bytes = c.kv_cache_memory_bytes;
  o.gpu_memory_utilization = c.gpu_memory_utilization;
  o.max_model_len = c.max_model_len;
  o.enforce_eager = c.enforce_eager;
  if (o.kv_dtype == DType::kI4) {
    const model::ModelConfig mc = model::load_model_config(c.model_dir);
    const kv::KvSpec spec{.num_layers = static_cast<int32_t>(mc.num_hidden_layers),
                          .dtype = o.kv_dtype,
                          .layer_dtypes = o.kv_layer_dtypes};
    if (kv::needs_residual_pool(spec)) {
      o.residual_window_blocks = EngineImpl::residual_window_blocks(c);
      o.num_residual_blocks = kv::newest_blocks_pool_size(c.max_num_seqs, o.residual_window_blocks,
                                                       c.max_num_batched_tokens, c.block_size);
    }
  }
  std::unique_ptr<model::CudaModel> gpu = model::CudaModel::create(o);
  if (o.kv_dtype == DType::kF8E4M3 || o.kv_dtype == DType::kF8E5M2) {
    const model::ModelConfig& mc = gpu->config();
    engine::KvScalesSources sources;
    sources.num_layers = static_cast<int32_t>(mc.num_hidden_layers);
    sources.vocab_size = mc.vocab_size;
    sources.abs_max = [&](std::span<const int32_t> tokens) { return gpu->kv_abs_max(tokens); };
    sources.checkpoint = [&]() -> std::optional<kv::KvStaticScales> {
      if (o.load_format == model::LoadFormat::kDummy) return std::nullopt;
      return model::read_checkpoint_kv_scales(model::WeightStore::open(c.model_dir),
                                              sources.num_layers);
    };
    Result<engine::ResolvedKvScales> scales = engine::resolve_kv_scales(
        engine::KvScalesOptions{.kv_dtype = o.kv_dtype,
                                .calculate_kv_scales = c.calculate_kv_scales,
                                .allow_unit_kv_scales = c.allow_unit_kv_scales,
                                .model_dir = c.model_dir},
        sources);
    if (!scales.ok()) return scales.status();
    STRATA_RETURN_IF_ERROR(gpu->set_kv_static_scales(std::move(scales.value().scales)));
    *scales_source = scales.value().source;
  }
  if (c.kv_quant_check && o.kv_dtype != DType::kBF16) {
    STRATA_RETURN_IF_ERROR(run_gpu_kv_quant_check(c, *gpu, quant_check));
  }
  return std::unique_ptr<model::ModelRunner>(std::move(gpu));
#else
  static_cast<void>(c);
  static_cast<void>(scales_source);
  static_cast<void>(quant_check);
  throw Error("--device cuda: this build of Strata has no CUDA backend (build it where NVIDIA's "
              "CUDA toolkit is installed)");
#endif
}

// The CPU runner over the resolved layout: an INT4 pool's residual pool (sized so scheduler
// limits never exhaust it, kv::newest_blocks_pool_size) comes out of the KV memory first.
Result<std::unique_ptr<model::ModelRunner>> cpu_runner(const EngineConfig& c,
                                                       std::unique_ptr<model::Model> owned,
                                                       model::Model& model, ThreadPool& pool,
                                                       const engine::ResolvedKvLayout& kv) {
  const kv::KvLayout layout(kv.spec, c.block_size, kv.scales);
  // A model whose layers mix sliding-window and full attention: the windowed layers' pool, sized
  // so the scheduler's limits never exhaust it (a running sequence holds at most
  // ceil(window / block_size) + 1 of its blocks between steps, and ceil(chunk / block_size) + 1
  // more during one), comes out of the KV memory first.
  const std::optional<kv::HybridKvLayers> hybrid =
      c.disable_hybrid_kv_cache_manager || kv::needs_residual_pool(kv.spec)
          ? std::nullopt
          : kv::hybrid_kv_layers(model.config().layer_sliding_window);
  if (hybrid) {
    const kv::KvLayout full = kv::sub_layout(layout, hybrid->full);
    const kv::KvLayout windowed = kv::sub_layout(layout, hybrid->windowed);
    const int32_t window_blocks = kv::newest_blocks_pool_size(
        c.max_num_seqs, (hybrid->window + c.block_size - 1) / c.block_size + 2,
        c.max_num_batched_tokens, c.block_size);
    const Result<int32_t> blocks =
        EngineImpl::pool_blocks(c, full.block_bytes(), windowed.pool_bytes(window_blocks),
                                "windowed layers' pool's");
    if (!blocks.ok()) return blocks.status();
    return std::unique_ptr<model::ModelRunner>(std::make_unique<model::CpuModelRunner>(
        std::move(owned), model, pool, std::vector<kv::KvLayout>{full, windowed},
        std::vector<int32_t>{*blocks, window_blocks}, hybrid->slots));
  }
  int32_t residual_blocks = 0;
  int64_t residual_bytes = 0;
  if (kv::needs_residual_pool(kv.spec)) {
    residual_blocks =
        kv::newest_blocks_pool_size(c.max_num_seqs, EngineImpl::residual_window_blocks(c),
                                 c.max_num_batched_tokens, c.block_size);
    residual_bytes =
        kv::KvLayout(kv::residual_spec(kv.spec), c.block_size).pool_bytes(residual_blocks);
  }
  const Result<int32_t> blocks = EngineImpl::pool_blocks(c, layout.block_bytes(), residual_bytes);
  if (!blocks.ok()) return blocks.status();
  return std::unique_ptr<model::ModelRunner>(std::make_unique<model::CpuModelRunner>(
      std::move(owned), model, pool, layout, *blocks, residual_blocks));
}

Result<std::unique_ptr<EngineImpl>> make_engine(std::unique_ptr<ThreadPool> pool,
                                            std::unique_ptr<model::ModelRunner> runner,
                                            EngineConfig c) {
  fill_eos_ids(c, runner->config());
  return std::make_unique<EngineImpl>(std::move(pool), std::move(runner), std::move(c));
}

}  // namespace

Device default_device() {
#if STRATA_HAVE_CUDA
  if (model::CudaModel::device_available()) return Device::kCuda;
#endif
  return Device::kCpu;
}

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
  try {
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<model::ModelRunner> runner;
    std::string scales_source;
    std::optional<engine::KvQuantCheckReport> quant_check;
    if (config.device == Device::kCuda) {
      Result<std::unique_ptr<model::ModelRunner>> gpu =
          cuda_runner(config, &scales_source, &quant_check);
      if (!gpu.ok()) return gpu.status();
      runner = std::move(gpu).value();
    } else {
      auto model = std::make_unique<model::Model>(model::Model::load(model::ModelLoadOptions{
          .model_dir = config.model_dir,
          .load_format = load_format(config),
          .dummy_dtype = config.dummy_dtype,
      }));
      model::Model* model_ptr = model.get();
      pool = std::make_unique<ThreadPool>(config.num_threads);
      Result<engine::ResolvedKvLayout> kv = engine::resolve_kv_layout(config, *model, *pool);
      if (!kv.ok()) return kv.status();
      Result<std::unique_ptr<model::ModelRunner>> cpu =
          cpu_runner(config, std::move(model), *model_ptr, *pool, kv.value());
      if (!cpu.ok()) return cpu.status();
      runner = std::move(cpu).value();
      scales_source = kv.value().scales_source;
      quant_check = std::move(kv.value().quant_check);
    }
    Result<std::unique_ptr<EngineImpl>> impl = make_engine(std::move(pool), std::move(runner), config);
    if (!impl.ok()) return impl.status();
    impl.value()->kv_scales_source_ = std::move(scales_source);
    impl.value()->kv_quant_check_ = std::move(quant_check);
    return std::unique_ptr<Engine>(new Engine(std::move(impl).value()));
  } catch (const Error& e) {  // unusable files: checkpoint, tokenizer.json, no GPU
    return Status::InvalidArgument(e.what());
  }
}

Result<std::unique_ptr<Engine>> Engine::create(model::Model& model, ThreadPool& pool,
                                               const EngineConfig& config) {
  STRATA_RETURN_IF_ERROR(EngineImpl::validate_config(config));
  if (config.device != Device::kCpu) {
    return Status::InvalidArgument("an engine borrowing a loaded model runs on the CPU");
  }
  try {
    Result<engine::ResolvedKvLayout> kv = engine::resolve_kv_layout(config, model, pool);
    if (!kv.ok()) return kv.status();
    Result<std::unique_ptr<model::ModelRunner>> cpu =
        cpu_runner(config, nullptr, model, pool, kv.value());
    if (!cpu.ok()) return cpu.status();
    Result<std::unique_ptr<EngineImpl>> impl = make_engine(nullptr, std::move(cpu).value(), config);
    if (!impl.ok()) return impl.status();
    impl.value()->kv_scales_source_ = std::move(kv.value().scales_source);
    impl.value()->kv_quant_check_ = std::move(kv.value().quant_check);
    return std::unique_ptr<Engine>(new Engine(std::move(impl).value()));
  } catch (const Error& e) {  // a malformed tokenizer.json
    return Status::InvalidArgument(e.what());
  }
}

Result<RequestId> Engine::submit(EngineRequest request) { return impl_->submit(std::move(request)); }
void Engine::cancel(RequestId id) { impl_->cancel(id); }
Result<std::vector<RequestOutput>> Engine::step() { return impl_->step(); }
bool Engine::has_unfinished() const { return impl_->has_unfinished(); }
const EngineStepStats& Engine::last_step() const { return impl_->last_step_; }
EngineTotals Engine::totals() const { return impl_->totals_; }
const EngineConfig& Engine::config() const { return impl_->config_; }
int32_t Engine::vocab_size() const { return impl_->vocab_size(); }
const model::ModelConfig& Engine::model_config() const { return impl_->runner_->config(); }
int64_t Engine::kv_bytes_per_token() const {
  // Per-block statistics (INT4) make the figure a block-size average: rounded.
  return std::llround(impl_->runner_->kv_layout().bytes_per_token());
}
int64_t Engine::kv_scale_bytes_per_token() const {
  return std::llround(impl_->runner_->kv_layout().scale_bytes_per_token());
}
std::vector<DType> Engine::kv_layer_dtypes() const {
  const model::ModelRunner& r = *impl_->runner_;
  const std::span<const kv::KvLayerSlot> slots = r.kv_layer_slots();
  if (!slots.empty()) {  // layers in groups: each layer's dtype in its group's pool
    std::vector<DType> dtypes;
    for (const kv::KvLayerSlot& s : slots) {
      dtypes.push_back(r.kv_layout(s.group).spec().layer_dtype(s.index));
    }
    return dtypes;
  }
  const kv::KvSpec& spec = r.kv_layout().spec();
  std::vector<DType> dtypes(static_cast<size_t>(spec.num_layers));
  for (int32_t l = 0; l < spec.num_layers; ++l) dtypes[static_cast<size_t>(l)] = spec.layer_dtype(l);
  return dtypes;
}
const std::optional<engine::KvQuantCheckReport>& Engine::kv_quant_check() const {
  return impl_->kv_quant_check_;
}
DType Engine::kv_dtype() const { return impl_->runner_->kv_layout().spec().dtype; }
const std::string& Engine::kv_scales_source() const { return impl_->kv_scales_source_; }
int32_t Engine::num_blocks() const { return impl_->runner_->num_blocks(); }
int64_t Engine::max_request_tokens() const { return impl_->max_request_tokens(); }
int32_t Engine::num_residual_blocks() const {
  const model::ModelRunner& r = *impl_->runner_;
  return r.num_kv_pools() > 1 && r.kv_layer_slots().empty() ? r.num_blocks(1) : 0;
}
int64_t Engine::residual_bytes() const {
  const model::ModelRunner& r = *impl_->runner_;
  return num_residual_blocks() > 0 ? r.kv_layout(1).pool_bytes(r.num_blocks(1)) : 0;
}
std::vector<KvGroupStats> Engine::kv_groups() const {
  const kv::KvCacheManager& cache = impl_->cache();
  std::vector<KvGroupStats> groups;
  for (int32_t g = 0; g < cache.num_groups(); ++g) {
    const kv::KvGroupSpec& spec = cache.group_spec(g);
    groups.push_back({kv::kv_group_kind_name(spec.kind), spec.window, spec.newest_blocks,
                      cache.pool(g).num_blocks(), cache.pool(g).num_used_blocks()});
  }
  return groups;
}
int32_t Engine::kv_int4_residual_blocks() const { return impl_->residual_blocks_; }
int64_t Engine::weight_bytes() const { return impl_->runner_->weight_bytes(); }
Device Engine::device() const { return impl_->config_.device; }
double Engine::now() const { return impl_->now(); }

}  // namespace strata
