#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/elementwise_avx512.h"

namespace strata::cpu {
namespace {

// Element-wise loops get chunks of at least this many elements per thread.
constexpr int64_t kMinElemsPerChunk = 16384;

Status validate_elementwise(const char* name, const void* a, const void* b, const void* out,
                            int64_t n) {
  if (n < 0) return Status::InvalidArgument(std::string(name) + ": negative n");
  if (n > 0 && (a == nullptr || b == nullptr || out == nullptr)) {
    return Status::InvalidArgument(std::string(name) + ": null pointer");
  }
  return Status::Ok();
}

Status validate_embedding(const EmbeddingParams& p) {
  const TensorView& table = p.table;
  if (table.empty() || table.rank != 2 || table.shape[0] <= 0 || table.shape[1] <= 0) {
    return Status::InvalidArgument("embedding: table must be a non-null [vocab, hidden] tensor");
  }
  if (!is_cpu_float_dtype(table.dtype)) {
    return Status::Unsupported("embedding: table dtype " + std::string(dtype_name(table.dtype)) +
                               " (supported: F32, BF16, F16)");
  }
  if (p.num_tokens < 0) return Status::InvalidArgument("embedding: negative num_tokens");
  if (p.num_tokens > 0 && (p.token_ids == nullptr || p.out == nullptr)) {
    return Status::InvalidArgument("embedding: token_ids and out must not be null");
  }
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int32_t id = p.token_ids[t];
    if (id < 0 || id >= table.shape[0]) {
      return Status::OutOfRange("embedding: token " + std::to_string(t) + " has id " +
                                std::to_string(id) + " outside [0, " +
                                std::to_string(table.shape[0]) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status silu_and_mul(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate_elementwise("silu_and_mul", gate, up, out, n));
  const CpuIsa isa = best_cpu_isa();
  if (isa != CpuIsa::kPortable) {
    // A vectorized exp (elementwise_avx512.h, elementwise_avx2.h); each element still depends on
    // itself alone.
    const auto kernel =
        isa == CpuIsa::kAvx512 ? detail::silu_and_mul_avx512 : detail::silu_and_mul_avx2;
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          kernel(gate + begin, up + begin, out + begin, end - begin);
        },
        kMinElemsPerChunk);
    return Status::Ok();
  }
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = gate[i];
          out[i] = (g / (1.0f + std::exp(-g))) * up[i];
        }
      },
      kMinElemsPerChunk);
  return Status::Ok();
}

Status gelu_tanh_and_mul(const float* gate, const float* up, float* out, int64_t n,
                         ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate_elementwise("gelu_tanh_and_mul", gate, up, out, n));
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        const double k_beta = std::sqrt(2.0 / std::numbers::pi);
        for (int64_t i = begin; i < end; ++i) {
          const double g = gate[i];
          const double gelu = 0.5 * g * (1.0 + std::tanh(k_beta * (g + 0.044715 * g * g * g)));
          out[i] = static_cast<float>(gelu) * up[i];
        }
      },
      kMinElemsPerChunk);
  return Status::Ok();
}

Status add_inplace(float* dst, const float* src, int64_t n, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate_elementwise("add_inplace", dst, src, dst, n));
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
      },
      kMinElemsPerChunk);
  return Status::Ok();
}

Status embedding(const EmbeddingParams& params, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate_embedding(params));
  const int64_t hidden = params.table.shape[1];
  pool.parallel_for(
      params.num_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* row = params.out + t * hidden;
          detail::load_f32(params.table.data, params.table.dtype, params.token_ids[t] * hidden,
                           hidden, row);
          if (params.scale != 1.0f) {
            for (int64_t i = 0; i < hidden; ++i) row[i] *= params.scale;
          }
        }
      },
      std::max<int64_t>(1, kMinElemsPerChunk / hidden));
  return Status::Ok();
}

}  // namespace strata::cpu
