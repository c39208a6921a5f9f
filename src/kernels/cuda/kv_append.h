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
  // INT4 (KIVI) caches only (cache.dtype == kInt4KvDType): the layer in the newest-blocks
  // group's pool (src_dtype) and each token's slot there (-1 exactly where slot_mapping is -1, at
  // the same offset in its block). Rows go there; blocks they fill are then quantized
  // (kv_int4_quantize_filled).
  PagedKvCacheView newest;
  const int64_t* newest_slot_mapping = nullptr;  // [num_tokens] device
};

// INT4 (KIVI, docs/kv-quant.md "INT4"): quantizes the blocks this step filled. For each token t
// whose slot is the last of its block (slot_mapping[t] % block_size == block_size - 1), int4
// block slot_mapping[t] / block_size of `cache` gets the codes and statistics of all block_size
// tokens of the newest-blocks group's block newest_slot_mapping[t] / block_size, every KV head
// (K per channel, V per token), bit for bit what the CPU's quantize_int4_block makes of the same
// values. Run it after the step's rows are in the newest-blocks group's pool (kv_append, or
// qk_norm_rope writing to the newest view by newest_slot_mapping), before attention reads the
// blocks.
struct KvInt4QuantizeParams {
  PagedKvCacheView cache;                 // I4
  PagedKvCacheView newest;                // BF16 or F16, the cache's heads, head_dim and block size
  const int64_t* slot_mapping = nullptr;  // [num_tokens] device
  const int64_t* newest_slot_mapping = nullptr;  // [num_tokens] device
  int32_t num_tokens = 0;
};
Status kv_int4_quantize_filled(const KvInt4QuantizeParams& params, cudaStream_t stream);

// Writes token t's K and V (all KV heads) to slot_mapping[t]: copied for a BF16/F16 cache,
// quantized for FP8 (code = fp8(x / scale), saturating) and INT8 (one warp per row: amax over
// the row, fp16 scale, codes; the scale goes to the view's scale area); for INT4, copied to the
// newest-blocks group's pool by newest_slot_mapping, then kv_int4_quantize_filled. Contract: slots
// are distinct and inside the pool (not checked on the device); k, v, the cache and every stride
// are 16-byte aligned (InvalidArgument otherwise); head_dim * element size is a multiple of 16
// bytes. Unsupported for other dtypes. Asynchronous on stream.
Status kv_append(const KvAppendParams& params, cudaStream_t stream);

// kv_append()'s checks alone (qk_norm_rope() fuses the append and checks with this).
Status validate_kv_append(const KvAppendParams& params);

}  // namespace strata::cuda
