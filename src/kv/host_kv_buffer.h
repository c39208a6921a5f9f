#pragma once
// HostKvBuffer: the KV pool's bytes in host memory, for the CPU backend. One 64-byte-aligned
// allocation of layout.pool_bytes(num_blocks), zero-filled, laid out by KvLayout; layer views are
// built here so kernels never compute a stride themselves. Move-only.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/paged_kv.h"
#include "kv/kv_layout.h"

namespace strata::kv {

class HostKvBuffer {
 public:
  HostKvBuffer(const KvLayout& layout, int32_t num_blocks);

  const KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t size_bytes() const { return layout_.pool_bytes(num_blocks_); }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }

  PagedKvCacheView layer_view(int32_t layer_idx) { return layout_.layer_view(data_.get(), layer_idx); }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };

  using Bytes = std::unique_ptr<std::byte[], AlignedFree>;
  static Bytes allocate_zeroed(size_t bytes);

  KvLayout layout_;
  int32_t num_blocks_;
  Bytes data_;
};

}  // namespace strata::kv
