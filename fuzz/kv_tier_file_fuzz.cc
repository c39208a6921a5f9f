// libFuzzer target: the disk tier reading a block file of arbitrary bytes (kv/disk_tier.h). A
// file that is not exactly a block this tier wrote must be refused -- NotFound or Internal, and
// dropped from the index -- never served; a crash or a sanitizer report is a bug. The input is
// the whole file, placed under the name of the block it claims to be, before the tier opens.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "kv/disk_tier.h"

namespace {

constexpr int32_t kBlockSize = 4;
constexpr int64_t kBlockBytes = 64;
constexpr uint64_t kNs = 0x5eed;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::kv::DiskTier;
  static const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                           ("strata_kv_tier_fuzz_" + std::to_string(::getpid()));
  strata::kv::BlockHash hash;
  hash.bytes[0] = 0x42;
  const std::filesystem::path ns_dir = dir / "0000000000005eed";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(ns_dir);
  {
    std::ofstream f(ns_dir / (strata::kv::hash_hex(hash) + ".kvb"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto tier = DiskTier::open(dir.string(), kNs, kBlockSize, kBlockBytes, int64_t{1} << 20);
  STRATA_CHECK(tier.ok(), "the directory opens");
  DiskTier& t = **tier;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<std::byte> out(kBlockBytes);
  if (t.contains(hash)) {
    const strata::Status s = t.get(hash, tokens, out);
    STRATA_CHECK(s.ok() || !t.contains(hash) || s.code() == strata::StatusCode::kNotFound,
                 "a refused file leaves the index unless it only holds other tokens");
    STRATA_CHECK(!s.ok() || static_cast<int64_t>(size) == t.file_bytes(),
                 "only a whole file is served");
  } else {
    STRATA_CHECK(static_cast<int64_t>(size) != t.file_bytes(), "a whole file is indexed");
  }
  std::filesystem::remove_all(dir);
  return 0;
}
