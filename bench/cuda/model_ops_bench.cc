// strata_model_ops_bench: the GPU engine's non-attention ops and GEMMs at Llama-3.1-8B shapes
// (hidden 4096, intermediate 14336, 32 q / 8 KV heads, head dim 128, vocab 128256) for 1, 2, 4,
// 8, 256 and 4096 tokens (up to 8 also with the projections forced onto cuBLASLt and onto the
// GEMV kernel, beside the default choice; up to 2 also with FP8 weights, at each of the FP8 GEMV's
// block shapes): microseconds per call, GB/s against the device-to-device copy bandwidth
// measured in the same run, and TFLOP/s (and weight GB/s) for the projections.
//
// The MLP as the runner chains it, gate_up -> silu_and_mul -> down (+= residual), against
// gate_up with the SiLU-and-mul epilogue -> down (gemm.h: no silu_and_mul launch), wherever Gemm
// runs gate_up on the GEMV (up to 2 tokens; 4 and 8 on the GEMV-only Gemm), bf16 and (up to 2
// tokens) FP8 weights; and one decoder layer's total both ways.
//
// Each op is timed as a run of back-to-back launches between two events (median of 5 runs), so
// launch overhead is included as it is in a real step. Inputs rotate over enough copies that
// consecutive calls do not find their bytes in L2 (at least 256 MiB in all, at most 64 copies);
// rows marked "L2" still fit it and measure latency rather than bandwidth.
//
//   strata_model_ops_bench [--tokens N]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"

namespace strata::cuda {
namespace {

using bench::die_if;
using bench::take;
using bench::time_graph_us;

constexpr int64_t kHidden = 4096;
constexpr int64_t kInter = 14336;
constexpr int32_t kQHeads = 32;
constexpr int32_t kKvHeads = 8;
constexpr int32_t kHeadDim = 128;
constexpr int64_t kVocab = 128256;
constexpr int64_t kQkvWidth = (kQHeads + 2 * kKvHeads) * kHeadDim;
constexpr int64_t kRotateBytes = int64_t{256} << 20;
constexpr int kMaxCopies = 64;

int copies_for(int64_t bytes_per_call) {
  return static_cast<int>(
      std::clamp<int64_t>((kRotateBytes + bytes_per_call - 1) / bytes_per_call, 1, kMaxCopies));
}

// A device buffer of elems random values of dtype in [lo, hi).
DeviceBuffer filled(int64_t elems, DType dtype, uint64_t seed, float lo, float hi,
                    cudaStream_t stream) {
  DeviceBuffer b = take(DeviceBuffer::allocate(elems * dtype_size(dtype)), "alloc");
  die_if(random_fill({b.data(), dtype, elems, seed, lo, hi}, stream), "fill");
  return b;
}

DeviceBuffer upload_i32(const std::vector<int32_t>& v) {
  DeviceBuffer b = take(DeviceBuffer::allocate(v.size() * 4), "alloc");
  die_if(cudaMemcpy(b.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  return b;
}

// A projection d[m, n] (+)= a[m, k] * w[n, k]^T with packed rows.
GemmParams projection(const void* a, const void* w, void* d, int64_t m, int64_t n, int64_t k,
                      DType d_dtype, bool accumulate) {
  GemmParams p;
  p.a = a;
  p.lda = k;
  p.w = w;
  p.ldw = k;
  p.d = d;
  p.ldd = n;
  p.d_dtype = d_dtype;
  p.accumulate = accumulate;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// Microseconds per call of launch(i) (i cycles over the copies), launched back to back.
template <typename F>
double time_us(const Stream& stream, int copies, F&& launch) {
  for (int i = 0; i < copies; ++i) die_if(launch(i), "warm-up");
  die_if(stream.synchronize(), "sync");
  auto cycled = [&](int i) { return launch(i % copies); };
  const double first_us = 1e3 * bench::median_ms_per_call(stream.get(), 1, 1, cycled);
  const int calls = std::max(copies, static_cast<int>(std::clamp(3000.0 / first_us, 2.0, 200.0)));
  return 1e3 * bench::median_ms_per_call(stream.get(), 5, calls, cycled);
}

// Times launch both ways: streamed, and (for up to kGraphMaxTokens tokens) from a CUDA graph.
constexpr int64_t kGraphMaxTokens = 256;
struct Times {
  double us;
  double graph_us;  // 0 when not measured
};
template <typename F>
Times time_both(const Stream& stream, int64_t tokens, int copies, F&& launch) {
  Times t{time_us(stream, copies, launch), 0.0};
  if (tokens <= kGraphMaxTokens) t.graph_us = time_graph_us(stream.get(), copies, launch);
  return t;
}

struct Bench {
  Stream stream = take(Stream::create(), "stream");
  double copy_gbs = 0;

  void report(const char* op, int64_t tokens, Times t, double bytes, int copies) const {
    const double gbs = bytes / (t.us * 1e-6) / 1e9;
    const bool l2 = bytes * copies < 100e6;
    std::printf("%-26s tokens %5lld  %9.2f us  %8.1f GB/s  %5.2f of copy", op,
                static_cast<long long>(tokens), t.us, gbs, gbs / copy_gbs);
    if (t.graph_us > 0) std::printf("  | graph %7.2f us", t.graph_us);
    std::printf("%s\n", l2 ? "  (L2)" : "");
  }

  void measure_copy() {
    const size_t bytes = size_t{2} << 30;
    DeviceBuffer src = filled(static_cast<int64_t>(bytes / 4), DType::kF32, 1, -1, 1, stream.get());
    DeviceBuffer dst = take(DeviceBuffer::allocate(bytes), "alloc");
    const double us = time_us(stream, 1, [&](int) {
      return cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice,
                             stream.get()) == cudaSuccess
                 ? Status::Ok()
                 : Status::Internal("cudaMemcpyAsync");
    });
    copy_gbs = 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
  }

  // The memory-bound ops; returns the microseconds of one decoder layer's share of them.
  Times ops(int64_t t) {
    const cudaStream_t s = stream.get();
    std::mt19937 rng(static_cast<uint32_t>(t));
    Times layer{0.0, 0.0};
    auto add = [&layer](Times x, double times) {
      layer.us += times * x.us;
      layer.graph_us += times * x.graph_us;
    };
    {  // embedding
      DeviceBuffer table = filled(kVocab * kHidden, DType::kBF16, 2, -1, 1, s);
      std::vector<int32_t> ids(static_cast<size_t>(t));
      for (auto& id : ids) id = static_cast<int32_t>(rng() % kVocab);
      DeviceBuffer d_ids = upload_i32(ids);
      const double bytes = static_cast<double>(t) * kHidden * (2 + 4);
      const int copies = copies_for(static_cast<int64_t>(bytes));
      std::vector<DeviceBuffer> outs;
      for (int i = 0; i < copies; ++i)
        outs.push_back(take(DeviceBuffer::allocate(t * kHidden * 4), "alloc"));
      const Times us = time_both(stream, t, copies, [&](int i) {
        return embedding({d_ids.as<int32_t>(), table.data(), DType::kBF16, outs[i].as<float>(),
                          static_cast<int32_t>(t), kHidden},
                         s);
      });
      report("embedding", t, us, bytes, copies);
    }
    {  // rms_norm, with and without the fused residual add
      DeviceBuffer weight = filled(kHidden, DType::kBF16, 3, 0.5f, 1.5f, s);
      for (bool delta : {false, true}) {
        const double bytes = static_cast<double>(t) * kHidden * (delta ? 14 : 6);
        const int copies = copies_for(static_cast<int64_t>(bytes));
        std::vector<DeviceBuffer> res, del, out;
        for (int i = 0; i < copies; ++i) {
          res.push_back(filled(t * kHidden, DType::kF32, 4 + i, -2, 2, s));
          if (delta) del.push_back(filled(t * kHidden, DType::kF32, 100 + i, -1e-3f, 1e-3f, s));
          out.push_back(take(DeviceBuffer::allocate(t * kHidden * 2), "alloc"));
        }
        const Times us = time_both(stream, t, copies, [&](int i) {
          RmsNormParams p;
          p.residual = res[i].as<float>();
          p.delta = delta ? del[i].as<float>() : nullptr;
          p.weight = weight.data();
          p.out = out[i].data();
          p.num_rows = static_cast<int32_t>(t);
          p.hidden = kHidden;
          return rms_norm(p, s);
        });
        report(delta ? "rms_norm + residual add" : "rms_norm", t, us, bytes, copies);
        if (delta) add(us, 2);
      }
    }
    {  // qk_norm_rope, without and with the per-head norm
      std::vector<float> inv_freq(kHeadDim / 2);
      for (int i = 0; i < kHeadDim / 2; ++i) {
        inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / kHeadDim));
      }
      DeviceBuffer d_inv = take(DeviceBuffer::allocate(inv_freq.size() * 4), "alloc");
      die_if(cudaMemcpy(d_inv.data(), inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice),
             "upload");
      std::vector<int32_t> pos(static_cast<size_t>(t));
      for (auto& x : pos) x = static_cast<int32_t>(rng() % 8192);
      DeviceBuffer d_pos = upload_i32(pos);
      DeviceBuffer norm_w = filled(kHeadDim, DType::kBF16, 5, 0.5f, 1.5f, s);
      const double bytes = static_cast<double>(t) * (kQHeads + kKvHeads) * kHeadDim * 2 * 2;
      const int copies = copies_for(static_cast<int64_t>(bytes));
      std::vector<DeviceBuffer> qkv;
      for (int i = 0; i < copies; ++i)
        qkv.push_back(filled(t * kQkvWidth, DType::kBF16, 6 + i, -1, 1, s));
      for (bool norm : {false, true}) {
        const Times us = time_both(stream, t, copies, [&](int i) {
          QkNormRopeParams p;
          p.qkv = qkv[i].data();
          p.token_stride = kQkvWidth;
          p.positions = d_pos.as<int32_t>();
          p.inv_freq = d_inv.as<float>();
          p.q_norm = norm ? norm_w.data() : nullptr;
          p.k_norm = norm ? norm_w.data() : nullptr;
          p.num_tokens = static_cast<int32_t>(t);
          p.num_q_heads = kQHeads;
          p.num_kv_heads = kKvHeads;
          p.head_dim = kHeadDim;
          return qk_norm_rope(p, s);
        });
        report(norm ? "qk_norm_rope (qk-norm)" : "qk_norm_rope", t, us, bytes, copies);
        if (!norm) add(us, 1);
      }
    }
    {  // silu_and_mul
      const double bytes = static_cast<double>(t) * kInter * (4 + 2);
      const int copies = copies_for(static_cast<int64_t>(bytes));
      std::vector<DeviceBuffer> in, out;
      for (int i = 0; i < copies; ++i) {
        in.push_back(filled(t * 2 * kInter, DType::kBF16, 7 + i, -4, 4, s));
        out.push_back(take(DeviceBuffer::allocate(t * kInter * 2), "alloc"));
      }
      const Times us = time_both(stream, t, copies, [&](int i) {
        return silu_and_mul(
            {in[i].data(), out[i].data(), static_cast<int32_t>(t), static_cast<int32_t>(kInter)},
            s);
      });
      report("silu_and_mul", t, us, bytes, copies);
      add(us, 1);
    }
    return layer;
  }

  // The layer's projections at m = t; returns their microseconds for one layer.
  Times gemms(Gemm& gemm, int64_t m, const char* path = "") {
    struct Proj {
      const char* name;
      int64_t n, k;
      DType d_dtype;
      bool accumulate;
      bool in_layer;
    };
    const Proj projs[] = {{"qkv_proj", kQkvWidth, kHidden, DType::kBF16, false, true},
                          {"o_proj (+= residual)", kHidden, kHidden, DType::kF32, true, true},
                          {"gate_up_proj", 2 * kInter, kHidden, DType::kBF16, false, true},
                          {"down_proj (+= residual)", kHidden, kInter, DType::kF32, true, true},
                          {"lm_head (fp32 logits)", kVocab, kHidden, DType::kF32, false, false}};
    const cudaStream_t s = stream.get();
    Times layer{0.0, 0.0};
    for (const Proj& pr : projs) {
      const int64_t w_bytes = pr.n * pr.k * 2;
      const int copies = copies_for(w_bytes);
      std::vector<DeviceBuffer> ws;
      for (int i = 0; i < copies; ++i)
        ws.push_back(filled(pr.n * pr.k, DType::kBF16, 20 + i, -0.05f, 0.05f, s));
      DeviceBuffer a = filled(m * pr.k, DType::kBF16, 8, -1, 1, s);
      DeviceBuffer d = filled(m * pr.n, pr.d_dtype, 9, -1, 1, s);
      const Times tm = time_both(stream, m, copies, [&](int i) {
        return gemm.run(
            projection(a.data(), ws[i].data(), d.data(), m, pr.n, pr.k, pr.d_dtype, pr.accumulate),
            s);
      });
      const double us = tm.us;
      const double tflops = 2.0 * m * pr.n * pr.k / (us * 1e-6) / 1e12;
      const double bytes = static_cast<double>(w_bytes) + m * pr.k * 2.0 +
                           m * pr.n * dtype_size(pr.d_dtype) * (pr.accumulate ? 2.0 : 1.0);
      std::printf(
          "%-26s%s m %5lld  n %6lld k %5lld  %9.2f us  %6.1f TFLOP/s  %7.1f GB/s (%.2f of copy)",
          pr.name, path, static_cast<long long>(m), static_cast<long long>(pr.n),
          static_cast<long long>(pr.k), us, tflops, bytes / (us * 1e-6) / 1e9,
          bytes / (us * 1e-6) / 1e9 / copy_gbs);
      if (tm.graph_us > 0) {
        std::printf("  | graph %7.2f us, %.2f of copy", tm.graph_us,
                    bytes / (tm.graph_us * 1e-6) / 1e9 / copy_gbs);
      }
      std::printf("\n");
      if (pr.in_layer) {
        layer.us += tm.us;
        layer.graph_us += tm.graph_us;
      }
    }
    return layer;
  }

  // The MLP chain gate_up -> silu_and_mul -> down (+= fp32 residual), and gate_up with the
  // SiLU-and-mul epilogue -> down, with bf16 or FP8 weights: streamed and from a CUDA graph.
  struct MlpTimes {
    Times unfused, fused;
  };
  MlpTimes mlp_chain(Gemm& gemm, int64_t m, bool fp8, const char* path) {
    const cudaStream_t s = stream.get();
    const DType w_dtype = fp8 ? DType::kF8E4M3 : DType::kBF16;
    struct Weights {
      DeviceBuffer w, scales;
    };
    auto weights = [&](int64_t n, int64_t k, uint64_t seed) {
      Weights out;
      DeviceBuffer bf = filled(n * k, DType::kBF16, seed, -0.05f, 0.05f, s);
      if (!fp8) {
        out.w = std::move(bf);
        return out;
      }
      out.w = take(DeviceBuffer::allocate(n * k), "alloc");
      out.scales = take(DeviceBuffer::allocate(n * 4), "alloc");
      Fp8QuantizeRowsParams q;
      q.in = bf.data();
      q.ld_in = k;
      q.out = out.w.data();
      q.ld_out = k;
      q.scales = out.scales.as<float>();
      q.rows = n;
      q.cols = k;
      die_if(fp8_quantize_rows(q, s), "fp8_quantize_rows");
      die_if(cudaStreamSynchronize(s), "sync");  // bf is freed on return
      return out;
    };
    const int64_t w_bytes = 3 * kInter * kHidden * dtype_size(w_dtype);
    const int copies = copies_for(w_bytes);
    std::vector<Weights> gate_up_w, down_w;
    for (int i = 0; i < copies; ++i) {
      gate_up_w.push_back(weights(2 * kInter, kHidden, 40 + i));
      down_w.push_back(weights(kHidden, kInter, 80 + i));
    }
    DeviceBuffer a = filled(m * kHidden, DType::kBF16, 8, -1, 1, s);
    DeviceBuffer gate_up = filled(m * 2 * kInter, DType::kBF16, 10, -1, 1, s);
    DeviceBuffer act = filled(m * kInter, DType::kBF16, 11, -1, 1, s);
    DeviceBuffer residual = filled(m * kHidden, DType::kF32, 12, -1, 1, s);
    auto chain = [&](bool fused) {
      return [&, fused](int i) -> Status {
        GemmParams gu = projection(a.data(), gate_up_w[i].w.data(), gate_up.data(), m, 2 * kInter,
                                   kHidden, DType::kBF16, false);
        GemmParams down = projection(act.data(), down_w[i].w.data(), residual.data(), m, kHidden,
                                     kInter, DType::kF32, true);
        gu.w_dtype = down.w_dtype = w_dtype;
        gu.w_scale = fp8 ? gate_up_w[i].scales.as<float>() : nullptr;
        down.w_scale = fp8 ? down_w[i].scales.as<float>() : nullptr;
        if (fused) {
          gu.d = act.data();
          gu.ldd = kInter;
          gu.epilogue = GemmEpilogue::kSiluAndMul;
          gu.product_scratch = gate_up.data();
        }
        STRATA_RETURN_IF_ERROR(gemm.run(gu, s));
        if (!fused) {
          STRATA_RETURN_IF_ERROR(silu_and_mul(
              {gate_up.data(), act.data(), static_cast<int32_t>(m), static_cast<int32_t>(kInter)},
              s));
        }
        return gemm.run(down, s);
      };
    };
    const MlpTimes t{time_both(stream, m, copies, chain(false)),
                     time_both(stream, m, copies, chain(true))};
    std::printf(
        "mlp: gate_up, silu, down%s%s m %lld  %9.2f us | graph %7.2f us;  SiLU epilogue %9.2f us "
        "| graph %7.2f us  (%+.2f us from a graph)\n",
        fp8 ? " [fp8]" : "", path, static_cast<long long>(m), t.unfused.us, t.unfused.graph_us,
        t.fused.us, t.fused.graph_us, t.fused.graph_us - t.unfused.graph_us);
    return t;
  }

  // The layer's four projections with FP8 weights (e4m3 codes, a scale per output feature, as
  // --quantization fp8 loads them) at m = t <= 2: through Gemm (what the engine runs), then the
  // GEMV kernel at each block shape of kGemvFp8Shapes. Microseconds from a CUDA graph, and the
  // weight bytes' share of the copy bandwidth; returns Gemm's per-layer graph time.
  double gemms_fp8(Gemm& gemm, int64_t m) {
    struct Proj {
      const char* name;
      int64_t n, k;
      DType d_dtype;
      bool accumulate;
    };
    const Proj projs[] = {{"qkv_proj", kQkvWidth, kHidden, DType::kBF16, false},
                          {"o_proj (+= residual)", kHidden, kHidden, DType::kF32, true},
                          {"gate_up_proj", 2 * kInter, kHidden, DType::kBF16, false},
                          {"down_proj (+= residual)", kHidden, kInter, DType::kF32, true}};
    constexpr int kShapes = static_cast<int>(std::size(detail::kGemvFp8Shapes));
    const cudaStream_t s = stream.get();
    double layer_gemm = 0.0;
    std::vector<double> layer_shape(kShapes, 0.0);
    double layer_bytes = 0.0;
    for (const Proj& pr : projs) {
      const int64_t w_bytes = pr.n * pr.k;
      const int copies = copies_for(w_bytes);
      std::vector<DeviceBuffer> codes, scales;
      for (int i = 0; i < copies; ++i) {
        DeviceBuffer w = filled(pr.n * pr.k, DType::kBF16, 20 + i, -0.05f, 0.05f, s);
        codes.push_back(take(DeviceBuffer::allocate(w_bytes), "alloc"));
        scales.push_back(take(DeviceBuffer::allocate(pr.n * 4), "alloc"));
        Fp8QuantizeRowsParams q;
        q.in = w.data();
        q.ld_in = pr.k;
        q.out = codes.back().data();
        q.ld_out = pr.k;
        q.scales = scales.back().as<float>();
        q.rows = pr.n;
        q.cols = pr.k;
        die_if(fp8_quantize_rows(q, s), "fp8_quantize_rows");
        die_if(cudaStreamSynchronize(s), "sync");  // w is freed at the end of the iteration
      }
      DeviceBuffer a = filled(m * pr.k, DType::kBF16, 8, -1, 1, s);
      DeviceBuffer d = filled(m * pr.n, pr.d_dtype, 9, -1, 1, s);
      const double bytes = static_cast<double>(w_bytes) + pr.n * 4.0;
      layer_bytes += bytes;
      auto line = [&](const char* path, double us) {
        std::printf("%-26s%-16s m %lld  n %6lld k %5lld  graph %7.2f us  %7.1f GB/s (%.2f of copy)\n",
                    pr.name, path, static_cast<long long>(m), static_cast<long long>(pr.n),
                    static_cast<long long>(pr.k), us, bytes / (us * 1e-6) / 1e9,
                    bytes / (us * 1e-6) / 1e9 / copy_gbs);
      };
      const double gemm_us = time_graph_us(stream.get(), copies, [&](int i) {
        GemmParams p = projection(a.data(), codes[i].data(), d.data(), m, pr.n, pr.k, pr.d_dtype,
                                  pr.accumulate);
        p.w_dtype = DType::kF8E4M3;
        p.w_scale = scales[i].as<float>();
        return gemm.run(p, s);
      });
      line(" [fp8 Gemm]", gemm_us);
      layer_gemm += gemm_us;
      for (int v = 0; v < kShapes; ++v) {
        const detail::GemvFp8Shape shape = detail::kGemvFp8Shapes[v];
        const double us = time_graph_us(stream.get(), copies, [&](int i) {
          detail::GemvParams g{a.data(), pr.k, codes[i].data(), pr.k, true, scales[i].as<float>(),
                               nullptr, d.data(), pr.n, pr.d_dtype, pr.accumulate, m, pr.n, pr.k,
                               shape};
          return detail::gemv(g, s);
        });
        char path[32];
        std::snprintf(path, sizeof(path), " [fp8 %dx%d]", shape.rows, shape.threads);
        line(path, us);
        layer_shape[static_cast<size_t>(v)] += us;
      }
    }
    std::printf("fp8 projections of one layer, m %lld (%.1f MB of weights and scales; %.2f us at "
                "the copy bandwidth): Gemm %.2f us",
                static_cast<long long>(m), layer_bytes / 1e6, layer_bytes / copy_gbs / 1e3,
                layer_gemm);
    for (int v = 0; v < kShapes; ++v) {
      std::printf(", %dx%d %.2f us", detail::kGemvFp8Shapes[v].rows,
                  detail::kGemvFp8Shapes[v].threads, layer_shape[static_cast<size_t>(v)]);
    }
    std::printf("\n");
    return layer_gemm;
  }
};

int run(int argc, char** argv) {
  std::vector<int64_t> tokens = {1, 2, 4, 8, 256, 4096};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) tokens = {std::atoll(argv[++i])};
  }
  Bench b;
  cudaDeviceProp prop{};
  die_if(cudaGetDeviceProperties(&prop, 0), "properties");
  b.measure_copy();
  std::printf("device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, b.copy_gbs);
  Gemm gemm = take(Gemm::create(), "gemm");
  // The small-batch paths side by side: every row count on cuBLASLt, and on the GEMV kernel.
  Gemm cublas = take(Gemm::create(size_t{32} << 20, 0), "gemm");
  Gemm gemv = take(Gemm::create(size_t{32} << 20, 8), "gemm");
  for (int64_t t : tokens) {
    std::printf("\n== %lld tokens ==\n", static_cast<long long>(t));
    const Times ops = b.ops(t);
    if (t <= 8) {
      b.gemms(cublas, t, " [cuBLASLt]");
      b.gemms(gemv, t, " [GEMV]");
    }
    double fp8_gemms_us = 0.0;
    if (t <= 2) fp8_gemms_us = b.gemms_fp8(gemm, t);
    const Times gemms = b.gemms(gemm, t);
    std::printf(
        "one decoder layer (2 norms + residual adds, rope, silu, 4 projections; no "
        "attention): %.1f us = ops %.1f + GEMM %.1f; x32 layers %.2f ms\n",
        ops.us + gemms.us, ops.us, gemms.us, 32 * (ops.us + gemms.us) / 1e3);
    if (ops.graph_us > 0) {
      std::printf("  from a CUDA graph: %.1f us = ops %.1f + GEMM %.1f; x32 layers %.2f ms\n",
                  ops.graph_us + gemms.graph_us, ops.graph_us, gemms.graph_us,
                  32 * (ops.graph_us + gemms.graph_us) / 1e3);
    }
    // The same layer with the SiLU-and-mul epilogue: the MLP chain's difference replaces
    // gate_up + silu_and_mul (the default Gemm up to 2 tokens, the GEMV-only one up to 8).
    Gemm& mlp_gemm = t <= Gemm::kDefaultGemvMaxRows ? gemm : gemv;
    if (mlp_gemm.takes_gemv(t, 2 * kInter, kHidden, DType::kBF16)) {
      const Bench::MlpTimes mlp =
          b.mlp_chain(mlp_gemm, t, false, &mlp_gemm == &gemm ? "" : " [GEMV]");
      const double us = ops.us + gemms.us + mlp.fused.us - mlp.unfused.us;
      const double graph_us =
          ops.graph_us + gemms.graph_us + mlp.fused.graph_us - mlp.unfused.graph_us;
      std::printf(
          "one decoder layer with the SiLU epilogue%s: %.1f us, from a CUDA graph %.1f us; x32 "
          "layers %.2f / %.2f ms\n",
          &mlp_gemm == &gemm ? "" : " (GEMV-only Gemm)", us, graph_us, 32 * us / 1e3,
          32 * graph_us / 1e3);
    }
    if (t <= 2) {
      const Bench::MlpTimes mlp = b.mlp_chain(gemm, t, true, "");
      const double before = ops.graph_us + fp8_gemms_us;
      const double after = before + mlp.fused.graph_us - mlp.unfused.graph_us;
      std::printf(
          "one decoder layer, fp8 weights, from a CUDA graph: %.1f us = ops %.1f + GEMM %.1f; with "
          "the SiLU epilogue %.1f us; x32 layers %.2f / %.2f ms\n",
          before, ops.graph_us, fp8_gemms_us, after, 32 * before / 1e3, 32 * after / 1e3);
    }
  }
  {
    const int64_t n = kInter * kHidden;  // one fp32 weight converted at load
    DeviceBuffer in = filled(n, DType::kF32, 30, -1, 1, b.stream.get());
    DeviceBuffer out = take(DeviceBuffer::allocate(n * 2), "alloc");
    const Times us{
        time_us(b.stream, 1,
                [&](int) { return f32_to_bf16(in.as<float>(), out.data(), n, b.stream.get()); }),
        0.0};
    std::printf("\n");
    b.report("f32_to_bf16 (14336x4096)", 0, us, static_cast<double>(n) * 6, 1);
  }
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
