// The split KV codec's GPU decoder (kv_codec_split.h): two kernels over a batch of streams.
//
// A block's output is cut into units of 4096 elements, each decoded by a team. Where a unit's
// bytes are in the stream depends on every escape count before it (a segment starts where the
// previous one's escapes end), so finding the segments is a walk from header to header: one
// dependent load per segment, some 64 in a row for a 2 MiB block. The walk must not wait for the
// decoding, nor the decoding for every walk, so the two overlap:
//
//   parse   a thread per block checks the headers, walks the segment headers, checks each
//           against the bytes left, and publishes for each unit the offset of the segment its
//           first element is in, with the stream's format and segment size (or "stored", or
//           "error"): a 64-bit word each, written atomically, so no fence is needed. Its teams
//           let the decode kernel start at once (programmatic dependent launch), so they are all
//           running before any unit waits.
//   decode  a team per unit, in unit-major order (every block's first unit, then every block's
//           second, ...), so the walks stay ahead of the units that wait on them: a team waits
//           for its unit's word, then decodes the unit segment piece by segment piece, checking
//           every code, its escapes against the segment's count and the chunk index against the
//           escapes it counts (every entry is checked by the piece that ends where the next chunk
//           begins: with chunks[0] == 0 that holds the whole index to the CPU's test). A piece's
//           codes, raw bytes, segment header and chunk index entries are loaded together: their
//           places follow from the segment's offset and length alone.
//
// Every read is bounded by the stream's length and every write by the unit's elements; an error
// is stored in errors[block] (the first one found) and never leaves a team waiting.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec_split.cuh"
#include "kernels/cuda/kv_codec_split.h"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

using split::kThreads;
using split::kWarps;
using split::read_u32;
using split::segment_fixed_bytes;

// errors[block] values; kv_split_decode_status words them.
enum DecodeError : int32_t {
  kOk = 0,
  kNotAStream = 1,
  kRawSize = 2,
  kZstd = 3,
  kStoredLength = 4,
  kSplitHeader = 5,
  kSegmentSize = 6,
  kSegmentTruncated = 7,
  kCodebook = 8,
  kBadCode = 9,
  kTooManyEscapes = 10,
  kChunkIndex = 11,
  kPadding = 12,
  kTrailing = 13,
  kTooLong = 14,
};

// A unit's word: the state in bits 62-63; for kSplit the stream's format in bit 61 (set: F16),
// its segment's elements in bits 36-60 (0 when they do not fit: read them from the stream), and
// the offset of the unit's first segment in bits 0-35 (a split stream of a block of at most
// 2^32 bytes is shorter than 2^36). Carrying the split header saves a unit a dependent load.
constexpr uint64_t kStateShift = 62;
constexpr uint64_t kPending = 0;
constexpr uint64_t kSplit = 1;
constexpr uint64_t kStored = 2;
constexpr uint64_t kError = 3;
constexpr uint64_t kF16Bit = uint64_t{1} << 61;
constexpr uint64_t kSegElemsShift = 36;
constexpr uint64_t kSegElemsMask = (uint64_t{1} << 25) - 1;
constexpr uint64_t kOffsetMask = (uint64_t{1} << kSegElemsShift) - 1;

struct DecodeArgs {
  const uint8_t* const* streams;  // [num_blocks]
  const uint64_t* stream_bytes;   // [num_blocks]
  uint8_t* pool;                  // [num_pool_blocks, block_bytes]
  const int32_t* block_ids;       // [num_blocks]
  int64_t block_bytes;
  int32_t num_blocks;
  int32_t units_per_block;
  int32_t* errors;            // [num_blocks]
  unsigned long long* units;  // [num_blocks, units_per_block], zeroed before the launch
};

__device__ void report(const DecodeArgs& a, int64_t b, int32_t error) {
  atomicCAS(a.errors + b, 0, error);
}

// Where a segment's planes are, from its offset and length alone (the planes' pointers derived
// on use, so that few registers hold them).
struct Segment {
  int64_t n = 0;                    // elements
  const uint8_t* header = nullptr;  // escapes u32, codebook size, symbols[15]
  uint64_t escape_room = 0;         // the stream's bytes from escapes() on

  __device__ const uint8_t* codes() const { return header + split::kSegmentHeaderBytes; }
  __device__ const uint8_t* raw() const { return codes() + (n + 1) / 2; }
  __device__ const uint8_t* index() const { return raw() + n; }  // the chunk index
  __device__ const uint8_t* escapes() const { return header + segment_fixed_bytes(n); }
};

// The segment of n elements at off in a stream of size bytes (off <= size): false when the
// stream ends before its escapes.
__device__ __forceinline__ bool segment_at(const uint8_t* st, uint64_t size, int64_t off, int64_t n,
                                           Segment* s) {
  const uint64_t left = size - static_cast<uint64_t>(off);
  const auto need = static_cast<uint64_t>(segment_fixed_bytes(n));
  if (left < need) return false;
  s->n = n;
  s->header = st + off;
  s->escape_room = left - need;
  return true;
}

__device__ void publish(unsigned long long* word, uint64_t value) {
  atomicExch(word, static_cast<unsigned long long>(value));
}

// One thread: checks block b's stream and publishes each unit's word.
__device__ void parse_block(const DecodeArgs& a, int64_t b) {
  const uint8_t* st = a.streams[b];
  const uint64_t size = a.stream_bytes[b];
  unsigned long long* words = a.units + b * a.units_per_block;
  int64_t published = 0;
  auto fail = [&](int32_t error) {
    report(a, b, error);
    for (; published < a.units_per_block; ++published)
      publish(words + published, kError << kStateShift);
  };
  if (size < static_cast<uint64_t>(kKvStreamHeaderBytes) || st[0] != 'S' || st[1] != 'K' ||
      st[2] != 'V' || st[3] != 'C' || st[4] != 1 || st[5] > 2) {
    return fail(kNotAStream);
  }
  if (split::read_u64(st + 8) != static_cast<uint64_t>(a.block_bytes)) return fail(kRawSize);
  if (st[5] == 2) return fail(kZstd);
  if (st[5] == 0) {
    if (size - kKvStreamHeaderBytes != static_cast<uint64_t>(a.block_bytes)) {
      return fail(kStoredLength);
    }
    for (; published < a.units_per_block; ++published)
      publish(words + published, kStored << kStateShift);
    return;
  }
  if (size < static_cast<uint64_t>(kKvStreamHeaderBytes + split::kSplitHeaderBytes) ||
      (st[16] != static_cast<uint8_t>(KvSplitFormat::kBf16) &&
       st[16] != static_cast<uint8_t>(KvSplitFormat::kF16))) {
    return fail(kSplitHeader);
  }
  const uint32_t segment = read_u32(st + 20);
  if (segment == 0 || segment % 2 != 0) return fail(kSegmentSize);
  if (size > kOffsetMask) return fail(kTooLong);
  const int64_t seg_elems = segment / 2;
  const int64_t num_elems = a.block_bytes / 2;
  const uint64_t split_word =
      kSplit << kStateShift | (st[16] == static_cast<uint8_t>(KvSplitFormat::kF16) ? kF16Bit : 0) |
      (static_cast<uint64_t>(seg_elems) <= kSegElemsMask ? static_cast<uint64_t>(seg_elems) : 0)
          << kSegElemsShift;
  int64_t off = kKvStreamHeaderBytes + split::kSplitHeaderBytes;
  for (int64_t first = 0; first < num_elems; first += seg_elems) {
    const int64_t n = min(seg_elems, num_elems - first);
    Segment s;
    if (!segment_at(st, size, off, n, &s)) return fail(kSegmentTruncated);
    const uint32_t num_escapes = read_u32(s.header);
    if (s.header[4] > 15) return fail(kCodebook);
    if (s.escape_room < num_escapes) return fail(kSegmentTruncated);
    // The units whose first element is in this segment.
    for (; published < a.units_per_block && published * kKvSplitChunk < first + n; ++published) {
      publish(words + published, split_word | static_cast<uint64_t>(off));
    }
    off = s.escapes() + num_escapes - st;
  }
  if (static_cast<uint64_t>(off) != size) fail(kTrailing);
}

__global__ void __launch_bounds__(kThreads) parse_kernel(const __grid_constant__ DecodeArgs a) {
  // Every parser is running once this has run in each of its teams: only then may units wait.
  detail::pdl_launch_dependents();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b < a.num_blocks) parse_block(a, b);
}

// ---- Staging: a piece's bytes in shared memory ----
//
// A piece's codes, raw bytes, segment header and chunk index entries are copied into a stage as
// the aligned 16-byte vectors around each region (cp.async through L2, 16 bytes a request), so
// each region's bytes sit in their buffer at their address's offset modulo 16. Vectors that
// reach outside the stream (only at its two ends) are read byte by byte, never past it.
constexpr int kCodesBuf =
    2080;                       // up to 2048 code bytes at any offset (129 vectors), a vector spare
constexpr int kRawBuf = 4128;   // up to 4096 raw bytes (257 vectors), a vector spare
constexpr int kHeaderBuf = 48;  // 20 bytes at any offset: 3 vectors
constexpr int kIndexBuf = 32;   // two chunk index entries: 2 vectors

struct alignas(16) Stage {
  uint8_t codes[kCodesBuf];
  uint8_t raw[kRawBuf];
  uint8_t header[kHeaderBuf];
  uint8_t index[kIndexBuf];
};
static_assert(sizeof(Stage) >= split::kNatBytes, "a stored unit's copy goes through a stage");

__device__ __forceinline__ void cp_async16(void* smem, uintptr_t gmem) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Copies the aligned 16-byte vectors around [p, p + len) to buf (the vector holding p first), the
// team's threads sharing them: those inside [lo, hi) by cp.async, the others byte by byte with
// the bytes outside [lo, hi) left 0. Region byte i lands at buf[(p mod 16) + i].
__device__ __forceinline__ void stage_region(uint8_t* buf, const uint8_t* p, int64_t len,
                                             const uint8_t* lo, const uint8_t* hi) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t a = at & ~uintptr_t{15};
  const auto n = static_cast<int>((at - a + static_cast<uint64_t>(len) + 15) / 16);
  const auto l = reinterpret_cast<uintptr_t>(lo);
  const auto h = reinterpret_cast<uintptr_t>(hi);
  for (int v = static_cast<int>(threadIdx.x); v < n; v += kThreads) {
    const uintptr_t src = a + 16 * static_cast<uintptr_t>(v);
    if (src >= l && src + 16 <= h) {
      cp_async16(buf + 16 * v, src);
    } else {
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        if (src + i >= l && src + i < h) {
          w[i / 4] |= uint32_t{*reinterpret_cast<const uint8_t*>(src + i)} << (8 * (i % 4));
        }
      }
      *reinterpret_cast<uint4*>(buf + 16 * v) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

__device__ __forceinline__ uint32_t mod16(const uint8_t* p) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 15);
}

// Stages segment elements [from, to) (inside one chunk): their codes and raw bytes, the segment's
// header and the chunk index entries k and k + 1 (or the bytes after entry k). Issues the copies
// only; the caller commits and waits.
__device__ __forceinline__ void stage_piece(Stage& sg, const Segment& s, const uint8_t* lo,
                                            const uint8_t* hi, int64_t from, int64_t to) {
  const int64_t k = from / kKvSplitChunk;
  stage_region(sg.codes, s.codes() + from / 2, (to + 1) / 2 - from / 2, lo, hi);
  stage_region(sg.raw, s.raw() + from, to - from, lo, hi);
  stage_region(sg.header, s.header, split::kSegmentHeaderBytes, lo, hi);
  stage_region(sg.index, s.index() + 4 * k, 8, lo, hi);
}

// What a team shares: the unit it decodes and the one it stages next, a stage for each, the
// piece's code -> symbol table and scan scratch.
struct UnitInfo {
  uint64_t word;
  const uint8_t* st;  // the stream
  uint64_t size;      // its bytes
  uint8_t* block;     // where it decodes to
};

// Teams resident on an SM (the decode launch's grid is this many a multiprocessor; 72 registers a
// thread), each with two stages: the unit it decodes and the next, in flight.
constexpr int kTeamsPerSm = 7;
constexpr int kStages = 2;

struct UnitShared {
  UnitInfo unit[kStages];
  alignas(16) uint8_t table[16];  // code -> symbol; codes past the codebook 0 (checked apart)
  uint32_t scratch[kWarps];
  unsigned long long scratch64[kWarps];
  Stage stage[kStages];
};

// Exclusive prefix of v over the team's threads, and (in *total) their sum: team_scan on 64 bits
// (four 16-bit counts side by side, none of whose sums carries).
__device__ __forceinline__ uint64_t team_scan64(uint64_t v, uint64_t* total,
                                                unsigned long long* scratch) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  uint64_t x = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const uint64_t y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  uint64_t before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const uint64_t s = scratch[w];
    if (w < warp) before += s;
    sum += s;
  }
  __syncthreads();
  *total = sum;
  return before + x - v;
}

// Escape codes among segment elements [from, to) (at most a chunk), summed over the team.
__device__ uint32_t count_escapes(const Segment& s, int64_t from, int64_t to, uint32_t* scratch) {
  uint32_t count = 0;
  for (int64_t i = from + threadIdx.x; i < to; i += kThreads) {
    count += ((s.codes()[i / 2] >> (4 * (i % 2))) & 0xf) == split::kEscape;
  }
  uint32_t total;
  split::team_scan(count, &total, scratch);
  return total;
}

// The symbols of four codes (the nibbles of h's low 16 bits) under the table t, one byte each:
// two byte permutes pick among entries 0-7 and 8-15, a third by each code's bit 3.
__device__ __forceinline__ uint32_t lookup4(const uint4& t, uint32_t h) {
  const uint32_t sel = h & 0x7777;
  const uint32_t lo = __byte_perm(t.x, t.y, sel);
  const uint32_t hi = __byte_perm(t.z, t.w, sel);
  return __byte_perm(lo, hi, 0x3210 | ((h >> 1) & 0x4444));
}

// Two elements from y = [raw, symbol, raw, symbol] (bytes, low first).
template <KvSplitFormat F>
__device__ __forceinline__ uint32_t elements2(uint32_t y) {
  if constexpr (F == KvSplitFormat::kBf16)
    return ((y << 8) & 0x80008000u) | ((y >> 1) & 0x7f807f80u) | (y & 0x007f007fu);
  return y;
}

// A thread's share of a piece: groups of 8 elements, group G = threadIdx.x + kThreads * j (j <
// kRows) holding piece elements [8 G, 8 G + 8): a code word, 8 raw bytes and 16 output bytes
// each, so that a warp's loads and stores are contiguous.
constexpr int kRows = static_cast<int>(kKvSplitChunk) / (8 * kThreads);
static_assert(kRows == 4);

// Decodes segment elements [from, to), inside one chunk, staged in sg, to out (the segment's
// first element): kOk or the error, the same in every thread. [lo, hi): the stream.
template <KvSplitFormat F>
__device__ int32_t decode_piece(UnitShared& sh, const Stage& sg, const Segment& s, int64_t from,
                                int64_t to, uint8_t* out) {
  const int64_t k = from / kKvSplitChunk;
  const int64_t chunk_end = min((k + 1) * kKvSplitChunk, s.n);
  const uint8_t* hdr = sg.header + mod16(s.header);
  const uint8_t* idx = sg.index + mod16(s.index() + 4 * k);
  const uint32_t num_escapes = read_u32(hdr);
  const uint32_t book_size = hdr[4];
  uint64_t base = read_u32(idx);
  const uint64_t next = to != chunk_end ? 0 : to == s.n ? num_escapes : read_u32(idx + 4);
  // The previous piece's table reads are behind a barrier (the caller's).
  if (threadIdx.x < 16) sh.table[threadIdx.x] = threadIdx.x < book_size ? hdr[5 + threadIdx.x] : 0;
  if (book_size > 15) return kCodebook;
  if (s.escape_room < num_escapes) return kSegmentTruncated;
  // The escapes before `from` in the segment: the chunk index's, and those of the chunk's
  // elements before `from` when the piece starts inside the chunk.
  if (from > k * kKvSplitChunk) base += count_escapes(s, k * kKvSplitChunk, from, sh.scratch);
  if (from == 0 && base != 0) return kChunkIndex;

  // Code word of group G: 32 bits from nibble 2 rc + (from odd) + 8 G of the staged codes.
  const uint32_t rc = mod16(s.codes() + from / 2);
  const uint32_t cbit = 8 * rc + 4 * static_cast<uint32_t>(from & 1);
  const uint32_t rr = mod16(s.raw() + from);
  const auto* cwords = reinterpret_cast<const uint32_t*>(sg.codes);
  const auto* rwords = reinterpret_cast<const uint32_t*>(sg.raw);
  const int len = static_cast<int>(to - from);  // 1 .. 4096
  // The codes are read twice (to count escapes, then to decode), the raw bytes once: shared
  // memory reads are cheaper than the registers that would hold them across the scan.
  const auto code_word = [&](int g, int m) {
    const uint32_t valid = m >= 8 ? 0xffffffffu : (1u << (4 * m)) - 1;
    const uint32_t cq = (cbit >> 5) + static_cast<uint32_t>(g);
    return __funnelshift_r(cwords[cq], cwords[cq + 1], cbit & 31) & valid;
  };
  // Bit 4 i set where code i is the escape (the nibbles past the group's elements are 0).
  const auto escapes_of = [](uint32_t c) {
    return c & (c >> 1) & (c >> 2) & (c >> 3) & 0x11111111u;
  };
  uint64_t counts = 0;
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int g = static_cast<int>(threadIdx.x) + kThreads * j;
    const int m = min(max(len - 8 * g, 0), 8);  // the group's elements
    const uint32_t cw = code_word(g, m);
    counts |= static_cast<uint64_t>(__popc(escapes_of(cw))) << (16 * j);
    if (book_size < 15) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t code = (cw >> (4 * i)) & 0xf;
        if (i < m && code != split::kEscape && code >= book_size) bad = true;
      }
    }
  }
  uint64_t totals;
  const uint64_t before = team_scan64(counts, &totals, sh.scratch64);
  if (__syncthreads_or(bad)) return kBadCode;
  const uint64_t total =
      (totals & 0xffff) + ((totals >> 16) & 0xffff) + ((totals >> 32) & 0xffff) + (totals >> 48);
  if (base + total > num_escapes) return kTooManyEscapes;
  if (to == chunk_end && base + total != next) return kChunkIndex;
  if (to == s.n && s.n % 2 != 0) {
    // The padding nibble: the high one of the segment's last code byte.
    if ((sg.codes[rc + (s.n / 2 - from / 2)] >> 4) != 0) return kPadding;
  }

  const uint4 table = *reinterpret_cast<const uint4*>(sh.table);
  uint8_t* dst = out + 2 * from;
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const uint8_t* escapes = s.escapes() + base;
  uint64_t row_base = 0;  // escapes in the rows before row j
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int g = static_cast<int>(threadIdx.x) + kThreads * j;
    const int m = min(max(len - 8 * g, 0), 8);
    if (m > 0) {
      const uint32_t cw = code_word(g, m);
      const uint32_t esc = escapes_of(cw);
      const uint32_t rq = (rr >> 2) + 2 * static_cast<uint32_t>(g);
      const uint32_t r0 = __funnelshift_r(rwords[rq], rwords[rq + 1], 8 * (rr & 3));
      const uint32_t r1 = __funnelshift_r(rwords[rq + 1], rwords[rq + 2], 8 * (rr & 3));
      uint32_t sym_lo = lookup4(table, cw & 0xffff);
      uint32_t sym_hi = lookup4(table, cw >> 16);
      if (esc != 0) {
        // Checked above: these escapes are inside the segment's, inside the stream.
        const uint8_t* e = escapes + row_base + ((before >> (16 * j)) & 0xffff);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if ((esc >> (4 * i)) & 1)
            sym_lo = (sym_lo & ~(0xffu << (8 * i))) | uint32_t{*e++} << (8 * i);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if ((esc >> (4 * (i + 4))) & 1)
            sym_hi = (sym_hi & ~(0xffu << (8 * i))) | uint32_t{*e++} << (8 * i);
        }
      }
      const uint32_t x0 = elements2<F>(__byte_perm(r0, sym_lo, 0x5140));
      const uint32_t x1 = elements2<F>(__byte_perm(r0, sym_lo, 0x7362));
      const uint32_t x2 = elements2<F>(__byte_perm(r1, sym_hi, 0x5140));
      const uint32_t x3 = elements2<F>(__byte_perm(r1, sym_hi, 0x7362));
      uint8_t* p = dst + 16 * g;
      if (m == 8 && aligned) {
        *reinterpret_cast<uint4*>(p) = make_uint4(x0, x1, x2, x3);
      } else {
        const uint32_t x[4] = {x0, x1, x2, x3};
        auto* e16 = reinterpret_cast<uint16_t*>(p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (i < m) e16[i] = static_cast<uint16_t>(x[i / 2] >> (16 * (i % 2)));
        }
      }
    }
    row_base += (totals >> (16 * j)) & 0xffff;
  }
  return kOk;
}

// Where a unit of the split stream st starts: its segment (false when the stream ends before its
// escapes) and its first piece [from, to) of that segment, which begins at element `first`.
struct FirstPiece {
  Segment s;
  int64_t seg_elems, first, from, to;
};

__device__ __forceinline__ bool first_piece(uint64_t word, const uint8_t* st, uint64_t size,
                                            int64_t num_elems, int64_t begin, int64_t end,
                                            FirstPiece* f) {
  const auto packed = static_cast<int64_t>((word >> kSegElemsShift) & kSegElemsMask);
  f->seg_elems = packed != 0 ? packed : read_u32(st + 20) / 2;
  f->first = begin / f->seg_elems * f->seg_elems;
  const auto off = static_cast<int64_t>(word & kOffsetMask);
  if (!segment_at(st, size, off, min(f->seg_elems, num_elems - f->first), &f->s)) return false;
  f->from = begin - f->first;
  f->to = min(min((f->from / kKvSplitChunk + 1) * kKvSplitChunk, end - f->first), f->s.n);
  return true;
}

// Decodes block elements [begin, end) of the split stream st: the first piece is staged in sg
// already (when its segment fits the stream); later ones (a unit that starts inside a chunk or
// spans segments) are staged here, one after the other. Every thread returns the same.
template <KvSplitFormat F>
__device__ int32_t decode_split_unit(UnitShared& sh, Stage& sg, uint64_t word, const uint8_t* st,
                                     uint64_t size, int64_t num_elems, int64_t begin, int64_t end,
                                     uint8_t* block) {
  FirstPiece f;
  if (!first_piece(word, st, size, num_elems, begin, end, &f)) return kSegmentTruncated;
  Segment s = f.s;
  int64_t first = f.first;
  bool staged = true;
  while (true) {
    const int64_t to = min(end - first, s.n);
    for (int64_t from = begin - first; from < to;) {
      const int64_t piece_end = min((from / kKvSplitChunk + 1) * kKvSplitChunk, to);
      if (!staged) {
        __syncthreads();  // the team is done with the stage and the table
        stage_piece(sg, s, st, st + size, from, piece_end);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
      }
      staged = false;
      const int32_t e = decode_piece<F>(sh, sg, s, from, piece_end, block + 2 * first);
      if (e != kOk) return e;
      from = piece_end;
    }
    begin = first + to;
    if (begin >= end) return kOk;
    // decode_piece checked that the escapes fit in the stream.
    const int64_t off = s.escapes() + read_u32(s.header) - st;
    first += f.seg_elems;
    if (!segment_at(st, size, off, min(f.seg_elems, num_elems - first), &s)) {
      return kSegmentTruncated;
    }
  }
}

// Unit g of the launch, unit-major: g = unit * num_blocks + block.
__device__ __forceinline__ void unit_of(const DecodeArgs& a, uint32_t g, uint32_t* b, uint32_t* u) {
  *u = g / static_cast<uint32_t>(a.num_blocks);
  *b = g - *u * static_cast<uint32_t>(a.num_blocks);
}

// One thread: waits for unit g's word and gathers where it reads and writes.
__device__ void fetch_unit(const DecodeArgs& a, uint32_t g, UnitInfo* info) {
  uint32_t b, u;
  unit_of(a, g, &b, &u);
  const uint8_t* st = a.streams[b];
  const uint64_t size = a.stream_bytes[b];
  const int32_t id = a.block_ids[b];
  const unsigned long long* word = a.units + static_cast<int64_t>(b) * a.units_per_block + u;
  unsigned long long w;
  while ((w = __ldcv(word)) == kPending) __nanosleep(32);
  info->word = w;
  info->st = st;
  info->size = size;
  info->block = a.pool + static_cast<int64_t>(id) * a.block_bytes;
}

// Stages unit g's first piece into sg, when it is split and its segment fits the stream.
__device__ void prefetch_unit(const DecodeArgs& a, uint32_t g, const UnitInfo& info, Stage& sg) {
  if ((info.word >> kStateShift) != kSplit) return;
  uint32_t b, u;
  unit_of(a, g, &b, &u);
  const int64_t num_elems = a.block_bytes / 2;
  const int64_t begin = static_cast<int64_t>(u) * kKvSplitChunk;
  const int64_t end = min(begin + kKvSplitChunk, num_elems);
  FirstPiece f;
  if (!first_piece(info.word, info.st, info.size, num_elems, begin, end, &f)) return;
  stage_piece(sg, f.s, info.st, info.st + info.size, f.from, f.to);
}

__device__ void decode_unit(const DecodeArgs& a, uint32_t g, UnitShared& sh, const UnitInfo& info,
                            Stage& sg) {
  const uint64_t state = info.word >> kStateShift;
  if (state == kError) return;
  uint32_t b, u;
  unit_of(a, g, &b, &u);
  const int64_t num_elems = a.block_bytes / 2;
  const int64_t begin = static_cast<int64_t>(u) * kKvSplitChunk;
  const int64_t end = min(begin + kKvSplitChunk, num_elems);
  if (state == kStored) {
    split::copy_region(info.block + 2 * begin, info.st + kKvStreamHeaderBytes + 2 * begin,
                       2 * (end - begin), reinterpret_cast<uint8_t*>(&sg));
    return;
  }
  const int32_t error =
      (info.word & kF16Bit) == 0
          ? decode_split_unit<KvSplitFormat::kBf16>(sh, sg, info.word, info.st, info.size,
                                                    num_elems, begin, end, info.block)
          : decode_split_unit<KvSplitFormat::kF16>(sh, sg, info.word, info.st, info.size, num_elems,
                                                   begin, end, info.block);
  if (error != kOk && threadIdx.x == 0) report(a, b, error);
}

// A persistent team: takes units blockIdx.x, + gridDim.x, ... and stages each next unit's first
// piece while it decodes the current one, so that a unit's bytes are in flight throughout.
__global__ void __launch_bounds__(kThreads, kTeamsPerSm)
    decode_kernel(const __grid_constant__ DecodeArgs a) {
  __shared__ UnitShared sh;
  const uint32_t total =
      static_cast<uint32_t>(a.num_blocks) * static_cast<uint32_t>(a.units_per_block);
  uint32_t g = blockIdx.x;
  if (g >= total) return;
  if (threadIdx.x == 0) fetch_unit(a, g, &sh.unit[0]);
  __syncthreads();
  prefetch_unit(a, g, sh.unit[0], sh.stage[0]);
  cp_async_commit();
  for (int slot = 0;; slot ^= 1) {
    const uint32_t next = g + gridDim.x;
    const bool more = next < total && next > g;
    __syncthreads();  // the previous unit is done with the other slot
    if (more && threadIdx.x == 0) fetch_unit(a, next, &sh.unit[slot ^ 1]);
    __syncthreads();
    if (more) prefetch_unit(a, next, sh.unit[slot ^ 1], sh.stage[slot ^ 1]);
    cp_async_commit();
    cp_async_wait<1>();  // this unit's copies have landed
    __syncthreads();     // every thread's
    decode_unit(a, g, sh, sh.unit[slot], sh.stage[slot]);
    if (!more) break;
    g = next;
  }
}

constexpr int64_t units_per_block(int64_t block_bytes) {
  return (block_bytes / 2 + kKvSplitChunk - 1) / kKvSplitChunk;
}

// The decode kernel's grid: the teams that fit on the device at once (asked once per device,
// with the carveout set to shared memory: the stages live there and L1 caches nothing else).
int decode_teams() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kTeamsPerSm;
  static std::atomic<int> cached[64];
  if (device >= 0 && device < 64) {
    const int c = cached[device].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int sms = 0, per_sm = 0;
  (void)cudaFuncSetAttribute(decode_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel, kThreads, 0) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return kTeamsPerSm;
  }
  const int teams = std::max(sms, 1) * std::max(per_sm, 1);
  if (device >= 0 && device < 64) cached[device].store(teams, std::memory_order_relaxed);
  return teams;
}

}  // namespace

size_t kv_split_decode_workspace_bytes(int32_t num_blocks, int64_t block_bytes) {
  if (num_blocks <= 0 || block_bytes < 2) return 0;
  return static_cast<size_t>(num_blocks) * static_cast<size_t>(units_per_block(block_bytes)) *
         sizeof(unsigned long long);
}

Status kv_split_decode(const KvSplitDecodeParams& p, cudaStream_t stream) {
  if (p.num_blocks < 0) return Status::InvalidArgument("kv_split_decode: num_blocks < 0");
  if (p.num_blocks == 0) return Status::Ok();
  if (p.block_bytes < 2 || p.block_bytes % 2 != 0 || p.block_bytes > int64_t{UINT32_MAX} - 1) {
    return Status::InvalidArgument("kv_split_decode: block_bytes must be even, 2 .. 2^32 - 2");
  }
  if (p.streams == nullptr || p.stream_bytes == nullptr || p.pool == nullptr ||
      p.block_ids == nullptr || p.errors == nullptr || p.workspace == nullptr) {
    return Status::InvalidArgument(
        "kv_split_decode needs the streams, their lengths, the pool, block ids, errors and "
        "workspace");
  }
  if (reinterpret_cast<uintptr_t>(p.pool) % 2 != 0) {
    return Status::InvalidArgument("kv_split_decode: the pool must be 2-byte aligned");
  }
  const size_t workspace = kv_split_decode_workspace_bytes(p.num_blocks, p.block_bytes);
  if (p.workspace_bytes < workspace) {
    return Status::InvalidArgument("kv_split_decode: workspace too small");
  }
  if (reinterpret_cast<uintptr_t>(p.workspace) % 8 != 0) {
    return Status::InvalidArgument("kv_split_decode: the workspace must be 8-byte aligned");
  }
  const int64_t units = units_per_block(p.block_bytes);
  const int64_t parsers = (p.num_blocks + kThreads - 1) / kThreads;
  if (int64_t{p.num_blocks} * units > INT32_MAX) {
    return Status::InvalidArgument("kv_split_decode: too many units for one launch");
  }
  STRATA_CUDA_CHECK(cudaMemsetAsync(p.workspace, 0, workspace, stream));
  STRATA_CUDA_CHECK(cudaMemsetAsync(p.errors, 0, sizeof(int32_t) * p.num_blocks, stream));
  DecodeArgs a{};
  a.streams = p.streams;
  a.stream_bytes = p.stream_bytes;
  a.pool = static_cast<uint8_t*>(p.pool);
  a.block_ids = p.block_ids;
  a.block_bytes = p.block_bytes;
  a.num_blocks = p.num_blocks;
  a.units_per_block = static_cast<int32_t>(units);
  a.errors = p.errors;
  a.units = static_cast<unsigned long long*>(p.workspace);
  parse_kernel<<<static_cast<unsigned>(parsers), kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  // Waits on the parsers' words, never on their end: launched beside them (or after, where the
  // launch cannot overlap), it needs no pdl_wait.
  const int64_t teams = std::min(int64_t{p.num_blocks} * units, int64_t{decode_teams()});
  STRATA_CUDA_CHECK(detail::launch_pdl(decode_kernel, dim3(static_cast<unsigned>(teams)),
                                       dim3(kThreads), 0, stream, a));
  return Status::Ok();
}

Status kv_split_decode_status(int32_t error) {
  const auto bad = [](const char* what) {
    return Status::InvalidArgument(std::string("KV stream: ") + what);
  };
  switch (error) {
    case kOk:
      return Status::Ok();
    case kNotAStream:
      return bad("not a KV codec stream (header, magic, version or scheme)");
    case kRawSize:
      return bad("raw size differs from the block's");
    case kZstd:
      return Status::Unsupported("KV stream: zstd is decoded on the CPU only");
    case kStoredLength:
      return bad("stored bytes of the wrong length");
    case kSplitHeader:
      return bad("split header truncated or of an unknown format");
    case kSegmentSize:
      return bad("bad segment size");
    case kSegmentTruncated:
      return bad("segment truncated");
    case kCodebook:
      return bad("codebook of more than 15 symbols");
    case kBadCode:
      return bad("a code past its codebook");
    case kTooManyEscapes:
      return bad("more escapes than it holds");
    case kChunkIndex:
      return bad("a chunk's escape index disagrees with its codes");
    case kPadding:
      return bad("padding nibble set");
    case kTrailing:
      return bad("trailing bytes");
    case kTooLong:
      return Status::Unsupported("KV stream: a split stream of 2^36 bytes or more (GPU decoder)");
    default:
      return bad("unknown decode error");
  }
}

}  // namespace strata::cuda
