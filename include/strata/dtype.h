#pragma once
// DType: the element types of tensors and KV caches. Part of the public API, where it names a KV
// pool's element type (Engine::kv_cache()) and the dtype of dummy weights; the engine's sizes and
// conversions are internal (src/core/dtype.h).

#include <cstdint>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  // 4-bit unsigned codes packed two per byte, the low nibble holding the even element: the INT4
  // (KIVI) KV cache's codes (docs/kv-quant.md). Half a byte per element, so dtype_size cannot
  // describe it: size it with dtype_bits. Never a tensor or safetensors dtype.
  kI4,
};

// The safetensors spelling: "F32", "BF16", ...
std::string_view dtype_name(DType t);

}  // namespace strata
