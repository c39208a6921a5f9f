#pragma once
// A peer region: memory a prefill instance shares with the decode instances on its machine, so
// that a block crosses by one copy out of it instead of as a value over the peer transport
// (docs/kv.md, "Disaggregation", "One machine"). Two kinds, behind the same two classes:
//
//   kind            owner (prefill instance)                reader (decode instance)
//   shared memory   shm_open + mmap of host memory (a CPU   shm_open of the name, mmap read-only,
//                   instance's pool is host memory)         memcpy into the pool
//   CUDA IPC        cudaMalloc + cudaIpcGetMemHandle        cudaIpcOpenMemHandle, device to device
//                   (src/model/cuda/cuda_peer_region.h)     into the pool (another process: it
//                                                           fails in-process)
//
// The reader's pool mover copies a slot from data() straight into a pool block
// (BlockMover::start_from_region); copy_out copies to host memory (the header's check, and a
// PeerSource without claim_slots).
//
// Layout: a header of kPeerRegionHeaderBytes (peer_frames.h), then slots of slot_bytes. The
// header holds "STRATAPR", a version, the kind, the region's id (random) and its size, written
// once by the owner; a reader checks them when it opens the region, so a handle that names other
// memory (a stale name, another region) is refused rather than read.
//
// What lies in the slots, and when a slot may be read, is PeerSlots' business (peer_slots.h);
// a region only holds bytes.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::kv {

enum class PeerRegionKind : uint32_t {
  kSharedMemory = 1,
  kCudaIpc = 2,
};

const char* peer_region_kind_name(PeerRegionKind kind);

// The region's own header, at offset 0.
struct PeerRegionHeader {
  PeerRegionKind kind = PeerRegionKind::kSharedMemory;
  uint64_t region_id = 0;
  uint64_t size_bytes = 0;
};
inline constexpr size_t kPeerRegionHeaderUsedBytes = 32;
void encode_peer_region_header(const PeerRegionHeader& h, std::span<std::byte> out);  // 32 bytes
// InvalidArgument unless bytes hold a header of kind, region_id and size_bytes.
Status check_peer_region_header(std::span<const std::byte> bytes, const PeerRegionHeader& want);

// The owner's side. Owns the memory; the destructor gives it back (the readers' mappings stay
// valid until they close them, as the OS keeps mapped memory alive). Not thread-safe itself:
// its bytes are written by one mover at a time.
class PeerRegion {
 public:
  virtual ~PeerRegion() = default;
  virtual PeerRegionKind kind() const = 0;
  // What a reader opens (a shm name; a cudaIpcMemHandle_t's 64 bytes), 1..256 bytes.
  virtual const std::string& handle() const = 0;
  virtual uint64_t region_id() const = 0;
  virtual int64_t size_bytes() const = 0;
  // The first slot's byte: host memory (shared memory) or a device pointer (CUDA IPC), which the
  // pool's BlockMover writes (BlockMover::to_region).
  virtual std::byte* slots() = 0;
};

// A reader's side: a peer's region, opened. copy_out from any thread, concurrently.
class PeerRegionView {
 public:
  virtual ~PeerRegionView() = default;
  virtual int64_t size_bytes() const = 0;
  // The region's first byte in this process: host memory (shared memory) or a device pointer
  // (CUDA IPC), from which the pool's mover copies a slot straight into a pool block
  // (BlockMover::start_from_region). Valid while the view lives.
  virtual const std::byte* data() const = 0;
  // Copies [offset, offset + out.size()) of the region into out (host memory); InvalidArgument
  // when that passes the region's end, Internal when the copy fails.
  virtual Status copy_out(int64_t offset, std::span<std::byte> out) = 0;
};

// Makes an owner's region of bytes (at least the header and one slot).
using PeerRegionFactory = std::function<Result<std::unique_ptr<PeerRegion>>(int64_t bytes)>;
// Opens a peer's region named by a slot record (peer_frames.h): its kind, handle, id and size.
// An error (the kind not supported here, a handle that does not open, a header that differs)
// makes the record's block a miss.
using PeerRegionOpener = std::function<Result<std::unique_ptr<PeerRegionView>>(
    PeerRegionKind kind, std::string_view handle, uint64_t region_id, int64_t size_bytes)>;

// POSIX shared memory: a name under /dev/shm ("/strata-kv-<pid>-<random>"), unlinked when the
// owner is destroyed; the names of owners that died without (SIGKILL) are unlinked when the next
// region is made. Unavailable when shm_open or mmap fail.
Result<std::unique_ptr<PeerRegion>> create_shm_peer_region(int64_t bytes);
Result<std::unique_ptr<PeerRegionView>> open_shm_peer_region(std::string_view handle,
                                                             uint64_t region_id,
                                                             int64_t size_bytes);
// An opener of shared-memory regions only.
PeerRegionOpener shm_peer_region_opener();

}  // namespace strata::kv
