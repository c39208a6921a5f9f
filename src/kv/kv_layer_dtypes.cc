#include "kv/kv_layer_dtypes.h"

#include <algorithm>
#include <charconv>

#include "kv/kv_accounting.h"

namespace strata::kv {
namespace {

constexpr std::string_view kFlag = "--kv-cache-dtype-skip-layers";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument(std::string(kFlag) + " '" + std::string(text) + "': " + why +
                                 " (use sliding_window and/or 0-based layer indices, "
                                 "comma-separated, e.g. sliding_window or 0,5)");
}

}  // namespace

Result<KvSkipLayers> parse_kv_skip_layers(std::string_view text) {
  KvSkipLayers skip;
  if (trim(text).empty()) return skip;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (item.empty()) return bad(text, "empty item");
    if (item == "sliding_window") {
      if (skip.sliding_window) return bad(text, "sliding_window is named twice");
      skip.sliding_window = true;
    } else {
      int32_t idx = -1;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), idx);
      if (ec != std::errc() || end != item.data() + item.size() || idx < 0 ||
          !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return bad(text, "'" + std::string(item) + "' is not a layer index or sliding_window");
      }
      if (std::find(skip.layers.begin(), skip.layers.end(), idx) != skip.layers.end()) {
        return bad(text, "layer " + std::to_string(idx) + " is named twice");
      }
      skip.layers.push_back(idx);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return skip;
}

std::string kv_skip_layers_text(const KvSkipLayers& skip) {
  std::string s = skip.sliding_window ? "sliding_window" : "";
  for (const int32_t l : skip.layers) s += (s.empty() ? "" : ",") + std::to_string(l);
  return s;
}

Result<std::vector<bool>> kv_skip_layer_mask(const KvSkipLayers& skip,
                                             std::span<const int32_t> layer_windows) {
  const auto num_layers = static_cast<int32_t>(layer_windows.size());
  std::vector<bool> mask(layer_windows.size(), false);
  for (const int32_t l : skip.layers) {
    if (l < 0 || l >= num_layers) {
      return Status::InvalidArgument(
          std::string(kFlag) + ": layer " + std::to_string(l) + " is out of range (the model has " +
          std::to_string(num_layers) + " layers, 0.." + std::to_string(num_layers - 1) + ")");
    }
    mask[static_cast<size_t>(l)] = true;
  }
  if (skip.sliding_window) {
    for (size_t l = 0; l < layer_windows.size(); ++l) mask[l] = mask[l] || layer_windows[l] > 0;
  }
  return mask;
}

std::vector<DType> kv_layer_dtypes(DType dtype, DType full_precision,
                                   const std::vector<bool>& mask) {
  if (std::none_of(mask.begin(), mask.end(), [](bool b) { return b; })) return {};
  std::vector<DType> dtypes;
  dtypes.reserve(mask.size());
  for (const bool keep : mask) dtypes.push_back(keep ? full_precision : dtype);
  return dtypes;
}

std::string kv_dtype_summary(DType dtype, std::span<const DType> layer_dtypes) {
  std::string s = pool_dtype_name(dtype);
  std::vector<DType> others;
  for (const DType d : layer_dtypes) {
    if (d != dtype && std::find(others.begin(), others.end(), d) == others.end()) {
      others.push_back(d);
    }
  }
  for (size_t i = 0; i < others.size(); ++i) {
    std::string layers;
    for (size_t l = 0; l < layer_dtypes.size(); ++l) {
      if (layer_dtypes[l] == others[i]) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    }
    s += (i == 0 ? " (layers " : "; layers ") + layers + " " + pool_dtype_name(others[i]);
  }
  return others.empty() ? s : s + ")";
}

}  // namespace strata::kv
