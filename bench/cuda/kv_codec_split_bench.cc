// strata_kv_codec_split_bench: the split KV codec on the GPU (kernels/cuda/kv_codec_split.h),
// encode and decode rates of raw bytes against a device-to-device cudaMemcpy of the same bytes
// measured in the same run (the ratio is the figure; docs/kv-codec.md, "On the GPU").
//
// A batch of Llama-3.1-8B blocks (32 layers x K, V x 8 KV heads x 16 tokens x 128 dims, bf16:
// 2 MiB, a segment per layer's K or V), handed out in a random order as a long-running pool
// would, for two kinds of values: "kv-like" (normal values, the scale a ramp over the channels, as
// strata-tiny's K: few escapes) and "wide" (channel scales spread over 2^-5.5 .. 2^5.5, each
// layer's K and V its own: about 1.5 % escapes). The batch repeats --distinct blocks of each;
// the codebooks are calibrated on them (KvCodecPlan::codebooks). Before anything is timed, the
// streams of the distinct blocks are checked byte for byte against kv_encode's and the whole
// batch's decode bit for bit against the blocks. Times are medians of --reps event-timed calls.
//
// Decode's hardware limit is DRAM traffic: it reads 1 / ratio bytes of stream and writes 1 byte
// of block per raw byte, where the copy moves 2 bytes per byte copied, so its bound is
// memcpy GB/s x 2 / (1 + 1 / ratio) of raw bytes (about x 2 / 1.75 at ratio 1.33); the table's
// "decode / bound" is its share of that.
//
//   strata_kv_codec_split_bench [--blocks N] [--distinct N] [--reps N] [--json FILE]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kv_codec_split.h"
#include "kernels/cuda/stream.h"
#include "kv/kv_codec.h"

namespace strata::cuda {
namespace {

using bench::die_if;
using bench::median_ms_per_call;
using bench::take;

constexpr int kLayers = 32;
constexpr int kKvHeads = 8;
constexpr int kTokens = 16;
constexpr int kHeadDim = 128;
constexpr size_t kSegmentElems = size_t{kKvHeads} * kTokens * kHeadDim;  // a layer's K or V
constexpr size_t kBlockElems = 2 * kLayers * kSegmentElems;
constexpr size_t kBlockBytes = 2 * kBlockElems;  // 2 MiB
constexpr size_t kSegmentBytes = 2 * kSegmentElems;

enum class Values { kKvLike, kWide };

// One block, [layer][K, V][head][token][dim]: each segment its own channel scales.
std::vector<std::byte> make_block(Values values, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_real_distribution<float> spread(-5.5F, 5.5F);
  // The segments' scales depend on the segment only (a layer's K keeps its distribution across
  // blocks); the values on the seed.
  std::mt19937 scale_rng(7);
  std::vector<uint16_t> x(kBlockElems);
  for (size_t s = 0; s < 2 * kLayers; ++s) {
    float scale[kHeadDim];
    for (int c = 0; c < kHeadDim; ++c) {
      scale[c] = values == Values::kKvLike ? 0.05F + static_cast<float>(c) / 64.0F
                                           : std::exp2(spread(scale_rng));
    }
    for (size_t i = 0; i < kSegmentElems; ++i) {
      x[s * kSegmentElems + i] = f32_to_bf16(normal(rng) * scale[i % kHeadDim]);
    }
  }
  std::vector<std::byte> out(kBlockBytes);
  std::memcpy(out.data(), x.data(), out.size());
  return out;
}

struct Row {
  const char* values;
  double escape_fraction;
  double ratio;
  double encode_gbs;
  double decode_gbs;
};

// Raw bytes a second that decode would reach at the copy's DRAM traffic (see the top).
double decode_bound_gbs(const Row& r, double copy_gbs) {
  return copy_gbs * 2.0 / (1.0 + 1.0 / r.ratio);
}

// Escapes among the elements of the blocks under plan's codebooks.
double escape_fraction(const std::vector<std::vector<std::byte>>& blocks,
                       const kv::KvCodecPlan& plan) {
  uint64_t escapes = 0, total = 0;
  for (const auto& b : blocks) {
    for (size_t s = 0; s < 2 * kLayers; ++s) {
      kv::SymbolHistogram h = {};
      kv::add_symbol_histogram(kv::SplitFormat::kBf16,
                               std::span(b).subspan(s * kSegmentBytes, kSegmentBytes), h);
      const kv::KvCodebook& book = plan.codebooks[s % plan.codebooks.size()];
      for (size_t sym = 0; sym < 256; ++sym) {
        const bool coded = std::find(book.symbols.begin(), book.symbols.begin() + book.size,
                                     static_cast<uint8_t>(sym)) != book.symbols.begin() + book.size;
        if (!coded) escapes += h[sym];
        total += h[sym];
      }
    }
  }
  return static_cast<double>(escapes) / static_cast<double>(total);
}

Row measure(Values values, const char* name, int32_t num_blocks, int32_t distinct, int reps,
            Stream& stream, double* memcpy_gbs) {
  // The distinct blocks, their calibrated codebooks, the CPU's streams.
  std::vector<std::vector<std::byte>> blocks;
  for (int32_t i = 0; i < distinct; ++i) blocks.push_back(make_block(values, 1000 + i));
  kv::KvCodecPlan plan{.scheme = kv::KvCodecScheme::kSplit,
                       .split = kv::SplitFormat::kBf16,
                       .segment_bytes = kSegmentBytes};
  std::vector<kv::SymbolHistogram> hist(2 * kLayers);
  for (const auto& b : blocks)
    kv::add_segment_histograms(kv::SplitFormat::kBf16, b, kSegmentBytes, hist);
  std::vector<KvSplitCodebook> books;
  for (const auto& h : hist) {
    plan.codebooks.push_back(kv::codebook_from_histogram(h));
    KvSplitCodebook d;
    std::memcpy(d.symbols, plan.codebooks.back().symbols.data(), 15);
    d.size = plan.codebooks.back().size;
    books.push_back(d);
  }

  // Batch block i is distinct block i % distinct, at pool block ids[i].
  const size_t batch_bytes = kBlockBytes * static_cast<size_t>(num_blocks);
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  DeviceBuffer pool = take(DeviceBuffer::allocate(batch_bytes), "alloc");
  DeviceBuffer decoded = take(DeviceBuffer::allocate(batch_bytes), "alloc");
  for (int32_t i = 0; i < num_blocks; ++i) {
    die_if(
        cudaMemcpy(
            pool.as<std::byte>() + kBlockBytes * static_cast<size_t>(ids[static_cast<size_t>(i)]),
            blocks[static_cast<size_t>(i % distinct)].data(), kBlockBytes, cudaMemcpyHostToDevice),
        "upload");
  }
  const int64_t stride = (kv_split_stream_bound(kBlockBytes) + 255) / 256 * 256;
  DeviceBuffer d_ids = take(DeviceBuffer::allocate(ids.size() * sizeof(int32_t)), "alloc");
  die_if(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
         "upload");
  DeviceBuffer d_books =
      take(DeviceBuffer::allocate(books.size() * sizeof(KvSplitCodebook)), "alloc");
  die_if(cudaMemcpy(d_books.data(), books.data(), books.size() * sizeof(KvSplitCodebook),
                    cudaMemcpyHostToDevice),
         "upload");
  DeviceBuffer out =
      take(DeviceBuffer::allocate(static_cast<size_t>(stride) * num_blocks), "alloc");
  DeviceBuffer lengths = take(DeviceBuffer::allocate(sizeof(uint64_t) * num_blocks), "alloc");
  DeviceBuffer errors = take(DeviceBuffer::allocate(sizeof(int32_t) * num_blocks), "alloc");
  std::vector<const uint8_t*> pointers;
  for (int32_t i = 0; i < num_blocks; ++i) pointers.push_back(out.as<uint8_t>() + stride * i);
  DeviceBuffer d_pointers = take(DeviceBuffer::allocate(pointers.size() * sizeof(void*)), "alloc");
  die_if(cudaMemcpy(d_pointers.data(), pointers.data(), pointers.size() * sizeof(void*),
                    cudaMemcpyHostToDevice),
         "upload");
  const size_t enc_ws_bytes =
      kv_split_encode_workspace_bytes(num_blocks, kBlockBytes, kSegmentBytes);
  const size_t dec_ws_bytes = kv_split_decode_workspace_bytes(num_blocks, kBlockBytes);
  DeviceBuffer enc_ws = take(DeviceBuffer::allocate(enc_ws_bytes), "alloc");
  DeviceBuffer dec_ws = take(DeviceBuffer::allocate(dec_ws_bytes), "alloc");

  KvSplitEncodeParams e;
  e.pool = pool.data();
  e.block_ids = d_ids.as<int32_t>();
  e.num_blocks = num_blocks;
  e.block_bytes = kBlockBytes;
  e.segment_bytes = kSegmentBytes;
  e.format = KvSplitFormat::kBf16;
  e.codebooks = d_books.as<KvSplitCodebook>();
  e.num_codebooks = static_cast<int32_t>(books.size());
  e.out = out.data();
  e.out_stride = stride;
  e.stream_bytes = lengths.as<uint64_t>();
  e.workspace = enc_ws.data();
  e.workspace_bytes = enc_ws_bytes;
  KvSplitDecodeParams d;
  d.streams = d_pointers.as<const uint8_t* const>();
  d.stream_bytes = lengths.as<const uint64_t>();
  d.num_blocks = num_blocks;
  d.pool = decoded.data();
  d.block_ids = d_ids.as<int32_t>();
  d.block_bytes = kBlockBytes;
  d.errors = errors.as<int32_t>();
  d.workspace = dec_ws.data();
  d.workspace_bytes = dec_ws_bytes;

  // Checked before anything is timed.
  die_if(kv_split_encode(e, stream.get()), "encode");
  die_if(kv_split_decode(d, stream.get()), "decode");
  die_if(stream.synchronize(), "sync");
  std::vector<uint64_t> length(static_cast<size_t>(num_blocks));
  die_if(cudaMemcpy(length.data(), lengths.data(), length.size() * sizeof(uint64_t),
                    cudaMemcpyDeviceToHost),
         "download");
  for (int32_t i = 0; i < num_blocks; ++i) {
    const std::vector<std::byte>& block = blocks[static_cast<size_t>(i % distinct)];
    std::string want;
    kv::kv_encode(block, plan, want);
    std::string got(length[static_cast<size_t>(i)], '\0');
    if (got.size() != want.size()) {
      std::fprintf(stderr, "%s: block %d's stream is %zu bytes, the CPU's %zu\n", name, i,
                   got.size(), want.size());
      std::exit(1);
    }
    if (i < distinct) {
      die_if(cudaMemcpy(got.data(), pointers[static_cast<size_t>(i)], got.size(),
                        cudaMemcpyDeviceToHost),
             "download");
      if (got != want) {
        std::fprintf(stderr, "%s: block %d's stream differs from the CPU's\n", name, i);
        std::exit(1);
      }
    }
  }
  std::vector<int32_t> errs(static_cast<size_t>(num_blocks));
  die_if(
      cudaMemcpy(errs.data(), errors.data(), errs.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
      "download");
  std::vector<std::byte> a(batch_bytes), b(batch_bytes);
  die_if(cudaMemcpy(a.data(), pool.data(), batch_bytes, cudaMemcpyDeviceToHost), "download");
  die_if(cudaMemcpy(b.data(), decoded.data(), batch_bytes, cudaMemcpyDeviceToHost), "download");
  for (int32_t i = 0; i < num_blocks; ++i) {
    if (errs[static_cast<size_t>(i)] != 0) {
      die_if(kv_split_decode_status(errs[static_cast<size_t>(i)]), "decode of a GPU stream");
    }
  }
  if (a != b) {
    std::fprintf(stderr, "%s: the decoded batch differs from the blocks\n", name);
    std::exit(1);
  }

  const double enc_ms = median_ms_per_call(stream.get(), reps, 1,
                                           [&](int) { return kv_split_encode(e, stream.get()); });
  const double dec_ms = median_ms_per_call(stream.get(), reps, 1,
                                           [&](int) { return kv_split_decode(d, stream.get()); });
  const double copy_ms = median_ms_per_call(stream.get(), reps, 1, [&](int) {
    return cudaMemcpyAsync(decoded.data(), pool.data(), batch_bytes, cudaMemcpyDeviceToDevice,
                           stream.get()) == cudaSuccess
               ? Status::Ok()
               : Status::Internal("cudaMemcpyAsync");
  });
  *memcpy_gbs = static_cast<double>(batch_bytes) / (copy_ms * 1e-3) / 1e9;
  const uint64_t coded = std::accumulate(length.begin(), length.end(), uint64_t{0});
  return Row{name, escape_fraction(blocks, plan),
             static_cast<double>(batch_bytes) / static_cast<double>(coded),
             static_cast<double>(batch_bytes) / (enc_ms * 1e-3) / 1e9,
             static_cast<double>(batch_bytes) / (dec_ms * 1e-3) / 1e9};
}

int run(int argc, char** argv) {
  std::string json_path;
  int32_t num_blocks = 256, distinct = 16;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
      num_blocks = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--distinct") == 0 && i + 1 < argc) {
      distinct = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (num_blocks < 1 || distinct < 1 || reps < 1) {
    std::fprintf(stderr, "--blocks, --distinct and --reps must be positive\n");
    return 2;
  }
  distinct = std::min(distinct, num_blocks);
  Stream stream = take(Stream::create(), "stream");
  cudaDeviceProp prop{};
  die_if(cudaGetDeviceProperties(&prop, 0), "cuda");

  std::vector<Row> rows;
  std::vector<double> memcpy_gbs(2);
  rows.push_back(
      measure(Values::kKvLike, "kv-like", num_blocks, distinct, reps, stream, &memcpy_gbs[0]));
  rows.push_back(
      measure(Values::kWide, "wide", num_blocks, distinct, reps, stream, &memcpy_gbs[1]));
  const double copy_gbs = std::max(memcpy_gbs[0], memcpy_gbs[1]);

  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf(
      "%d blocks of %zu bytes (Llama-3.1-8B: 32 layers x K, V x 8 KV heads x 16 tokens x 128, "
      "bf16; a segment per layer's K or V; codebooks calibrated on %d distinct blocks)\n",
      num_blocks, kBlockBytes, distinct);
  std::printf("device-to-device cudaMemcpy of the same %.0f MiB: %.0f GB/s (bytes copied)\n\n",
              static_cast<double>(kBlockBytes) * num_blocks / (1 << 20), copy_gbs);
  std::printf(
      "| values | escapes | ratio | encode GB/s | encode / memcpy | decode GB/s | decode / memcpy "
      "| decode bound GB/s | decode / bound |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double bound = decode_bound_gbs(r, copy_gbs);
    std::printf("| %s | %.2f %% | %.3f | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f |\n", r.values,
                100.0 * r.escape_fraction, r.ratio, r.encode_gbs, r.encode_gbs / copy_gbs,
                r.decode_gbs, r.decode_gbs / copy_gbs, bound, r.decode_gbs / bound);
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f,
                 "{\"device\": \"%s\", \"blocks\": %d, \"block_bytes\": %zu, \"distinct\": %d, "
                 "\"reps\": %d, \"memcpy_gbs\": %.1f, \"results\": [\n",
                 prop.name, num_blocks, kBlockBytes, distinct, reps, copy_gbs);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"values\": \"%s\", \"escape_fraction\": %.5f, \"ratio\": %.4f, "
                   "\"encode_gbs\": %.1f, \"decode_gbs\": %.1f, \"encode_vs_memcpy\": %.3f, "
                   "\"decode_vs_memcpy\": %.3f, \"decode_bound_gbs\": %.1f, "
                   "\"decode_vs_bound\": %.3f}%s\n",
                   r.values, r.escape_fraction, r.ratio, r.encode_gbs, r.decode_gbs,
                   r.encode_gbs / copy_gbs, r.decode_gbs / copy_gbs, decode_bound_gbs(r, copy_gbs),
                   r.decode_gbs / decode_bound_gbs(r, copy_gbs), i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
