#pragma once
// KV accounting: what a token costs in the pool for any model shape and KV dtype, and how well a
// pool's slots are used. Plain arithmetic over plain structs; `strata plan`, the benchmarks and
// (later) the engine's start-up sizing all read these formulas, so they live in one place.
//
//   GQA/MQA/MHA: bytes/token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element
//                + scale bytes
//   MLA:         bytes/token = layers x (kv_lora_rank + rope_head_dim) x bytes per element
//                (one latent vector per token and layer, shared by K and V and by every head)
//
// Scales (fp16, 2 bytes each) of the quantized dtypes, as the representation layer stores them
// after each layer's V (kv_layout.h, docs/kv-quant.md):
//   fp8 e4m3 / e5m2  one scale per tensor: nothing per token
//   int8             one scale per token per KV head, for K and for V
//   int4             KIVI, asymmetric (a scale and a zero point each): K per channel (per
//                    head_dim channel per KV head per block), V per token per KV head -- so
//                    per-token bytes depend on the block size
// For MLA the "head" is the single latent vector.

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_cache_dtype.h"

namespace strata::kv {

// The KV-relevant shape of a model. For MLA, kv_lora_rank > 0 and num_kv_heads / head_dim are
// ignored.
struct KvShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t kv_lora_rank = 0;   // MLA latent width; 0 = not MLA
  int32_t rope_head_dim = 0;  // MLA: the decoupled RoPE key part, stored beside the latent

  bool is_mla() const { return kv_lora_rank > 0; }
};

// Bytes one block of block_size tokens takes in the pool, all layers, scales included.
int64_t kv_block_bytes(const KvShape& shape, KvCacheDType dtype, int32_t block_size);
// Bytes per token (= kv_block_bytes / block_size; fractional only for int4's per-block scales).
double kv_bytes_per_token(const KvShape& shape, KvCacheDType dtype, int32_t block_size);
// Of which scales.
double kv_scale_bytes_per_token(const KvShape& shape, KvCacheDType dtype, int32_t block_size);

// The same with per-layer exceptions (--kv-cache-dtype-skip-layers, --kv-quant-check): layer l
// holds layer_dtypes[l] (num_layers entries). The sum of each layer's share, so a mixed pool's
// figures agree byte for byte with KvLayout's (kv_layout.h).
int64_t kv_block_bytes(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                       int32_t block_size);
double kv_bytes_per_token(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                          int32_t block_size);
double kv_scale_bytes_per_token(const KvShape& shape, std::span<const KvCacheDType> layer_dtypes,
                                int32_t block_size);

// The sliding window the pool can exploit, or 0. Blocks wholly outside a sequence's window go
// back to the pool only when every layer uses a window (then the largest decides); a hybrid model
// keeps every layer's KV for the full length.
int32_t pool_sliding_window(std::span<const int32_t> layer_windows);

// Blocks one decoding sequence of num_tokens holds at most: all of them, or, with a window,
// ceil(window / block_size) + 1 (the window straddles one extra block).
int64_t blocks_held_per_sequence(int64_t num_tokens, int32_t window, int32_t block_size);

// Blocks one request of num_tokens (prompt + max_tokens) may need at once when prefilled in
// chunks of at most chunk_tokens: all of them, or, with a window, the window and one chunk
// rounded up to blocks, + the straddled block. A pool of this many blocks (+ the null block)
// runs the request alone.
int64_t blocks_needed_per_request(int64_t num_tokens, int32_t window, int32_t chunk_tokens,
                                  int32_t block_size);

// How a pool's token slots are used at one moment.
struct PoolUsage {
  int64_t capacity_slots = 0;   // (num_blocks - 1) x block_size: every allocatable slot
  int64_t allocated_slots = 0;  // slots of blocks in use
  int64_t live_slots = 0;       // slots holding a token of some sequence; shared blocks once

  // live / capacity: the share of the pool that holds tokens.
  double utilization() const {
    return capacity_slots == 0 ? 0.0 : static_cast<double>(live_slots) / capacity_slots;
  }
  // allocated - live: slots reserved but empty (the tail of each last block).
  int64_t internal_waste_slots() const { return allocated_slots - live_slots; }
};

// Usage of pool by the given block tables (every table that holds blocks of it). A block shared
// by several tables counts once, with the most tokens any of them keeps in it. O(total blocks).
PoolUsage measure_usage(const BlockPool& pool, std::span<const BlockTable* const> tables);

}  // namespace strata::kv
