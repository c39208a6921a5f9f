#include "kv_cache_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"
#include "kv/kv_group.h"

namespace strata::cli {

KvQuantCheckProgress kv_quant_check_progress() {
  if (isatty(STDERR_FILENO) == 0) return {};
  return [](int32_t pass, int32_t passes) {
    std::fprintf(stderr, "\rstrata: kv-quant-check: forward pass %d of %d", pass, passes);
    if (pass == passes) std::fputc('\n', stderr);
  };
}

void add_kv_cache_options(CLI::App& cmd, KvCacheOptions& o, bool dtype_only) {
  cmd.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "KV cache element type: auto, float32, bfloat16 (bf16), float16 (fp16), fp8 "
                 "(= fp8_e4m3), fp8_e5m2, int8, int4 (KIVI)");
  cmd.add_option("--kv-cache-dtype-skip-layers", o.skip_layers,
                 "Layers that keep model precision (float32 on the CPU, bfloat16 on the GPU) "
                 "whatever --kv-cache-dtype says: sliding_window (every sliding-window layer) "
                 "and/or 0-based indices, comma-separated");
  if (dtype_only) return;
  cmd.add_option("--kv-int4-residual", o.kv_int4_residual,
                 "int4 KV: the newest N tokens are read at full precision from a residual pool "
                 "(a positive multiple of --block-size; default one block)");
  cmd.add_flag("--calculate-kv-scales", o.calculate_kv_scales,
               "fp8 KV: compute per-layer k/v scales at start-up from a calibration prompt "
               "(instead of the checkpoint's k_scale/v_scale)");
  cmd.add_flag("--allow-unit-kv-scales", o.allow_unit_kv_scales,
               "fp8 KV: use scale 1.0 when the checkpoint has no k_scale/v_scale and "
               "--calculate-kv-scales is not given (vLLM's silent default; may lose accuracy)");
  cmd.add_flag("--kv-quant-check", o.kv_quant_check,
               "At start-up, measure each layer's error with the quantized KV cache on the "
               "calibration prompt with the serving device's kernels, print it, and keep the layers "
               "above the threshold at model precision (float32 on the CPU, bfloat16 on the GPU)");
  cmd.add_option("--kv-quant-check-threshold", o.kv_quant_check_threshold,
                 "--kv-quant-check: keep a layer whose output KL (mean nats per token with only that "
                 "layer quantized) is above this")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
}

KvSkipLayers parse_kv_skip_layers_flag(const std::string& value) {
  Result<KvSkipLayers> skip = kv::parse_kv_skip_layers(value);
  if (!skip.ok()) throw Error(skip.status().message());
  return std::move(skip).value();
}

KvCacheDType parse_kv_cache_dtype_flag(const std::string& value) {
  const std::optional<KvCacheDType> d = parse_kv_cache_dtype(value);
  if (!d) {
    throw Error("--kv-cache-dtype '" + value + "' is not supported (use " +
                std::string(kKvCacheDTypeSpellings) + ")");
  }
  return *d;
}

void check_kv_int4_residual_flag(int32_t tokens, int32_t block_size, KvCacheDType dtype) {
  if (const std::optional<std::string> e =
          kv::int4_residual_error(tokens, block_size, dtype == KvCacheDType::kInt4)) {
    throw Error(*e);
  }
}

}  // namespace strata::cli
