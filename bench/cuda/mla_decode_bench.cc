// strata_mla_decode_bench: paged MLA decode attention (mla_decode.h) on the GPU, against the
// device-to-device copy bandwidth measured in the same run.
//
// DeepSeek's absorbed decode: one latent row of 576 bf16 per token (kv_lora_rank 512 +
// rope 64), query heads 16 (V2-Lite) and 128 (V2 / V3), (batch x context) = 1 x 1024, 1 x 32768,
// 16 x 4096, 64 x 4096, 16 x 32768; block size 64 unless --block-size says otherwise; blocks
// handed out in a random order. The latent and Q are random_fill values, so the host knows them
// without a copy back: before timing, two heads (the first and last) of the first and last
// sequence are checked against a double reference. Times are the median of event-timed launches
// and, per launch, replayed from a CUDA graph (what a captured decode step pays; at batch 1 an
// event pair times the launch as much as the kernel). "GB/s" counts the latent bytes read once
// (batch x context x 1152); "vs copy" divides it by the copy's read + write bandwidth; TFLOP/s
// counts both products (2 x heads x (576 + 512) per token): at 128 heads the kernel is bound by
// the tensor cores and shared memory more than by HBM.
//
//   strata_mla_decode_bench [--reps N] [--block-size N] [--heads 16,128] [--json FILE]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"

namespace strata::cuda {
namespace {

using bench::bf16_value;
using bench::die_if;
using bench::take;
using bench::time_graph_us;

constexpr int32_t kD = kMlaLatentDim;
constexpr int32_t kDv = kMlaValueDim;
constexpr uint64_t kLatentSeed = 21;
constexpr uint64_t kQSeed = 22;

struct Shape {
  int32_t batch;
  int32_t context;
};
constexpr Shape kShapes[] = {{1, 1024}, {1, 32768}, {16, 4096}, {64, 4096}, {16, 32768}};

template <typename F>
float time_ms(const Stream& stream, int reps, F&& fn, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) die_if(fn(), "warm-up");
  return static_cast<float>(
      bench::median_ms_per_call(stream.get(), reps, 1, [&](int) { return fn(); }));
}

struct Row {
  int32_t heads;
  Shape shape;
  double latent_bytes;
  float median_us;
  float graph_us;
  double gbs;
  double vs_copy;
  double tflops;
  double max_abs_err;
};

std::vector<int32_t> parse_list(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// Largest |kernel - reference| over heads {0, heads - 1} of sequences {0, batch - 1}.
double check_output(const std::vector<uint16_t>& o, const std::vector<int32_t>& ids,
                    int32_t blocks_per_seq, int32_t bs, int32_t heads, const Shape& sh,
                    float sm_scale) {
  double worst = 0.0;
  const int64_t block_stride = static_cast<int64_t>(bs) * kD;
  std::vector<double> scores(static_cast<size_t>(sh.context));
  std::vector<double> out(kDv);
  for (int32_t s : {0, sh.batch - 1}) {
    for (int32_t h : {0, heads - 1}) {
      const int64_t q_off = (static_cast<int64_t>(s) * heads + h) * kD;
      std::vector<double> q(kD);
      for (int32_t e = 0; e < kD; ++e) q[e] = bf16_value(kQSeed, q_off + e, -2, 2);
      auto row_off = [&](int32_t j) {
        return ids[static_cast<size_t>(s) * blocks_per_seq + j / bs] * block_stride +
               static_cast<int64_t>(j % bs) * kD;
      };
      double m = -INFINITY;
      for (int32_t j = 0; j < sh.context; ++j) {
        const int64_t off = row_off(j);
        double dot = 0.0;
        for (int32_t e = 0; e < kD; ++e) dot += q[e] * bf16_value(kLatentSeed, off + e, -1, 1);
        scores[j] = dot * sm_scale;
        m = std::max(m, scores[j]);
      }
      double sum = 0.0;
      std::fill(out.begin(), out.end(), 0.0);
      for (int32_t j = 0; j < sh.context; ++j) {
        const double w = std::exp(scores[j] - m);
        sum += w;
        const int64_t off = row_off(j);
        for (int32_t e = 0; e < kDv; ++e) out[e] += w * bf16_value(kLatentSeed, off + e, -1, 1);
      }
      for (int32_t e = 0; e < kDv; ++e) {
        const double got = strata::bf16_to_f32(o[(static_cast<size_t>(s) * heads + h) * kDv + e]);
        worst = std::max(worst, std::abs(got - out[e] / sum));
      }
    }
  }
  return worst;
}

Row run_shape(const Stream& stream, int reps, int32_t bs, int32_t heads, const Shape& sh,
              double copy_gbs, std::mt19937_64& rng) {
  const int32_t blocks_per_seq = (sh.context + bs - 1) / bs;
  const int32_t num_blocks = sh.batch * blocks_per_seq + 1;  // block 0: the null block
  const int64_t pool_elems = static_cast<int64_t>(num_blocks) * bs * kD;
  DeviceBuffer pool = take(DeviceBuffer::allocate(static_cast<size_t>(pool_elems) * 2), "alloc");
  die_if(random_fill({pool.data(), DType::kBF16, pool_elems, kLatentSeed, -1, 1}, stream.get()),
         "fill");
  const int64_t q_elems = static_cast<int64_t>(sh.batch) * heads * kD;
  DeviceBuffer q = take(DeviceBuffer::allocate(static_cast<size_t>(q_elems) * 2), "alloc");
  die_if(random_fill({q.data(), DType::kBF16, q_elems, kQSeed, -2, 2}, stream.get()), "fill");
  const size_t o_elems = static_cast<size_t>(sh.batch) * heads * kDv;
  DeviceBuffer o = take(DeviceBuffer::allocate(o_elems * 2), "alloc");

  std::vector<int32_t> ids(static_cast<size_t>(num_blocks) - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> indptr(static_cast<size_t>(sh.batch) + 1);
  for (int32_t s = 0; s <= sh.batch; ++s) indptr[s] = s * blocks_per_seq;
  const std::vector<int32_t> last(static_cast<size_t>(sh.batch),
                                  sh.context - (blocks_per_seq - 1) * bs);
  DeviceBuffer d_indptr = take(DeviceBuffer::allocate(indptr.size() * 4), "alloc");
  DeviceBuffer d_ids = take(DeviceBuffer::allocate(ids.size() * 4), "alloc");
  DeviceBuffer d_last = take(DeviceBuffer::allocate(last.size() * 4), "alloc");
  die_if(cudaMemcpy(d_indptr.data(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice),
         "cuda");
  die_if(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "cuda");
  die_if(cudaMemcpy(d_last.data(), last.data(), last.size() * 4, cudaMemcpyHostToDevice), "cuda");
  const size_t ws_bytes = mla_decode_workspace_bytes(sh.batch, heads, kMaxDecodeSplits);
  DeviceBuffer ws = take(DeviceBuffer::allocate(ws_bytes), "alloc");
  die_if(cudaMemset(ws.data(), 0, ws_bytes), "cuda");

  MlaDecodeParams p;
  p.q = q.data();
  p.q_seq_stride = static_cast<int64_t>(heads) * kD;
  p.o = o.data();
  p.o_seq_stride = static_cast<int64_t>(heads) * kDv;
  p.layout = PagedKvLayout{static_cast<const int32_t*>(d_indptr.data()),
                           static_cast<const int32_t*>(d_ids.data()),
                           static_cast<const int32_t*>(d_last.data()), sh.batch, bs};
  p.cache.k_data = pool.data();
  p.cache.v_data = pool.data();
  p.cache.block_stride = static_cast<int64_t>(bs) * kD;
  p.cache.head_stride = static_cast<int64_t>(bs) * kD;
  p.cache.token_stride = kD;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = kD;
  p.cache.block_size = bs;
  p.cache.dtype = DType::kBF16;
  p.num_heads = heads;
  p.sm_scale = 1.0f / std::sqrt(192.0f);  // DeepSeek's qk_nope 128 + rope 64
  p.max_kv_len = sh.context;
  p.workspace = ws.data();
  p.workspace_bytes = ws_bytes;

  die_if(mla_decode(p, stream.get()), "mla_decode");
  die_if(stream.synchronize(), "sync");
  std::vector<uint16_t> host_o(o_elems);
  die_if(cudaMemcpy(host_o.data(), o.data(), o_elems * 2, cudaMemcpyDeviceToHost), "cuda");
  Row r{};
  r.heads = heads;
  r.shape = sh;
  r.max_abs_err = check_output(host_o, ids, blocks_per_seq, bs, heads, sh, p.sm_scale);
  if (!(r.max_abs_err < 2e-2)) {
    std::fprintf(stderr, "heads %d batch %d context %d: max |err| %.3g against the reference\n",
                 heads, sh.batch, sh.context, r.max_abs_err);
    std::exit(1);
  }
  r.latent_bytes = static_cast<double>(sh.batch) * sh.context * kD * 2;
  r.median_us = 1e3f * time_ms(stream, reps, [&] { return mla_decode(p, stream.get()); });
  r.graph_us = static_cast<float>(
      time_graph_us(stream.get(), 1, [&](int) { return mla_decode(p, stream.get()); }));
  const float best_us = std::min(r.median_us, r.graph_us);
  r.gbs = r.latent_bytes / (best_us * 1e-6) / 1e9;
  r.vs_copy = r.gbs / copy_gbs;
  r.tflops = 2.0 * sh.batch * sh.context * heads * (kD + kDv) / (best_us * 1e-6) / 1e12;
  return r;
}

int run(int argc, char** argv) {
  int reps = 30;
  int32_t bs = 64;
  std::vector<int32_t> head_counts = {16, 128};
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--block-size") == 0 && i + 1 < argc) {
      bs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--heads") == 0 && i + 1 < argc) {
      head_counts = parse_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  Stream stream = take(Stream::create(), "stream");
  cudaDeviceProp prop{};
  die_if(cudaGetDeviceProperties(&prop, 0), "cuda");

  // Copy bandwidth: 2 GiB device to device, bytes read + written.
  const size_t copy_bytes = size_t{2} << 30;
  double copy_gbs = 0.0;
  {
    DeviceBuffer src = take(DeviceBuffer::allocate(copy_bytes), "alloc");
    DeviceBuffer dst = take(DeviceBuffer::allocate(copy_bytes), "alloc");
    die_if(random_fill({src.data(), DType::kF32, static_cast<int64_t>(copy_bytes / 4), 3, -1, 1},
                       stream.get()),
           "fill");
    const float copy_ms = time_ms(stream, reps, [&] {
      return cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice,
                             stream.get()) == cudaSuccess
                 ? Status::Ok()
                 : Status::Internal("cudaMemcpyAsync");
    });
    copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  }
  std::printf("device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_gbs);
  std::printf("MLA decode, latent 576 bf16, block size %d\n", bs);
  std::printf("%6s %5s %8s %6s %10s %10s %9s %8s %9s %9s\n", "heads", "tile", "batch", "ctx",
              "median_us", "graph_us", "GB/s", "vs_copy", "TFLOP/s", "max_err");
  std::vector<Row> rows;
  std::mt19937_64 rng(1);
  for (int32_t heads : head_counts) {
    for (const Shape& sh : kShapes) {
      const Row r = run_shape(stream, reps, bs, heads, sh, copy_gbs, rng);
      std::printf("%6d %5d %8d %6d %10.1f %10.1f %9.0f %8.2f %9.1f %9.2g\n", heads,
                  mla_decode_head_tile(heads), sh.batch, sh.context, r.median_us, r.graph_us, r.gbs,
                  r.vs_copy, r.tflops, r.max_abs_err);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"copy_gbs\": %.1f, \"block_size\": %d, \"rows\": [\n",
                 prop.name, copy_gbs, bs);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"heads\": %d, \"batch\": %d, \"context\": %d, \"median_us\": %.2f, "
                   "\"graph_us\": %.2f, \"gbs\": %.1f, \"vs_copy\": %.3f, \"tflops\": %.2f, "
                   "\"max_abs_err\": %.3g}%s\n",
                   r.heads, r.shape.batch, r.shape.context, r.median_us, r.graph_us, r.gbs,
                   r.vs_copy, r.tflops, r.max_abs_err, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
