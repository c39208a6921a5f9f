// `strata plan --device cpu` against the CPU engine it plans for: the same settings must give the
// same pools -- group 0's blocks and bytes per block, and every pool the scheduler's limits size
// (INT4's newest blocks, a hybrid model's windowed layers) -- because both size them with
// kv::plan_kv_groups. A plan that drifted from the engine fails here, whichever side moved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/strata/plan_command.h"
#include "engine_testing.h"
#include "kv/capacity_plan.h"
#include "kv/kv_cache_dtype.h"
#include "strata/engine.h"

namespace strata {
namespace {

struct Case {
  const char* name;
  KvCacheDType dtype = KvCacheDType::kAuto;
  std::vector<int32_t> skip_layers;
  int32_t kv_int4_residual = 0;
  bool hybrid = false;
  bool disable_hybrid = false;
  const char* fixture = "llama3-gqa";  // of tests/data/models, unless hybrid
};

std::string config_text(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PlanMatchesEngineTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanMatchesEngineTest, SameSettingsSamePools) {
  const Case& c = GetParam();
  const std::filesystem::path dir =
      c.hybrid ? engine::test_util::hybrid_model_dir()
               : std::filesystem::path(STRATA_TEST_DATA_DIR) / "models" / c.fixture;

  EngineConfig ec;
  ec.model_dir = dir.string();
  ec.num_threads = 1;
  ec.kv_cache_dtype = c.dtype;
  ec.allow_unit_kv_scales = true;  // FP8: no checkpoint scales in the fixture
  ec.kv_skip_layers.layers = c.skip_layers;
  ec.kv_int4_residual = c.kv_int4_residual;
  ec.kv_cache_memory_bytes = int64_t{3} << 20;
  ec.max_num_seqs = 5;
  ec.max_num_batched_tokens = 96;
  ec.disable_hybrid_kv_cache_manager = c.disable_hybrid;
  auto engine = Engine::create(ec);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::vector<KvGroupStats> groups = (*engine)->kv_groups();

  kv::PlanSettings s;
  s.kv_dtype = c.dtype;
  s.skip_layers.layers = c.skip_layers;
  s.kv_int4_residual = c.kv_int4_residual;
  s.device = kv::PlanDevice::kCpu;
  s.kv_cache_memory_bytes = ec.kv_cache_memory_bytes;
  s.max_num_seqs = ec.max_num_seqs;
  s.max_num_batched_tokens = ec.max_num_batched_tokens;
  s.max_model_len = 256;  // the plan refuses a pool that cannot hold one full-length sequence
  s.disable_hybrid_kv_cache_manager = c.disable_hybrid;
  const kv::PlanReport plan =
      kv::compute_plan(cli::parse_plan_model(config_text(dir), c.name), s);

  ASSERT_EQ(groups.size(), plan.limit_sized_groups.size() + 1);
  EXPECT_EQ(groups[0].block_bytes, plan.block_bytes);
  EXPECT_EQ(groups[0].num_blocks, plan.num_blocks + 1) << "the plan does not count the null block";
  for (size_t g = 1; g < groups.size(); ++g) {
    const kv::PlanGroup& p = plan.limit_sized_groups[g - 1];
    SCOPED_TRACE("group " + std::to_string(g) + ": " + groups[g].kind);
    EXPECT_EQ(groups[g].kind, p.kind);
    EXPECT_EQ(groups[g].window, p.window);
    EXPECT_EQ(groups[g].newest_blocks, p.newest_blocks);
    EXPECT_EQ(groups[g].num_blocks, p.num_blocks);
    EXPECT_EQ(groups[g].block_bytes, p.block_bytes);
    EXPECT_EQ(groups[g].pool_bytes(), p.bytes);
  }
}

// name, KV dtype, skipped layers, --kv-int4-residual, hybrid fixture, hybrid groups off, fixture.
INSTANTIATE_TEST_SUITE_P(
    Cpu, PlanMatchesEngineTest,
    ::testing::Values(
        Case{"auto", KvCacheDType::kAuto, {}, 0, false, false},
        Case{"bf16", KvCacheDType::kBF16, {}, 0, false, false},
        Case{"fp8", KvCacheDType::kFp8E4M3, {}, 0, false, false},
        Case{"int8_skip0", KvCacheDType::kInt8, {0}, 0, false, false},
        Case{"int4", KvCacheDType::kInt4, {}, 32, false, false},
        Case{"int4_skip1", KvCacheDType::kInt4, {1}, 0, false, false},
        Case{"hybrid", KvCacheDType::kAuto, {}, 0, true, false},
        Case{"hybrid_int8", KvCacheDType::kInt8, {}, 0, true, false},
        Case{"hybrid_one_pool", KvCacheDType::kAuto, {}, 0, true, true},
        Case{"gemma3", KvCacheDType::kAuto, {}, 0, false, false, "gemma3-hybrid"},
        Case{"gemma3_bf16", KvCacheDType::kBF16, {}, 0, false, false, "gemma3-hybrid"},
        Case{"gemma3_one_pool", KvCacheDType::kAuto, {}, 0, false, true, "gemma3-hybrid"},
        Case{"deepseek_v2_mla", KvCacheDType::kAuto, {}, 0, false, false, "deepseek-v2-mla"},
        Case{"deepseek_v3_mla_bf16", KvCacheDType::kBF16, {}, 0, false, false, "deepseek-v3-mla"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace strata
