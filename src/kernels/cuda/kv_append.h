#pragma once
// KV append: writes this step's new K and V rows into the paged pool by slot mapping
// (slot = block_id * block_size + offset; DESIGN.md, "Vocabulary"). One launch per layer.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

struct KvAppendParams {
  PagedKvCacheView cache;      // destination layer; dtype in kKvDTypes
  const void* k = nullptr;     // [num_tokens, num_kv_heads, head_dim], cache.dtype
  const void* v = nullptr;     // [num_tokens, num_kv_heads, head_dim], cache.dtype
  int64_t k_token_stride = 0;  // elements between tokens of k (>= num_kv_heads * head_dim;
  int64_t v_token_stride = 0;  //   larger when k and v sit inside a fused qkv buffer)
  const int64_t* slot_mapping = nullptr;  // [num_tokens] device; -1 = padding, skipped
  int32_t num_tokens = 0;
};

// Copies token t's K and V (all KV heads) to slot_mapping[t]. Contract: slots are distinct and
// inside the pool (not checked on the device); k, v, the cache and every stride are 16-byte
// aligned (InvalidArgument otherwise); head_dim * element size is a multiple of 16 bytes.
// Unsupported for a dtype outside kKvDTypes. Asynchronous on stream.
Status kv_append(const KvAppendParams& params, cudaStream_t stream);

}  // namespace strata::cuda
