// The split KV codec's GPU encoder (kv_codec_split.h): three launches over a batch of blocks.
//
//   count  a team per chunk (block x chunk): codes its 4096 elements and counts the escapes
//   scan   a team per block: the escapes before each chunk of the block, hence where every
//          segment starts (all but the last segment have the same size apart from their escapes);
//          the stream's length, stored when split would not make it smaller; the headers
//   write  a team per chunk: codes it again and writes its codes, raw bytes, chunk index entry
//          and escapes where the scan placed them (or, for a stored stream, its bytes as they are)
//
// The block is read twice; a single pass would need each chunk to learn the escapes of every
// chunk before it in its block (a decoupled look-back), which the two passes keep simple.

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec_split.cuh"
#include "kernels/cuda/kv_codec_split.h"

namespace strata::cuda {
namespace {

using split::kGroup;
using split::kThreads;
using split::kWarps;
using split::segment_fixed_bytes;

// Where a block's chunks lie: segments of seg_elems elements (the last maybe shorter), each cut
// into chunks of kKvSplitChunk elements, numbered in block order.
struct Geometry {
  int64_t block_bytes = 0;
  int64_t seg_elems = 0;  // the plan's segment (may exceed the block)
  int64_t num_segments = 0;
  int64_t seg_chunks = 0;  // chunks of a segment but the last
  int64_t last_elems = 0;  // elements of the last segment
  int64_t chunks = 0;      // chunks of a block
  uint32_t segment_bytes = 0;

  __host__ __device__ int64_t elems(int64_t s) const {
    return s == num_segments - 1 ? last_elems : seg_elems;
  }
  // Where segment s starts, after escapes_before escapes of the segments before it.
  __host__ __device__ int64_t segment_offset(int64_t s, int64_t escapes_before) const {
    return kKvStreamHeaderBytes + split::kSplitHeaderBytes + s * segment_fixed_bytes(seg_elems) +
           escapes_before;
  }
  __host__ __device__ int64_t stream_bytes(int64_t escapes) const {
    return segment_offset(num_segments - 1, 0) + segment_fixed_bytes(last_elems) + escapes;
  }
};

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// False for a shape the encoder does not take (the CPU would store such a block, or cannot).
bool make_geometry(int64_t block_bytes, int64_t segment_bytes, Geometry* g) {
  const int64_t segment = segment_bytes == 0 ? block_bytes : segment_bytes;
  if (block_bytes < 2 || block_bytes % 2 != 0 || block_bytes > int64_t{UINT32_MAX} - 1 ||
      segment < 2 || segment % 2 != 0 || segment > int64_t{UINT32_MAX}) {
    return false;
  }
  const int64_t n = block_bytes / 2;
  g->block_bytes = block_bytes;
  g->seg_elems = segment / 2;
  g->num_segments = ceil_div(n, g->seg_elems);
  g->seg_chunks = ceil_div(g->seg_elems, kKvSplitChunk);
  g->last_elems = n - (g->num_segments - 1) * g->seg_elems;
  g->chunks = (g->num_segments - 1) * g->seg_chunks + ceil_div(g->last_elems, kKvSplitChunk);
  g->segment_bytes = static_cast<uint32_t>(segment);
  return true;
}

struct EncodeArgs {
  const uint8_t* pool;               // [num_pool_blocks, block_bytes]
  const int32_t* block_ids;          // [num_blocks]
  const KvSplitCodebook* codebooks;  // [num_codebooks]
  int32_t num_codebooks;
  uint8_t* out;  // [num_blocks, out_stride]
  int64_t out_stride;
  uint64_t* stream_bytes;  // [num_blocks]
  // [num_blocks, chunks]: each chunk's escapes (count), then the escapes before it in its block
  // (scan)
  uint32_t* escapes;
  Geometry geo;
  KvSplitFormat format;
};

// The chunk a team codes: blockIdx.x = block * chunks + chunk.
struct Chunk {
  int64_t b;      // in the batch
  int64_t g;      // in its block
  int64_t s;      // its segment
  int64_t k;      // in its segment
  int64_t n;      // elements of its segment
  int64_t m;      // its elements
  int64_t first;  // its first element in the block
  const uint8_t* block;
};

__device__ Chunk chunk_of(const EncodeArgs& a) {
  const Geometry& geo = a.geo;
  Chunk c;
  c.b = static_cast<int64_t>(blockIdx.x) / geo.chunks;
  c.g = static_cast<int64_t>(blockIdx.x) % geo.chunks;
  const int64_t full = (geo.num_segments - 1) * geo.seg_chunks;
  c.s = c.g < full ? c.g / geo.seg_chunks : geo.num_segments - 1;
  c.k = c.g < full ? c.g % geo.seg_chunks : c.g - full;
  c.n = geo.elems(c.s);
  c.m = min(kKvSplitChunk, c.n - c.k * kKvSplitChunk);
  c.first = c.s * geo.seg_elems + c.k * kKvSplitChunk;
  c.block = a.pool + static_cast<int64_t>(a.block_ids[c.b]) * geo.block_bytes;
  return c;
}

// code_of[symbol]: its code in book, 15 (the escape) for a symbol not in it; the last code of a
// symbol listed twice, as the CPU's table.
__device__ void build_code_table(const KvSplitCodebook& book, uint8_t* code_of) {
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += kThreads) code_of[i] = split::kEscape;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int size = min(static_cast<int>(book.size), 15);
    for (int c = 0; c < size; ++c) code_of[book.symbols[c]] = static_cast<uint8_t>(c);
  }
  __syncthreads();
}

// A thread's group: up to 32 consecutive elements, split and coded.
struct Group {
  uint32_t x[16];     // element j in bits [16 (j % 2), 16 (j % 2) + 16) of x[j / 2]
  uint32_t codes[4];  // element j's code in nibble j
  uint32_t raw[8];    // element j's raw byte in byte j
  uint32_t escapes;   // bit j: element j is an escape
};

// Loads the elements [first, first + min(m, 32)) of block into g.x (none when m <= 0): issued
// before the codebook's table is built, so that the loads and the table overlap.
__device__ __forceinline__ void load_group(const uint8_t* block, int64_t block_bytes, int64_t first,
                                           int64_t m, Group& g) {
#pragma unroll
  for (int i = 0; i < 16; ++i) g.x[i] = 0;
  if (m <= 0) return;
  const uint8_t* p = block + 2 * first;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Bytes past the block read as 0; elements past m (another chunk's) are not coded.
    const uint4 v = split::load16(p + 16 * i, block, block + block_bytes);
    g.x[4 * i] = v.x;
    g.x[4 * i + 1] = v.y;
    g.x[4 * i + 2] = v.z;
    g.x[4 * i + 3] = v.w;
  }
}

// Codes the first min(m, 32) elements of g.x.
template <KvSplitFormat F>
__device__ __forceinline__ void code_group(int64_t m, const uint8_t* code_of, Group& g) {
#pragma unroll
  for (int i = 0; i < 4; ++i) g.codes[i] = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) g.raw[i] = 0;
  g.escapes = 0;
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    if (j < m) {
      const uint32_t e = (g.x[j / 2] >> (16 * (j % 2))) & 0xffff;
      const uint32_t c = code_of[split::symbol_of<F>(e)];
      g.codes[j / 8] |= c << (4 * (j % 8));
      g.raw[j / 4] |= split::raw_of<F>(e) << (8 * (j % 4));
      if (c == split::kEscape) g.escapes |= 1u << j;
    }
  }
}

template <KvSplitFormat F>
__global__ void __launch_bounds__(kThreads)
    encode_count_kernel(const __grid_constant__ EncodeArgs a) {
  __shared__ uint8_t code_of[256];
  __shared__ uint32_t scratch[kWarps];
  const Chunk c = chunk_of(a);
  const int64_t t = threadIdx.x;
  Group g;
  load_group(c.block, a.geo.block_bytes, c.first + kGroup * t, c.m - kGroup * t, g);
  build_code_table(a.codebooks[c.s % a.num_codebooks], code_of);
  code_group<F>(c.m - kGroup * t, code_of, g);
  uint32_t total;
  split::team_scan(static_cast<uint32_t>(__popc(g.escapes)), &total, scratch);
  if (t == 0) a.escapes[c.b * a.geo.chunks + c.g] = total;
}

// Writes the 16-byte header and, for a split stream, the 8-byte split header.
__device__ void write_headers(const EncodeArgs& a, uint8_t* out, bool stored) {
  const uint8_t magic[4] = {'S', 'K', 'V', 'C'};
  for (int i = 0; i < 4; ++i) out[i] = magic[i];
  out[4] = 1;               // version
  out[5] = stored ? 0 : 1;  // scheme: stored, split
  out[6] = 0;
  out[7] = 0;
  split::write_u64(out + 8, static_cast<uint64_t>(a.geo.block_bytes));
  if (stored) return;
  out[16] = static_cast<uint8_t>(a.format);
  out[17] = 0;
  out[18] = 0;
  out[19] = 0;
  split::write_u32(out + 20, a.geo.segment_bytes);
}

__global__ void __launch_bounds__(kThreads)
    encode_scan_kernel(const __grid_constant__ EncodeArgs a) {
  __shared__ uint32_t scratch[kWarps];
  const Geometry& geo = a.geo;
  const int64_t b = blockIdx.x;
  uint32_t* esc = a.escapes + b * geo.chunks;
  uint32_t carry = 0;  // at most the block's elements, < 2^31
  for (int64_t base = 0; base < geo.chunks; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const uint32_t v = i < geo.chunks ? esc[i] : 0;
    uint32_t total;
    const uint32_t before = split::team_scan(v, &total, scratch);
    if (i < geo.chunks) esc[i] = carry + before;
    carry += total;
  }
  __syncthreads();  // the prefixes other threads wrote are read below
  const int64_t bytes = geo.stream_bytes(carry);
  const bool stored = bytes >= kv_split_stream_bound(geo.block_bytes);
  uint8_t* out = a.out + b * a.out_stride;
  if (threadIdx.x == 0) {
    write_headers(a, out, stored);
    a.stream_bytes[b] =
        static_cast<uint64_t>(stored ? kv_split_stream_bound(geo.block_bytes) : bytes);
  }
  if (stored) return;
  for (int64_t s = threadIdx.x; s < geo.num_segments; s += kThreads) {
    const uint32_t before = esc[s * geo.seg_chunks];
    const uint32_t after = s + 1 < geo.num_segments ? esc[(s + 1) * geo.seg_chunks] : carry;
    uint8_t* h = out + geo.segment_offset(s, before);
    const KvSplitCodebook& book = a.codebooks[s % a.num_codebooks];
    split::write_u32(h, after - before);
    h[4] = book.size;
#pragma unroll
    for (int i = 0; i < 15; ++i) h[5 + i] = book.symbols[i];
  }
}

template <KvSplitFormat F>
__global__ void __launch_bounds__(kThreads)
    encode_write_kernel(const __grid_constant__ EncodeArgs a) {
  __shared__ uint8_t code_of[256];
  __shared__ uint32_t scratch[kWarps];
  __shared__ alignas(16) uint8_t codes_nat[16 + kKvSplitChunk / 2 + 32];
  __shared__ alignas(16) uint8_t raw_nat[split::kNatBytes];
  const Geometry& geo = a.geo;
  const Chunk c = chunk_of(a);
  const int64_t t = threadIdx.x;
  // Issued together: the stream's length, the escapes before the chunk, the chunk's elements.
  uint8_t* out = a.out + c.b * a.out_stride;
  const bool stored =
      a.stream_bytes[c.b] == static_cast<uint64_t>(kv_split_stream_bound(geo.block_bytes));
  const uint32_t* esc = a.escapes + c.b * geo.chunks;
  const uint32_t segment_before = esc[c.s * geo.seg_chunks];
  const uint32_t chunk_before = esc[c.g] - segment_before;  // in the segment
  Group g;
  load_group(c.block, geo.block_bytes, c.first + kGroup * t, c.m - kGroup * t, g);
  if (stored) {
    // A split stream is always shorter: the chunk's bytes as they are.
    split::copy_region(out + kKvStreamHeaderBytes + 2 * c.first, c.block + 2 * c.first, 2 * c.m,
                       raw_nat);
    return;
  }
  build_code_table(a.codebooks[c.s % a.num_codebooks], code_of);
  code_group<F>(c.m - kGroup * t, code_of, g);

  // The segment's planes (kv_codec.h): codes, raw bytes, chunk index, escapes.
  uint8_t* codes = out + geo.segment_offset(c.s, segment_before) + split::kSegmentHeaderBytes;
  uint8_t* raw = codes + (c.n + 1) / 2;
  uint8_t* index = raw + c.n;
  uint8_t* escapes = index + 4 * ceil_div(c.n, kKvSplitChunk);

  uint32_t total;
  uint32_t at =
      chunk_before + split::team_scan(static_cast<uint32_t>(__popc(g.escapes)), &total, scratch);
  if (g.escapes != 0) {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      if ((g.escapes >> j) & 1u) {
        escapes[at++] =
            static_cast<uint8_t>(split::symbol_of<F>((g.x[j / 2] >> (16 * (j % 2))) & 0xffff));
      }
    }
  }
  if (t == 0) split::write_u32(index + 4 * c.k, chunk_before);
  reinterpret_cast<uint4*>(codes_nat + 16)[t] =
      make_uint4(g.codes[0], g.codes[1], g.codes[2], g.codes[3]);
  reinterpret_cast<uint4*>(raw_nat + 16)[2 * t] =
      make_uint4(g.raw[0], g.raw[1], g.raw[2], g.raw[3]);
  reinterpret_cast<uint4*>(raw_nat + 16)[2 * t + 1] =
      make_uint4(g.raw[4], g.raw[5], g.raw[6], g.raw[7]);
  __syncthreads();
  split::store_region(codes + c.k * (kKvSplitChunk / 2), (c.m + 1) / 2, codes_nat + 16);
  split::store_region(raw + c.k * kKvSplitChunk, c.m, raw_nat + 16);
}

template <KvSplitFormat F>
Status launch(const EncodeArgs& a, int32_t num_blocks, cudaStream_t stream) {
  const auto chunk_teams = static_cast<unsigned>(num_blocks * a.geo.chunks);
  encode_count_kernel<F><<<chunk_teams, kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  encode_scan_kernel<<<static_cast<unsigned>(num_blocks), kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  encode_write_kernel<F><<<chunk_teams, kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace

size_t kv_split_encode_workspace_bytes(int32_t num_blocks, int64_t block_bytes,
                                       int64_t segment_bytes) {
  Geometry geo;
  if (num_blocks <= 0 || !make_geometry(block_bytes, segment_bytes, &geo)) return 0;
  return static_cast<size_t>(num_blocks) * static_cast<size_t>(geo.chunks) * sizeof(uint32_t);
}

Status kv_split_encode(const KvSplitEncodeParams& p, cudaStream_t stream) {
  if (p.num_blocks < 0) return Status::InvalidArgument("kv_split_encode: num_blocks < 0");
  if (p.num_blocks == 0) return Status::Ok();
  EncodeArgs a{};
  if (!make_geometry(p.block_bytes, p.segment_bytes, &a.geo)) {
    return Status::InvalidArgument(
        "kv_split_encode: block_bytes must be even, 2 .. 2^32 - 2, and segment_bytes even, at "
        "most 2^32 - 1");
  }
  if (p.pool == nullptr || p.block_ids == nullptr || p.codebooks == nullptr || p.out == nullptr ||
      p.stream_bytes == nullptr || p.workspace == nullptr) {
    return Status::InvalidArgument(
        "kv_split_encode needs the pool, block ids, codebooks, output, stream lengths and "
        "workspace");
  }
  if (reinterpret_cast<uintptr_t>(p.pool) % 2 != 0) {
    return Status::InvalidArgument("kv_split_encode: the pool must be 2-byte aligned");
  }
  if (p.num_codebooks < 1) return Status::InvalidArgument("kv_split_encode needs a codebook");
  if (p.out_stride < kv_split_stream_bound(p.block_bytes)) {
    return Status::InvalidArgument("kv_split_encode: out_stride below the stream bound");
  }
  if (p.workspace_bytes <
      kv_split_encode_workspace_bytes(p.num_blocks, p.block_bytes, p.segment_bytes)) {
    return Status::InvalidArgument("kv_split_encode: workspace too small");
  }
  if (int64_t{p.num_blocks} * a.geo.chunks > INT32_MAX) {
    return Status::InvalidArgument("kv_split_encode: too many chunks for one launch");
  }
  a.pool = static_cast<const uint8_t*>(p.pool);
  a.block_ids = p.block_ids;
  a.codebooks = p.codebooks;
  a.num_codebooks = p.num_codebooks;
  a.out = static_cast<uint8_t*>(p.out);
  a.out_stride = p.out_stride;
  a.stream_bytes = p.stream_bytes;
  a.escapes = static_cast<uint32_t*>(p.workspace);
  a.format = p.format;
  switch (p.format) {
    case KvSplitFormat::kBf16:
      return launch<KvSplitFormat::kBf16>(a, p.num_blocks, stream);
    case KvSplitFormat::kF16:
      return launch<KvSplitFormat::kF16>(a, p.num_blocks, stream);
  }
  return Status::InvalidArgument("kv_split_encode: unknown format");
}

}  // namespace strata::cuda
