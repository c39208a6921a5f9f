#include "kv/peer_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kv/peer_frames.h"

namespace strata::kv {
namespace {

constexpr char kHeaderMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'P', 'R'};
constexpr uint32_t kHeaderVersion = 1;
constexpr std::string_view kShmPrefix = "/strata-kv-";

void put_u64(std::byte* at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void put_u32(std::byte* at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const std::byte* at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return v;
}
uint32_t get_u32(const std::byte* at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(at[i]) << (8 * i);
  return v;
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// A name this module makes: the prefix, then digits, letters and '-' only.
bool valid_shm_name(std::string_view name) {
  if (name.size() <= kShmPrefix.size() || name.size() > 64 || !name.starts_with(kShmPrefix)) {
    return false;
  }
  for (const char c : name.substr(kShmPrefix.size())) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The names of regions whose owner died without unlinking them (SIGKILL): "/strata-kv-PID-..."
// of a PID no process has. One of a live process, whatever it is, is left alone.
void unlink_orphans() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string_view prefix = kShmPrefix.substr(1);
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (!name.starts_with(prefix) || !valid_shm_name("/" + std::string(name))) continue;
    const long pid = std::strtol(std::string(name.substr(prefix.size())).c_str(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::shm_unlink(("/" + std::string(name)).c_str());
  }
  ::closedir(dir);
}

class ShmRegion final : public PeerRegion {
 public:
  ShmRegion(std::string name, void* base, int64_t bytes, uint64_t id)
      : name_(std::move(name)), base_(base), bytes_(bytes), id_(id) {}
  ~ShmRegion() override {
    ::munmap(base_, static_cast<size_t>(bytes_));
    ::shm_unlink(name_.c_str());
  }
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  PeerRegionKind kind() const override { return PeerRegionKind::kSharedMemory; }
  const std::string& handle() const override { return name_; }
  uint64_t region_id() const override { return id_; }
  int64_t size_bytes() const override { return bytes_; }
  std::byte* slots() override { return static_cast<std::byte*>(base_) + kPeerRegionHeaderBytes; }

 private:
  std::string name_;
  void* base_;
  int64_t bytes_;
  uint64_t id_;
};

class ShmView final : public PeerRegionView {
 public:
  ShmView(const void* base, int64_t bytes) : base_(base), bytes_(bytes) {}
  ~ShmView() override { ::munmap(const_cast<void*>(base_), static_cast<size_t>(bytes_)); }
  ShmView(const ShmView&) = delete;
  ShmView& operator=(const ShmView&) = delete;

  int64_t size_bytes() const override { return bytes_; }
  const std::byte* data() const override { return static_cast<const std::byte*>(base_); }
  Status copy_out(int64_t offset, std::span<std::byte> out) override {
    if (offset < 0 || offset > bytes_ || static_cast<int64_t>(out.size()) > bytes_ - offset) {
      return Status::InvalidArgument("copy past the shared region's end");
    }
    std::memcpy(out.data(), static_cast<const std::byte*>(base_) + offset, out.size());
    return Status::Ok();
  }

 private:
  const void* base_;
  int64_t bytes_;
};

}  // namespace

const char* peer_region_kind_name(PeerRegionKind kind) {
  switch (kind) {
    case PeerRegionKind::kSharedMemory:
      return "shared memory";
    case PeerRegionKind::kCudaIpc:
      return "CUDA IPC";
  }
  return "unknown";
}

void encode_peer_region_header(const PeerRegionHeader& h, std::span<std::byte> out) {
  STRATA_CHECK(out.size() >= kPeerRegionHeaderUsedBytes, "a region header takes 32 bytes");
  std::memcpy(out.data(), kHeaderMagic, sizeof(kHeaderMagic));
  put_u32(out.data() + 8, kHeaderVersion);
  put_u32(out.data() + 12, static_cast<uint32_t>(h.kind));
  put_u64(out.data() + 16, h.region_id);
  put_u64(out.data() + 24, h.size_bytes);
}

Status check_peer_region_header(std::span<const std::byte> bytes, const PeerRegionHeader& want) {
  if (bytes.size() < kPeerRegionHeaderUsedBytes ||
      std::memcmp(bytes.data(), kHeaderMagic, sizeof(kHeaderMagic)) != 0 ||
      get_u32(bytes.data() + 8) != kHeaderVersion) {
    return Status::InvalidArgument("not a peer region");
  }
  if (get_u32(bytes.data() + 12) != static_cast<uint32_t>(want.kind) ||
      get_u64(bytes.data() + 16) != want.region_id ||
      get_u64(bytes.data() + 24) != want.size_bytes) {
    return Status::InvalidArgument("the peer region is another one than the record names");
  }
  return Status::Ok();
}

Result<std::unique_ptr<PeerRegion>> create_shm_peer_region(int64_t bytes) {
  if (bytes <= kPeerRegionHeaderBytes) {
    return Status::InvalidArgument("a peer region of " + std::to_string(bytes) +
                                   " bytes holds no slot");
  }
  unlink_orphans();
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(id));
  const std::string name = std::string(kShmPrefix) + suffix;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status::Unavailable(errno_text("shm_open " + name));
  if (::ftruncate(fd, bytes) != 0) {
    const Status s = Status::Unavailable(errno_text("ftruncate " + name));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  }
  void* base =
      ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return Status::Unavailable(errno_text("mmap " + name));
  }
  encode_peer_region_header(
      {PeerRegionKind::kSharedMemory, id, static_cast<uint64_t>(bytes)},
      std::span<std::byte>(static_cast<std::byte*>(base), kPeerRegionHeaderUsedBytes));
  return std::unique_ptr<PeerRegion>(new ShmRegion(name, base, bytes, id));
}

Result<std::unique_ptr<PeerRegionView>> open_shm_peer_region(std::string_view handle,
                                                             uint64_t region_id,
                                                             int64_t size_bytes) {
  // A name from the network: only one this module could have made is opened.
  if (!valid_shm_name(handle)) return Status::InvalidArgument("not a peer region's name");
  const std::string name(handle);
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return Status::Unavailable(errno_text("shm_open " + name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size != size_bytes || size_bytes < kPeerRegionHeaderBytes) {
    ::close(fd);
    return Status::InvalidArgument("the shared region " + name + " is not of " +
                                   std::to_string(size_bytes) + " bytes");
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(size_bytes), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return Status::Unavailable(errno_text("mmap " + name));
  auto view = std::make_unique<ShmView>(base, size_bytes);
  const Status header = check_peer_region_header(
      std::span<const std::byte>(static_cast<const std::byte*>(base), kPeerRegionHeaderUsedBytes),
      {PeerRegionKind::kSharedMemory, region_id, static_cast<uint64_t>(size_bytes)});
  if (!header.ok()) return header;
  return std::unique_ptr<PeerRegionView>(std::move(view));
}

PeerRegionOpener shm_peer_region_opener() {
  return [](PeerRegionKind kind, std::string_view handle, uint64_t region_id,
            int64_t size_bytes) -> Result<std::unique_ptr<PeerRegionView>> {
    if (kind != PeerRegionKind::kSharedMemory) {
      return Status::Unsupported(std::string("a ") + peer_region_kind_name(kind) +
                                 " region cannot be opened by this instance");
    }
    return open_shm_peer_region(handle, region_id, size_bytes);
  };
}

}  // namespace strata::kv
