#pragma once
// KV append: writes this step's new K and V rows into the paged pool by slot mapping
// (slot = block_id * block_size + offset; DESIGN.md, "Vocabulary"). One launch per layer.

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "core/status.h"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

struct KvAppendParams {
  // Destination layer; dtype in kKvDTypes or kQuantizedKvDTypes (dispatch.h): kv_append
  // quantizes bf16/f16 rows bit for bit as the CPU's encoders (docs/kv-quant.md), FP8 with the
  // view's static scale, INT8 with a scale per (token, head).
  PagedKvCacheView cache;
  const void* k = nullptr;     // [num_tokens, num_kv_heads, head_dim], src_dtype
  const void* v = nullptr;     // [num_tokens, num_kv_heads, head_dim], src_dtype
  // BF16 or F16; equal to cache.dtype for a BF16/F16 cache (a plain copy).
  DType src_dtype = DType::kBF16;
  int64_t k_token_stride = 0;  // elements between tokens of k (>= num_kv_heads * head_dim;
  int64_t v_token_stride = 0;  //   larger when k and v sit inside a fused qkv buffer)
  const int64_t* slot_mapping = nullptr;  // [num_tokens] device; -1 = padding, skipped
  int32_t num_tokens = 0;
};

// Writes token t's K and V (all KV heads) to slot_mapping[t]: copied for a BF16/F16 cache,
// quantized for FP8 (code = fp8(x / scale), saturating) and INT8 (one warp per row: amax over
// the row, fp16 scale, codes; the scale goes to the view's scale area). Contract: slots are
// distinct and inside the pool (not checked on the device); k, v, the cache and every stride are
// 16-byte aligned (InvalidArgument otherwise); head_dim * element size is a multiple of 16
// bytes. Unsupported for other dtypes. Asynchronous on stream.
Status kv_append(const KvAppendParams& params, cudaStream_t stream);

// kv_append()'s checks alone (qk_norm_rope() fuses the append and checks with this).
Status validate_kv_append(const KvAppendParams& params);

}  // namespace strata::cuda
