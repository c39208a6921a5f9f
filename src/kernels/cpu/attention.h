#pragma once
// Paged attention on the CPU (fp32 activations) for a batch that mixes decodes, prefill chunks on
// top of an already-cached prefix, and whole prefills; plus append_kv, which writes a step's new K
// and V into the paged cache before attention reads them.
//
// Determinism: every output row (token, query head) is computed by one thread with one fixed order
// of fp32 operations that depends only on the row's position, its sliding window, the block size
// and the K/V values -- not on the batch it is in, the block ids, the thread count, the tokens it
// shares a task with or how its prompt was chunked. Batch and chunking invariance of the engine
// rest on this. The optional attention-mass output (AttentionParams::mass) inherits it: each value
// is made by the thread of its (token, KV head) from that row's own normalized softmax weights, in
// one fixed order, so it too depends only on the row's position, window, block size and the K/V
// values -- never on batch mates, chunking, block ids or the thread count.
//
// Cost: a task is up to kAttentionTileTokens consecutive query tokens of one sequence and one KV
// head; it reads each KV block its tokens attend to once for K and once for V and shares both
// reads among its tokens x the num_q_heads / num_kv_heads query heads of the group (K/V are never
// repeated). Tasks are balanced dynamically across the ThreadPool.
//
// Quantized caches (FP8 with the view's static scales, INT8 with per-token scales, INT4 with
// scales and zero points; kv_quant.h) are dequantized block by block into an fp32 tile as they are
// read, and everything after that is the fp32 arithmetic above: the determinism guarantees hold
// unchanged. An INT4 (KIVI) cache keeps its newest blocks at full precision in a newest-blocks
// group too (NewestBlocksView): a query at position p reads logical block jb from there iff jb > p
// / block_size - R, else the int4 codes -- a function of (p, jb) only, so batch and chunking
// invariance still hold.

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kv_quant.h"  // kAttentionKvDTypes, the encodings

namespace strata::cpu {

struct AttentionParams {
  // [num_tokens, num_q_heads, head_dim], num_tokens = q_indptr[layout.num_seqs]. Row i of sequence
  // s is q row q_indptr[s] + i.
  const float* q = nullptr;
  // [num_tokens, num_q_heads, head_dim]; written in full for every row of every sequence. Must not
  // overlap q or the cache.
  float* out = nullptr;
  // [layout.num_seqs + 1], q_indptr[0] == 0, non-decreasing: the q rows of each sequence.
  const int32_t* q_indptr = nullptr;
  // Block tables of the batch; kv_len(s) >= q_len(s) for every sequence.
  PagedKvLayout layout;
  // One layer's K/V; dtype in kAttentionKvDTypes, block_size == layout.block_size. FP8: finite
  // positive k_scale / v_scale; I8: scale pointers set; I4: scale and zero-point pointers set,
  // even head_dim (KvLayout::layer_view does all of it).
  PagedKvCacheView cache;
  // INT4 caches only: the same layer at full precision in the newest-blocks group (F32 on the
  // CPU), its layout and R; ignored for every other cache dtype.
  NewestBlocksView newest;
  int32_t num_q_heads = 0;  // a positive multiple of cache.num_kv_heads
  float scale = 0.0f;       // softmax scale, usually 1 / sqrt(head_dim)
  // > 0: a query at position pos attends to [max(0, pos - sliding_window + 1), pos] (Hugging Face:
  // the window includes the token itself). 0: to [0, pos]. Negative: InvalidArgument.
  int32_t sliding_window = 0;
  // Optional attention mass for token eviction (H2O, SnapKV); both null: nothing written, no
  // cost. Token row t of sequence s with mass_offsets[t] >= 0 owns the num_kv_heads * kv_len(s)
  // floats from mass + mass_offsets[t] and gets them written in full: element h * kv_len(s) + j
  // is the sum, over the query heads that read KV head h (in head order), of the softmax
  // probability row t gave slot j -- the kernel's own normalized weight exp(score - max) / sum,
  // after dequantization for quantized caches -- and 0 for j outside [first_pos, pos] (past the
  // row's own position or before its sliding window). Each KV head's part therefore sums to
  // num_q_heads / num_kv_heads up to rounding. Rows with mass_offsets[t] < 0 are not written.
  // Rows of different tokens must not overlap each other, q or out.
  const int64_t* mass_offsets = nullptr;  // [num_tokens]
  float* mass = nullptr;                  // the wanted rows, each [num_kv_heads, kv_len(s)]
};

// out = softmax(scale * q K^T + causal/window mask) V per sequence, query head and row. Query row
// i of sequence s sits at position kv_len(s) - q_len(s) + i: its own K/V is already in the cache.
// Query head h reads KV head h / (num_q_heads / num_kv_heads).
// Errors (nothing is written): InvalidArgument for null pointers, inconsistent shapes or block
// sizes, q_len > kv_len, a bad kv_last_page_len, a negative block id or window, or only one of
// mass and mass_offsets set; for I4 also a newest-blocks layout without first_block, R < 1, a
// newest view that is not F32 of the cache's shape, or a sequence whose newest entries do not run
// from at most max(0, first query position / block_size - R + 1) through its last block;
// Unsupported for a cache dtype outside kAttentionKvDTypes.
Status paged_attention(const AttentionParams& params, ThreadPool& pool);

// Query tokens per task in paged_attention: a task's tokens x group query rows share each K/V
// block read and each q K^T call. Small enough that a task's scores ([rows, window] fp32) stay in
// L2 at long windows.
inline constexpr int32_t kAttentionTileTokens = 4;

namespace detail {
// paged_attention on a given instruction-set path with tasks of up to tile_tokens consecutive
// query tokens of one sequence (I4 caches: always 1); paged_attention itself is best_cpu_isa()
// and kAttentionTileTokens. The tile size never changes a bit of out or mass on any path (kAvx2
// and kAvx512 fuse, so each is only equal to itself): tests compare them, benchmarks time them. InvalidArgument for tile_tokens < 1, Unsupported for a path this CPU
// lacks.
Status paged_attention_with(const AttentionParams& params, ThreadPool& pool, CpuIsa isa,
                            int32_t tile_tokens);
}  // namespace detail

struct AppendKvParams {
  const float* k = nullptr;  // [num_tokens, cache.num_kv_heads, cache.head_dim]
  const float* v = nullptr;  // [num_tokens, cache.num_kv_heads, cache.head_dim]
  // [num_tokens]: slot = block_id * block_size + offset where token t's K/V go; -1 skips the token
  // (padding). Slots other than -1 must be distinct, or the value written there is unspecified.
  const int64_t* slot_mapping = nullptr;
  int64_t num_tokens = 0;
  PagedKvCacheView cache;  // one layer; dtype in kAttentionKvDTypes
  // Blocks in the pool. When > 0, a slot >= num_cache_blocks * block_size is OutOfRange; 0 leaves
  // the upper bound unchecked (the view itself does not know the pool size).
  int64_t num_cache_blocks = 0;
  // INT4 caches only (ignored otherwise): token t's K/V go, at full precision, to slot
  // newest_slot_mapping[t] of the newest-blocks group (-1 exactly where slot_mapping is -1); a
  // token that is the last of its int4 block (slot % block_size == block_size - 1) then fills
  // that block: its int4 codes and statistics are made from the newest-blocks group's block
  // holding newest_slot_mapping[t], which must hold the block's earlier tokens too.
  const int64_t* newest_slot_mapping = nullptr;
  PagedKvCacheView newest;        // the same layer in the newest-blocks group (F32 on the CPU)
  int64_t num_newest_blocks = 0;  // as num_cache_blocks, for the newest-blocks group's pool
};

// Writes k and v into the cache at the slots, rounding to the cache dtype (round to nearest even
// for BF16/F16; FP8 and INT8 quantized as kv_quant.h says, INT8 writing each row's scale too).
// INT4: every row goes to its newest-blocks slot in fp32; then every block whose last slot was
// among the slots is quantized whole (quantize_int4_block) from its full-precision block, after
// all of this call's rows are in; a partial block's int4 area is left untouched.
// Errors (nothing is written): InvalidArgument for null pointers or a bad view (I4: also a bad
// newest view, a null newest_slot_mapping, a newest slot that is -1 where the slot is not or
// vice versa, or at another offset in its block than the slot); OutOfRange for a slot (or newest
// slot) < -1 or beyond num_cache_blocks (num_newest_blocks); Unsupported for the cache dtype.
Status append_kv(const AppendKvParams& params, ThreadPool& pool);

}  // namespace strata::cpu
