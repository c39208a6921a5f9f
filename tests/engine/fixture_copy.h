#pragma once
// A scratch copy of a fixture checkpoint for the engine tests that change one (the MoE, Gemma 3,
// DeepSeek and FP8 checkpoint tests): config.json keys set or the whole config replaced,
// model.safetensors rewritten from the fixture's F32 tensors through an edit, tensors of other
// dtypes written as raw bytes. The directory lives under the test's temporary directory and is
// removed on destruction.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "strata/engine.h"

namespace strata::engine::test_util {

// Tensors by name: shape and F32 values.
using F32Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;
// Tensors written as they are: safetensors dtype, shape, bytes.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
using RawTensors = std::map<std::string, RawTensor>;

// Every tensor of an all-F32 safetensors file.
inline F32Tensors read_f32_tensors(const std::filesystem::path& file) {
  const model::SafetensorsFile f = model::SafetensorsFile::open(file);
  F32Tensors tensors;
  for (const model::SafetensorsTensor& t : f.tensors()) {
    const TensorView v = f.tensor(t.name);
    const auto* p = static_cast<const float*>(v.data);
    tensors[t.name] = {t.shape, std::vector<float>(p, p + v.numel())};
  }
  return tensors;
}

// Writes f32 and raw (names apart) as one safetensors file, each tensor 4-byte aligned.
inline void write_safetensors(const std::filesystem::path& file, const F32Tensors& f32,
                              RawTensors raw = {}) {
  for (const auto& [name, t] : f32) {
    raw[name] = {"F32", t.first,
                 std::string(reinterpret_cast<const char*>(t.second.data()), t.second.size() * 4)};
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : raw) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
    data.append((4 - data.size() % 4) % 4, '\0');
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << text << data;
}

// An architecture the GPU runner does not have: Engine::create with --device cuda refuses the
// model in model_dir at start, in one line holding "--device cuda: " + what and the reason, and
// pointing at --device cpu (on any build, with or without CUDA or a device).
inline void expect_refused_on_cuda(const std::filesystem::path& model_dir, const std::string& what,
                                   const std::string& reason) {
  EngineConfig c;
  c.model_dir = model_dir.string();
  c.device = Device::kCuda;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok()) << model_dir;
  const std::string message = e.status().message();
  EXPECT_NE(message.find("--device cuda: " + what), std::string::npos) << message;
  EXPECT_NE(message.find(reason), std::string::npos) << message;
  EXPECT_NE(message.find("--device cpu"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

class FixtureCopy {
 public:
  // A copy of the fixture directory `from` (config.json, model.safetensors and, if there,
  // generation_config.json).
  explicit FixtureCopy(const std::filesystem::path& from)
      : from_(from),
        dir_(std::filesystem::path(::testing::TempDir()) /
             (from.filename().string() + "-" + std::to_string(getpid()) + "-" +
              std::to_string(count_++))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
      if (std::filesystem::exists(from_ / f)) std::filesystem::copy_file(from_ / f, dir_ / f);
    }
  }
  ~FixtureCopy() { std::filesystem::remove_all(dir_); }
  FixtureCopy(const FixtureCopy&) = delete;
  FixtureCopy& operator=(const FixtureCopy&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  nlohmann::json config() const {
    std::ifstream in(dir_ / "config.json");
    return nlohmann::json::parse(in);
  }
  void write_config(const nlohmann::json& config) const {
    std::ofstream(dir_ / "config.json", std::ios::trunc) << config.dump(2);
  }
  // Sets config.json's top-level keys.
  void set_config(const nlohmann::json& keys) const {
    nlohmann::json c = config();
    c.update(keys);
    write_config(c);
  }

  // Rewrites model.safetensors from the fixture's tensors through edit(F32Tensors&) or
  // edit(F32Tensors&, RawTensors&): a tensor it erases is dropped, one it adds is written.
  template <typename Edit>
  void rewrite_weights(Edit edit) const {
    F32Tensors tensors = read_f32_tensors(from_ / "model.safetensors");
    RawTensors raw;
    if constexpr (std::is_invocable_v<Edit, F32Tensors&, RawTensors&>) {
      edit(tensors, raw);
    } else {
      edit(tensors);
    }
    write_safetensors(dir_ / "model.safetensors", tensors, std::move(raw));
  }

 private:
  static inline int count_ = 0;
  std::filesystem::path from_;
  std::filesystem::path dir_;
};

// A scratch copy of tests/data/models/<name> with its config.json's keys changed and its tensors
// edited (all F32, as the fixtures are, plus raw tensors of other dtypes the edit adds).
class EditedFixture : public FixtureCopy {
 public:
  using Tensors = F32Tensors;
  using RawTensors = test_util::RawTensors;

  EditedFixture(const std::string& name, const nlohmann::json& keys,
                const std::function<void(F32Tensors&, RawTensors&)>& edit = {})
      : FixtureCopy(std::filesystem::path(STRATA_TEST_DATA_DIR) / "models" / name) {
    set_config(keys);
    if (edit) rewrite_weights(edit);
  }
};

}  // namespace strata::engine::test_util
