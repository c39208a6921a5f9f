#pragma once
// KvLayout: where every byte of the KV pool lives, and why it lives there:
//
//   pool (one allocation per device)
//   +-----------+-----------+-----------+-----+---------------+
//   | block 0   | block 1   | block 2   | ... | block N-1     |   block_bytes apart
//   | (null)    |           |           |     |               |
//   +-----------+-----------+-----------+-----+---------------+
//                     |
//                     v  one block: every layer's K and V for block_size token positions
//   +----------+----------+----------+----------+-----+------------------+
//   | layer 0  | layer 0  | layer 1  | layer 1  | ... | layer L-1 V      |   layer_bytes apart
//   | K        | V        | K        | V        |     |                  |
//   +----------+----------+----------+----------+-----+------------------+
//        |
//        v  one layer's K (V alike): head-major, then token, then channel
//   +------------------------------------+------------------------------------+-----
//   | head 0: tok 0 [head_dim] .. tok B-1 | head 1: tok 0 [head_dim] .. tok B-1 | ...
//   +------------------------------------+------------------------------------+-----
//   (quantized KV dtypes append each layer's scales after its V; none for f32/bf16/f16.)
//
// MLA (KvSpec::latent): a layer holds one tensor, the latent, in place of K and V:
//   | layer 0 latent | layer 1 latent | ... |   each [1][block_size][kv_lora_rank + rope_dim]
// read as K (every channel) and as V (the first kv_lora_rank), so layer_bytes = B*(R+P)*elem.
//
// Quantized KV (docs/kv-quant.md has the byte offsets worked through):
//   F8E4M3 / F8E5M2  1-byte codes, no scale area: the per-layer static scales (KvStaticScales)
//                    travel in the view, not in the pool
//   I8               1-byte codes, then per layer after V the scale areas:
//   +---------+---------+----------------------------+----------------------------+
//   | K codes | V codes | K scales                   | V scales                   |
//   | H*B*D B | H*B*D B | [H][B] fp16 = 2*H*B bytes  | [H][B] fp16 = 2*H*B bytes  |
//   +---------+---------+----------------------------+----------------------------+
//   (H kv heads, B block_size, D head_dim; layer_bytes = 2*H*B*D + 4*H*B, a multiple of 32 for
//   B >= 8, so every layer area stays 16-byte aligned.)
//   I4               (KIVI) 4-bit codes, two per byte (low nibble = even channel), then per layer
//                    the asymmetric statistics: K's per channel of the block, V's per token:
//   +-----------+-----------+-------------+-------------+-------------+-------------+
//   | K codes   | V codes   | K scale     | K zero      | V scale     | V zero      |
//   | H*B*D/2 B | H*B*D/2 B | [H][D] fp16 | [H][D] fp16 | [H][B] fp16 | [H][B] fp16 |
//   +-----------+-----------+-------------+-------------+-------------+-------------+
//   (layer_bytes = H*B*D + 4*H*D + 4*H*B: a multiple of 16 for B >= 8 and head_dim % 4 == 0.
//   An I4 layer's view counts its strides in bytes; the newest tokens are read from a separate
//   full-precision newest-blocks group, not from here: docs/kv-quant.md, "INT4".)
//
// Why block-outermost: a block is one contiguous span of block_bytes, so offload, swap, transfer
// and copy-on-write (later issues) move a block -- or a run of consecutive blocks -- in one copy,
// whatever the number of layers. Kernels still see one layer at a fixed stride: layer l's K of
// block b is at pool + b * block_bytes + l * layer_bytes, so PagedKvCacheView::block_stride is
// block_bytes / element size. Head-major inside a block makes one KV head's tokens of a block a
// single run of block_size * head_dim elements (4 KiB for bf16, head_dim 128, block 16): decode
// attention reads it with wide loads once for all the query heads of its group. TensorRT-LLM's
// pool ([blocks, layers, 2, heads, tokens, dim]) makes the same choice; vLLM's per-layer tensors
// favour kernels over transfer.
//
// Per-layer exceptions (--kv-cache-dtype-skip-layers, --kv-quant-check; docs/kv-quant.md): a
// layout may hold a different element type per layer (KvSpec::layer_dtypes), e.g. int8 codes
// for most layers and F32 for a few kept at model precision. Layers then have different sizes,
// so a layer's area starts at its own offset (the sum of the earlier layers' bytes) instead of
// l * layer_bytes; inside a layer nothing changes, and each layer_view carries that layer's dtype
// with strides in its element units (block_stride = block_bytes / element size):
//
//   one block, layers 0 and 3 F32, the others I8:
//   +-------------+--------+--------+-------------+-----+
//   | layer 0 f32 | l 1 i8 | l 2 i8 | layer 3 f32 | ... |   layer_offset_bytes(l) = sum of
//   | K | V       | K|V|sc | K|V|sc | K | V       |     |   layer_bytes(0 .. l-1)
//   +-------------+--------+--------+-------------+-----+
//
// Every layer's byte count is a multiple of 16 for block_size >= 8 (2*H*B*D*elem with 2*B >= 16,
// plus I8's 4*H*B; I4's H*B*D + 4*H*D + 4*H*B when head_dim % 4 == 0), so every layer area starts
// 16-byte aligned and block_bytes is a multiple of 16 -- of every element size -- which keeps
// block_stride an exact count for every layer. A mixed layout checks this at construction.
//
// Invariants: every offset is a multiple of the element size and of 16 bytes per layer area
// start when head_dim * element size is; block 0 is the reserved null block (never read for real
// tokens, safe to point padding at).

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::kv {

// KV cache element types the pool can hold: F32, BF16, F16, F8E4M3, F8E5M2 (per-tensor static
// scales), I8 (a dynamic fp16 scale per token and KV head) and I4 (KIVI: 4-bit codes with fp16
// scales and zero points, K's per channel of a block and V's per token).
bool is_kv_pool_dtype(DType dtype);

// Bytes of the fp16 per-token scale of one K (or V) row of one KV head: 2 for I8, else 0. (I4's
// statistics are not per token for K: KvSpec::layer_block_stats_bytes counts them.)
constexpr int64_t kv_token_scale_bytes(DType dtype) { return dtype == DType::kI8 ? 2 : 0; }

// Bytes of the quantization statistics of one layer's K (or V) in one block of block_size tokens:
// I8 [H][B] fp16 scales each; I4 K [H][D] scales + [H][D] zero points, V [H][B] + [H][B]; 0 for
// F32, BF16, F16 and FP8.
int64_t kv_k_stats_bytes(DType dtype, int32_t num_kv_heads, int32_t head_dim, int32_t block_size);
int64_t kv_v_stats_bytes(DType dtype, int32_t num_kv_heads, int32_t head_dim, int32_t block_size);

// The shape of the KV cache of one model: what a token costs.
struct KvSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kF32;  // is_kv_pool_dtype; every layer's unless layer_dtypes says otherwise
  // Per-layer exceptions: empty = every layer holds `dtype`; else num_layers pool dtypes, layer l
  // holding layer_dtypes[l] (the layers that differ from `dtype` are the exceptions).
  std::vector<DType> layer_dtypes = {};
  // MLA's latent cache (DeepSeek): one tensor per layer instead of K and V -- num_kv_heads 1 and
  // head_dim kv_lora_rank + rope dims, read as K, its first kv_lora_rank channels as V (a layer
  // view's v_data is its k_data). F32, BF16 or F16 only.
  bool latent = false;

  DType layer_dtype(int32_t layer_idx) const {
    return layer_dtypes.empty() ? dtype : layer_dtypes[static_cast<size_t>(layer_idx)];
  }
  // True when some layer's element type differs from another's.
  bool is_mixed() const;
  // True when some layer is I4, whose per-token cost depends on the block size.
  bool has_i4_layer() const;

  // K and V, or the latent's one tensor.
  int32_t num_tensors() const { return latent ? 1 : 2; }
  // Exact bytes of one layer in one block of block_size tokens: 2 (K and V; 1 latent) x kv_heads x
  // block_size x head_dim x bits per element / 8, plus the layer's statistics (scales, zero
  // points). KvLayout is built from these.
  int64_t layer_block_bytes(int32_t layer_idx, int32_t block_size) const;
  // Of which statistics (I8 scales; I4 scales and zero points).
  int64_t layer_block_stats_bytes(int32_t layer_idx, int32_t block_size) const;
  // All layers.
  int64_t block_bytes(int32_t block_size) const;
  // Per token at a block size: block_bytes(block_size) / block_size, exact in a double; an I4
  // layer's K statistics are per block, so this may be fractional.
  double bytes_per_token(int32_t block_size) const;
  double scale_bytes_per_token(int32_t block_size) const;  // of which statistics

  // Per token without a block size, for specs without I4 layers (whose per-token bytes do not
  // depend on it): 2 (K and V) x kv_heads x (head_dim x bytes per element + per-token scale
  // bytes). Aborts when some layer is I4: use the block-size forms above.
  int64_t layer_bytes_per_token(int32_t layer_idx) const;
  // The sum over layers (= 2 x layers x kv_heads x (head_dim x element + scale) when uniform).
  int64_t bytes_per_token() const;
  // Of which the per-token scales (I8 layers).
  int64_t scale_bytes_per_token() const;
};

// The static (per-tensor) dequantization scales of an FP8 cache, one per layer for K and for V:
// real value = fp8 value * scale. Empty = 1.0 for every layer (the engine decides whether that
// is acceptable: docs/kv-quant.md); otherwise num_layers finite positive values each.
struct KvStaticScales {
  std::vector<float> k;
  std::vector<float> v;
};

class KvLayout {
 public:
  // block_size in {8, 16, 32, 64, 128}; checked by the caller's config validation, as is
  // spec.dtype (is_kv_pool_dtype, every layer's). An I4 layer needs an even head_dim. scales: only
  // when some layer is F8E4M3 / F8E5M2, sized as KvStaticScales says (entries of the other layers
  // are ignored).
  KvLayout(const KvSpec& spec, int32_t block_size, KvStaticScales scales = {});

  const KvSpec& spec() const { return spec_; }
  int32_t block_size() const { return block_size_; }
  const KvStaticScales& static_scales() const { return scales_; }

  int64_t head_elems() const { return static_cast<int64_t>(block_size_) * spec_.head_dim; }
  // Bytes of layer layer_idx's K (or V) codes in one block (I4: half a byte per element).
  int64_t kv_area_bytes(int32_t layer_idx) const {
    return head_elems() * spec_.num_kv_heads * dtype_bits(spec_.layer_dtype(layer_idx)) / 8;
  }
  // Bytes of layer layer_idx's K (or V) per-token scales in one block (I8: [kv_heads][block]
  // fp16; 0 for the other dtypes, I4 included: its statistics are k/v_stats_bytes).
  int64_t scale_area_bytes(int32_t layer_idx) const {
    return static_cast<int64_t>(spec_.num_kv_heads) * block_size_ *
           kv_token_scale_bytes(spec_.layer_dtype(layer_idx));
  }
  // Bytes of layer layer_idx's K (or V) statistics in one block (I8: = scale_area_bytes; I4:
  // scales and zero points, K [H][D] x 2 and V [H][B] x 2 fp16).
  int64_t k_stats_bytes(int32_t layer_idx) const {
    return kv_k_stats_bytes(spec_.layer_dtype(layer_idx), spec_.num_kv_heads, spec_.head_dim,
                            block_size_);
  }
  int64_t v_stats_bytes(int32_t layer_idx) const {
    return kv_v_stats_bytes(spec_.layer_dtype(layer_idx), spec_.num_kv_heads, spec_.head_dim,
                            block_size_);
  }
  int64_t layer_bytes(int32_t layer_idx) const {
    return spec_.layer_block_bytes(layer_idx, block_size_);
  }
  // The uniform-layout forms (layer 0's sizes): every layer's when !spec().is_mixed(); a mixed
  // layout aborts here -- use the per-layer forms.
  int64_t kv_area_bytes() const { return kv_area_bytes(uniform_layer()); }
  int64_t scale_area_bytes() const { return scale_area_bytes(uniform_layer()); }
  int64_t layer_bytes() const { return layer_bytes(uniform_layer()); }
  int64_t block_bytes() const { return layer_offset_.back(); }
  int64_t pool_bytes(int32_t num_blocks) const { return block_bytes() * num_blocks; }
  // block_bytes / block_size, and of which statistics: what a token costs in this pool (exact
  // in a double; fractional only when an I4 layer's per-block K statistics do not divide).
  double bytes_per_token() const { return spec_.bytes_per_token(block_size_); }
  double scale_bytes_per_token() const { return spec_.scale_bytes_per_token(block_size_); }

  // Byte offsets inside a block.
  int64_t layer_offset_bytes(int32_t layer_idx) const {
    return layer_offset_[static_cast<size_t>(layer_idx)];
  }
  int64_t k_offset_bytes(int32_t layer_idx) const { return layer_offset_bytes(layer_idx); }
  int64_t v_offset_bytes(int32_t layer_idx) const {  // a latent layer's V is its K
    return layer_offset_bytes(layer_idx) + (spec_.latent ? 0 : kv_area_bytes(layer_idx));
  }
  // I8 and I4: where the layer's K scales start, then (I4) K zero points, V scales, V zero points.
  int64_t k_scale_offset_bytes(int32_t layer_idx) const {
    return layer_offset_bytes(layer_idx) + 2 * kv_area_bytes(layer_idx);
  }
  int64_t k_zero_offset_bytes(int32_t layer_idx) const {  // I4: + H*D*2
    return k_scale_offset_bytes(layer_idx) + k_stats_bytes(layer_idx) / 2;
  }
  int64_t v_scale_offset_bytes(int32_t layer_idx) const {
    return k_scale_offset_bytes(layer_idx) + k_stats_bytes(layer_idx);
  }
  int64_t v_zero_offset_bytes(int32_t layer_idx) const {  // I4: + H*B*2
    return v_scale_offset_bytes(layer_idx) + v_stats_bytes(layer_idx) / 2;
  }

  // The view of layer layer_idx for a pool starting at pool_base (host or device memory): that
  // layer's dtype, strides in its element units (bytes for I4), scale / zero-point pointers and
  // static scales included.
  PagedKvCacheView layer_view(void* pool_base, int32_t layer_idx) const;

 private:
  int32_t uniform_layer() const;

  KvSpec spec_;
  int32_t block_size_;
  KvStaticScales scales_;
  std::vector<int64_t> layer_offset_;  // [num_layers + 1]: each layer's offset; back() = block
};

}  // namespace strata::kv
