#include "kv/kv_accounting.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kv/kv_group.h"

namespace strata::kv {
namespace {

constexpr int64_t kScaleBytes = 2;  // fp16 scales

}  // namespace

namespace {

// Scale bytes of one block (all layers).
int64_t scale_block_bytes(const KvShape& s, KvCacheDType dtype, int32_t block_size) {
  // MLA keeps one latent "head" of kv_lora_rank + rope_head_dim channels, used as K and V alike.
  const int64_t heads = s.is_mla() ? 1 : s.num_kv_heads;
  const int64_t channels = s.is_mla() ? s.kv_lora_rank + s.rope_head_dim : s.head_dim;
  const int64_t tensors = s.is_mla() ? 1 : 2;  // K and V, or the one latent
  switch (dtype) {
    case KvCacheDType::kAuto:  // refused by kv_block_bytes
    case KvCacheDType::kF32:
    case KvCacheDType::kBF16:
    case KvCacheDType::kF16:
    case KvCacheDType::kFp8E4M3:
    case KvCacheDType::kFp8E5M2:
      return 0;
    case KvCacheDType::kInt8:
      return s.num_layers * tensors * heads * block_size * kScaleBytes;
    case KvCacheDType::kInt4: {
      // KIVI, asymmetric: a scale and a zero point each. K (or the latent): per channel per
      // block; V: per token.
      const int64_t k = heads * channels * 2 * kScaleBytes;
      const int64_t v = s.is_mla() ? 0 : heads * block_size * 2 * kScaleBytes;
      return s.num_layers * (k + v);
    }
  }
  return 0;
}

}  // namespace

int64_t kv_block_bytes(const KvShape& s, KvCacheDType dtype, int32_t block_size) {
  STRATA_CHECK(s.num_layers > 0 && block_size > 0, "kv_block_bytes: empty shape or block");
  STRATA_CHECK(s.is_mla() || (s.num_kv_heads > 0 && s.head_dim > 0), "kv_block_bytes: bad shape");
  STRATA_CHECK(dtype != KvCacheDType::kAuto, "kv_block_bytes: auto is resolved by the device first");
  const int64_t elems_per_token =
      s.is_mla() ? static_cast<int64_t>(s.num_layers) * (s.kv_lora_rank + s.rope_head_dim)
                 : 2LL * s.num_layers * s.num_kv_heads * s.head_dim;
  const int64_t data_bits = elems_per_token * block_size * kv_cache_dtype_bits(dtype);
  return (data_bits + 7) / 8 + scale_block_bytes(s, dtype, block_size);
}

double kv_bytes_per_token(const KvShape& shape, KvCacheDType dtype, int32_t block_size) {
  return static_cast<double>(kv_block_bytes(shape, dtype, block_size)) / block_size;
}

double kv_scale_bytes_per_token(const KvShape& shape, KvCacheDType dtype, int32_t block_size) {
  return static_cast<double>(scale_block_bytes(shape, dtype, block_size)) / block_size;
}

namespace {

KvShape one_layer(const KvShape& s, std::span<const KvCacheDType> layer_dtypes) {
  STRATA_CHECK(layer_dtypes.size() == static_cast<size_t>(s.num_layers),
               "kv accounting: one dtype per layer");
  KvShape layer = s;
  layer.num_layers = 1;
  return layer;
}

}  // namespace

int64_t kv_block_bytes(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                       int32_t block_size) {
  const KvShape layer = one_layer(shape, layer_dtypes);
  int64_t total = 0;
  for (const KvCacheDType d : layer_dtypes) total += kv_block_bytes(layer, d, block_size);
  return total;
}

double kv_bytes_per_token(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                          int32_t block_size) {
  return static_cast<double>(kv_block_bytes(shape, layer_dtypes, block_size)) / block_size;
}

double kv_scale_bytes_per_token(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                                int32_t block_size) {
  const KvShape layer = one_layer(shape, layer_dtypes);
  int64_t total = 0;
  for (const KvCacheDType d : layer_dtypes) total += scale_block_bytes(layer, d, block_size);
  return static_cast<double>(total) / block_size;
}

int32_t pool_sliding_window(std::span<const int32_t> layer_windows) {
  if (layer_windows.empty()) return 0;
  if (std::any_of(layer_windows.begin(), layer_windows.end(), [](int32_t w) { return w <= 0; })) {
    return 0;
  }
  return *std::max_element(layer_windows.begin(), layer_windows.end());
}

int64_t blocks_held_per_sequence(int64_t num_tokens, int32_t window, int32_t block_size) {
  const KvGroupSpec group = window > 0 ? KvGroupSpec::windowed(window, {}) : KvGroupSpec{};
  return group.max_blocks_per_sequence(num_tokens, block_size);
}

int64_t blocks_needed_per_request(int64_t num_tokens, int32_t window, int32_t chunk_tokens,
                                  int32_t block_size) {
  if (window <= 0) return (num_tokens + block_size - 1) / block_size;
  const int64_t chunk = std::min<int64_t>(num_tokens, chunk_tokens);
  return (window + chunk + block_size - 1) / block_size + 1;
}

PoolUsage measure_usage(const BlockPool& pool, std::span<const BlockTable* const> tables) {
  const int32_t bs = pool.block_size();
  PoolUsage u;
  u.capacity_slots = static_cast<int64_t>(pool.num_blocks() - 1) * bs;
  u.allocated_slots = static_cast<int64_t>(pool.num_used_blocks()) * bs;
  std::vector<int32_t> live(static_cast<size_t>(pool.num_blocks()), 0);
  for (const BlockTable* t : tables) {
    STRATA_CHECK(t->block_size() == bs, "measure_usage: table of another block size");
    const auto blocks = t->blocks();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int32_t tokens = std::min(bs, t->num_tokens() - static_cast<int32_t>(i) * bs);
      int32_t& l = live[static_cast<size_t>(blocks[i].value)];
      l = std::max(l, tokens);
    }
  }
  for (size_t i = 1; i < live.size(); ++i) u.live_slots += live[i];
  return u;
}

}  // namespace strata::kv
