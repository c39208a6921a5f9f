#include "kv/block_copy.h"

#include <cstring>

#include "core/check.h"

namespace strata::kv {

void copy_blocks(HostKvBuffer& kv, std::span<const BlockCopy> copies) {
  const int64_t block_bytes = kv.layout().block_bytes();
  for (const BlockCopy& c : copies) {
    STRATA_CHECK(c.src.value > 0 && c.src.value < kv.num_blocks() && c.dst.value > 0 &&
                     c.dst.value < kv.num_blocks(),
                 "copy_blocks: block id out of range (or the null block)");
    STRATA_CHECK(c.src != c.dst, "copy_blocks: a block copied onto itself");
    std::memcpy(kv.data() + c.dst.value * block_bytes, kv.data() + c.src.value * block_bytes,
                static_cast<size_t>(block_bytes));
  }
}

}  // namespace strata::kv
