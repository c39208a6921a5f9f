#include "kv/capacity_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>

#include "core/check.h"
#include "core/error.h"
#include "kv/kv_group.h"
#include "kv/kv_layout.h"
#include "kv/kv_pool_plan.h"

namespace strata::kv {
namespace {

// The KV pool's bytes: explicit, or the utilization budget minus the weights.
int64_t kv_pool_bytes(const PlanModel& model, const PlanSettings& s) {
  if (s.kv_cache_memory_bytes) return *s.kv_cache_memory_bytes;
  const double budget = static_cast<double>(s.gpu_memory_bytes) * s.gpu_memory_utilization;
  if (static_cast<double>(model.weight_bytes) >= budget) {
    throw Error("the weights (" + format_gib(static_cast<double>(model.weight_bytes)) +
                ") do not fit in " + format_number(s.gpu_memory_utilization) + " x " +
                format_gib(static_cast<double>(s.gpu_memory_bytes)) + " = " + format_gib(budget) +
                ": raise --gpu-memory / --gpu-memory-utilization, or give "
                "--kv-cache-memory-bytes");
  }
  return static_cast<int64_t>(budget) - model.weight_bytes;
}

// The engine's KvSpec of the plan's layers.
KvSpec plan_kv_spec(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes) {
  KvSpec spec{.num_layers = shape.num_layers,
              .num_kv_heads = shape.num_kv_heads,
              .head_dim = shape.head_dim};
  for (const KvCacheDType d : layer_dtypes) {
    const std::optional<DType> pool = kv_pool_dtype(d);
    STRATA_CHECK(pool.has_value(), "plan: every KV cache dtype has a pool dtype");
    spec.layer_dtypes.push_back(*pool);
  }
  spec.dtype = spec.layer_dtypes.front();
  return spec;
}

// What sizes the limit-sized pools, validated as the engine validates it.
void check_limits(const PlanSettings& s) {
  if (s.max_num_seqs < 1) throw Error("--max-num-seqs must be at least 1");
  if (s.max_num_batched_tokens < 1) throw Error("--max-num-batched-tokens must be at least 1");
  if (const std::optional<std::string> e = int4_residual_error(s.kv_int4_residual, s.block_size,
                                                               s.kv_dtype == KvCacheDType::kInt4)) {
    throw Error(*e);
  }
}

// Group 0's block bytes and the limit-sized pools, as plan_kv_groups makes them for a model the
// engine can hold (an MLA latent cache: one group of its blocks, as the CPU engine's latent pool
// -- KvSpec::latent -- holds them; the engine refuses quantized latent caches, which the plan
// still sizes: for int4 a newest-blocks pool of the latent's shape).
struct Groups {
  int64_t block_bytes = 0;
  int32_t window = 0;
  int64_t reserved_bytes = 0;
  std::string reserved_what;
  std::vector<PlanGroup> limit_sized;
  int32_t num_split_windowed_layers = 0;  // a hybrid model's layers in their own group
};

Groups plan_groups(const PlanReport& r, std::span<const KvCacheDType> layer_dtypes,
                   std::span<const int32_t> windows) {
  const PlanSettings& s = r.settings;
  const KvShape& shape = r.model.kv;
  const int32_t residual_r = int4_residual_blocks(s.kv_int4_residual, s.block_size);
  const KvCacheDType full = device_precision(s.device);
  Groups out;
  if (shape.is_mla()) {
    out.block_bytes = kv_block_bytes(shape, layer_dtypes, s.block_size);
    out.window = pool_sliding_window(windows);
    if (std::find(layer_dtypes.begin(), layer_dtypes.end(), KvCacheDType::kInt4) !=
        layer_dtypes.end()) {
      PlanGroup g{.kind = kv_group_kind_name(KvGroupKind::kNewestBlocks),
                  .num_layers = shape.num_layers,
                  .newest_blocks = residual_r,
                  .dtype = full,
                  .num_blocks = newest_blocks_pool_size(s.max_num_seqs, residual_r,
                                                        s.max_num_batched_tokens, s.block_size),
                  .block_bytes = kv_block_bytes(shape, full, s.block_size)};
      g.bytes = g.num_blocks * g.block_bytes;
      out.reserved_bytes = g.bytes;
      out.reserved_what = kInt4ResidualPool;
      out.limit_sized.push_back(g);
    }
    return out;
  }
  const std::optional<DType> full_pool = kv_pool_dtype(full);
  STRATA_CHECK(full_pool.has_value(), "plan: the full precision has a pool dtype");
  const KvGroupsPlan plan = plan_kv_groups(KvGroupsRequest{
      .spec = plan_kv_spec(shape, layer_dtypes),
      .layer_windows = {windows.begin(), windows.end()},
      .limits = {.block_size = s.block_size,
                 .max_num_seqs = s.max_num_seqs,
                 .max_num_batched_tokens = s.max_num_batched_tokens},
      .int4_residual_blocks = residual_r,
      .full_precision = *full_pool,
      .hybrid_groups = s.device == PlanDevice::kCpu && !s.disable_hybrid_kv_cache_manager,
  });
  out.block_bytes = plan.groups.front().spec.block_bytes(s.block_size);
  out.window = plan.window;
  out.reserved_bytes = plan.reserved_bytes;
  out.reserved_what = plan.reserved_what;
  for (size_t g = 1; g < plan.groups.size(); ++g) {
    const KvPoolGroup& pg = plan.groups[g];
    const std::optional<KvCacheDType> dtype = kv_cache_dtype_of(pg.spec.kv.layer_dtype(0));
    PlanGroup p{.kind = kv_group_kind_name(pg.spec.kind),
                .num_layers = pg.spec.kv.num_layers,
                .window = pg.spec.window,
                .newest_blocks = pg.spec.newest_blocks,
                .dtype = dtype.value_or(full),
                .num_blocks = pg.num_blocks,
                .block_bytes = pg.spec.block_bytes(s.block_size)};
    p.bytes = p.num_blocks * p.block_bytes;
    if (pg.spec.kind == KvGroupKind::kSlidingWindow) out.num_split_windowed_layers = p.num_layers;
    out.limit_sized.push_back(p);
  }
  return out;
}

// Blocks one sequence of max_model_len holds in group 0, and the notes that say why.
void plan_sequence_blocks(PlanReport& r, const Groups& groups) {
  const auto& w = r.model.layer_windows;
  const int32_t bs = r.settings.block_size;
  const int64_t num_windowed = std::count_if(w.begin(), w.end(), [](int32_t x) { return x > 0; });
  r.window = groups.window;
  r.blocks_per_seq = blocks_held_per_sequence(r.max_model_len, r.window, bs);
  if (r.window > 0) {
    r.notes.push_back("every layer uses a sliding window of " + std::to_string(r.window) +
                      " tokens or fewer: a sequence holds at most " +
                      std::to_string(r.blocks_per_seq) + " blocks whatever its length");
  } else if (groups.num_split_windowed_layers > 0) {
    r.notes.push_back(std::to_string(num_windowed) + " of " + std::to_string(w.size()) +
                      " layers use a sliding window: their K/V lives in a pool of its own, sized "
                      "for --max-num-seqs windows and taken from the KV memory first; the "
                      "capacity counts the full-attention layers");
  } else if (num_windowed > 0) {
    r.notes.push_back(
        std::to_string(num_windowed) + " of " + std::to_string(w.size()) +
        " layers use a sliding window; the pool keeps every layer's KV for the full length, so "
        "capacity is computed for full attention" +
        (r.settings.device == PlanDevice::kCuda
             ? " (the GPU engine has no group for windowed layers yet)"
             : ""));
  }
}

// The note for int4's newest-blocks pool.
void note_residual_pool(PlanReport& r) {
  const PlanSettings& s = r.settings;
  for (const PlanGroup& g : r.limit_sized_groups) {
    if (g.newest_blocks == 0) continue;
    r.int4_residual_pool_blocks = g.num_blocks;
    r.int4_residual_pool_bytes = g.bytes;
    r.notes.push_back(
        std::string("int4 (--device ") + plan_device_name(s.device) +
        "): the full-precision residual pool, max_num_seqs " + std::to_string(s.max_num_seqs) +
        " x (R " + std::to_string(g.newest_blocks) + " + 1) + ceil(max_num_batched_tokens " +
        std::to_string(s.max_num_batched_tokens) + " / " + std::to_string(s.block_size) +
        ") + 1 = " + std::to_string(g.num_blocks) + " " +
        std::string(kv_cache_dtype_name(g.dtype)) + " blocks of " + std::to_string(g.block_bytes) +
        " bytes (" + format_gib(static_cast<double>(g.bytes)) +
        "), is subtracted from the KV memory before it is divided into blocks");
  }
}

}  // namespace

const char* plan_device_name(PlanDevice device) {
  switch (device) {
    case PlanDevice::kCuda:
      return "cuda";
    case PlanDevice::kCpu:
      return "cpu";
  }
  STRATA_CHECK(false, "plan: unknown PlanDevice");
}

KvCacheDType device_precision(PlanDevice device) {
  switch (device) {
    case PlanDevice::kCuda:
      return KvCacheDType::kBF16;
    case PlanDevice::kCpu:
      return KvCacheDType::kF32;
  }
  STRATA_CHECK(false, "plan: unknown PlanDevice");
}

PlanReport compute_plan(const PlanModel& model, const PlanSettings& s) {
  check_limits(s);
  PlanReport r;
  r.model = model;
  r.settings = s;
  // As the engine resolves them: auto and the skipped layers hold the device's model precision.
  const KvCacheDType precision = device_precision(s.device);
  if (r.settings.kv_dtype == KvCacheDType::kAuto) r.settings.kv_dtype = precision;
  const KvCacheDType kv_dtype = r.settings.kv_dtype;
  const KvShape& shape = model.kv;
  std::vector<int32_t> windows = model.layer_windows;
  windows.resize(static_cast<size_t>(shape.num_layers), 0);
  const Result<std::vector<bool>> mask = kv_skip_layer_mask(s.skip_layers, windows);
  if (!mask.ok()) throw Error(mask.status().message());
  std::vector<KvCacheDType> layer_dtypes;
  for (size_t l = 0; l < mask.value().size(); ++l) {
    const bool skip = mask.value()[l] && precision != kv_dtype;
    layer_dtypes.push_back(skip ? precision : kv_dtype);
    if (skip) r.skipped_layers.push_back(static_cast<int32_t>(l));
  }
  r.kv_bytes_per_token = kv_bytes_per_token(shape, layer_dtypes, s.block_size);
  r.kv_bytes_per_token_per_layer = r.kv_bytes_per_token / shape.num_layers;
  r.scale_bytes_per_token = kv_scale_bytes_per_token(shape, layer_dtypes, s.block_size);
  r.naive_mha_bytes_per_token = static_cast<double>(shape.num_layers) * model.num_attention_heads *
                                (model.mha_head_dim_k + model.mha_head_dim_v) * 2.0;
  r.max_model_len = s.max_model_len > 0 ? s.max_model_len : model.max_position_embeddings;
  if (r.max_model_len > model.max_position_embeddings) {
    throw Error("--max-model-len " + std::to_string(r.max_model_len) +
                " is beyond the model's max_position_embeddings (" +
                std::to_string(model.max_position_embeddings) + ")");
  }
  r.kv_pool_bytes = kv_pool_bytes(model, s);
  const Groups groups = plan_groups(r, layer_dtypes, windows);
  r.block_bytes = groups.block_bytes;
  r.limit_sized_groups = groups.limit_sized;
  note_residual_pool(r);
  const Result<int32_t> blocks = memory_pool_blocks(
      r.kv_pool_bytes, groups.reserved_bytes, groups.reserved_what, r.block_bytes, s.block_size);
  if (!blocks.ok()) throw Error(blocks.status().message());
  r.num_blocks = *blocks - 1;  // the null block
  r.capacity_tokens = r.num_blocks * s.block_size;
  r.naive_capacity_tokens =
      static_cast<int64_t>(static_cast<double>(r.kv_pool_bytes) / r.naive_mha_bytes_per_token);
  plan_sequence_blocks(r, groups);
  if (r.blocks_per_seq > r.num_blocks) {
    throw Error("one sequence of max_model_len " + std::to_string(r.max_model_len) + " needs " +
                std::to_string(r.blocks_per_seq) + " blocks but the pool holds " +
                std::to_string(r.num_blocks) + ": lower --max-model-len to at most " +
                std::to_string(r.capacity_tokens) + " or give the KV cache more memory");
  }
  r.max_concurrent_seqs = r.num_blocks / r.blocks_per_seq;
  r.longest_context = r.window > 0 ? r.max_model_len : std::min(r.capacity_tokens, r.max_model_len);
  if (model.weight_bytes_estimated && !s.kv_cache_memory_bytes) {
    r.notes.emplace_back("weight bytes estimated from config.json shapes");
  }
  if (!model.engine_supported) {
    r.notes.emplace_back(
        "the engine cannot load this architecture yet; figures come from the config");
  } else if (model.cpu_only && s.device == PlanDevice::kCuda) {
    r.notes.emplace_back(
        "only the CPU engine runs this model for now (--device cuda refuses it at start); "
        "plan it with --device cpu");
  }
  r.notes.emplace_back("activation scratch is not subtracted: the engine measures it at start-up");
  return r;
}

std::string format_gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), v == std::floor(v) ? "%.0f" : "%.2f", v);
  return buf;
}

}  // namespace strata::kv
