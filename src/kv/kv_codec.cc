#include "kv/kv_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>

namespace strata::kv {
namespace {

constexpr char kMagic[4] = {'S', 'K', 'V', 'C'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
constexpr size_t kSplitHeaderBytes = 8;

template <typename T>
void append_raw(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void append_header(std::string& out, KvCodecScheme scheme, uint64_t raw_bytes) {
  out.append(kMagic, sizeof(kMagic));
  append_raw(out, kVersion);
  append_raw(out, static_cast<uint8_t>(scheme));
  append_raw(out, uint16_t{0});
  append_raw(out, raw_bytes);
}

void append_bytes(std::string& out, std::span<const std::byte> bytes) {
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Replaces what was appended from `start` with the stored stream of bytes.
void store_instead(std::string& out, size_t start, std::span<const std::byte> bytes) {
  out.resize(start);
  append_header(out, KvCodecScheme::kStored, bytes.size());
  append_bytes(out, bytes);
}

void encode_split(std::span<const std::byte> bytes, const KvCodecPlan& plan, std::string& out) {
  const size_t segment = plan.segment_bytes == 0 ? bytes.size() : plan.segment_bytes;
  append_raw(out, static_cast<uint8_t>(plan.split));
  out.append(3, '\0');
  append_raw(out, static_cast<uint32_t>(segment));
  size_t index = 0;
  for (size_t at = 0; at < bytes.size(); at += segment, ++index) {
    const std::span<const std::byte> part = bytes.subspan(at, std::min(segment, bytes.size() - at));
    KvCodebook book;
    if (!plan.codebooks.empty()) {
      book = plan.codebooks[index % plan.codebooks.size()];
    } else {
      SymbolHistogram hist = {};
      add_symbol_histogram(plan.split, part, hist);
      book = codebook_from_histogram(hist);
    }
    split_encode_segment(plan.split, part, book, out);
  }
}

// False (nothing appended) on an error, which ZSTD_compressBound's room rules out.
bool encode_zstd(std::span<const std::byte> bytes, int level, std::string& out) {
  const size_t start = out.size();
  out.resize(start + ZSTD_compressBound(bytes.size()));
  const size_t n =
      ZSTD_compress(out.data() + start, out.size() - start, bytes.data(), bytes.size(), level);
  const bool ok = ZSTD_isError(n) == 0U;
  out.resize(ok ? start + n : start);
  return ok;
}

uint64_t read_u64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

Status bad(const std::string& what) { return Status::InvalidArgument("KV stream: " + what); }

}  // namespace

std::string_view codec_scheme_name(KvCodecScheme scheme) {
  switch (scheme) {
    case KvCodecScheme::kStored:
      return "stored";
    case KvCodecScheme::kSplit:
      return "split";
    case KvCodecScheme::kZstd:
      return "zstd";
  }
  return "?";
}

std::optional<KvCodecScheme> parse_codec_scheme(std::string_view name) {
  for (const KvCodecScheme s :
       {KvCodecScheme::kStored, KvCodecScheme::kSplit, KvCodecScheme::kZstd}) {
    if (codec_scheme_name(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<SplitFormat> split_format_of(DType pool_dtype) {
  if (pool_dtype == DType::kBF16) return SplitFormat::kBf16;
  if (pool_dtype == DType::kF16) return SplitFormat::kF16;
  return std::nullopt;
}

KvCodebook codebook_from_histogram(const SymbolHistogram& hist) {
  // The symbols that occur (in KV a few dozen at most), most frequent first, ties to the smaller.
  std::array<std::pair<uint64_t, int>, 256> seen;
  size_t n = 0;
  for (int s = 0; s < 256; ++s) {
    if (hist[static_cast<size_t>(s)] > 0) seen[n++] = {hist[static_cast<size_t>(s)], s};
  }
  const size_t keep = std::min<size_t>(n, KvCodebook::kCodes);
  std::partial_sort(seen.begin(), seen.begin() + static_cast<std::ptrdiff_t>(keep),
                    seen.begin() + static_cast<std::ptrdiff_t>(n),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  KvCodebook book;
  for (size_t i = 0; i < keep; ++i)
    book.symbols[book.size++] = static_cast<uint8_t>(seen[i].second);
  return book;
}

void add_segment_histograms(SplitFormat format, std::span<const std::byte> block,
                            size_t segment_bytes, std::vector<SymbolHistogram>& hist) {
  for (size_t s = 0, at = 0; s < hist.size() && at < block.size(); ++s, at += segment_bytes) {
    add_symbol_histogram(format, block.subspan(at, std::min(segment_bytes, block.size() - at)),
                         hist[s]);
  }
}

size_t kv_encode_bound(size_t raw_bytes) { return kHeaderBytes + raw_bytes; }

void kv_encode(std::span<const std::byte> bytes, const KvCodecPlan& plan, std::string& out) {
  const size_t start = out.size();
  append_header(out, plan.scheme, bytes.size());
  bool encoded = false;
  switch (plan.scheme) {
    case KvCodecScheme::kStored:
      append_bytes(out, bytes);
      return;
    case KvCodecScheme::kSplit: {
      const size_t segment = plan.segment_bytes == 0 ? bytes.size() : plan.segment_bytes;
      encoded = bytes.size() % 2 == 0 && segment % 2 == 0 && segment <= UINT32_MAX &&
                (segment > 0 || bytes.empty());
      if (encoded) encode_split(bytes, plan, out);
      break;
    }
    case KvCodecScheme::kZstd:
      encoded = encode_zstd(bytes, plan.zstd_level, out);
      break;
  }
  if (!encoded || out.size() - start >= kv_encode_bound(bytes.size())) {
    store_instead(out, start, bytes);
  }
}

Result<KvStreamInfo> kv_stream_info(std::span<const std::byte> stream) {
  if (stream.size() < kHeaderBytes) return bad("shorter than its header");
  if (std::memcmp(stream.data(), kMagic, sizeof(kMagic)) != 0) return bad("not a KV codec stream");
  if (static_cast<uint8_t>(stream[4]) != kVersion) return bad("unknown version");
  const auto scheme = static_cast<uint8_t>(stream[5]);
  if (scheme > static_cast<uint8_t>(KvCodecScheme::kZstd)) return bad("unknown scheme");
  return KvStreamInfo{static_cast<KvCodecScheme>(scheme), read_u64(stream.data() + 8)};
}

Status kv_decode(std::span<const std::byte> stream, std::span<std::byte> out) {
  const Result<KvStreamInfo> info = kv_stream_info(stream);
  if (!info.ok()) return info.status();
  if (info->raw_bytes != out.size()) return bad("raw size differs from the output's");
  std::span<const std::byte> body = stream.subspan(kHeaderBytes);
  switch (info->scheme) {
    case KvCodecScheme::kStored:
      if (body.size() != out.size()) return bad("stored bytes of the wrong length");
      if (!out.empty()) std::memcpy(out.data(), body.data(), out.size());
      return Status::Ok();
    case KvCodecScheme::kZstd: {
      const unsigned long long size = ZSTD_getFrameContentSize(body.data(), body.size());
      if (size != out.size()) return bad("zstd frame of another size");
      const size_t n = ZSTD_decompress(out.data(), out.size(), body.data(), body.size());
      if (ZSTD_isError(n) != 0U) return bad(std::string("zstd: ") + ZSTD_getErrorName(n));
      if (n != out.size()) return bad("zstd frame shorter than its size");
      return Status::Ok();
    }
    case KvCodecScheme::kSplit:
      break;
  }
  if (body.size() < kSplitHeaderBytes) return bad("split header truncated");
  const auto format = static_cast<uint8_t>(body[0]);
  if (format != static_cast<uint8_t>(SplitFormat::kBf16) &&
      format != static_cast<uint8_t>(SplitFormat::kF16)) {
    return bad("unknown split format");
  }
  uint32_t segment = 0;
  std::memcpy(&segment, body.data() + 4, sizeof(segment));
  if (out.size() % 2 != 0) return bad("split stream of an odd length");
  if (!out.empty() && (segment == 0 || segment % 2 != 0)) return bad("bad segment size");
  body = body.subspan(kSplitHeaderBytes);
  for (size_t at = 0; at < out.size(); at += segment) {
    const std::span<std::byte> part = out.subspan(at, std::min<size_t>(segment, out.size() - at));
    STRATA_RETURN_IF_ERROR(split_decode_segment(static_cast<SplitFormat>(format), body, part));
  }
  if (!body.empty()) return bad("trailing bytes");
  return Status::Ok();
}

}  // namespace strata::kv
