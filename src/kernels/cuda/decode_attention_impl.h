#pragma once
// Internal interface between the decode-attention launcher (decode_attention.cc: validation and
// dispatch) and its per-(dtype x head dim) instances (instances/*.cu). Host-only.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/decode_attention.h"

namespace strata::cuda::detail {

// Where the pieces of the decode workspace live (byte offsets, each 256-byte aligned):
//   counters      [kSplitCounterCapacity] int32 at offset 0, whatever the launch: splits finished
//                 per block tile of a split launch; zero before the first launch (the caller
//                 zeroes the workspace once), and every launch leaves them zero
//   lse_log2      [num_seqs, num_qo_heads] float   final log-sum-exp (log2 units), mass pass
//   partial_lse   [splits, num_seqs, num_qo_heads] float   (splits > 1 only)
//   partial_o     [splits, num_seqs, num_qo_heads, head_dim] float   (splits > 1 only)
inline constexpr int32_t kSplitCounterCapacity = 4096;
struct DecodeWorkspaceLayout {
  size_t lse_log2_offset = 0;
  size_t partial_lse_offset = 0;
  size_t partial_o_offset = 0;
  size_t total_bytes = 0;
};

DecodeWorkspaceLayout decode_workspace_layout(int32_t num_seqs, int32_t num_qo_heads,
                                              int32_t head_dim, int32_t num_splits);

// Runs decode attention for validated params (q/o kQDType, cache kKvDType, head_dim kHeadDim).
template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

}  // namespace strata::cuda::detail
