#include "kv/redis_fan_out.h"

#include <vector>

namespace strata::kv {

Status RedisFanOut::run(size_t n, const std::function<Status(size_t)>& trip) {
  if (n == 0) return Status::Ok();
  if (n == 1) return trip(0);
  if (!pool_ || static_cast<size_t>(pool_->num_threads()) < n) {
    pool_ = std::make_unique<ThreadPool>(static_cast<int>(n));
  }
  // Chunks of one trip each: the pool has a thread per trip, so no thread runs two unless one
  // is slow to wake (then another takes its trip instead of waiting for it).
  std::vector<Status> status(n);
  pool_->parallel_for(static_cast<int64_t>(n), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      status[static_cast<size_t>(k)] = trip(static_cast<size_t>(k));
    }
  });
  for (Status& s : status) {
    if (!s.ok()) return std::move(s);
  }
  return Status::Ok();
}

}  // namespace strata::kv
