// The KV disk tier's read rate against the disk's own (docs/benchmarks.md, "KV tiers under the
// pool"): writes N blocks through DiskTier into DIR, drops the page cache, reads them all back
// the way the engine does (TierIo: DiskTier::get on 4 I/O threads, header, token ids and XXH3
// checksum checked) with the bytes by O_DIRECT and then through the page cache, and reads the
// same files as one thread of
// sequential 1 MiB reads with no checks (what `dd` would measure: the device's rate). Also the
// XXH3 rate of one thread over blocks in memory, which bounds the get if the disk does not.
//
// Usage: strata_disk_tier_bench --dir DIR [--blocks N] [--block-bytes B] [--json]
//
// Dropping the page cache needs root (/proc/sys/vm/drop_caches); without it the reads come from
// memory, and the table says so.

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "guarded_main.h"
#include "kv/disk_tier.h"
#include "kv/tier_io.h"
#include "kv/tier_key.h"

namespace {

using strata::kv::BlockHash;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

BlockHash hash_of(int32_t i) {
  BlockHash h;
  for (size_t b = 0; b < h.bytes.size(); ++b) {
    h.bytes[b] = static_cast<uint8_t>((i >> (8 * (b % 4))) + 31 * b);
  }
  return h;
}

// One thread of sequential 1 MiB reads over every file under dir; returns the bytes read.
int64_t read_files(const std::filesystem::path& dir) {
  std::vector<char> buf(size_t{1} << 20);
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += n;
    ::close(fd);
  }
  return total;
}

// The files under dir read whole with O_DIRECT on `threads` threads (file i on thread i %
// threads), unchecked: the device's rate for this access pattern. Returns the bytes read.
int64_t read_files_direct(const std::filesystem::path& dir, int threads, int64_t file_bytes) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::vector<int64_t> got(static_cast<size_t>(threads), 0);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto n = static_cast<size_t>((file_bytes + 4095) / 4096 * 4096);
      const std::unique_ptr<char, decltype(&std::free)> buf(
          static_cast<char*>(std::aligned_alloc(4096, n)), &std::free);
      std::memset(buf.get(), 0, n);
      for (auto i = static_cast<size_t>(t); i < files.size(); i += static_cast<size_t>(threads)) {
        const int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0) continue;
        const ssize_t r = ::pread(fd, buf.get(), n, 0);
        if (r > 0) got[static_cast<size_t>(t)] += r;
        ::close(fd);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  int64_t total = 0;
  for (const int64_t g : got) total += g;
  return total;
}

int run(int argc, char** argv) {
  std::string dir;
  int32_t blocks = 512;
  int64_t block_bytes = int64_t{2} << 20;  // Llama-3.1-8B's block: 16 tokens x 128 KiB
  bool json = false;
  int threads = strata::kv::TierIo::kThreads;
  CLI::App app{"The KV disk tier's read rate against the disk's"};
  app.add_option("--dir", dir, "A directory on the disk to measure (emptied first)")->required();
  app.add_option("--blocks", blocks, "Blocks to write and read")->check(CLI::Range(1, 1 << 20));
  app.add_option("--block-bytes", block_bytes, "Bytes per block")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 30));
  app.add_option("--io-threads", threads, "I/O threads (the engine's: 4)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--json", json, "Print the results as JSON");
  CLI11_PARSE(app, argc, argv);

  constexpr int32_t kBlockSize = 16;
  std::filesystem::remove_all(dir);
  const int64_t file_bytes = strata::kv::DiskTier::file_bytes_for(kBlockSize, block_bytes);
  auto opened =
      strata::kv::DiskTier::open(dir, /*ns=*/1, kBlockSize, block_bytes, file_bytes * (blocks + 1));
  if (!opened.ok()) {
    std::fprintf(stderr, "strata_disk_tier_bench: %s\n", opened.status().message().c_str());
    return 1;
  }
  strata::kv::DiskTier& disk = *opened.value();
  const std::vector<int32_t> tokens(kBlockSize, 7);
  std::vector<std::byte> bytes(static_cast<size_t>(block_bytes));
  std::mt19937_64 rng(1);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());

  // XXH3 over a block in memory, one thread.
  const auto hash_start = Clock::now();
  uint64_t sink = 0;
  int32_t hashed = 0;
  while (seconds_since(hash_start) < 0.5) {
    sink ^= strata::kv::tier_checksum(bytes);
    ++hashed;
  }
  const double xxh3_gbs = static_cast<double>(hashed) * static_cast<double>(block_bytes) /
                          seconds_since(hash_start) / 1e9;
  const uint64_t checksum = strata::kv::tier_checksum(bytes);

  std::fprintf(stderr, "writing %d blocks of %lld bytes to %s\n", blocks,
               static_cast<long long>(block_bytes), dir.c_str());
  for (int32_t i = 0; i < blocks; ++i) {
    if (!disk.put(hash_of(i), tokens, bytes, checksum).ok()) {
      std::fprintf(stderr, "strata_disk_tier_bench: a write failed (disk full?)\n");
      return 1;
    }
  }
  const bool dropped = drop_page_cache();
  // The engine's path: every block through TierIo into its own page-aligned buffer (a host
  // slot), with the bytes read by O_DIRECT and then through the page cache.
  const auto buffer = std::unique_ptr<std::byte, decltype(&std::free)>(
      static_cast<std::byte*>(std::aligned_alloc(4096, static_cast<size_t>(blocks * block_bytes))),
      &std::free);
  // Touched once, as a host tier's slots are: no page faults in the timed reads.
  std::memset(buffer.get(), 0, static_cast<size_t>(blocks * block_bytes));
  const auto read_tier = [&](bool direct, int32_t* good) {
    disk.set_direct_reads(direct);
    drop_page_cache();
    *good = 0;
    const auto start = Clock::now();
    strata::kv::TierIo io(disk, threads);
    for (int32_t i = 0; i < blocks; ++i) {
      strata::kv::TierIo::Job job;
      job.slot = strata::BlockId{i};
      job.hash = hash_of(i);
      job.tokens = tokens;
      job.bytes = {buffer.get() + static_cast<size_t>(i) * static_cast<size_t>(block_bytes),
                   static_cast<size_t>(block_bytes)};
      io.submit(std::move(job));
    }
    while (io.wait_any()) {
      for (const auto& d : io.take_done()) *good += d.status.ok() ? 1 : 0;
    }
    return seconds_since(start);
  };
  int32_t good_direct = 0;
  int32_t good = 0;
  const double direct_s = read_tier(true, &good_direct);
  const bool direct_used = disk.direct_reads();
  const double tier_s = read_tier(false, &good);
  drop_page_cache();
  const auto raw_start = Clock::now();
  const int64_t raw_bytes = read_files(disk.path());
  const double raw_s = seconds_since(raw_start);
  drop_page_cache();
  const auto raw_direct_start = Clock::now();
  const int64_t raw_direct_bytes = read_files_direct(disk.path(), threads, file_bytes);
  const double raw_direct_gbs =
      static_cast<double>(raw_direct_bytes) / seconds_since(raw_direct_start) / 1e9;

  const double total = static_cast<double>(blocks) * static_cast<double>(file_bytes);
  const double tier_gbs = total / tier_s / 1e9;
  const double direct_gbs = total / direct_s / 1e9;
  const double raw_gbs = static_cast<double>(raw_bytes) / raw_s / 1e9;
  if (json) {
    const nlohmann::json j = {{"blocks", blocks},
                              {"block_bytes", block_bytes},
                              {"page_cache_dropped", dropped},
                              {"blocks_read_ok", good + good_direct},
                              {"o_direct_taken", direct_used},
                              {"tier_read_direct_gbs", direct_gbs},
                              {"tier_read_buffered_gbs", tier_gbs},
                              {"direct_over_sequential", direct_gbs / raw_gbs},
                              {"raw_direct_gbs", raw_direct_gbs},
                              {"direct_over_raw_direct", direct_gbs / raw_direct_gbs},
                              {"sequential_read_gbs", raw_gbs},
                              {"buffered_over_sequential", tier_gbs / raw_gbs},
                              {"xxh3_one_thread_gbs", xxh3_gbs},
                              {"tier_io_threads", threads}};
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%d blocks x %lld bytes, page cache %s\n", blocks,
                static_cast<long long>(block_bytes),
                dropped ? "dropped" : "NOT dropped (not root)");
    std::printf("| read | GB/s | of sequential |\n|---|---|---|\n");
    std::printf(
        "| disk tier get, %d I/O threads, checked, bytes by O_DIRECT%s (%d/%d ok) | %.2f | %.2f "
        "|\n",
        threads, direct_used ? "" : " (refused: page cache)", good_direct, blocks, direct_gbs,
        direct_gbs / raw_gbs);
    std::printf(
        "| disk tier get, %d I/O threads, checked, through the page cache (%d/%d ok) | %.2f | %.2f "
        "|\n",
        threads, good, blocks, tier_gbs, tier_gbs / raw_gbs);
    std::printf("| one thread, sequential 1 MiB reads, unchecked | %.2f | 1.00 |\n", raw_gbs);
    std::printf("| %d threads, whole files by O_DIRECT, unchecked | %.2f | %.2f |\n", threads,
                raw_direct_gbs, raw_direct_gbs / raw_gbs);
    std::printf("| XXH3, one thread, in memory | %.2f | - |\n", xxh3_gbs);
  }
  std::filesystem::remove_all(dir);
  return sink == 42 ? 2 : 0;  // keeps the hashing loop
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_disk_tier_bench", run, argc, argv);
}
