#include "model/weight_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/json_fields.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr size_t kArenaAlign = 64;

std::string shape_text(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Something is at `p` (MappedFile then says what is wrong with it when it is not a readable
// regular file: a directory, /dev/zero, a symlink loop), rather than "no weights".
bool is_file(const fs::path& p) { return file_exists(p); }

// A shard must be a plain file name inside the model directory: no separators, no "..".
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

// Reads the index's weight_map: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const MappedFile file = MappedFile::open(index_path);
  const std::string source = index_path.string();
  const json index = parse_json_object(file.text(), source, "safetensors index");
  const json* weight_map = JsonFields(index, source).opt_object("weight_map");
  if (weight_map == nullptr) {
    throw Error(source + ": missing 'weight_map' (an object of tensor name -> shard file)");
  }
  std::map<std::string, std::string> result;
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
      throw Error(source + ": 'weight_map' entry for tensor " + quote(name) +
                  " must be the file name of a shard in the same directory, got " +
                  quote(bounded_dump(shard)));
    }
    result.emplace(name, shard.get<std::string>());
  }
  return result;
}

// splitmix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// Writes `numel` elements of `dtype` at `out`, uniform in [range.low, range.high]. Element i uses
// the splitmix64 sequence at counter i, so the fill can be split across threads unchanged.
void fill_uniform(std::byte* out, int64_t numel, DType dtype, uint64_t stream, DummyRange range) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const float width = range.high - range.low;
  for (int64_t i = 0; i < numel; ++i) {
    const uint64_t bits = mix64(stream + (static_cast<uint64_t>(i) + 1) * kGamma);
    const float u = static_cast<float>(bits >> 40) * 0x1.0p-24f;  // [0, 1), exact in fp32
    const float v = range.low + width * u;
    std::byte* dst = out + i * dtype_size(dtype);
    if (dtype == DType::kF32) {
      std::memcpy(dst, &v, sizeof(v));
    } else if (dtype == DType::kBF16) {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(dst, &h, sizeof(h));
    } else if (dtype == DType::kF16) {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(dst, &h, sizeof(h));
    } else {
      const auto d = static_cast<double>(v);
      std::memcpy(dst, &d, sizeof(d));
    }
  }
}

bool is_dummy_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
         dtype == DType::kF64;
}

// Checks one dummy shape and returns its element count.
int64_t checked_numel(const std::string& name, const std::vector<int64_t>& shape,
                      const std::string& source) {
  if (shape.size() > static_cast<size_t>(TensorView::kMaxRank)) {
    throw Error(source + ": tensor " + quote(name) + " has rank " + std::to_string(shape.size()) +
                "; Strata supports rank <= " + std::to_string(TensorView::kMaxRank));
  }
  int64_t numel = 1;
  for (const int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) {
      throw Error(source + ": tensor " + quote(name) + " has invalid shape " + shape_text(shape));
    }
  }
  return numel;
}

}  // namespace

WeightStore WeightStore::open(const fs::path& model_dir, WeightResidency residency) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    throw Error("model directory '" + model_dir.string() +
                "' does not exist or is not a directory");
  }
  WeightStore store(model_dir.string());
  const fs::path single = model_dir / kSingleFile;
  const fs::path index = model_dir / kIndexFile;
  if (is_file(single)) {
    store.add_file(SafetensorsFile::open(single, residency));
  } else if (is_file(index)) {
    store.open_sharded(model_dir, index, residency);
  } else {
    throw Error("no weights in model directory '" + model_dir.string() + "': looked for " +
                kSingleFile + " and " + kIndexFile);
  }
  return store;
}

void WeightStore::add_file(SafetensorsFile file) {
  const auto file_idx = static_cast<int32_t>(files_.size());
  for (const SafetensorsTensor& t : file.tensors()) {
    const auto [it, inserted] = entries_.try_emplace(t.name, Entry{file_idx, TensorView{}});
    if (!inserted) {
      throw Error("tensor " + quote(t.name) + " appears in two shards of '" + source_ + "': " +
                  files_[static_cast<size_t>(it->second.file_idx)].path().filename().string() +
                  " and " + file.path().filename().string());
    }
  }
  files_.push_back(std::move(file));
}

void WeightStore::open_sharded(const fs::path& model_dir, const fs::path& index_path,
                               WeightResidency residency) {
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  const std::set<std::string> shard_names = [&] {
    std::set<std::string> names;
    for (const auto& [tensor, shard] : weight_map) names.insert(shard);
    return names;
  }();
  for (const std::string& shard : shard_names) {
    const fs::path shard_path = model_dir / shard;
    if (!is_file(shard_path)) {
      throw Error("shard " + quote(shard) + " named in '" + index_path.string() +
                  "' is missing from '" + model_dir.string() + "' (incomplete download?)");
    }
    add_file(SafetensorsFile::open(shard_path, residency));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto it = entries_.find(tensor);
    if (it == entries_.end() ||
        files_[static_cast<size_t>(it->second.file_idx)].path().filename() != shard) {
      throw Error("tensor " + quote(tensor) + " is listed in '" + index_path.string() +
                  "' under shard " + quote(shard) + ", but that shard does not contain it");
    }
  }
}

WeightStore WeightStore::dummy(const TensorShapes& shapes, DType dtype, uint64_t seed,
                               const DummyWeightsConfig& config) {
  WeightStore store("dummy weights (seed " + std::to_string(seed) + ")");
  if (!is_dummy_dtype(dtype)) {
    throw Error(store.source_ + ": dtype " + std::string(dtype_name(dtype)) +
                " is not supported; use F32, BF16, F16 or F64");
  }
  // Lay the tensors out in one arena, each at a kArenaAlign-aligned offset.
  std::vector<size_t> offsets;
  size_t end = 0;
  for (const auto& [name, shape] : shapes) {
    const int64_t numel = checked_numel(name, shape, store.source_);
    int64_t nbytes = 0;
    size_t padded = 0;
    if (__builtin_mul_overflow(numel, dtype_size(dtype), &nbytes) ||
        __builtin_add_overflow(end, kArenaAlign - 1, &padded) ||
        __builtin_add_overflow(padded / kArenaAlign * kArenaAlign, static_cast<size_t>(nbytes),
                               &end)) {
      throw Error(store.source_ + ": tensor " + quote(name) + " is too large");
    }
    offsets.push_back(padded / kArenaAlign * kArenaAlign);
  }
  // The same huge-page memory a checkpoint is read into, so dummy and real weights run at the
  // same speed.
  store.arena_ = HugePageBuffer(std::max<size_t>(end, 1), store.source_);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& [name, shape] = shapes[i];
    TensorView view;
    view.data = store.arena_.data() + offsets[i];
    view.dtype = dtype;
    view.rank = static_cast<int32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), view.shape.begin());
    if (!store.entries_.try_emplace(name, Entry{kOwned, view}).second) {
      throw Error(store.source_ + ": tensor " + quote(name) + " is listed twice");
    }
    const std::optional<DummyRange> custom =
        config.range_for ? config.range_for(name) : std::nullopt;
    const DummyRange range = custom.value_or(DummyRange{-config.scale, config.scale});
    if (!std::isfinite(range.low) || !std::isfinite(range.high) || range.low > range.high) {
      throw Error(store.source_ + ": tensor " + quote(name) + " has an invalid value range [" +
                  std::to_string(range.low) + ", " + std::to_string(range.high) + "]");
    }
    fill_uniform(store.arena_.data() + offsets[i], view.numel(), dtype, seed ^ fnv1a64(name),
                 range);
  }
  return store;
}

bool WeightStore::contains(std::string_view name) const { return entries_.contains(name); }

TensorView WeightStore::get(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw Error("missing tensor " + quote(name) + " in " + source_);
  const Entry& entry = it->second;
  if (entry.file_idx == kOwned) return entry.view;
  return files_[static_cast<size_t>(entry.file_idx)].tensor(name);
}

TensorView WeightStore::get_checked(std::string_view name,
                                    std::span<const int64_t> expected_shape) const {
  const TensorView view = get(name);
  const std::span<const int64_t> actual(view.shape.data(), static_cast<size_t>(view.rank));
  if (!std::equal(actual.begin(), actual.end(), expected_shape.begin(), expected_shape.end())) {
    throw Error("tensor " + quote(name) + " has shape " + shape_text(actual) + ", expected " +
                shape_text(expected_shape) + " (" + source_ + ")");
  }
  return view;
}

TensorView WeightStore::get_checked(std::string_view name,
                                    std::initializer_list<int64_t> expected_shape) const {
  return get_checked(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> result;
  result.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) result.push_back(name);
  return result;
}

}  // namespace strata::model
