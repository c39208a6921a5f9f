#pragma once
// WeightStore: every weight tensor of one model, by Hugging Face name, either read from the
// checkpoint's safetensors files (into huge-page anonymous memory, or mapped with zero copies) or
// owned and filled with seeded random values (`--load-format dummy`).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "model/safetensors.h"

namespace strata::model {

// Dummy values are drawn uniformly from [low, high]; low == high gives a constant.
struct DummyRange {
  float low = -0.02f;
  float high = 0.02f;
};

struct DummyWeightsConfig {
  // Range for tensors without an override: uniform in [-scale, scale]. Ranges must be finite with
  // low <= high, else dummy() throws strata::Error.
  float scale = 0.02f;
  // Per-tensor override, e.g. {0.9f, 1.1f} for norm weights; nullopt keeps the default range.
  std::function<std::optional<DummyRange>(std::string_view name)> range_for;
};

// (name, shape) pairs, in any order; names must be unique.
using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Owns the weights of one model: the safetensors files of a checkpoint directory (each mapped, its
// data section also copied into anonymous memory unless WeightResidency::kMapped), or one
// huge-page arena of owned dummy tensors. Invariants: every name maps to exactly one tensor; views
// returned by get() stay valid for the store's lifetime, including across moves. Move-only; const
// methods are thread-safe. Cost: open() maps each file and parses its header, then (kAnonymous)
// reads every tensor byte once; kMapped reads no tensor data. dummy() allocates once and writes
// every element; get() is a map lookup plus a binary search.
class WeightStore {
 public:
  // Loads `model_dir`/model.safetensors or, when absent, the shards named by
  // `model_dir`/model.safetensors.index.json. Throws strata::Error when the directory has neither,
  // a shard is missing or malformed, a tensor listed in the index is absent from its shard, or a
  // tensor appears in two shards, or (kAnonymous) the weights do not fit in memory.
  static WeightStore open(const std::filesystem::path& model_dir,
                          WeightResidency residency = WeightResidency::kMapped);

  // Allocates each tensor of `shapes` as `dtype` (F32, BF16, F16 or F64) and fills it
  // deterministically from `seed`: element i of tensor `name` is
  //   low + (high - low) * u,  u = top 24 bits of splitmix64(seed ^ fnv1a64(name), i) / 2^24,
  // so the same seed gives the same bytes on every machine, and a tensor's values depend only on
  // (seed, name, range), not on the other tensors. Throws strata::Error for a non-float dtype, a
  // duplicate name, a negative dim, a rank over TensorView::kMaxRank or an overflowing size.
  static WeightStore dummy(const TensorShapes& shapes, DType dtype, uint64_t seed,
                           const DummyWeightsConfig& config = {});

  bool contains(std::string_view name) const;
  // Throws strata::Error "missing tensor 'x' in <source>" when absent.
  TensorView get(std::string_view name) const;
  // get(), plus a check of the shape: throws strata::Error
  // "tensor 'x' has shape [64, 32], expected [64, 64] (<source>)" on mismatch.
  TensorView get_checked(std::string_view name, std::span<const int64_t> expected_shape) const;
  TensorView get_checked(std::string_view name,
                         std::initializer_list<int64_t> expected_shape) const;

  std::vector<std::string> names() const;  // sorted
  size_t num_tensors() const { return entries_.size(); }
  // The model directory, or "dummy weights (seed N)"; used in messages.
  const std::string& source() const { return source_; }

 private:
  static constexpr int32_t kOwned = -1;
  struct Entry {
    int32_t file_idx = kOwned;  // index into files_, or kOwned (view is set)
    TensorView view;
  };

  explicit WeightStore(std::string source) : source_(std::move(source)) {}
  void add_file(SafetensorsFile file);
  void open_sharded(const std::filesystem::path& model_dir, const std::filesystem::path& index_path,
                    WeightResidency residency);

  std::string source_;
  std::vector<SafetensorsFile> files_;
  HugePageBuffer arena_;  // owned (dummy) tensor data
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace strata::model
