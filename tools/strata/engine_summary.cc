#include "engine_summary.h"

#include <cstdio>
#include <string>
#include <vector>

#include "engine/kv_quant_check.h"
#include "kv/kv_layer_dtypes.h"

namespace strata::cli {

void print_pool(const Engine& engine) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const int64_t usable_blocks = engine.kv_cache().num_blocks - 1;  // block 0 is the null block
  const int64_t tokens = usable_blocks * engine.config().block_size;
  const double kv_gib = static_cast<double>(tokens * engine.kv_cache().bytes_per_token) / kGiB;
  if (engine.kv_cache().quant_check) {
    // The kept layers hold the engine's model precision: float32 on the CPU, bf16 on the GPU.
    const DType full = engine.config().device == Device::kCuda ? DType::kBF16 : DType::kF32;
    const std::string table = engine::format_kv_quant_check(*engine.kv_cache().quant_check, full);
    std::fputs(table.c_str(), stderr);
  }
  const std::string kv_dtype =
      kv::kv_dtype_summary(engine.kv_cache().dtype, engine.kv_cache().layer_dtypes);
  const std::string scales = engine.kv_cache().scales_source.empty()
                                 ? std::string()
                                 : "; fp8 scales: " + engine.kv_cache().scales_source;
  // The second group's pool, which was sized first: an INT4 cache's full-precision newest blocks
  // (the backend's model precision: f32 on the CPU, bf16 on the GPU), or a hybrid model's
  // windowed layers (the blocks above are then the full-attention layers' own).
  char residual[160] = "";
  const std::vector<KvGroupStats> groups = engine.kv_groups();
  if (groups.size() > 1 && groups[1].newest_blocks > 0) {
    std::snprintf(residual, sizeof residual,
                  " + residual %d blocks x %d tokens %s (%.1f MiB, --kv-int4-residual %d)",
                  groups[1].num_blocks - 1, engine.config().block_size,
                  engine.config().device == Device::kCuda ? "bf16" : "f32",
                  static_cast<double>(groups[1].pool_bytes()) / (1024.0 * 1024.0),
                  groups[1].newest_blocks * engine.config().block_size);
  } else if (groups.size() > 1 && groups[1].window > 0) {
    std::snprintf(residual, sizeof residual,
                  " + windowed layers (window %d) %d blocks x %d tokens", groups[1].window,
                  groups[1].num_blocks - 1, engine.config().block_size);
  }
  std::fprintf(
      stderr,
      "strata: %s: KV cache %s, %lld blocks x %d tokens = %lld tokens, %lld bytes per "
      "token at block size %d (%lld of them scales) (%.2f GiB)%s%s; weights %.2f GiB\n",
      device_name(engine.config().device), kv_dtype.c_str(), static_cast<long long>(usable_blocks),
      engine.config().block_size, static_cast<long long>(tokens),
      static_cast<long long>(engine.kv_cache().bytes_per_token), engine.config().block_size,
      static_cast<long long>(engine.kv_cache().scale_bytes_per_token), kv_gib, residual,
      scales.c_str(), static_cast<double>(engine.model().weight_bytes) / kGiB);
  if (const WarmUpInfo& w = engine.warm_up(); w.steps > 0) {
    std::fprintf(stderr,
                 "strata: warmed up in %.2f s (%lld prompt tokens, %d steps; --no-warm-up)\n",
                 w.seconds, static_cast<long long>(w.prompt_tokens), w.steps);
  }
}

}  // namespace strata::cli
