#pragma once
// The KV cache representation flags every command that builds a KV cache shares (generate,
// bench, serve, eval; plan reads --kv-cache-dtype alone), with one parser and one error message:
//   --kv-cache-dtype auto|float32|bfloat16|bf16|float16|fp16|fp8|fp8_e4m3|fp8_e5m2|int8|int4
//   --calculate-kv-scales     FP8: compute per-layer scales at start-up (vLLM's flag)
//   --allow-unit-kv-scales    FP8 without checkpoint scales: use 1.0 instead of refusing
// docs/kv-quant.md describes the formats.

#include <optional>
#include <string>

#include "core/dtype.h"
#include "kv/kv_accounting.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct KvCacheOptions {
  std::string kv_cache_dtype = "auto";
  bool calculate_kv_scales = false;
  bool allow_unit_kv_scales = false;
};

// Registers the three flags (plan: only --kv-cache-dtype, with dtype_only).
void add_kv_cache_options(CLI::App& cmd, KvCacheOptions& o, bool dtype_only = false);

// nullopt for "auto"; strata::Error "--kv-cache-dtype 'x' is not supported (use auto, ...)" for
// anything parse_kv_cache_dtype does not know.
std::optional<kv::KvCacheDType> parse_kv_cache_dtype_flag(const std::string& value);

// The pool element type the engine gets: "auto" -> F32 (the CPU's default; the engine keeps
// bfloat16 on the GPU). strata::Error for a bad value and for int4 (not implemented yet).
DType kv_pool_dtype_flag(const std::string& value);

}  // namespace strata::cli
