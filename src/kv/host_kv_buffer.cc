#include "kv/host_kv_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/check.h"

namespace strata::kv {

void HostKvBuffer::AlignedFree::operator()(std::byte* p) const { std::free(p); }

HostKvBuffer::Bytes HostKvBuffer::allocate_zeroed(size_t bytes) {
  constexpr size_t kAlign = 4096;  // a page: the disk tier reads into slots with O_DIRECT
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Bytes(p);
}

HostKvBuffer::HostKvBuffer(const KvLayout& layout, int32_t num_blocks)
    : layout_(layout), num_blocks_(num_blocks) {
  STRATA_CHECK(num_blocks >= 1, "a KV buffer holds at least the null block");
  data_ = allocate_zeroed(static_cast<size_t>(layout.pool_bytes(num_blocks)));
}

}  // namespace strata::kv
