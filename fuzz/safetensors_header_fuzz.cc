// libFuzzer target: parse_safetensors on arbitrary bytes. A strata::Error is the expected way to
// reject input; any other exception, a crash, a sanitizer report, or a table that breaks the
// parser's documented guarantees is a bug.

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    const strata::model::SafetensorsTable table = strata::model::parse_safetensors(bytes, "fuzz");
    STRATA_CHECK(table.data_offset == 8 + table.header_bytes, "data offset after the header");
    for (size_t i = 0; i < table.tensors.size(); ++i) {
      const auto& t = table.tensors[i];
      STRATA_CHECK(t.file_offset >= table.data_offset, "tensor starts in the data section");
      STRATA_CHECK(t.file_offset + t.size_bytes <= size, "tensor ends inside the file");
      STRATA_CHECK(i == 0 || table.tensors[i - 1].name < t.name, "names sorted and unique");
      STRATA_CHECK(table.find(t.name) == &t, "find() returns the tensor");
    }
  } catch (const strata::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
