// The split KV codec on the GPU (kernels/cuda/kv_codec_split.h) against the CPU codec
// (kv/kv_codec.h): the GPU encoder writes kv_encode's stream byte for byte, and the GPU decoder
// gives back every block of a CPU or GPU stream bit for bit -- the Llama-3.1-8B block shape,
// KV-like and wide values, NaN / Inf / denormal patterns, random bytes (stored), all-escape
// blocks, odd block, segment and chunk sizes, F16 -- while a corrupt stream (truncated, a bad
// code, a bad chunk index, any byte changed) is an error exactly when kv_decode says so, and no
// block but its own is written. Each stream lives in an allocation of its own length, so that
// compute-sanitizer's memcheck sees any read past one (gpu_check.sh's sanitizer filter runs the
// corrupt-stream tests).

#include "kernels/cuda/kv_codec_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kv/kv_codec.h"

namespace strata::cuda::testing {
namespace {

static_assert(kKvSplitChunk == static_cast<int64_t>(kv::kSplitChunk));
static_assert(static_cast<uint8_t>(KvSplitFormat::kBf16) ==
              static_cast<uint8_t>(kv::SplitFormat::kBf16));
static_assert(static_cast<uint8_t>(KvSplitFormat::kF16) ==
              static_cast<uint8_t>(kv::SplitFormat::kF16));

using Bytes = std::vector<std::byte>;

enum class Data {
  kKvLike,   // normal values, the scale varying by channel (a layer's K)
  kWide,     // normal values, channel scales spread over 2^-8 .. 2^8: escapes
  kRandom,   // random bits: stored
  kSpecial,  // KV-like with every 16-bit pattern (NaNs, infinities, denormals, zeros) in it
  kNarrow,   // one exponent: no escapes
};

uint16_t to_bits(float f, kv::SplitFormat format) {
  return format == kv::SplitFormat::kBf16 ? f32_to_bf16(f) : f32_to_f16(f);
}

Bytes make_block(Data data, size_t n, uint32_t seed, kv::SplitFormat format) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_real_distribution<float> spread(-8.0F, 8.0F);
  std::vector<float> channel_scale(128);
  for (float& s : channel_scale) s = std::exp2(spread(rng));
  std::vector<uint16_t> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (data) {
      case Data::kKvLike:
      case Data::kSpecial:
        x[i] = to_bits(normal(rng) * (0.05F + static_cast<float>(i % 128) / 64.0F), format);
        break;
      case Data::kWide:
        x[i] = to_bits(normal(rng) * channel_scale[i % 128], format);
        break;
      case Data::kRandom:
        x[i] = static_cast<uint16_t>(rng());
        break;
      case Data::kNarrow:
        x[i] = to_bits(1.0F + static_cast<float>(rng() % 1000) / 1000.0F, format);
        break;
    }
  }
  if (data == Data::kSpecial) {
    for (uint32_t v = 0; v < 65536; ++v) x[rng() % n] = static_cast<uint16_t>(v);
  }
  Bytes out(2 * n);
  std::memcpy(out.data(), x.data(), out.size());
  return out;
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string cpu_encode(const Bytes& block, const kv::KvCodecPlan& plan) {
  std::string s;
  kv::kv_encode(block, plan, s);
  return s;
}

// Codebooks calibrated on the blocks: one per segment, the first num_codebooks of them.
std::vector<kv::KvCodebook> calibrate(const std::vector<Bytes>& blocks, kv::SplitFormat format,
                                      size_t segment_bytes, size_t num_codebooks) {
  const size_t segment = segment_bytes == 0 ? blocks[0].size() : segment_bytes;
  std::vector<kv::SymbolHistogram> hist((blocks[0].size() + segment - 1) / segment);
  for (const Bytes& b : blocks) kv::add_segment_histograms(format, b, segment, hist);
  std::vector<kv::KvCodebook> books;
  for (size_t s = 0; s < std::min(num_codebooks, hist.size()); ++s) {
    books.push_back(kv::codebook_from_histogram(hist[s]));
  }
  return books;
}

KvSplitCodebook to_device_book(const kv::KvCodebook& book) {
  KvSplitCodebook d;
  std::memcpy(d.symbols, book.symbols.data(), 15);
  d.size = book.size;
  return d;
}

KvSplitFormat to_device_format(kv::SplitFormat f) {
  return f == kv::SplitFormat::kBf16 ? KvSplitFormat::kBf16 : KvSplitFormat::kF16;
}

// The GPU's streams of blocks (each at its own pool block, the slots at an odd stride so that
// they start at every alignment), under plan (its codebooks given).
std::vector<std::string> gpu_encode(const std::vector<Bytes>& blocks, const kv::KvCodecPlan& plan) {
  const size_t block_bytes = blocks[0].size();
  const auto num = static_cast<int32_t>(blocks.size());
  const int32_t pool_blocks = num + 2;
  std::vector<std::byte> pool(block_bytes * static_cast<size_t>(pool_blocks), std::byte{0x5a});
  std::vector<int32_t> ids(static_cast<size_t>(num));
  for (int32_t i = 0; i < num; ++i) {
    ids[static_cast<size_t>(i)] = pool_blocks - 1 - i;
    std::memcpy(pool.data() + block_bytes * static_cast<size_t>(pool_blocks - 1 - i),
                blocks[static_cast<size_t>(i)].data(), block_bytes);
  }
  std::vector<KvSplitCodebook> books;
  for (const kv::KvCodebook& b : plan.codebooks) books.push_back(to_device_book(b));
  const int64_t stride = kv_split_stream_bound(static_cast<int64_t>(block_bytes)) + 5;
  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_ids = upload(ids);
  DeviceBuffer d_books = upload(books);
  auto d_out = DeviceBuffer::allocate(static_cast<size_t>(stride * num));
  auto d_lengths = DeviceBuffer::allocate(sizeof(uint64_t) * static_cast<size_t>(num));
  const size_t ws = kv_split_encode_workspace_bytes(num, static_cast<int64_t>(block_bytes),
                                                    static_cast<int64_t>(plan.segment_bytes));
  auto d_ws = DeviceBuffer::allocate(ws);
  EXPECT_TRUE(d_out.ok() && d_lengths.ok() && d_ws.ok());
  if (!d_out.ok() || !d_lengths.ok() || !d_ws.ok()) return {};
  KvSplitEncodeParams p;
  p.pool = d_pool.data();
  p.block_ids = d_ids.as<int32_t>();
  p.num_blocks = num;
  p.block_bytes = static_cast<int64_t>(block_bytes);
  p.segment_bytes = static_cast<int64_t>(plan.segment_bytes);
  p.format = to_device_format(plan.split);
  p.codebooks = d_books.as<KvSplitCodebook>();
  p.num_codebooks = static_cast<int32_t>(books.size());
  p.out = d_out->data();
  p.out_stride = stride;
  p.stream_bytes = d_lengths->as<uint64_t>();
  p.workspace = d_ws->data();
  p.workspace_bytes = ws;
  const Status s = kv_split_encode(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!s.ok()) return {};
  sync_device();
  const auto out = download<char>(*d_out, static_cast<size_t>(stride * num));
  const auto lengths = download<uint64_t>(*d_lengths, static_cast<size_t>(num));
  std::vector<std::string> streams;
  for (int32_t i = 0; i < num; ++i) {
    EXPECT_LE(lengths[static_cast<size_t>(i)], static_cast<uint64_t>(stride));
    streams.emplace_back(out.data() + stride * i,
                         std::min<uint64_t>(lengths[static_cast<size_t>(i)], stride));
  }
  return streams;
}

struct Decoded {
  std::vector<Bytes> blocks;
  std::vector<int32_t> errors;
  bool others_untouched = true;  // the pool blocks no stream decodes to
};

// Decodes each stream (in an allocation of its own length) into pool block 2 i + 1 of a pool
// whose even blocks no stream names.
Decoded gpu_decode(const std::vector<std::string>& streams, size_t block_bytes) {
  const auto num = static_cast<int32_t>(streams.size());
  const int32_t pool_blocks = 2 * num + 1;
  constexpr std::byte kFill{0xee};
  std::vector<DeviceBuffer> owned;
  std::vector<const uint8_t*> pointers;
  std::vector<uint64_t> lengths;
  for (const std::string& s : streams) {
    owned.push_back(upload_bytes(s.data(), s.size()));
    pointers.push_back(owned.back().as<const uint8_t>());
    lengths.push_back(s.size());
  }
  std::vector<int32_t> ids(static_cast<size_t>(num));
  for (int32_t i = 0; i < num; ++i) ids[static_cast<size_t>(i)] = 2 * i + 1;
  const std::vector<std::byte> fill(block_bytes * static_cast<size_t>(pool_blocks), kFill);
  DeviceBuffer d_pool = upload(fill);
  DeviceBuffer d_pointers = upload(pointers);
  DeviceBuffer d_lengths = upload(lengths);
  DeviceBuffer d_ids = upload(ids);
  auto d_errors = DeviceBuffer::allocate(sizeof(int32_t) * static_cast<size_t>(num));
  const size_t ws = kv_split_decode_workspace_bytes(num, static_cast<int64_t>(block_bytes));
  auto d_ws = DeviceBuffer::allocate(ws);
  Decoded d;
  EXPECT_TRUE(d_errors.ok() && d_ws.ok());
  if (!d_errors.ok() || !d_ws.ok()) return d;
  KvSplitDecodeParams p;
  p.streams = d_pointers.as<const uint8_t* const>();
  p.stream_bytes = d_lengths.as<const uint64_t>();
  p.num_blocks = num;
  p.pool = d_pool.data();
  p.block_ids = d_ids.as<const int32_t>();
  p.block_bytes = static_cast<int64_t>(block_bytes);
  p.errors = d_errors->as<int32_t>();
  p.workspace = d_ws->data();
  p.workspace_bytes = ws;
  const Status s = kv_split_decode(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!s.ok()) return d;
  sync_device();
  const auto pool = download<std::byte>(d_pool, fill.size());
  d.errors = download<int32_t>(*d_errors, static_cast<size_t>(num));
  for (int32_t i = 0; i < pool_blocks; ++i) {
    const auto begin = pool.begin() + static_cast<std::ptrdiff_t>(block_bytes * i);
    const auto end = begin + static_cast<std::ptrdiff_t>(block_bytes);
    if (i % 2 == 1) {
      d.blocks.emplace_back(begin, end);
    } else if (!std::all_of(begin, end, [](std::byte b) { return b == kFill; })) {
      d.others_untouched = false;
    }
  }
  return d;
}

struct Case {
  const char* name;
  Data data;
  kv::SplitFormat format;
  size_t elems;          // a block's
  size_t segment_bytes;  // the plan's
  size_t num_codebooks;  // calibrated, segment s codes with book s % num_codebooks
  size_t num_blocks;
};

constexpr auto kBf16 = kv::SplitFormat::kBf16;
constexpr auto kF16 = kv::SplitFormat::kF16;
constexpr size_t kAll = 1 << 20;  // a codebook per segment

// The Llama-3.1-8B block (32 layers x K, V x 8 KV heads x 16 tokens x 128, 2 MiB, a segment per
// layer's K or V), the same shape at two layers, and odd sizes across groups, chunks and
// segments (segments of one element, of an odd number, of a chunk and a few).
const Case kCases[] = {
    {"llama8b", Data::kKvLike, kBf16, 32 * 2 * 8 * 16 * 128, 32768, kAll, 3},
    {"llama_wide", Data::kWide, kBf16, 2 * 2 * 8 * 16 * 128, 32768, kAll, 4},
    {"llama_wide_f16", Data::kWide, kF16, 2 * 2 * 8 * 16 * 128, 32768, kAll, 2},
    {"segments_of_33", Data::kKvLike, kBf16, 3 * 4096 + 77, 66, 7, 3},
    {"odd_segments", Data::kWide, kBf16, 3 * 4096 + 77, 2 * 4097, kAll, 3},
    {"chunk_and_3", Data::kKvLike, kBf16, 3 * 4096 + 77, 2 * 4096 + 6, kAll, 3},
    {"whole_block_special", Data::kSpecial, kBf16, 2 * 65536, 0, 1, 2},
    {"special_f16", Data::kSpecial, kF16, 2 * 65536, 8192, kAll, 2},
    {"narrow", Data::kNarrow, kBf16, 40000, 16384, 1, 2},
    {"random", Data::kRandom, kBf16, 10000, 4096, kAll, 2},
    {"one_element", Data::kKvLike, kBf16, 1, 0, 1, 3},
    {"elements_of_one", Data::kWide, kF16, 31, 2, 1, 3},
    {"tiny", Data::kKvLike, kBf16, 33, 6, 2, 3},
    {"chunk_less_one", Data::kWide, kBf16, 4095, 0, 1, 2},
    {"chunk_and_one", Data::kWide, kBf16, 4097, 0, 1, 2},
    {"two_chunks_odd_segment", Data::kKvLike, kBf16, 9000, 2 * 4501, kAll, 2},
};

std::vector<Bytes> blocks_of(const Case& c) {
  std::vector<Bytes> blocks;
  for (size_t i = 0; i < c.num_blocks; ++i) {
    blocks.push_back(make_block(c.data, c.elems, static_cast<uint32_t>(100 + i), c.format));
  }
  return blocks;
}

kv::KvCodecPlan plan_of(const Case& c, const std::vector<Bytes>& blocks) {
  kv::KvCodecPlan plan{
      .scheme = kv::KvCodecScheme::kSplit, .split = c.format, .segment_bytes = c.segment_bytes};
  plan.codebooks = calibrate(blocks, c.format, c.segment_bytes, c.num_codebooks);
  return plan;
}

// The GPU's streams equal the CPU's and decode (on both) to the blocks.
void expect_encodes_as_cpu(const std::vector<Bytes>& blocks, const kv::KvCodecPlan& plan) {
  const std::vector<std::string> gpu = gpu_encode(blocks, plan);
  ASSERT_EQ(gpu.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    SCOPED_TRACE("block " + std::to_string(i));
    const std::string cpu = cpu_encode(blocks[i], plan);
    ASSERT_EQ(gpu[i].size(), cpu.size());
    const auto diff = std::mismatch(gpu[i].begin(), gpu[i].end(), cpu.begin());
    EXPECT_TRUE(diff.first == gpu[i].end())
        << "first difference at byte " << (diff.first - gpu[i].begin()) << " of " << cpu.size();
  }
  const Decoded d = gpu_decode(gpu, blocks[0].size());
  ASSERT_EQ(d.blocks.size(), blocks.size());
  EXPECT_TRUE(d.others_untouched);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(d.errors[i], 0) << kv_split_decode_status(d.errors[i]).to_string();
    EXPECT_TRUE(d.blocks[i] == blocks[i]) << "block " << i;
  }
}

class KvCodecSplitTest : public CudaTest {};
class KvCodecSplitCorruptTest : public CudaTest {};

TEST_F(KvCodecSplitTest, EncodeWritesTheCpuStreamByteForByte) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<Bytes> blocks = blocks_of(c);
    expect_encodes_as_cpu(blocks, plan_of(c, blocks));
  }
}

TEST_F(KvCodecSplitTest, EncodeTakesAnyCodebookAsTheCpuDoes) {
  const std::vector<Bytes> blocks = {make_block(Data::kKvLike, 20000, 1, kBf16),
                                     make_block(Data::kKvLike, 20000, 2, kBf16)};
  kv::KvCodecPlan plan{.scheme = kv::KvCodecScheme::kSplit, .split = kBf16, .segment_bytes = 8192};
  plan.codebooks = calibrate(blocks, kBf16, 8192, 1);
  // A symbol listed twice (its last code wins) and bytes past the size, which the header keeps.
  kv::KvCodebook odd = plan.codebooks[0];
  odd.symbols[1] = odd.symbols[0];
  odd.symbols[14] = 0x42;
  odd.size = 14;
  // Nothing in the codebook occurs, or it is empty: every element an escape, the block stored.
  kv::KvCodebook unused;
  unused.size = 1;
  unused.symbols[0] = 0xff;
  for (const auto& books : std::vector<std::vector<kv::KvCodebook>>{
           {odd}, {odd, plan.codebooks[0]}, {unused}, {kv::KvCodebook{}}}) {
    plan.codebooks = books;
    expect_encodes_as_cpu(blocks, plan);
  }
}

TEST_F(KvCodecSplitTest, DecodeGivesBackCpuStreamsBitForBit) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<Bytes> blocks = blocks_of(c);
    kv::KvCodecPlan plan = plan_of(c, blocks);
    // Calibrated codebooks, and each segment's own (which only the CPU encoder makes).
    for (const bool own : {false, true}) {
      if (own) plan.codebooks.clear();
      std::vector<std::string> streams;
      for (const Bytes& b : blocks) streams.push_back(cpu_encode(b, plan));
      const Decoded d = gpu_decode(streams, blocks[0].size());
      ASSERT_EQ(d.blocks.size(), blocks.size());
      EXPECT_TRUE(d.others_untouched);
      for (size_t i = 0; i < blocks.size(); ++i) {
        EXPECT_EQ(d.errors[i], 0) << kv_split_decode_status(d.errors[i]).to_string();
        EXPECT_TRUE(d.blocks[i] == blocks[i]) << "block " << i << (own ? " own codebooks" : "");
      }
    }
  }
}

// A split stream even where kv_encode would store the block: its header, the split header and
// each segment coded with books[s % size].
std::string split_stream(const Bytes& block, kv::SplitFormat format, size_t segment_bytes,
                         const std::vector<kv::KvCodebook>& books) {
  std::string stream = cpu_encode(block, {.scheme = kv::KvCodecScheme::kStored});
  stream.resize(16);  // the header
  stream[5] = 1;      // split
  stream.push_back(static_cast<char>(format));
  stream.append(3, '\0');
  const auto segment = static_cast<uint32_t>(segment_bytes);
  stream.append(reinterpret_cast<const char*>(&segment), 4);
  for (size_t at = 0, s = 0; at < block.size(); at += segment_bytes, ++s) {
    const size_t n = std::min(segment_bytes, block.size() - at);
    kv::split_encode_segment(format, std::span(block).subspan(at, n), books[s % books.size()],
                             stream);
  }
  return stream;
}

TEST_F(KvCodecSplitTest, DecodeReadsSplitStreamsThatDoNotPay) {
  // kv_encode would store these, but a valid split stream must decode: a codebook of one symbol
  // with half the elements escapes, and segments of 1, 3 and 33 elements, a unit spanning
  // thousands of them.
  Bytes block(80);
  for (size_t i = 0; i < 40; ++i) {
    const uint16_t x =
        i % 2 == 0 ? f32_to_bf16(1.5F) : f32_to_bf16(static_cast<float>(i) * 1000.0F);
    std::memcpy(block.data() + 2 * i, &x, 2);
  }
  kv::KvCodebook book;
  book.size = 1;
  book.symbols[0] = static_cast<uint8_t>(f32_to_bf16(1.5F) >> 7);
  std::vector<std::string> streams = {split_stream(block, kBf16, 80, {book})};
  std::vector<Bytes> blocks = {block};
  for (const kv::SplitFormat format : {kBf16, kF16}) {
    const Bytes wide = make_block(Data::kWide, 3 * 4096 + 77, 9, format);
    for (const size_t segment : {size_t{2}, size_t{6}, size_t{66}}) {
      const std::vector<Bytes> one = {wide};
      streams.push_back(split_stream(wide, format, segment, calibrate(one, format, segment, 5)));
      blocks.push_back(wide);
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<std::byte> cpu(blocks[i].size());
    ASSERT_TRUE(kv::kv_decode(as_bytes(streams[i]), cpu).ok()) << "stream " << i;
    ASSERT_TRUE(cpu == blocks[i]) << "stream " << i;
    const Decoded d = gpu_decode({streams[i]}, blocks[i].size());
    ASSERT_EQ(d.blocks.size(), 1U);
    EXPECT_EQ(d.errors[0], 0) << "stream " << i << ": "
                              << kv_split_decode_status(d.errors[0]).to_string();
    EXPECT_TRUE(d.blocks[0] == blocks[i]) << "stream " << i;
  }
}

TEST_F(KvCodecSplitTest, DecodesEscapesAtTheEdgesOfGroupsChunksAndSegments) {
  // The decoder takes 8 elements a group (a code word, 8 raw bytes, 16 output bytes) and places
  // each group's escapes by a prefix over the groups: escapes at each segment's first and last
  // element, on both sides of every group of 8 and of every chunk, an all-escape segment and one
  // with none, segments of 4109 elements (not a multiple of 8; units that start inside a chunk
  // and span segments), a last segment of 38, and the escapes NaNs, infinities, denormals and
  // signed zeros.
  constexpr size_t kSegment = 4109;
  constexpr size_t kElems = 3 * kSegment + 38;
  Bytes block(2 * kElems);
  for (size_t i = 0; i < kElems; ++i) {
    const size_t seg = i / kSegment, at = i % kSegment;
    const bool edge = at == 0 || at == kSegment - 1 || i == kElems - 1 || at % 8 == 0 ||
                      at % 8 == 7 || i % 8 == 0 || i % 8 == 7 || at % 4096 == 0 ||
                      at % 4096 == 4095 || i % 4096 == 0 || i % 4096 == 4095;
    const bool escape = seg == 1 || (seg != 2 && edge);
    uint16_t x = static_cast<uint16_t>(0x3f80 | (i & 0x7f) | ((i & 0x80) << 8));  // 1.x, +-
    if (escape) {
      const uint16_t specials[6] = {static_cast<uint16_t>(0x7fc0 | (i & 0x3f)),  // NaN
                                    0x7f80,
                                    0xff80,                                      // +-Inf
                                    static_cast<uint16_t>(0x0001 + (i & 0x7f)),  // denormal
                                    0x8000,                                      // -0
                                    f32_to_bf16(static_cast<float>(i + 1) * 1e20F)};
      x = specials[i % 6];
    }
    std::memcpy(block.data() + 2 * i, &x, 2);
  }
  std::vector<std::string> streams;
  for (const kv::SplitFormat format : {kBf16, kF16}) {
    kv::KvCodebook one;
    one.size = 1;
    one.symbols[0] = format == kBf16 ? 0x7f : 0x3f;
    const std::vector<Bytes> blocks = {block};
    for (const auto& books : std::vector<std::vector<kv::KvCodebook>>{
             {one}, calibrate(blocks, format, 2 * kSegment, 4)}) {
      streams.push_back(split_stream(block, format, 2 * kSegment, books));
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<std::byte> cpu(block.size());
    ASSERT_TRUE(kv::kv_decode(as_bytes(streams[i]), cpu).ok()) << "stream " << i;
    ASSERT_TRUE(cpu == block) << "stream " << i;
  }
  const Decoded d = gpu_decode(streams, block.size());
  ASSERT_EQ(d.blocks.size(), streams.size());
  EXPECT_TRUE(d.others_untouched);
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(d.errors[i], 0) << "stream " << i << ": "
                              << kv_split_decode_status(d.errors[i]).to_string();
    EXPECT_TRUE(d.blocks[i] == block) << "stream " << i;
  }
}

// Decodes every variant on the GPU and checks it against kv_decode: an error on one exactly when
// on the other, the same bytes when neither, and no other block written.
void expect_decodes_as_cpu(const std::vector<std::string>& variants, size_t block_bytes) {
  const Decoded d = gpu_decode(variants, block_bytes);
  ASSERT_EQ(d.blocks.size(), variants.size());
  EXPECT_TRUE(d.others_untouched);
  for (size_t i = 0; i < variants.size(); ++i) {
    Bytes cpu(block_bytes);
    const Status want = kv::kv_decode(as_bytes(variants[i]), cpu);
    EXPECT_EQ(d.errors[i] == 0, want.ok())
        << "variant " << i << ": CPU " << want.to_string() << ", GPU "
        << kv_split_decode_status(d.errors[i]).to_string();
    if (want.ok() && d.errors[i] == 0) {
      EXPECT_TRUE(d.blocks[i] == cpu) << "variant " << i;
    }
  }
}

struct Corruptible {
  Bytes block;
  std::string stream;
};

// Three segments (2000, 2000, 1000 elements), as the CPU's corrupt-stream test.
Corruptible corruptible() {
  Corruptible c{make_block(Data::kWide, 5000, 10, kBf16), {}};
  c.stream = cpu_encode(
      c.block, {.scheme = kv::KvCodecScheme::kSplit, .split = kBf16, .segment_bytes = 4000});
  EXPECT_EQ(c.stream[5], 1) << "the test stream must be split";
  return c;
}

TEST_F(KvCodecSplitCorruptTest, TruncatedAndExtendedStreamsAreErrors) {
  const Corruptible c = corruptible();
  std::vector<std::string> variants;
  for (size_t n = 0; n < c.stream.size(); n += (n < 64 ? 1 : 97))
    variants.push_back(c.stream.substr(0, n));
  variants.push_back(c.stream.substr(0, c.stream.size() - 1));
  variants.push_back(c.stream + "x");
  const Decoded d = gpu_decode(variants, c.block.size());
  ASSERT_EQ(d.errors.size(), variants.size());
  EXPECT_TRUE(d.others_untouched);
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(d.errors[i], 0) << "length " << variants[i].size();
    EXPECT_EQ(kv_split_decode_status(d.errors[i]).code(), StatusCode::kInvalidArgument);
  }
  // The stream itself, and the wrong output size.
  EXPECT_EQ(gpu_decode({c.stream}, c.block.size()).errors, std::vector<int32_t>{0});
  EXPECT_NE(gpu_decode({c.stream}, c.block.size() - 2).errors[0], 0);
}

TEST_F(KvCodecSplitCorruptTest, BadHeadersCodesCountsAndChunkIndexAreErrors) {
  const Corruptible c = corruptible();
  std::vector<std::string> variants;
  for (const size_t at : {size_t{0}, size_t{4}, size_t{5}, size_t{8}, size_t{16}, size_t{20}}) {
    variants.push_back(c.stream);
    variants.back()[at] = static_cast<char>(0x7f);
  }
  // The first segment (header at 24): its escape count off by one either way, a codebook of
  // 16, one of 3 (codes 3-14 now past it), a chunk index that disagrees.
  uint32_t escapes;
  std::memcpy(&escapes, c.stream.data() + 24, 4);
  EXPECT_GT(escapes, 0U) << "wide values have escapes";
  for (const uint32_t e : {escapes + 1, escapes - 1}) {
    variants.push_back(c.stream);
    std::memcpy(variants.back().data() + 24, &e, 4);
  }
  for (const char size : {char{16}, char{3}}) {
    variants.push_back(c.stream);
    variants.back()[28] = size;
  }
  const size_t index = 24 + 20 + 1000 + 2000;  // the first segment's chunk index
  const uint32_t wrong = 7;
  variants.push_back(c.stream);
  std::memcpy(variants.back().data() + index, &wrong, 4);
  // A segment size of 0 or odd.
  for (const uint32_t segment : {0U, 3999U}) {
    variants.push_back(c.stream);
    std::memcpy(variants.back().data() + 20, &segment, 4);
  }
  const Decoded d = gpu_decode(variants, c.block.size());
  ASSERT_EQ(d.errors.size(), variants.size());
  EXPECT_TRUE(d.others_untouched);
  for (size_t i = 0; i < variants.size(); ++i) EXPECT_NE(d.errors[i], 0) << "variant " << i;
  // Another segment size than the stream was cut with: whatever kv_decode says.
  for (const uint32_t segment : {3998U, 4002U, 8000U, 10000U}) {
    variants.push_back(c.stream);
    std::memcpy(variants.back().data() + 20, &segment, 4);
  }
  expect_decodes_as_cpu(variants, c.block.size());
}

TEST_F(KvCodecSplitCorruptTest, AnyChangedByteIsAnErrorExactlyWhenTheCpuSaysSo) {
  const Corruptible c = corruptible();
  std::mt19937 rng(11);
  std::vector<std::string> variants;
  for (int i = 0; i < 600; ++i) {
    std::string v = c.stream;
    // Half in the headers and chunk indexes' neighbourhood (the first 64 bytes and around each
    // index), half anywhere.
    const size_t at = i % 2 == 0 ? rng() % 64 : rng() % v.size();
    v[at] = static_cast<char>(static_cast<uint8_t>(v[at]) ^ static_cast<uint8_t>(1 + rng() % 255));
    variants.push_back(std::move(v));
  }
  expect_decodes_as_cpu(variants, c.block.size());
}

TEST_F(KvCodecSplitCorruptTest, ZstdStreamsAreUnsupportedAndStoredOnesChecked) {
  const Bytes block = make_block(Data::kNarrow, 4096, 3, kBf16);
  const std::string zstd = cpu_encode(block, {.scheme = kv::KvCodecScheme::kZstd});
  ASSERT_EQ(zstd[5], 2);
  const std::string stored = cpu_encode(block, {.scheme = kv::KvCodecScheme::kStored});
  const Decoded d =
      gpu_decode({zstd, stored, stored.substr(0, stored.size() - 1), stored + "x"}, block.size());
  ASSERT_EQ(d.errors.size(), 4U);
  EXPECT_EQ(kv_split_decode_status(d.errors[0]).code(), StatusCode::kUnsupported);
  EXPECT_EQ(d.errors[1], 0);
  EXPECT_TRUE(d.blocks[1] == block);
  EXPECT_NE(d.errors[2], 0);
  EXPECT_NE(d.errors[3], 0);
  EXPECT_TRUE(d.others_untouched);
}

TEST(KvCodecSplitDispatchTest, RejectsBadShapesBeforeLaunching) {
  KvSplitEncodeParams e;
  e.num_blocks = 1;
  e.block_bytes = 7;  // odd
  EXPECT_EQ(kv_split_encode(e, nullptr).code(), StatusCode::kInvalidArgument);
  e.block_bytes = 64;
  e.segment_bytes = 6 + 1;
  EXPECT_EQ(kv_split_encode(e, nullptr).code(), StatusCode::kInvalidArgument);
  e.segment_bytes = 0;  // pointers missing
  EXPECT_EQ(kv_split_encode(e, nullptr).code(), StatusCode::kInvalidArgument);
  KvSplitDecodeParams d;
  d.num_blocks = 1;
  d.block_bytes = 0;
  EXPECT_EQ(kv_split_decode(d, nullptr).code(), StatusCode::kInvalidArgument);
  d.block_bytes = 64;
  EXPECT_EQ(kv_split_decode(d, nullptr).code(), StatusCode::kInvalidArgument);
  // Nothing to do is no error.
  e.num_blocks = 0;
  d.num_blocks = 0;
  EXPECT_TRUE(kv_split_encode(e, nullptr).ok());
  EXPECT_TRUE(kv_split_decode(d, nullptr).ok());
  EXPECT_EQ(kv_split_stream_bound(1000), static_cast<int64_t>(kv::kv_encode_bound(1000)));
}

TEST(KvCodecSplitDispatchTest, EveryDecodeErrorHasAStatus) {
  EXPECT_TRUE(kv_split_decode_status(0).ok());
  for (int32_t e = 1; e <= 14; ++e) EXPECT_FALSE(kv_split_decode_status(e).ok()) << e;
}

}  // namespace
}  // namespace strata::cuda::testing
