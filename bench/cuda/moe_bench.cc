// strata_moe_bench: the MoE layer's kernels (moe.h) at real layer shapes, beside a dense
// cuBLASLt BF16 GEMM of the same FLOPs and a device-to-device copy of the weight bytes the layer
// reads, all in the same run.
//
// Shapes: Mixtral-8x7B (hidden 4096, intermediate 14336, 8 experts, top-2), Qwen3-30B-A3B
// (2048, 768, 128, top-8) and DeepSeek-V2-Lite's routed experts (2048, 1408, 64, top-6; its
// shared experts are a dense MLP the runner adds), at 1, 16, 128 and 2048 tokens. Weights, inputs
// and router logits are random_fill values (the routing is softmax top-k over random logits, so
// the experts hit are what a uniform router hits). "layer" times the route through the combine
// (route, permute, gate | up with SiLU-and-mul reading the tokens through the permutation, down,
// combine; the router's own GEMM and the shared experts are the runner's): the median of
// event-timed launches, and per launch replayed from a CUDA graph. Weight bytes = experts hit x 3 x
// hidden x inter x 2 (each hit expert's weights once); "GB/s" is those over the best time;
// "vs_copy" divides it by the read + write bandwidth of a copy of the same bytes; TFLOP/s counts 6
// x hidden x inter per (token, slot). The dense peer multiplies [T k, hidden] by [3 inter,
// hidden]^T (the same FLOPs, one expert's weights); "vs_dense" is its time over the layer's.
// "permute" times the grouping alone, "gemm_us" the two grouped GEMMs alone (the gather fused into
// the first), "gemm_vc" their weight bandwidth over the copy's. At T = 1 the first token's output
// (its first 64 features) is checked against a double reference.
//
//   strata_moe_bench [--reps N] [--tokens 1,16,128,2048] [--json FILE]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"

namespace strata::cuda {
namespace {

using bench::bf16_value;
using bench::die_if;
using bench::take;

constexpr uint64_t kXSeed = 31, kGateUpSeed = 32, kDownSeed = 33, kLogitSeed = 34;
constexpr float kWeightRange = 0.05f;

struct Model {
  const char* name;
  int32_t hidden, inter, experts, k;
};
constexpr Model kModels[] = {{"mixtral-8x7b", 4096, 14336, 8, 2},
                             {"qwen3-30b-a3b", 2048, 768, 128, 8},
                             {"deepseek-v2-lite", 2048, 1408, 64, 6}};

struct Row {
  const char* model;
  int32_t tokens, experts_hit;
  double weight_bytes, layer_us, graph_us, gbs, vs_copy, tflops, dense_us, dense_tflops, vs_dense,
      copy_us, max_rel_err, permute_us, gemm_us, gemm_vs_copy;
};

template <typename F>
double time_us(cudaStream_t stream, int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) die_if(fn(), "warm-up");
  return 1e3 * bench::median_ms_per_call(stream, reps, 1, [&](int) { return fn(); });
}

Status copy_status(cudaError_t e) {
  return e == cudaSuccess ? Status::Ok() : Status::Internal(cudaGetErrorString(e));
}

DeviceBuffer filled(int64_t elems, DType dtype, uint64_t seed, float lo, float hi,
                    cudaStream_t stream) {
  DeviceBuffer b =
      take(DeviceBuffer::allocate(static_cast<size_t>(elems) * dtype_size(dtype)), "alloc");
  die_if(random_fill({b.data(), dtype, elems, seed, lo, hi}, stream), "fill");
  return b;
}

// The largest |got - ref| / max|ref| over the first 64 features of token 0.
double check_token0(const Model& m, const std::vector<int32_t>& experts,
                    const std::vector<float>& weights, const std::vector<float>& out) {
  const int32_t features = std::min(64, m.hidden);
  std::vector<double> ref(static_cast<size_t>(features), 0.0);
  std::vector<double> act(static_cast<size_t>(m.inter));
  for (int32_t j = 0; j < m.k; ++j) {
    const int64_t e = experts[static_cast<size_t>(j)];
    for (int32_t i = 0; i < m.inter; ++i) {
      double g = 0, u = 0;
      const int64_t gate_row = (e * 2 * m.inter + i) * m.hidden;
      const int64_t up_row = (e * 2 * m.inter + m.inter + i) * m.hidden;
      for (int32_t h = 0; h < m.hidden; ++h) {
        const double x = bf16_value(kXSeed, h, -1, 1);
        g += x * bf16_value(kGateUpSeed, gate_row + h, -kWeightRange, kWeightRange);
        u += x * bf16_value(kGateUpSeed, up_row + h, -kWeightRange, kWeightRange);
      }
      act[static_cast<size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int32_t h = 0; h < features; ++h) {
      double y = 0;
      const int64_t row = (e * m.hidden + h) * m.inter;
      for (int32_t i = 0; i < m.inter; ++i) {
        y += act[static_cast<size_t>(i)] *
             bf16_value(kDownSeed, row + i, -kWeightRange, kWeightRange);
      }
      ref[static_cast<size_t>(h)] += weights[static_cast<size_t>(j)] * y;
    }
  }
  double scale = 0, worst = 0;
  for (const double r : ref) scale = std::max(scale, std::abs(r));
  for (int32_t h = 0; h < features; ++h) {
    worst = std::max(worst, std::abs(out[static_cast<size_t>(h)] - ref[static_cast<size_t>(h)]));
  }
  return worst / scale;
}

// The grouping alone, and the two grouped GEMMs alone (gate | up with SiLU-and-mul, then down),
// on buffers of their own, for the routing the layer chose.
void time_parts(const Model& m, int32_t tokens, int reps, const DeviceBuffer& experts,
                const DeviceBuffer& gate_up, const DeviceBuffer& down, const DeviceBuffer& x,
                cudaStream_t stream, Row& row) {
  const int64_t pairs = int64_t{tokens} * m.k;
  const MoeTileConfig config = moe_choose_tile_config(tokens, m.k, m.experts);
  const int32_t max_tiles = moe_max_tiles(tokens, m.k, m.experts, config);
  auto ints = [](int64_t n) {
    return take(DeviceBuffer::allocate(static_cast<size_t>(n) * 4), "alloc");
  };
  DeviceBuffer offsets = ints(m.experts + 1), row_of = ints(pairs), token_of = ints(pairs);
  DeviceBuffer tile_expert = ints(max_tiles), tile_row = ints(max_tiles), num_tiles = ints(1);
  DeviceBuffer act =
      take(DeviceBuffer::allocate(static_cast<size_t>(pairs * m.inter) * 2), "alloc");
  DeviceBuffer y = take(DeviceBuffer::allocate(static_cast<size_t>(pairs * m.hidden) * 4), "alloc");
  MoePermuteParams perm;
  perm.experts = experts.as<int32_t>();
  perm.num_tokens = tokens;
  perm.top_k = m.k;
  perm.num_experts = m.experts;
  perm.expert_offsets = offsets.as<int32_t>();
  perm.row_of = row_of.as<int32_t>();
  perm.token_of = token_of.as<int32_t>();
  perm.tile_config = config;
  perm.max_tiles = max_tiles;
  perm.tile_expert = tile_expert.as<int32_t>();
  perm.tile_row = tile_row.as<int32_t>();
  perm.num_tiles = num_tiles.as<int32_t>();
  row.permute_us = time_us(stream, reps, [&] { return moe_permute(perm, stream); });
  die_if(moe_permute(perm, stream), "permute");
  MoeGemmParams up;
  up.a = x.data();
  up.a_row_of = token_of.as<int32_t>();
  up.lda = m.hidden;
  up.w = gate_up.data();
  up.ldw = m.hidden;
  up.w_expert_stride = int64_t{2} * m.inter * m.hidden;
  up.d = act.data();
  up.ldd = m.inter;
  up.n = 2 * m.inter;
  up.k = m.hidden;
  up.epilogue = MoeGemmEpilogue::kSiluAndMul;
  up.expert_offsets = offsets.as<int32_t>();
  up.tile_expert = tile_expert.as<int32_t>();
  up.tile_row = tile_row.as<int32_t>();
  up.num_tiles = num_tiles.as<int32_t>();
  up.max_tiles = max_tiles;
  up.tile_config = config;
  MoeGemmParams dn = up;
  dn.a = act.data();
  dn.a_row_of = nullptr;
  dn.lda = m.inter;
  dn.w = down.data();
  dn.ldw = m.inter;
  dn.w_expert_stride = int64_t{m.hidden} * m.inter;
  dn.d = y.data();
  dn.ldd = m.hidden;
  dn.d_dtype = DType::kF32;
  dn.n = m.hidden;
  dn.k = m.inter;
  dn.epilogue = MoeGemmEpilogue::kNone;
  row.gemm_us = time_us(stream, reps, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(moe_grouped_gemm(up, stream));
    return moe_grouped_gemm(dn, stream);
  });
}

Row run_case(const Model& m, int32_t tokens, int reps, const DeviceBuffer& gate_up,
             const DeviceBuffer& down, Gemm& gemm, cudaStream_t stream) {
  const int64_t pairs = int64_t{tokens} * m.k;
  DeviceBuffer x = filled(int64_t{tokens} * m.hidden, DType::kBF16, kXSeed, -1, 1, stream);
  DeviceBuffer logits = filled(int64_t{tokens} * m.experts, DType::kF32, kLogitSeed, -2, 2, stream);
  DeviceBuffer experts = take(DeviceBuffer::allocate(static_cast<size_t>(pairs) * 4), "alloc");
  DeviceBuffer weights = take(DeviceBuffer::allocate(static_cast<size_t>(pairs) * 4), "alloc");
  DeviceBuffer out =
      take(DeviceBuffer::allocate(static_cast<size_t>(tokens) * m.hidden * 4), "alloc");
  const int64_t ws_bytes = moe_workspace_bytes(tokens, m.k, m.experts, m.hidden, m.inter);
  DeviceBuffer ws = take(DeviceBuffer::allocate(static_cast<size_t>(ws_bytes)), "alloc");

  MoeRouteParams r;
  r.logits = logits.data();
  r.experts = experts.as<int32_t>();
  r.weights = weights.as<float>();
  r.num_tokens = tokens;
  r.num_experts = m.experts;
  r.top_k = m.k;
  r.norm_topk_prob = true;
  MoeExpertsParams p;
  p.x = x.data();
  p.experts = experts.as<int32_t>();
  p.weights = weights.as<float>();
  p.w_gate_up = gate_up.data();
  p.w_down = down.data();
  p.out = out.data();
  p.num_tokens = tokens;
  p.top_k = m.k;
  p.num_experts = m.experts;
  p.hidden = m.hidden;
  p.inter = m.inter;
  auto layer = [&]() -> Status {
    STRATA_RETURN_IF_ERROR(moe_route(r, stream));
    return moe_experts_forward(p, ws.data(), ws_bytes, stream);
  };
  die_if(layer(), "moe layer");
  die_if(cudaStreamSynchronize(stream), "sync");

  Row row{};
  row.model = m.name;
  row.tokens = tokens;
  std::vector<int32_t> host_experts(static_cast<size_t>(pairs));
  std::vector<float> host_weights(static_cast<size_t>(pairs));
  die_if(cudaMemcpy(host_experts.data(), experts.data(), host_experts.size() * 4,
                    cudaMemcpyDeviceToHost),
         "copy");
  die_if(cudaMemcpy(host_weights.data(), weights.data(), host_weights.size() * 4,
                    cudaMemcpyDeviceToHost),
         "copy");
  row.experts_hit =
      static_cast<int32_t>(std::set<int32_t>(host_experts.begin(), host_experts.end()).size());
  row.max_rel_err = -1;
  if (tokens == 1) {
    std::vector<float> host_out(static_cast<size_t>(m.hidden));
    die_if(cudaMemcpy(host_out.data(), out.data(), host_out.size() * 4, cudaMemcpyDeviceToHost),
           "copy");
    row.max_rel_err = check_token0(m, host_experts, host_weights, host_out);
    if (!(row.max_rel_err < 2e-2)) {
      std::fprintf(stderr, "%s: token 0 differs from the reference by %.3g\n", m.name,
                   row.max_rel_err);
      std::exit(1);
    }
  }

  row.layer_us = time_us(stream, reps, layer);
  row.graph_us = bench::time_graph_us(stream, 1, [&](int) { return layer(); });
  const double best_us = std::min(row.layer_us, row.graph_us);
  const double expert_bytes = 3.0 * m.hidden * m.inter * 2;
  row.weight_bytes = row.experts_hit * expert_bytes;
  row.gbs = row.weight_bytes / (best_us * 1e-6) / 1e9;
  const double flops = 2.0 * static_cast<double>(pairs) * 3 * m.hidden * m.inter;
  row.tflops = flops / (best_us * 1e-6) / 1e12;

  time_parts(m, tokens, reps, experts, gate_up, down, x, stream, row);

  // The peer: a dense BF16 GEMM of the same FLOPs on cuBLASLt.
  {
    DeviceBuffer a = filled(pairs * m.hidden, DType::kBF16, kXSeed, -1, 1, stream);
    DeviceBuffer d =
        take(DeviceBuffer::allocate(static_cast<size_t>(pairs) * 3 * m.inter * 2), "alloc");
    GemmParams g;
    g.a = a.data();
    g.lda = m.hidden;
    g.w = gate_up.data();  // 3 inter rows of the first experts' gate | up: any bf16 weights
    g.ldw = m.hidden;
    g.d = d.data();
    g.ldd = 3 * m.inter;
    g.m = pairs;
    g.n = 3 * m.inter;
    g.k = m.hidden;
    row.dense_us = time_us(stream, reps, [&] { return gemm.run(g, stream); });
    row.dense_tflops = flops / (row.dense_us * 1e-6) / 1e12;
    row.vs_dense = row.dense_us / best_us;
  }
  // The bound: a copy of the weight bytes read (read + write counted).
  {
    const auto bytes = static_cast<size_t>(row.weight_bytes);
    DeviceBuffer dst = take(DeviceBuffer::allocate(bytes), "alloc");
    const size_t from_gate_up = std::min(bytes, gate_up.bytes());
    row.copy_us = time_us(stream, reps, [&]() -> Status {
      STRATA_RETURN_IF_ERROR(copy_status(cudaMemcpyAsync(dst.data(), gate_up.data(), from_gate_up,
                                                         cudaMemcpyDeviceToDevice, stream)));
      if (bytes == from_gate_up) return Status::Ok();
      return copy_status(cudaMemcpyAsync(static_cast<char*>(dst.data()) + from_gate_up, down.data(),
                                         bytes - from_gate_up, cudaMemcpyDeviceToDevice, stream));
    });
    const double copy_gbs = 2.0 * row.weight_bytes / (row.copy_us * 1e-6) / 1e9;
    row.vs_copy = row.gbs / copy_gbs;
    row.gemm_vs_copy = row.weight_bytes / (row.gemm_us * 1e-6) / 1e9 / copy_gbs;
  }
  return row;
}

std::vector<int32_t> parse_list(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

void write_json(const std::string& path, const char* device, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(f, "{\"device\": \"%s\", \"rows\": [\n", device);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "  {\"model\": \"%s\", \"tokens\": %d, \"experts_hit\": %d, \"weight_bytes\": "
                 "%.0f, \"layer_us\": %.2f, \"graph_us\": %.2f, \"gbs\": %.1f, \"vs_copy\": "
                 "%.3f, \"tflops\": %.2f, \"dense_us\": %.2f, \"dense_tflops\": %.2f, "
                 "\"vs_dense\": %.3f, \"copy_us\": %.2f, \"permute_us\": %.2f, \"gemm_us\": "
                 "%.2f, \"gemm_vs_copy\": %.3f, \"max_rel_err\": %.3g}%s\n",
                 r.model, r.tokens, r.experts_hit, r.weight_bytes, r.layer_us, r.graph_us, r.gbs,
                 r.vs_copy, r.tflops, r.dense_us, r.dense_tflops, r.vs_dense, r.copy_us,
                 r.permute_us, r.gemm_us, r.gemm_vs_copy, r.max_rel_err,
                 i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

int run(int argc, char** argv) {
  int reps = 20;
  std::vector<int32_t> token_counts = {1, 16, 128, 2048};
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      token_counts = parse_list(argv[++i]);
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
  // gemv_max_rows 0: the peer is cuBLASLt's at every size.
  Gemm gemm = take(Gemm::create(size_t{32} << 20, 0), "gemm");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("%-17s %6s %4s %10s %10s %8s %8s %8s %10s %8s %8s %9s %9s %8s %9s\n", "model",
              "tokens", "hit", "layer_us", "graph_us", "GB/s", "vs_copy", "TFLOP/s", "dense_us",
              "dense_TF", "vs_dense", "permute", "gemm_us", "gemm_vc", "max_err");
  std::vector<Row> rows;
  for (const Model& m : kModels) {
    const int64_t gate_up_elems = int64_t{m.experts} * 2 * m.inter * m.hidden;
    const int64_t down_elems = int64_t{m.experts} * m.hidden * m.inter;
    DeviceBuffer gate_up =
        filled(gate_up_elems, DType::kBF16, kGateUpSeed, -kWeightRange, kWeightRange, stream.get());
    DeviceBuffer down =
        filled(down_elems, DType::kBF16, kDownSeed, -kWeightRange, kWeightRange, stream.get());
    for (const int32_t tokens : token_counts) {
      const Row r = run_case(m, tokens, reps, gate_up, down, gemm, stream.get());
      std::printf(
          "%-17s %6d %4d %10.1f %10.1f %8.0f %8.2f %8.1f %10.1f %8.1f %8.2f %9.1f %9.1f %8.2f "
          "%9.2g\n",
          r.model, r.tokens, r.experts_hit, r.layer_us, r.graph_us, r.gbs, r.vs_copy, r.tflops,
          r.dense_us, r.dense_tflops, r.vs_dense, r.permute_us, r.gemm_us, r.gemm_vs_copy,
          r.max_rel_err);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  if (!json_path.empty()) write_json(json_path, prop.name, rows);
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::run(argc, argv); }
