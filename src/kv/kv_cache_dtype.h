#pragma once
// A KV cache dtype (KvCacheDType, strata/kv_cache_dtype.h) as the pool stores it: its element
// type, resolved by the device for auto.

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "strata/kv_cache_dtype.h"

namespace strata::kv {

// The element type the pool stores for a KV cache dtype (kv_layout.h): F32, BF16, F16, F8E4M3,
// F8E5M2, I8 or I4 (int4's codes; its newest tokens also live in a full-precision newest-blocks
// group, docs/kv-quant.md "INT4"); nullopt for kAuto, which only the device resolves.
std::optional<DType> kv_pool_dtype(KvCacheDType dtype);
// The pool element type on a device whose model precision is `model_precision`: kAuto stores
// that, any other dtype its own kv_pool_dtype.
DType resolve_kv_cache_dtype(KvCacheDType dtype, DType model_precision);
// The inverse of kv_pool_dtype, for a pool element type (is_kv_pool_dtype); nullopt for any
// other DType.
std::optional<KvCacheDType> kv_cache_dtype_of(DType pool_dtype);
// A pool element type by the --kv-cache-dtype name that stores it ("int8", "float32"), or its
// safetensors name when no KV cache dtype does.
std::string pool_dtype_name(DType pool_dtype);
// Bits per stored element: 32, 16, 8 or 4 (kAuto: 0, unresolved).
int32_t kv_cache_dtype_bits(KvCacheDType dtype);

}  // namespace strata::kv
