// Host side of paged MLA decode attention: validation, the split planner and the launch of one
// of the two kernel instances (64- or 16-head tiles; mla_decode_kernel.cuh).

#include "kernels/cuda/mla_decode.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_attention_impl.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/mla_decode_kernel.cuh"

namespace strata::cuda {
namespace {

using detail::ceil_div;
using detail::MlaShape;

// Split partials one block merges at the end of the attention kernel (splits x head-tile rows,
// 2 KiB each): above this a separate merge kernel spreads them over a block per head.
constexpr int64_t kMaxInKernelMergeRows = 128;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int32_t floor_log2(int32_t v) {
  int32_t r = 0;
  while ((1 << (r + 1)) <= v) ++r;
  return r;
}

template <typename T, size_t N>
bool in_set(const std::array<T, N>& set, T value) {
  return std::find(set.begin(), set.end(), value) != set.end();
}

Status validate(const MlaDecodeParams& p) {
  const PagedKvCacheView& c = p.cache;
  if (c.dtype != DType::kBF16) {
    return Status::Unsupported("MLA decode reads a BF16 latent cache, not " +
                               std::string(dtype_name(c.dtype)));
  }
  if (c.head_dim != kMlaLatentDim || c.num_kv_heads != 1) {
    return Status::Unsupported("MLA decode reads one latent head of 576 channels (512 + 64), not " +
                               std::to_string(c.num_kv_heads) + " x " + std::to_string(c.head_dim));
  }
  if (!in_set(kMlaBlockSizes, c.block_size)) {
    return Status::Unsupported("block_size " + std::to_string(c.block_size) +
                               " has no MLA decode kernel");
  }
  if (p.layout.block_size != c.block_size) {
    return Status::InvalidArgument("layout.block_size differs from cache.block_size");
  }
  if (p.num_heads <= 0 || p.num_heads % kMlaHeadQuantum != 0 || p.num_heads > kMlaMaxHeads) {
    return Status::Unsupported("MLA decode takes a multiple of 16 query heads up to 128, not " +
                               std::to_string(p.num_heads));
  }
  if (p.layout.num_seqs < 0) {
    return Status::InvalidArgument("num_seqs must be >= 0");
  }
  if (p.q == nullptr || p.o == nullptr || p.layout.kv_indptr == nullptr ||
      p.layout.kv_indices == nullptr || p.layout.kv_last_page_len == nullptr ||
      c.k_data == nullptr) {
    return Status::InvalidArgument("MLA decode needs q, o, the paged layout and the latent");
  }
  if (p.q_seq_stride < static_cast<int64_t>(p.num_heads) * kMlaLatentDim ||
      p.o_seq_stride < static_cast<int64_t>(p.num_heads) * kMlaValueDim) {
    return Status::InvalidArgument(
        "q / o sequence strides smaller than num_heads * 576 / num_heads * 512");
  }
  if (c.token_stride < kMlaLatentDim ||
      c.block_stride < static_cast<int64_t>(c.block_size) * c.token_stride) {
    return Status::InvalidArgument("latent token / block strides smaller than a row / a block");
  }
  if (!aligned16(p.q) || !aligned16(p.o) || !aligned16(c.k_data) || (p.q_seq_stride * 2) % 16 ||
      (p.o_seq_stride * 2) % 16 || (c.block_stride * 2) % 16 || (c.token_stride * 2) % 16) {
    return Status::InvalidArgument("MLA decode pointers and strides must be 16-byte aligned");
  }
  if (p.max_kv_len < 0 || p.num_splits < 0) {
    return Status::InvalidArgument("max_kv_len >= 0, num_splits >= 0");
  }
  if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0) {
    return Status::InvalidArgument("the MLA decode workspace must be 256-byte aligned");
  }
  return Status::Ok();
}

// Splits for one launch, as the GQA decode planner chooses them (decode_attention_launch.cuh):
// the launch's time modelled as waves x the longest block, ceil(blocks * s / wave) *
// (len / s + kSplitCostTokens), one block per SM; no split shorter than two tiles; capped by
// kMaxDecodeSplits, the workspace and the merge counters.
int32_t plan_splits(const MlaDecodeParams& p, int64_t unsplit_blocks, int32_t tile_tokens) {
  const int32_t len = p.max_kv_len;
  if (len <= 0) return 1;
  int64_t splits = p.num_splits;
  if (splits <= 0) {
    int device = 0;
    int num_sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 1;
    }
    const int64_t wave = num_sms;
    const int64_t most =
        std::min<int64_t>(kMaxDecodeSplits, std::max<int64_t>(1, len / (2 * tile_tokens)));
    splits = 1;
    if (unsplit_blocks < 4 * wave) {
      int64_t best = INT64_MAX;
      for (int64_t s = 1; s <= most; ++s) {
        const int64_t cost =
            ceil_div(unsplit_blocks * s, wave) * (ceil_div(len, s) + detail::kSplitCostTokens);
        if (cost < best) {
          best = cost;
          splits = s;
        }
      }
    }
  }
  splits = std::clamp<int64_t>(splits, 1, kMaxDecodeSplits);
  if (unsplit_blocks > detail::kSplitCounterCapacity) splits = 1;
  while (splits > 1 &&
         mla_decode_workspace_bytes(p.layout.num_seqs, p.num_heads, static_cast<int32_t>(splits)) >
             p.workspace_bytes) {
    --splits;
  }
  if (p.workspace == nullptr) splits = 1;
  return static_cast<int32_t>(splits);
}

template <int kRowGroups>
Status launch(const MlaDecodeParams& p, cudaStream_t stream) {
  using Shape = MlaShape<kRowGroups>;
  constexpr auto* kKernel = detail::mla_decode_kernel<kRowGroups>;
  static const cudaError_t configured = cudaFuncSetAttribute(
      kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Shape::kSmemBytes));
  STRATA_CUDA_CHECK(configured);

  const PagedKvCacheView& c = p.cache;
  const int32_t head_tiles = p.num_heads / Shape::kHeads;
  const int64_t unsplit_blocks = static_cast<int64_t>(p.layout.num_seqs) * head_tiles;
  detail::MlaKernelArgs a{};
  a.q = p.q;
  a.q_seq_stride = p.q_seq_stride;
  a.kv_indptr = p.layout.kv_indptr;
  a.kv_indices = p.layout.kv_indices;
  a.kv_last_page_len = p.layout.kv_last_page_len;
  a.latent = c.k_data;
  a.block_stride = c.block_stride;
  a.token_stride = c.token_stride;
  a.block_size = c.block_size;
  a.log2_block_size = floor_log2(c.block_size);
  a.scale_log2 = p.sm_scale * 1.4426950408889634f;
  a.num_splits = plan_splits(p, unsplit_blocks, Shape::kTileTokens);
  a.chunk_tokens = 0;
  if (a.num_splits > 1) {
    // Whole tiles per split; the count shrinks so that none is empty at max_kv_len.
    const int64_t tiles = ceil_div(p.max_kv_len, Shape::kTileTokens);
    const int64_t chunk_tiles = ceil_div(tiles, a.num_splits);
    a.num_splits = static_cast<int32_t>(ceil_div(tiles, chunk_tiles));
    a.chunk_tokens = static_cast<int32_t>(chunk_tiles * Shape::kTileTokens);
  }
  detail::DecodeKernelArgs& out = a.out;
  out.o = p.o;
  out.o_seq_stride = p.o_seq_stride;
  out.num_seqs = p.layout.num_seqs;
  out.num_qo_heads = p.num_heads;
  out.lse_ln = p.lse;
  out.lse_log2 = nullptr;
  out.merge_splits = a.num_splits;
  if (a.num_splits > 1) {
    const detail::DecodeWorkspaceLayout ws =
        detail::decode_workspace_layout(p.layout.num_seqs, p.num_heads, kMlaValueDim, a.num_splits);
    char* base = static_cast<char*>(p.workspace);
    out.partial_o = reinterpret_cast<float*>(base + ws.partial_o_offset);
    out.partial_lse = reinterpret_cast<float*>(base + ws.partial_lse_offset);
    out.split_counters = reinterpret_cast<int32_t*>(base);
  }
  // The last split of a head tile merges when its partials are few (no second launch: a batch-1
  // step waits on this tail); else a merge kernel with a block per (sequence, head) does.
  a.merge_in_kernel = static_cast<int64_t>(a.num_splits) * Shape::kHeads <= kMaxInKernelMergeRows;
  const dim3 grid(static_cast<unsigned>(p.layout.num_seqs), static_cast<unsigned>(head_tiles),
                  static_cast<unsigned>(a.num_splits));
  cudaError_t err =
      detail::launch_pdl(kKernel, grid, dim3(detail::kMlaThreads), Shape::kSmemBytes, stream, a);
  if (err != cudaSuccess) return cuda_error_status(err, "MLA decode launch", __FILE__, __LINE__);
  STRATA_CUDA_CHECK_LAUNCH();
  if (a.num_splits > 1 && !a.merge_in_kernel) {
    const dim3 merge_grid(static_cast<unsigned>(p.layout.num_seqs),
                          static_cast<unsigned>(p.num_heads));
    err = detail::launch_pdl(detail::mla_merge_kernel, merge_grid, dim3(detail::kMlaMergeThreads),
                             0, stream, a);
    if (err != cudaSuccess) return cuda_error_status(err, "MLA merge launch", __FILE__, __LINE__);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  return Status::Ok();
}

}  // namespace

size_t mla_decode_workspace_bytes(int32_t num_seqs, int32_t num_heads, int32_t max_splits) {
  return decode_attention_workspace_bytes(num_seqs, num_heads, kMlaValueDim, max_splits);
}

int32_t mla_decode_head_tile(int32_t num_heads) {
  return num_heads % MlaShape<4>::kHeads == 0 ? MlaShape<4>::kHeads : MlaShape<1>::kHeads;
}

Status mla_decode(const MlaDecodeParams& params, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(params));
  if (params.layout.num_seqs == 0) return Status::Ok();
  if (mla_decode_head_tile(params.num_heads) == MlaShape<4>::kHeads) {
    return launch<4>(params, stream);
  }
  return launch<1>(params, stream);
}

}  // namespace strata::cuda
