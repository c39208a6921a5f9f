// qk_norm_rope(): optional per-head RMSNorm (Qwen3) and rotate_half RoPE, in place on the q and
// k heads of a fused bf16 qkv buffer (model_ops.h).
//
// One thread block per token. The block computes the token's cos / sin table once (half
// entries; the angle in float64, see reduce_angle) into shared memory while its first loads are
// in flight. A group of `lanes` threads takes one head: each
// thread holds kVec elements of the head's low half and the matching kVec of its high half
// (channel i pairs with i + head_dim / 2), so the rotation needs no exchange between threads and
// only the norm's sum of squares is reduced, by a butterfly inside the group (a fixed order).
// kVec is 8 (16-byte loads) when the head dim, token stride and pointers allow it, else 2 or 1;
// lanes is the power of two at or above half / kVec, at most 32 (then each thread takes up to
// kChunks chunks).

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"

namespace strata::cuda {
namespace {

constexpr int kMaxHalf = 128;  // head_dim <= 256
constexpr int kMaxThreads = 512;

struct QkNormRopeArgs {
  __nv_bfloat16* qkv;
  int64_t token_stride;
  const int32_t* positions;
  const float* inv_freq;
  const void* q_norm;
  const void* k_norm;
  float eps;
  float inv_head_dim;
  float attention_scaling;
  int32_t num_q_heads;
  int32_t num_heads;  // q + k heads: the ones rotated
  int32_t head_dim;
  int32_t half;
  int32_t lanes;  // threads per head, a power of two <= 32
};

// angle reduced to [-pi, pi] in float64 (two-term Cody-Waite), then rounded to fp32: exact to
// ~1e-10 for any angle a position up to 2^31 gives, so the hardware sine / cosine (absolute error
// <= 2^-21.4 on [-pi, pi]) is accurate at long positions too. (The float64 sincos this replaces
// took 54 registers and a stack frame, which held the kernel to 3 blocks per SM.)
__device__ __forceinline__ float reduce_angle(double angle) {
  constexpr double kInvTwoPi = 0.15915494309189535;
  constexpr double kTwoPiHi = 6.283185307179586;
  constexpr double kTwoPiLo = 2.4492935982947064e-16;
  const double k = rint(angle * kInvTwoPi);
  return static_cast<float>(fma(-k, kTwoPiLo, fma(-k, kTwoPiHi, angle)));
}

// Chunks of kVec elements per thread and half: lanes <= 32 threads cover up to kMaxHalf.
template <int kVec>
constexpr int kChunks = kMaxHalf / (32 * kVec) > 0 ? kMaxHalf / (32 * kVec) : 1;

template <DType kNorm, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    qk_norm_rope_kernel(const __grid_constant__ QkNormRopeArgs a) {
  constexpr int kC = kChunks<kVec>;
  __shared__ float cos_t[kMaxHalf];
  __shared__ float sin_t[kMaxHalf];
  const int32_t t = blockIdx.x;
  const bool any_norm = a.q_norm != nullptr || a.k_norm != nullptr;
  const int group = threadIdx.x / a.lanes;
  const int groups = blockDim.x / a.lanes;
  const int lane = threadIdx.x % a.lanes;
  __nv_bfloat16* token = a.qkv + static_cast<int64_t>(t) * a.token_stride;
  // Every thread runs the same number of iterations (the group sums shuffle across the warp).
  for (int base = 0; base < a.num_heads; base += groups) {
    const int h = base + group;
    const bool head_active = h < a.num_heads;
    __nv_bfloat16* head = token + static_cast<int64_t>(h) * a.head_dim;
    // Chunk c of this thread: elements [i0, i0 + kVec) and [half + i0, half + i0 + kVec).
    float lo[kC][kVec] = {};
    float hi[kC][kVec] = {};
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int i0 = (lane + c * a.lanes) * kVec;
      if (head_active && i0 < a.half) {
        detail::load_n<DType::kBF16, kVec>(head, i0, lo[c]);
        detail::load_n<DType::kBF16, kVec>(head, a.half + i0, hi[c]);
      }
    }
    if (base == 0) {
      // The token's cos / sin table, computed while the first heads' loads are in flight.
      const double position = a.positions[t];
      for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
        float s;
        float c;
        __sincosf(reduce_angle(position * static_cast<double>(a.inv_freq[i])), &s, &c);
        cos_t[i] = c * a.attention_scaling;
        sin_t[i] = s * a.attention_scaling;
      }
      __syncthreads();
    }
    if (any_norm) {
      const void* w = h < a.num_q_heads ? a.q_norm : a.k_norm;
      float ss = 0.0f;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(lo[c][e], lo[c][e], ss);
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(hi[c][e], hi[c][e], ss);
      }
      ss = detail::group_sum(ss, a.lanes);
      if (head_active && w != nullptr) {
        const float scale = rsqrtf(ss * a.inv_head_dim + a.eps);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int i0 = (lane + c * a.lanes) * kVec;
          if (i0 < a.half) {
            float w_lo[kVec];
            float w_hi[kVec];
            detail::load_n<kNorm, kVec>(w, i0, w_lo);
            detail::load_n<kNorm, kVec>(w, a.half + i0, w_hi);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              lo[c][e] = (lo[c][e] * scale) * w_lo[e];
              hi[c][e] = (hi[c][e] * scale) * w_hi[e];
            }
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int i0 = (lane + c * a.lanes) * kVec;
      if (head_active && i0 < a.half) {
        float out_lo[kVec];
        float out_hi[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float cs = cos_t[i0 + e];
          const float sn = sin_t[i0 + e];
          out_lo[e] = lo[c][e] * cs - hi[c][e] * sn;
          out_hi[e] = hi[c][e] * cs + lo[c][e] * sn;
        }
        detail::store_bf16_n<kVec>(head, i0, out_lo);
        detail::store_bf16_n<kVec>(head, a.half + i0, out_hi);
      }
    }
  }
}

template <DType kNorm, int kVec>
void launch(const QkNormRopeArgs& a, int32_t num_tokens, int threads, cudaStream_t stream) {
  qk_norm_rope_kernel<kNorm, kVec><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(a);
}

template <DType kNorm>
void launch_norm(const QkNormRopeArgs& a, int32_t num_tokens, int vec, int threads,
                 cudaStream_t stream) {
  if (vec == 8) {
    launch<kNorm, 8>(a, num_tokens, threads, stream);
  } else if (vec == 2) {
    launch<kNorm, 2>(a, num_tokens, threads, stream);
  } else {
    launch<kNorm, 1>(a, num_tokens, threads, stream);
  }
}

Status validate(const QkNormRopeParams& p) {
  const bool any_norm = p.q_norm != nullptr || p.k_norm != nullptr;
  if (any_norm && p.norm_dtype != DType::kBF16 && p.norm_dtype != DType::kF16 &&
      p.norm_dtype != DType::kF32) {
    return Status::Unsupported("qk_norm_rope norm dtype " + std::string(dtype_name(p.norm_dtype)) +
                               " (supported: BF16, F16, F32)");
  }
  if (p.num_tokens < 0 || p.num_q_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim % 2 != 0 || p.head_dim > 2 * kMaxHalf || !(p.eps >= 0.0f)) {
    return Status::InvalidArgument(
        "qk_norm_rope needs num_tokens >= 0, positive head counts, an even head_dim <= 256 and "
        "eps >= 0");
  }
  const int64_t row = (static_cast<int64_t>(p.num_q_heads) + 2 * p.num_kv_heads) * p.head_dim;
  if (p.token_stride < row) {
    return Status::InvalidArgument("qk_norm_rope: token_stride " + std::to_string(p.token_stride) +
                                   " is smaller than a qkv row of " + std::to_string(row));
  }
  if (p.num_tokens > 0 && (p.qkv == nullptr || p.positions == nullptr || p.inv_freq == nullptr)) {
    return Status::InvalidArgument("qk_norm_rope needs qkv, positions and inv_freq");
  }
  return Status::Ok();
}

// The widest per-thread vector (8, 2 or 1 elements) that the shapes and pointers allow.
int choose_vec(const QkNormRopeParams& p) {
  const int half = p.head_dim / 2;
  const int64_t norm_elem = dtype_size(p.norm_dtype);
  auto fits = [&](int vec) {
    const uintptr_t bytes = static_cast<uintptr_t>(vec) * 2;
    const auto norm_ok = [&](const void* w) {
      return w == nullptr || detail::aligned_to(w, static_cast<uintptr_t>(vec * norm_elem));
    };
    return half % vec == 0 && p.token_stride % vec == 0 && detail::aligned_to(p.qkv, bytes) &&
           norm_ok(p.q_norm) && norm_ok(p.k_norm);
  };
  if (fits(8)) return 8;
  if (fits(2)) return 2;
  return 1;
}

}  // namespace

Status qk_norm_rope(const QkNormRopeParams& p, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return Status::Ok();
  const int vec = choose_vec(p);
  const int half = p.head_dim / 2;
  const int lanes =
      std::min(32, static_cast<int>(std::bit_ceil(static_cast<unsigned>(half / vec))));
  const int32_t num_heads = p.num_q_heads + p.num_kv_heads;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      detail::ceil_div(static_cast<int64_t>(num_heads) * lanes, 32) * 32, 32, kMaxThreads));
  const QkNormRopeArgs a{static_cast<__nv_bfloat16*>(p.qkv),
                         p.token_stride,
                         p.positions,
                         p.inv_freq,
                         p.q_norm,
                         p.k_norm,
                         p.eps,
                         1.0f / static_cast<float>(p.head_dim),
                         p.attention_scaling,
                         p.num_q_heads,
                         num_heads,
                         p.head_dim,
                         half,
                         lanes};
  if (p.norm_dtype == DType::kF16) {
    launch_norm<DType::kF16>(a, p.num_tokens, vec, threads, stream);
  } else if (p.norm_dtype == DType::kF32) {
    launch_norm<DType::kF32>(a, p.num_tokens, vec, threads, stream);
  } else {
    launch_norm<DType::kBF16>(a, p.num_tokens, vec, threads, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
