// The runner factory (runner_factory.h): resolves an EngineConfig into a model runner and its
// KV cache groups, for the CPU and (where the build has CUDA) the GPU.

#include "engine/runner_factory.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "engine/kv_layout_setup.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "kv/kv_pool_plan.h"
#include "model/cpu_model_runner.h"
#include "model/hf_config.h"
#include "model/kv_scales.h"
#include "model/mla_gpu.h"
#if STRATA_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#include "model/cuda/cuda_peer_region.h"
#endif

namespace strata {
namespace engine {
namespace {

// The CPU engine's KV layout from its configuration's KV flags: auto is float32, and so are the
// excepted layers.
Result<ResolvedKvLayout> cpu_kv_layout(const EngineConfig& c, model::Model& model,
                                       ThreadPool& pool) {
  // MLA's latent cache holds K and V in one row; the quantized encodings scale K and V apart.
  const DType kv_dtype = kv::resolve_kv_cache_dtype(c.kv_cache_dtype, DType::kF32);
  if (model.config().mla.enabled() &&
      ((kv_dtype != DType::kF32 && kv_dtype != DType::kBF16 && kv_dtype != DType::kF16) ||
       !c.kv_skip_layers.empty() || c.kv_quant_check)) {
    return Status::InvalidArgument(
        std::string(model::architecture_name(model.config().architecture)) +
        ": the MLA latent cache is float32, bfloat16 or float16 only (--kv-cache-dtype auto, "
        "float32, bfloat16 or float16; no --kv-cache-dtype-skip-layers or --kv-quant-check)");
  }
  return resolve_kv_layout(
      KvLayoutOptions{.scales = KvScalesOptions{.kv_dtype = kv::resolve_kv_cache_dtype(
                                                    c.kv_cache_dtype, DType::kF32),
                                                .calculate_kv_scales = c.calculate_kv_scales,
                                                .allow_unit_kv_scales = c.allow_unit_kv_scales,
                                                .model_dir = c.model_dir},
                      .skip_layers = c.kv_skip_layers,
                      .quant_check = c.kv_quant_check,
                      .quant_check_threshold = c.kv_quant_check_threshold,
                      .full_precision = DType::kF32,
                      .quant_check_progress = c.kv_quant_check_progress},
      model, pool);
}

model::LoadFormat load_format(const EngineConfig& c) {
  return c.dummy_weights ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
}

#if STRATA_HAVE_CUDA
// The GPU pool's per-layer dtypes for the quantized `kv_dtype` from --kv-cache-dtype-skip-layers
// (empty when no layer is excepted): the excepted layers hold bf16, the GPU engine's model
// precision.
Result<std::vector<DType>> gpu_skip_layer_dtypes(const EngineConfig& c,
                                                 const model::ModelConfig& mc, DType kv_dtype) {
  if (kv_dtype == DType::kBF16 || c.kv_skip_layers.empty()) return std::vector<DType>{};
  const Result<std::vector<bool>> mask =
      kv::kv_skip_layer_mask(c.kv_skip_layers, mc.layer_sliding_window);
  if (!mask.ok()) return mask.status();
  return kv::kv_layer_dtypes(kv_dtype, DType::kBF16, mask.value());
}

// --kv-quant-check on the GPU, with the GPU's own kernels (CudaModel::kv_quant_check: num_layers
// + 1 passes of the calibration prompt through scratch pools, each a few milliseconds to tens of
// milliseconds of GPU time, and the host's KL over the logits). The layers above the threshold
// join the skipped ones at bf16, and the pool is laid out again before the first step;
// *quant_check takes the report.
Status run_gpu_kv_quant_check(const EngineConfig& c, model::CudaModel& gpu,
                              std::optional<KvQuantCheckReport>* quant_check) {
  const kv::KvSpec& spec = gpu.kv_layout().spec();
  const std::vector<int32_t> tokens = kv_calibration_tokens(gpu.config().vocab_size, c.model_dir);
  ThreadPool pool(c.num_threads);
  const int32_t passes = spec.num_layers + 1;
  int32_t done = 0;
  const auto after_pass = [&] {
    if (c.kv_quant_check_progress) c.kv_quant_check_progress(++done, passes);
  };
  Result<model::CudaModel::KvQuantFigures> figures = gpu.kv_quant_check(tokens, pool, after_pass);
  if (!figures.ok()) return figures.status();
  KvQuantCheckReport report = kv_quant_check_report(
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

// The request kv::plan_kv_groups sizes an engine's pools from.
kv::KvGroupsRequest kv_groups_request(const EngineConfig& c, const model::ModelConfig& mc,
                                      kv::KvSpec spec, DType full_precision, bool hybrid_groups) {
  return kv::KvGroupsRequest{
      .spec = std::move(spec),
      .layer_windows = mc.layer_sliding_window,
      .limits = {.block_size = c.block_size,
                 .max_num_seqs = c.max_num_seqs,
                 .max_num_batched_tokens = c.max_num_batched_tokens},
      .int4_residual_blocks = kv::int4_residual_blocks(c.kv_int4_residual, c.block_size),
      .full_precision = full_precision,
      .hybrid_groups = hybrid_groups,
  };
}

std::vector<kv::KvGroupSpec> group_specs(const kv::KvGroupsPlan& plan) {
  std::vector<kv::KvGroupSpec> specs;
  for (const kv::KvPoolGroup& g : plan.groups) specs.push_back(g.spec);
  return specs;
}

// The GPU runner (throws strata::Error for unusable files or options; a refused FP8 scale source
// is an InvalidArgument). Per-layer exceptions: gpu_skip_layer_dtypes, then --kv-quant-check's
// (run_gpu_kv_quant_check). An FP8 pool starts with unit scales and takes the resolved ones
// before its first step (and before the check, which measures with them): --calculate-kv-scales
// calibrates on the device itself. The groups come from kv::plan_kv_groups (bf16 newest blocks
// for INT4; no hybrid groups on the GPU yet); CudaModel takes the limit-sized pool's bytes out
// of the KV memory it measures before sizing group 0.
Result<BuiltRunner> cuda_runner(const EngineConfig& c) {
#if STRATA_HAVE_CUDA
  const model::ModelConfig mc = model::load_model_config(c.model_dir);
  model::CudaModelOptions o;
  o.model_dir = c.model_dir;
  o.load_format = load_format(c);
  o.weight_dtype = resolve_weight_quantization(c, mc) == WeightQuantization::kFp8 ? DType::kF8E4M3
                                                                                  : DType::kBF16;
  o.kv_dtype = kv::resolve_kv_cache_dtype(c.kv_cache_dtype, DType::kBF16);
  Result<std::vector<DType>> layer_dtypes = gpu_skip_layer_dtypes(c, mc, o.kv_dtype);
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
  kv::KvSpec spec{.num_layers = static_cast<int32_t>(mc.num_hidden_layers),
                  .num_kv_heads = static_cast<int32_t>(mc.num_key_value_heads),
                  .head_dim = static_cast<int32_t>(mc.head_dim),
                  .dtype = o.kv_dtype,
                  .layer_dtypes = o.kv_layer_dtypes};
  if (mc.mla.enabled()) {  // the latent pool the runner allocates (one 576-wide row per token)
    spec.num_kv_heads = 1;
    spec.head_dim = static_cast<int32_t>(mc.mla.latent_dim());
    spec.latent = true;
  }
  const kv::KvGroupsPlan plan =
      kv::plan_kv_groups(kv_groups_request(c, mc, spec, DType::kBF16, /*hybrid_groups=*/false));
  if (plan.groups.size() > 1) {
    o.newest_blocks = plan.groups[1].spec.newest_blocks;
    o.num_newest_blocks = plan.groups[1].num_blocks;
  }
  BuiltRunner built;
  built.groups = group_specs(plan);
  // The checkpoint is opened once: its weights go to the GPU, its FP8 KV scales (if any) to the
  // pool.
  std::optional<model::WeightStore> weights;
  if (o.load_format != model::LoadFormat::kDummy)
    weights.emplace(model::WeightStore::open(c.model_dir));
  std::unique_ptr<model::CudaModel> gpu =
      model::CudaModel::create(mc, weights ? &*weights : nullptr, o);
  if (o.kv_dtype == DType::kF8E4M3 || o.kv_dtype == DType::kF8E5M2) {
    KvScalesSources sources;
    sources.num_layers = static_cast<int32_t>(mc.num_hidden_layers);
    sources.vocab_size = mc.vocab_size;
    sources.abs_max = [&](std::span<const int32_t> tokens) { return gpu->kv_abs_max(tokens); };
    sources.checkpoint = [&]() -> std::optional<kv::KvStaticScales> {
      if (!weights) return std::nullopt;
      return model::read_checkpoint_kv_scales(*weights, sources.num_layers);
    };
    Result<ResolvedKvScales> scales =
        resolve_kv_scales(KvScalesOptions{.kv_dtype = o.kv_dtype,
                                          .calculate_kv_scales = c.calculate_kv_scales,
                                          .allow_unit_kv_scales = c.allow_unit_kv_scales,
                                          .model_dir = c.model_dir},
                          sources);
    if (!scales.ok()) return scales.status();
    STRATA_RETURN_IF_ERROR(gpu->set_kv_static_scales(std::move(scales.value().scales)));
    built.scales_source = scales.value().source;
  }
  if (c.kv_quant_check && o.kv_dtype != DType::kBF16) {
    STRATA_RETURN_IF_ERROR(run_gpu_kv_quant_check(c, *gpu, &built.quant_check));
  }
  built.runner = std::move(gpu);
  return built;
#else
  static_cast<void>(c);
  throw Error(
      "--device cuda: this build of Strata has no CUDA backend (build it where NVIDIA's "
      "CUDA toolkit is installed)");
#endif
}

// The CPU runner over the resolved layout, its pools sized by kv::plan_kv_groups: a hybrid
// model's windowed layers in a pool of their own (unless --disable-hybrid-kv-cache-manager), an
// INT4 cache's float32 newest blocks beside the codes; those pools come out of the KV memory
// (1 GiB unless set) before group 0 is sized.
Result<BuiltRunner> cpu_runner(const EngineConfig& c, std::unique_ptr<model::Model> owned,
                               model::Model& model, ThreadPool& pool, ResolvedKvLayout kv) {
  constexpr int64_t kDefaultCpuKvBytes = int64_t{1} << 30;
  STRATA_RETURN_IF_ERROR(model.set_bf16_matmul(c.cpu_bf16_matmul));
  const kv::KvGroupsPlan plan = kv::plan_kv_groups(kv_groups_request(
      c, model.config(), kv.spec, DType::kF32, !c.disable_hybrid_kv_cache_manager));
  int32_t blocks = c.num_blocks;
  if (blocks == 0) {
    const Result<int32_t> sized = kv::memory_pool_blocks(
        plan, c.kv_cache_memory_bytes > 0 ? c.kv_cache_memory_bytes : kDefaultCpuKvBytes,
        c.block_size);
    if (!sized.ok()) return sized.status();
    blocks = *sized;
  } else if (blocks < 2) {
    return Status::InvalidArgument("the KV pool needs at least 2 blocks");
  }
  const kv::KvLayout layout(kv.spec, c.block_size, kv.scales);
  BuiltRunner built;
  built.groups = group_specs(plan);
  built.scales_source = std::move(kv.scales_source);
  built.quant_check = std::move(kv.quant_check);
  if (!plan.slots.empty()) {  // the layers split over the groups' pools
    std::vector<kv::KvLayout> layouts;
    std::vector<int32_t> num_blocks;
    for (const kv::KvPoolGroup& g : plan.groups) {
      layouts.push_back(kv::sub_layout(layout, g.layers));
      num_blocks.push_back(num_blocks.empty() ? blocks : g.num_blocks);
    }
    built.runner = std::make_unique<model::CpuModelRunner>(std::move(owned), model, pool, layouts,
                                                           num_blocks, plan.slots);
    return built;
  }
  built.runner = std::make_unique<model::CpuModelRunner>(
      std::move(owned), model, pool, layout, blocks,
      plan.groups.size() > 1 ? plan.groups[1].num_blocks : 0);
  return built;
}

// What the GPU runner cannot run, refused before anything is loaded onto the device: DeepSeek's
// MLA outside the GPU kernels' shapes (mla_gpu.h; the CPU engine runs any). MLA and MoE layers
// (DeepSeek, Mixtral, Qwen3-MoE) run on the GPU kernels, and Gemma 3's sliding layers as a mask
// over the one pool (no window group on the GPU: every layer keeps the whole context's K/V,
// docs/gpu-engine.md).
void check_cuda_supports(const model::ModelConfig& mc) {
  if (const std::string why = model::gpu_mla_refusal(mc); !why.empty()) {
    throw Error(why + "; use --device cpu");
  }
}

}  // namespace

Result<BuiltRunner> make_runner(const EngineConfig& c) {
  try {
    if (c.device == Device::kCuda) {
      check_cuda_supports(model::load_model_config(c.model_dir));
      return cuda_runner(c);
    }
    auto model = std::make_unique<model::Model>(model::Model::load(model::ModelLoadOptions{
        .model_dir = c.model_dir,
        .load_format = load_format(c),
        .dummy_dtype = c.dummy_dtype,
        .weight_residency =
            c.mmap_weights ? model::WeightResidency::kMapped : model::WeightResidency::kAnonymous,
    }));
    model::Model& loaded = *model;
    auto pool = std::make_unique<ThreadPool>(c.num_threads);
    Result<ResolvedKvLayout> kv = cpu_kv_layout(c, loaded, *pool);
    if (!kv.ok()) return kv.status();
    Result<BuiltRunner> built =
        cpu_runner(c, std::move(model), loaded, *pool, std::move(kv).value());
    if (built.ok()) built.value().pool = std::move(pool);
    return built;
  } catch (const Error& e) {  // unusable files: checkpoint, tokenizer.json, no GPU
    return Status::InvalidArgument(e.what());
  }
}

Result<BuiltRunner> make_cpu_runner(const EngineConfig& c, model::Model& model, ThreadPool& pool) {
  try {
    Result<ResolvedKvLayout> kv = cpu_kv_layout(c, model, pool);
    if (!kv.ok()) return kv.status();
    return cpu_runner(c, nullptr, model, pool, std::move(kv).value());
  } catch (const Error& e) {  // a malformed tokenizer.json
    return Status::InvalidArgument(e.what());
  }
}

WeightQuantization resolve_weight_quantization(const EngineConfig& c,
                                               const model::ModelConfig& mc) {
  if (c.quantization != WeightQuantization::kAuto) return c.quantization;
  // The GPU's FP8 rows are multiples of 16 elements (fp8_quantize_rows): a checkpoint whose
  // matrices are not stays bf16 rather than failing at load.
  const auto rows_of_16 = [](int64_t n) { return n % 16 == 0; };
  const bool shapes = rows_of_16(mc.hidden_size) &&
                      rows_of_16(mc.num_attention_heads * mc.head_dim) &&
                      rows_of_16(mc.intermediate_size);
  return c.device == Device::kCuda && mc.fp8_weights_per_channel() && !mc.mla.enabled() && shapes
             ? WeightQuantization::kFp8
             : WeightQuantization::kNone;
}

kv::PeerRegionFactory peer_region_factory(const EngineConfig& config) {
  if (config.device == Device::kCuda) {
#if STRATA_HAVE_CUDA
    return [](int64_t bytes) { return model::create_cuda_peer_region(bytes); };
#endif
  }
  return [](int64_t bytes) { return kv::create_shm_peer_region(bytes); };
}

kv::PeerRegionOpener peer_region_opener() {
  return [shm = kv::shm_peer_region_opener()](
             kv::PeerRegionKind kind, std::string_view handle, uint64_t region_id,
             int64_t size_bytes) -> Result<std::unique_ptr<kv::PeerRegionView>> {
    switch (kind) {
      case kv::PeerRegionKind::kSharedMemory:
        return shm(kind, handle, region_id, size_bytes);
      case kv::PeerRegionKind::kCudaIpc:
#if STRATA_HAVE_CUDA
        return model::open_cuda_peer_region(handle, region_id, size_bytes);
#else
        return Status::Unsupported("a CUDA IPC region: this build has no CUDA backend");
#endif
    }
    return Status::InvalidArgument("an unknown kind of peer region");
  };
}

}  // namespace engine

Device default_device() {
#if STRATA_HAVE_CUDA
  if (model::CudaModel::device_available()) return Device::kCuda;
#endif
  return Device::kCpu;
}

}  // namespace strata
