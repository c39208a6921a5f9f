#pragma once
// MappedFile: a whole file mapped read-only into memory (checkpoints, tokenizer files, configs,
// traces): the one way Strata reads a file the user names.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

namespace strata {

// Owns one read-only, private mmap of a whole regular file and unmaps it on destruction.
// Invariants: bytes() spans exactly the file's size at open time; an empty file (or a moved-from
// object) has size 0 and a null data pointer, and nothing is mapped. The mapping's address never
// changes while the object lives, so pointers into bytes() stay valid across moves of the owner.
// Move-only; const methods are safe to call from any thread. Cost: open() is one open/fstat/mmap
// (no reads: pages are faulted in on first touch); destruction is one munmap.
//
// Only regular files are mapped: a directory, a device (/dev/zero would read forever), a FIFO (a
// read would wait for a writer; it is opened non-blocking, so opening it does not wait either) or
// a socket is refused by name, as is a symlink loop.
class MappedFile {
 public:
  // Maps `path`. Throws strata::Error naming the path and the reason (missing, unreadable, a
  // symlink loop, a directory or another kind of file that is not regular, mmap failure).
  static MappedFile open(const std::filesystem::path& path);
  // As open(), but nullopt when nothing is at `path` (a dangling symlink counts as nothing):
  // for optional files, where anything else that is there must still be a readable file.
  static std::optional<MappedFile> open_if_exists(const std::filesystem::path& path);
  // The size of the regular file at `path` without mapping it; throws as open() does.
  static uint64_t regular_file_bytes(const std::filesystem::path& path);

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
  // The bytes as text (JSON, JSONL).
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size);
  // Maps `size` bytes of the open regular file `fd` and closes it.
  static MappedFile map(const std::filesystem::path& path, int fd, size_t size);
  void reset() noexcept;

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Whether anything is at `path` in the sense open_if_exists uses: false only when opening it
// would fail with "no such file" (a dangling symlink included). A directory, a device or a symlink
// loop is there, so that opening it names the problem instead of calling the file missing.
bool file_exists(const std::filesystem::path& path);

}  // namespace strata
