#pragma once
// Test helpers for tests/model: a scratch directory and a hand-rolled safetensors writer (the
// tests write real files byte by byte, independent of the parser under test).

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::model::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& path, std::string_view bytes);

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian element bytes
};

// `values` as raw bytes of T.
template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A well-formed safetensors file holding `tensors` back to back in the given order, with the
// header padded by spaces to a multiple of 8 bytes (as the reference writer does).
std::string safetensors_bytes(const std::vector<TestTensor>& tensors,
                              std::string_view metadata_json = "");

// The 8-byte little-endian length prefix (`header_len`, default header.size()), then `header`
// verbatim, then `data`: for building malformed files.
std::string raw_safetensors(std::string_view header, std::string_view data = "",
                            std::optional<uint64_t> header_len = std::nullopt);

}  // namespace strata::model::testing
