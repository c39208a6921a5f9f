#pragma once
// The attention benchmarks' K/V: random bf16 rows (uniform in [-1, 1), random_fill's seeded
// values) appended through kv_append, which quantizes them into a quantized cache, at the given
// slots; for an INT4 cache also into its newest-blocks pool at the same slots (one slot mapping
// and one block table serve both). Waits for the append before the rows are freed.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "core/paged_kv.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/random_fill.h"

namespace strata::cuda {

// row_elems: K (and V) elements per token, KV heads x head dim. newest: nullptr, or the view of
// the INT4 cache's newest-blocks pool.
inline Status append_random_rows(const PagedKvCacheView& cache, const PagedKvCacheView* newest,
                                 std::span<const int64_t> slots, int64_t row_elems, uint64_t k_seed,
                                 uint64_t v_seed, cudaStream_t stream) {
  const auto tokens = static_cast<int64_t>(slots.size());
  const int64_t elems = tokens * row_elems;
  Result<DeviceBuffer> k_rows = DeviceBuffer::allocate(static_cast<size_t>(elems) * 2);
  Result<DeviceBuffer> v_rows = DeviceBuffer::allocate(static_cast<size_t>(elems) * 2);
  Result<DeviceBuffer> d_slots = DeviceBuffer::allocate(slots.size_bytes());
  if (!k_rows.ok()) return k_rows.status();
  if (!v_rows.ok()) return v_rows.status();
  if (!d_slots.ok()) return d_slots.status();
  STRATA_RETURN_IF_ERROR(
      random_fill({k_rows->data(), DType::kBF16, elems, k_seed, -1, 1}, stream));
  STRATA_RETURN_IF_ERROR(
      random_fill({v_rows->data(), DType::kBF16, elems, v_seed, -1, 1}, stream));
  if (cudaMemcpy(d_slots->data(), slots.data(), slots.size_bytes(), cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    return Status::Internal("append_random_rows: copying the slot mapping");
  }
  KvAppendParams ap;
  ap.cache = cache;
  ap.k = k_rows->data();
  ap.v = v_rows->data();
  ap.src_dtype = DType::kBF16;
  ap.k_token_stride = ap.v_token_stride = row_elems;
  ap.slot_mapping = d_slots->as<int64_t>();
  ap.num_tokens = static_cast<int32_t>(tokens);
  if (newest != nullptr) {
    ap.newest = *newest;
    ap.newest_slot_mapping = d_slots->as<int64_t>();
  }
  STRATA_RETURN_IF_ERROR(kv_append(ap, stream));
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return Status::Internal("append_random_rows: the append failed on the device");
  }
  return Status::Ok();
}

}  // namespace strata::cuda
