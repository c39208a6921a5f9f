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

bool can_copy_slots(const KvLayout& layout) { return !layout.spec().has_i4_layer(); }

void copy_slots(HostKvBuffer& kv, std::span<const SlotCopy> copies) {
  const KvLayout& layout = kv.layout();
  const KvSpec& spec = layout.spec();
  STRATA_CHECK(can_copy_slots(layout), "copy_slots: an INT4 layer moves whole blocks only");
  const int64_t bs = layout.block_size();
  const int64_t block_bytes = layout.block_bytes();
  const int64_t limit = static_cast<int64_t>(kv.num_blocks()) * bs;
  const int32_t num_heads = spec.num_layers * spec.num_kv_heads;
  for (const SlotCopy& c : copies) {
    STRATA_CHECK(c.src >= bs && c.src < limit && c.dst >= bs && c.dst < limit && c.src != c.dst,
                 "copy_slots: slot out of range, in the null block, or copied onto itself");
    STRATA_CHECK(c.head >= -1 && c.head < num_heads, "copy_slots: head out of range");
    std::byte* const src_block = kv.data() + c.src / bs * block_bytes;
    std::byte* const dst_block = kv.data() + c.dst / bs * block_bytes;
    const int64_t src_tok = c.src % bs, dst_tok = c.dst % bs;
    // Every (layer, KV head), or the copy's one.
    const int32_t first_layer = c.head < 0 ? 0 : c.head / spec.num_kv_heads;
    const int32_t end_layer = c.head < 0 ? spec.num_layers : first_layer + 1;
    const int64_t first_head = c.head < 0 ? 0 : c.head % spec.num_kv_heads;
    const int64_t end_head = c.head < 0 ? spec.num_kv_heads : first_head + 1;
    for (int32_t l = first_layer; l < end_layer; ++l) {
      const int64_t row = spec.head_dim * dtype_bits(spec.layer_dtype(l)) / 8;  // one head's token
      const int64_t scale = kv_token_scale_bytes(spec.layer_dtype(l));
      const int64_t areas[2] = {layout.k_offset_bytes(l), layout.v_offset_bytes(l)};
      const int64_t scale_areas[2] = {layout.k_scale_offset_bytes(l),
                                      layout.v_scale_offset_bytes(l)};
      for (int part = 0; part < 2; ++part) {
        for (int64_t h = first_head; h < end_head; ++h) {
          const int64_t at = areas[part] + (h * bs) * row;
          std::memcpy(dst_block + at + dst_tok * row, src_block + at + src_tok * row,
                      static_cast<size_t>(row));
          if (scale == 0) continue;
          const int64_t s_at = scale_areas[part] + h * bs * scale;
          std::memcpy(dst_block + s_at + dst_tok * scale, src_block + s_at + src_tok * scale,
                      static_cast<size_t>(scale));
        }
      }
    }
  }
}

}  // namespace strata::kv
