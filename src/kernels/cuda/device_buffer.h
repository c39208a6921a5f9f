#pragma once
// DeviceBuffer: owns one cudaMalloc allocation. Move-only; the destructor frees it (cudaFree
// synchronizes the device, so buffers are long-lived: the KV pool, workspaces, test data).
// Not thread-safe; cost: one cudaMalloc / cudaFree.

#include <cstddef>
#include <memory>

#include "core/status.h"

namespace strata::cuda {

class DeviceBuffer {
 public:
  // Allocates bytes of device memory (uninitialised). bytes == 0 gives an empty buffer.
  static Result<DeviceBuffer> allocate(size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

 private:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void reset();

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), which the GPU copies to and from at full speed and
// asynchronously: PinnedArray<T> owns one allocation and frees it with cudaFreeHost.
struct PinnedFree {
  void operator()(void* p) const noexcept;
};
template <typename T>
using PinnedArray = std::unique_ptr<T[], PinnedFree>;

}  // namespace strata::cuda
