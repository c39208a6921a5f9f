#pragma once
// Paged MLA decode attention (DeepSeek-V2 / V3, the absorbed form): one new query token per
// sequence attends to the sequence's latent rows in the paged pool (docs/kernels.md, "MLA decode
// attention"). Each cached row is c = [c_kv (512) | k_pe (64)], 576 bf16 values, shared by every
// query head: K is the whole row, V its first 512 channels. The query of a head is 576 wide
// (q_nope absorbed through W_UK, then q_pe) and its output 512 wide (the caller up-projects it
// through W_UV). So this is MQA with one KV "head", and the query heads are the M dimension of
// the tensor-core products:
//   S = Q[heads, 576] K^T[576, tokens],  P = softmax(sm_scale * S),  O = P V[tokens, 512].
// Design: a thread block owns (sequence, tile of 64 or 16 query heads, split); split-KV with the
// decode kernel's in-kernel merge (decode_merge.cuh); the block table read per token as the GQA
// decode kernel reads it; FP32 accumulation; bf16 output and optionally the log-sum-exp.

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

inline constexpr int32_t kMlaLatentDim = 576;  // kv_lora_rank 512 + qk_rope_head_dim 64
inline constexpr int32_t kMlaValueDim = 512;   // kv_lora_rank: V is the latent's first channels
// Query heads per launch: a multiple of kMlaHeadQuantum up to kMlaMaxHeads (tensor-parallel
// slices of DeepSeek-V2 / V3's 128 heads, V2-Lite's 16).
inline constexpr int32_t kMlaHeadQuantum = 16;
inline constexpr int32_t kMlaMaxHeads = 128;
// Latent block sizes with a kernel (the tile reads each token's block id, so any power of two).
inline constexpr std::array<int32_t, 5> kMlaBlockSizes = {8, 16, 32, 64, 128};

struct MlaDecodeParams {
  const void* q = nullptr;   // [num_seqs, num_heads, 576] bf16: absorbed q_nope (512), then q_pe
  int64_t q_seq_stride = 0;  // elements between sequences of q (>= num_heads * 576)
  void* o = nullptr;         // [num_seqs, num_heads, 512] bf16
  int64_t o_seq_stride = 0;  // elements between sequences of o (>= num_heads * 512)
  PagedKvLayout layout;      // device pointers; layout.block_size == cache.block_size
  // One layer's latent (kv::KvLayout with KvSpec::latent): dtype bf16, num_kv_heads 1, head_dim
  // 576, token_stride >= 576. Rows are read from cache.k_data; V is the first 512 channels of
  // the same rows (cache.v_data, which the latent layout sets to k_data, is not read).
  PagedKvCacheView cache;
  int32_t num_heads = 0;  // query heads: a positive multiple of 16, at most 128
  float sm_scale = 0.0f;  // softmax scale: 1 / sqrt(192) times YaRN's mscale^2, as the caller says
  // Host-side upper bound on any sequence's kv_len, used to plan splits; 0 = never split.
  int32_t max_kv_len = 0;
  // 0 = the planner picks; n >= 1 forces n splits (tests), capped by the workspace.
  int32_t num_splits = 0;
  // Optional [num_seqs, num_heads] log-sum-exp (natural log) of the scaled scores; -inf for an
  // empty sequence. nullptr = not written.
  float* lse = nullptr;
  // Device scratch for split partials and their merge counters, zeroed once by the caller
  // before its first use (every launch leaves the counters zero again; launches that may run at
  // the same time need their own workspaces). mla_decode_workspace_bytes() says how much allows
  // max_splits splits; too small (or nullptr) just means fewer splits. 256-byte aligned.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of workspace that allow up to max_splits splits. Zero them before the first launch.
size_t mla_decode_workspace_bytes(int32_t num_seqs, int32_t num_heads, int32_t max_splits);

// out[s, h] = softmax(sm_scale * q[s, h] . C[s]^T) C[s][:, :512] over the sequence's latent rows
// C[s]. A sequence with kv_len 0 gets a zero output (and lse -inf). Unsupported for a dtype,
// head_dim or block_size outside the sets above; InvalidArgument for inconsistent shapes or
// misaligned pointers. Asynchronous on stream.
Status mla_decode(const MlaDecodeParams& params, cudaStream_t stream);

// The tile height a launch uses for num_heads heads (64 when it divides them, else 16); the
// bench reports it.
int32_t mla_decode_head_tile(int32_t num_heads);

}  // namespace strata::cuda
