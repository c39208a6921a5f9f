#pragma once
// Safetensors checkpoint files: the header parser (a pure function over bytes, fuzzed in
// fuzz/safetensors_header_fuzz.cc) and SafetensorsFile, an mmaped file serving zero-copy views.
//
// File layout (https://github.com/huggingface/safetensors, "Format"):
//
//   +----------------+---------------------------+---------------------------------------+
//   | u64 LE: N      | N bytes of UTF-8 JSON     | data section: tensor bytes, row-major |
//   +----------------+---------------------------+---------------------------------------+
//   0                8                           8 + N                                   EOF
//
// The JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative
// to the start of the data section; an optional "__metadata__" entry is a string -> string map.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/huge_page_buffer.h"
#include "core/mapped_file.h"
#include "core/tensor_view.h"

namespace strata::model {

// One tensor of a safetensors file. Offsets are absolute positions in the file.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // any rank, every dim >= 0
  uint64_t file_offset = 0;    // first byte of the tensor in the file
  uint64_t size_bytes = 0;     // == numel * dtype_size(dtype)
};

// The validated tensor table of one file.
struct SafetensorsTable {
  uint64_t header_bytes = 0;               // N: length of the JSON header
  uint64_t data_offset = 0;                // 8 + N: first byte of the data section
  std::vector<SafetensorsTensor> tensors;  // sorted by name, names unique

  // The tensor called `name`, or nullptr. O(log n).
  const SafetensorsTensor* find(std::string_view name) const;
};

// Parses and validates a whole safetensors file held in `file_bytes`. `source_name` (usually the
// path) is used in messages only. Throws strata::Error, naming the source and the tensor, when the
// file is too short, the header length runs past the end, the header is not a JSON object, an
// entry is malformed (missing/mistyped dtype, shape or data_offsets; unknown dtype; negative or
// overflowing shape; begin > end; end past the data section; byte size != numel * dtype size),
// two tensors overlap, or a name appears twice. On success every tensor lies inside file_bytes.
SafetensorsTable parse_safetensors(std::span<const uint8_t> file_bytes,
                                   std::string_view source_name);

// Where the tensor bytes a view points at live.
enum class WeightResidency {
  // In the file's mapping: zero copies, pages come from the page cache on first touch (4 KiB
  // pages, a fault each), and the kernel may drop them under memory pressure (`--mmap`).
  kMapped,
  // Read once at open into anonymous memory advised for transparent huge pages (HugePageBuffer):
  // every page is present before the first step, and a step's weight reads walk 2 MiB pages.
  // Costs the data's size in memory beside whatever page cache the read leaves.
  kAnonymous,
};

// Owns one mmaped safetensors file and its validated table; hands out views into the mapping, or
// into an anonymous copy of the data section (WeightResidency::kAnonymous).
// Invariants: the table was validated against the mapped bytes, so every tensor lies inside the
// mapping (and the copy); a tensor's address has the same alignment modulo 64 in both. Views stay
// valid for the lifetime of the object, including across moves. Move-only; const methods are
// thread-safe. Cost: open() maps the file and parses the JSON header (O(header bytes + n log n));
// kAnonymous then reads the data section once with pread (no page faults on the file). tensor()
// is a binary search and never copies or touches tensor data.
class SafetensorsFile {
 public:
  // Maps and validates `path`; throws strata::Error (see parse_safetensors), and for kAnonymous
  // when the memory cannot be allocated or the file cannot be read to its validated end (it
  // shrank after it was mapped).
  static SafetensorsFile open(const std::filesystem::path& path,
                              WeightResidency residency = WeightResidency::kMapped);

  const std::filesystem::path& path() const { return file_.path(); }
  const SafetensorsTable& table() const { return table_; }
  const std::vector<SafetensorsTensor>& tensors() const { return table_.tensors; }
  bool contains(std::string_view name) const { return table_.find(name) != nullptr; }

  // A zero-copy view of tensor `name`. Throws strata::Error if the file has no such tensor, its
  // rank exceeds TensorView::kMaxRank, or its data is not aligned to its element size.
  TensorView tensor(std::string_view name) const;

 private:
  SafetensorsFile(MappedFile file, SafetensorsTable table);
  // kAnonymous: reads the data section into copy_.
  void read_into_memory();
  // The tensor at `file_offset`, in the mapping or the copy.
  const std::byte* address(uint64_t file_offset) const;

  MappedFile file_;
  SafetensorsTable table_;
  // kAnonymous: the file's bytes from copy_begin_ (the data section's start rounded down to 64
  // bytes, keeping every tensor's alignment) to its end; empty for kMapped.
  HugePageBuffer copy_;
  uint64_t copy_begin_ = 0;
};

}  // namespace strata::model
