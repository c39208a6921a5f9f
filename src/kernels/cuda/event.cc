#include "kernels/cuda/event.h"

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

Result<Event> Event::create() {
  cudaEvent_t e = nullptr;
  STRATA_CUDA_CHECK(cudaEventCreate(&e));
  return Event(e);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() { reset(); }

Status Event::record(cudaStream_t stream) const {
  STRATA_CUDA_CHECK(cudaEventRecord(event_, stream));
  return Status::Ok();
}

Status Event::synchronize() const {
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_));
  return Status::Ok();
}

Result<float> Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

void Event::reset() {
  if (event_ != nullptr) {
    static_cast<void>(cudaEventDestroy(event_));
    event_ = nullptr;
  }
}

}  // namespace strata::cuda
