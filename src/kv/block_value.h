#pragma once
// BlockValueFormat: a KV block as one self-checking value, the form in which blocks leave an
// instance -- stored in Redis (remote_tier.h) or sent to a peer -- so that whoever reads it checks
// all of it before the bytes are used:
//
//   header   72 bytes: "STRATAKR", format version u32, block_size u32, namespace u64,
//            block_bytes u64, checksum u64 (XXH3 of the bytes), chain hash [32]
//   tokens   the block's token ids (block_size x int32)
//   stream   the bytes (block_bytes, the pool layout's block) as a KV codec stream (kv_codec.h:
//            split BF16, zstd or stored)
//
// decode() checks length, header, namespace, hash, token ids, the stream and the decoded bytes'
// checksum: anything else (a truncated or overwritten value, another block's value) is an error,
// never a wrong block. Immutable, so any thread may use it. Cost: one pass over the block to
// encode or decode (a copy when stored).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/kv_codec.h"

namespace strata::kv {

class BlockValueFormat {
 public:
  BlockValueFormat(uint64_t ns, int32_t block_size, int64_t block_bytes, KvCodecPlan codec = {});

  static constexpr uint32_t kFormatVersion = 2;
  static constexpr size_t kHeaderBytes = 72;

  uint64_t ns() const { return ns_; }
  int32_t block_size() const { return block_size_; }
  int64_t block_bytes() const { return block_bytes_; }
  const KvCodecPlan& codec() const { return codec_; }
  // The longest value: a stored block's (a coded one is shorter).
  size_t max_bytes() const;
  // The header and token ids, which come before the stream.
  size_t prefix_bytes() const;

  // The value of (hash, tokens, bytes) with the bytes coded as codec() says.
  std::string encode(const BlockHash& hash, std::span<const int32_t> tokens,
                     std::span<const std::byte> bytes, uint64_t checksum) const;
  // The same into v, whose buffer is reused when it is large enough, with the bytes coded by
  // `codec`.
  void encode_into(std::string& v, const BlockHash& hash, std::span<const int32_t> tokens,
                   std::span<const std::byte> bytes, uint64_t checksum,
                   const KvCodecPlan& codec) const;
  // Checks value as a copy of (hash, tokens) in this namespace and decodes its bytes into out
  // (block_bytes), its checksum into *checksum. Internal, naming the check, otherwise (out may
  // then hold anything).
  Status decode(std::string_view value, const BlockHash& hash, std::span<const int32_t> tokens,
                std::span<std::byte> out, uint64_t* checksum) const;

 private:
  uint64_t ns_;
  int32_t block_size_;
  int64_t block_bytes_;
  KvCodecPlan codec_;
};

}  // namespace strata::kv
