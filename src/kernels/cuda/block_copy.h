#pragma once
// Block copy: copies whole blocks of the pool (copy-on-write of a shared last block, swap between
// a device pool and a mapped host pool). The pool layout makes one block one contiguous span of
// block_bytes (src/kv/kv_layout.h), so a block moves as one run of 16-byte vectors whatever the
// number of layers.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace strata::cuda {

struct BlockCopyParams {
  const void* src_pool = nullptr;        // [num_src_blocks, block_bytes] device-accessible
  void* dst_pool = nullptr;              // [num_dst_blocks, block_bytes]; may equal src_pool
  const int32_t* block_pairs = nullptr;  // [num_pairs, 2] device: (src block id, dst block id)
  int32_t num_pairs = 0;
  int64_t block_bytes = 0;  // multiple of 16
};

// Copies block block_pairs[i][0] of src_pool to block block_pairs[i][1] of dst_pool for every i.
// Contract: no destination block is written twice or also read as a source in the same call;
// pools 16-byte aligned (InvalidArgument otherwise). Asynchronous on stream.
Status block_copy(const BlockCopyParams& params, cudaStream_t stream);

}  // namespace strata::cuda
