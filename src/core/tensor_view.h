#pragma once
// TensorView: a non-owning, read-only view of a dense row-major tensor (weights in an mmaped
// checkpoint, or in a buffer the model owns). Kernels take these instead of model objects.

#include <array>
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"

namespace strata {

struct TensorView {
  static constexpr int kMaxRank = 4;

  const void* data = nullptr;
  DType dtype = DType::kF32;
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> shape{};  // shape[0 .. rank)

  int64_t dim(int32_t i) const {
    STRATA_CHECK(i >= 0 && i < rank, "TensorView::dim index out of range");
    return shape[static_cast<size_t>(i)];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; ++i) n *= shape[static_cast<size_t>(i)];
    return n;
  }
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
};

// Reads element idx of a float-typed view (F32, BF16, F16) as fp32.
inline float load_as_f32(const void* data, DType dtype, int64_t idx) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[idx];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kI4: break;
  }
  STRATA_CHECK(false, "load_as_f32: not a float weight dtype (F32, BF16, F16)");
  return 0.0f;
}

}  // namespace strata
