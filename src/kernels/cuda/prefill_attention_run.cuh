#pragma once
// Which prefill kernel runs which cache (docs/kernels.md): 16-bit, FP8, INT8 caches and INT4's
// int4 keys through the warp-specialized wgmma kernel (prefill_ws_kernel.cuh), INT4's newest
// part and 16-bit caches at head dim 256 through the mma.sync kernel
// (prefill_attention_kernel.cuh). Included only by the instance files
// (instances/prefill_<dtype>_hd<dim>.cu).

#include "kernels/cuda/prefill_attention_kernel.cuh"
#include "kernels/cuda/prefill_ws_kernel.cuh"

namespace strata::cuda::detail {

// Head dims up to this one run the warp-specialized kernel; larger ones (256) the mma.sync
// kernel over the whole key range (launch_prefill_whole).
inline constexpr int kPrefillWsMaxHeadDim = 128;

template <DType kQDType, DType kKvDType, int kHeadDim>
Status run_prefill_ws(const PrefillAttentionParams& p, PrefillWsVariant variant,
                      cudaStream_t stream);

template <DType kQDType, DType kKvDType, int kHeadDim>
Status run_prefill_attention(const PrefillAttentionParams& p, PrefillWsVariant variant,
                             cudaStream_t stream) {
  static_assert(kKvDType == kQDType || is_quantized_kv(kKvDType) || kKvDType == DType::kI4);
  if constexpr (kHeadDim > kPrefillWsMaxHeadDim) {
    // One kernel whatever the schedule: the warp-specialized one has no room at this head dim.
    static_assert(kKvDType == kQDType, "quantized caches have no prefill instance past 128");
    static_cast<void>(variant);
    return launch_prefill_whole<kQDType, kHeadDim>(p, stream);
  } else {
    return run_prefill_ws<kQDType, kKvDType, kHeadDim>(p, variant, stream);
  }
}

// The warp-specialized kernel's launch under `variant`. INT4: the int4 keys through the INT4
// instance (leaving its log-sum-exps in lse_workspace), then the newest blocks' keys (at most R
// blocks per query row) through the 16-bit mma.sync instance over the newest-blocks group's pool,
// which merges.
template <DType kQDType, DType kKvDType, int kHeadDim>
Status run_prefill_ws(const PrefillAttentionParams& p, PrefillWsVariant variant,
                      cudaStream_t stream) {
  switch (variant) {
    case PrefillWsVariant::kBase:
      STRATA_RETURN_IF_ERROR(
          (launch_prefill_ws<kQDType, kKvDType, kHeadDim, PrefillWsVariant::kBase>(p, stream)));
      break;
    case PrefillWsVariant::kPingPong:
      STRATA_RETURN_IF_ERROR(
          (launch_prefill_ws<kQDType, kKvDType, kHeadDim, PrefillWsVariant::kPingPong>(p, stream)));
      break;
    case PrefillWsVariant::kPingPong3: {
      // Three stages for 16-bit caches only (prefill_ws_stages): the others run kPingPong.
      constexpr PrefillWsVariant kRun =
          prefill_ws_stages(kKvDType, PrefillWsVariant::kPingPong3) == 3
              ? PrefillWsVariant::kPingPong3
              : PrefillWsVariant::kPingPong;
      STRATA_RETURN_IF_ERROR((launch_prefill_ws<kQDType, kKvDType, kHeadDim, kRun>(p, stream)));
      break;
    }
    case PrefillWsVariant::kIndependent3:
      STRATA_RETURN_IF_ERROR(
          (launch_prefill_ws<kQDType, kKvDType, kHeadDim, PrefillWsVariant::kIndependent3>(
              p, stream)));
      break;
    case PrefillWsVariant::kPingPongSerial:
      STRATA_RETURN_IF_ERROR(
          (launch_prefill_ws<kQDType, kKvDType, kHeadDim, PrefillWsVariant::kPingPongSerial>(
              p, stream)));
      break;
  }
  if constexpr (kKvDType == DType::kI4) {
    PrefillAttentionParams rp = p;
    rp.cache = p.newest.cache;
    rp.layout.kv_indices = p.newest.layout.kv_indices;  // kv_len still from group 0's layout
    return launch_prefill_newest<kQDType, kHeadDim>(rp, stream);
  }
  return Status::Ok();
}

}  // namespace strata::cuda::detail
