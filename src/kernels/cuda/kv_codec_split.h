#pragma once
// The KV codec's split scheme on the GPU (docs/kv-codec.md, "On the GPU"): a batch of pool blocks
// encoded into streams, and a batch of streams decoded into pool blocks, in device memory. The
// stream is the CPU codec's (src/kv/kv_codec.h) byte for byte: the encoder writes what kv_encode
// writes for the same block, plan and codebooks (the stored stream included, when split would not
// make the block smaller), and the decoder reads what kv_encode writes (split, BF16 or F16, and
// stored; zstd is an error), with kv_decode's checks: a corrupt stream is an error for its block,
// never a read outside its bytes or a write outside its block.
//
//   encode  three launches: count each chunk's escapes; scan them per block (placing every
//           segment and writing the headers); write codes, raw bytes, chunk index and escapes.
//   decode  two launches that overlap: a thread per block walks its segment headers and
//           publishes where each 4096-element unit's segment starts; a team per unit decodes it
//           as soon as its segment is known.
//
// Kernels see no kv:: type: the codebook, the format and the stream's constants are declared here
// in the stream's own terms (the tests hold them equal to kv_codec.h's). Launchers are
// asynchronous on their stream and return only launch errors; the decoder's per-block errors land
// in device memory (kv_split_decode_status reads one).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace strata::cuda {

// Elements per chunk of a segment's escape index (kv::kSplitChunk).
inline constexpr int64_t kKvSplitChunk = 4096;
// The stream's header (kv_encode's): "SKVC", version, scheme, 0, raw bytes.
inline constexpr int64_t kKvStreamHeaderBytes = 16;

// How a 16-bit element splits (kv::SplitFormat, same values).
enum class KvSplitFormat : uint8_t {
  kBf16 = 1,  // symbol: the exponent (bits 7-14); raw: the sign and the 7 mantissa bits
  kF16 = 2,   // symbol: the high byte; raw: the low byte
};

// A segment's codebook (kv::KvCodebook): code c < size is symbols[c], code 15 the escape. size
// <= 15; a symbol listed twice takes its last code, as on the CPU.
struct KvSplitCodebook {
  uint8_t symbols[15] = {};
  uint8_t size = 0;
};

// The longest stream of a block (kv_encode_bound): a stream never outgrows its stored form.
constexpr int64_t kv_split_stream_bound(int64_t block_bytes) {
  return kKvStreamHeaderBytes + block_bytes;
}

struct KvSplitEncodeParams {
  const void* pool = nullptr;          // [num_pool_blocks, block_bytes] device, 2-byte aligned
  const int32_t* block_ids = nullptr;  // [num_blocks] device: the pool blocks to encode
  int32_t num_blocks = 0;
  int64_t block_bytes = 0;    // even, 2 .. 2^32 - 2
  int64_t segment_bytes = 0;  // even; 0: the whole block one segment (KvCodecPlan::segment_bytes)
  KvSplitFormat format = KvSplitFormat::kBf16;
  // [num_codebooks] device: segment s codes with codebooks[s % num_codebooks] (calibrated per
  // layer's K and V, KvCodecPlan::codebooks); at least one.
  const KvSplitCodebook* codebooks = nullptr;
  int32_t num_codebooks = 0;
  void* out = nullptr;     // [num_blocks, out_stride] device: block i's stream at i * out_stride
  int64_t out_stride = 0;  // >= kv_split_stream_bound(block_bytes)
  uint64_t* stream_bytes = nullptr;  // [num_blocks] device: each stream's length
  void* workspace = nullptr;         // kv_split_encode_workspace_bytes() bytes of device memory
  size_t workspace_bytes = 0;
};

size_t kv_split_encode_workspace_bytes(int32_t num_blocks, int64_t block_bytes,
                                       int64_t segment_bytes);

// Writes the stream of every listed block. Contract: out does not overlap the pool or the
// workspace. InvalidArgument for a bad shape or a missing buffer.
Status kv_split_encode(const KvSplitEncodeParams& params, cudaStream_t stream);

struct KvSplitDecodeParams {
  const uint8_t* const* streams = nullptr;  // [num_blocks] device pointers to each stream
  const uint64_t* stream_bytes = nullptr;   // [num_blocks] device: each stream's length
  int32_t num_blocks = 0;
  void* pool = nullptr;                // [num_pool_blocks, block_bytes] device, 2-byte aligned
  const int32_t* block_ids = nullptr;  // [num_blocks] device: where stream i decodes to
  int64_t block_bytes = 0;             // even, 2 .. 2^32 - 2; every stream's raw size
  int32_t* errors = nullptr;           // [num_blocks] device: 0, or what was wrong with the stream
  void* workspace = nullptr;           // kv_split_decode_workspace_bytes() bytes of device memory
  size_t workspace_bytes = 0;
};

size_t kv_split_decode_workspace_bytes(int32_t num_blocks, int64_t block_bytes);

// Decodes every stream into its block and sets errors[i] (0 when stream i decoded). A block whose
// stream is corrupt may be partly written; no other byte is. A split stream of 2^36 bytes or more
// (only segments of a few elements make one that long) is refused. Contract: streams do not
// overlap the pool; no block is listed twice. InvalidArgument for a bad shape or a missing buffer.
Status kv_split_decode(const KvSplitDecodeParams& params, cudaStream_t stream);

// What a decode error means, as kv_decode says it: Ok for 0, Unsupported for a zstd stream,
// InvalidArgument("KV stream: ...") for the rest.
Status kv_split_decode_status(int32_t error);

}  // namespace strata::cuda
