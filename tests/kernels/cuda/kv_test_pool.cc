#include "kv_test_pool.h"

#include <span>

#include "cuda_test_util.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/query_codes.h"

namespace strata::cuda::testing {
namespace {

float fp8_max(DType d) { return d == DType::kF8E4M3 ? 448.0f : 57344.0f; }

uint8_t fp8_code(float x, DType d) {
  return d == DType::kF8E4M3 ? f32_to_fp8_e4m3(x) : f32_to_fp8_e5m2(x);
}

}  // namespace

DType attention_qo_dtype(DType kv_dtype) {
  return is_quantized_kv(kv_dtype) ? DType::kBF16 : kv_dtype;
}

kv::KvLayout test_kv_layout(DType dtype, int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                            int32_t block_size) {
  kv::KvStaticScales scales;
  if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
    for (int32_t l = 0; l < num_layers; ++l) {
      scales.k.push_back((1.3f + 0.1f * l) / fp8_max(dtype));
      scales.v.push_back((0.8f + 0.1f * l) / fp8_max(dtype));
    }
  }
  return kv::KvLayout(kv::KvSpec{num_layers, num_kv_heads, head_dim, dtype}, block_size, scales);
}

std::vector<uint16_t> random_kv_pool(const kv::KvLayout& layout, int32_t num_blocks,
                                     std::mt19937_64& rng) {
  const DType dtype = layout.spec().dtype;
  const size_t bytes = static_cast<size_t>(layout.pool_bytes(num_blocks));
  if (!is_quantized_kv(dtype)) return random_halves(bytes / 2, dtype, -1.0f, 1.0f, rng);
  std::vector<uint16_t> pool(bytes / 2);
  auto* b = reinterpret_cast<uint8_t*>(pool.data());
  if (dtype == DType::kI8) {
    std::uniform_int_distribution<int> code(-127, 127);
    for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(static_cast<int8_t>(code(rng)));
    // Scale areas: every (block, layer, head, token) of K and V.
    std::uniform_real_distribution<float> scale(0.002f, 0.012f);
    for (int32_t l = 0; l < layout.spec().num_layers; ++l) {
      const PagedKvCacheView view = layout.layer_view(pool.data(), l);
      for (int32_t blk = 0; blk < num_blocks; ++blk) {
        for (int32_t h = 0; h < view.num_kv_heads; ++h) {
          for (int32_t t = 0; t < view.block_size; ++t) {
            const int64_t at = view.scale_offset(blk, h, t);
            static_cast<uint16_t*>(view.k_scale_data)[at] = f32_to_f16(scale(rng));
            static_cast<uint16_t*>(view.v_scale_data)[at] = f32_to_f16(scale(rng));
          }
        }
      }
    }
  } else {
    // Codes of uniform [-1, 1) values at the fp8 range; the layers' scales make them ~[-1.3, 1.3).
    std::uniform_real_distribution<float> x(-fp8_max(dtype), fp8_max(dtype));
    for (size_t i = 0; i < bytes; ++i) b[i] = fp8_code(x(rng), dtype);
  }
  return pool;
}

double kv_element(const PagedKvCacheView& cache, bool v, int32_t block, int32_t kv_head,
                  int32_t token, int32_t e) {
  const int64_t at = cache.offset(block, kv_head, token) + e;
  const void* data = v ? cache.v_data : cache.k_data;
  switch (cache.dtype) {
    case DType::kBF16:
    case DType::kF16:
      return to_f32(static_cast<const uint16_t*>(data)[at], cache.dtype);
    case DType::kF8E4M3:
      return static_cast<double>(fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[at])) *
             (v ? cache.v_scale : cache.k_scale);
    case DType::kF8E5M2:
      return static_cast<double>(fp8_e5m2_to_f32(static_cast<const uint8_t*>(data)[at])) *
             (v ? cache.v_scale : cache.k_scale);
    case DType::kI8: {
      const auto* scales =
          static_cast<const uint16_t*>(v ? cache.v_scale_data : cache.k_scale_data);
      return static_cast<double>(static_cast<const int8_t*>(data)[at]) *
             static_cast<double>(f16_to_f32(scales[cache.scale_offset(block, kv_head, token)]));
    }
    default:
      ADD_FAILURE() << "no test decoding for KV dtype " << dtype_name(cache.dtype);
      return 0.0;
  }
}

std::vector<double> attention_query_row(const uint16_t* q, int32_t d, DType qo_dtype,
                                        DType kv_dtype) {
  std::vector<double> out(static_cast<size_t>(d));
  for (int32_t e = 0; e < d; ++e) out[e] = to_f32(q[e], qo_dtype);
  round_query_row(std::span<double>(out), kv_dtype);
  return out;
}

}  // namespace strata::cuda::testing
