#include "kv/kv_layout.h"

#include "core/check.h"

namespace strata::kv {

KvLayout::KvLayout(const KvSpec& spec, int32_t block_size) : spec_(spec), block_size_(block_size) {
  STRATA_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0,
               "KvSpec needs positive layers, kv heads and head_dim");
  STRATA_CHECK(block_size > 0, "block_size must be positive");
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
  return view;
}

}  // namespace strata::kv
