#pragma once
// Blocks for the remote tier's tests: distinct token ids and bytes per seed, the chain hash of
// those tokens as a first block, and the bytes' checksum.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kv/block_hash.h"
#include "kv/tier_key.h"

namespace strata::kv::test_util {

struct RemoteTestBlock {
  BlockHash hash;
  std::vector<int32_t> tokens;
  std::vector<std::byte> bytes;
  uint64_t checksum = 0;
};

inline RemoteTestBlock remote_test_block(int32_t seed, int32_t block_size, int64_t block_bytes) {
  RemoteTestBlock b;
  b.tokens.resize(static_cast<size_t>(block_size));
  std::iota(b.tokens.begin(), b.tokens.end(), seed * block_size);
  b.hash = BlockHasher().hash(nullptr, b.tokens, {});
  b.bytes.resize(static_cast<size_t>(block_bytes));
  for (size_t i = 0; i < b.bytes.size(); ++i) {
    b.bytes[i] = static_cast<std::byte>((i * 31 + static_cast<size_t>(seed) * 7) & 0xff);
  }
  b.checksum = tier_checksum(b.bytes);
  return b;
}

}  // namespace strata::kv::test_util
