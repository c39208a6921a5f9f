#include "kv/kv_layout.h"

#include <cmath>
#include <utility>

#include "core/check.h"

namespace strata::kv {

bool is_kv_pool_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
      return true;
    case DType::kF64:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kU8:
    case DType::kBool:
      return false;
  }
  return false;
}

KvLayout::KvLayout(const KvSpec& spec, int32_t block_size, KvStaticScales scales)
    : spec_(spec), block_size_(block_size), scales_(std::move(scales)) {
  STRATA_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0,
               "KvSpec needs positive layers, kv heads and head_dim");
  STRATA_CHECK(block_size > 0, "block_size must be positive");
  STRATA_CHECK(is_kv_pool_dtype(spec.dtype), "KvSpec dtype is not a KV pool dtype");
  const bool fp8 = spec.dtype == DType::kF8E4M3 || spec.dtype == DType::kF8E5M2;
  STRATA_CHECK(scales_.k.size() == scales_.v.size(), "KvStaticScales: k and v sizes differ");
  STRATA_CHECK(
      scales_.k.empty() || (fp8 && scales_.k.size() == static_cast<size_t>(spec.num_layers)),
      "KvStaticScales: only for fp8 caches, one per layer");
  for (size_t l = 0; l < scales_.k.size(); ++l) {
    STRATA_CHECK(std::isfinite(scales_.k[l]) && scales_.k[l] > 0.0f &&
                     std::isfinite(scales_.v[l]) && scales_.v[l] > 0.0f,
                 "KvStaticScales: scales must be finite and positive");
  }
}

PagedKvCacheView KvLayout::layer_view(void* pool_base, int32_t layer_idx) const {
  STRATA_CHECK(layer_idx >= 0 && layer_idx < spec_.num_layers, "layer index out of range");
  const int64_t elem = dtype_size(spec_.dtype);
  auto* base = static_cast<char*>(pool_base);
  PagedKvCacheView view;
  view.k_data = base + k_offset_bytes(layer_idx);
  view.v_data = base + v_offset_bytes(layer_idx);
  view.block_stride = block_bytes() / elem;
  view.head_stride = head_elems();
  view.token_stride = spec_.head_dim;
  view.num_kv_heads = spec_.num_kv_heads;
  view.head_dim = spec_.head_dim;
  view.block_size = block_size_;
  view.dtype = spec_.dtype;
  if (!scales_.k.empty()) {
    view.k_scale = scales_.k[static_cast<size_t>(layer_idx)];
    view.v_scale = scales_.v[static_cast<size_t>(layer_idx)];
  }
  if (scale_area_bytes() > 0) {
    view.k_scale_data = base + k_scale_offset_bytes(layer_idx);
    view.v_scale_data = base + v_scale_offset_bytes(layer_idx);
    view.scale_block_stride = block_bytes() / kv_token_scale_bytes(spec_.dtype);
    view.scale_head_stride = block_size_;
  }
  return view;
}

}  // namespace strata::kv
