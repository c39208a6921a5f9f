#pragma once
// The KV codec: bitwise-lossless compression of KV blocks for transfers and tier writes
// (docs/kv-codec.md). Three schemes, each stream saying which it holds, so any decoder reads any
// encoder's output:
//
//   stored  the bytes as they are
//   split   16-bit floats (BF16, F16) split into a symbol byte -- BF16's exponent, F16's sign,
//           exponent and top two mantissa bits -- and a raw byte (the other eight bits, kept as
//           they are). The symbols take few values in KV, so each is coded in 4 bits by a
//           codebook of 15 symbols; any other symbol is code 15, an escape, its byte in a
//           stream of its own. A block is cut into segments (a layer's K or V), each with its
//           own codebook: calibrated per model and layer (KvCodecPlan::codebooks) or, when none
//           is given, the segment's 15 most frequent symbols. 12 bits an element and the
//           escapes: at most 1.33x.
//   zstd    one zstd frame (Debian's libzstd), for what split does not fit (8-bit and 4-bit
//           codes, their scales) where it pays
//
// kv_encode falls back to stored when a scheme would not make the block smaller. kv_decode
// checks every length, count and code against the stream's own header before it reads or
// writes: a corrupt or truncated stream is InvalidArgument, never an overread or a crash.
//
// Stream (little-endian):
//   header    "SKVC", version u8 (1), scheme u8, 0 u16, raw bytes u64               16 bytes
//   stored    the raw bytes
//   zstd      one frame
//   split     format u8, 0 u8[3], segment bytes u32, then each segment (the last may be
//             shorter; n = its elements):
//               escapes u32, codebook size u8, symbols u8[15]
//               codes     ceil(n / 2) bytes, element 2j in the low nibble, 2j + 1 in the high
//               raw       n bytes
//               chunks    ceil(n / kSplitChunk) u32: the escapes before each chunk of
//                         kSplitChunk elements (a parallel decoder's start in the escapes)
//               escapes   one byte each, in element order
//
// Thread-safe (no state). Cost: encode and decode are one pass over the block (split: two when
// it builds its codebooks), on the calling thread; the AVX2 decode runs where the CPU has it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::kv {

enum class KvCodecScheme : uint8_t { kStored = 0, kSplit = 1, kZstd = 2 };

// "stored", "split", "zstd".
std::string_view codec_scheme_name(KvCodecScheme scheme);
std::optional<KvCodecScheme> parse_codec_scheme(std::string_view name);

// How a 16-bit element splits into its symbol and raw byte.
enum class SplitFormat : uint8_t {
  kBf16 = 1,  // symbol: the exponent (bits 7-14); raw: the sign and the 7 mantissa bits
  kF16 = 2,   // symbol: the high byte (sign, exponent, 2 mantissa bits); raw: the low byte
};
// BF16 and F16 pools' format; nullopt for other element types (split does not apply).
std::optional<SplitFormat> split_format_of(DType pool_dtype);

// A segment's codebook: code c < size is symbols[c]; code 15 is the escape.
struct KvCodebook {
  static constexpr int kCodes = 15;
  std::array<uint8_t, kCodes> symbols = {};
  uint8_t size = 0;
  bool operator==(const KvCodebook&) const = default;
};
using SymbolHistogram = std::array<uint64_t, 256>;

// Adds the symbols of bytes (whole elements) to hist.
void add_symbol_histogram(SplitFormat format, std::span<const std::byte> bytes,
                          SymbolHistogram& hist);
// Adds each segment of block (segment_bytes each, the last maybe shorter) to hist[segment],
// hist sized to the block's segments: how calibrated codebooks are counted.
void add_segment_histograms(SplitFormat format, std::span<const std::byte> block,
                            size_t segment_bytes, std::vector<SymbolHistogram>& hist);
// The 15 most frequent symbols (ties to the smaller symbol), those that occur at all.
KvCodebook codebook_from_histogram(const SymbolHistogram& hist);

// Elements per chunk of a split segment's escape index.
inline constexpr size_t kSplitChunk = 4096;

struct KvCodecPlan {
  KvCodecScheme scheme = KvCodecScheme::kStored;
  SplitFormat split = SplitFormat::kBf16;  // split: the element format
  // split: bytes per segment, each with its own codebook (0: the whole block one segment); even.
  size_t segment_bytes = 0;
  // split: segment i's codebook is codebooks[i % size] (calibrated: one per layer's K and V, in
  // the order the block holds them); empty: each segment's own most frequent symbols.
  std::vector<KvCodebook> codebooks = {};
  int zstd_level = 1;  // zstd
};

// Appends bytes' stream to out. bytes of a split plan must be whole 16-bit elements (an odd
// length is stored). The stream is never longer than kv_encode_bound(bytes.size()).
void kv_encode(std::span<const std::byte> bytes, const KvCodecPlan& plan, std::string& out);
size_t kv_encode_bound(size_t raw_bytes);

// The raw size the stream decodes to and its scheme, from its header (InvalidArgument when it
// is no stream of this codec).
struct KvStreamInfo {
  KvCodecScheme scheme = KvCodecScheme::kStored;
  uint64_t raw_bytes = 0;
};
Result<KvStreamInfo> kv_stream_info(std::span<const std::byte> stream);
// Decodes the whole stream into out, whose size must be its raw size.
Status kv_decode(std::span<const std::byte> stream, std::span<std::byte> out);

// Split's coding of one segment (kv_codec_split.cc): into out (appended), from a codebook.
void split_encode_segment(SplitFormat format, std::span<const std::byte> bytes,
                          const KvCodebook& book, std::string& out);
// Decodes a segment of n elements from in (advanced past it) into out (2n bytes).
Status split_decode_segment(SplitFormat format, std::span<const std::byte>& in,
                            std::span<std::byte> out);

}  // namespace strata::kv
