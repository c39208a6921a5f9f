// strata_prefill_bench: paged prefill attention TFLOP/s on the GPU (tools/gpu/bench_decode_torch.py
// measures SDPA on the same shapes and the bf16 matrix rate in the same call;
// tools/gpu/gpu_check.sh runs both).
//
// BF16 KV, 32 query / 8 KV heads, head dim 128, block size 16, one sequence: a prompt of 4096 or
// 16384 tokens, a 4096-token chunk on a cached prefix of 4096 or 12288 tokens, or the second
// 16384-token chunk of a 32768-token prompt (the engine's time-to-first-token run). Causal FLOPs
// (4 * heads * head_dim * attended pairs) over the median of event-timed launches; a few rows are
// checked against a double-precision reference first. --kv-dtypes adds quantized caches read
// with BF16 queries (fp8_e4m3, int8, int4), their K/V appended by kv_append from bf16 rows and
// checked against the host's decoding of the pool (int4: each row's own block from a bf16
// newest-blocks pool, R = 1), each timed as a ratio to BF16's at the same case. --variant runs
// the warp-specialized kernel's schedules (PrefillWsVariant: base, pingpong, pingpong3,
// independent3, pingpong-serial; all of them) one after another on each case, each checked
// against the reference and against the first one's output bit for bit, one row each (the
// default: prefill_attention's schedule alone).
//
//   strata_prefill_bench [--reps N] [--kv-dtypes bf16,fp8_e4m3,fp8_e5m2,int8,int4]
//                        [--variant base|pingpong|pingpong3|independent3|pingpong-serial|all]
//   (prints one JSON line prefixed "json: " for the BF16 cases)

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
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/prefill_attention_impl.h"
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
using detail::PrefillWsVariant;

constexpr int32_t kQoHeads = 32;
constexpr int32_t kKvHeads = 8;
constexpr int32_t kHeadDim = 128;
constexpr int32_t kBlockSize = 16;
constexpr uint64_t kPoolSeed = 21;
constexpr uint64_t kQSeed = 22;

struct Case {
  int32_t prefix;
  int32_t chunk;
};
constexpr Case kCases[] = {{0, 4096}, {0, 16384}, {4096, 4096}, {12288, 4096}, {16384, 16384}};

// Median milliseconds of reps event-timed launches, after two untimed ones.
template <typename F>
double median_ms(const Stream& stream, int reps, F&& launch) {
  for (int i = 0; i < 2; ++i) die_if(launch(), "warm-up");
  return bench::median_ms_per_call(stream.get(), reps, 1, [&](int) { return launch(); });
}

// One case over a quantized cache: K/V rows appended (and quantized) by kv_append, the output
// checked against a double reference over the host's decoding of the pool, then timed. Returns
// the median milliseconds.
double run_quantized(const Case& cs, DType dtype, PrefillWsVariant variant,
                     const PrefillAttentionParams& bf16_params, const std::vector<int32_t>& ids,
                     DeviceBuffer& d_ids, const Stream& stream, int reps) {
  const int32_t kv_len = cs.prefix + cs.chunk;
  const int32_t blocks = (kv_len + kBlockSize - 1) / kBlockSize;
  kv::KvStaticScales scales;
  if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
    scales = {{1.0f / 448.0f}, {1.0f / 448.0f}};
  }
  const kv::KvLayout layout(kv::KvSpec{1, kKvHeads, kHeadDim, dtype}, kBlockSize, scales);
  // INT4's newest-blocks pool: bf16 blocks at the same ids (one slot mapping, one table for
  // both).
  const bool int4 = dtype == DType::kI4;
  const kv::KvLayout newest_layout(kv::KvSpec{1, kKvHeads, kHeadDim, DType::kBF16}, kBlockSize);
  DeviceBuffer pool = take(DeviceBuffer::allocate(layout.pool_bytes(blocks + 1)), "pool");
  DeviceBuffer newest_pool =
      take(DeviceBuffer::allocate(newest_layout.pool_bytes(blocks + 1)), "newest");
  die_if(cudaMemset(pool.data(), 0, layout.pool_bytes(blocks + 1)), "memset");
  const int64_t row = int64_t{kKvHeads} * kHeadDim;
  std::vector<int64_t> slots(static_cast<size_t>(kv_len));
  for (int32_t t = 0; t < kv_len; ++t) {
    slots[static_cast<size_t>(t)] = int64_t{ids[static_cast<size_t>(t / kBlockSize)]} * kBlockSize +
                                    t % kBlockSize;
  }
  const PagedKvCacheView newest_device = newest_layout.layer_view(newest_pool.data(), 0);
  die_if(append_random_rows(layout.layer_view(pool.data(), 0), int4 ? &newest_device : nullptr,
                            slots, row, kPoolSeed, kPoolSeed + 1, stream.get()),
         "append K/V");

  const std::vector<int32_t> newest_first = {0};
  DeviceBuffer d_newest_first = take(DeviceBuffer::allocate(4), "a");
  die_if(cudaMemcpy(d_newest_first.data(), newest_first.data(), 4, cudaMemcpyHostToDevice), "copy");
  const int64_t q_elems = static_cast<int64_t>(cs.chunk) * kQoHeads * kHeadDim;
  DeviceBuffer lse = take(DeviceBuffer::allocate(
                              prefill_int4_workspace_floats(cs.chunk, kQoHeads) * 4), "lse");
  PrefillAttentionParams p = bf16_params;
  p.cache = layout.layer_view(pool.data(), 0);
  if (int4) {  // the newest-blocks group: the same table, from logical block 0
    p.newest.cache = newest_device;
    p.newest.layout = p.layout;
    p.newest.layout.kv_indices = d_ids.as<int32_t>();
    p.newest.layout.first_block = d_newest_first.as<int32_t>();
    p.newest.blocks = 1;
    p.lse_workspace = lse.as<float>();
  }
  die_if(detail::prefill_attention_variant(p, variant, stream.get()), "prefill");
  die_if(stream.synchronize(), "sync");

  // The reference over the host's decoding of both pools.
  std::vector<uint16_t> out(static_cast<size_t>(q_elems));
  die_if(cudaMemcpy(out.data(), p.o, q_elems * 2, cudaMemcpyDeviceToHost), "copy");
  std::vector<uint16_t> host(static_cast<size_t>(layout.pool_bytes(blocks + 1) / 2));
  std::vector<uint16_t> host_newest(static_cast<size_t>(newest_layout.pool_bytes(blocks + 1) / 2));
  die_if(
      cudaMemcpy(host.data(), pool.data(), layout.pool_bytes(blocks + 1), cudaMemcpyDeviceToHost),
      "copy");
  if (int4) {
    die_if(cudaMemcpy(host_newest.data(), newest_pool.data(), newest_layout.pool_bytes(blocks + 1),
                      cudaMemcpyDeviceToHost),
           "copy");
  }
  const PagedKvCacheView view = layout.layer_view(host.data(), 0);
  const PagedKvCacheView newest_view = newest_layout.layer_view(host_newest.data(), 0);
  double max_err = 0.0;
  std::vector<float> k(static_cast<size_t>(kHeadDim)), v(static_cast<size_t>(kHeadDim));
  for (int32_t r : {0, cs.chunk / 2 + 7, cs.chunk - 1}) {
    for (int32_t h : {0, kQoHeads - 1}) {
      const int32_t kvh = h / (kQoHeads / kKvHeads);
      const int32_t pos = cs.prefix + r;
      std::vector<double> sc(static_cast<size_t>(pos) + 1);
      std::vector<double> acc(static_cast<size_t>(kHeadDim), 0.0);
      std::vector<std::vector<float>> vs(static_cast<size_t>(pos) + 1);
      double m = -INFINITY;
      const int64_t q_off = (static_cast<int64_t>(r) * kQoHeads + h) * kHeadDim;
      const std::vector<double> q = query_row(kQSeed, q_off, kHeadDim, dtype);
      for (int32_t t = 0; t <= pos; ++t) {
        const bool from_newest = int4 && t / kBlockSize > pos / kBlockSize - 1;
        const PagedKvCacheView& src = from_newest ? newest_view : view;
        const int32_t block = ids[static_cast<size_t>(t / kBlockSize)];
        cpu::load_kv_rows(src, cpu::KvPart::kK, block, kvh, t % kBlockSize, 1, k.data(), false);
        cpu::load_kv_rows(src, cpu::KvPart::kV, block, kvh, t % kBlockSize, 1, v.data(), false);
        vs[static_cast<size_t>(t)] = v;
        double dot = 0;
        for (int32_t e = 0; e < kHeadDim; ++e) {
          dot += q[static_cast<size_t>(e)] * k[static_cast<size_t>(e)];
        }
        sc[static_cast<size_t>(t)] = dot * p.sm_scale;
        m = std::max(m, sc[static_cast<size_t>(t)]);
      }
      double l = 0;
      for (double& x : sc) l += (x = std::exp(x - m));
      for (int32_t t = 0; t <= pos; ++t) {
        for (int32_t e = 0; e < kHeadDim; ++e) {
          acc[static_cast<size_t>(e)] += sc[static_cast<size_t>(t)] * vs[static_cast<size_t>(t)][static_cast<size_t>(e)];
        }
      }
      for (int32_t e = 0; e < kHeadDim; ++e) {
        max_err = std::max(max_err, std::abs(acc[static_cast<size_t>(e)] / l - bf16_to_f32(out[q_off + e])));
      }
    }
  }
  if (!(max_err < 2e-2)) {
    std::fprintf(stderr, "%s %s prefix %d chunk %d: max abs error %.3g\n", dtype_name(dtype).data(),
                 detail::prefill_ws_variant_name(variant), cs.prefix, cs.chunk, max_err);
    std::exit(1);
  }
  return median_ms(stream, reps,
                   [&] { return detail::prefill_attention_variant(p, variant, stream.get()); });
}

int run(int argc, char** argv) {
  int reps = 10;
  std::vector<std::pair<std::string, DType>> quantized;
  std::vector<PrefillWsVariant> variants = {detail::kDefaultPrefillWsVariant};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
      const std::string name = argv[++i];
      variants.clear();
      for (PrefillWsVariant v : detail::kPrefillWsVariants) {
        if (name == "all" || name == detail::prefill_ws_variant_name(v)) variants.push_back(v);
      }
      if (variants.empty()) {
        std::fprintf(stderr,
                     "--variant: unknown schedule '%s' (base, pingpong, pingpong3, independent3, "
                     "pingpong-serial, all)\n",
                     name.c_str());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--kv-dtypes") == 0 && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        at = comma + 1;
        if (name == "bf16") continue;
        const DType d = name == "fp8_e4m3"   ? DType::kF8E4M3
                        : name == "fp8_e5m2" ? DType::kF8E5M2
                        : name == "int8"     ? DType::kI8
                        : name == "int4"     ? DType::kI4
                                             : DType::kF32;
        if (d == DType::kF32) {
          std::fprintf(stderr,
                       "--kv-dtypes: unknown dtype '%s' (bf16, fp8_e4m3, fp8_e5m2, int8, int4)\n",
                       name.c_str());
          return 2;
        }
        quantized.emplace_back(name, d);
      }
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  Stream stream = take(Stream::create(), "stream");
  std::string json = "{\"cases\": [";
  std::mt19937_64 rng(3);
  for (const Case& cs : kCases) {
    const int32_t kv_len = cs.prefix + cs.chunk;
    const int32_t blocks = (kv_len + kBlockSize - 1) / kBlockSize;
    const kv::KvLayout layout(kv::KvSpec{1, kKvHeads, kHeadDim, DType::kBF16}, kBlockSize);
    DeviceBuffer pool = take(DeviceBuffer::allocate(layout.pool_bytes(blocks + 1)), "pool");
    die_if(random_fill(
               {pool.data(), DType::kBF16, layout.pool_bytes(blocks + 1) / 2, kPoolSeed, -1, 1},
               stream.get()),
           "fill");
    const int64_t q_elems = static_cast<int64_t>(cs.chunk) * kQoHeads * kHeadDim;
    DeviceBuffer q = take(DeviceBuffer::allocate(q_elems * 2), "q");
    DeviceBuffer o = take(DeviceBuffer::allocate(q_elems * 2), "o");
    die_if(random_fill({q.data(), DType::kBF16, q_elems, kQSeed, -2, 2}, stream.get()), "fill");
    std::vector<int32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::vector<int32_t> kv_indptr = {0, blocks};
    const std::vector<int32_t> last = {kv_len - (blocks - 1) * kBlockSize};
    const std::vector<int32_t> qo_indptr = {0, cs.chunk};
    DeviceBuffer d_ids = take(DeviceBuffer::allocate(ids.size() * 4), "a");
    DeviceBuffer d_kv = take(DeviceBuffer::allocate(8), "a");
    DeviceBuffer d_last = take(DeviceBuffer::allocate(4), "a");
    DeviceBuffer d_qo = take(DeviceBuffer::allocate(8), "a");
    die_if(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "copy");
    die_if(cudaMemcpy(d_kv.data(), kv_indptr.data(), 8, cudaMemcpyHostToDevice), "copy");
    die_if(cudaMemcpy(d_last.data(), last.data(), 4, cudaMemcpyHostToDevice), "copy");
    die_if(cudaMemcpy(d_qo.data(), qo_indptr.data(), 8, cudaMemcpyHostToDevice), "copy");

    PrefillAttentionParams p;
    p.q = q.data();
    p.q_token_stride = kQoHeads * kHeadDim;
    p.o = o.data();
    p.o_token_stride = kQoHeads * kHeadDim;
    p.qo_indptr = d_qo.as<int32_t>();
    p.layout =
        PagedKvLayout{d_kv.as<int32_t>(), d_ids.as<int32_t>(), d_last.as<int32_t>(), 1, kBlockSize};
    p.cache = layout.layer_view(pool.data(), 0);
    p.num_qo_heads = kQoHeads;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    p.max_q_len = cs.chunk;
    // The reference for rows 0, chunk / 2 + 7 and chunk - 1 of the first and last heads.
    const PagedKvCacheView view = layout.layer_view(nullptr, 0);
    std::vector<std::pair<int64_t, double>> want;  // (element of o, value)
    for (int32_t row : {0, cs.chunk / 2 + 7, cs.chunk - 1}) {
      for (int32_t h : {0, kQoHeads - 1}) {
        const int32_t kvh = h / (kQoHeads / kKvHeads);
        const int32_t pos = cs.prefix + row;
        std::vector<double> sc(pos + 1);
        double m = -INFINITY;
        const int64_t q_off = (static_cast<int64_t>(row) * kQoHeads + h) * kHeadDim;
        for (int32_t t = 0; t <= pos; ++t) {
          const int64_t k_off = view.offset(ids[t / kBlockSize], kvh, t % kBlockSize);
          double dot = 0;
          for (int32_t e = 0; e < kHeadDim; ++e) {
            dot += static_cast<double>(bf16_value(kQSeed, q_off + e, -2, 2)) *
                   bf16_value(kPoolSeed, k_off + e, -1, 1);
          }
          sc[t] = dot * p.sm_scale;
          m = std::max(m, sc[t]);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        for (int32_t e = 0; e < kHeadDim; ++e) {
          double acc = 0;
          for (int32_t t = 0; t <= pos; ++t) {
            const int64_t v_off =
                view.offset(ids[t / kBlockSize], kvh, t % kBlockSize) + layout.kv_area_bytes() / 2;
            acc += sc[t] * bf16_value(kPoolSeed, v_off + e, -1, 1);
          }
          want.emplace_back(q_off + e, acc / l);
        }
      }
    }
    // Attended (query, key) pairs: row i sees prefix + i + 1 keys.
    const double pairs =
        static_cast<double>(cs.chunk) * cs.prefix + 0.5 * cs.chunk * (cs.chunk + 1.0);
    const double flops = 4.0 * kQoHeads * kHeadDim * pairs;
    std::vector<uint16_t> first;  // the first schedule's output
    for (PrefillWsVariant variant : variants) {
      const char* vname = detail::prefill_ws_variant_name(variant);
      die_if(cudaMemset(o.data(), 0xff, q_elems * 2), "memset");
      die_if(detail::prefill_attention_variant(p, variant, stream.get()), "prefill");
      die_if(stream.synchronize(), "sync");
      std::vector<uint16_t> out(static_cast<size_t>(q_elems));
      die_if(cudaMemcpy(out.data(), o.data(), q_elems * 2, cudaMemcpyDeviceToHost), "copy");
      double max_err = 0.0;
      for (const auto& [at, value] : want) {
        max_err = std::max(max_err, std::abs(value - bf16_to_f32(out[static_cast<size_t>(at)])));
      }
      if (!(max_err < 2e-2)) {
        std::fprintf(stderr, "%s prefix %d chunk %d: max abs error %.3g\n", vname, cs.prefix,
                     cs.chunk, max_err);
        return 1;
      }
      if (first.empty()) {
        first = std::move(out);
      } else if (out != first) {
        std::fprintf(stderr, "%s prefix %d chunk %d: output differs from %s's\n", vname, cs.prefix,
                     cs.chunk, detail::prefill_ws_variant_name(variants[0]));
        return 1;
      }
      const double med = median_ms(stream, reps, [&] {
        return detail::prefill_attention_variant(p, variant, stream.get());
      });
      const double tflops = flops / (med * 1e-3) / 1e12;
      const std::string tag = variants.size() > 1 ? std::string(" ") + vname : "";
      std::printf("prefill prefix %5d chunk %5d%s: %9.1f us  %6.1f TFLOP/s  err %.2e\n", cs.prefix,
                  cs.chunk, tag.c_str(), med * 1e3, tflops, max_err);
      for (const auto& [name, dtype] : quantized) {
        const double qms = run_quantized(cs, dtype, variant, p, ids, d_ids, stream, reps);
        std::printf("  %-8s %9.1f us  %6.1f TFLOP/s  x%.2f of bf16\n", name.c_str(), qms * 1e3,
                    flops / (qms * 1e-3) / 1e12, qms / med);
      }
      std::fflush(stdout);
      json += std::string(json.back() == '[' ? "" : ", ") +
              "{\"prefix\": " + std::to_string(cs.prefix) +
              ", \"chunk\": " + std::to_string(cs.chunk) + ", \"variant\": \"" + vname +
              "\", \"median_us\": " + std::to_string(med * 1e3) +
              ", \"tflops\": " + std::to_string(tflops) +
              ", \"max_abs_err\": " + std::to_string(max_err) + "}";
    }
  }
  std::printf("json: %s]}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
