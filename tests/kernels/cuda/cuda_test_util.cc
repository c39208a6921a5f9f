#include "cuda_test_util.h"

#include <cuda_runtime_api.h>

namespace strata::cuda::testing {

bool has_cuda_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  static_cast<void>(cudaGetLastError());
  return ok;
}

Tolerance tolerance(Quantity q, DType dtype) {
  const bool bf16 = dtype == DType::kBF16;
  switch (q) {
    // The output is rounded once to the KV dtype (bf16 keeps 8 bits, fp16 11), and both
    // attention kernels round the probabilities to the KV dtype before P.V on the tensor cores
    // (as FlashAttention-2 does), which can add as much again; the float accumulation adds far
    // less.
    case Quantity::kAttentionOutput:
    case Quantity::kPrefillOutput:
      return bf16 ? Tolerance{4e-3, 1.6e-2} : Tolerance{6e-4, 4e-3};
    case Quantity::kLogSumExp:
      return Tolerance{2e-4, 1e-5};
    case Quantity::kAttentionMass:
      return Tolerance{2e-6, 2e-4};
  }
  return Tolerance{0.0, 0.0};
}

float to_f32(uint16_t bits, DType dtype) {
  return dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

uint16_t from_f32(float x, DType dtype) {
  return dtype == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
}

std::vector<uint16_t> random_halves(size_t n, DType dtype, float lo, float hi,
                                    std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = from_f32(dist(rng), dtype);
  return v;
}

DeviceBuffer upload_bytes(const void* data, size_t bytes) {
  auto buf = DeviceBuffer::allocate(bytes);
  EXPECT_TRUE(buf.ok()) << buf.status().to_string();
  if (!buf.ok()) return DeviceBuffer();
  if (bytes > 0) {
    EXPECT_EQ(cudaMemcpy(buf->data(), data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return std::move(buf).value();
}

void download_bytes(const DeviceBuffer& buf, void* dst, size_t bytes) {
  if (bytes == 0) return;
  EXPECT_EQ(cudaMemcpy(dst, buf.data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

void sync_device() {
  const cudaError_t err = cudaDeviceSynchronize();
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
}

}  // namespace strata::cuda::testing
