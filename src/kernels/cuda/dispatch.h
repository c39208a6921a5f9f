#pragma once
// The supported kernel configurations, declared once as constexpr arrays that launchers dispatch
// over and tests sweep, and the C++20 template-lambda dispatchers that turn a run-time value into
// a compile-time one. A value outside its set returns Status::Unsupported: it never falls through
// to a silent no-op (STYLE.md, "Kernels"). Host-only; no device code.

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda {

// KV cache element types with CUDA kernels (quantized KV comes later and adds entries here).
inline constexpr std::array<DType, 2> kKvDTypes = {DType::kBF16, DType::kF16};

// Head dims with instantiated attention kernels; 96 and 256 behind STRATA_CUDA_EXTRA_HEAD_DIMS.
#ifdef STRATA_CUDA_EXTRA_HEAD_DIMS
inline constexpr std::array<int32_t, 4> kAttentionHeadDims = {64, 96, 128, 256};
#else
inline constexpr std::array<int32_t, 2> kAttentionHeadDims = {64, 128};
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

}  // namespace strata::cuda
