// The RAII helpers: buffers move and free, streams and events order and time work, and CUDA
// errors come back as Status values.

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/event.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"

namespace strata::cuda::testing {
namespace {

class CudaRuntimeTest : public CudaTest {};

TEST_F(CudaRuntimeTest, DeviceBufferMovesOwnership) {
  auto a = DeviceBuffer::allocate(1 << 20);
  ASSERT_TRUE(a.ok());
  void* p = a->data();
  DeviceBuffer b = std::move(a).value();
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), size_t{1} << 20);
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

TEST_F(CudaRuntimeTest, HugeAllocationIsResourceExhausted) {
  auto r = DeviceBuffer::allocate(size_t{1} << 50);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(CudaRuntimeTest, StreamAndEventsTimeARandomFill) {
  auto stream = Stream::create();
  auto start = Event::create();
  auto end = Event::create();
  ASSERT_TRUE(stream.ok() && start.ok() && end.ok());
  auto buf = DeviceBuffer::allocate(4096 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  STRATA_ASSERT_OK(start->record(stream->get()));
  RandomFillParams fill;
  fill.data = buf->data();
  fill.dtype = DType::kF32;
  fill.num_elements = 4096;
  fill.seed = 42;
  STRATA_ASSERT_OK(random_fill(fill, stream->get()));
  STRATA_ASSERT_OK(end->record(stream->get()));
  STRATA_ASSERT_OK(end->synchronize());
  auto ms = Event::elapsed_ms(*start, *end);
  ASSERT_TRUE(ms.ok());
  EXPECT_GE(*ms, 0.0f);
  const auto got = download<float>(*buf, 4096);
  for (int64_t i = 0; i < 4096; i += 511) EXPECT_EQ(got[i], random_fill_value(42, i, -1.0f, 1.0f));
}

Status failing_call() {
  STRATA_CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(16), 16, cudaMemcpyDeviceToDevice));
  return Status::Ok();
}

TEST_F(CudaRuntimeTest, CudaErrorsBecomeStatus) {
  const Status s = failing_call();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaMemcpy"), std::string::npos);
  static_cast<void>(cudaGetLastError());
}

}  // namespace
}  // namespace strata::cuda::testing
