#pragma once
// Stream: owns one non-blocking cudaStream_t. Move-only; the destructor synchronizes and destroys
// it, so no work enqueued on it outlives the object. Not thread-safe.

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace strata::cuda {

class Stream {
 public:
  static Result<Stream> create();

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  ~Stream();

  cudaStream_t get() const { return stream_; }
  // Waits for all work enqueued so far; reports asynchronous errors.
  Status synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  void reset();

  cudaStream_t stream_ = nullptr;
};

}  // namespace strata::cuda
