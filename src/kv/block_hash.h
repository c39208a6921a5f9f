#pragma once
// Block hashes: the key of a full block in the prefix cache (docs/kv.md, "Prefix caching").
//
//   hash(block i) = SHA-256( hash(block i-1)  -- 32 zero bytes for the first block
//                          | the block's block_size token ids (int32, little endian)
//                          | adapter id (every block)
//                          | cache salt (first block only, length-prefixed) )
//
// Chaining the parent's hash makes a block's key name the whole prefix before it. The hash only
// finds a candidate: BlockPool confirms a hit against the stored token ids, parent block and extra
// keys, so even a collision (see BlockHasher's weakened test mode) never serves another prompt's
// KV. Only full blocks are hashed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace strata::kv {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};

  auto operator<=>(const BlockHash&) const = default;
  // First 16 hex digits, for logs and events.
  std::string short_hex() const;
};

// What, besides the tokens, decides whether two prefixes may share KV. A request's extra keys are
// fixed for its lifetime.
struct BlockExtraKeys {
  // Tenant isolation: enters the first block's key, so prefixes under different salts never match
  // (and a tenant cannot time another's cache). Empty = no salt.
  std::string cache_salt;
  // The LoRA adapter the K/V were computed with; 0 = the base model. Enters every block's key.
  int32_t adapter_id = 0;

  bool operator==(const BlockExtraKeys&) const = default;
};

// The cache salt an engine derives itself for a tenant (an API key's owner, the OpenAI `user`
// field): hex HMAC-SHA256(secret, tenant, 0x00, request_salt). Requests of different tenants never
// share KV, nor can one time another's prefixes, even when clients send no salt or the same one;
// the secret (random per engine unless configured) keeps the salts unguessable.
std::string derive_tenant_salt(std::string_view secret, std::string_view tenant,
                               std::string_view request_salt);

// The salt a request's blocks are keyed with: derive_tenant_salt's for a request with a tenant,
// the request's own salt otherwise. One rule for the engine and for a router predicting its keys.
std::string request_cache_salt(std::string_view secret, std::string_view tenant,
                               std::string_view request_salt);

// A fresh 32-byte secret for derive_tenant_salt, hex, from OpenSSL's RNG.
std::string random_tenant_secret();

// Computes block hashes with OpenSSL's SHA-256. Owns one reusable digest context (no allocation
// per hash). Not thread-safe: one hasher per thread. Cost: one SHA-256 over ~block_size * 4 + 40
// bytes per block.
class BlockHasher {
 public:
  // num_bits in [1, 256]: the hash keeps its first num_bits bits and zeroes the rest. 256 in
  // production; tests weaken it to 8 bits to force collisions and prove they are harmless.
  explicit BlockHasher(int32_t num_bits = 256);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;
  BlockHasher(BlockHasher&& other) noexcept;
  BlockHasher& operator=(BlockHasher&& other) noexcept;

  int32_t num_bits() const { return num_bits_; }

  // parent: the previous block's hash, nullptr for a sequence's first block (which alone takes
  // the cache salt).
  BlockHash hash(const BlockHash* parent, std::span<const int32_t> tokens,
                 const BlockExtraKeys& extra);

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX*, kept opaque so OpenSSL stays a private dependency
  int32_t num_bits_;
};

}  // namespace strata::kv

template <>
struct std::hash<strata::kv::BlockHash> {
  size_t operator()(const strata::kv::BlockHash& h) const noexcept {
    size_t v = 0;
    std::memcpy(&v, h.bytes.data(), sizeof(v));  // already uniformly distributed
    return v;
  }
};
