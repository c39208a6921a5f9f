// The KV codec (kv/kv_codec.h): every scheme gives back the block bit for bit -- random and
// KV-like values, NaN / Inf / denormal / signed-zero patterns, blocks of nothing but escapes,
// odd lengths, segments and chunk edges -- and every corrupt stream is an error.

#include "kv/kv_codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace strata::kv {
namespace {

uint16_t bf16_of(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

// n BF16 values like a layer's K: normal, scale varying by channel.
std::vector<std::byte> kv_like_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<std::byte> out(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = 0.05F + static_cast<float>(i % 128) / 64.0F;
    const uint16_t x = bf16_of(normal(rng) * scale);
    std::memcpy(out.data() + 2 * i, &x, 2);
  }
  return out;
}

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(rng());
  return out;
}

std::string encode(std::span<const std::byte> bytes, const KvCodecPlan& plan) {
  std::string s;
  kv_encode(bytes, plan, s);
  return s;
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

void expect_round_trip(std::span<const std::byte> bytes, const KvCodecPlan& plan,
                       KvCodecScheme expected_scheme) {
  const std::string stream = encode(bytes, plan);
  EXPECT_LE(stream.size(), kv_encode_bound(bytes.size()));
  const Result<KvStreamInfo> info = kv_stream_info(as_bytes(stream));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->scheme, expected_scheme);
  EXPECT_EQ(info->raw_bytes, bytes.size());
  std::vector<std::byte> out(bytes.size(), std::byte{0xee});
  const Status s = kv_decode(as_bytes(stream), out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin(), bytes.end()));
}

KvCodecPlan split_plan(SplitFormat f = SplitFormat::kBf16, size_t segment = 0) {
  return KvCodecPlan{.scheme = KvCodecScheme::kSplit, .split = f, .segment_bytes = segment};
}

TEST(KvCodecTest, SplitRoundTripsKvLikeBf16AndCompressesIt) {
  const std::vector<std::byte> block = kv_like_bf16(16 * 8 * 128 * 2, 1);  // 64 KiB
  expect_round_trip(block, split_plan(), KvCodecScheme::kSplit);
  // 12 bits an element and a few escapes: under 0.77 of the raw size (at least 1.3x).
  EXPECT_LT(static_cast<double>(encode(block, split_plan()).size()),
            0.77 * static_cast<double>(block.size()));
}

TEST(KvCodecTest, SplitRoundTripsEveryLengthAcrossGroupsChunksAndSegments) {
  const std::vector<std::byte> block = kv_like_bf16(3 * kSplitChunk + 77, 2);
  for (const size_t n :
       {size_t{0}, size_t{1}, size_t{2}, size_t{31}, size_t{32}, size_t{33}, size_t{63}, size_t{64},
        size_t{65}, kSplitChunk - 1, kSplitChunk, kSplitChunk + 1, 3 * kSplitChunk + 77}) {
    SCOPED_TRACE(n);
    const std::span<const std::byte> part(block.data(), 2 * n);
    for (const size_t segment : {size_t{0}, size_t{2}, size_t{66}, size_t{2 * kSplitChunk + 6}}) {
      SCOPED_TRACE(segment);
      const KvCodecPlan plan = split_plan(SplitFormat::kBf16, segment);
      const std::string stream = encode(part, plan);
      std::vector<std::byte> out(part.size());
      ASSERT_TRUE(kv_decode(as_bytes(stream), out).ok());
      EXPECT_TRUE(std::equal(out.begin(), out.end(), part.begin(), part.end()));
    }
  }
}

TEST(KvCodecTest, SpecialValuesRoundTripInBothFormats) {
  // Every 16-bit pattern once (NaNs with payloads, infinities, denormals, both zeros), shuffled
  // into a KV-like block so that they are escapes among codes.
  std::vector<std::byte> block = kv_like_bf16(65536 * 2, 3);
  std::mt19937 rng(4);
  for (uint32_t x = 0; x < 65536; ++x) {
    const size_t at = rng() % (block.size() / 2);
    const auto v = static_cast<uint16_t>(x);
    std::memcpy(block.data() + 2 * at, &v, 2);
  }
  expect_round_trip(block, split_plan(SplitFormat::kBf16), KvCodecScheme::kSplit);
  expect_round_trip(block, split_plan(SplitFormat::kF16, 4096), KvCodecScheme::kSplit);
}

TEST(KvCodecTest, ABlockOfOnlyEscapesRoundTrips) {
  // A calibrated codebook none of whose symbols occur: every element is an escape, the stream
  // longer than the block, so it is stored -- and with no codebook at all the same.
  const std::vector<std::byte> block = kv_like_bf16(5000, 5);
  KvCodecPlan plan = split_plan();
  KvCodebook unused;
  unused.size = 1;
  unused.symbols[0] = 0xff;  // the exponent of Inf / NaN
  plan.codebooks = {unused};
  expect_round_trip(block, plan, KvCodecScheme::kStored);
  plan.codebooks = {KvCodebook{}};
  expect_round_trip(block, plan, KvCodecScheme::kStored);
}

TEST(KvCodecTest, EscapesDecodeWhereTheyAreEvenWhenTheyDoNotPay) {
  // Built by hand: a segment of 40 elements whose codebook holds one symbol, half of them
  // escapes (which the encoder would store instead), decoded through both the 32-element groups
  // and the element-at-a-time path.
  std::vector<std::byte> block(80);
  for (size_t i = 0; i < 40; ++i) {
    const uint16_t x = i % 2 == 0 ? bf16_of(1.5F) : bf16_of(static_cast<float>(i) * 1000.0F);
    std::memcpy(block.data() + 2 * i, &x, 2);
  }
  KvCodebook book;
  book.size = 1;
  book.symbols[0] = static_cast<uint8_t>(bf16_of(1.5F) >> 7);
  std::string segment;
  split_encode_segment(SplitFormat::kBf16, block, book, segment);
  std::span<const std::byte> in = as_bytes(segment);
  std::vector<std::byte> out(block.size());
  ASSERT_TRUE(split_decode_segment(SplitFormat::kBf16, in, out).ok());
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(out, block);
}

TEST(KvCodecTest, CalibratedCodebooksAreUsedPerSegment) {
  // Two segments of different scale: each calibrated codebook fits its own, and one codebook
  // for both costs escapes.
  std::vector<std::byte> block = kv_like_bf16(8192, 6);
  std::vector<std::byte> small = kv_like_bf16(8192, 7);
  for (size_t i = 0; i < 8192; ++i) {  // the second half scaled by 2^-20
    uint16_t x;
    std::memcpy(&x, small.data() + 2 * i, 2);
    if ((x & 0x7f80) > (20 << 7)) x = static_cast<uint16_t>(x - (20 << 7));
    std::memcpy(small.data() + 2 * i, &x, 2);
  }
  block.insert(block.end(), small.begin(), small.end());
  std::array<SymbolHistogram, 2> hist = {};
  add_symbol_histogram(SplitFormat::kBf16, std::span(block).first(16384), hist[0]);
  add_symbol_histogram(SplitFormat::kBf16, std::span(block).subspan(16384), hist[1]);
  KvCodecPlan plan = split_plan(SplitFormat::kBf16, 16384);
  plan.codebooks = {codebook_from_histogram(hist[0]), codebook_from_histogram(hist[1])};
  expect_round_trip(block, plan, KvCodecScheme::kSplit);
  const size_t per_segment = encode(block, plan).size();
  // The first segment's codebook for both: the second's symbols are escapes, and the stream is
  // longer (stored, when that is shorter still).
  plan.codebooks = {codebook_from_histogram(hist[0])};
  const std::string one_book = encode(block, plan);
  std::vector<std::byte> out(block.size());
  ASSERT_TRUE(kv_decode(as_bytes(one_book), out).ok());
  EXPECT_EQ(out, block);
  EXPECT_LT(per_segment, one_book.size());
}

TEST(KvCodecTest, CodebookTakesTheMostFrequentSymbolsSmallerFirstOnTies) {
  SymbolHistogram hist = {};
  for (size_t s = 0; s < 256; ++s) hist[s] = s % 3 == 0 ? 10 : 0;
  hist[200] = 50;
  const KvCodebook book = codebook_from_histogram(hist);
  ASSERT_EQ(book.size, 15);
  EXPECT_EQ(book.symbols[0], 200);
  EXPECT_EQ(book.symbols[1], 0);
  EXPECT_EQ(book.symbols[2], 3);
  SymbolHistogram two = {};
  two[9] = 1;
  two[4] = 1;
  EXPECT_EQ(codebook_from_histogram(two).size, 2);
}

TEST(KvCodecTest, ZstdAndStoredRoundTripEightAndFourBitCodes) {
  std::vector<std::byte> codes(96 * 1024);
  std::mt19937 rng(8);
  std::binomial_distribution<int> b(254, 0.5);  // int8-like codes around 0
  for (std::byte& c : codes) c = static_cast<std::byte>(b(rng) - 127);
  expect_round_trip(codes, KvCodecPlan{.scheme = KvCodecScheme::kZstd}, KvCodecScheme::kZstd);
  expect_round_trip(codes, KvCodecPlan{.scheme = KvCodecScheme::kStored}, KvCodecScheme::kStored);
  // Bytes that do not compress are stored, by any scheme; an odd length is stored by split.
  const std::vector<std::byte> noise = random_bytes(4097, 9);
  expect_round_trip(noise, KvCodecPlan{.scheme = KvCodecScheme::kZstd}, KvCodecScheme::kStored);
  expect_round_trip(noise, split_plan(), KvCodecScheme::kStored);
}

TEST(KvCodecTest, CorruptStreamsAreErrors) {
  const std::vector<std::byte> block = kv_like_bf16(5000, 10);
  const std::string good = encode(block, split_plan(SplitFormat::kBf16, 4000));
  std::vector<std::byte> out(block.size());
  // Every truncation.
  for (size_t n = 0; n < good.size(); n += (n < 64 ? 1 : 97)) {
    EXPECT_FALSE(kv_decode(as_bytes(good).first(n), out).ok()) << n;
  }
  // A trailing byte; the wrong output size; another version or scheme.
  EXPECT_FALSE(kv_decode(as_bytes(good + "x"), out).ok());
  std::vector<std::byte> shorter(block.size() - 2);
  EXPECT_FALSE(kv_decode(as_bytes(good), shorter).ok());
  for (const size_t at : {size_t{0}, size_t{4}, size_t{5}, size_t{16}}) {
    std::string bad = good;
    bad[at] = static_cast<char>(0x7f);
    EXPECT_FALSE(kv_decode(as_bytes(bad), out).ok()) << at;
  }
  // The first segment (header at 24): its escape count off by one either way, a code past
  // its codebook, a chunk index that disagrees.
  uint32_t escapes;
  std::memcpy(&escapes, good.data() + 24, 4);
  for (const uint32_t e : {escapes + 1, escapes == 0 ? 1U : escapes - 1}) {
    std::string bad = good;
    std::memcpy(bad.data() + 24, &e, 4);
    EXPECT_FALSE(kv_decode(as_bytes(bad), out).ok()) << e;
  }
  std::string bad = good;
  bad[28] = static_cast<char>(3);  // codebook of 3 symbols: codes 3-14 now past it
  EXPECT_FALSE(kv_decode(as_bytes(bad), out).ok());
  bad = good;
  const size_t chunks = 24 + 20 + 1000 + 2000;  // segment of 2000 elements: codes, raw
  const uint32_t wrong = 7;
  std::memcpy(bad.data() + chunks, &wrong, 4);
  EXPECT_FALSE(kv_decode(as_bytes(bad), out).ok());
}

}  // namespace
}  // namespace strata::kv
