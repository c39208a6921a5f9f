// The split scheme's segments (kv_codec.h): symbols coded in 4 bits by a 15-symbol codebook, raw
// bytes as they are, escapes in a stream of their own. Decoding takes 32 elements at a time with
// AVX2 where the CPU has it (a byte shuffle is the codebook lookup), and one at a time for a
// group holding an escape and on other CPUs; both check every code and count.

#include <algorithm>
#include <cstring>

#include "kv/kv_codec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::kv {
namespace {

constexpr uint8_t kEscape = 15;

uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <SplitFormat F>
uint8_t symbol_of(uint16_t x) {
  if constexpr (F == SplitFormat::kBf16) return static_cast<uint8_t>(x >> 7);
  return static_cast<uint8_t>(x >> 8);
}

template <SplitFormat F>
uint8_t raw_of(uint16_t x) {
  if constexpr (F == SplitFormat::kBf16)
    return static_cast<uint8_t>(((x >> 8) & 0x80) | (x & 0x7f));
  return static_cast<uint8_t>(x);
}

template <SplitFormat F>
uint16_t element_of(uint8_t symbol, uint8_t raw) {
  if constexpr (F == SplitFormat::kBf16) {
    return static_cast<uint16_t>(((raw & 0x80) << 8) | (symbol << 7) | (raw & 0x7f));
  }
  return static_cast<uint16_t>((symbol << 8) | raw);
}

template <SplitFormat F>
void histogram(std::span<const std::byte> bytes, SymbolHistogram& hist) {
  // Four partial histograms: consecutive equal symbols would otherwise wait on each other's
  // increment.
  std::array<std::array<uint64_t, 256>, 4> part = {};
  const size_t n = bytes.size() / 2;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t k = 0; k < 4; ++k) ++part[k][symbol_of<F>(load_u16(bytes.data() + 2 * (i + k)))];
  }
  for (; i < n; ++i) ++hist[symbol_of<F>(load_u16(bytes.data() + 2 * i))];
  for (const auto& p : part) {
    for (size_t s = 0; s < 256; ++s) hist[s] += p[s];
  }
}

template <SplitFormat F>
void encode(std::span<const std::byte> bytes, const KvCodebook& book, std::string& out) {
  std::array<uint8_t, 256> code_of;
  code_of.fill(kEscape);
  for (uint8_t c = 0; c < book.size; ++c) code_of[book.symbols[c]] = c;
  const size_t n = bytes.size() / 2;
  const size_t head = out.size();
  out.resize(head + 4 + 16 + (n + 1) / 2 + n);
  auto* codes = reinterpret_cast<uint8_t*>(out.data() + head + 20);
  auto* raw = codes + (n + 1) / 2;
  std::vector<uint32_t> chunks((n + kSplitChunk - 1) / kSplitChunk);
  std::string escapes;
  for (size_t i = 0; i < n; ++i) {
    if (i % kSplitChunk == 0) chunks[i / kSplitChunk] = static_cast<uint32_t>(escapes.size());
    const uint16_t x = load_u16(bytes.data() + 2 * i);
    const uint8_t s = symbol_of<F>(x);
    const uint8_t c = code_of[s];
    if (c == kEscape) escapes.push_back(static_cast<char>(s));
    raw[i] = raw_of<F>(x);
    if (i % 2 == 0) {
      codes[i / 2] = c;
    } else {
      codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (c << 4));
    }
  }
  const auto num_escapes = static_cast<uint32_t>(escapes.size());
  std::memcpy(out.data() + head, &num_escapes, sizeof(num_escapes));
  out[head + 4] = static_cast<char>(book.size);
  std::memcpy(out.data() + head + 5, book.symbols.data(), book.symbols.size());
  out.append(reinterpret_cast<const char*>(chunks.data()), chunks.size() * sizeof(uint32_t));
  out.append(escapes);
}

struct Segment {
  size_t n = 0;
  uint8_t book_size = 0;
  std::array<uint8_t, 16> symbols = {};  // code 15 and codes past the size: 0 (checked apart)
  const uint8_t* codes = nullptr;
  const uint8_t* raw = nullptr;
  const std::byte* chunks = nullptr;
  const uint8_t* escapes = nullptr;
  uint32_t num_escapes = 0;
};

Status bad(const char* what) { return Status::InvalidArgument(std::string("KV stream: ") + what); }

// Elements [begin, end) one at a time; *e is the escapes read so far.
template <SplitFormat F>
Status decode_scalar(const Segment& s, size_t begin, size_t end, uint32_t* e, std::byte* out) {
  for (size_t i = begin; i < end; ++i) {
    const uint8_t c = (s.codes[i / 2] >> ((i % 2) * 4)) & 0xf;
    uint8_t symbol = s.symbols[c];
    if (c >= s.book_size) {
      if (c != kEscape) return bad("a code past its codebook");
      if (*e >= s.num_escapes) return bad("more escapes than it holds");
      symbol = s.escapes[(*e)++];
    }
    const uint16_t x = element_of<F>(symbol, s.raw[i]);
    std::memcpy(out + 2 * i, &x, sizeof(x));
  }
  return Status::Ok();
}

#if defined(__x86_64__)
// Elements [begin, end), end - begin a multiple of 32, 32 at a time; a group with an escape or a
// bad code goes to decode_scalar.
template <SplitFormat F>
__attribute__((target("avx2"))) Status decode_avx2(const Segment& s, size_t begin, size_t end,
                                                   uint32_t* e, std::byte* out) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.symbols.data())));
  const __m256i last = _mm256_set1_epi8(static_cast<char>(s.book_size - 1));
  const __m128i nibble = _mm_set1_epi8(0x0f);
  for (size_t i = begin; i < end; i += 32) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.codes + i / 2));
    const __m128i lo = _mm_and_si128(packed, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
    const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi8(codes, last)) != 0) {
      STRATA_RETURN_IF_ERROR(decode_scalar<F>(s, i, i + 32, e, out));
      continue;
    }
    const __m256i symbols = _mm256_shuffle_epi8(table, codes);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.raw + i));
    __m256i low, high;
    if constexpr (F == SplitFormat::kBf16) {
      const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
      const __m256i mantissa = _mm256_set1_epi8(0x7f);
      high = _mm256_or_si256(_mm256_and_si256(raw, sign),
                             _mm256_and_si256(_mm256_srli_epi16(symbols, 1), mantissa));
      low = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(symbols, 7), sign),
                            _mm256_and_si256(raw, mantissa));
    } else {
      high = symbols;
      low = raw;
    }
    const __m256i a = _mm256_unpacklo_epi8(low, high);  // elements 0-7, 16-23
    const __m256i b = _mm256_unpackhi_epi8(low, high);  // elements 8-15, 24-31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i),
                        _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i + 32),
                        _mm256_permute2x128_si256(a, b, 0x31));
  }
  return Status::Ok();
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
}
#endif

template <SplitFormat F>
Status decode(const Segment& s, std::byte* out) {
  uint32_t e = 0;
  for (size_t begin = 0; begin < s.n; begin += kSplitChunk) {
    const size_t end = std::min(s.n, begin + kSplitChunk);
    uint32_t start;
    std::memcpy(&start, s.chunks + 4 * (begin / kSplitChunk), sizeof(start));
    if (start != e) return bad("a chunk's escape index disagrees with its codes");
    size_t i = begin;
#if defined(__x86_64__)
    if (has_avx2()) {
      const size_t whole = begin + (end - begin) / 32 * 32;
      STRATA_RETURN_IF_ERROR(decode_avx2<F>(s, begin, whole, &e, out));
      i = whole;
    }
#endif
    STRATA_RETURN_IF_ERROR(decode_scalar<F>(s, i, end, &e, out));
  }
  if (e != s.num_escapes) return bad("fewer escapes used than it holds");
  return Status::Ok();
}

}  // namespace

void add_symbol_histogram(SplitFormat format, std::span<const std::byte> bytes,
                          SymbolHistogram& hist) {
  if (format == SplitFormat::kBf16) {
    histogram<SplitFormat::kBf16>(bytes, hist);
  } else {
    histogram<SplitFormat::kF16>(bytes, hist);
  }
}

void split_encode_segment(SplitFormat format, std::span<const std::byte> bytes,
                          const KvCodebook& book, std::string& out) {
  if (format == SplitFormat::kBf16) {
    encode<SplitFormat::kBf16>(bytes, book, out);
  } else {
    encode<SplitFormat::kF16>(bytes, book, out);
  }
}

Status split_decode_segment(SplitFormat format, std::span<const std::byte>& in,
                            std::span<std::byte> out) {
  Segment s;
  s.n = out.size() / 2;
  if (in.size() < 20) return bad("segment header truncated");
  std::memcpy(&s.num_escapes, in.data(), sizeof(s.num_escapes));
  s.book_size = static_cast<uint8_t>(in[4]);
  if (s.book_size > KvCodebook::kCodes) return bad("codebook of more than 15 symbols");
  std::memcpy(s.symbols.data(), in.data() + 5, KvCodebook::kCodes);
  for (size_t c = s.book_size; c < s.symbols.size(); ++c) s.symbols[c] = 0;
  const size_t num_chunks = (s.n + kSplitChunk - 1) / kSplitChunk;
  const size_t need = 20 + (s.n + 1) / 2 + s.n + 4 * num_chunks;
  if (in.size() < need || in.size() - need < s.num_escapes) return bad("segment truncated");
  const auto* base = reinterpret_cast<const uint8_t*>(in.data());
  s.codes = base + 20;
  s.raw = s.codes + (s.n + 1) / 2;
  s.chunks = in.data() + 20 + (s.n + 1) / 2 + s.n;
  s.escapes = base + need;
  if (s.n % 2 != 0 && (s.codes[s.n / 2] >> 4) != 0) return bad("padding nibble set");
  const Status st = format == SplitFormat::kBf16 ? decode<SplitFormat::kBf16>(s, out.data())
                                                 : decode<SplitFormat::kF16>(s, out.data());
  if (!st.ok()) return st;
  in = in.subspan(need + s.num_escapes);
  return Status::Ok();
}

}  // namespace strata::kv
