#pragma once
// MappedFile: a whole file mapped read-only into memory (checkpoints, tokenizer files).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace strata {

// Owns one read-only, private mmap of a whole regular file and unmaps it on destruction.
// Invariants: bytes() spans exactly the file's size at open time; an empty file (or a moved-from
// object) has size 0 and a null data pointer, and nothing is mapped. The mapping's address never
// changes while the object lives, so pointers into bytes() stay valid across moves of the owner.
// Move-only; const methods are safe to call from any thread. Cost: open() is one open/fstat/mmap
// (no reads: pages are faulted in on first touch); destruction is one munmap.
class MappedFile {
 public:
  // Maps `path`. Throws strata::Error naming the path and the reason (missing, unreadable, not a
  // regular file, mmap failure).
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;  // empty: size 0, nothing mapped
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size);
  void reset() noexcept;

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
