// strata_mla_prefill_bench: one DeepSeek-V2-Lite attention layer's prefill of a chunk of T
// tokens over C cached ones on the CPU, in MLA's absorbed and expanded forms alternately in the
// same run (model/mla_prefill.h), medians of each, beside the form the automatic rule picks.
//
// The model is bench/models/deepseek-v2-lite's config cut to one layer (16 heads, kv_lora_rank
// 512, rope 64, nope 128, v 128, hidden 2048; its dense MLP shrunk to 16 and its vocabulary to
// 256, so that attention is what the step costs) with seeded BF16 dummy weights and an F32 latent
// cache of block size 16. The context is prefilled once per C; each timed step then writes the
// chunk's latent rows into the same slots again, so every repetition does the same work. The
// time is the whole forward pass of the step (embedding, q / kv_a / o projections, attention,
// the small MLP and one row's logits); everything but attention is the same in both forms.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "guarded_main.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_layout.h"
#include "model/mla_prefill.h"
#include "model/model.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kBlockSize = 16;

// The one-layer V2-Lite config in a scratch directory.
fs::path write_config(const fs::path& from) {
  std::ifstream in(from);
  if (!in) throw Error("cannot read " + from.string());
  nlohmann::json c = nlohmann::json::parse(in);
  c["num_hidden_layers"] = 1;
  c["intermediate_size"] = 16;
  c["vocab_size"] = 256;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  const fs::path dir = fs::temp_directory_path() / "strata-mla-prefill-bench";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << c.dump(2);
  return dir;
}

// One sequence's step: tokens at positions [begin, end), its blocks 0, 1, ... of the pool.
struct Step {
  std::vector<int32_t> tokens, positions, q_indptr, kv_indptr, kv_indices, last_len, logits_rows;
  std::vector<int64_t> slots;

  Step(int32_t begin, int32_t end) {
    for (int32_t p = begin; p < end; ++p) {
      tokens.push_back((p * 37 + 11) % 256);
      positions.push_back(p);
      slots.push_back(p);  // block p / 16 holds positions [16 * (p / 16), ...)
    }
    const int32_t blocks = (end + kBlockSize - 1) / kBlockSize;
    q_indptr = {0, end - begin};
    kv_indptr = {0, blocks};
    kv_indices.resize(static_cast<size_t>(blocks));
    std::iota(kv_indices.begin(), kv_indices.end(), 0);
    last_len = {end - (blocks - 1) * kBlockSize};
    logits_rows = {end - begin - 1};
  }
  model::ForwardBatch view() const {
    model::ForwardBatch b;
    b.token_ids = tokens;
    b.positions = positions;
    b.q_indptr = q_indptr;
    b.layout.kv_indptr = kv_indptr.data();
    b.layout.kv_indices = kv_indices.data();
    b.layout.kv_last_page_len = last_len.data();
    b.layout.num_seqs = 1;
    b.layout.block_size = kBlockSize;
    b.slot_mapping = slots;
    b.logits_rows = logits_rows;
    return b;
  }
};

double seconds_of(model::Model& m, kv::HostKvBuffer& kv, const Step& step, ThreadPool& pool) {
  std::vector<float> logits(static_cast<size_t>(m.vocab_size()));
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = m.forward(step.view(), kv, logits, pool);
  const auto t1 = std::chrono::steady_clock::now();
  if (!s.ok()) throw Error("forward: " + s.to_string());
  return std::chrono::duration<double>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

int run(int argc, char** argv) {
  CLI::App app{"MLA prefill: absorbed against expanded, one DeepSeek-V2-Lite layer"};
  std::string config = "bench/models/deepseek-v2-lite/config.json";
  std::vector<int32_t> chunks = {16, 64, 256, 1024, 2048};
  std::vector<int32_t> contexts = {0, 1024, 8192};
  int reps = 3;
  int threads = 2;
  app.add_option("--config", config, "the published DeepSeek-V2-Lite config.json");
  app.add_option("--chunks", chunks, "chunk lengths T");
  app.add_option("--contexts", contexts, "cached tokens C before the chunk");
  app.add_option("--reps", reps, "timed steps of each form per (T, C), alternating");
  app.add_option("--threads", threads, "thread pool size");
  CLI11_PARSE(app, argc, argv);

  ThreadPool pool(threads);
  model::Model m = model::Model::load({.model_dir = write_config(config),
                                       .load_format = model::LoadFormat::kDummy,
                                       .dummy_seed = 1,
                                       .dummy_dtype = DType::kBF16});
  const model::MlaConfig& mla = m.config().mla;
  const int64_t heads = m.config().num_attention_heads;
  const int32_t longest = *std::max_element(contexts.begin(), contexts.end()) +
                          *std::max_element(chunks.begin(), chunks.end());
  kv::HostKvBuffer kv(kv::KvLayout(m.kv_spec(DType::kF32), kBlockSize),
                      (longest + kBlockSize - 1) / kBlockSize + 1);
  std::printf(
      "| C (cached) | T (chunk) | absorbed ms | expanded ms | expanded / absorbed | rule |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const int32_t c : contexts) {
    // The context, in 2048-token chunks of the form the rule picks.
    m.set_mla_prefill(model::MlaPrefill::kAuto);
    for (int32_t p = 0; p < c; p += 2048)
      (void)seconds_of(m, kv, Step(p, std::min(c, p + 2048)), pool);
    for (const int32_t t : chunks) {
      const Step step(c, c + t);
      std::vector<double> absorbed, expanded;
      for (int r = 0; r < reps; ++r) {
        // Absorbed first on even repetitions, expanded first on odd ones.
        for (const bool now_absorbed : {r % 2 == 0, r % 2 != 0}) {
          m.set_mla_prefill(now_absorbed ? model::MlaPrefill::kAbsorbed
                                         : model::MlaPrefill::kExpanded);
          (now_absorbed ? absorbed : expanded).push_back(seconds_of(m, kv, step, pool));
        }
      }
      const double a = median(absorbed) * 1e3, e = median(expanded) * 1e3;
      const model::MlaForm rule =
          model::choose_mla_form(mla, heads, t, c + t, model::MlaPrefill::kAuto);
      std::printf("| %d | %d | %.1f | %.1f | %.2f | %s |\n", c, t, a, e, e / a,
                  rule == model::MlaForm::kExpanded ? "expanded" : "absorbed");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_mla_prefill_bench", strata::bench::run, argc, argv);
}
