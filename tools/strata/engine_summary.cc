#include "engine_summary.h"

#include <cstdio>

namespace strata::cli {

void print_pool(const Engine& engine) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const int64_t usable_blocks = engine.num_blocks() - 1;  // block 0 is the null block
  const int64_t tokens = usable_blocks * engine.config().block_size;
  const double kv_gib = static_cast<double>(tokens * engine.kv_bytes_per_token()) / kGiB;
  std::fprintf(stderr,
               "strata: %s: KV cache %lld blocks x %d tokens = %lld tokens, %lld bytes per token "
               "(%.2f GiB); weights %.2f GiB\n",
               device_name(engine.device()), static_cast<long long>(usable_blocks),
               engine.config().block_size, static_cast<long long>(tokens),
               static_cast<long long>(engine.kv_bytes_per_token()), kv_gib,
               static_cast<double>(engine.weight_bytes()) / kGiB);
}

}  // namespace strata::cli
