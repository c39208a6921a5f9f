#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace strata {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// Closes a file descriptor when it goes out of scope (the mapping outlives the descriptor).
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

[[noreturn]] void fail_errno(const char* verb, const std::filesystem::path& path, int err) {
  throw Error(std::string("cannot ") + verb + " '" + path.string() + "': " + errno_text(err) +
              (err == ELOOP ? " (a symlink loop?)" : ""));
}

// Opens `path` for reading and checks that it is a regular file: -1 when it does not exist and
// `missing_ok`; throws for everything else that is wrong. O_NONBLOCK: opening a FIFO must not
// wait for a writer before fstat can refuse it (it changes nothing for regular files).
int open_regular(const std::filesystem::path& path, bool missing_ok, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && missing_ok) return -1;
    fail_errno("open", path, err);
  }
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_errno("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + path.string() + "': it is " + kind_of(st.st_mode) +
                ", not a regular file");
  }
  return fd;
}

}  // namespace

MappedFile MappedFile::map(const std::filesystem::path& path, int fd, size_t size) {
  FdCloser closer(fd);
  if (size == 0) return MappedFile(path, nullptr, 0);  // mmap rejects length 0
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    const int err = errno;
    throw Error("cannot mmap '" + path.string() + "' (" + std::to_string(size) +
                " bytes): " + errno_text(err));
  }
  return MappedFile(path, static_cast<const uint8_t*>(addr), size);
}

MappedFile MappedFile::open(const std::filesystem::path& path) {
  struct stat st {};
  const int fd = open_regular(path, /*missing_ok=*/false, st);
  return map(path, fd, static_cast<size_t>(st.st_size));
}

std::optional<MappedFile> MappedFile::open_if_exists(const std::filesystem::path& path) {
  struct stat st {};
  const int fd = open_regular(path, /*missing_ok=*/true, st);
  if (fd < 0) return std::nullopt;
  return map(path, fd, static_cast<size_t>(st.st_size));
}

uint64_t MappedFile::regular_file_bytes(const std::filesystem::path& path) {
  struct stat st {};
  const int fd = open_regular(path, /*missing_ok=*/false, st);
  ::close(fd);
  return static_cast<uint64_t>(st.st_size);
}

bool file_exists(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

MappedFile::MappedFile(std::filesystem::path path, const uint8_t* data, size_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) {
    // const_cast: munmap takes void*; the pages were mapped by this object and are only unmapped.
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

}  // namespace strata
