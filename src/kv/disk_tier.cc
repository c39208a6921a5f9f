#include "kv/disk_tier.h"

#include <fcntl.h>
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

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t ns;
  uint64_t block_bytes;
  uint64_t checksum;
  uint8_t hash[32];
};
static_assert(sizeof(Header) == 72, "the header is 72 bytes on disk");

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
  const std::lock_guard lock(mu_);
  return static_cast<int64_t>(index_.size());
}

DiskTierStats DiskTier::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
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

int64_t DiskTier::file_bytes() const {
  return static_cast<int64_t>(sizeof(Header)) + int64_t{block_size_} * 4 + block_bytes_;
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
}

void DiskTier::drop(BlockHash hash) {
  const auto it = index_.find(hash);
  if (it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
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
    const off_t bytes_at = tokens_at + static_cast<off_t>(tokens.size_bytes());
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
  const off_t tokens_at = sizeof(Header);
  const off_t bytes_at = tokens_at + static_cast<off_t>(stored.size() * 4);
  if (!read_all(fd.get(), &h, sizeof(h), 0) ||
      !read_all(fd.get(), stored.data(), stored.size() * 4, tokens_at) ||
      !read_all(fd.get(), out.data(), out.size(), bytes_at)) {
    return bad("truncated or unreadable");
  }
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
