#pragma once
// Host block copies: the CPU backend's half of copy-on-write. KvCacheManager decides which blocks
// to copy (BlockCopy pairs); the bytes live in the KV buffer, and with the block-outermost layout
// (kv_layout.h) one block -- every layer's K and V -- is one contiguous span of block_bytes, so a
// copy is one memcpy whatever the number of layers. The CUDA backend has its own kernel
// (src/kernels/cuda/block_copy.h) over the same layout.

#include <span>

#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"

namespace strata::kv {

// Copies each src block's bytes over its dst block, in order. Ids must be real blocks of the
// buffer (not the null block) and src != dst; a dst must not be a later pair's src. Cost:
// copies.size() * block_bytes bytes moved.
void copy_blocks(HostKvBuffer& kv, std::span<const BlockCopy> copies);

// Whether copy_slots can move single tokens of the layout: every layer's bytes per token are its
// own (F32, BF16, F16, FP8, INT8 with its per-token scales); INT4 keeps per-block statistics.
bool can_copy_slots(const KvLayout& layout);

// Token eviction's compaction (KvCacheManager::compact_tokens): copies each src slot's token row
// -- every layer's K and V of every KV head, an INT8 layer's K and V scales -- over its dst slot,
// in order; a copy with head >= 0 (compact_head_tokens) moves only that (layer, KV head)'s K, V
// and scales (an FP8 layer's scales are static per layer: nothing to move). Slots must lie in
// real blocks of the buffer, src != dst, head < layers x KV heads. Cost: copies.size() x the
// layout's bytes per token, in 2 x layers x KV heads (x 2 for INT8) pieces each; a head's copy
// 1 / (layers x KV heads) of that.
void copy_slots(HostKvBuffer& kv, std::span<const SlotCopy> copies);

}  // namespace strata::kv
