#pragma once
// The paged view of the KV cache that every attention kernel reads: plain structs of pointers and
// integers (no engine objects), built only by src/kv (PagedLayoutBuilder, KvLayout::layer_view) so
// the stride arithmetic lives in one place. The CPU and CUDA kernels read the same structs.
//
// A batch of sequences addresses the pool through the CSR "paged layout" (FlashInfer's
// paged_kv_t): sequence s owns blocks kv_indices[kv_indptr[s] .. kv_indptr[s+1]) in logical
// order, and the last of them holds kv_last_page_len[s] valid tokens (1..block_size). A sequence
// with no blocks has kv_len 0.
//
//   kv_indptr        [0,        3,     5]          num_seqs + 1 entries
//   kv_indices       [7, 2, 9,  4, 1]              block ids, nnz = kv_indptr[num_seqs]
//   kv_last_page_len [5,        16]                valid tokens in each sequence's last block
//   -> seq 0: tokens 0..15 in block 7, 16..31 in block 2, 32..36 in block 9 (block_size 16)
//
// One layer's K (and V) inside the pool, per block, head-major (see src/kv/kv_layout.h for the
// whole pool):
//
//   k_data + block_id * block_stride
//     | head 0: token 0 [head_dim] | token 1 [head_dim] | ... | token block_size-1 |
//     | head 1: ...                                                               |  head_stride apart
//
// A slot (= block_id * block_size + offset) names one token position in the pool.
//
// Quantized caches (docs/kv-quant.md; the view's dtype says which, kernels dispatch on it):
//   F8E4M3 / F8E5M2  codes; real = fp8_to_f32(code) * k_scale (K) or * v_scale (V): one static
//                    fp32 scale per layer and tensor, carried in the view itself
//   I8               codes in [-127, 127]; real = code * s, s = the fp16 scale of that token's
//                    K (or V) row of that KV head, stored in the pool after the layer's V:
//
//   k_scale_data + block_id * scale_block_stride
//     | head 0: s(token 0) .. s(token block_size-1) | head 1: ... |   fp16, scale_head_stride apart

#include <cstdint>

#include "core/dtype.h"

namespace strata {

// The CSR block tables of one batch; shared by all layers of a step. Host or device pointers,
// matching where the kernel runs.
struct PagedKvLayout {
  const int32_t* kv_indptr = nullptr;         // [num_seqs + 1]
  const int32_t* kv_indices = nullptr;        // [kv_indptr[num_seqs]] block ids
  const int32_t* kv_last_page_len = nullptr;  // [num_seqs], in 1..block_size (unused if no blocks)
  int32_t num_seqs = 0;
  int32_t block_size = 0;

  // A group that holds only each sequence's newest blocks (kv/kv_group.h, kNewestBlocks): sequence
  // s's entries are its logical blocks first_block[s], first_block[s] + 1, ... through its last
  // block. Null when every sequence's entries start at logical block 0 (attention groups, whose
  // given-back blocks stay in the table as kNullBlock entries).
  const int32_t* first_block = nullptr;  // [num_seqs] or null

  int32_t first(int32_t seq_idx) const { return first_block == nullptr ? 0 : first_block[seq_idx]; }
  // Entries the sequence has (its blocks from first(seq_idx) on).
  int32_t num_blocks(int32_t seq_idx) const {
    return kv_indptr[seq_idx + 1] - kv_indptr[seq_idx];
  }
  // Tokens held for the sequence: full blocks plus the valid part of the last one.
  int32_t kv_len(int32_t seq_idx) const {
    const int32_t n = num_blocks(seq_idx);
    return n == 0 ? 0 : (first(seq_idx) + n - 1) * block_size + kv_last_page_len[seq_idx];
  }
  // Block holding logical block jb of the sequence (first(seq_idx) <= jb, within its entries).
  int32_t block_at(int32_t seq_idx, int32_t jb) const {
    return kv_indices[kv_indptr[seq_idx] + jb - first(seq_idx)];
  }
  // Block holding logical token position pos of the sequence (pos < kv_len(seq_idx)).
  int32_t block_of(int32_t seq_idx, int32_t pos) const {
    return block_at(seq_idx, pos / block_size);
  }
};

// One layer's K and V storage in the pool. Strides are in elements of dtype.
struct PagedKvCacheView {
  void* k_data = nullptr;  // this layer's K in block 0; block b starts block_stride elements later
  void* v_data = nullptr;  // this layer's V in block 0
  int64_t block_stride = 0;  // elements between the same layer's K (or V) of blocks b and b + 1
  int64_t head_stride = 0;   // elements between KV heads inside a block (= block_size * head_dim)
  int64_t token_stride = 0;  // elements between tokens of one head (= head_dim)
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  DType dtype = DType::kF32;

  // F8E4M3 / F8E5M2: the layer's static dequantization scales (real = fp8 value * scale).
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // I8: per-token scales, fp16 bit patterns (uint16_t); null for every other dtype.
  void* k_scale_data = nullptr;    // this layer's K scales in block 0: [num_kv_heads][block_size]
  void* v_scale_data = nullptr;    // this layer's V scales in block 0
  int64_t scale_block_stride = 0;  // fp16 scales between blocks b and b + 1 (= block bytes / 2)
  int64_t scale_head_stride = 0;   // fp16 scales between KV heads inside a block (= block_size)

  int64_t scale_offset(int32_t block_id, int32_t kv_head, int32_t token_in_block) const {
    return block_id * scale_block_stride + kv_head * scale_head_stride + token_in_block;
  }

  int64_t offset(int32_t block_id, int32_t kv_head, int32_t token_in_block) const {
    return block_id * block_stride + kv_head * head_stride + token_in_block * token_stride;
  }
  int64_t slot_offset(int64_t slot, int32_t kv_head) const {
    return offset(static_cast<int32_t>(slot / block_size), kv_head,
                  static_cast<int32_t>(slot % block_size));
  }
  template <typename T>
  T* k(int32_t block_id, int32_t kv_head, int32_t token_in_block) const {
    return static_cast<T*>(k_data) + offset(block_id, kv_head, token_in_block);
  }
  template <typename T>
  T* v(int32_t block_id, int32_t kv_head, int32_t token_in_block) const {
    return static_cast<T*>(v_data) + offset(block_id, kv_head, token_in_block);
  }

  // I4 (KIVI, docs/kv-quant.md "INT4") only; null / 0 for every other dtype. An I4 view counts
  // block_stride / head_stride / token_stride in bytes (two 4-bit codes per byte, the low nibble
  // the even channel: a token's row is head_dim / 2 bytes), and real = code * scale + zero with
  // fp16 scales and zero points. V's are per token, as I8's scales (v_scale_data / v_zero_data
  // at scale_offset(block, head, token)); K's are per channel of a block (k_scale_data /
  // k_zero_data at block * scale_block_stride + kv_head * k_stat_head_stride + channel).
  void* k_zero_data = nullptr;     // K zero points in block 0: [num_kv_heads][head_dim]
  void* v_zero_data = nullptr;     // V zero points in block 0: [num_kv_heads][block_size]
  int64_t k_stat_head_stride = 0;  // fp16 between KV heads of K's scales / zeros (= head_dim)
};

// What an INT4 (KIVI) layer reads beside its codes: the same layer in the pool of the cache's
// newest-blocks group (kv/kv_group.h; full precision: F32 on the CPU, the activations' dtype on
// the GPU), that group's layout (first_block set) and its R. A query at position p reads logical
// block jb from here iff jb > p / block_size - blocks (its own block and the R - 1 before it),
// else the int4 codes -- a function of (p, jb) alone, so batching and chunking never change
// which precision a query sees. Empty (blocks 0) for every other cache dtype.
struct NewestBlocksView {
  PagedKvCacheView cache;
  PagedKvLayout layout;
  int32_t blocks = 0;  // R >= 1 for an INT4 layer
};

}  // namespace strata
