// The CPU engine with --cpu-matmul-precision bf16 (BF16 weights on vdpbf16ps, activations
// rounded to BF16): the CPU invariants of docs/architecture.md hold as on the fp32 path -- a
// request's logits within 1e-5 and its greedy tokens identical alone or batched, in any chunking
// or thread count, at each block size -- on the BF16 fixture and on BF16 dummy weights of the MoE,
// Gemma 3 and tied Qwen2 shapes; its logits stay near transformers' and differ from the fp32 path's
// (the path is really taken).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine_testing.h"
#include "kernels/cpu/cpu_isa.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

using test_util::int_tensor;
using test_util::max_row_rel_err;

constexpr double kInvarianceTolerance = 1e-5;  // as fixture_test.cc
// BF16 activations against transformers' float64 logits: the inputs of every product rounded to
// 8 significant bits.
constexpr double kBf16ReferenceTolerance = 3e-2;

const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

EngineConfig bf16_config() {
  EngineConfig c;
  c.cpu_bf16_matmul = true;
  return c;
}

// A fixture's own BF16 weights, or (dummy) BF16 dummy weights of its config.
model::Model load(const std::string& fixture, bool dummy) {
  model::ModelLoadOptions o{.model_dir = kModelsDir + fixture};
  if (dummy) {
    o.load_format = model::LoadFormat::kDummy;
    o.dummy_dtype = DType::kBF16;
  }
  return model::Model::load(o);
}

struct Bf16Case {
  std::string fixture;
  bool dummy;
};

class Bf16MatmulTest : public ::testing::TestWithParam<Bf16Case> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  }
};

TEST_P(Bf16MatmulTest, BatchedChunkedAndThreadedRunsMatchSoloRun) {
  model::Model m = load(GetParam().fixture, GetParam().dummy);
  const int64_t vocab = m.vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {
      test_util::prompt_of(301, 1), test_util::prompt_of(97, 2), test_util::prompt_of(17, 3)};
  ThreadPool one_thread(1);
  // The solo run per block size: the pool's block size is the engine's configuration, not the
  // batch's, and attention sums a sequence's blocks in an order it sets, so two block sizes give
  // logits a rounding apart -- which the next projection's BF16 rounding of its input can widen
  // past 1e-5 (the fp32 path's fixture test compares across block sizes too).
  for (int32_t block_size : {16, 32}) {
    EngineConfig alone = bf16_config();
    alone.block_size = block_size;
    std::vector<std::vector<float>> solo;
    for (const auto& p : prompts) {
      solo.push_back(test_util::prompt_logits(m, one_thread, {p}, alone)[0]);
    }
    for (int32_t chunk : {37, 256}) {
      EngineConfig config = bf16_config();
      config.block_size = block_size;
      config.max_num_batched_tokens = chunk;
      ThreadPool three_threads(3);
      const auto batched = test_util::prompt_logits(m, three_threads, prompts, config);
      ASSERT_EQ(batched.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_LE(max_row_rel_err(batched[i].data(), solo[i].data(),
                                  static_cast<int64_t>(prompts[i].size()), vocab),
                  kInvarianceTolerance)
            << "block size " << block_size << ", chunk " << chunk << ", sequence " << i;
      }
    }
  }
}

TEST_P(Bf16MatmulTest, GreedyTokensIdenticalAloneOrBatched) {
  model::Model m = load(GetParam().fixture, GetParam().dummy);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 3; ++i)
    requests.push_back(test_util::greedy(test_util::prompt_of(40 + 23 * i, i), 16, -1));
  ThreadPool pool(2);
  EngineConfig chunked = bf16_config();
  chunked.max_num_batched_tokens = 29;
  auto together = test_util::run_together(m, pool, requests, chunked);
  ASSERT_TRUE(together.ok()) << together.status().to_string();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone = test_util::run_together(m, pool, {requests[i]}, bf16_config());
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    EXPECT_EQ((*together)[i].tokens[0], (*alone)[0].tokens[0]) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, Bf16MatmulTest,
    ::testing::Values(Bf16Case{"llama3-gqa-bf16", false}, Bf16Case{"qwen2-tied", true},
                      Bf16Case{"mixtral-moe", true}, Bf16Case{"gemma3-hybrid", true}),
    [](const auto& info) {
      std::string name = info.param.fixture + (info.param.dummy ? "_dummy" : "");
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(Bf16MatmulReferenceTest, NearTransformersAndNotTheFp32Path) {
  if (!cpu::cpu_supports_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  const std::string fixture = "llama3-gqa-bf16";
  model::Model m = load(fixture, false);
  const model::SafetensorsFile ref =
      model::SafetensorsFile::open(kModelsDir + fixture + "/reference.safetensors");
  const std::vector<int32_t> p = int_tensor(ref.tensor("prompt.0"));
  const auto* want = static_cast<const float*>(ref.tensor("logits.0").data);
  const int64_t vocab = m.vocab_size();
  const auto rows = static_cast<int64_t>(p.size());
  ThreadPool pool(2);
  const auto bf16 = test_util::prompt_logits(m, pool, {p}, bf16_config())[0];
  const auto fp32 = test_util::prompt_logits(m, pool, {p}, EngineConfig{})[0];
  const double bf16_err = max_row_rel_err(bf16.data(), want, rows, vocab);
  EXPECT_LE(bf16_err, kBf16ReferenceTolerance);
  EXPECT_LE(max_row_rel_err(fp32.data(), want, rows, vocab), 1e-4);
  // The BF16 path rounds the activations: far more than the invariance tolerance from fp32.
  EXPECT_GE(max_row_rel_err(bf16.data(), fp32.data(), rows, vocab), 100 * kInvarianceTolerance);
  std::printf("bf16 path: max row error %.3g against transformers\n", bf16_err);
}

}  // namespace
}  // namespace strata::engine
