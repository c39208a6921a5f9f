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
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec_split.cuh"
#include "kernels/cuda/kv_codec_split.h"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

using split::kGroup;
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

// What a team shares while decoding a unit.
struct UnitShared {
  uint64_t word;
  uint8_t table[16];  // code -> symbol; codes past the codebook 0 (checked apart)
  uint32_t scratch[kWarps];
  alignas(16) uint8_t nat[split::kNatBytes];  // a stored unit's bytes on their way
};

// A thread's up to 32 elements of a piece.
struct Codes {
  uint32_t codes[4];  // element j's code in nibble j
  uint32_t raw[8];    // element j's raw byte in byte j
};

// Loads the codes and raw bytes of segment elements [first, first + min(m, 32)) (none for m <=
// 0): three 16-byte loads at any alignment, and for an odd `first` (a unit that starts inside a
// segment of an odd length) one byte more, the codes shifted down a nibble. Bytes past the
// elements (another piece's, the next plane's) are loaded but never used; none past the stream.
__device__ __forceinline__ void load_codes(const Segment& s, const uint8_t* lo, const uint8_t* hi,
                                           int64_t first, int64_t m, Codes& c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c.codes[i] = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) c.raw[i] = 0;
  if (m <= 0) return;
  const uint8_t* codes = s.codes() + first / 2;
  const uint4 k = split::load16(codes, lo, hi);
  const uint4 r0 = split::load16(s.raw() + first, lo, hi);
  const uint4 r1 = split::load16(s.raw() + first + 16, lo, hi);
  c.codes[0] = k.x, c.codes[1] = k.y, c.codes[2] = k.z, c.codes[3] = k.w;
  if (first % 2 != 0) {
    const uint32_t next = codes + 16 < hi ? codes[16] : 0;
    c.codes[0] = __funnelshift_r(c.codes[0], c.codes[1], 4);
    c.codes[1] = __funnelshift_r(c.codes[1], c.codes[2], 4);
    c.codes[2] = __funnelshift_r(c.codes[2], c.codes[3], 4);
    c.codes[3] = __funnelshift_r(c.codes[3], next, 4);
  }
  c.raw[0] = r0.x, c.raw[1] = r0.y, c.raw[2] = r0.z, c.raw[3] = r0.w;
  c.raw[4] = r1.x, c.raw[5] = r1.y, c.raw[6] = r1.z, c.raw[7] = r1.w;
}

__device__ __forceinline__ uint32_t code_at(const Codes& c, int j) {
  return (c.codes[j / 8] >> (4 * (j % 8))) & 0xf;
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

// Decodes segment elements [from, to), inside one chunk, to out (the segment's first element):
// kOk or the error, the same in every thread. [lo, hi): the stream.
template <KvSplitFormat F>
__device__ int32_t decode_piece(UnitShared& sh, const Segment& s, const uint8_t* lo,
                                const uint8_t* hi, int64_t from, int64_t to, uint8_t* out) {
  const int64_t k = from / kKvSplitChunk;
  const int64_t chunk_end = min((k + 1) * kKvSplitChunk, s.n);
  const int64_t first = from + kGroup * static_cast<int64_t>(threadIdx.x);
  const int64_t m = min(to - first, int64_t{kGroup});
  // Issued together: the codes and raw bytes, the header, the chunk index entries.
  Codes c;
  load_codes(s, lo, hi, first, m, c);
  const uint32_t num_escapes = read_u32(s.header);
  const uint32_t book_size = s.header[4];
  uint64_t base = read_u32(s.index() + 4 * k);
  const uint64_t next = to != chunk_end ? 0
                        : to == s.n     ? num_escapes
                                        : read_u32(s.index() + 4 * (k + 1));
  __syncthreads();  // the previous piece is done with the table
  if (threadIdx.x < 16) {
    sh.table[threadIdx.x] =
        threadIdx.x < book_size && book_size <= 15 ? s.header[5 + threadIdx.x] : 0;
  }
  if (book_size > 15) return kCodebook;
  if (s.escape_room < num_escapes) return kSegmentTruncated;
  // The escapes before `from` in the segment: the chunk index's, and those of the chunk's
  // elements before `from` when the piece starts inside the chunk.
  if (from > k * kKvSplitChunk) base += count_escapes(s, k * kKvSplitChunk, from, sh.scratch);
  if (from == 0 && base != 0) return kChunkIndex;

  uint32_t escapes = 0;
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const uint32_t code = code_at(c, j);
    if (j < m && code == split::kEscape) escapes |= 1u << j;
    if (j < m && code != split::kEscape && code >= book_size) bad = true;
  }
  uint32_t total;
  const uint32_t before =
      split::team_scan(static_cast<uint32_t>(__popc(escapes)), &total, sh.scratch);
  if (__syncthreads_or(bad)) return kBadCode;
  if (base + total > num_escapes) return kTooManyEscapes;
  if (to == chunk_end && base + total != next) return kChunkIndex;
  if (to == s.n && s.n % 2 != 0 && (s.codes()[s.n / 2] >> 4) != 0) return kPadding;
  if (m <= 0) return kOk;

  // Assembled and stored 16 elements at a time (fewer live registers).
  const uint8_t* esc = s.escapes() + base + before;
  uint8_t* dst = out + 2 * first;
  const bool whole = m >= kGroup && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t x[8];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int j = 16 * h + i;
      const uint32_t code = code_at(c, j);
      const uint32_t symbol = code == split::kEscape ? (j < m ? *esc++ : 0) : sh.table[code];
      const uint32_t e = split::element_of<F>(symbol, (c.raw[j / 4] >> (8 * (j % 4))) & 0xff);
      x[i / 2] = i % 2 == 0 ? e : x[i / 2] | e << 16;
    }
    if (whole) {
      uint4* v = reinterpret_cast<uint4*>(dst + 32 * h);
      v[0] = make_uint4(x[0], x[1], x[2], x[3]);
      v[1] = make_uint4(x[4], x[5], x[6], x[7]);
    } else {
      uint16_t* e = reinterpret_cast<uint16_t*>(dst + 32 * h);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        if (16 * h + i < m) e[i] = static_cast<uint16_t>(x[i / 2] >> (16 * (i % 2)));
      }
    }
  }
  return kOk;
}

// Decodes block elements [begin, end) from the split stream st, cut in segments of seg_elems,
// whose segment holding `begin` starts at off; every thread returns the same.
template <KvSplitFormat F>
__device__ int32_t decode_split_unit(UnitShared& sh, const uint8_t* st, uint64_t size,
                                     int64_t num_elems, int64_t seg_elems, int64_t off,
                                     int64_t begin, int64_t end, uint8_t* block) {
  int64_t first = begin / seg_elems * seg_elems;  // the segment's first element
  int64_t at = begin;
  while (true) {
    Segment s;
    if (!segment_at(st, size, off, min(seg_elems, num_elems - first), &s)) return kSegmentTruncated;
    const int64_t to = min(end - first, s.n);
    for (int64_t from = at - first; from < to;) {
      const int64_t piece_end = min((from / kKvSplitChunk + 1) * kKvSplitChunk, to);
      const int32_t e = decode_piece<F>(sh, s, st, st + size, from, piece_end, block + 2 * first);
      if (e != kOk) return e;
      from = piece_end;
    }
    at = first + to;
    if (at >= end) return kOk;
    // decode_piece checked that the escapes fit in the stream.
    off = s.escapes() + read_u32(s.header) - st;
    first += seg_elems;
  }
}

__global__ void __launch_bounds__(kThreads) decode_kernel(const __grid_constant__ DecodeArgs a) {
  __shared__ UnitShared sh;
  // Unit-major: blockIdx.x = unit * num_blocks + block.
  const int64_t b = blockIdx.x % static_cast<uint32_t>(a.num_blocks);
  const int64_t u = blockIdx.x / static_cast<uint32_t>(a.num_blocks);
  // Loads that need no word are issued before the wait.
  const uint8_t* st = a.streams[b];
  const uint64_t size = a.stream_bytes[b];
  uint8_t* block = a.pool + static_cast<int64_t>(a.block_ids[b]) * a.block_bytes;
  if (threadIdx.x == 0) {
    const unsigned long long* word = a.units + b * a.units_per_block + u;
    unsigned long long w;
    while ((w = __ldcv(word)) == kPending) __nanosleep(32);
    sh.word = w;
  }
  __syncthreads();
  const uint64_t state = sh.word >> kStateShift;
  if (state == kError) return;
  const int64_t num_elems = a.block_bytes / 2;
  const int64_t begin = u * kKvSplitChunk;
  const int64_t end = min(begin + kKvSplitChunk, num_elems);
  if (state == kStored) {
    split::copy_region(block + 2 * begin, st + kKvStreamHeaderBytes + 2 * begin, 2 * (end - begin),
                       sh.nat);
    return;
  }
  const int64_t off = static_cast<int64_t>(sh.word & kOffsetMask);
  const auto packed = static_cast<int64_t>((sh.word >> kSegElemsShift) & kSegElemsMask);
  const int64_t seg_elems = packed != 0 ? packed : read_u32(st + 20) / 2;
  const int32_t error = (sh.word & kF16Bit) == 0
                            ? decode_split_unit<KvSplitFormat::kBf16>(
                                  sh, st, size, num_elems, seg_elems, off, begin, end, block)
                            : decode_split_unit<KvSplitFormat::kF16>(
                                  sh, st, size, num_elems, seg_elems, off, begin, end, block);
  if (error != kOk && threadIdx.x == 0) report(a, b, error);
}

constexpr int64_t units_per_block(int64_t block_bytes) {
  return (block_bytes / 2 + kKvSplitChunk - 1) / kKvSplitChunk;
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
  STRATA_CUDA_CHECK(detail::launch_pdl(decode_kernel,
                                       dim3(static_cast<unsigned>(int64_t{p.num_blocks} * units)),
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
