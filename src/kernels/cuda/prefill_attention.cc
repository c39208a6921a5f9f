#include "kernels/cuda/prefill_attention.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/prefill_attention_impl.h"

namespace strata::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status validate(const PrefillAttentionParams& p) {
  const PagedKvCacheView& c = p.cache;
  if (!contains(kKvBlockSizes, c.block_size)) {
    return Status::Unsupported("block_size " + std::to_string(c.block_size) +
                               " has no CUDA prefill kernel");
  }
  if (p.layout.block_size != c.block_size) {
    return Status::InvalidArgument("layout.block_size differs from cache.block_size");
  }
  if (p.layout.num_seqs < 0 || p.layout.num_seqs > 65535 || c.num_kv_heads <= 0 ||
      p.num_qo_heads <= 0 || p.num_qo_heads > 65535 || p.num_qo_heads % c.num_kv_heads != 0) {
    return Status::InvalidArgument(
        "num_qo_heads must be a positive multiple of num_kv_heads; at most 65535 sequences");
  }
  if (p.q == nullptr || p.o == nullptr || p.qo_indptr == nullptr || p.layout.kv_indptr == nullptr ||
      p.layout.kv_indices == nullptr || p.layout.kv_last_page_len == nullptr ||
      c.k_data == nullptr || c.v_data == nullptr) {
    return Status::InvalidArgument("prefill attention needs q, o, qo_indptr, the layout and K/V");
  }
  const bool int4 = c.dtype == kInt4KvDType;
  const bool quantized = is_quantized_kv(c.dtype) || int4;
  if (!quantized && !contains(kKvDTypes, c.dtype)) {
    return Status::Unsupported(
        "prefill attention reads BF16, F16, FP8, INT8 and INT4 caches, not " +
        std::string(dtype_name(c.dtype)));
  }
  if (int4) {
    STRATA_RETURN_IF_ERROR(validate_int4_newest(c, p.newest, p.qo_dtype));
    if (p.lse_workspace == nullptr) {
      return Status::InvalidArgument(
          "prefill attention over an int4 cache needs lse_workspace (prefill_int4_workspace_floats)");
    }
  }
  const int64_t elem = kv_stride_unit_bytes(c.dtype);
  const int64_t qo_elem = dtype_size(quantized ? p.qo_dtype : c.dtype);
  const int64_t row = static_cast<int64_t>(p.num_qo_heads) * c.head_dim;
  if (p.q_token_stride < row || p.o_token_stride < row) {
    return Status::InvalidArgument("q/o token stride smaller than num_qo_heads * head_dim");
  }
  STRATA_RETURN_IF_ERROR(validate_kv_scales(c));
  if (!aligned16(p.q) || !aligned16(p.o) || !aligned16(c.k_data) || !aligned16(c.v_data) ||
      (p.q_token_stride * qo_elem) % 16 != 0 || (p.o_token_stride * qo_elem) % 16 != 0 ||
      (c.block_stride * elem) % 16 != 0 || (c.head_stride * elem) % 16 != 0 ||
      (c.token_stride * elem) % 16 != 0) {
    return Status::InvalidArgument(
        "prefill attention pointers and strides must be 16-byte aligned");
  }
  if (p.window_left < -1 || p.max_q_len < 0) {
    return Status::InvalidArgument("window_left >= -1 and max_q_len >= 0");
  }
  return Status::Ok();
}

}  // namespace

namespace detail {

Status prefill_attention_variant(const PrefillAttentionParams& params, PrefillWsVariant variant,
                                 cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(params));
  if (params.layout.num_seqs == 0 || params.max_q_len == 0) return Status::Ok();
  return dispatch_attention_dtypes(params.qo_dtype, params.cache.dtype, [&]<DType kQ, DType kKv>() {
    auto run = [&]<int32_t kHeadDim>() {
      return run_prefill_attention<kQ, kKv, kHeadDim>(params, variant, stream);
    };
    if constexpr (kKv != kQ) {  // a quantized cache (FP8, INT8, INT4)
      return dispatch_value<kQuantizedKvHeadDims>(params.cache.head_dim,
                                                  "prefill head_dim over a quantized cache", run);
    } else {
      return dispatch_value<kPrefillHeadDims>(params.cache.head_dim, "prefill head_dim", run);
    }
  });
}

}  // namespace detail

Status prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream) {
  return detail::prefill_attention_variant(params, detail::kDefaultPrefillWsVariant, stream);
}

}  // namespace strata::cuda
