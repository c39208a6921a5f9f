// strata_decode_bench: paged decode attention bandwidth on the GPU, against the device-to-device
// copy bandwidth measured in the same run (tools/gpu/bench_decode_torch.py measures PyTorch's SDPA
// on the same shapes in the same call; tools/gpu/gpu_check.sh runs both).
//
// 32 query / 8 KV heads, head dim 128, block sizes 16, 32 and 64, (batch x context) = 1 x 1024
// (the engine's batch-1 decode), 1 x 65536, 16 x 32768, 64 x 4096, 256 x 1024, for each KV dtype
// asked for (BF16 by default; fp8_e4m3, fp8_e5m2, int8 and int4 read quantized caches with
// BF16 queries, and their rows give the time as a ratio to BF16's at the same shape; int4 reads
// each query's own block from a bf16 newest-blocks pool, R = 1, the rest from its codes). Blocks
// are handed out in a random order, as a long-running pool would. The K/V rows are random_fill
// values appended through kv_append (which quantizes them), the pool is copied back and decoded
// on the host (kernels/cpu/kv_quant.h), and the output is checked against a double reference over
// those values (two sequences, first and last KV head) before anything is timed. Times are medians
// of individually event-timed launches, and per launch replayed from a CUDA graph ("graph": what
// a captured decode step pays; for the short batch-1 kernels an event pair times the launch more
// than the kernel). "KV bytes" counts K and V once, INT8's scales and INT4's statistics included
// (not INT4's one newest block per sequence).
//
//   strata_decode_bench [--json FILE] [--reps N] [--block-size N] [--batch N] [--no-sweep]
//                       [--kv-dtypes bf16,fp8_e4m3,fp8_e5m2,int8,int4]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"
#include "kv/kv_layout.h"
#include "kv_fill.h"

namespace strata::cuda {
namespace {

using bench::bf16_value;
using bench::die_if;
using bench::query_row;
using bench::take;
using bench::time_graph_us;

constexpr int32_t kQoHeads = 32;
constexpr int32_t kKvHeads = 8;
constexpr int32_t kHeadDim = 128;
constexpr uint64_t kKSeed = 11;
constexpr uint64_t kVSeed = 13;
constexpr uint64_t kQSeed = 12;

struct KvDType {
  const char* name;
  DType dtype;
  float fp8_max;  // FP8: the static scales are 1 / fp8_max (|K|, |V| < 1 fill the range)
};
constexpr KvDType kKvDTypeNames[] = {{"bf16", DType::kBF16, 0.0f},
                                     {"fp8_e4m3", DType::kF8E4M3, 448.0f},
                                     {"fp8_e5m2", DType::kF8E5M2, 57344.0f},
                                     {"int8", DType::kI8, 0.0f},
                                     {"int4", DType::kI4, 0.0f}};

struct Shape {
  int32_t batch;
  int32_t context;
};
constexpr Shape kShapes[] = {{1, 1024}, {1, 65536}, {16, 32768}, {64, 4096}, {256, 1024}};
constexpr int32_t kBlockSizes[] = {16, 32, 64};

std::vector<KvDType> parse_kv_dtypes(const std::string& list) {
  std::vector<KvDType> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    const KvDType* found = nullptr;
    for (const KvDType& k : kKvDTypeNames) {
      if (name == k.name) found = &k;
    }
    if (found == nullptr) {
      std::fprintf(stderr,
                   "--kv-dtypes: unknown dtype '%s' (bf16, fp8_e4m3, fp8_e5m2, int8, int4)\n",
                   name.c_str());
      std::exit(2);
    }
    out.push_back(*found);
  }
  return out;
}

// Median milliseconds of reps event-timed calls of fn (after warmup untimed calls).
template <typename F>
float time_ms(const Stream& stream, int reps, F&& fn, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) die_if(fn(), "warm-up");
  return static_cast<float>(
      bench::median_ms_per_call(stream.get(), reps, 1, [&](int) { return fn(); }));
}

struct Row {
  const char* kv_dtype;
  float vs_bf16;  // median time / BF16's at the same shape (0 when BF16 was not run)
  int32_t block_size;
  Shape shape;
  double kv_bytes;
  float median_us;
  float graph_us;  // per launch replayed from a CUDA graph, as a captured decode step runs it
  float unsplit_us;
  double gbs;
  double max_abs_err;
  std::string split_sweep;        // JSON members "splits": microseconds
  std::string graph_split_sweep;  // the same, replayed from a CUDA graph
};

int run(int argc, char** argv) {
  std::string json_path;
  int reps = 30;
  int only_bs = 0;     // 0 = every block size
  int only_batch = 0;  // 0 = every shape
  bool sweep = true;
  std::vector<KvDType> kv_dtypes = {kKvDTypeNames[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json_path = argv[++i];
    else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--block-size") == 0 && i + 1 < argc)
      only_bs = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      only_batch = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--no-sweep") == 0)
      sweep = false;
    else if (std::strcmp(argv[i], "--kv-dtypes") == 0 && i + 1 < argc)
      kv_dtypes = parse_kv_dtypes(argv[++i]);
    else {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  Stream stream = take(Stream::create(), "stream");
  cudaDeviceProp prop{};
  die_if(cudaGetDeviceProperties(&prop, 0), "cuda");

  // Copy bandwidth: 2 GiB device to device, bytes read + written.
  const size_t copy_bytes = size_t{2} << 30;
  DeviceBuffer copy_src = take(DeviceBuffer::allocate(copy_bytes), "alloc");
  DeviceBuffer copy_dst = take(DeviceBuffer::allocate(copy_bytes), "alloc");
  die_if(random_fill({copy_src.data(), DType::kF32, static_cast<int64_t>(copy_bytes / 4), 3, -1, 1},
                     stream.get()),
         "fill");
  const float copy_ms = time_ms(stream, reps, [&] {
    return cudaMemcpyAsync(copy_dst.data(), copy_src.data(), copy_bytes, cudaMemcpyDeviceToDevice,
                           stream.get()) == cudaSuccess
               ? Status::Ok()
               : Status::Internal("cudaMemcpyAsync");
  });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  copy_src = DeviceBuffer();
  copy_dst = DeviceBuffer();
  std::printf("device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_gbs);

  std::vector<Row> rows;
  std::map<std::tuple<int32_t, int32_t, int32_t>, float> bf16_us;  // (block size, shape) -> us
  std::mt19937_64 rng(1);
  for (int32_t bs : kBlockSizes) {
    if (only_bs != 0 && bs != only_bs) continue;
    for (const Shape& sh : kShapes) {
      if (only_batch != 0 && sh.batch != only_batch) continue;
      for (const KvDType& kd : kv_dtypes) {
        const int32_t blocks_per_seq = (sh.context + bs - 1) / bs;
        const int32_t num_blocks = sh.batch * blocks_per_seq + 1;
        kv::KvStaticScales scales;
        if (kd.fp8_max > 0.0f)
          scales = kv::KvStaticScales{{1.0f / kd.fp8_max}, {1.0f / kd.fp8_max}};
        const kv::KvLayout layout(kv::KvSpec{1, kKvHeads, kHeadDim, kd.dtype}, bs, scales);
        DeviceBuffer pool = take(DeviceBuffer::allocate(layout.pool_bytes(num_blocks)), "pool");
        // INT4's newest-blocks pool: bf16 blocks at the same ids as the int4 ones (so one slot
        // mapping and one block table serve both); the kernel reads each sequence's last block
        // there.
        const bool int4 = kd.dtype == DType::kI4;
        const kv::KvLayout newest_layout(kv::KvSpec{1, kKvHeads, kHeadDim, DType::kBF16}, bs);
        DeviceBuffer newest_pool =
            int4 ? take(DeviceBuffer::allocate(newest_layout.pool_bytes(num_blocks)),
                        "newest-blocks pool")
                 : DeviceBuffer();
        const int64_t q_elems = static_cast<int64_t>(sh.batch) * kQoHeads * kHeadDim;
        DeviceBuffer q = take(DeviceBuffer::allocate(q_elems * 2), "q");
        DeviceBuffer o = take(DeviceBuffer::allocate(q_elems * 2), "o");
        die_if(random_fill({q.data(), DType::kBF16, q_elems, kQSeed, -2, 2}, stream.get()), "fill");
        std::vector<int32_t> ids(num_blocks - 1);
        std::iota(ids.begin(), ids.end(), 1);
        std::shuffle(ids.begin(), ids.end(), rng);
        std::vector<int32_t> indptr(sh.batch + 1);
        for (int32_t s = 0; s <= sh.batch; ++s) indptr[s] = s * blocks_per_seq;
        std::vector<int32_t> last(sh.batch, sh.context - (blocks_per_seq - 1) * bs);
        DeviceBuffer d_indptr = take(DeviceBuffer::allocate(indptr.size() * 4), "a");
        DeviceBuffer d_ids = take(DeviceBuffer::allocate(ids.size() * 4), "a");
        DeviceBuffer d_last = take(DeviceBuffer::allocate(last.size() * 4), "a");
        die_if(
            cudaMemcpy(d_indptr.data(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice),
            "cuda");
        die_if(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice),
               "cuda");
        die_if(cudaMemcpy(d_last.data(), last.data(), last.size() * 4, cudaMemcpyHostToDevice),
               "cuda");
        const std::vector<int32_t> newest_first(static_cast<size_t>(sh.batch), 0);
        DeviceBuffer d_newest_first = take(DeviceBuffer::allocate(newest_first.size() * 4), "a");
        die_if(cudaMemcpy(d_newest_first.data(), newest_first.data(), newest_first.size() * 4,
                          cudaMemcpyHostToDevice),
               "cuda");

        // K/V rows: random_fill bf16 values appended (and quantized) into every sequence's slots.
        {
          const int64_t tokens = static_cast<int64_t>(sh.batch) * sh.context;
          const int64_t row = static_cast<int64_t>(kKvHeads) * kHeadDim;
          std::vector<int64_t> slots(static_cast<size_t>(tokens));
          for (int32_t s = 0; s < sh.batch; ++s) {
            for (int32_t t = 0; t < sh.context; ++t) {
              slots[static_cast<size_t>(s) * sh.context + t] =
                  static_cast<int64_t>(ids[s * blocks_per_seq + t / bs]) * bs + t % bs;
            }
          }
          die_if(cudaMemset(pool.data(), 0, layout.pool_bytes(num_blocks)), "cuda");
          const PagedKvCacheView newest_view = newest_layout.layer_view(newest_pool.data(), 0);
          die_if(
              append_random_rows(layout.layer_view(pool.data(), 0), int4 ? &newest_view : nullptr,
                                 slots, row, kKSeed, kVSeed, stream.get()),
              "append K/V");
        }
        const size_t ws_bytes =
            decode_attention_workspace_bytes(sh.batch, kQoHeads, kHeadDim, kMaxDecodeSplits);
        DeviceBuffer ws = take(DeviceBuffer::allocate(ws_bytes), "ws");
        die_if(cudaMemset(ws.data(), 0, ws_bytes), "cuda");  // the split merge counters

        DecodeAttentionParams p;
        p.q = q.data();
        p.q_seq_stride = kQoHeads * kHeadDim;
        p.o = o.data();
        p.o_seq_stride = kQoHeads * kHeadDim;
        p.layout = PagedKvLayout{d_indptr.as<int32_t>(), d_ids.as<int32_t>(), d_last.as<int32_t>(),
                                 sh.batch, bs};
        p.cache = layout.layer_view(pool.data(), 0);
        if (int4) {  // the newest-blocks group: group 0's table, from logical block 0
          p.newest.cache = newest_layout.layer_view(newest_pool.data(), 0);
          p.newest.layout = p.layout;
          p.newest.layout.first_block = d_newest_first.as<int32_t>();
          p.newest.blocks = 1;
        }
        p.qo_dtype = DType::kBF16;
        p.num_qo_heads = kQoHeads;
        p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
        p.max_kv_len = sh.context;
        p.workspace = ws.data();
        p.workspace_bytes = ws.bytes();
        die_if(decode_attention(p, stream.get()), "decode");
        die_if(stream.synchronize(), "sync");

        // Correctness: sequences 0 and batch-1, KV heads 0 and 7, against a double reference over
        // the pool's values as the host decodes them.
        std::vector<uint16_t> out(static_cast<size_t>(q_elems));
        die_if(cudaMemcpy(out.data(), o.data(), q_elems * 2, cudaMemcpyDeviceToHost), "cuda");
        std::vector<uint16_t> host_pool(static_cast<size_t>(layout.pool_bytes(num_blocks) / 2));
        die_if(cudaMemcpy(host_pool.data(), pool.data(), layout.pool_bytes(num_blocks),
                          cudaMemcpyDeviceToHost),
               "cuda");
        std::vector<uint16_t> host_newest(
            static_cast<size_t>(int4 ? newest_layout.pool_bytes(num_blocks) / 2 : 0));
        if (int4) {
          die_if(cudaMemcpy(host_newest.data(), newest_pool.data(),
                            newest_layout.pool_bytes(num_blocks), cudaMemcpyDeviceToHost),
                 "cuda");
        }
        double max_err = 0.0;
        const PagedKvCacheView view = layout.layer_view(host_pool.data(), 0);
        const PagedKvCacheView newest_view = newest_layout.layer_view(host_newest.data(), 0);
        const int32_t newest_from = (sh.context - 1) / bs;  // R = 1: the query's own block
        std::vector<int32_t> checked_seqs = {0};
        if (sh.batch > 1) checked_seqs.push_back(sh.batch - 1);
        for (int32_t s : checked_seqs) {
          for (int32_t kvh : {0, kKvHeads - 1}) {
            std::vector<float> k(static_cast<size_t>(sh.context) * kHeadDim);
            std::vector<float> v(k.size());
            for (int32_t t = 0; t < sh.context; ++t) {
              const int32_t block = ids[s * blocks_per_seq + t / bs];
              const bool from_newest = int4 && t / bs >= newest_from;
              const PagedKvCacheView& src = from_newest ? newest_view : view;
              cpu::load_kv_rows(src, cpu::KvPart::kK, block, kvh, t % bs, 1,
                                &k[static_cast<size_t>(t) * kHeadDim], false);
              cpu::load_kv_rows(src, cpu::KvPart::kV, block, kvh, t % bs, 1,
                                &v[static_cast<size_t>(t) * kHeadDim], false);
            }
            for (int32_t g = 0; g < kQoHeads / kKvHeads; ++g) {
              const int32_t h = kvh * (kQoHeads / kKvHeads) + g;
              const int64_t q_off = (static_cast<int64_t>(s) * kQoHeads + h) * kHeadDim;
              const std::vector<double> q = query_row(kQSeed, q_off, kHeadDim, kd.dtype);
              std::vector<double> sc(sh.context);
              double m = -INFINITY;
              for (int32_t t = 0; t < sh.context; ++t) {
                double dot = 0;
                for (int32_t e = 0; e < kHeadDim; ++e) {
                  dot += q[static_cast<size_t>(e)] * k[static_cast<size_t>(t) * kHeadDim + e];
                }
                sc[t] = dot * p.sm_scale;
                m = std::max(m, sc[t]);
              }
              double l = 0;
              for (double& x : sc) l += (x = std::exp(x - m));
              for (int32_t e = 0; e < kHeadDim; ++e) {
                double acc = 0;
                for (int32_t t = 0; t < sh.context; ++t)
                  acc += sc[t] * v[static_cast<size_t>(t) * kHeadDim + e];
                max_err = std::max(max_err, std::abs(acc / l - bf16_to_f32(out[q_off + e])));
              }
            }
          }
        }
        if (!(max_err < 1e-2)) {
          std::fprintf(stderr, "%s bs %d %dx%d: max abs error %.3g against the reference\n",
                       kd.name, bs, sh.batch, sh.context, max_err);
          return 1;
        }

        Row r{};
        r.kv_dtype = kd.name;
        r.block_size = bs;
        r.shape = sh;
        r.kv_bytes = static_cast<double>(sh.batch) * sh.context * layout.bytes_per_token();
        r.median_us =
            1e3f * time_ms(stream, reps, [&] { return decode_attention(p, stream.get()); });
        r.graph_us = static_cast<float>(
            time_graph_us(stream.get(), 1, [&](int) { return decode_attention(p, stream.get()); }));
        if (kd.dtype == DType::kBF16) bf16_us[{bs, sh.batch, sh.context}] = r.median_us;
        const auto base = bf16_us.find({bs, sh.batch, sh.context});
        r.vs_bf16 = base == bf16_us.end() ? 0.0f : r.median_us / base->second;
        DecodeAttentionParams unsplit = p;
        unsplit.num_splits = 1;
        // Unsplit small batches leave most of the GPU idle and run long: a few calls suffice.
        r.unsplit_us =
            1e3f * time_ms(
                       stream, 3, [&] { return decode_attention(unsplit, stream.get()); }, 1);
        r.gbs = r.kv_bytes / (r.median_us * 1e-6) / 1e9;
        // How time depends on the number of splits (block size 16 only), for tuning the planner.
        if (sweep && bs == kBlockSizes[0]) {
          // Event-timed launches, then the same replayed from a CUDA graph: a short kernel's
          // event pair times its launch, the graph what a captured decode step pays.
          std::string graph_line;
          std::printf("  splits sweep:");
          for (int32_t n : {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}) {
            if (n > sh.context / 64) break;  // below the planner's 256-token floor too
            DecodeAttentionParams forced = p;
            forced.num_splits = n;
            const auto launch = [&] { return decode_attention(forced, stream.get()); };
            const float us = 1e3f * time_ms(stream, 5, launch, 1);
            const auto graph_us =
                static_cast<float>(time_graph_us(stream.get(), 1, [&](int) { return launch(); }));
            std::printf(" %d:%.1f", n, us);
            char item[32];
            std::snprintf(item, sizeof item, " %d:%.1f", n, graph_us);
            graph_line += item;
            const std::string sep = r.split_sweep.empty() ? "" : ", ";
            r.split_sweep += sep + "\"" + std::to_string(n) + "\": " + std::to_string(us);
            r.graph_split_sweep +=
                sep + "\"" + std::to_string(n) + "\": " + std::to_string(graph_us);
          }
          std::printf(" us\n  graph sweep: %s us\n",
                      graph_line.empty() ? "" : graph_line.c_str() + 1);
        }
        r.max_abs_err = max_err;
        rows.push_back(r);
        std::printf(
            "%-8s bs %3d  %3d x %5d  %9.1f us  %6.0f GB/s  (%.2f of copy)  x%.2f of bf16  unsplit "
            "%9.1f us  graph %7.1f us  err %.2e\n",
            kd.name, bs, sh.batch, sh.context, r.median_us, r.gbs, r.gbs / copy_gbs, r.vs_bf16,
            r.unsplit_us, r.graph_us, max_err);
        std::fflush(stdout);
      }
    }
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f,
                 "{\"device\": \"%s\", \"copy_bandwidth_gbs\": %.1f, \"num_qo_heads\": %d, "
                 "\"num_kv_heads\": %d, \"head_dim\": %d, \"reps\": %d, \"results\": [\n",
                 prop.name, copy_gbs, kQoHeads, kKvHeads, kHeadDim, reps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"kv_dtype\": \"%s\", \"block_size\": %d, \"batch\": %d, \"context\": "
                   "%d, \"kv_bytes\": %.0f, \"median_us\": %.2f, \"vs_bf16\": %.3f, "
                   "\"unsplit_us\": %.2f, \"graph_us\": %.2f, \"gbs\": %.1f, \"max_abs_err\": "
                   "%.3e, \"split_sweep_us\": {%s}, \"graph_split_sweep_us\": {%s}}%s\n",
                   r.kv_dtype, r.block_size, r.shape.batch, r.shape.context, r.kv_bytes,
                   r.median_us, r.vs_bf16, r.unsplit_us, r.graph_us, r.gbs, r.max_abs_err,
                   r.split_sweep.c_str(), r.graph_split_sweep.c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
