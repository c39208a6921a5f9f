#include "kernels/cuda/kv_append.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

struct KvAppendArgs {
  const uint4* k;
  const uint4* v;
  int64_t k_token_stride;  // in 16-byte vectors
  int64_t v_token_stride;
  const int64_t* slot_mapping;
  uint4* k_cache;
  uint4* v_cache;
  int64_t block_stride;  // in 16-byte vectors
  int64_t head_stride;
  int64_t token_stride;
  int32_t block_size;
  int32_t num_kv_heads;
  int32_t vecs_per_head;
  int64_t total_vecs;  // num_tokens * num_kv_heads * vecs_per_head
};

// One 16-byte vector per thread; consecutive threads cover one head's row, then the next head, so
// both the source row and each destination row are read and written coalesced.
__global__ void kv_append_kernel(const __grid_constant__ KvAppendArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total_vecs;
       i += stride) {
    const int64_t per_token = static_cast<int64_t>(a.num_kv_heads) * a.vecs_per_head;
    const int64_t token = i / per_token;
    const int32_t rest = static_cast<int32_t>(i - token * per_token);
    const int32_t head = rest / a.vecs_per_head;
    const int32_t vec = rest - head * a.vecs_per_head;
    const int64_t slot = a.slot_mapping[token];
    if (slot < 0) continue;
    const int64_t block = slot / a.block_size;
    const int64_t dst = block * a.block_stride + head * a.head_stride +
                        (slot - block * a.block_size) * a.token_stride + vec;
    a.k_cache[dst] = a.k[token * a.k_token_stride + rest];
    a.v_cache[dst] = a.v[token * a.v_token_stride + rest];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Status kv_append(const KvAppendParams& p, cudaStream_t stream) {
  const PagedKvCacheView& c = p.cache;
  if (!contains(kKvDTypes, c.dtype)) {
    return Status::Unsupported("KV dtype " + std::string(dtype_name(c.dtype)) +
                               " has no CUDA append kernel");
  }
  if (p.num_tokens < 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.block_size <= 0) {
    return Status::InvalidArgument("kv_append needs num_tokens >= 0 and a complete cache view");
  }
  if (p.num_tokens == 0) return Status::Ok();
  const int64_t elem = dtype_size(c.dtype);
  const int64_t row_bytes = c.head_dim * elem;
  if (row_bytes % 16 != 0) {
    return Status::Unsupported("kv_append needs head_dim * element size to be a multiple of 16");
  }
  if (p.k == nullptr || p.v == nullptr || p.slot_mapping == nullptr || c.k_data == nullptr ||
      c.v_data == nullptr) {
    return Status::InvalidArgument("kv_append needs k, v, slot_mapping and the cache");
  }
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  if (p.k_token_stride < row || p.v_token_stride < row) {
    return Status::InvalidArgument("k/v token stride smaller than num_kv_heads * head_dim");
  }
  if (!aligned16(p.k) || !aligned16(p.v) || !aligned16(c.k_data) || !aligned16(c.v_data) ||
      (p.k_token_stride * elem) % 16 != 0 || (p.v_token_stride * elem) % 16 != 0 ||
      (c.block_stride * elem) % 16 != 0 || (c.head_stride * elem) % 16 != 0 ||
      (c.token_stride * elem) % 16 != 0) {
    return Status::InvalidArgument("kv_append pointers and strides must be 16-byte aligned");
  }
  const int64_t vec_elems = 16 / elem;
  KvAppendArgs a{};
  a.k = static_cast<const uint4*>(p.k);
  a.v = static_cast<const uint4*>(p.v);
  a.k_token_stride = p.k_token_stride / vec_elems;
  a.v_token_stride = p.v_token_stride / vec_elems;
  a.slot_mapping = p.slot_mapping;
  a.k_cache = static_cast<uint4*>(c.k_data);
  a.v_cache = static_cast<uint4*>(c.v_data);
  a.block_stride = c.block_stride / vec_elems;
  a.head_stride = c.head_stride / vec_elems;
  a.token_stride = c.token_stride / vec_elems;
  a.block_size = c.block_size;
  a.num_kv_heads = c.num_kv_heads;
  a.vecs_per_head = static_cast<int32_t>(row_bytes / 16);
  a.total_vecs = static_cast<int64_t>(p.num_tokens) * c.num_kv_heads * a.vecs_per_head;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(detail::ceil_div(a.total_vecs, kThreads), 65536);
  kv_append_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
