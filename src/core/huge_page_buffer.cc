#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace strata {

HugePageBuffer::HugePageBuffer(size_t bytes, std::string_view what) {
  if (bytes == 0) return;
  // Over-map by the alignment and use the aligned middle: mmap only promises 4 KiB alignment, and
  // a huge page needs a 2 MiB-aligned virtual range.
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded < bytes || rounded + kAlign < rounded) {
    throw Error(std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  }
  map_bytes_ = rounded + kAlign;
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    map_bytes_ = 0;
    throw Error(std::string(what) + ": cannot allocate " + std::to_string(bytes) +
                " bytes of anonymous memory (" + std::strerror(err) +
                "); --mmap serves the weights from the file's page cache instead");
  }
  map_ = p;
  const auto base = reinterpret_cast<uintptr_t>(p);
  data_ = static_cast<std::byte*>(p) + ((kAlign - base % kAlign) % kAlign);
  size_ = bytes;
  // Advice only: a kernel without transparent huge pages keeps 4 KiB pages, which still work.
  (void)madvise(data_, rounded, MADV_HUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() { reset(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugePageBuffer::reset() noexcept {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace strata
