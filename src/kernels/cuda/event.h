#pragma once
// Event: owns one cudaEvent_t with timing enabled. Move-only; the destructor destroys it. Used
// for stream ordering and for event-timed benchmarks. Not thread-safe.

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace strata::cuda {

class Event {
 public:
  static Result<Event> create();

  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  ~Event();

  cudaEvent_t get() const { return event_; }
  Status record(cudaStream_t stream) const;
  Status synchronize() const;
  // Milliseconds between two recorded, completed events.
  static Result<float> elapsed_ms(const Event& start, const Event& end);

 private:
  explicit Event(cudaEvent_t e) : event_(e) {}
  void reset();

  cudaEvent_t event_ = nullptr;
};

}  // namespace strata::cuda
