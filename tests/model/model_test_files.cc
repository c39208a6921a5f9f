#include "model_test_files.h"

#include <stdlib.h>

#include <fstream>
#include <stdexcept>
#include <system_error>

namespace strata::model::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "strata_model_test_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string safetensors_bytes(const std::vector<TestTensor>& tensors,
                              std::string_view metadata_json) {
  std::string header = "{";
  std::string data;
  if (!metadata_json.empty()) header += "\"__metadata__\":" + std::string(metadata_json);
  for (const TestTensor& t : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  return raw_safetensors(header, data);
}

std::string raw_safetensors(std::string_view header, std::string_view data,
                            std::optional<uint64_t> header_len) {
  const uint64_t n = header_len.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}

}  // namespace strata::model::testing
