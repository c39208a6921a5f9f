#include "kv/kv_cache_dtype.h"

namespace strata {

std::optional<KvCacheDType> parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto") return KvCacheDType::kAuto;
  if (name == "float32" || name == "f32" || name == "fp32") return KvCacheDType::kF32;
  if (name == "bfloat16" || name == "bf16") return KvCacheDType::kBF16;
  if (name == "float16" || name == "f16" || name == "fp16" || name == "half") {
    return KvCacheDType::kF16;
  }
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDType::kFp8E4M3;
  if (name == "fp8_e5m2") return KvCacheDType::kFp8E5M2;
  if (name == "int8") return KvCacheDType::kInt8;
  if (name == "int4") return KvCacheDType::kInt4;
  return std::nullopt;
}

std::string_view kv_cache_dtype_name(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::kAuto:
      return "auto";
    case KvCacheDType::kF32:
      return "float32";
    case KvCacheDType::kBF16:
      return "bfloat16";
    case KvCacheDType::kF16:
      return "float16";
    case KvCacheDType::kFp8E4M3:
      return "fp8_e4m3";
    case KvCacheDType::kFp8E5M2:
      return "fp8_e5m2";
    case KvCacheDType::kInt8:
      return "int8";
    case KvCacheDType::kInt4:
      return "int4";
  }
  return "?";
}

}  // namespace strata

namespace strata::kv {

std::optional<DType> kv_pool_dtype(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::kAuto:
      return std::nullopt;
    case KvCacheDType::kF32:
      return DType::kF32;
    case KvCacheDType::kBF16:
      return DType::kBF16;
    case KvCacheDType::kF16:
      return DType::kF16;
    case KvCacheDType::kFp8E4M3:
      return DType::kF8E4M3;
    case KvCacheDType::kFp8E5M2:
      return DType::kF8E5M2;
    case KvCacheDType::kInt8:
      return DType::kI8;
    case KvCacheDType::kInt4:
      return DType::kI4;
  }
  return std::nullopt;
}

DType resolve_kv_cache_dtype(KvCacheDType dtype, DType model_precision) {
  const std::optional<DType> pool = kv_pool_dtype(dtype);
  return pool ? *pool : model_precision;
}

std::optional<KvCacheDType> kv_cache_dtype_of(DType pool_dtype) {
  for (const KvCacheDType d :
       {KvCacheDType::kF32, KvCacheDType::kBF16, KvCacheDType::kF16, KvCacheDType::kFp8E4M3,
        KvCacheDType::kFp8E5M2, KvCacheDType::kInt8, KvCacheDType::kInt4}) {
    if (kv_pool_dtype(d) == pool_dtype) return d;
  }
  return std::nullopt;
}

int32_t kv_cache_dtype_bits(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::kAuto:
      return 0;
    case KvCacheDType::kF32:
      return 32;
    case KvCacheDType::kBF16:
    case KvCacheDType::kF16:
      return 16;
    case KvCacheDType::kFp8E4M3:
    case KvCacheDType::kFp8E5M2:
    case KvCacheDType::kInt8:
      return 8;
    case KvCacheDType::kInt4:
      return 4;
  }
  return 0;
}

std::string pool_dtype_name(DType pool_dtype) {
  const std::optional<KvCacheDType> k = kv_cache_dtype_of(pool_dtype);
  return k ? std::string(kv_cache_dtype_name(*k)) : std::string(dtype_name(pool_dtype));
}

}  // namespace strata::kv
