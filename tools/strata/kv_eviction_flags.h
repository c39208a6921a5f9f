#pragma once
// SnapKV's flags that serve, generate, bench and eval needle share (--kv-snapkv-selection,
// --kv-pooling, --kv-pool-kernel; docs/kv-eviction.md): empty / -1 leave the field unset, so
// the policy's default (per_head, max, 7) applies. CLI11 has checked the names and the range.

#include <cstdint>
#include <string>

#include "strata/kv_eviction.h"

namespace strata::cli {

inline void set_snapkv_flags(const std::string& selection, const std::string& pooling,
                             int32_t pool_kernel, KvEvictionParams& out) {
  if (!selection.empty()) out.selection = parse_kv_eviction_selection(selection);
  if (!pooling.empty()) out.pooling = parse_kv_eviction_pooling(pooling);
  out.pool_kernel = pool_kernel;
}

}  // namespace strata::cli
