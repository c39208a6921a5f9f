#include "kv/disk_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

namespace strata::kv {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
constexpr const char* kSuffix = ".kvb";
constexpr const char* kTempSuffix = ".tmp";


// The block's bytes start at a multiple of this, so O_DIRECT can read them into an aligned slot.
constexpr int64_t kDataAlign = 4096;

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Writes all of data at offset; false on an error or a short write (errno set).
bool write_all(int fd, const void* data, size_t size, off_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

// Reads exactly size bytes at offset; false on an error or end of file.
bool read_all(int fd, void* data, size_t size, off_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

// Reads the pieces, which lie back to back in the file from offset 0, in one preadv where the
// kernel returns them whole (one request for the whole file), else piece by piece.
bool read_pieces(int fd, std::span<const iovec> pieces) {
  size_t total = 0;
  for (const iovec& v : pieces) total += v.iov_len;
  ssize_t n = -1;
  do {
    n = ::preadv(fd, pieces.data(), static_cast<int>(pieces.size()), 0);
  } while (n < 0 && errno == EINTR);
  if (n >= 0 && static_cast<size_t>(n) == total) return true;
  off_t at = 0;
  for (const iovec& v : pieces) {
    if (!read_all(fd, v.iov_base, v.iov_len, at)) return false;
    at += static_cast<off_t>(v.iov_len);
  }
  return true;
}

// Whether the page cache holds every page of the first `bytes` of the open file fd (mincore over
// a read-only mapping; false when that cannot be told, or the file is shorter).
bool cached(int fd, size_t bytes) {
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return false;
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  const bool all = ::mincore(map, bytes, resident.data()) == 0 &&
                   std::all_of(resident.begin(), resident.end(),
                               [](unsigned char r) { return (r & 1) != 0; });
  ::munmap(map, bytes);
  return all;
}

std::string ns_hex(uint64_t ns) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(ns));
  return buf;
}

// The hash a file name spells, or false.
bool parse_hash(const std::string& stem, BlockHash* hash) {
  if (stem.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    if (std::sscanf(stem.c_str() + 2 * i, "%2x", &v) != 1) return false;
    hash->bytes[i] = static_cast<uint8_t>(v);
  }
  return hash_hex(*hash) == stem;
}

}  // namespace

struct DiskTier::Header {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t ns;
  uint64_t block_bytes;
  uint64_t checksum;
  uint8_t hash[32];
};

std::string hash_hex(const BlockHash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    out[2 * i] = kDigits[hash.bytes[i] >> 4];
    out[2 * i + 1] = kDigits[hash.bytes[i] & 15];
  }
  return out;
}

DiskTier::DiskTier(std::filesystem::path path, uint64_t ns, int32_t block_size, int64_t block_bytes,
                   int64_t capacity_bytes)
    : path_(std::move(path)),
      ns_(ns),
      block_size_(block_size),
      block_bytes_(block_bytes),
      capacity_bytes_(capacity_bytes) {}

int64_t DiskTier::num_blocks() const {
  static_assert(sizeof(Header) == 72, "the header is 72 bytes on disk");
  const std::lock_guard lock(mu_);
  return static_cast<int64_t>(index_.size());
}

DiskTierStats DiskTier::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
}

void DiskTier::log_changes() {
  const std::lock_guard lock(mu_);
  if (log_changes_) return;
  log_changes_ = true;
  for (const BlockHash& hash : lru_) changes_.push_back({true, hash});
}

std::vector<DiskTier::Change> DiskTier::take_changes() {
  const std::lock_guard lock(mu_);
  std::vector<Change> out;
  out.swap(changes_);
  return out;
}

bool DiskTier::contains(const BlockHash& hash) const {
  const std::lock_guard lock(mu_);
  return index_.contains(hash);
}

void DiskTier::make_room() {
  while (!lru_.empty() &&
         static_cast<int64_t>(index_.size() + 1) * file_bytes() > capacity_bytes_) {
    drop(lru_.front());
    ++stats_.num_evictions;
  }
}

int64_t DiskTier::file_bytes_for(int32_t block_size, int64_t block_bytes) {
  const int64_t head = static_cast<int64_t>(sizeof(Header)) + int64_t{block_size} * 4;
  return (head + kDataAlign - 1) / kDataAlign * kDataAlign + block_bytes;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const std::string& dir, uint64_t ns,
                                                 int32_t block_size, int64_t block_bytes,
                                                 int64_t capacity_bytes) {
  if (dir.empty()) return Status::InvalidArgument("--kv-disk-path: an empty path");
  std::unique_ptr<DiskTier> tier(new DiskTier(std::filesystem::path(dir) / ns_hex(ns), ns,
                                              block_size, block_bytes, capacity_bytes));
  if (capacity_bytes < tier->file_bytes()) {
    return Status::InvalidArgument("--kv-disk-bytes " + std::to_string(capacity_bytes) +
                                   " holds no block (one takes " +
                                   std::to_string(tier->file_bytes()) + " bytes)");
  }
  std::error_code ec;
  std::filesystem::create_directories(tier->path_, ec);
  if (ec) {
    return Status::InvalidArgument("--kv-disk-path " + dir + ": " + ec.message());
  }
  // Index the files a previous process left, oldest first; drop interrupted writes and files
  // of the wrong size (their blocks would fail the checksum anyway).
  std::vector<std::pair<std::filesystem::file_time_type, BlockHash>> found;
  for (std::filesystem::directory_iterator it(tier->path_, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    BlockHash hash;
    std::error_code file_ec;
    const bool ours = p.extension() == kSuffix && parse_hash(p.stem().string(), &hash) &&
                      it->is_regular_file(file_ec) &&
                      static_cast<int64_t>(it->file_size(file_ec)) == tier->file_bytes();
    if (!ours || file_ec) {
      if (p.extension() == kTempSuffix || p.extension() == kSuffix) {
        std::filesystem::remove(p, file_ec);
      }
      continue;
    }
    found.emplace_back(it->last_write_time(file_ec), hash);
  }
  if (ec) return Status::Internal("--kv-disk-path " + dir + ": " + ec.message());
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::lock_guard lock(tier->mu_);
  for (const auto& [time, hash] : found) tier->remember(hash);
  while (static_cast<int64_t>(tier->index_.size()) * tier->file_bytes() > tier->capacity_bytes_) {
    tier->drop(tier->lru_.front());
    ++tier->stats_.num_evictions;
  }
  return tier;
}

std::filesystem::path DiskTier::file_of(const BlockHash& hash) const {
  return path_ / (hash_hex(hash) + kSuffix);
}

void DiskTier::remember(const BlockHash& hash) {
  const auto it = index_.find(hash);
  if (it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
    return;
  }
  index_.emplace(hash, lru_.insert(lru_.end(), hash));
  if (log_changes_) changes_.push_back({true, hash});
}

void DiskTier::drop(BlockHash hash) {
  const auto it = index_.find(hash);
  if (it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
    if (log_changes_) changes_.push_back({false, hash});
  }
  std::error_code ec;
  std::filesystem::remove(file_of(hash), ec);
}

Status DiskTier::put(const BlockHash& hash, std::span<const int32_t> tokens,
                     std::span<const std::byte> bytes, uint64_t checksum) {
  if (static_cast<int32_t>(tokens.size()) != block_size_ ||
      static_cast<int64_t>(bytes.size()) != block_bytes_) {
    return Status::InvalidArgument("disk tier: a block of the wrong size");
  }
  {
    const std::lock_guard lock(mu_);
    if (index_.contains(hash)) {
      remember(hash);
      return Status::Ok();
    }
    make_room();
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kTierFormatVersion;
  h.block_size = static_cast<uint32_t>(block_size_);
  h.ns = ns_;
  h.block_bytes = static_cast<uint64_t>(block_bytes_);
  h.checksum = checksum;
  std::memcpy(h.hash, hash.bytes.data(), sizeof(h.hash));
  const std::filesystem::path final_path = file_of(hash);
  const std::filesystem::path temp_path = path_ / (hash_hex(hash) + kTempSuffix);
  const auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    std::error_code ec;
    std::filesystem::remove(temp_path, ec);
    const std::lock_guard lock(mu_);
    ++stats_.num_write_errors;
    return Status::Internal(std::string("disk tier: ") + what + " " + temp_path.string() + ": " +
                            reason);
  };
  {
    const Fd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return fail("cannot create");
    const off_t tokens_at = sizeof(Header);
    const off_t bytes_at = data_offset();
    if (!write_all(fd.get(), &h, sizeof(h), 0) ||
        !write_all(fd.get(), tokens.data(), tokens.size_bytes(), tokens_at) ||
        !write_all(fd.get(), bytes.data(), bytes.size(), bytes_at)) {
      return fail("cannot write");
    }
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) return fail("cannot rename");
  const std::lock_guard lock(mu_);
  make_room();  // other puts may have filled it meanwhile
  remember(hash);
  ++stats_.num_writes;
  return Status::Ok();
}

bool DiskTier::may_read_direct(std::span<const std::byte> out) const {
  return direct_reads_.load(std::memory_order_relaxed) &&
         reinterpret_cast<uintptr_t>(out.data()) % kDataAlign == 0 && out.size() % kDataAlign == 0;
}

bool DiskTier::read_file(const std::filesystem::path& p, int fd, Header& h,
                         std::span<int32_t> stored, std::span<std::byte> out) {
  if (!may_read_direct(out)) {
    const iovec pieces[] = {{&h, sizeof(h)}, {stored.data(), stored.size_bytes()}};
    return read_pieces(fd, pieces) && read_all(fd, out.data(), out.size(), data_offset());
  }
  // The whole file in one request, its head (header, token ids, hole) into an aligned buffer:
  // copied from the page cache when it holds every page (a block written or read lately), else
  // by O_DIRECT. (RWF_NOWAIT would ask the cache without waiting, but it starts the readahead
  // it declines to wait for, and the disk would then read the block twice.)
  const auto head_bytes = static_cast<size_t>(data_offset());
  const std::unique_ptr<std::byte, decltype(&std::free)> head(
      static_cast<std::byte*>(std::aligned_alloc(kDataAlign, head_bytes)), &std::free);
  if (head == nullptr) return false;
  const iovec whole[] = {{head.get(), head_bytes}, {out.data(), out.size()}};
  const size_t total = head_bytes + out.size();
  ssize_t n = -1;
  if (cached(fd, total)) {
    do {
      n = ::preadv(fd, whole, 2, 0);
    } while (n < 0 && errno == EINTR);
  } else {
    const Fd direct(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    if (direct.get() < 0) {
      if (errno != EINVAL) return false;
      direct_reads_.store(false);  // the filesystem has no O_DIRECT
      return read_file(p, fd, h, stored, out);
    }
    do {
      n = ::preadv(direct.get(), whole, 2, 0);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(total)) {
      const std::lock_guard lock(mu_);
      ++stats_.num_direct_reads;
    }
  }
  // A truncated file comes back short (a read past the end returns what is there).
  if (n != static_cast<ssize_t>(total)) return false;
  std::memcpy(&h, head.get(), sizeof(h));
  std::memcpy(stored.data(), head.get() + sizeof(h), stored.size_bytes());
  return true;
}

Status DiskTier::get(const BlockHash& hash, std::span<const int32_t> tokens,
                     std::span<std::byte> out, uint64_t* checksum) {
  if (!contains(hash)) return Status::NotFound("disk tier: no such block");
  if (static_cast<int32_t>(tokens.size()) != block_size_ ||
      static_cast<int64_t>(out.size()) != block_bytes_) {
    return Status::InvalidArgument("disk tier: a block of the wrong size");
  }
  const std::filesystem::path p = file_of(hash);
  const auto bad = [&](const std::string& why) {
    const std::lock_guard lock(mu_);
    drop(hash);
    ++stats_.num_bad_reads;
    return Status::Internal("disk tier: " + p.string() + ": " + why + "; recomputing");
  };
  const Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return bad(std::strerror(errno));
  Header h{};
  std::vector<int32_t> stored(tokens.size());
  if (!read_file(p, fd.get(), h, stored, out)) return bad("truncated or unreadable");
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kTierFormatVersion ||
      h.block_size != static_cast<uint32_t>(block_size_) || h.ns != ns_ ||
      h.block_bytes != static_cast<uint64_t>(block_bytes_) ||
      std::memcmp(h.hash, hash.bytes.data(), sizeof(h.hash)) != 0) {
    return bad("not this block's header");
  }
  if (h.checksum != tier_checksum(out)) return bad("checksum mismatch");
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) {
    return Status::NotFound("disk tier: the block holds other tokens");
  }
  const std::lock_guard lock(mu_);
  if (!index_.contains(hash)) return Status::NotFound("disk tier: the block was dropped meanwhile");
  remember(hash);
  ++stats_.num_reads;
  if (checksum != nullptr) *checksum = h.checksum;
  return Status::Ok();
}

}  // namespace strata::kv
