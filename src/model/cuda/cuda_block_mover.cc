#include "model/cuda/cuda_block_mover.h"

#include <cuda_runtime_api.h>

#include <string>

#include "core/check.h"
#include "kernels/cuda/block_copy.h"

namespace strata::model {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  STRATA_CHECK(err == cudaSuccess,
               (std::string("swap copy: ") + what + ": " + cudaGetErrorString(err)).c_str());
}

cuda::Stream make_stream() {
  Result<cuda::Stream> s = cuda::Stream::create();
  STRATA_CHECK(s.ok(), ("swap copy: no CUDA stream: " + s.status().to_string()).c_str());
  return std::move(s).value();
}

}  // namespace

CudaBlockMover::CudaBlockMover(void* pool, int32_t num_blocks, int64_t block_bytes)
    : pool_(pool), num_blocks_(num_blocks), block_bytes_(block_bytes), stream_(make_stream()) {}

CudaBlockMover::~CudaBlockMover() = default;

void CudaBlockMover::attach(kv::HostKvBuffer& host) {
  if (host.size_bytes() == 0) return;
  if (cudaHostRegister(host.data(), static_cast<size_t>(host.size_bytes()),
                       cudaHostRegisterMapped) != cudaSuccess) {
    cudaGetLastError();  // not pinned: copies go block by block through cudaMemcpy
    return;
  }
  check_cuda(cudaHostGetDevicePointer(&mapped_host_, host.data(), 0), "cudaHostGetDevicePointer");
}

void CudaBlockMover::detach(kv::HostKvBuffer& host) {
  check_cuda(cudaStreamSynchronize(stream_.get()), "synchronize");
  if (mapped_host_ != nullptr) cudaHostUnregister(host.data());
  mapped_host_ = nullptr;
}

void CudaBlockMover::start_runs(std::span<const kv::BlockCopy> pairs, const void* src_pool,
                                void* dst_pool) {
  const auto* src = static_cast<const std::byte*>(src_pool);
  auto* dst = static_cast<std::byte*>(dst_pool);
  for (size_t i = 0; i < pairs.size();) {
    size_t n = 1;
    while (i + n < pairs.size() &&
           pairs[i + n].src.value == pairs[i].src.value + static_cast<int32_t>(n) &&
           pairs[i + n].dst.value == pairs[i].dst.value + static_cast<int32_t>(n)) {
      ++n;
    }
    check_cuda(cudaMemcpyAsync(dst + pairs[i].dst.value * block_bytes_,
                               src + pairs[i].src.value * block_bytes_,
                               n * static_cast<size_t>(block_bytes_), cudaMemcpyDefault,
                               stream_.get()),
               "block run copy");
    i += n;
  }
}

void CudaBlockMover::copy(std::span<const kv::BlockCopy> pairs, const void* src_pool,
                          void* dst_pool) {
  if (pairs.empty()) return;
  if (block_bytes_ >= kDmaBlockBytes) {
    start_runs(pairs, src_pool, dst_pool);
    check_cuda(cudaStreamSynchronize(stream_.get()), "block run copy");
    return;
  }
  // The pairs' staging buffer may still feed a started copy's upload: let those finish first.
  wait_copies(last_ticket_);
  if (pairs.size() > capacity_pairs_) {
    void* staging = nullptr;
    check_cuda(cudaMallocHost(&staging, pairs.size() * 2 * sizeof(int32_t)), "cudaMallocHost");
    staging_.reset(static_cast<int32_t*>(staging));
    Result<cuda::DeviceBuffer> d = cuda::DeviceBuffer::allocate(pairs.size() * 2 * sizeof(int32_t));
    STRATA_CHECK(d.ok(), ("swap copy: " + d.status().to_string()).c_str());
    device_pairs_ = std::move(d).value();
    capacity_pairs_ = pairs.size();
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    staging_[2 * i] = pairs[i].src.value;
    staging_[2 * i + 1] = pairs[i].dst.value;
  }
  check_cuda(cudaMemcpyAsync(device_pairs_.data(), staging_.get(), pairs.size() * 2 * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_.get()),
             "pairs upload");
  cuda::BlockCopyParams p;
  p.src_pool = src_pool;
  p.dst_pool = dst_pool;
  p.block_pairs = device_pairs_.as<int32_t>();
  p.num_pairs = static_cast<int32_t>(pairs.size());
  p.block_bytes = block_bytes_;
  const Status s = cuda::block_copy(p, stream_.get());
  STRATA_CHECK(s.ok(), ("swap copy: " + s.to_string()).c_str());
  check_cuda(cudaStreamSynchronize(stream_.get()), "block copy");
}

void CudaBlockMover::to_host(std::span<const kv::BlockCopy> pairs, kv::HostKvBuffer& host) {
  if (mapped_host_ != nullptr) return copy(pairs, pool_, mapped_host_);
  for (const kv::BlockCopy& c : pairs) {
    check_cuda(cudaMemcpy(host.data() + c.dst.value * block_bytes_,
                          static_cast<const std::byte*>(pool_) + c.src.value * block_bytes_,
                          static_cast<size_t>(block_bytes_), cudaMemcpyDeviceToHost),
               "cudaMemcpy to host");
  }
}

void CudaBlockMover::from_host(std::span<const kv::BlockCopy> pairs, const kv::HostKvBuffer& host) {
  if (mapped_host_ != nullptr) return copy(pairs, mapped_host_, pool_);
  for (const kv::BlockCopy& c : pairs) {
    check_cuda(cudaMemcpy(static_cast<std::byte*>(pool_) + c.dst.value * block_bytes_,
                          host.data() + c.src.value * block_bytes_,
                          static_cast<size_t>(block_bytes_), cudaMemcpyHostToDevice),
               "cudaMemcpy to the GPU");
  }
}

void CudaBlockMover::to_region(std::span<const kv::BlockCopy> pairs, std::byte* slots) {
  if (pairs.empty()) return;
  start_runs(pairs, pool_, slots);
  check_cuda(cudaStreamSynchronize(stream_.get()), "copy into the peer region");
}

uint64_t CudaBlockMover::start_from_host(std::span<const kv::BlockCopy> pairs,
                                         const kv::HostKvBuffer& host) {
  if (mapped_host_ == nullptr || block_bytes_ < kDmaBlockBytes) {
    from_host(pairs, host);
    return kDoneTicket;
  }
  start_runs(pairs, mapped_host_, pool_);
  return record_ticket();
}

uint64_t CudaBlockMover::start_from_region(std::span<const kv::RegionCopy> copies) {
  if (copies.empty()) return kDoneTicket;
  for (const kv::RegionCopy& c : copies) {
    check_cuda(
        cudaMemcpyAsync(static_cast<std::byte*>(pool_) + c.dst.value * block_bytes_, c.src,
                        static_cast<size_t>(block_bytes_), cudaMemcpyDeviceToDevice, stream_.get()),
        "copy out of the peer region");
  }
  return record_ticket();
}

uint64_t CudaBlockMover::record_ticket() {
  Result<cuda::Event> done = cuda::Event::create();
  STRATA_CHECK(done.ok(), ("swap copy: " + done.status().to_string()).c_str());
  const Status recorded = done->record(stream_.get());
  STRATA_CHECK(recorded.ok(), ("swap copy: " + recorded.to_string()).c_str());
  started_.push_back(Started{++last_ticket_, std::move(done).value()});
  return last_ticket_;
}

bool CudaBlockMover::copies_done(uint64_t ticket) {
  while (!started_.empty() && finished_ < ticket) {
    const cudaError_t q = cudaEventQuery(started_.front().done.get());
    if (q == cudaErrorNotReady) return false;
    check_cuda(q, "block run copy");
    finished_ = started_.front().ticket;
    started_.pop_front();
  }
  return true;
}

void CudaBlockMover::wait_copies(uint64_t ticket) {
  while (!started_.empty() && finished_ < ticket) {
    const Status s = started_.front().done.synchronize();
    STRATA_CHECK(s.ok(), ("swap copy: " + s.to_string()).c_str());
    finished_ = started_.front().ticket;
    started_.pop_front();
  }
}

}  // namespace strata::model
