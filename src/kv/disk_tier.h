#pragma once
// DiskTier: the local-disk KV tier under the host tier (docs/kv.md, "KV tiers"). Each block is
// one file, DIR/<namespace, 16 hex digits>/<chain hash, 64 hex digits>.kvb:
//
//   header (72 bytes)  "STRATAKV", format version u32, block_size u32, namespace u64,
//                      block_bytes u64, checksum u64 (XXH3 of the bytes), hash [32]
//   token ids          block_size x int32
//   (a hole up to the next multiple of 4096)
//   bytes              block_bytes, the pool layout's block
//
// A block is written to a temporary name and renamed, so an interrupted write leaves either the
// whole file or a temporary one, which open() deletes; whatever else a crash leaves (a renamed
// file whose pages never reached the disk) fails the checksum on its first read and is dropped.
// The directory survives the process: open() indexes the files already there, least recently
// modified first, so a restart over the same directory serves their hits. Least recently used
// files go first when the files' total would pass the capacity. Every fault -- a missing,
// truncated or corrupt file, a full disk, an I/O error -- is a failed get/put (counted in
// stats()), never a wrong block: the engine recomputes instead.
//
// Writes go through the page cache (plain pwrite). Reads take the header and token ids through
// the page cache; where the caller's buffer and block_bytes are 4096-aligned, a read is one
// request for the whole file: copied from the page cache when it holds every page (a block
// written or read lately; mincore says), else with O_DIRECT straight into the buffer, where the
// page cache would read ahead in small requests and copy (set_direct_reads(false), or a
// filesystem that refuses O_DIRECT, reads through the page cache; docs/benchmarks.md has both
// rates). Thread-safe: the index is behind a mutex, held only
// around index updates, so the tiers' I/O threads read and write files while the scheduler
// thread asks contains(); two calls for the same hash at once are the caller's to avoid. Cost: a
// get reads and checksums one file; a put writes one.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/tier_key.h"

namespace strata::kv {

struct DiskTierStats {
  int64_t num_writes = 0;        // blocks written
  int64_t num_write_errors = 0;  // puts that failed (full disk, I/O error)
  int64_t num_reads = 0;         // blocks read back whole and verified
  int64_t num_direct_reads = 0;  // of them, bytes read from the disk with O_DIRECT
  int64_t num_bad_reads = 0;     // gets that found a truncated, corrupt or unreadable file
  int64_t num_evictions = 0;     // files deleted to stay within the capacity
};

class DiskTier {
 public:
  // The files of namespace ns under dir (created if missing), capacity_bytes >= one file.
  // InvalidArgument / Internal when the directory cannot be created or listed.
  static Result<std::unique_ptr<DiskTier>> open(const std::string& dir, uint64_t ns,
                                                int32_t block_size, int64_t block_bytes,
                                                int64_t capacity_bytes);

  // Bytes of one block's file, for this tier and for any block shape.
  int64_t file_bytes() const { return file_bytes_for(block_size_, block_bytes_); }
  static int64_t file_bytes_for(int32_t block_size, int64_t block_bytes);
  // Whether get() reads a block's bytes with O_DIRECT where it can (default true).
  void set_direct_reads(bool on) { direct_reads_.store(on); }
  bool direct_reads() const { return direct_reads_.load(); }
  int64_t num_blocks() const;
  int64_t used_bytes() const { return num_blocks() * file_bytes(); }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  DiskTierStats stats() const;
  const std::filesystem::path& path() const { return path_; }

  bool contains(const BlockHash& hash) const;
  // Blocks entering and leaving the tier (the KV events of its medium), in order, kept from the
  // first call on -- which counts every block already there as entering -- until take_changes().
  struct Change {
    bool stored = false;  // false: removed
    BlockHash hash;
  };
  void log_changes();
  std::vector<Change> take_changes();
  // Writes the block's file (tokens.size() == block_size, bytes.size() == block_bytes, checksum
  // its tier_checksum as the host tier recorded it: bytes that changed since are caught when the
  // file is read), first deleting least recently used files to stay within the capacity. A block
  // already there is only made the most recently used. Internal on an I/O error (nothing is left
  // behind).
  Status put(const BlockHash& hash, std::span<const int32_t> tokens,
             std::span<const std::byte> bytes, uint64_t checksum);
  // Reads the block into out (block_bytes), confirming the header, the token ids and the
  // checksum, and makes it the most recently used; *checksum (if set) receives it. NotFound when
  // absent (or when the tokens differ); Internal for a truncated, corrupt or unreadable file,
  // which is deleted.
  Status get(const BlockHash& hash, std::span<const int32_t> tokens, std::span<std::byte> out,
             uint64_t* checksum = nullptr);

 private:
  struct Header;  // a file's first 72 bytes (disk_tier.cc)

  DiskTier(std::filesystem::path path, uint64_t ns, int32_t block_size, int64_t block_bytes,
           int64_t capacity_bytes);
  std::filesystem::path file_of(const BlockHash& hash) const;
  int64_t data_offset() const { return file_bytes() - block_bytes_; }  // where the bytes start
  // Whether reading into out may use O_DIRECT (on, and out page-aligned in address and size).
  bool may_read_direct(std::span<const std::byte> out) const;
  // The open file p (fd): its header into h, token ids into stored, bytes into out -- from the
  // page cache or by O_DIRECT in one request where it can, else piece by piece through fd.
  // False on an I/O error or a short file.
  bool read_file(const std::filesystem::path& p, int fd, Header& h, std::span<int32_t> stored,
                 std::span<std::byte> out);
  // With mu_ held:
  void remember(const BlockHash& hash);  // most recently used
  void drop(BlockHash hash);  // out of the index, file deleted (a copy: callers pass lru_ entries)
  // Deletes least recently used files until one more fits.
  void make_room();

  std::filesystem::path path_;
  uint64_t ns_;
  int32_t block_size_;
  int64_t block_bytes_;
  int64_t capacity_bytes_;
  std::atomic<bool> direct_reads_{true};
  mutable std::mutex mu_;     // guards lru_, index_, stats_, changes_
  std::list<BlockHash> lru_;  // least recent first
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> index_;
  bool log_changes_ = false;
  std::vector<Change> changes_;  // since the last take_changes(), while log_changes_
  DiskTierStats stats_;
};

// The 64 lowercase hex digits of a hash (the disk tier's file names).
std::string hash_hex(const BlockHash& hash);

}  // namespace strata::kv
