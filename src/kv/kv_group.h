#pragma once
// KvGroupSpec: what one KV cache group keeps of a sequence -- the one mechanism behind every
// scheme that holds fewer than all of a sequence's blocks (docs/kv.md, "KV cache groups").
//
// A group is a pool of blocks with its own ids and its own row in every BlockTable (logical block
// i of the sequence -> a block of that pool, kNullBlock where the group holds none). What a kind
// decides is which logical blocks a query still reads, and so which ones the manager may give
// back:
//
//   kFullAttention   every block, from the first position on (a plain paged cache)
//   kSlidingWindow   the blocks holding the last W positions before the query (itself included):
//                    a sequence holds at most ceil(W / block_size) + 1 of them (Mistral's window;
//                    a hybrid model's windowed layers)
//   kNewestBlocks    the query's own block and the R - 1 before it: what an INT4 (KIVI) cache
//                    keeps at full precision beside the codes (--kv-int4-residual N = R x
//                    block_size; docs/kv.md, "INT4's newest-blocks group")
//
// The group's pool (its KvSpec: which dtype, how many bytes a block has) belongs to the runner;
// the spec only says how the kind counts blocks. Value type.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_layout.h"

namespace strata::kv {

enum class KvGroupKind : uint8_t { kFullAttention, kSlidingWindow, kNewestBlocks };

const char* kv_group_kind_name(KvGroupKind kind);

struct KvGroupSpec {
  KvGroupKind kind = KvGroupKind::kFullAttention;
  int32_t window = 0;         // kSlidingWindow: W >= 1 positions a query reads, itself included
  int32_t newest_blocks = 0;  // kNewestBlocks: R >= 1 blocks a query reads, its own included
  KvSpec kv;                  // the group pool's shape and dtypes (bytes per block)

  static KvGroupSpec full(const KvSpec& kv);
  static KvGroupSpec windowed(int32_t window, const KvSpec& kv);
  static KvGroupSpec newest(int32_t blocks, const KvSpec& kv);

  // The first logical block that a query at position pos, or any later one, reads in this group:
  // blocks before it can be given back. Never past the block holding pos - 1 for a window (the
  // previous token's block is kept while pos > 0), and never past pos's own block.
  int32_t first_needed_block(int32_t pos, int32_t block_size) const;
  // The most blocks a sequence of num_tokens positions holds in this group between steps.
  int64_t max_blocks_per_sequence(int64_t num_tokens, int32_t block_size) const;
  // Bytes one block of this group's pool takes.
  int64_t block_bytes(int32_t block_size) const { return KvLayout(kv, block_size).block_bytes(); }
  // Whether the group's pool is sized by the memory it is given (and so admission keeps a
  // watermark of its blocks free), rather than by the scheduler's limits (kNewestBlocks: each
  // running sequence holds at most R + 1, so limits bound it: newest_blocks_pool_size).
  bool sized_by_memory() const { return kind != KvGroupKind::kNewestBlocks; }
};

// Blocks of a kNewestBlocks group's pool (the null block included) that scheduler limits can
// never exhaust: each sequence holds at most R blocks between steps and R + 1 plus its chunk's
// blocks during one, and a step's chunks hold at most ceil(max_num_batched_tokens / block_size) +
// 1 blocks more than their tokens fill: max_num_seqs x (R + 1) + ceil(max_num_batched_tokens /
// block_size) + 1.
int32_t newest_blocks_pool_size(int32_t max_num_seqs, int32_t newest_blocks,
                                int32_t max_num_batched_tokens, int32_t block_size);

// ---- models whose layers read different groups -------------------------------------------------

// Where a model layer's K/V lives: the group, and the layer's index among that group's layers.
struct KvLayerSlot {
  int32_t group = 0;
  int32_t index = 0;
  bool operator==(const KvLayerSlot&) const = default;
};

// A model whose layers mix sliding-window and full attention (Gemma 2/3, hybrid models): group 0
// holds the full-attention layers, group 1 the windowed ones, which give back what their window
// has passed while group 0 keeps every block.
struct HybridKvLayers {
  std::vector<KvLayerSlot> slots;       // per model layer
  std::vector<int32_t> full, windowed;  // model layer indices, in order
  int32_t window = 0;                   // the windowed layers' largest window
};
// layer_windows[l]: layer l's window (<= 0: full attention). nullopt unless both kinds occur.
std::optional<HybridKvLayers> hybrid_kv_layers(std::span<const int32_t> layer_windows);
// The spec of some of a spec's layers, in the order given: their dtypes.
KvSpec sub_spec(const KvSpec& spec, std::span<const int32_t> layers);
// The layout of some of a layout's layers, in the order given: their dtypes and FP8 scales.
KvLayout sub_layout(const KvLayout& layout, std::span<const int32_t> layers);

// ---- INT4 (KIVI) caches: the codes in group 0, the newest blocks at full precision in a
// newest-blocks group beside them (docs/kv.md, "INT4's newest-blocks group")
// -----------------------------

// True when some layer of the spec holds INT4 codes: the cache then needs that group.
bool needs_newest_blocks_group(const KvSpec& spec);
// Its pool's shape: the spec's layers, KV heads and head_dim, `dtype` in every layer -- the
// backend's full precision: F32 on the CPU, BF16 on the GPU (its activations' precision).
// Uniform even when the codes' pool has per-layer exceptions, whose layers simply never touch it.
KvSpec newest_blocks_spec(const KvSpec& spec, DType dtype = DType::kF32);

// --kv-int4-residual N, the tokens an INT4 cache reads at full precision (0 = one block): why N is
// refused for a cache with (int4) or without INT4 layers at block_size, or nullopt. The engine
// and the CLI (strata plan) ask this one rule.
std::optional<std::string> int4_residual_error(int32_t tokens, int32_t block_size, bool int4);
// R, the newest-blocks group's blocks for an accepted N: N / block_size, or 1 when N is 0.
int32_t int4_residual_blocks(int32_t tokens, int32_t block_size);

}  // namespace strata::kv
