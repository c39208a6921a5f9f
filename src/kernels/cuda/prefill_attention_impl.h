#pragma once
// Internal interface between the prefill-attention launcher (prefill_attention.cc) and its
// per-(dtype x head dim) instances (instances/prefill_*.cu), and the schedule choice that the
// benchmark and the tests use to compare the warp-specialized kernel's schedules. Host-only.

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/prefill_attention.h"

namespace strata::cuda::detail {

// The warp-specialized kernel's schedules (prefill_ws_kernel.cuh; docs/kernels.md,
// "Warp-specialized prefill"). Every instance compiles both, so that one process can time them
// side by side (strata_prefill_bench --variant); their outputs are bit-identical.
//  - kBase: blocks in grid order (each sequence's query tiles longest-first, KV heads and
//    sequences one after another), the two consumers issuing their products independently.
//  - kPingPong: blocks longest-first across the whole grid (the query tile counted from its
//    sequence's end varies slowest); the consumers take turns issuing their products, so one's
//    softmax runs while the other's products run (FlashAttention-3's ping-pong); only the tiles
//    at a diagonal, window edge or sequence end are masked; the producer's lanes copy a tile's
//    KV blocks in parallel. K and V rings of two stages, as kBase's.
//  - kPingPong3: kPingPong with three K/V stages for 16-bit caches (the quantized caches run
//    kPingPong: their code stages leave no room for a third).
//  - kIndependent3: kPingPong3 without the turns (the consumers issue independently, as in
//    kBase), to tell the turns' share from the rest's; two stages for quantized caches.
//  - kPingPongSerial: kPingPong without the pipelining inside a consumer: tile j's softmax waits
//    for P_{j-1} V_{j-1} as well as S_j, so only the other consumer's products run under it.
//    P_{j-1} and O are then no longer held in flight across the softmax: ptxas spills nothing
//    (kPingPong: 56 bytes at 240 registers, at head dim 128).
enum class PrefillWsVariant { kBase, kPingPong, kPingPong3, kIndependent3, kPingPongSerial };
inline constexpr std::array<PrefillWsVariant, 5> kPrefillWsVariants = {
    PrefillWsVariant::kBase, PrefillWsVariant::kPingPong, PrefillWsVariant::kPingPong3,
    PrefillWsVariant::kIndependent3, PrefillWsVariant::kPingPongSerial};
// What prefill_attention runs: kPingPongSerial, which spills no registers, is 1.2-3.7 % faster
// than kPingPong on BF16 (and 0.7-2.4 % on FP8) at every benchmarked shape on an H100, and
// kPingPong 2-4 % faster than kPingPong3 on the H200 (docs/benchmarks.md, "CUDA prefill
// attention").
inline constexpr PrefillWsVariant kDefaultPrefillWsVariant = PrefillWsVariant::kPingPongSerial;

inline const char* prefill_ws_variant_name(PrefillWsVariant v) {
  switch (v) {
    case PrefillWsVariant::kBase:
      return "base";
    case PrefillWsVariant::kPingPong:
      return "pingpong";
    case PrefillWsVariant::kPingPong3:
      return "pingpong3";
    case PrefillWsVariant::kIndependent3:
      return "independent3";
    case PrefillWsVariant::kPingPongSerial:
      return "pingpong-serial";
  }
  return "?";
}

// Runs prefill attention for validated params (q/o kQDType, cache kKvDType, head_dim kHeadDim)
// with the warp-specialized kernel's schedule `variant`.
template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_prefill_attention(const PrefillAttentionParams& params, PrefillWsVariant variant,
                             cudaStream_t stream);

// prefill_attention (prefill_attention.h) with the given schedule: for benchmarks and tests that
// compare the schedules; prefill_attention runs kDefaultPrefillWsVariant.
Status prefill_attention_variant(const PrefillAttentionParams& params, PrefillWsVariant variant,
                                 cudaStream_t stream);

}  // namespace strata::cuda::detail
