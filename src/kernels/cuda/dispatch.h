#pragma once
// The supported kernel configurations, declared once as constexpr arrays that launchers dispatch
// over and tests sweep, and the C++20 template-lambda dispatchers that turn a run-time value into
// a compile-time one. A value outside its set returns Status::Unsupported: it never falls through
// to a silent no-op (STYLE.md, "Kernels"). Host-only; no device code.

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

// 16-bit KV cache element types: attention reads them with q and o of the same dtype.
inline constexpr std::array<DType, 2> kKvDTypes = {DType::kBF16, DType::kF16};

// Quantized KV cache element types (docs/kv-quant.md): kv_append quantizes into them from bf16 /
// fp16 rows, attention reads their codes with q and o of a dtype in kQuantizedKvQoDTypes (the GPU
// engine's activations) and head dims in kQuantizedKvHeadDims.
inline constexpr std::array<DType, 3> kQuantizedKvDTypes = {DType::kF8E4M3, DType::kF8E5M2,
                                                           DType::kI8};
inline constexpr std::array<DType, 1> kQuantizedKvQoDTypes = {DType::kBF16};
inline constexpr std::array<int32_t, 2> kQuantizedKvHeadDims = {64, 128};

constexpr bool is_quantized_kv(DType d) {
  return d == DType::kF8E4M3 || d == DType::kF8E5M2 || d == DType::kI8;
}

// INT4 (KIVI; docs/kv-quant.md "INT4"): codes two per byte with per-block statistics, read with
// each sequence's newest blocks at full precision from the newest-blocks group's pool
// (DecodeAttentionParams::newest). Same q/o dtypes and head dims as kQuantizedKvDTypes; kept out
// of that set because its append and attention take the newest blocks too.
inline constexpr DType kInt4KvDType = DType::kI4;

// Head dims with instantiated attention kernels for 16-bit caches (256: Gemma 3); 96 behind
// STRATA_CUDA_EXTRA_HEAD_DIMS.
#ifdef STRATA_CUDA_EXTRA_HEAD_DIMS
inline constexpr std::array<int32_t, 4> kAttentionHeadDims = {64, 96, 128, 256};
#else
inline constexpr std::array<int32_t, 3> kAttentionHeadDims = {64, 128, 256};
#endif

// Block sizes (tokens per block) the kernels accept; the pool's block_size is one of these.
inline constexpr std::array<int32_t, 5> kKvBlockSizes = {8, 16, 32, 64, 128};

template <typename T, size_t N>
constexpr bool contains(const std::array<T, N>& set, T value) {
  for (const T& v : set) {
    if (v == value) return true;
  }
  return false;
}

// Calls f.template operator()<kSet[i]>() for the i with kSet[i] == value; Unsupported if none.
//   dispatch_value<kAttentionHeadDims>(head_dim, "head_dim", [&]<int32_t kHeadDim>() { ... });
template <const auto& kSet, typename F>
Status dispatch_value(int64_t value, const char* what, F&& f) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    Status result = Status::Unsupported(std::string(what) + " = " + std::to_string(value) +
                                        " has no CUDA kernel instance");
    static_cast<void>(
        ((static_cast<int64_t>(kSet[I]) == value ? (result = f.template operator()<kSet[I]>(), true)
                                                 : false) ||
         ...));
    return result;
  }
  (std::make_index_sequence<kSet.size()>{});
}

// Calls f.template operator()<kDType>() for a KV dtype in kKvDTypes; Unsupported otherwise.
template <typename F>
Status dispatch_kv_dtype(DType dtype, F&& f) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    Status result = Status::Unsupported("KV dtype " + std::string(dtype_name(dtype)) +
                                        " has no CUDA kernel instance");
    static_cast<void>(
        ((kKvDTypes[I] == dtype ? (result = f.template operator()<kKvDTypes[I]>(), true) : false) ||
         ...));
    return result;
  }
  (std::make_index_sequence<kKvDTypes.size()>{});
}

// Bytes of one unit of a view's strides: the element size, or 1 for INT4 (whose views count
// bytes; paged_kv.h).
inline int64_t kv_stride_unit_bytes(DType dtype) {
  return dtype == DType::kI4 ? 1 : dtype_size(dtype);
}

// What a quantized view must carry before a kernel reads or writes it: positive finite FP8
// scales, INT8 scale pointers, INT4 scale and zero-point pointers (16-byte aligned, as every
// layer area of the pool is, with strides in whole 16-byte vectors).
inline Status validate_kv_scales(const PagedKvCacheView& c) {
  if (c.dtype == DType::kI4) {
    const void* stats[] = {c.k_scale_data, c.v_scale_data, c.k_zero_data, c.v_zero_data};
    for (const void* s : stats) {
      if (s == nullptr || reinterpret_cast<uintptr_t>(s) % 16 != 0) {
        return Status::InvalidArgument(
            "an int4 KV cache needs 16-byte aligned scale and zero-point areas (PagedKvCacheView)");
      }
    }
    if (c.scale_block_stride % 8 != 0 || c.scale_head_stride % 8 != 0 ||
        c.k_stat_head_stride % 8 != 0 || c.k_stat_head_stride < c.head_dim) {
      return Status::InvalidArgument("int4 KV statistics strides must be whole 16-byte vectors");
    }
  } else if (c.dtype == DType::kI8) {
    if (c.k_scale_data == nullptr || c.v_scale_data == nullptr ||
        reinterpret_cast<uintptr_t>(c.k_scale_data) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(c.v_scale_data) % 16 != 0 || c.scale_block_stride % 8 != 0 ||
        c.scale_head_stride % 8 != 0) {
      return Status::InvalidArgument(
          "an int8 KV cache needs 16-byte aligned per-token scale areas (PagedKvCacheView)");
    }
  } else if (c.dtype == DType::kF8E4M3 || c.dtype == DType::kF8E5M2) {
    if (!(c.k_scale > 0.0f && c.v_scale > 0.0f && c.k_scale < INFINITY && c.v_scale < INFINITY)) {
      return Status::InvalidArgument("an fp8 KV cache needs positive finite k_scale and v_scale");
    }
  }
  return Status::Ok();
}

// An INT4 attention launch's newest-blocks side (DecodeAttentionParams::newest): the layer's
// view in the query dtype with the cache's shape and 16-byte aligned rows, and the group's
// tables (kv_indptr, kv_indices, first_block) with R >= 1.
inline Status validate_int4_newest(const PagedKvCacheView& cache, const NewestBlocksView& newest,
                                   DType qo_dtype) {
  const PagedKvCacheView& r = newest.cache;
  if (r.dtype != qo_dtype || r.num_kv_heads != cache.num_kv_heads ||
      r.head_dim != cache.head_dim || r.block_size != cache.block_size || r.k_data == nullptr ||
      r.v_data == nullptr) {
    return Status::InvalidArgument(
        "attention over an int4 cache needs a newest-blocks view in the query dtype with the "
        "cache's KV heads, head_dim and block size");
  }
  const int64_t elem = dtype_size(r.dtype);
  if (reinterpret_cast<uintptr_t>(r.k_data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(r.v_data) % 16 != 0 || (r.block_stride * elem) % 16 != 0 ||
      (r.head_stride * elem) % 16 != 0 || (r.token_stride * elem) % 16 != 0) {
    return Status::InvalidArgument("the int4 cache's newest-blocks view must be 16-byte aligned");
  }
  const PagedKvLayout& l = newest.layout;
  if (l.kv_indptr == nullptr || l.kv_indices == nullptr || l.first_block == nullptr ||
      newest.blocks < 1) {
    return Status::InvalidArgument(
        "attention over an int4 cache needs the newest-blocks group's kv_indptr, kv_indices and "
        "first_block, and blocks >= 1");
  }
  return Status::Ok();
}

// Calls f.template operator()<kSet[i]>() for the dtype kSet[i] == dtype; Unsupported if none.
template <const auto& kSet, typename F>
Status dispatch_dtype(DType dtype, const char* what, F&& f) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    Status result = Status::Unsupported(std::string(what) + " " + std::string(dtype_name(dtype)) +
                                        " has no CUDA kernel instance");
    static_cast<void>(
        ((kSet[I] == dtype ? (result = f.template operator()<kSet[I]>(), true) : false) || ...));
    return result;
  }
  (std::make_index_sequence<kSet.size()>{});
}

// The (q/o dtype, KV dtype) pair of an attention kernel: f.template operator()<kQ, kKv>(). A
// 16-bit cache pairs with its own dtype (qo_dtype is not read); a quantized one (INT4 too) with
// qo_dtype.
template <typename F>
Status dispatch_attention_dtypes(DType qo_dtype, DType kv_dtype, F&& f) {
  if (kv_dtype == kInt4KvDType) {
    return dispatch_dtype<kQuantizedKvQoDTypes>(
        qo_dtype, "query dtype over a quantized cache",
        [&]<DType kQ>() { return f.template operator()<kQ, kInt4KvDType>(); });
  }
  if (is_quantized_kv(kv_dtype)) {
    return dispatch_dtype<kQuantizedKvDTypes>(kv_dtype, "KV dtype", [&]<DType kKv>() {
      return dispatch_dtype<kQuantizedKvQoDTypes>(
          qo_dtype, "query dtype over a quantized cache",
          [&]<DType kQ>() { return f.template operator()<kQ, kKv>(); });
    });
  }
  return dispatch_kv_dtype(kv_dtype, [&]<DType kKv>() { return f.template operator()<kKv, kKv>(); });
}

}  // namespace strata::cuda
