#pragma once
// Shared helpers of the CUDA kernel tests: skipping without a device, host <-> device copies,
// 16-bit float conversions, and the one table of tolerances every kernel test reads.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"

namespace strata::cuda::testing {

// True when the CUDA runtime reports at least one device.
bool has_cuda_device();

// Base fixture: skips the test cleanly on a machine without a GPU (CI).
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

#define STRATA_ASSERT_OK(expr)                            \
  do {                                                    \
    const ::strata::Status strata_s_ = (expr);            \
    ASSERT_TRUE(strata_s_.ok()) << strata_s_.to_string(); \
  } while (0)

// Tolerances: |got - ref| <= atol + rtol * |ref|, per element. One table for every kernel test.
struct Tolerance {
  double atol;
  double rtol;
};
enum class Quantity { kAttentionOutput, kPrefillOutput, kLogSumExp, kAttentionMass };
Tolerance tolerance(Quantity q, DType dtype);

float to_f32(uint16_t bits, DType dtype);  // bf16 / fp16 bits to float
uint16_t from_f32(float x, DType dtype);   // rounds to nearest even

// Uniform random 16-bit floats in [lo, hi).
std::vector<uint16_t> random_halves(size_t n, DType dtype, float lo, float hi,
                                    std::mt19937_64& rng);

DeviceBuffer upload_bytes(const void* data, size_t bytes);
template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  return upload_bytes(v.data(), v.size() * sizeof(T));
}
void download_bytes(const DeviceBuffer& buf, void* dst, size_t bytes);
template <typename T>
std::vector<T> download(const DeviceBuffer& buf, size_t n) {
  std::vector<T> v(n);
  download_bytes(buf, v.data(), n * sizeof(T));
  return v;
}
// Waits for the device and fails the test on an asynchronous error.
void sync_device();

}  // namespace strata::cuda::testing
