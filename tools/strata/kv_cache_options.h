#pragma once
// The KV cache representation flags every command that builds a KV cache shares (generate,
// bench, serve, eval; plan reads --kv-cache-dtype, --kv-cache-dtype-skip-layers and
// --kv-int4-residual), with one
// parser and one error message per flag:
//   --kv-cache-dtype auto|float32|bfloat16|bf16|float16|fp16|fp8|fp8_e4m3|fp8_e5m2|int8|int4
//   --calculate-kv-scales     FP8: compute per-layer scales at start-up (vLLM's flag)
//   --allow-unit-kv-scales    FP8 without checkpoint scales: use 1.0 instead of refusing
//   --kv-cache-dtype-skip-layers sliding_window|IDX,IDX   these layers keep model precision
//   --kv-quant-check [--kv-quant-check-threshold X]       measure each layer's error at start-up
//                                                         and keep the layers above X too
//   --kv-int4-residual N      int4: the newest N tokens (a multiple of the block size; default
//                             one block) are read at full precision from the residual pool
// docs/kv-quant.md describes the formats.

#include <optional>
#include <string>

#include "core/dtype.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "strata/kv_quant_check_report.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct KvCacheOptions {
  std::string kv_cache_dtype = "auto";
  bool calculate_kv_scales = false;
  bool allow_unit_kv_scales = false;
  std::string skip_layers;  // --kv-cache-dtype-skip-layers, as given ("" = none)
  bool kv_quant_check = false;
  double kv_quant_check_threshold = kDefaultKvQuantCheckThreshold;
  int32_t kv_int4_residual = 0;  // --kv-int4-residual, tokens; 0 = one block
};

// --kv-quant-check's progress for the engine configuration: on a terminal, one stderr line
// rewritten after each forward pass ("strata: kv-quant-check: forward pass 3 of 34"); otherwise
// none (logs get the check's table once it is done).
KvQuantCheckProgress kv_quant_check_progress();

// Registers the flags (plan: only --kv-cache-dtype and --kv-cache-dtype-skip-layers, with
// dtype_only).
void add_kv_cache_options(CLI::App& cmd, KvCacheOptions& o, bool dtype_only = false);

// The dtype asked for, kAuto for "auto"; strata::Error "--kv-cache-dtype 'x' is not supported
// (use auto, ...)" for anything parse_kv_cache_dtype does not know.
KvCacheDType parse_kv_cache_dtype_flag(const std::string& value);

// --kv-int4-residual: strata::Error, one line, unless N is 0 (unset) or a positive multiple of
// block_size, or when it is set for a dtype other than int4.
void check_kv_int4_residual_flag(int32_t tokens, int32_t block_size, KvCacheDType dtype);

// --kv-cache-dtype-skip-layers: strata::Error, one line naming the bad item, for garbage, an empty
// item or a layer named twice (kv::parse_kv_skip_layers). Indices beyond the model are refused
// where the model is known (the engine, plan) with a line of the same form.
KvSkipLayers parse_kv_skip_layers_flag(const std::string& value);

}  // namespace strata::cli
