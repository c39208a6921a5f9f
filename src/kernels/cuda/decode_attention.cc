#include "kernels/cuda/decode_attention.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/decode_attention_impl.h"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {
namespace {

constexpr size_t kWorkspaceAlign = 256;

size_t align_up(size_t v) { return (v + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status validate(const DecodeAttentionParams& p) {
  const PagedKvCacheView& c = p.cache;
  if (!contains(kKvBlockSizes, c.block_size)) {
    return Status::Unsupported("block_size " + std::to_string(c.block_size) +
                               " has no CUDA decode kernel");
  }
  if (p.layout.block_size != c.block_size) {
    return Status::InvalidArgument("layout.block_size differs from cache.block_size");
  }
  if (p.layout.num_seqs < 0 || c.num_kv_heads <= 0 || p.num_qo_heads <= 0 ||
      p.num_qo_heads % c.num_kv_heads != 0) {
    return Status::InvalidArgument("num_qo_heads must be a positive multiple of num_kv_heads");
  }
  // Grid y: KV heads x query-head tiles of 16 (one tile for groups of up to 8).
  if (static_cast<int64_t>(c.num_kv_heads) * ((p.num_qo_heads / c.num_kv_heads + 15) / 16) >
      65535) {
    return Status::InvalidArgument("too many KV heads for one launch");
  }
  if (p.q == nullptr || p.o == nullptr || p.layout.kv_indptr == nullptr ||
      p.layout.kv_indices == nullptr || p.layout.kv_last_page_len == nullptr ||
      c.k_data == nullptr || c.v_data == nullptr) {
    return Status::InvalidArgument("decode attention needs q, o, the paged layout and K/V");
  }
  const bool int4 = c.dtype == kInt4KvDType;
  const bool quantized = is_quantized_kv(c.dtype) || int4;
  if (!quantized && !contains(kKvDTypes, c.dtype)) {
    return Status::Unsupported("decode attention reads BF16, F16, FP8, INT8 and INT4 caches, not " +
                               std::string(dtype_name(c.dtype)));
  }
  if (int4) {
    STRATA_RETURN_IF_ERROR(validate_int4_newest(c, p.newest, p.qo_dtype));
    if (p.workspace_bytes <
        decode_attention_workspace_bytes(p.layout.num_seqs, p.num_qo_heads, c.head_dim, 2)) {
      return Status::InvalidArgument(
          "decode attention over an int4 cache needs decode_attention_workspace_bytes(.., 2)");
    }
  }
  const int64_t elem = kv_stride_unit_bytes(c.dtype);
  const int64_t qo_elem = dtype_size(quantized ? p.qo_dtype : c.dtype);
  const int64_t row = static_cast<int64_t>(p.num_qo_heads) * c.head_dim;
  if (p.q_seq_stride < row || p.o_seq_stride < row) {
    return Status::InvalidArgument("q/o sequence stride smaller than num_qo_heads * head_dim");
  }
  STRATA_RETURN_IF_ERROR(validate_kv_scales(c));
  if (quantized && p.attn_mass != nullptr) {
    return Status::Unsupported("the attention-mass pass reads 16-bit caches only");
  }
  if (!aligned16(p.q) || !aligned16(p.o) || !aligned16(c.k_data) || !aligned16(c.v_data) ||
      (p.q_seq_stride * qo_elem) % 16 != 0 || (p.o_seq_stride * qo_elem) % 16 != 0 ||
      (c.block_stride * elem) % 16 != 0 || (c.head_stride * elem) % 16 != 0 ||
      (c.token_stride * elem) % 16 != 0) {
    return Status::InvalidArgument("decode attention pointers and strides must be 16-byte aligned");
  }
  if (p.window_left < -1 || p.max_kv_len < 0 || p.num_splits < 0) {
    return Status::InvalidArgument("window_left >= -1, max_kv_len >= 0, num_splits >= 0");
  }
  if (p.attn_mass != nullptr &&
      (p.workspace == nullptr ||
       p.workspace_bytes <
           decode_attention_workspace_bytes(p.layout.num_seqs, p.num_qo_heads, c.head_dim, 1))) {
    return Status::InvalidArgument("attn_mass needs decode_attention_workspace_bytes(.., 1)");
  }
  if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlign != 0) {
    return Status::InvalidArgument("the decode workspace must be 256-byte aligned");
  }
  return Status::Ok();
}

}  // namespace

namespace detail {

DecodeWorkspaceLayout decode_workspace_layout(int32_t num_seqs, int32_t num_qo_heads,
                                              int32_t head_dim, int32_t num_splits) {
  const size_t rows = static_cast<size_t>(num_seqs) * static_cast<size_t>(num_qo_heads);
  DecodeWorkspaceLayout w;
  w.lse_log2_offset = align_up(kSplitCounterCapacity * sizeof(int32_t));
  size_t end = w.lse_log2_offset + align_up(rows * sizeof(float));
  if (num_splits > 1) {
    w.partial_lse_offset = end;
    end += align_up(static_cast<size_t>(num_splits) * rows * sizeof(float));
    w.partial_o_offset = end;
    end += align_up(static_cast<size_t>(num_splits) * rows * static_cast<size_t>(head_dim) *
                    sizeof(float));
  }
  w.total_bytes = end;
  return w;
}

}  // namespace detail

size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_qo_heads, int32_t head_dim,
                                        int32_t max_splits) {
  return detail::decode_workspace_layout(num_seqs, num_qo_heads, head_dim,
                                         max_splits > 1 ? max_splits : 1)
      .total_bytes;
}

Status decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(params));
  if (params.layout.num_seqs == 0) return Status::Ok();
  return dispatch_attention_dtypes(params.qo_dtype, params.cache.dtype, [&]<DType kQ, DType kKv>() {
    auto run = [&]<int32_t kHeadDim>() {
      return detail::run_decode_attention<kQ, kKv, kHeadDim>(params, stream);
    };
    if constexpr (is_quantized_kv(kKv) || kKv == kInt4KvDType) {
      return dispatch_value<kQuantizedKvHeadDims>(params.cache.head_dim, "head_dim", run);
    } else {
      return dispatch_value<kAttentionHeadDims>(params.cache.head_dim, "head_dim", run);
    }
  });
}

}  // namespace strata::cuda
