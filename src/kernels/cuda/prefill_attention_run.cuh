#pragma once
// Which prefill kernel runs which cache (docs/kernels.md): 16-bit, FP8 and INT8 caches through
// the warp-specialized wgmma kernel (prefill_ws_kernel.cuh), INT4 and its residual part through
// the mma.sync kernel (prefill_attention_kernel.cuh). Included only by the
// instance files (instances/prefill_<dtype>_hd<dim>.cu).

#include "kernels/cuda/prefill_attention_kernel.cuh"
#include "kernels/cuda/prefill_ws_kernel.cuh"

namespace strata::cuda::detail {

// INT4: the int4 keys through the INT4 instance (leaving its log-sum-exps in lse_workspace),
// then the residual keys through the 16-bit instance over the residual pool, which merges. The
// int4 part runs 8 warps per block at head dim 128 (one block per SM): each converted key tile
// then serves 128 query rows instead of 64, which halves the unpacking per query row; measured
// on an H200 GPU at 2.11-2.13x BF16's time against 2.21-2.27x with 4 warps (both against the
// mma.sync BF16 kernel of the time). Head dim 64's rows are too few for 8 warps' whole-vector
// copies.
template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  if constexpr (kKvDType == DType::kI4) {
    constexpr int kWarps = kHeadDim == 128 ? 8 : 4;
    STRATA_RETURN_IF_ERROR((launch_prefill<kQDType, DType::kI4, kHeadDim, kWarps, 64, 8 / kWarps>(
        p, stream, kInt4Part)));
    PrefillAttentionParams rp = p;
    rp.cache = p.residual;
    rp.layout.kv_indices = p.layout.res_indices;
    return launch_prefill<kQDType, kQDType, kHeadDim, 4, 64, 2>(rp, stream, kResidualPart);
  } else {
    static_assert(kKvDType == kQDType || is_quantized_kv(kKvDType));
    return launch_prefill_ws<kQDType, kKvDType, kHeadDim>(p, stream);
  }
}

}  // namespace strata::cuda::detail
