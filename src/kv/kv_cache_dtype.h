#pragma once
// The KV cache dtype a user asks for (--kv-cache-dtype, EngineConfig::kv_cache_dtype): one enum
// for the engine, the planner and the CLI, with `auto` explicit. What auto stores depends on the
// device (the model precision of its backend: float32 on the CPU, bfloat16 on the GPU), so it
// resolves to a pool element type only where the device is known (resolve_kv_cache_dtype).

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace strata::kv {

enum class KvCacheDType { kAuto, kF32, kBF16, kF16, kFp8E4M3, kFp8E5M2, kInt8, kInt4 };

// "auto", "float32" (f32, fp32), "bfloat16" (bf16), "float16" (f16, fp16, half), "fp8"
// (= fp8_e4m3), "fp8_e4m3", "fp8_e5m2", "int8", "int4"; nullopt for anything else.
std::optional<KvCacheDType> parse_kv_cache_dtype(std::string_view name);
std::string_view kv_cache_dtype_name(KvCacheDType dtype);
// The spellings parse_kv_cache_dtype accepts, for error messages.
inline constexpr std::string_view kKvCacheDTypeSpellings =
    "auto, float32, bfloat16, bf16, float16, fp16, fp8, fp8_e4m3, fp8_e5m2, int8, int4";
// The element type the pool stores for a KV cache dtype (kv_layout.h): F32, BF16, F16, F8E4M3,
// F8E5M2, I8 or I4 (int4's codes; its newest tokens also live in a full-precision residual pool,
// docs/kv-quant.md "INT4"); nullopt for kAuto, which only the device resolves.
std::optional<DType> kv_pool_dtype(KvCacheDType dtype);
// The pool element type on a device whose model precision is `model_precision`: kAuto stores
// that, any other dtype its own kv_pool_dtype.
DType resolve_kv_cache_dtype(KvCacheDType dtype, DType model_precision);
// The inverse of kv_pool_dtype, for a pool element type (is_kv_pool_dtype); nullopt for any
// other DType.
std::optional<KvCacheDType> kv_cache_dtype_of(DType pool_dtype);
// Bits per stored element: 32, 16, 8 or 4 (kAuto: 0, unresolved).
int32_t kv_cache_dtype_bits(KvCacheDType dtype);

}  // namespace strata::kv
