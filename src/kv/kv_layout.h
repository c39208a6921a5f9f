#pragma once
// KvLayout: where every byte of the KV pool lives. A documented decision (DESIGN.md, "Memory
// layout of the KV pool"):
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
// Invariants: every offset is a multiple of the element size and of 16 bytes per layer area
// start when head_dim * element size is; block 0 is the reserved null block (never read for real
// tokens, safe to point padding at).

#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::kv {

// The shape of the KV cache of one model: what a token costs.
struct KvSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kF32;

  // 2 (K and V) x layers x kv_heads x head_dim x bytes per element.
  int64_t bytes_per_token() const {
    return 2LL * num_layers * num_kv_heads * head_dim * dtype_size(dtype);
  }
};

class KvLayout {
 public:
  // block_size in {8, 16, 32, 64, 128}; checked by the caller's config validation.
  KvLayout(const KvSpec& spec, int32_t block_size);

  const KvSpec& spec() const { return spec_; }
  int32_t block_size() const { return block_size_; }

  int64_t head_elems() const { return static_cast<int64_t>(block_size_) * spec_.head_dim; }
  // Bytes of one layer's K (or V) in one block.
  int64_t kv_area_bytes() const { return head_elems() * spec_.num_kv_heads * dtype_size(spec_.dtype); }
  int64_t layer_bytes() const { return 2 * kv_area_bytes(); }
  int64_t block_bytes() const { return layer_bytes() * spec_.num_layers; }
  int64_t pool_bytes(int32_t num_blocks) const { return block_bytes() * num_blocks; }

  // Byte offsets inside a block.
  int64_t k_offset_bytes(int32_t layer_idx) const { return layer_idx * layer_bytes(); }
  int64_t v_offset_bytes(int32_t layer_idx) const {
    return layer_idx * layer_bytes() + kv_area_bytes();
  }

  // The view of layer layer_idx for a pool starting at pool_base (host or device memory).
  PagedKvCacheView layer_view(void* pool_base, int32_t layer_idx) const;

 private:
  KvSpec spec_;
  int32_t block_size_;
};

}  // namespace strata::kv
