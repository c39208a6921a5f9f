#include "kv/kv_layout.h"

#include <cmath>
#include <utility>

#include "core/check.h"

namespace strata::kv {
namespace {

constexpr int64_t kFp16Bytes = 2;  // every scale and zero point

}  // namespace

bool is_kv_pool_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kI4:
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

int64_t kv_k_stats_bytes(DType dtype, int32_t num_kv_heads, int32_t head_dim, int32_t block_size) {
  if (dtype == DType::kI4) return 2LL * num_kv_heads * head_dim * kFp16Bytes;  // scale + zero
  return static_cast<int64_t>(num_kv_heads) * block_size * kv_token_scale_bytes(dtype);
}

int64_t kv_v_stats_bytes(DType dtype, int32_t num_kv_heads, int32_t /*head_dim*/,
                         int32_t block_size) {
  if (dtype == DType::kI4) return 2LL * num_kv_heads * block_size * kFp16Bytes;  // scale + zero
  return static_cast<int64_t>(num_kv_heads) * block_size * kv_token_scale_bytes(dtype);
}

bool KvSpec::has_i4_layer() const {
  for (int32_t l = 0; l < num_layers; ++l) {
    if (layer_dtype(l) == DType::kI4) return true;
  }
  return false;
}

int64_t KvSpec::layer_block_stats_bytes(int32_t layer_idx, int32_t block_size) const {
  const DType d = layer_dtype(layer_idx);
  return kv_k_stats_bytes(d, num_kv_heads, head_dim, block_size) +
         kv_v_stats_bytes(d, num_kv_heads, head_dim, block_size);
}

int64_t KvSpec::layer_block_bytes(int32_t layer_idx, int32_t block_size) const {
  const int64_t code_bits = static_cast<int64_t>(num_tensors()) * num_kv_heads * block_size *
                            head_dim * dtype_bits(layer_dtype(layer_idx));
  return code_bits / 8 + layer_block_stats_bytes(layer_idx, block_size);
}

int64_t KvSpec::block_bytes(int32_t block_size) const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) total += layer_block_bytes(l, block_size);
  return total;
}

double KvSpec::bytes_per_token(int32_t block_size) const {
  return static_cast<double>(block_bytes(block_size)) / block_size;
}

double KvSpec::scale_bytes_per_token(int32_t block_size) const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) total += layer_block_stats_bytes(l, block_size);
  return static_cast<double>(total) / block_size;
}

// Without I4 every layer's block bytes are block_size times its per-token bytes, so the figures
// for a one-token block are the per-token figures.
int64_t KvSpec::layer_bytes_per_token(int32_t layer_idx) const {
  STRATA_CHECK(layer_dtype(layer_idx) != DType::kI4,
               "KvSpec: an I4 layer's bytes per token depend on the block size; use "
               "bytes_per_token(block_size) or KvLayout::bytes_per_token()");
  return layer_block_bytes(layer_idx, 1);
}

int64_t KvSpec::bytes_per_token() const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) total += layer_bytes_per_token(l);
  return total;
}

int64_t KvSpec::scale_bytes_per_token() const {
  int64_t total = 0;
  for (int32_t l = 0; l < num_layers; ++l) {
    (void)layer_bytes_per_token(l);  // the I4 check
    total += layer_block_stats_bytes(l, 1);
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
  for (int32_t l = 0; spec.latent && l < spec.num_layers; ++l) {
    const DType d = spec.layer_dtype(l);
    STRATA_CHECK(
        spec.num_kv_heads == 1 && (d == DType::kF32 || d == DType::kBF16 || d == DType::kF16),
        "a latent (MLA) KvSpec has one head and an F32, BF16 or F16 dtype");
  }
  bool any_fp8 = is_fp8(spec.dtype);  // scales may outlive every fp8 layer (all kept at f32)
  layer_offset_.assign(1, 0);
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    STRATA_CHECK(is_kv_pool_dtype(spec.layer_dtype(l)),
                 "KvSpec layer dtype is not a KV pool dtype");
    STRATA_CHECK(spec.layer_dtype(l) != DType::kI4 || spec.head_dim % 2 == 0,
                 "an I4 KV layer needs an even head_dim (two codes per byte)");
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
  // I4 strides count bytes (a token's row is head_dim / 2 of them), every other dtype's elements.
  const bool i4 = dtype == DType::kI4;
  const int64_t elem = i4 ? 1 : dtype_size(dtype);
  const int64_t row = i4 ? spec_.head_dim / 2 : spec_.head_dim;
  auto* base = static_cast<char*>(pool_base);
  PagedKvCacheView view;
  view.k_data = base + k_offset_bytes(layer_idx);
  view.v_data = base + v_offset_bytes(layer_idx);
  view.block_stride = block_bytes() / elem;
  view.head_stride = row * block_size_;
  view.token_stride = row;
  view.num_kv_heads = spec_.num_kv_heads;
  view.head_dim = spec_.head_dim;
  view.block_size = block_size_;
  view.dtype = dtype;
  if (!scales_.k.empty() && is_fp8(dtype)) {
    view.k_scale = scales_.k[static_cast<size_t>(layer_idx)];
    view.v_scale = scales_.v[static_cast<size_t>(layer_idx)];
  }
  if (k_stats_bytes(layer_idx) > 0) {  // I8, I4
    view.k_scale_data = base + k_scale_offset_bytes(layer_idx);
    view.v_scale_data = base + v_scale_offset_bytes(layer_idx);
    view.scale_block_stride = block_bytes() / kFp16Bytes;
    view.scale_head_stride = block_size_;
  }
  if (i4) {
    view.k_zero_data = base + k_zero_offset_bytes(layer_idx);
    view.v_zero_data = base + v_zero_offset_bytes(layer_idx);
    view.k_stat_head_stride = spec_.head_dim;
  }
  return view;
}

}  // namespace strata::kv
