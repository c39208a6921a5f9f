#pragma once
// The KV cache dtype a user asks for (--kv-cache-dtype, EngineConfig::kv_cache_dtype): one enum
// for the engine, the planner and the CLI, with `auto` explicit. What auto stores depends on the
// device (the model precision of its backend: float32 on the CPU, bfloat16 on the GPU), so it
// resolves to a pool element type only where the device is known (src/kv/kv_cache_dtype.h).

#include <optional>
#include <string_view>

namespace strata {

enum class KvCacheDType { kAuto, kF32, kBF16, kF16, kFp8E4M3, kFp8E5M2, kInt8, kInt4 };

// "auto", "float32" (f32, fp32), "bfloat16" (bf16), "float16" (f16, fp16, half), "fp8"
// (= fp8_e4m3), "fp8_e4m3", "fp8_e5m2", "int8", "int4"; nullopt for anything else.
std::optional<KvCacheDType> parse_kv_cache_dtype(std::string_view name);
std::string_view kv_cache_dtype_name(KvCacheDType dtype);
// The spellings parse_kv_cache_dtype accepts, for error messages.
inline constexpr std::string_view kKvCacheDTypeSpellings =
    "auto, float32, bfloat16, bf16, float16, fp16, fp8, fp8_e4m3, fp8_e5m2, int8, int4";

}  // namespace strata
