#include "kernels/cuda/stream.h"

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

Result<Stream> Stream::create() {
  cudaStream_t s = nullptr;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() { reset(); }

Status Stream::synchronize() const {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

void Stream::reset() {
  if (stream_ != nullptr) {
    static_cast<void>(cudaStreamSynchronize(stream_));
    static_cast<void>(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }
}

}  // namespace strata::cuda
