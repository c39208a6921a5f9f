// A checkpoint directory for a model config with random weights: the very tensors
// `--load-format dummy` makes (WeightStore::dummy, seed 0), written as one model.safetensors
// beside a copy of config.json. Benchmarks of the real loading path (a file mapped or read into
// memory) then compute on the same bytes as the dummy runs (docs/benchmarks.md, "CPU engine").
//
// Usage: strata_random_checkpoint --config DIR --out DIR [--dtype bfloat16|float16|float32]

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"
#include "guarded_main.h"
#include "model/model.h"

namespace {

const char* safetensors_name(strata::DType t) {
  switch (t) {
    case strata::DType::kBF16:
      return "BF16";
    case strata::DType::kF16:
      return "F16";
    default:
      return "F32";
  }
}

int run(int argc, char** argv) {
  std::string config_dir;
  std::string out_dir;
  std::string dtype = "bfloat16";
  CLI::App app{"A random-weight checkpoint for a model config (--load-format dummy's weights)"};
  app.add_option("--config", config_dir, "A directory with config.json")->required();
  app.add_option("--out", out_dir, "Where model.safetensors and config.json go")->required();
  app.add_option("--dtype", dtype, "bfloat16, float16 or float32")
      ->check(CLI::IsMember({"bfloat16", "float16", "float32"}));
  CLI11_PARSE(app, argc, argv);

  const strata::DType t = dtype == "float32"   ? strata::DType::kF32
                          : dtype == "float16" ? strata::DType::kF16
                                               : strata::DType::kBF16;
  const strata::model::Model m =
      strata::model::Model::load({.model_dir = config_dir,
                                  .load_format = strata::model::LoadFormat::kDummy,
                                  .dummy_dtype = t});
  const strata::model::WeightStore& store = m.weights();
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const std::string& name : store.names()) {
    const strata::TensorView v = store.get(name);
    std::vector<int64_t> shape(v.shape.begin(), v.shape.begin() + v.rank);
    header[name] = {{"dtype", safetensors_name(v.dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + v.nbytes()}}};
    offset += v.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // tensor data 8-byte aligned
  std::filesystem::create_directories(out_dir);
  std::ofstream f(std::filesystem::path(out_dir) / "model.safetensors", std::ios::binary);
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), sizeof(n));
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const std::string& name : store.names()) {
    const strata::TensorView v = store.get(name);
    f.write(reinterpret_cast<const char*>(v.data), static_cast<std::streamsize>(v.nbytes()));
  }
  if (!f.flush()) {
    std::fprintf(stderr, "strata_random_checkpoint: cannot write %s\n", out_dir.c_str());
    return 1;
  }
  std::filesystem::copy_file(std::filesystem::path(config_dir) / "config.json",
                             std::filesystem::path(out_dir) / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::printf("%s: %zu tensors, %lld bytes of %s\n", out_dir.c_str(), store.names().size(),
              static_cast<long long>(offset), dtype.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_random_checkpoint", run, argc, argv);
}
