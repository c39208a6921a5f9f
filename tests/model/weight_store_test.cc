#include "model/weight_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

using testing::raw_bytes;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::TestTensor;
using testing::write_file;

// Runs `fn` and returns the strata::Error message; fails the test if nothing is thrown.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no strata::Error thrown";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TestTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, float first) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = first + static_cast<float>(i);
  return {name, "F32", std::move(shape), raw_bytes(values)};
}

void write_index(const TempDir& dir, const std::string& weight_map_json) {
  write_file(dir / "model.safetensors.index.json",
             R"({"metadata":{"total_size":0},"weight_map":)" + weight_map_json + "}");
}

TEST(WeightStoreTest, LoadsSingleFile) {
  TempDir dir;
  write_file(dir / "model.safetensors",
             safetensors_bytes({f32_tensor("b", {2}, 10), f32_tensor("a", {2, 2}, 0)}));
  const WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.num_tensors(), 2u);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(store.contains("a"));
  EXPECT_FALSE(store.contains("c"));
  const TensorView b = store.get("b");
  EXPECT_EQ(load_as_f32(b.data, b.dtype, 1), 11.0f);
  EXPECT_EQ(store.source(), dir.path().string());
}

TEST(WeightStoreTest, LoadsShardedCheckpoint) {
  TempDir dir;
  write_file(dir / "model-00001-of-00002.safetensors",
             safetensors_bytes({f32_tensor("embed", {4}, 0), f32_tensor("l0", {2}, 100)}));
  write_file(dir / "model-00002-of-00002.safetensors",
             safetensors_bytes({f32_tensor("l1", {3}, 200)}));
  write_index(dir, R"({"embed":"model-00001-of-00002.safetensors",)"
                   R"("l0":"model-00001-of-00002.safetensors",)"
                   R"("l1":"model-00002-of-00002.safetensors"})");
  const WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"embed", "l0", "l1"}));
  const TensorView l1 = store.get_checked("l1", {3});
  EXPECT_EQ(load_as_f32(l1.data, l1.dtype, 2), 202.0f);
  const TensorView l0 = store.get("l0");
  EXPECT_EQ(load_as_f32(l0.data, l0.dtype, 0), 100.0f);
}

TEST(WeightStoreTest, MissingShardIsAnError) {
  TempDir dir;
  write_file(dir / "a.safetensors", safetensors_bytes({f32_tensor("x", {1}, 0)}));
  write_index(dir, R"({"x":"a.safetensors","y":"b.safetensors"})");
  const std::string msg = error_of([&] { (void)WeightStore::open(dir.path()); });
  EXPECT_CONTAINS(msg, "shard 'b.safetensors'");
  EXPECT_CONTAINS(msg, "is missing from");
}

TEST(WeightStoreTest, TensorInTwoShardsIsAnError) {
  TempDir dir;
  write_file(dir / "a.safetensors", safetensors_bytes({f32_tensor("x", {1}, 0)}));
  write_file(dir / "b.safetensors",
             safetensors_bytes({f32_tensor("x", {1}, 0), f32_tensor("y", {1}, 0)}));
  write_index(dir, R"({"x":"a.safetensors","y":"b.safetensors"})");
  const std::string msg = error_of([&] { (void)WeightStore::open(dir.path()); });
  EXPECT_CONTAINS(msg, "tensor 'x' appears in two shards");
  EXPECT_CONTAINS(msg, "a.safetensors and b.safetensors");
}

TEST(WeightStoreTest, TensorListedInIndexButAbsentFromItsShardIsAnError) {
  TempDir dir;
  write_file(dir / "a.safetensors", safetensors_bytes({f32_tensor("x", {1}, 0)}));
  write_file(dir / "b.safetensors", safetensors_bytes({f32_tensor("y", {1}, 0)}));
  write_index(dir, R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  const std::string msg = error_of([&] { (void)WeightStore::open(dir.path()); });
  EXPECT_CONTAINS(msg, "tensor 'y' is listed in");
  EXPECT_CONTAINS(msg, "under shard 'a.safetensors', but that shard does not contain it");
}

TEST(WeightStoreTest, MalformedIndexIsAnError) {
  TempDir dir;
  write_index(dir, R"({"x":"../outside.safetensors"})");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "must be the file name of a shard in the same directory");
  write_index(dir, "[]");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "'weight_map' must be an object");
  write_file(dir / "model.safetensors.index.json", R"({"metadata":{}})");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }), "missing 'weight_map'");
  write_file(dir / "model.safetensors.index.json", "{");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "safetensors index is not valid JSON");
}

TEST(WeightStoreTest, DeeplyNestedIndexIsOneBoundedLine) {
  TempDir dir;
  // A weight_map entry nested a million levels deep overflowed the stack when the message
  // quoted it; the parser refuses it first.
  write_index(dir, "{\"x\": " + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "safetensors index is not valid JSON: arrays and objects nest deeper than 128");
  // Within the limit but large: the entry is quoted, cut.
  write_index(dir, "{\"x\": [\"" + std::string(1 << 20, 'y') + "\"]}");
  const std::string msg = error_of([&] { (void)WeightStore::open(dir.path()); });
  EXPECT_CONTAINS(msg, "must be the file name of a shard in the same directory, got '[\"yyy");
  EXPECT_LT(msg.size(), 600u);
}

TEST(WeightStoreTest, WeightsThatAreNotRegularFilesAreNamed) {
  TempDir dir;
  std::filesystem::create_symlink("/dev/zero", dir / "model.safetensors");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "it is a character device, not a regular file");
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_symlink("model.safetensors", dir / "model.safetensors");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir.path()); }),
                  "Too many levels of symbolic links");
}

TEST(WeightStoreTest, DirectoryWithoutWeightsNamesWhatWasLookedFor) {
  TempDir dir;
  const std::string msg = error_of([&] { (void)WeightStore::open(dir.path()); });
  EXPECT_CONTAINS(msg, dir.path().string());
  EXPECT_CONTAINS(msg, "looked for model.safetensors and model.safetensors.index.json");
  EXPECT_CONTAINS(error_of([&] { (void)WeightStore::open(dir / "nope"); }), "does not exist");
}

TEST(WeightStoreTest, MissingTensorNamesTensorAndDirectory) {
  TempDir dir;
  write_file(dir / "model.safetensors", safetensors_bytes({f32_tensor("a", {1}, 0)}));
  const WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(error_of([&] { (void)store.get("lm_head.weight"); }),
            "missing tensor 'lm_head.weight' in " + dir.path().string());
}

TEST(WeightStoreTest, ShapeMismatchSaysBothShapes) {
  TempDir dir;
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  write_file(dir / "model.safetensors", safetensors_bytes({f32_tensor(name, {64, 32}, 0)}));
  const WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.get_checked(name, {64, 32}).dim(1), 32);
  EXPECT_CONTAINS(error_of([&] {
                    (void)store.get_checked(name, {64, 64});
                  }),
                  "tensor 'model.layers.0.self_attn.q_proj.weight' has shape [64, 32], "
                  "expected [64, 64]");
  EXPECT_CONTAINS(error_of([&] {
                    (void)store.get_checked(name, {64, 32, 1});
                  }),
                  "expected [64, 32, 1]");
}

TEST(WeightStoreTest, ViewsSurviveMovingTheStore) {
  TempDir dir;
  write_file(dir / "model.safetensors", safetensors_bytes({f32_tensor("a", {2}, 5)}));
  WeightStore store = WeightStore::open(dir.path());
  const TensorView before = store.get("a");
  const WeightStore moved = std::move(store);
  EXPECT_EQ(moved.get("a").data, before.data);
  EXPECT_EQ(load_as_f32(before.data, before.dtype, 1), 6.0f);
}

// WeightResidency::kAnonymous: the same bytes as the mapping, at an address of the same alignment
// modulo 64, in memory of the store's own (not the file's mapping), kept across moves.
TEST(WeightStoreTest, AnonymousCopyHoldsTheMappedBytes) {
  TempDir dir;
  write_file(dir / "model-00001-of-00002.safetensors",
             safetensors_bytes({f32_tensor("embed", {40, 3}, 0), f32_tensor("l0", {7}, 100)}));
  write_file(dir / "model-00002-of-00002.safetensors",
             safetensors_bytes({f32_tensor("l1", {3}, 200)}));
  write_index(dir, R"({"embed":"model-00001-of-00002.safetensors",)"
                   R"("l0":"model-00001-of-00002.safetensors",)"
                   R"("l1":"model-00002-of-00002.safetensors"})");
  const WeightStore mapped = WeightStore::open(dir.path(), WeightResidency::kMapped);
  WeightStore copied = WeightStore::open(dir.path(), WeightResidency::kAnonymous);
  for (const std::string& name : mapped.names()) {
    const TensorView m = mapped.get(name);
    const TensorView c = copied.get(name);
    EXPECT_NE(m.data, c.data) << name;
    EXPECT_EQ(std::memcmp(m.data, c.data, static_cast<size_t>(m.nbytes())), 0) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data) % 64, reinterpret_cast<uintptr_t>(c.data) % 64)
        << name;
  }
  const TensorView before = copied.get("l1");
  const WeightStore moved = std::move(copied);
  EXPECT_EQ(moved.get("l1").data, before.data);
  EXPECT_EQ(load_as_f32(before.data, before.dtype, 2), 202.0f);
}

// A misaligned tensor is named in either residency, never read through a misaligned pointer.
TEST(WeightStoreTest, MisalignedTensorIsNamedInBothResidencies) {
  TempDir dir;
  // A 1-byte U8 tensor first puts the F32 tensor at data offset 1.
  std::string header = R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, sizeof(n));
  file += header + std::string(5, '\x01');
  write_file(dir / "model.safetensors", file);
  for (const WeightResidency r : {WeightResidency::kMapped, WeightResidency::kAnonymous}) {
    const WeightStore store = WeightStore::open(dir.path(), r);
    const std::string msg = error_of([&] { (void)store.get("f"); });
    EXPECT_CONTAINS(msg, "is not aligned");
  }
}

const TensorShapes kDummyShapes = {
    {"model.embed_tokens.weight", {16, 8}},
    {"model.norm.weight", {8}},
    {"lm_head.weight", {16, 8}},
};

std::string bytes_of(const TensorView& v) {
  return std::string(static_cast<const char*>(v.data), static_cast<size_t>(v.nbytes()));
}

TEST(WeightStoreDummyTest, SameSeedGivesSameBytes) {
  const WeightStore a = WeightStore::dummy(kDummyShapes, DType::kBF16, 7);
  const WeightStore b = WeightStore::dummy(kDummyShapes, DType::kBF16, 7);
  const WeightStore c = WeightStore::dummy(kDummyShapes, DType::kBF16, 8);
  for (const auto& [name, shape] : kDummyShapes) {
    EXPECT_EQ(bytes_of(a.get_checked(name, shape)), bytes_of(b.get(name))) << name;
    EXPECT_NE(bytes_of(a.get(name)), bytes_of(c.get(name))) << name;
  }
  // Same seed, different tensors: different streams.
  EXPECT_NE(bytes_of(a.get("model.embed_tokens.weight")), bytes_of(a.get("lm_head.weight")));
  EXPECT_EQ(a.source(), "dummy weights (seed 7)");
}

TEST(WeightStoreDummyTest, ValuesDependOnlyOnSeedNameAndRange) {
  const WeightStore all = WeightStore::dummy(kDummyShapes, DType::kF32, 3);
  const WeightStore one = WeightStore::dummy({kDummyShapes[2]}, DType::kF32, 3);
  EXPECT_EQ(bytes_of(all.get("lm_head.weight")), bytes_of(one.get("lm_head.weight")));
}

// Pins the documented distribution: element i of tensor `name` is
// low + (high - low) * (splitmix64(seed ^ fnv1a64(name), i) >> 40) / 2^24.
TEST(WeightStoreDummyTest, FollowsTheDocumentedGenerator) {
  const std::string name = "w";
  const uint64_t seed = 42;
  const WeightStore store = WeightStore::dummy({{name, {5}}}, DType::kF32, seed);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  uint64_t state = seed ^ h;
  const auto* values = static_cast<const float*>(store.get(name).data);
  for (int i = 0; i < 5; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) / 16777216.0f;
    EXPECT_EQ(values[i], -0.02f + 0.04f * u) << i;
  }
}

TEST(WeightStoreDummyTest, ScaleAndPerTensorRange) {
  DummyWeightsConfig config;
  config.scale = 0.5f;
  config.range_for = [](std::string_view name) -> std::optional<DummyRange> {
    if (name.ends_with("norm.weight")) return DummyRange{1.0f, 1.0f};
    return std::nullopt;
  };
  const WeightStore store = WeightStore::dummy(kDummyShapes, DType::kF16, 1, config);
  const TensorView norm = store.get("model.norm.weight");
  for (int64_t i = 0; i < norm.numel(); ++i) EXPECT_EQ(load_as_f32(norm.data, norm.dtype, i), 1.0f);
  const TensorView embed = store.get("model.embed_tokens.weight");
  float max_abs = 0.0f;
  for (int64_t i = 0; i < embed.numel(); ++i) {
    const float v = load_as_f32(embed.data, embed.dtype, i);
    EXPECT_LE(std::abs(v), 0.5f);
    max_abs = std::max(max_abs, std::abs(v));
  }
  EXPECT_GT(max_abs, 0.1f);  // actually spread over the range, not stuck near 0
}

TEST(WeightStoreDummyTest, TensorsAreAlignedAndDisjoint) {
  const WeightStore store = WeightStore::dummy({{"a", {3}}, {"b", {5}}, {"c", {}}}, DType::kF32, 0);
  const auto* a = static_cast<const char*>(store.get("a").data);
  const auto* b = static_cast<const char*>(store.get("b").data);
  const auto* c = static_cast<const char*>(store.get("c").data);
  EXPECT_EQ(store.get("c").numel(), 1);  // rank 0: a scalar
  EXPECT_GE(b - a, 12);
  EXPECT_GE(c - b, 20);
  EXPECT_EQ((b - a) % 64, 0);
  EXPECT_EQ((c - b) % 64, 0);
}

TEST(WeightStoreDummyTest, RejectsBadRequests) {
  EXPECT_CONTAINS(error_of([] {
                    (void)WeightStore::dummy({{"a", {1}}}, DType::kI8, 0);
                  }),
                  "dtype I8 is not supported");
  EXPECT_CONTAINS(error_of([] {
                    (void)WeightStore::dummy({{"a", {1}}, {"a", {2}}}, DType::kF32, 0);
                  }),
                  "tensor 'a' is listed twice");
  EXPECT_CONTAINS(error_of([] {
                    (void)WeightStore::dummy({{"a", {1, -1}}}, DType::kF32, 0);
                  }),
                  "invalid shape [1, -1]");
  EXPECT_CONTAINS(error_of([] {
                    (void)WeightStore::dummy({{"a", {1, 1, 1, 1, 1}}}, DType::kF32, 0);
                  }),
                  "rank 5");
  EXPECT_CONTAINS(error_of([] {
                    (void)WeightStore::dummy({{"a", {int64_t{1} << 62, 4}}}, DType::kF32, 0);
                  }),
                  "tensor 'a'");
  DummyWeightsConfig negative_scale;
  negative_scale.scale = -1.0f;
  EXPECT_CONTAINS(error_of([&] {
                    (void)WeightStore::dummy({{"a", {2}}}, DType::kF32, 0, negative_scale);
                  }),
                  "tensor 'a' has an invalid value range");
}

}  // namespace
}  // namespace strata::model
