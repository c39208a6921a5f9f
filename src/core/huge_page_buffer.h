#pragma once
// HugePageBuffer: anonymous memory for large read-mostly data (model weights), backed by
// transparent huge pages where the kernel allows them.

#include <cstddef>
#include <string_view>

namespace strata {

// Owns one private anonymous mapping of at least `bytes` bytes whose start is aligned to 2 MiB,
// advised MADV_HUGEPAGE, so the kernel backs it with 2 MiB pages (one TLB entry where a file
// mapping's page cache needs 512) when transparent huge pages are "always" or "madvise". Unmapped
// on destruction. Invariants: data() is 2 MiB-aligned (null for an empty or moved-from buffer)
// and stays put across moves. Move-only; not thread-safe for writes. Cost: the constructor maps
// and advises only (no page is touched); the first write to each page pays its fault and zeroing,
// so an owner fills the buffer once at start-up, never on the hot path.
class HugePageBuffer {
 public:
  static constexpr size_t kAlign = size_t{2} << 20;

  HugePageBuffer() = default;
  // Throws strata::Error naming `what` when the memory cannot be mapped.
  HugePageBuffer(size_t bytes, std::string_view what);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset() noexcept;
  void* map_ = nullptr;  // the whole mapping (larger than size_ by the alignment slack)
  size_t map_bytes_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
