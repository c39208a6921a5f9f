#include "kernels/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

void PinnedFree::operator()(void* p) const noexcept { cudaFreeHost(p); }

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    if (err == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());  // so a later launch check does not report it
      return Status::ResourceExhausted("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    }
    return cuda_error_status(err, "cudaMalloc", __FILE__, __LINE__);
  }
  return DeviceBuffer(p, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() {
  if (data_ != nullptr) {
    // A failing cudaFree means the context is already broken; nothing useful to do here.
    static_cast<void>(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
}

}  // namespace strata::cuda
