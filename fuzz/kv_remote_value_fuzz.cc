// libFuzzer target: a block value of arbitrary bytes (kv/block_value.h: what Redis or a peer
// returns) checked as the block it was asked for. A value must be refused unless it holds that
// block -- the same namespace, shape, chain hash, token ids, a KV codec stream that decodes
// (kv/kv_codec.h) and a checksum that holds for what it decodes to -- so a value served is
// equivalent to encode()'s for what it returned; a crash or a sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "kv/block_value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::kv::BlockValueFormat;
  static const BlockValueFormat format(/*ns=*/0x5eed, /*block_size=*/4, /*block_bytes=*/64);
  strata::kv::BlockHash hash;
  hash.bytes[0] = 0x42;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<std::byte> out(64);
  uint64_t checksum = 0;
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  const strata::Status s = format.decode(value, hash, tokens, out, &checksum);
  if (s.ok()) {
    // The same header and token ids as encode()'s; the stream may be any scheme's.
    const std::string again = format.encode(hash, tokens, out, checksum);
    const size_t prefix = format.prefix_bytes();
    STRATA_CHECK(again.compare(0, prefix, value.substr(0, prefix)) == 0,
                 "a value served has exactly the header and token ids of what it returned");
    std::vector<std::byte> back(64);
    uint64_t sum = 0;
    STRATA_CHECK(
        format.decode(again, hash, tokens, back, &sum).ok() && back == out && sum == checksum,
        "the re-encoded value decodes to the same block");
  } else {
    STRATA_CHECK(s.code() == strata::StatusCode::kInternal, "a refused value names its check");
  }
  return 0;
}
