// The split scheme's segments (kv_codec.h): symbols coded in 4 bits by a 15-symbol codebook, raw
// bytes as they are, escapes in a stream of their own. Both ways take 32 elements at a time with
// AVX2 where the CPU has it (encoding: a compare per codebook symbol; decoding: a byte shuffle is
// the codebook lookup), and one at a time for the tail, for a decoded group holding an escape and
// on other CPUs; decoding checks every code and count. Both paths write the same bytes.

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
  // increment. 32-bit counts, added into hist every 2^30 elements.
  std::array<std::array<uint32_t, 256>, 4> part;
  const size_t n = bytes.size() / 2;
  for (size_t slice = 0; slice < n; slice += size_t{1} << 30) {
    for (auto& p : part) p.fill(0);
    const size_t end = std::min(n, slice + (size_t{1} << 30));
    size_t i = slice;
    for (; i + 4 <= end; i += 4) {
      for (size_t k = 0; k < 4; ++k) ++part[k][symbol_of<F>(load_u16(bytes.data() + 2 * (i + k)))];
    }
    for (; i < end; ++i) ++part[0][symbol_of<F>(load_u16(bytes.data() + 2 * i))];
    for (size_t s = 0; s < 256; ++s)
      hist[s] += uint64_t{part[0][s]} + part[1][s] + part[2][s] + part[3][s];
  }
}

// Where encoding writes: the codes and raw planes, the escapes so far, the symbols' codes.
struct EncodeOut {
  uint8_t* codes = nullptr;
  uint8_t* raw = nullptr;
  std::string* escapes = nullptr;
  const std::array<uint8_t, 256>* code_of = nullptr;
};

// Elements [begin, end) one at a time; begin even.
template <SplitFormat F>
void encode_scalar(const std::byte* in, size_t begin, size_t end, const EncodeOut& o) {
  for (size_t i = begin; i < end; ++i) {
    const uint16_t x = load_u16(in + 2 * i);
    const uint8_t s = symbol_of<F>(x);
    const uint8_t c = (*o.code_of)[s];
    if (c == kEscape) o.escapes->push_back(static_cast<char>(s));
    o.raw[i] = raw_of<F>(x);
    if (i % 2 == 0) {
      o.codes[i / 2] = c;
    } else {
      o.codes[i / 2] = static_cast<uint8_t>(o.codes[i / 2] | (c << 4));
    }
  }
}

#if defined(__x86_64__)
// Elements [begin, end), end - begin a multiple of 32, 32 at a time: symbols and raw bytes split
// out of the elements by shifts and packs, each symbol's code found by comparing it with every
// codebook symbol, the codes packed into nibbles by a multiply-add of pairs.
template <SplitFormat F>
__attribute__((target("avx2"))) void encode_avx2(const std::byte* in, size_t begin, size_t end,
                                                 const KvCodebook& book, const EncodeOut& o) {
  const __m256i low_byte = _mm256_set1_epi16(0x00ff);
  const __m256i escape = _mm256_set1_epi8(static_cast<char>(kEscape));
  const __m256i nibble_weights = _mm256_set1_epi16(0x1001);  // bytes 1, 16: c0 + 16 c1
  __m256i symbol[KvCodebook::kCodes];
  __m256i code[KvCodebook::kCodes];
  for (size_t c = 0; c < KvCodebook::kCodes; ++c) {
    symbol[c] = _mm256_set1_epi8(static_cast<char>(book.symbols[c]));
    code[c] = _mm256_set1_epi8(static_cast<char>(c));
  }
  alignas(32) uint8_t symbols_out[32];
  for (size_t i = begin; i < end; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i + 32));
    __m256i sa, sb, ra, rb;
    if constexpr (F == SplitFormat::kBf16) {
      const __m256i sign = _mm256_set1_epi16(0x80);
      const __m256i mantissa = _mm256_set1_epi16(0x7f);
      sa = _mm256_and_si256(_mm256_srli_epi16(a, 7), low_byte);
      sb = _mm256_and_si256(_mm256_srli_epi16(b, 7), low_byte);
      ra = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 8), sign),
                           _mm256_and_si256(a, mantissa));
      rb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 8), sign),
                           _mm256_and_si256(b, mantissa));
    } else {
      sa = _mm256_srli_epi16(a, 8);
      sb = _mm256_srli_epi16(b, 8);
      ra = _mm256_and_si256(a, low_byte);
      rb = _mm256_and_si256(b, low_byte);
    }
    // packus interleaves the 128-bit lanes; the permute puts the 32 bytes back in order.
    const __m256i symbols = _mm256_permute4x64_epi64(_mm256_packus_epi16(sa, sb), 0xd8);
    const __m256i raw = _mm256_permute4x64_epi64(_mm256_packus_epi16(ra, rb), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.raw + i), raw);
    __m256i codes = escape;
    for (size_t c = 0; c < book.size; ++c) {
      codes = _mm256_blendv_epi8(codes, code[c], _mm256_cmpeq_epi8(symbols, symbol[c]));
    }
    const __m256i pairs = _mm256_maddubs_epi16(codes, nibble_weights);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.codes + i / 2), _mm256_castsi256_si128(packed));
    auto escapes = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(codes, escape)));
    if (escapes != 0) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(symbols_out), symbols);
      for (; escapes != 0; escapes &= escapes - 1) {
        o.escapes->push_back(static_cast<char>(symbols_out[__builtin_ctz(escapes)]));
      }
    }
  }
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
}
#endif

template <SplitFormat F>
void encode(std::span<const std::byte> bytes, const KvCodebook& book, std::string& out) {
  std::array<uint8_t, 256> code_of;
  code_of.fill(kEscape);
  for (uint8_t c = 0; c < book.size; ++c) code_of[book.symbols[c]] = c;
  const size_t n = bytes.size() / 2;
  const size_t head = out.size();
  out.resize(head + 4 + 16 + (n + 1) / 2 + n);
  std::vector<uint32_t> chunks((n + kSplitChunk - 1) / kSplitChunk);
  std::string escapes;
  const EncodeOut o{.codes = reinterpret_cast<uint8_t*>(out.data() + head + 20),
                    .raw = reinterpret_cast<uint8_t*>(out.data() + head + 20) + (n + 1) / 2,
                    .escapes = &escapes,
                    .code_of = &code_of};
  for (size_t begin = 0; begin < n; begin += kSplitChunk) {
    chunks[begin / kSplitChunk] = static_cast<uint32_t>(escapes.size());
    const size_t end = std::min(n, begin + kSplitChunk);
    size_t i = begin;
#if defined(__x86_64__)
    if (has_avx2()) {
      const size_t whole = begin + (end - begin) / 32 * 32;
      encode_avx2<F>(bytes.data(), begin, whole, book, o);
      i = whole;
    }
#endif
    encode_scalar<F>(bytes.data(), i, end, o);
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
  Status st = format == SplitFormat::kBf16 ? decode<SplitFormat::kBf16>(s, out.data())
                                                 : decode<SplitFormat::kF16>(s, out.data());
  if (!st.ok()) return st;
  in = in.subspan(need + s.num_escapes);
  return Status::Ok();
}

}  // namespace strata::kv
