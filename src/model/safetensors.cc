#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/json_fields.h"

namespace strata::model {
namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kLengthPrefixBytes = 8;

// Every DType, for the "supported" list of the unknown-dtype message.
constexpr std::array kAllDTypes = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                   DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                                   DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};

// Reports failures as "safetensors file '<source>': [tensor '<name>': ]<what>".
class Reporter {
 public:
  explicit Reporter(std::string_view source) : source_(source) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("safetensors file '" + source_ + "': " + what);
  }
  [[noreturn]] void fail(std::string_view tensor, const std::string& what) const {
    fail("tensor " + quote(tensor) + ": " + what);
  }

 private:
  std::string source_;
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Parses the JSON header; a name that appears twice at the top level is an error (nlohmann would
// silently keep the last one).
json parse_header(std::string_view text, const Reporter& report) {
  std::set<std::string, std::less<>> seen;
  std::string duplicate;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  std::variant<json, JsonInputError> parsed = parse_json_input(text, kMaxFileJsonDepth, on_event);
  if (const auto* error = std::get_if<JsonInputError>(&parsed)) {
    report.fail("header is not valid JSON: " +
                (error->fault == JsonInputFault::kNulByte
                     ? "NUL byte at header offset " + std::to_string(error->offset)
                     : error->message));
  }
  json header = std::move(std::get<json>(parsed));
  if (!header.is_object()) {
    report.fail(std::string("header is not a JSON object (got ") + header.type_name() + ")");
  }
  if (!duplicate.empty()) report.fail(duplicate, "appears twice in the header");
  return header;
}

void check_metadata(const json& metadata, const Reporter& report) {
  if (!metadata.is_object()) report.fail("'__metadata__' must be an object of strings");
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      report.fail("'__metadata__' value for " + quote(key) + " must be a string, got " +
                  value.type_name());
    }
  }
}

DType parse_dtype(const json& entry, std::string_view name, const Reporter& report) {
  const auto it = entry.find("dtype");
  if (it == entry.end()) report.fail(name, "missing 'dtype'");
  if (!it->is_string()) {
    report.fail(name, std::string("'dtype' must be a string, got ") + it->type_name());
  }
  const auto& text = it->get_ref<const std::string&>();
  if (const auto dtype = dtype_from_safetensors_name(text)) return *dtype;
  std::string supported;
  for (const DType t : kAllDTypes) {
    supported += (supported.empty() ? "" : ", ") + std::string(dtype_name(t));
  }
  report.fail(name, "unknown dtype " + quote(text) + " (supported: " + supported + ")");
}

// Returns the shape; `numel` receives its product.
std::vector<int64_t> parse_shape(const json& entry, std::string_view name, const Reporter& report,
                                 int64_t& numel) {
  const auto it = entry.find("shape");
  if (it == entry.end()) report.fail(name, "missing 'shape'");
  if (!it->is_array()) {
    report.fail(name, std::string("'shape' must be an array, got ") + it->type_name());
  }
  std::vector<int64_t> shape;
  numel = 1;
  for (const json& dim : *it) {
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      report.fail(name, "'shape' has a negative dimension " + bounded_dump(dim));
    }
    if (!dim.is_number_unsigned()) {
      report.fail(name, std::string("'shape' must hold integers, found a ") + dim.type_name());
    }
    const auto d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<int64_t>(d), &numel)) {
      report.fail(name, "'shape' element count overflows 64 bits");
    }
    shape.push_back(static_cast<int64_t>(d));
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_offsets(const json& entry, std::string_view name,
                                            const Reporter& report) {
  const auto it = entry.find("data_offsets");
  if (it == entry.end()) report.fail(name, "missing 'data_offsets'");
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned()) {
    report.fail(name, "'data_offsets' must be [begin, end] with non-negative integers, got " +
                          bounded_dump(*it));
  }
  return {(*it)[0].get<uint64_t>(), (*it)[1].get<uint64_t>()};
}

SafetensorsTensor parse_entry(const std::string& name, const json& entry, uint64_t data_offset,
                              uint64_t data_bytes, const Reporter& report) {
  if (!entry.is_object()) {
    report.fail(name, std::string("entry must be an object, got ") + entry.type_name());
  }
  SafetensorsTensor t;
  t.name = name;
  t.dtype = parse_dtype(entry, name, report);
  int64_t numel = 0;
  t.shape = parse_shape(entry, name, report, numel);
  const auto [begin, end] = parse_offsets(entry, name, report);
  const std::string offsets =
      "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) report.fail(name, offsets + " has begin > end");
  if (end > data_bytes) {
    report.fail(name, offsets + " end is past the data section (" + std::to_string(data_bytes) +
                          " bytes); the file is truncated or corrupt");
  }
  int64_t expected = 0;
  if (__builtin_mul_overflow(numel, dtype_size(t.dtype), &expected)) {
    report.fail(name, "byte size of shape " + shape_text(t.shape) + " overflows 64 bits");
  }
  if (end - begin != static_cast<uint64_t>(expected)) {
    report.fail(name, offsets + " covers " + std::to_string(end - begin) + " bytes, but shape " +
                          shape_text(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                          " needs " + std::to_string(expected));
  }
  t.file_offset = data_offset + begin;
  t.size_bytes = end - begin;
  return t;
}

// Tensors must not share bytes. Empty tensors occupy no bytes and never overlap.
void check_no_overlap(const std::vector<SafetensorsTensor>& tensors, const Reporter& report) {
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors) {
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->file_offset != b->file_offset ? a->file_offset < b->file_offset : a->name < b->name;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& prev = *by_offset[i - 1];
    const auto& next = *by_offset[i];
    if (next.file_offset < prev.file_offset + prev.size_bytes) {
      report.fail("tensors " + quote(prev.name) + " and " + quote(next.name) +
                  " overlap in the data section");
    }
  }
}

}  // namespace

const SafetensorsTensor* SafetensorsTable::find(std::string_view name) const {
  const auto it =
      std::lower_bound(tensors.begin(), tensors.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return (it != tensors.end() && it->name == name) ? &*it : nullptr;
}

SafetensorsTable parse_safetensors(std::span<const uint8_t> file_bytes,
                                   std::string_view source_name) {
  const Reporter report(source_name);
  if (file_bytes.size() < kLengthPrefixBytes) {
    report.fail(
        "file is " + std::to_string(file_bytes.size()) +
        " bytes, shorter than the 8-byte header length; it is truncated or not safetensors");
  }
  SafetensorsTable table;
  table.header_bytes = read_u64_le(file_bytes.data());
  const uint64_t after_prefix = file_bytes.size() - kLengthPrefixBytes;
  if (table.header_bytes > after_prefix) {
    report.fail("header length " + std::to_string(table.header_bytes) + " exceeds the " +
                std::to_string(after_prefix) +
                " bytes after the length prefix; the file is truncated or not safetensors");
  }
  if (table.header_bytes > kMaxHeaderBytes) {
    report.fail("header length " + std::to_string(table.header_bytes) +
                " is over the 100 MiB safetensors limit");
  }
  table.data_offset = kLengthPrefixBytes + table.header_bytes;
  const uint64_t data_bytes = file_bytes.size() - table.data_offset;
  const auto* header_begin = reinterpret_cast<const char*>(file_bytes.data()) + kLengthPrefixBytes;
  const json header = parse_header({header_begin, table.header_bytes}, report);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      check_metadata(entry, report);
      continue;
    }
    table.tensors.push_back(parse_entry(name, entry, table.data_offset, data_bytes, report));
  }
  check_no_overlap(table.tensors, report);
  // nlohmann objects iterate in key order already; sort anyway so find() never depends on it.
  std::sort(table.tensors.begin(), table.tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return table;
}

SafetensorsFile::SafetensorsFile(MappedFile file, SafetensorsTable table)
    : file_(std::move(file)), table_(std::move(table)) {}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path,
                                      WeightResidency residency) {
  MappedFile file = MappedFile::open(path);
  SafetensorsTable table = parse_safetensors(file.bytes(), path.string());
  SafetensorsFile result(std::move(file), std::move(table));
  if (residency == WeightResidency::kAnonymous) result.read_into_memory();
  return result;
}

void SafetensorsFile::read_into_memory() {
  const std::string source = "safetensors file '" + path().string() + "'";
  copy_begin_ = table_.data_offset / 64 * 64;
  const size_t bytes = file_.size() - copy_begin_;
  copy_ = HugePageBuffer(bytes, source);
  const int fd = ::open(path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(source + ": cannot open for reading: " + std::strerror(errno));
  // pread straight into the copy: the kernel copies from the page cache, so the file's pages are
  // never mapped (no 4 KiB faults); each destination page faults in once, as a huge page.
  constexpr size_t kChunk = size_t{256} << 20;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, copy_.data() + done, std::min(kChunk, bytes - done),
                              static_cast<off_t>(copy_begin_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "the file ended early";
      ::close(fd);
      throw Error(source + ": reading the tensor data failed at byte " +
                  std::to_string(copy_begin_ + done) + " of " + std::to_string(file_.size()) +
                  " (" + why + "; was the file changed while loading?)");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

const std::byte* SafetensorsFile::address(uint64_t file_offset) const {
  if (copy_.data() != nullptr) return copy_.data() + (file_offset - copy_begin_);
  return reinterpret_cast<const std::byte*>(file_.data()) + file_offset;
}

TensorView SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = table_.find(name);
  const Reporter report(path().string());
  if (t == nullptr) report.fail(name, "not found in this file");
  if (t->shape.size() > static_cast<size_t>(TensorView::kMaxRank)) {
    report.fail(name, "has rank " + std::to_string(t->shape.size()) + " (shape " +
                          shape_text(t->shape) +
                          "); Strata supports rank <= " + std::to_string(TensorView::kMaxRank));
  }
  // mmap returns page-aligned memory and the copy keeps offsets modulo 64, so file offset
  // alignment is pointer alignment.
  if (t->file_offset % static_cast<uint64_t>(dtype_size(t->dtype)) != 0) {
    report.fail(name, "data at file offset " + std::to_string(t->file_offset) +
                          " is not aligned to its " + std::to_string(dtype_size(t->dtype)) +
                          "-byte elements; re-save the checkpoint with the safetensors library");
  }
  TensorView view;
  view.data = address(t->file_offset);  // non-null: the file holds at least the prefix
  view.dtype = t->dtype;
  view.rank = static_cast<int32_t>(t->shape.size());
  std::copy(t->shape.begin(), t->shape.end(), view.shape.begin());
  return view;
}

}  // namespace strata::model
