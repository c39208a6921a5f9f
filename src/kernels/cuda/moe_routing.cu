// moe_route(): router logits to each token's top-k experts and weights (moe.h), one warp per
// token, following moe_block.cc's route_one / route_deepseek_one step for step.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarps = 4;  // tokens per block
constexpr int kThreads = kWarps * 32;
constexpr unsigned kFull = 0xffffffffu;

struct RouteArgs {
  const void* logits;
  const float* bias;
  int32_t* experts;
  float* weights;
  int32_t num_tokens, num_experts, top_k, num_groups, topk_groups;
  MoeScoring scoring;
  MoeTopk topk_method;
  bool deepseek;
  bool renormalize;
  float scale;
};

// A candidate of an argmax: a score and its id (id < 0: none). a beats b when it has a score
// greater than b's, or equal with a lower id; a NaN never beats a number (CPU: never replaces the
// best), and an absent candidate beats nothing.
struct Best {
  float v;
  int32_t id;
};
__device__ __forceinline__ bool beats(const Best& a, const Best& b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  if (isnan(a.v)) return isnan(b.v) && a.id < b.id;
  if (isnan(b.v)) return true;
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}
__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    Best o{__shfl_xor_sync(kFull, b.v, off), __shfl_xor_sync(kFull, b.id, off)};
    if (beats(o, b)) b = o;
  }
  return b;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;
}

template <typename T>
__device__ __forceinline__ float load_logit(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 2) {
    return __bfloat162float(p[i]);
  } else {
    return p[i];
  }
}

// Per warp in shared memory: the scores p (softmax / sigmoid), the choice values (p + bias),
// whether each expert may still be chosen, and the chosen ids.
struct WarpSmem {
  float* p;
  float* choice;
  uint8_t* allowed;
  int32_t* chosen;
};

// The k largest choice values among the allowed experts (ties to the lower id), in the order
// found, into s.chosen[0, k) (-1 where none is left); each choice disallows its expert.
__device__ void top_k(const WarpSmem& s, int32_t n, int32_t k, int lane) {
  for (int32_t j = 0; j < k; ++j) {
    Best b{0.0f, -1};
    for (int32_t e = lane; e < n; e += 32) {
      const Best c{s.choice[e], s.allowed[e] ? e : -1};
      if (beats(c, b)) b = c;
    }
    b = warp_best(b);
    if (lane == 0) s.chosen[j] = b.id;
    if (b.id >= 0 && lane == 0) s.allowed[b.id] = 0;
    __syncwarp();
  }
}

// Restricts s.allowed to the topk_groups best groups (a group's score: its best choice value, or
// the sum of its two best for kNoAuxTc; groups ranked with ties to the lower group).
__device__ void limit_groups(const RouteArgs& a, const WarpSmem& s, int lane) {
  const int32_t per = a.num_experts / a.num_groups;
  Best g{0.0f, -1};
  if (lane < a.num_groups) {
    const float* c = s.choice + lane * per;
    // std::max_element / partial_sort with greater<>: a NaN is never ranked above a number here.
    float top0 = -INFINITY, top1 = -INFINITY;
    bool any = false;
    for (int32_t i = 0; i < per; ++i) {
      const float v = c[i];
      if (isnan(v)) continue;
      if (!any || v > top0) {
        top1 = any ? top0 : top1;
        top0 = v;
      } else if (v > top1) {
        top1 = v;
      }
      any = true;
    }
    const float score = a.topk_method == MoeTopk::kGroupLimitedGreedy ? top0 : top0 + top1;
    g = Best{any ? score : NAN, lane};
  }
  unsigned chosen_groups = 0;
  for (int32_t j = 0; j < a.topk_groups; ++j) {
    Best cand = g;
    if ((chosen_groups >> lane) & 1u) cand.id = -1;
    const Best b = warp_best(cand);
    if (b.id >= 0) chosen_groups |= 1u << b.id;
  }
  for (int32_t e = lane; e < a.num_experts; e += 32) {
    s.allowed[e] = static_cast<uint8_t>((chosen_groups >> (e / per)) & 1u);
  }
  __syncwarp();
}

template <typename T>
__global__ void __launch_bounds__(kThreads) route_kernel(const __grid_constant__ RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t n = a.num_experts, k = a.top_k;
  float* base_f = reinterpret_cast<float*>(smem) + warp * 2 * n;
  int32_t* chosen = reinterpret_cast<int32_t*>(reinterpret_cast<float*>(smem) + kWarps * 2 * n) +
                    warp * kMoeMaxTopK;
  uint8_t* allowed =
      reinterpret_cast<uint8_t*>(
          reinterpret_cast<int32_t*>(reinterpret_cast<float*>(smem) + kWarps * 2 * n) +
          kWarps * kMoeMaxTopK) +
      warp * n;
  const WarpSmem s{base_f, base_f + n, allowed, chosen};
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= a.num_tokens) return;
  const T* row = static_cast<const T*>(a.logits) + t * n;

  if (a.scoring == MoeScoring::kSoftmax) {
    float m = -INFINITY;
    for (int32_t e = lane; e < n; e += 32) m = fmaxf(m, load_logit(row, e));
    m = warp_max(m);
    float sum = 0.0f;
    for (int32_t e = lane; e < n; e += 32) {
      const float x = expf(load_logit(row, e) - m);
      s.p[e] = x;
      sum += x;
    }
    sum = warp_sum(sum);
    for (int32_t e = lane; e < n; e += 32) s.p[e] /= sum;
  } else {
    for (int32_t e = lane; e < n; e += 32) s.p[e] = 1.0f / (1.0f + expf(-load_logit(row, e)));
  }
  for (int32_t e = lane; e < n; e += 32) {
    s.choice[e] = s.p[e] + (a.bias != nullptr ? a.bias[e] : 0.0f);
    s.allowed[e] = 1;
  }
  __syncwarp();
  if (a.topk_method != MoeTopk::kGreedy) limit_groups(a, s, lane);
  top_k(s, n, k, lane);

  if (lane != 0) return;
  int32_t ids[kMoeMaxTopK];
  for (int32_t j = 0; j < k; ++j) ids[j] = s.chosen[j];
  // Scores all NaN: the lowest ids not yet chosen (the CPU's DeepSeek fallback; its softmax path
  // would index expert -1, and so would moe_permute here).
  for (int32_t j = 0, next = 0; j < k; ++j) {
    if (ids[j] >= 0) continue;
    for (bool taken = true; taken; ++next) {
      taken = false;
      for (int32_t i = 0; i < k; ++i) taken |= ids[i] == next;
      if (!taken) break;
    }
    ids[j] = next;
  }
  for (int32_t i = 1; i < k; ++i) {  // insertion sort: k <= 32
    const int32_t v = ids[i];
    int32_t j = i - 1;
    for (; j >= 0 && ids[j] > v; --j) ids[j + 1] = ids[j];
    ids[j + 1] = v;
  }
  float sum = 0.0f;
  for (int32_t j = 0; j < k; ++j) sum += s.p[ids[j]];
  if (a.deepseek) sum += 1e-20f;
  for (int32_t j = 0; j < k; ++j) {
    float w = a.renormalize ? s.p[ids[j]] / sum : s.p[ids[j]];
    if (a.deepseek) w *= a.scale;
    a.experts[t * k + j] = ids[j];
    a.weights[t * k + j] = w;
  }
}

}  // namespace

Status moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.top_k < 1 ||
      p.top_k > kMoeMaxTopK || p.top_k > p.num_experts) {
    return Status::InvalidArgument("moe_route: sizes out of range");
  }
  if (p.logits_dtype != DType::kF32 && p.logits_dtype != DType::kBF16) {
    return Status::Unsupported("moe_route: logits must be F32 or BF16");
  }
  if (p.topk_method != MoeTopk::kGreedy &&
      (p.num_groups < 1 || p.num_groups > kMoeMaxGroups || p.num_experts % p.num_groups != 0 ||
       p.topk_groups < 1 || p.topk_groups > p.num_groups ||
       (p.topk_method == MoeTopk::kNoAuxTc && p.num_experts / p.num_groups < 2))) {
    return Status::InvalidArgument("moe_route: groups out of range");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.logits == nullptr || p.experts == nullptr || p.weights == nullptr) {
    return Status::InvalidArgument("moe_route needs logits, experts and weights");
  }
  const bool deepseek = p.scoring != MoeScoring::kSoftmax || p.topk_method != MoeTopk::kGreedy ||
                        p.routed_scaling_factor != 1.0f || p.score_bias != nullptr;
  const RouteArgs a{p.logits,         p.score_bias,           p.experts,
                    p.weights,        p.num_tokens,           p.num_experts,
                    p.top_k,          p.num_groups,           p.topk_groups,
                    p.scoring,        p.topk_method,          deepseek,
                    p.norm_topk_prob, p.routed_scaling_factor};
  const size_t smem =
      kWarps * (2 * sizeof(float) * p.num_experts + sizeof(int32_t) * kMoeMaxTopK + p.num_experts);
  const dim3 grid(static_cast<unsigned>((p.num_tokens + kWarps - 1) / kWarps));
  if (p.logits_dtype == DType::kBF16) {
    STRATA_CUDA_CHECK(
        detail::launch_pdl(route_kernel<__nv_bfloat16>, grid, dim3(kThreads), smem, stream, a));
  } else {
    STRATA_CUDA_CHECK(
        detail::launch_pdl(route_kernel<float>, grid, dim3(kThreads), smem, stream, a));
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
