// moe_grouped_gemm() (moe.h): the experts' projections over the expert-sorted rows, with the
// tile table moe_permute() left on the device.
//
// Grid: x = a row tile of the table (blocks past *num_tiles exit), y = a column tile. Row tiles
// vary fastest, so the blocks resident at once share a column tile: its weight rows are read from
// memory once and served to every row tile of that expert from L2, and a tile of an expert with
// at most kBM rows reads its weights exactly once. A block: kBM rows x kBN output features, k in
// steps of kBK through a kStages-deep cp.async ring (16-byte chunks, XOR-swizzled rows of 128
// bytes so that ldmatrix reads 8 rows without bank conflicts), mma.sync m16n8k16 with fp32
// accumulators. An output element is one thread's sum over k in 16-wide steps in ascending k from
// zero, whatever kBM, kBN or the warp layout: the configs give the same bits.
//
// SiLU-and-mul: the block's column tile is kBN / 2 features of act, its smem rows the gate rows
// [c0, c0 + kBN / 2) then the up rows [inter + c0, ...); each warp's n-fragments f and
// f + kNF / 2 hold gate and up of the same act columns in the same lanes, which form
// silu_mul_bf16(bf16(gate), bf16(up)) in registers.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kBK = 64;  // one smem row = 128 bytes = 8 chunks of 16 bytes

template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kStages_>
struct GemmShape {
  static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;
  static constexpr int kMF = kWM / 16, kNF = kWN / 8;
  static constexpr int kStageElems = (kBM + kBN) * kBK;
  static constexpr int kSmemBytes = kStages * kStageElems * 2;
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tiles of whole fragments, kNF even");
};
using SmallShape = GemmShape<16, 64, 1, 4, 8>;   // decode: 80 KiB, 2 blocks per SM
using LargeShape = GemmShape<64, 128, 2, 2, 4>;  // prefill: 96 KiB, 2 blocks per SM

__device__ __forceinline__ int swz(int row, int chunk) {
  return row * kBK + ((chunk ^ (row & 7)) << 3);
}

// The smem row of n-fragment f of warp column wn (SiLU: gate fragments first, then up).
template <class S, bool kSilu>
__device__ __forceinline__ int frag_row(int wn, int f) {
  if constexpr (kSilu) {
    constexpr int kHalf = S::kNF / 2;
    return f < kHalf ? wn * (S::kWN / 2) + f * 8 : S::kBN / 2 + wn * (S::kWN / 2) + (f - kHalf) * 8;
  } else {
    return wn * S::kWN + f * 8;
  }
}

template <class S, bool kSilu, typename OutT>
__global__ void __launch_bounds__(S::kThreads)
    moe_gemm_kernel(const __grid_constant__ MoeGemmParams p) {
  extern __shared__ __align__(128) __nv_bfloat16 smem[];
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int tile = blockIdx.x;
  if (tile >= *p.num_tiles) return;
  const int32_t expert = p.tile_expert[tile];
  const int32_t r0 = p.tile_row[tile];
  const int32_t r_end = min(r0 + S::kBM, p.expert_offsets[expert + 1]);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int32_t inter = p.n / 2;
  // Product columns of this block (plain) or act columns (SiLU).
  const int32_t c0 = blockIdx.y * (kSilu ? S::kBN / 2 : S::kBN);

  const auto* a = static_cast<const __nv_bfloat16*>(p.a);
  const auto* w = static_cast<const __nv_bfloat16*>(p.w) + expert * p.w_expert_stride;
  const int num_kt = (p.k + kBK - 1) / kBK;

  // The A rows this thread copies (chunk tid + i * kThreads: row (tid + i * kThreads) / 8, the
  // same 16-byte column tid % 8 in each), found once: through a_row_of when the gather is fused.
  constexpr int kAIters = S::kBM * 8 / S::kThreads;
  static_assert(S::kBM * 8 % S::kThreads == 0, "whole A chunks per thread");
  const __nv_bfloat16* a_row[kAIters];
#pragma unroll
  for (int i = 0; i < kAIters; ++i) {
    const int32_t r = r0 + (tid + i * S::kThreads) / 8;
    a_row[i] = r < r_end
                   ? a + static_cast<int64_t>(p.a_row_of != nullptr ? p.a_row_of[r] : r) * p.lda
                   : nullptr;
  }

  auto load_stage = [&](int kt) {
    __nv_bfloat16* sa = smem + (kt % S::kStages) * S::kStageElems;
    __nv_bfloat16* sb = sa + S::kBM * kBK;
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < kAIters; ++i) {
      const int chunk = tid + i * S::kThreads, row = chunk / 8, ch = chunk % 8;
      const bool ok = a_row[i] != nullptr && k0 + ch * 8 < p.k;
      detail::cp_async16_zfill(sa + swz(row, ch), ok ? a_row[i] + k0 + ch * 8 : a, ok);
    }
    for (int i = tid; i < S::kBN * 8; i += S::kThreads) {
      const int row = i / 8, ch = i % 8;
      int32_t wrow;
      bool ok;
      if constexpr (kSilu) {
        const int local = row % (S::kBN / 2);
        ok = c0 + local < inter;
        wrow = (row < S::kBN / 2 ? 0 : inter) + c0 + local;
      } else {
        wrow = c0 + row;
        ok = wrow < p.n;
      }
      ok = ok && k0 + ch * 8 < p.k;
      const __nv_bfloat16* src = ok ? w + static_cast<int64_t>(wrow) * p.ldw + k0 + ch * 8 : w;
      detail::cp_async16_zfill(sb + swz(row, ch), src, ok);
    }
  };

  float acc[S::kMF][S::kNF][4];
#pragma unroll
  for (int mf = 0; mf < S::kMF; ++mf)
#pragma unroll
    for (int f = 0; f < S::kNF; ++f)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mf][f][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < num_kt) load_stage(s);
    detail::cp_async_commit();
  }
  for (int kt = 0; kt < num_kt; ++kt) {
    detail::cp_async_wait<S::kStages - 2>();
    __syncthreads();
    if (kt + S::kStages - 1 < num_kt) load_stage(kt + S::kStages - 1);
    detail::cp_async_commit();
    const __nv_bfloat16* sa = smem + (kt % S::kStages) * S::kStageElems;
    const __nv_bfloat16* sb = sa + S::kBM * kBK;
#pragma unroll
    for (int ks2 = 0; ks2 < kBK / 32; ++ks2) {
      // b[f][0..1]: step 2 ks2, b[f][2..3]: step 2 ks2 + 1.
      uint32_t b[S::kNF][4];
#pragma unroll
      for (int f = 0; f < S::kNF; ++f) {
        const int row = frag_row<S, kSilu>(wn, f) + lane % 8;
        detail::ldmatrix_x4(b[f], sb + swz(row, ks2 * 4 + lane / 8));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ks = ks2 * 2 + h;
#pragma unroll
        for (int mf = 0; mf < S::kMF; ++mf) {
          uint32_t af[4];
          const int row = wm * S::kWM + mf * 16 + lane % 8 + ((lane / 8) % 2) * 8;
          detail::ldmatrix_x4(af, sa + swz(row, ks * 2 + lane / 16));
#pragma unroll
          for (int f = 0; f < S::kNF; ++f) {
            detail::mma_16816<DType::kBF16>(acc[mf][f], af, b[f][2 * h], b[f][2 * h + 1]);
          }
        }
      }
    }
  }
  detail::cp_async_wait<0>();

  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mf = 0; mf < S::kMF; ++mf) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t row = r0 + wm * S::kWM + mf * 16 + g + half * 8;
      if (row >= r_end) continue;
      if constexpr (kSilu) {
        auto* d = static_cast<__nv_bfloat16*>(p.d) + static_cast<int64_t>(row) * p.ldd;
#pragma unroll
        for (int f = 0; f < S::kNF / 2; ++f) {
          const int32_t col = c0 + wn * (S::kWN / 2) + f * 8 + 2 * t4;
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if (col + i >= inter) continue;
            const float gate = __bfloat162float(__float2bfloat16_rn(acc[mf][f][half * 2 + i]));
            const float up =
                __bfloat162float(__float2bfloat16_rn(acc[mf][f + S::kNF / 2][half * 2 + i]));
            d[col + i] = detail::silu_mul_bf16(gate, up);
          }
        }
      } else {
        auto* d = static_cast<OutT*>(p.d) + static_cast<int64_t>(row) * p.ldd;
#pragma unroll
        for (int f = 0; f < S::kNF; ++f) {
          const int32_t col = c0 + wn * S::kWN + f * 8 + 2 * t4;
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if (col + i >= p.n) continue;
            if constexpr (sizeof(OutT) == 2) {
              d[col + i] = __float2bfloat16_rn(acc[mf][f][half * 2 + i]);
            } else {
              d[col + i] = acc[mf][f][half * 2 + i];
            }
          }
        }
      }
    }
  }
}

template <class S, bool kSilu, typename OutT>
Status launch(const MoeGemmParams& p, cudaStream_t stream) {
  auto* kernel = moe_gemm_kernel<S, kSilu, OutT>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  STRATA_CUDA_CHECK(attr);
  const int32_t cols = kSilu ? p.n / 2 : p.n;
  const int32_t per_block = kSilu ? S::kBN / 2 : S::kBN;
  const dim3 grid(static_cast<unsigned>(p.max_tiles),
                  static_cast<unsigned>((cols + per_block - 1) / per_block));
  STRATA_CUDA_CHECK(detail::launch_pdl(kernel, grid, dim3(S::kThreads), S::kSmemBytes, stream, p));
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

template <class S>
Status launch_shape(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.epilogue == MoeGemmEpilogue::kSiluAndMul) return launch<S, true, __nv_bfloat16>(p, stream);
  if (p.d_dtype == DType::kF32) return launch<S, false, float>(p, stream);
  return launch<S, false, __nv_bfloat16>(p, stream);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

int32_t moe_tile_rows(MoeTileConfig c) {
  switch (c) {
    case MoeTileConfig::kSmall:
      return SmallShape::kBM;
    case MoeTileConfig::kLarge:
      return LargeShape::kBM;
  }
  return SmallShape::kBM;
}

MoeTileConfig moe_choose_tile_config(int64_t num_tokens, int32_t top_k, int32_t num_experts) {
  return num_tokens * top_k >= int64_t{32} * num_experts ? MoeTileConfig::kLarge
                                                         : MoeTileConfig::kSmall;
}

int32_t moe_max_tiles(int64_t num_tokens, int32_t top_k, int32_t num_experts, MoeTileConfig c) {
  const int64_t pairs = num_tokens * top_k;
  return static_cast<int32_t>(std::min<int64_t>(num_experts, pairs) + pairs / moe_tile_rows(c));
}

Status moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  const bool silu = p.epilogue == MoeGemmEpilogue::kSiluAndMul;
  if (p.n <= 0 || p.k <= 0 || p.k % 8 != 0 || p.max_tiles < 0 || p.ldw < p.k || p.ldw % 8 != 0 ||
      p.lda < p.k || p.lda % 8 != 0 || p.ldd < (silu ? p.n / 2 : p.n) ||
      (silu && (p.n % 2 != 0 || p.d_dtype != DType::kBF16))) {
    return Status::InvalidArgument("moe_grouped_gemm: sizes, strides or epilogue out of contract");
  }
  if (p.d_dtype != DType::kBF16 && p.d_dtype != DType::kF32) {
    return Status::Unsupported("moe_grouped_gemm: d must be BF16 or F32");
  }
  if (p.max_tiles == 0) return Status::Ok();
  if (p.a == nullptr || p.w == nullptr || p.d == nullptr || p.expert_offsets == nullptr ||
      p.tile_expert == nullptr || p.tile_row == nullptr || p.num_tiles == nullptr ||
      !aligned16(p.a) || !aligned16(p.w) || p.w_expert_stride % 8 != 0) {
    return Status::InvalidArgument("moe_grouped_gemm: null or misaligned pointers");
  }
  switch (p.tile_config) {
    case MoeTileConfig::kSmall:
      return launch_shape<SmallShape>(p, stream);
    case MoeTileConfig::kLarge:
      return launch_shape<LargeShape>(p, stream);
  }
  return Status::InvalidArgument("moe_grouped_gemm: unknown tile config");
}

}  // namespace strata::cuda
