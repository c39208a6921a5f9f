#include "kv/tier_key.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace strata::kv {
namespace {

// Appends a value's bytes to the namespace's input.
template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

}  // namespace

size_t TierKeyHasher::operator()(const TierKey& k) const {
  uint64_t h = 0;
  std::memcpy(&h, k.hash.bytes.data(), sizeof(h));
  return static_cast<size_t>(h ^ (k.ns * 0x9E3779B97F4A7C15ull));
}

uint64_t tier_namespace(std::string_view model_id, int32_t block_size,
                        std::span<const KvGroupSpec> groups, const KvStaticScales& scales) {
  std::vector<std::byte> in;
  put(in, kTierFormatVersion);
  put(in, static_cast<uint64_t>(model_id.size()));
  const auto* id = reinterpret_cast<const std::byte*>(model_id.data());
  in.insert(in.end(), id, id + model_id.size());
  put(in, block_size);
  put(in, static_cast<uint32_t>(groups.size()));
  for (const KvGroupSpec& g : groups) {
    put(in, static_cast<uint8_t>(g.kind));
    put(in, g.window);
    put(in, g.newest_blocks);
    put(in, g.kv.num_layers);
    put(in, g.kv.num_kv_heads);
    put(in, g.kv.head_dim);
    for (int32_t l = 0; l < g.kv.num_layers; ++l)
      put(in, static_cast<uint8_t>(g.kv.layer_dtype(l)));
  }
  put(in, static_cast<uint32_t>(scales.k.size()));
  for (float s : scales.k) put(in, s);
  put(in, static_cast<uint32_t>(scales.v.size()));
  for (float s : scales.v) put(in, s);
  return XXH3_64bits(in.data(), in.size());
}

uint64_t group_namespace(uint64_t ns, int32_t group) {
  if (group == 0) return ns;
  return XXH3_64bits_withSeed(&group, sizeof(group), ns);
}

std::string checkpoint_identity(const std::string& model_dir, bool dummy_weights) {
  constexpr std::streamoff kEdge = std::streamoff{1} << 20;
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::vector<char> buf;
  // Appends bytes [offset, offset + n) of a file (fewer at its end).
  const auto add_range = [&](std::ifstream& f, std::streamoff offset, std::streamoff n) {
    buf.resize(static_cast<size_t>(n));
    f.clear();
    f.seekg(offset);
    f.read(buf.data(), n);
    XXH3_128bits_update(state, buf.data(), static_cast<size_t>(f.gcount()));
  };
  const std::filesystem::path dir(model_dir);
  std::error_code ec;
  {
    std::ifstream f(dir / "config.json", std::ios::binary);
    if (f)
      add_range(f, 0,
                static_cast<std::streamoff>(std::filesystem::file_size(dir / "config.json", ec)));
  }
  if (dummy_weights) {
    XXH3_128bits_update(state, "dummy", 5);
  } else {
    std::vector<std::filesystem::path> files;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".safetensors") files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const std::filesystem::path& p : files) {
      const std::string name = p.filename().string();
      const auto size = static_cast<std::streamoff>(std::filesystem::file_size(p, ec));
      std::ifstream f(p, std::ios::binary);
      if (ec || !f) continue;
      XXH3_128bits_update(state, name.data(), name.size());
      XXH3_128bits_update(state, &size, sizeof(size));
      add_range(f, 0, std::min(size, kEdge));
      if (size > kEdge) add_range(f, std::max(kEdge, size - kEdge), std::min(kEdge, size - kEdge));
    }
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return out;
}

uint64_t tier_checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace strata::kv
