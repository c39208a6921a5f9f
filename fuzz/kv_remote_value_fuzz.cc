// libFuzzer target: the remote tier checking a value of arbitrary bytes read from Redis
// (kv/remote_tier.h) as the block it was asked for. A value must be refused unless it is exactly
// what encode() writes for that block -- the same namespace, shape, chain hash, token ids and a
// checksum that holds -- so a value served is byte for byte the encoding of what it returned; a
// crash or a sanitizer report is a bug. No server is contacted.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "kv/remote_tier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::kv::RemoteTier;
  static RemoteTier tier(strata::kv::RedisEndpoint{"127.0.0.1", 1, 0}, /*ns=*/0x5eed,
                         /*block_size=*/4, /*block_bytes=*/64);
  strata::kv::BlockHash hash;
  hash.bytes[0] = 0x42;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<std::byte> out(64);
  uint64_t checksum = 0;
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  const strata::Status s = tier.decode(value, hash, tokens, out, &checksum);
  if (s.ok()) {
    STRATA_CHECK(tier.encode(hash, tokens, out, checksum) == value,
                 "a value served is exactly the encoding of what it returned");
  } else {
    STRATA_CHECK(s.code() == strata::StatusCode::kInternal, "a refused value names its check");
  }
  return 0;
}
