#include "kernels/cuda/block_copy.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

struct BlockCopyArgs {
  const uint4* src;
  uint4* dst;
  const int32_t* block_pairs;  // [num_pairs, 2]
  int64_t block_vecs;          // 16-byte vectors per block
};

// blockIdx.y picks the pair; the x blocks stride over the block's vectors, four loads in flight
// per thread before the stores.
__global__ void block_copy_kernel(const __grid_constant__ BlockCopyArgs a) {
  constexpr int kUnroll = 4;
  const int64_t src_block = a.block_pairs[2 * blockIdx.y];
  const int64_t dst_block = a.block_pairs[2 * blockIdx.y + 1];
  const uint4* src = a.src + src_block * a.block_vecs;
  uint4* dst = a.dst + dst_block * a.block_vecs;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       base < a.block_vecs; base += step * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < a.block_vecs) r[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < a.block_vecs) dst[i] = r[u];
    }
  }
}

}  // namespace

Status block_copy(const BlockCopyParams& p, cudaStream_t stream) {
  if (p.num_pairs < 0 || p.block_bytes <= 0 || p.block_bytes % 16 != 0) {
    return Status::InvalidArgument("block_copy needs num_pairs >= 0 and block_bytes % 16 == 0");
  }
  if (p.num_pairs == 0) return Status::Ok();
  if (p.src_pool == nullptr || p.dst_pool == nullptr || p.block_pairs == nullptr) {
    return Status::InvalidArgument("block_copy needs both pools and the block pairs");
  }
  if (reinterpret_cast<uintptr_t>(p.src_pool) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.dst_pool) % 16 != 0) {
    return Status::InvalidArgument("block_copy pools must be 16-byte aligned");
  }
  if (p.num_pairs > 65535) {
    return Status::InvalidArgument("block_copy takes at most 65535 pairs per call");
  }
  BlockCopyArgs a{};
  a.src = static_cast<const uint4*>(p.src_pool);
  a.dst = static_cast<uint4*>(p.dst_pool);
  a.block_pairs = p.block_pairs;
  a.block_vecs = p.block_bytes / 16;
  constexpr int kThreads = 256;
  const int64_t x_blocks =
      std::clamp<int64_t>(detail::ceil_div(a.block_vecs, kThreads * 4), 1, 1024);
  block_copy_kernel<<<dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(p.num_pairs)),
                      kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
