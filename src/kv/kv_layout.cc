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

bool KvSpec::is_mixed() const {
  for (const DType d : layer_dtypes) {
    if (d != layer_dtypes.front()) return true;
  }
  return false;
}

int64_t KvSpec::bytes_per_token() const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) total += layer_bytes_per_token(l);
  return total;
}

int64_t KvSpec::scale_bytes_per_token() const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) {
    total += 2LL * num_kv_heads * kv_token_scale_bytes(layer_dtype(l));
  }
  return total;
}

namespace {

bool is_fp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

}  // namespace

KvLayout::KvLayout(const KvSpec& spec, int32_t block_size, KvStaticScales scales)
    : spec_(spec), block_size_(block_size), scales_(std::move(scales)) {
  STRATA_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0,
               "KvSpec needs positive layers, kv heads and head_dim");
  STRATA_CHECK(block_size > 0, "block_size must be positive");
  STRATA_CHECK(is_kv_pool_dtype(spec.dtype), "KvSpec dtype is not a KV pool dtype");
  STRATA_CHECK(spec.layer_dtypes.empty() ||
                   spec.layer_dtypes.size() == static_cast<size_t>(spec.num_layers),
               "KvSpec layer_dtypes: one per layer, or none");
  bool any_fp8 = is_fp8(spec.dtype);  // scales may outlive every fp8 layer (all kept at f32)
  layer_offset_.assign(1, 0);
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    STRATA_CHECK(is_kv_pool_dtype(spec.layer_dtype(l)),
                 "KvSpec layer dtype is not a KV pool dtype");
    any_fp8 = any_fp8 || is_fp8(spec.layer_dtype(l));
    layer_offset_.push_back(layer_offset_.back() + layer_bytes(l));
  }
  if (spec.is_mixed()) {
    // Each layer's block_stride is block_bytes / its element size: block_bytes and every layer
    // start must stay multiples of 16 (true for block_size >= 8; kv_layout.h).
    for (const int64_t offset : layer_offset_) {
      STRATA_CHECK(offset % 16 == 0,
                   "mixed-dtype KvLayout: a layer area is not 16-byte aligned (block_size < 8?)");
    }
  }
  STRATA_CHECK(scales_.k.size() == scales_.v.size(), "KvStaticScales: k and v sizes differ");
  STRATA_CHECK(
      scales_.k.empty() || (any_fp8 && scales_.k.size() == static_cast<size_t>(spec.num_layers)),
      "KvStaticScales: only for fp8 caches, one per layer");
  for (size_t l = 0; l < scales_.k.size(); ++l) {
    STRATA_CHECK(std::isfinite(scales_.k[l]) && scales_.k[l] > 0.0f &&
                     std::isfinite(scales_.v[l]) && scales_.v[l] > 0.0f,
                 "KvStaticScales: scales must be finite and positive");
  }
}

int32_t KvLayout::uniform_layer() const {
  STRATA_CHECK(!spec_.is_mixed(), "KvLayout: a per-layer size asked without its layer of a "
                                  "mixed-dtype layout");
  return 0;
}

PagedKvCacheView KvLayout::layer_view(void* pool_base, int32_t layer_idx) const {
  STRATA_CHECK(layer_idx >= 0 && layer_idx < spec_.num_layers, "layer index out of range");
  const DType dtype = spec_.layer_dtype(layer_idx);
  const int64_t elem = dtype_size(dtype);
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
  view.dtype = dtype;
  if (!scales_.k.empty() && is_fp8(dtype)) {
    view.k_scale = scales_.k[static_cast<size_t>(layer_idx)];
    view.v_scale = scales_.v[static_cast<size_t>(layer_idx)];
  }
  if (scale_area_bytes(layer_idx) > 0) {
    view.k_scale_data = base + k_scale_offset_bytes(layer_idx);
    view.v_scale_data = base + v_scale_offset_bytes(layer_idx);
    view.scale_block_stride = block_bytes() / kv_token_scale_bytes(dtype);
    view.scale_head_stride = block_size_;
  }
  return view;
}

}  // namespace strata::kv
