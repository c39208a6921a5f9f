#include "kv/block_hash.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <utility>

#include "core/check.h"

namespace strata::kv {
namespace {

EVP_MD_CTX* as_ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }

void update_u32(EVP_MD_CTX* ctx, uint32_t v) {
  const std::array<uint8_t, 4> le = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                                     static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
  EVP_DigestUpdate(ctx, le.data(), le.size());
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (const uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

}  // namespace

std::string BlockHash::short_hex() const { return to_hex(std::span(bytes).first(8)); }

std::string derive_tenant_salt(std::string_view secret, std::string_view tenant,
                               std::string_view request_salt) {
  std::string message(tenant);
  message += '\0';
  message += request_salt;
  std::array<uint8_t, EVP_MAX_MD_SIZE> mac{};
  unsigned int len = 0;
  STRATA_CHECK(HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                    reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                    mac.data(), &len) != nullptr,
               "HMAC-SHA256 failed");
  return to_hex(std::span(mac).first(len));
}

std::string request_cache_salt(std::string_view secret, std::string_view tenant,
                               std::string_view request_salt) {
  if (tenant.empty()) return std::string(request_salt);
  return derive_tenant_salt(secret, tenant, request_salt);
}

std::string random_tenant_secret() {
  std::array<uint8_t, 32> bytes{};
  STRATA_CHECK(RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) == 1,
               "OpenSSL's RNG failed");
  return to_hex(bytes);
}

BlockHasher::BlockHasher(int32_t num_bits) : ctx_(EVP_MD_CTX_new()), num_bits_(num_bits) {
  STRATA_CHECK(num_bits >= 1 && num_bits <= 256, "BlockHasher: num_bits must be in [1, 256]");
  STRATA_CHECK(ctx_ != nullptr, "EVP_MD_CTX_new failed");
}

BlockHasher::~BlockHasher() { EVP_MD_CTX_free(as_ctx(ctx_)); }

BlockHasher::BlockHasher(BlockHasher&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)), num_bits_(other.num_bits_) {}

BlockHasher& BlockHasher::operator=(BlockHasher&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(as_ctx(ctx_));
    ctx_ = std::exchange(other.ctx_, nullptr);
    num_bits_ = other.num_bits_;
  }
  return *this;
}

BlockHash BlockHasher::hash(const BlockHash* parent, std::span<const int32_t> tokens,
                            const BlockExtraKeys& extra) {
  EVP_MD_CTX* ctx = as_ctx(ctx_);
  STRATA_CHECK(ctx != nullptr, "BlockHasher used after move");
  STRATA_CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "SHA-256 init failed");
  const BlockHash zero{};
  const BlockHash& p = parent != nullptr ? *parent : zero;
  EVP_DigestUpdate(ctx, p.bytes.data(), p.bytes.size());
  update_u32(ctx, static_cast<uint32_t>(tokens.size()));
  for (const int32_t t : tokens) update_u32(ctx, static_cast<uint32_t>(t));
  update_u32(ctx, static_cast<uint32_t>(extra.adapter_id));
  if (parent == nullptr) {
    update_u32(ctx, static_cast<uint32_t>(extra.cache_salt.size()));
    EVP_DigestUpdate(ctx, extra.cache_salt.data(), extra.cache_salt.size());
  }
  BlockHash out;
  unsigned int len = 0;
  STRATA_CHECK(EVP_DigestFinal_ex(ctx, out.bytes.data(), &len) == 1 && len == out.bytes.size(),
               "SHA-256 final failed");
  // Weakened test mode: keep the first num_bits bits.
  for (int32_t bit = num_bits_; bit < 256; ++bit) {
    out.bytes[static_cast<size_t>(bit / 8)] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  }
  return out;
}

}  // namespace strata::kv
