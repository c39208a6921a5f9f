#include "kv/block_value.h"

#include <cstring>
#include <utility>

#include "core/check.h"
#include "kv/tier_key.h"

namespace strata::kv {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'R'};

template <typename T>
void put_raw(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T get_raw(std::string_view in, size_t offset) {
  T v;
  std::memcpy(&v, in.data() + offset, sizeof(v));
  return v;
}

}  // namespace

BlockValueFormat::BlockValueFormat(uint64_t ns, int32_t block_size, int64_t block_bytes,
                                   KvCodecPlan codec)
    : ns_(ns), block_size_(block_size), block_bytes_(block_bytes), codec_(std::move(codec)) {}

size_t BlockValueFormat::prefix_bytes() const {
  return kHeaderBytes + static_cast<size_t>(block_size_) * sizeof(int32_t);
}

size_t BlockValueFormat::max_bytes() const {
  return prefix_bytes() + kv_encode_bound(static_cast<size_t>(block_bytes_));
}

std::string BlockValueFormat::encode(const BlockHash& hash, std::span<const int32_t> tokens,
                                     std::span<const std::byte> bytes, uint64_t checksum) const {
  std::string v;
  encode_into(v, hash, tokens, bytes, checksum, codec_);
  return v;
}

void BlockValueFormat::encode_into(std::string& v, const BlockHash& hash,
                                   std::span<const int32_t> tokens,
                                   std::span<const std::byte> bytes, uint64_t checksum,
                                   const KvCodecPlan& codec) const {
  v.clear();
  v.reserve(max_bytes());
  v.append(kMagic, sizeof(kMagic));
  put_raw(v, kFormatVersion);
  put_raw(v, static_cast<uint32_t>(block_size_));
  put_raw(v, ns_);
  put_raw(v, static_cast<uint64_t>(block_bytes_));
  put_raw(v, checksum);
  v.append(reinterpret_cast<const char*>(hash.bytes.data()), hash.bytes.size());
  v.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  kv_encode(bytes, codec, v);
}

Status BlockValueFormat::decode(std::string_view value, const BlockHash& hash,
                                std::span<const int32_t> tokens, std::span<std::byte> out,
                                uint64_t* checksum) const {
  const size_t token_bytes = static_cast<size_t>(block_size_) * sizeof(int32_t);
  if (value.size() < kHeaderBytes + token_bytes || value.size() > max_bytes()) {
    return Status::Internal("block value: wrong length");
  }
  if (std::memcmp(value.data(), kMagic, sizeof(kMagic)) != 0 ||
      get_raw<uint32_t>(value, 8) != kFormatVersion ||
      get_raw<uint32_t>(value, 12) != static_cast<uint32_t>(block_size_) ||
      get_raw<uint64_t>(value, 16) != ns_ ||
      get_raw<uint64_t>(value, 24) != static_cast<uint64_t>(block_bytes_)) {
    return Status::Internal("block value: another format, namespace or shape");
  }
  const auto sum = get_raw<uint64_t>(value, 32);
  if (std::memcmp(value.data() + 40, hash.bytes.data(), hash.bytes.size()) != 0) {
    return Status::Internal("block value: another chain hash");
  }
  if (tokens.size_bytes() != token_bytes ||
      std::memcmp(value.data() + kHeaderBytes, tokens.data(), token_bytes) != 0) {
    return Status::Internal("block value: other token ids");
  }
  const std::string_view stream = value.substr(kHeaderBytes + token_bytes);
  STRATA_CHECK(out.size() >= static_cast<size_t>(block_bytes_), "decode: out holds a block");
  const std::span<std::byte> block = out.first(static_cast<size_t>(block_bytes_));
  const Status decoded = kv_decode(std::as_bytes(std::span(stream.data(), stream.size())), block);
  if (!decoded.ok()) return Status::Internal("block value: " + decoded.message());
  if (tier_checksum(block) != sum) return Status::Internal("block value: checksum mismatch");
  if (checksum != nullptr) *checksum = sum;
  return Status::Ok();
}

}  // namespace strata::kv
