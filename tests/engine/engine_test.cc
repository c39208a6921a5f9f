// The continuous-batching engine (include/strata/engine.h) on a transformers fixture: what a
// request gets does not depend on what else runs -- batch sizes 1, 3 and 16, prefill chunks of
// 1, 7 and 64 tokens, after a prefix hit, after recompute preemption -- (greedy tokens identical
// to the request run alone, top-20 logprobs within 1e-5); cancellation frees blocks; randomized
// submit / cancel / finish sequences leak nothing and never overcommit the pool; priority order;
// n > 1 holds the prompt's blocks once; a sliding-window sequence holds only its window; the
// warm-up leaves nothing behind.

#include "strata/engine.h"
#include "engine/engine_on_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "engine_testing.h"
#include "reference_testing.h"

namespace strata {
namespace {

constexpr double kTolerance = 1e-5;
const std::string kModels = std::string(STRATA_TEST_DATA_DIR) + "/models/";

using engine::test_util::absorb;
using engine::test_util::Collected;
using engine::test_util::drain;
using engine::test_util::greedy;
using engine::test_util::prompt_of;

double rel_err(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b) {
  return engine::test_util::max_top_logprobs_rel_err(a, b);
}

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : pool_(2), model_(model::Model::load({kModels + "llama3-gqa"})) {}

  std::unique_ptr<Engine> make(EngineConfig c = {}) {
    if (c.num_blocks == 0) c.num_blocks = 256;
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(*e);
  }

  Collected alone(const EngineRequest& r, const EngineConfig& c = {}) {
    auto e = make(c);
    const RequestId id = *e->submit(r);
    return drain(*e)[id];
  }

  // n = 3 sampled forks of a prompt whose last block holds 6 tokens: copy-on-write must copy
  // that shared block before any fork writes it, so fork i gets what the same request gets
  // alone with seed + i, and every block comes back.
  void expect_forks_get_what_they_get_alone(const EngineConfig& c) {
    auto e = make(c);
    EngineRequest r = greedy(prompt_of(70, 4), 10);
    r.n = 3;
    r.params.temperature = 0.7f;
    r.params.seed = 5;
    const RequestId id = *e->submit(r);
    auto got = drain(*e);
    for (int32_t i = 0; i < 3; ++i) {
      EngineRequest single = r;
      single.n = 1;
      single.params.seed = 5 + static_cast<uint64_t>(i);
      const Collected ref = alone(single, c);
      EXPECT_EQ(got[id].tokens.at(i), ref.tokens.at(0)) << "sequence " << i;
      EXPECT_LE(rel_err(got[id].logprobs.at(i), ref.logprobs.at(0)), kTolerance);
    }
    EXPECT_EQ(e->last_step().num_used_blocks, 0);
  }

  ThreadPool pool_;
  model::Model model_;
};

struct Shape {
  int32_t batch;
  int32_t chunk;
};

class EngineInvarianceTest : public EngineTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(EngineInvarianceTest, EveryRequestGetsWhatItGetsAlone) {
  EngineConfig c;
  c.max_num_batched_tokens = GetParam().chunk;
  auto e = make(c);
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < GetParam().batch; ++i) {
    requests.push_back(greedy(prompt_of(20 + 9 * i, i), 6 + i % 5));
    ids.push_back(*e->submit(requests.back()));
  }
  auto got = drain(*e);
  EXPECT_EQ(e->last_step().num_used_blocks, 0) << "leaked blocks";
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected ref = alone(requests[i]);
    const Collected& x = got[ids[i]];
    ASSERT_TRUE(x.finished);
    EXPECT_EQ(x.tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(rel_err(x.logprobs.at(0), ref.logprobs.at(0)), kTolerance) << "request " << i;
    EXPECT_EQ(x.finish.at(0), FinishReason::kLength);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EngineInvarianceTest,
                         ::testing::Values(Shape{1, 64}, Shape{3, 7}, Shape{16, 64}, Shape{3, 1},
                                           Shape{16, 7}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return "Batch" + std::to_string(i.param.batch) + "Chunk" +
                                  std::to_string(i.param.chunk);
                         });

class EnginePreemptionTest : public EngineTest,
                             public ::testing::WithParamInterface<PreemptionMode> {};

TEST_P(EnginePreemptionTest, PreemptedRequestsGetTheSameTokensAndNothingLeaks) {
  auto e = make(engine::test_util::preempting({}, GetParam()));
  const auto [requests, ids] = engine::test_util::submit_preempted(*e, 16);
  auto got = drain(*e);
  engine::test_util::expect_preemption_totals(*e, GetParam());
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  int preempted_requests = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected ref = alone(requests[i]);
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(rel_err(got[ids[i]].logprobs.at(0), ref.logprobs.at(0)), kTolerance);
    preempted_requests += got[ids[i]].metrics.num_preemptions > 0;
  }
  EXPECT_GT(preempted_requests, 0);
}

// Scoring requests (prompt_logits) under preemption in 16-token chunks: every prompt's logits
// within 1e-5 of the request run alone, and nothing leaks.
TEST_P(EnginePreemptionTest, PromptLogitsHoldUnderPreemption) {
  EngineConfig c = engine::test_util::preempting({}, GetParam());
  c.max_num_batched_tokens = 16;
  auto e = make(c);
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 16; ++i) {
    requests.push_back(greedy(prompt_of(40 + i, i), 24));
    requests.back().prompt_logits = true;
    ids.push_back(*e->submit(requests.back()));
  }
  auto got = drain(*e);
  engine::test_util::expect_preemption_totals(*e, GetParam());
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  const int64_t vocab = e->model().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected ref = alone(requests[i]);
    const auto rows = static_cast<int64_t>(requests[i].prompt.size());
    ASSERT_EQ(got[ids[i]].prompt_logits.size(), static_cast<size_t>(rows * vocab));
    ASSERT_EQ(ref.prompt_logits.size(), static_cast<size_t>(rows * vocab));
    EXPECT_LE(engine::test_util::max_row_rel_err(got[ids[i]].prompt_logits.data(),
                                                 ref.prompt_logits.data(), rows, vocab),
              kTolerance)
        << "request " << i;
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
  }
}

TEST_P(EnginePreemptionTest, CancellingPreemptedRequestsFreesEverything) {
  EngineConfig c;
  c.num_blocks = 1 + 12;
  c.max_num_batched_tokens = 64;
  c.watermark = 0.0;
  c.preemption_mode = GetParam();
  c.swap_space_bytes = int64_t{8} << 20;  // the default 4 GiB takes seconds to allocate
  auto e = make(c);
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 12; ++i) ids.push_back(*e->submit(greedy(prompt_of(40 + i, i), 40)));
  for (int step = 0; step < 12; ++step) ASSERT_TRUE(e->step().ok());
  EXPECT_GT(e->totals().num_preemptions, 0);
  for (const RequestId id : ids) e->cancel(id);
  drain(*e);
  EXPECT_FALSE(e->has_unfinished());
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  EXPECT_EQ(e->last_step().num_swapped, 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, EnginePreemptionTest,
                         ::testing::Values(PreemptionMode::kRecompute, PreemptionMode::kSwap),
                         [](const ::testing::TestParamInfo<PreemptionMode>& i) {
                           return i.param == PreemptionMode::kSwap ? "Swap" : "Recompute";
                         });

// log_softmax(row)[token], in double.
double log_softmax_at(const float* row, int64_t vocab, int32_t token) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
  return row[token] - max - std::log(sum);
}

// A scoring request's prompt logits: run alone, then within 1e-5 of that batched with others, in 7-token chunks, after a prefix hit (which a
// scoring request does not take: it computes its whole prompt); and the prompt logprobs of the
// same request are the log-softmax of its rows.
TEST_F(EngineTest, PromptLogitsAloneMatchBatchedChunkedAndAfterAPrefixHit) {
  const int64_t vocab = model_.vocab_size();
  const std::vector<int32_t> p = prompt_of(70, 9);
  const auto rows = static_cast<int64_t>(p.size());
  EngineRequest r = greedy(p, 3);
  r.prompt_logits = true;
  r.params.prompt_logprobs = 1;
  const Collected solo = alone(r);
  ASSERT_TRUE(solo.finished);
  ASSERT_EQ(solo.prompt_logits.size(), static_cast<size_t>(rows * vocab));
  ASSERT_EQ(solo.prompt_logprobs.size(), p.size());
  EXPECT_FALSE(solo.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < p.size(); ++i) {
    ASSERT_TRUE(solo.prompt_logprobs[i].has_value());
    EXPECT_NEAR(solo.prompt_logprobs[i]->logprob,
                log_softmax_at(&solo.prompt_logits[(i - 1) * static_cast<size_t>(vocab)], vocab,
                               p[i]),
                1e-5)
        << "prompt token " << i;
  }

  EngineConfig chunked;
  chunked.max_num_batched_tokens = 7;
  auto e = make(chunked);
  *e->submit(greedy(p, 5));  // caches the prompt's blocks first
  drain(*e);
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 3; ++i) ids.push_back(*e->submit(greedy(prompt_of(30 + i, i), 4)));
  const RequestId scored = *e->submit(r);
  auto got = drain(*e);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  ASSERT_EQ(got[scored].prompt_logits.size(), static_cast<size_t>(rows * vocab));
  EXPECT_LE(engine::test_util::max_row_rel_err(got[scored].prompt_logits.data(),
                                               solo.prompt_logits.data(), rows, vocab),
            kTolerance);
  EXPECT_EQ(got[scored].tokens.at(0), solo.tokens.at(0));
  EXPECT_EQ(got[scored].metrics.num_cached_tokens, 0) << "a scoring request computes its prompt";
  for (const RequestId id : ids) EXPECT_TRUE(got[id].prompt_logits.empty());
}

// A request that fits the pool but not the pool less the watermark runs on an idle engine, also
// when its prefix hit takes cached blocks off the free queue (it waited forever before).
TEST_F(EngineTest, AnIdleEngineAdmitsARequestTheWatermarkWouldKeepOut) {
  EngineConfig c;
  c.num_blocks = 64;  // 63 usable; the watermark keeps ceil(0.05 x 63) = 4 free
  c.watermark = 0.05;
  auto e = make(c);
  const EngineRequest r = greedy(prompt_of(60 * 16 - 4, 9), 4);  // 60 blocks
  const RequestId first = *e->submit(r);
  const RequestId again = *e->submit(r);  // after the first: a prefix hit of 59 cached blocks
  auto got = drain(*e);
  EXPECT_EQ(got[first].tokens[0].size(), 4u);
  EXPECT_EQ(got[again].tokens[0], got[first].tokens[0]);
  EXPECT_GT(e->totals().num_cached_prompt_tokens, 0);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST_F(EngineTest, APrefixHitGivesTheColdRunsTokens) {
  auto e = make();
  const auto [second, got] = engine::test_util::run_extended_prompt(*e);
  EXPECT_EQ(got.metrics.num_cached_tokens, 64);
  EXPECT_GE(e->last_step().num_cached_blocks, 64 / 16);  // the shared prefix's blocks at least
  const Collected ref = alone(second);
  EXPECT_EQ(got.tokens.at(0), ref.tokens.at(0));
  EXPECT_LE(rel_err(got.logprobs.at(0), ref.logprobs.at(0)), kTolerance);
}

// ---- quantized KV caches (issue 11): the same invariants on FP8 and INT8 pools ----------------

// The pool dtype, and the layers kept at F32 (--kv-cache-dtype-skip-layers): a mixed-dtype pool
// must hold the same invariants as a uniform one.
struct KvCase {
  DType dtype;
  std::vector<int32_t> f32_layers;
};

class EngineKvDTypeTest : public EngineTest, public ::testing::WithParamInterface<KvCase> {
 protected:
  EngineConfig quantized(EngineConfig c = {}) const {
    c.kv_cache_dtype = *kv::kv_cache_dtype_of(GetParam().dtype);
    c.calculate_kv_scales = true;  // FP8: scales from a calibration pass (ignored for INT8)
    c.kv_skip_layers.layers = GetParam().f32_layers;
    return c;
  }
  Collected alone_quantized(const EngineRequest& r) { return alone(r, quantized()); }
};

TEST_P(EngineKvDTypeTest, ThePoolHoldsEachLayersDtypeAndCountsItsBytes) {
  auto e = make(quantized());
  const std::vector<DType> dtypes = e->kv_cache().layer_dtypes;
  ASSERT_EQ(dtypes.size(), 2u);
  int64_t bytes = 0;
  int64_t scale_bytes = 0;
  for (int32_t l = 0; l < 2; ++l) {
    const bool f32 = std::find(GetParam().f32_layers.begin(), GetParam().f32_layers.end(), l) !=
                     GetParam().f32_layers.end();
    const DType d = f32 ? DType::kF32 : GetParam().dtype;
    EXPECT_EQ(dtypes[static_cast<size_t>(l)], d) << "layer " << l;
    // 2 (K, V) x 2 KV heads x (16 channels x element + the INT8 fp16 scale).
    const int64_t scale = d == DType::kI8 ? 2 : 0;
    bytes += 2 * 2 * (16 * dtype_size(d) + scale);
    scale_bytes += 2 * 2 * scale;
  }
  EXPECT_EQ(e->kv_cache().dtype, GetParam().dtype);
  EXPECT_EQ(e->kv_cache().bytes_per_token, bytes);
  EXPECT_EQ(e->kv_cache().scale_bytes_per_token, scale_bytes);
}

TEST_P(EngineKvDTypeTest, BatchedChunkedAndPrefixHitRequestsGetWhatTheyGetAlone) {
  EngineConfig c = quantized();
  c.max_num_batched_tokens = 7;
  auto e = make(c);
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 3; ++i) {
    requests.push_back(greedy(prompt_of(20 + 9 * i, i), 6));
    ids.push_back(*e->submit(requests.back()));
  }
  auto got = drain(*e);
  EXPECT_EQ(e->last_step().num_used_blocks, 0) << "leaked blocks";
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected ref = alone_quantized(requests[i]);
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(rel_err(got[ids[i]].logprobs.at(0), ref.logprobs.at(0)), kTolerance);
  }
  // A prefix hit on quantized blocks gives the cold run's tokens.
  std::vector<int32_t> p2 = prompt_of(64, 3);
  *e->submit(greedy(p2));
  drain(*e);
  p2.insert(p2.end(), {5, 6, 7, 8, 9});
  const RequestId hit = *e->submit(greedy(p2));
  auto after = drain(*e);
  EXPECT_EQ(after[hit].metrics.num_cached_tokens, 64);
  const Collected cold = alone_quantized(greedy(p2));
  EXPECT_EQ(after[hit].tokens.at(0), cold.tokens.at(0));
  EXPECT_LE(rel_err(after[hit].logprobs.at(0), cold.logprobs.at(0)), kTolerance);
  // The pool really is quantized: its tokens or logprobs differ from the F32 pool's.
  const Collected f32 = alone(greedy(p2));
  double diff = cold.tokens.at(0) == f32.tokens.at(0) ? 0.0 : 1.0;
  for (size_t t = 0; t < cold.logprobs.at(0).size(); ++t) {
    diff += std::abs(cold.logprobs.at(0)[t].logprob - f32.logprobs.at(0)[t].logprob);
  }
  EXPECT_GT(diff, 1e-5);
}

TEST_P(EngineKvDTypeTest, CopyOnWriteForksGetWhatTheyGetAlone) {
  expect_forks_get_what_they_get_alone(quantized());
}

TEST_P(EngineKvDTypeTest, SwappedRequestsGetTheSameTokensAndNothingLeaks) {
  EngineConfig c = quantized();
  c.num_blocks = 1 + 12;
  c.max_num_batched_tokens = 64;
  c.watermark = 0.0;
  c.preemption_mode = PreemptionMode::kSwap;
  c.swap_space_bytes = int64_t{8} << 20;  // the default 4 GiB takes seconds to allocate
  auto e = make(c);
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 8; ++i) {
    requests.push_back(greedy(prompt_of(40 + i, i), 24));
    ids.push_back(*e->submit(requests.back()));
  }
  auto got = drain(*e);
  EXPECT_GT(e->totals().num_swapped_out_blocks, 0);
  EXPECT_EQ(e->totals().num_swapped_in_blocks, e->totals().num_swapped_out_blocks);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected ref = alone_quantized(requests[i]);
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(rel_err(got[ids[i]].logprobs.at(0), ref.logprobs.at(0)), kTolerance);
  }
}

std::string kv_case_name(const ::testing::TestParamInfo<KvCase>& i) {
  std::string name = i.param.dtype == DType::kF8E4M3   ? "Fp8E4M3"
                     : i.param.dtype == DType::kF8E5M2 ? "Fp8E5M2"
                                                       : "Int8";
  for (const int32_t l : i.param.f32_layers) name += "Layer" + std::to_string(l) + "F32";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Quantized, EngineKvDTypeTest,
                         ::testing::Values(KvCase{DType::kF8E4M3, {}}, KvCase{DType::kF8E5M2, {}},
                                           KvCase{DType::kI8, {}}),
                         kv_case_name);
// Per-layer exceptions (--kv-cache-dtype-skip-layers): one layer F32, the other quantized, so
// the pool's layers differ in size and the F32 layer sits before or after the quantized one.
INSTANTIATE_TEST_SUITE_P(Mixed, EngineKvDTypeTest,
                         ::testing::Values(KvCase{DType::kI8, {0}}, KvCase{DType::kF8E4M3, {1}},
                                           KvCase{DType::kI8, {1}}),
                         kv_case_name);

TEST_F(EngineTest, ASkippedLayerChangesTheOutputAndAnOutOfRangeOneIsRefused) {
  EngineConfig uniform;
  uniform.kv_cache_dtype = KvCacheDType::kFp8E5M2;
  uniform.calculate_kv_scales = true;
  EngineConfig mixed = uniform;
  mixed.kv_skip_layers.layers = {0};
  EngineConfig all = uniform;
  all.kv_skip_layers.layers = {1, 0};
  const EngineRequest r = greedy(prompt_of(40, 2), 8);
  const Collected u = alone(r, uniform);
  const Collected m = alone(r, mixed);
  const Collected a = alone(r, all);
  const Collected f32 = alone(r);
  auto distance = [](const Collected& x, const Collected& y) {
    double d = x.tokens.at(0) == y.tokens.at(0) ? 0.0 : 1.0;
    for (size_t t = 0; t < x.logprobs.at(0).size(); ++t) {
      d += std::abs(x.logprobs.at(0)[t].logprob - y.logprobs.at(0)[t].logprob);
    }
    return d;
  };
  EXPECT_GT(distance(m, u), 1e-5) << "layer 0 at F32 must change the output";
  EXPECT_GT(distance(m, f32), 1e-5) << "layer 1 is still quantized";
  // Every layer skipped: the F32 pool's results exactly.
  EXPECT_EQ(a.tokens.at(0), f32.tokens.at(0));
  EXPECT_LE(rel_err(a.logprobs.at(0), f32.logprobs.at(0)), kTolerance);

  EngineConfig bad = uniform;
  bad.num_blocks = 64;
  bad.kv_skip_layers.layers = {2};
  auto e = engine::create_engine(model_, pool_, bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("layer 2 is out of range (the model has 2 layers, 0..1)"),
            std::string::npos)
      << e.status().message();
}

TEST_F(EngineTest, Fp8WithoutScalesIsRefusedUnlessAllowedAndGpuOnlyOptionsAreChecked) {
  EngineConfig c;
  c.num_blocks = 64;
  c.kv_cache_dtype = KvCacheDType::kFp8E4M3;
  auto refused = engine::create_engine(model_, pool_, c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--calculate-kv-scales"), std::string::npos)
      << refused.status().message();
  c.allow_unit_kv_scales = true;
  auto unit = engine::create_engine(model_, pool_, c);
  ASSERT_TRUE(unit.ok()) << unit.status().to_string();
  EXPECT_EQ((*unit)->kv_cache().scales_source, "1.0 (--allow-unit-kv-scales)");
  EXPECT_EQ((*unit)->kv_cache().bytes_per_token,
            (*unit)->kv_cache().scale_bytes_per_token + 2 * model_.config().num_hidden_layers *
                                                            model_.config().num_key_value_heads *
                                                            model_.config().head_dim);
  c.kv_cache_dtype = KvCacheDType::kInt8;
  c.allow_unit_kv_scales = false;
  auto int8 = engine::create_engine(model_, pool_, c);
  ASSERT_TRUE(int8.ok()) << int8.status().to_string();
  EXPECT_EQ((*int8)->kv_cache().scale_bytes_per_token,
            2 * 2 * model_.config().num_hidden_layers * model_.config().num_key_value_heads);
  EXPECT_TRUE((*int8)->kv_cache().scales_source.empty());
  // On the GPU, float16 KV (bf16 activations) is refused before any device work; int8, fp8,
  // int4 and --kv-quant-check are accepted there (tests/engine/cuda_engine_test.cc).
  c.device = Device::kCuda;
  c.kv_cache_dtype = KvCacheDType::kF16;
  const Status f16 = Engine::create(c).status();
  EXPECT_EQ(f16.code(), StatusCode::kUnsupported) << f16.to_string();
  EXPECT_NE(f16.message().find("float16 is not supported on --device cuda"), std::string::npos);
  // float32 too: it is never silently bf16 there (auto is what picks the device's precision).
  c.kv_cache_dtype = KvCacheDType::kF32;
  const Status f32 = Engine::create(c).status();
  EXPECT_EQ(f32.code(), StatusCode::kUnsupported) << f32.to_string();
  EXPECT_NE(f32.message().find("float32 is not supported on --device cuda"), std::string::npos);
  // FP8 weights (--quantization fp8) have no CPU path yet: refused before anything loads.
  c.device = Device::kCpu;
  c.quantization = WeightQuantization::kFp8;
  const Status fp8_cpu = Engine::create(c).status();
  EXPECT_EQ(fp8_cpu.code(), StatusCode::kUnsupported) << fp8_cpu.to_string();
  EXPECT_NE(fp8_cpu.message().find("--quantization fp8 is not supported on --device cpu"),
            std::string::npos);
  c.quantization = WeightQuantization::kNone;
  c.device = Device::kCuda;
  // A bad --kv-quant-check-threshold is refused on either device, even where the measurement
  // would not run (a bf16 pool on the GPU).
  c.kv_cache_dtype = KvCacheDType::kBF16;
  c.kv_quant_check = true;
  c.kv_quant_check_threshold = -1.0;
  const Status threshold = Engine::create(c).status();
  EXPECT_EQ(threshold.code(), StatusCode::kInvalidArgument) << threshold.to_string();
  EXPECT_NE(threshold.message().find("--kv-quant-check-threshold"), std::string::npos);
  c.kv_quant_check = false;
  c.device = Device::kCpu;
  c.kv_cache_dtype = static_cast<KvCacheDType>(99);  // not a dtype at all
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument);
}

// A step's time splits into scheduling, the runner's forward pass and the host's own work after
// it: the forward pass is timed only when something ran, and lies inside the step.
TEST_F(EngineTest, StepStatsTimeTheForwardPassInsideTheStep) {
  auto e = make();
  ASSERT_TRUE(e->step().ok());  // nothing submitted: nothing ran
  EXPECT_EQ(e->last_step().forward_seconds, 0.0);
  static_cast<void>(*e->submit(greedy(prompt_of(40, 3), 3)));
  while (e->has_unfinished()) {
    ASSERT_TRUE(e->step().ok());
    const EngineStepStats& st = e->last_step();
    EXPECT_GT(st.forward_seconds, 0.0);
    EXPECT_LE(st.schedule_seconds + st.forward_seconds, st.step_seconds);
  }
}

// EngineConfig::warm_up: kAuto leaves the CPU cold; kOn runs its request (the largest prompt
// step, here max_num_batched_tokens, then one decode step) before create_engine returns and
// leaves nothing behind -- no block in use or cached, zero totals, ids from 1 -- so the same
// requests get the same tokens and logprobs, and the same totals, as on a cold engine.
TEST_F(EngineTest, TheWarmUpRunsWhereAskedAndLeavesNoBlockCountOrId) {
  std::vector<std::map<RequestId, Collected>> runs;
  std::vector<EngineTotals> totals;
  for (const WarmUp w : {WarmUp::kOn, WarmUp::kAuto, WarmUp::kOff}) {
    EngineConfig c;
    c.block_size = 16;
    c.max_num_batched_tokens = 96;
    c.warm_up = w;
    auto e = make(c);
    const WarmUpInfo& info = e->warm_up();
    if (w == WarmUp::kOn) {
      EXPECT_EQ(info.prompt_tokens, 96);
      EXPECT_EQ(info.steps, 2);
      EXPECT_GT(info.seconds, 0.0);
    } else {
      EXPECT_EQ(info.steps, 0) << "the CPU warms up only when asked";
    }
    EXPECT_EQ(e->totals().num_steps, 0);
    EXPECT_EQ(e->totals().num_prompt_tokens, 0);
    EXPECT_EQ(e->totals().num_generated_tokens, 0);
    for (const KvGroupStats& g : e->kv_groups()) EXPECT_EQ(g.num_used_blocks, 0);
    EXPECT_EQ(e->last_step().num_cached_blocks, 0);
    const Result<RequestId> first = e->submit(greedy(prompt_of(50, 1), 6));
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, 1u);
    ASSERT_TRUE(e->submit(greedy(prompt_of(130, 2), 4)).ok());
    runs.push_back(drain(*e));
    totals.push_back(e->totals());
    EXPECT_EQ(e->last_step().num_used_blocks, 0);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    for (const auto& [id, got] : runs[0]) {
      EXPECT_EQ(got.tokens, runs[i].at(id).tokens) << "request " << id;
      EXPECT_LE(rel_err(got.logprobs.at(0), runs[i].at(id).logprobs.at(0)), kTolerance);
    }
    EXPECT_EQ(totals[0].num_steps, totals[i].num_steps);
    EXPECT_EQ(totals[0].num_prompt_tokens, totals[i].num_prompt_tokens);
    EXPECT_EQ(totals[0].prefix_hit_tokens, totals[i].prefix_hit_tokens);
  }
}

TEST_F(EngineTest, CancelFreesBlocksAtOnceAndReportsTheRequestOnce) {
  auto e = make();
  const RequestId a = *e->submit(greedy(prompt_of(50, 1), 100));
  const RequestId b = *e->submit(greedy(prompt_of(30, 2), 5));
  ASSERT_TRUE(e->step().ok());
  ASSERT_TRUE(e->step().ok());
  const int32_t used = e->last_step().num_used_blocks;
  e->cancel(a);
  auto out = e->step();
  ASSERT_TRUE(out.ok());
  bool reported = false;
  for (const RequestOutput& o : *out) {
    if (o.id == a) {
      reported = true;
      EXPECT_TRUE(o.finished && o.cancelled);
      EXPECT_TRUE(o.deltas.empty());
    }
  }
  EXPECT_TRUE(reported);
  EXPECT_LT(e->last_step().num_used_blocks, used);
  auto rest = drain(*e);
  EXPECT_FALSE(rest.contains(a)) << "a cancelled request is reported once";
  EXPECT_TRUE(rest[b].finished);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  e->cancel(a);  // unknown by now: ignored
  e->cancel(12345);
}

// The step stats count the prefix cache's blocks: a finished 40-token prompt leaves its two full
// blocks cached (the third, partly filled, is not), none with prefix caching off.
TEST_F(EngineTest, StepStatsCountThePrefixCachesBlocks) {
  for (const bool caching : {true, false}) {
    EngineConfig c;
    c.block_size = 16;
    c.enable_prefix_caching = caching;
    auto e = make(c);
    ASSERT_TRUE(e->submit(greedy(prompt_of(40, 3), 3)).ok());
    drain(*e);
    EXPECT_EQ(e->last_step().num_cached_blocks, caching ? 2 : 0) << "caching " << caching;
    EXPECT_EQ(e->last_step().num_used_blocks, 0);
  }
}

TEST_F(EngineTest, RandomSubmitCancelFinishNeverLeaksOrOvercommits) {
  EngineConfig c;
  c.num_blocks = 1 + 24;
  c.max_num_batched_tokens = 48;
  c.max_num_seqs = 6;
  auto e = make(c);
  std::mt19937 rng(7);
  std::vector<RequestId> live;
  for (int iter = 0; iter < 400; ++iter) {
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    if (op < 3) {
      EngineRequest r = greedy(prompt_of(std::uniform_int_distribution<int>(1, 60)(rng), iter),
                               std::uniform_int_distribution<int>(1, 20)(rng));
      r.n = std::uniform_int_distribution<int>(1, 3)(rng);
      r.params.temperature = 0.8f;
      r.params.seed = static_cast<uint64_t>(iter);
      live.push_back(*e->submit(r));
    } else if (op < 4 && !live.empty()) {
      e->cancel(live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)]);
    } else {
      auto out = e->step();
      ASSERT_TRUE(out.ok());
      const EngineStepStats& st = e->last_step();
      ASSERT_GE(st.num_free_blocks, 0);
      ASSERT_EQ(st.num_used_blocks + st.num_free_blocks, 24);
      ASSERT_LE(st.num_running, c.max_num_seqs * 3);  // n > 1 forks beyond max_num_seqs
      ASSERT_LE(st.num_prefill_tokens + st.num_decode_tokens, c.max_num_batched_tokens);
    }
  }
  drain(*e);
  EXPECT_EQ(e->last_step().num_used_blocks, 0) << "leaked blocks";
}

TEST_F(EngineTest, PriorityPolicyRunsLowerValuesFirst) {
  EngineConfig c;
  c.policy = SchedulingPolicy::kPriority;
  c.max_num_seqs = 1;
  auto e = make(c);
  std::vector<RequestId> ids;
  for (int32_t p : {5, 1, 3, 0}) {
    EngineRequest r = greedy(prompt_of(10, p), 3);
    r.priority = p;
    ids.push_back(*e->submit(r));
  }
  std::vector<RequestId> order;
  while (e->has_unfinished()) {
    auto step = e->step();
    ASSERT_TRUE(step.ok());
    for (const RequestOutput& o : *step) {
      if (o.finished) order.push_back(o.id);
    }
  }
  EXPECT_EQ(order, (std::vector<RequestId>{ids[3], ids[1], ids[2], ids[0]}));
}

TEST_F(EngineTest, NGreaterThanOneSharesThePromptsBlocksAndSeedsEachSequence) {
  EngineConfig c;
  c.block_size = 16;
  auto e = make(c);
  EngineRequest r = greedy(prompt_of(64, 9), 8);  // 4 full blocks
  r.n = 4;
  r.params.temperature = 1.0f;
  r.params.seed = 11;
  const RequestId id = *e->submit(r);
  Collected head;
  auto first = e->step();  // prefill + fork + first tokens
  ASSERT_TRUE(first.ok());
  for (const RequestOutput& o : *first) absorb(head, o);
  EXPECT_EQ(head.tokens.size(), 4u) << "every sequence got its first token in the prefill step";
  // The prompt's 4 blocks once: no block for the output tokens until they are computed.
  EXPECT_EQ(e->last_step().num_used_blocks, 4);
  auto second = e->step();
  ASSERT_TRUE(second.ok());
  for (const RequestOutput& o : *second) absorb(head, o);
  // Each sequence appends into a block of its own; the prompt's blocks stay shared.
  EXPECT_EQ(e->last_step().num_used_blocks, 4 + 4);
  auto got = drain(*e);
  for (auto& [index, tokens] : head.tokens) {
    tokens.insert(tokens.end(), got[id].tokens[index].begin(), got[id].tokens[index].end());
  }
  got[id].tokens = head.tokens;
  ASSERT_EQ(got[id].tokens.size(), 4u);
  EXPECT_NE(got[id].tokens[0], got[id].tokens[1]) << "siblings draw with different seeds";
  // Sequence i equals a single request seeded with seed + i.
  for (int32_t i = 0; i < 4; ++i) {
    EngineRequest single = r;
    single.n = 1;
    single.params.seed = 11 + static_cast<uint64_t>(i);
    EXPECT_EQ(got[id].tokens.at(i), alone(single).tokens.at(0)) << "sequence " << i;
  }
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST_F(EngineTest, NGreaterThanOneCopiesAPartlyFilledSharedBlockBeforeWritingIt) {
  expect_forks_get_what_they_get_alone({});
}

TEST_F(EngineTest, StaticBaselineRunsOneBatchToItsEndBeforeAdmittingMore) {
  EngineConfig c;
  c.scheduler = SchedulerKind::kStatic;
  c.max_batch_size = 4;
  c.batch_timeout_ms = 0.0;
  auto e = make(c);
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 8; ++i) {
    requests.push_back(greedy(prompt_of(12 + i, i), 2 + 3 * i));
    ids.push_back(*e->submit(requests.back()));
  }
  std::map<RequestId, Collected> got;
  std::map<RequestId, int64_t> first_step, last_step;
  for (int64_t step = 0; e->has_unfinished(); ++step) {
    auto out = e->step();
    ASSERT_TRUE(out.ok());
    EXPECT_LE(e->last_step().num_running, 4);
    for (const RequestOutput& o : *out) {
      absorb(got[o.id], o);
      if (!first_step.contains(o.id)) first_step[o.id] = step;
      if (o.finished) last_step[o.id] = step;
    }
  }
  int64_t first_batch_end = 0;
  for (int32_t i = 0; i < 4; ++i) first_batch_end = std::max(first_batch_end, last_step[ids[i]]);
  for (int32_t i = 4; i < 8; ++i) {
    EXPECT_GT(first_step[ids[i]], first_batch_end) << "request " << i << " joined a running batch";
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[ids[i]].tokens.at(0), alone(requests[i]).tokens.at(0));
  }
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST_F(EngineTest, ContiguousBaselineAdmitsOnlyWhatFullLengthReservationsAllow) {
  EngineConfig c;
  c.allocator = KvAllocatorKind::kContiguous;
  c.num_blocks = 1 + 64;  // 1024 slots
  c.max_model_len = 300;  // 3 reservations fit
  auto e = make(c);
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < 8; ++i) ids.push_back(*e->submit(greedy(prompt_of(20, i), 10)));
  int32_t most = 0;
  while (e->has_unfinished()) {
    ASSERT_TRUE(e->step().ok());
    most = std::max(most, e->last_step().num_running);
  }
  EXPECT_EQ(most, 3);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST(EngineTextTest, ATextPromptIsEncodedWithTheModelsTokenizer) {
  EngineConfig c;
  c.model_dir = std::string(STRATA_MODELS_DIR) + "/strata-tiny";
  c.num_blocks = 64;
  c.num_threads = 2;
  auto created = Engine::create(c);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Engine& e = **created;
  EngineRequest text = greedy({}, 6);
  text.prompt_text = "And it came to pass";
  const RequestId a = *e.submit(text);
  const auto tok = tokenizer::Tokenizer::load(c.model_dir);
  const RequestId b = *e.submit(greedy(tok.encode("And it came to pass", true), 6));
  std::map<RequestId, std::vector<int32_t>> got;
  while (e.has_unfinished()) {
    auto out = e.step();
    ASSERT_TRUE(out.ok());
    for (const RequestOutput& o : *out) {
      for (const CompletionDelta& d : o.deltas) {
        got[o.id].insert(got[o.id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
  }
  EXPECT_EQ(got[a], got[b]);
  EXPECT_EQ(got[a].size(), 6u);
  EngineConfig no_tokenizer;
  no_tokenizer.num_blocks = 64;
  ThreadPool pool(1);
  model::Model m = model::Model::load({kModels + "llama3-gqa"});
  auto plain = engine::create_engine(m, pool, no_tokenizer);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->submit(text).ok()) << "no tokenizer: a clear error";
}

TEST_F(EngineTest, RejectsBadRequestsWithoutQueueingThem) {
  auto e = make();
  EXPECT_FALSE(e->submit(greedy({})).ok());
  EXPECT_FALSE(e->submit(greedy({1, 99999})).ok());
  EngineRequest r = greedy({1, 2});
  r.n = 0;
  EXPECT_FALSE(e->submit(r).ok());
  r.n = 1;
  r.params.max_tokens = 1 << 30;
  EXPECT_FALSE(e->submit(r).ok());
  EXPECT_FALSE(e->has_unfinished());
  EngineConfig bad;
  bad.block_size = 12;
  EXPECT_FALSE(engine::create_engine(model_, pool_, bad).ok());
}

TEST(EngineWindowTest, ASlidingWindowSequenceHoldsOnlyItsWindow) {
  ThreadPool pool(2);
  model::Model model = model::Model::load({kModels + "mistral-swa"});  // 64-token window
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = 1 + 8;
  c.max_num_batched_tokens = 16;
  auto created = engine::create_engine(model, pool, c);
  ASSERT_TRUE(created.ok());
  auto e = std::move(*created);
  *e->submit(greedy(prompt_of(20, 1), 640));
  int32_t peak_decode = 0;
  while (e->has_unfinished()) {
    ASSERT_TRUE(e->step().ok());
    if (e->last_step().num_prefill_tokens == 0) {
      peak_decode = std::max(peak_decode, e->last_step().num_used_blocks);
    }
  }
  EXPECT_LE(peak_decode, 64 / 16 + 1);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

}  // namespace
}  // namespace strata
