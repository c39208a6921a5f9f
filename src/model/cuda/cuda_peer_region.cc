#include "model/cuda/cuda_peer_region.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kv/peer_frames.h"

namespace strata::model {
namespace {

Status cuda_status(cudaError_t err, const std::string& what) {
  return Status::Unavailable(what + ": " + cudaGetErrorString(err));
}

class CudaRegion final : public kv::PeerRegion {
 public:
  CudaRegion(void* base, int64_t bytes, uint64_t id, std::string handle)
      : base_(base), bytes_(bytes), id_(id), handle_(std::move(handle)) {}
  ~CudaRegion() override { cudaFree(base_); }
  CudaRegion(const CudaRegion&) = delete;
  CudaRegion& operator=(const CudaRegion&) = delete;

  kv::PeerRegionKind kind() const override { return kv::PeerRegionKind::kCudaIpc; }
  const std::string& handle() const override { return handle_; }
  uint64_t region_id() const override { return id_; }
  int64_t size_bytes() const override { return bytes_; }
  std::byte* slots() override {
    return static_cast<std::byte*>(base_) + kv::kPeerRegionHeaderBytes;
  }

 private:
  void* base_;
  int64_t bytes_;
  uint64_t id_;
  std::string handle_;
};

class CudaView final : public kv::PeerRegionView {
 public:
  CudaView(void* base, int64_t bytes) : base_(base), bytes_(bytes) {}
  ~CudaView() override {
    for (const cudaStream_t s : streams_) cudaStreamDestroy(s);
    cudaIpcCloseMemHandle(base_);
  }
  CudaView(const CudaView&) = delete;
  CudaView& operator=(const CudaView&) = delete;

  int64_t size_bytes() const override { return bytes_; }
  const std::byte* data() const override { return static_cast<const std::byte*>(base_); }
  Status copy_out(int64_t offset, std::span<std::byte> out) override {
    if (offset < 0 || offset > bytes_ || static_cast<int64_t>(out.size()) > bytes_ - offset) {
      return Status::InvalidArgument("copy past the CUDA IPC region's end");
    }
    Result<cudaStream_t> stream = take_stream();
    if (!stream.ok()) return stream.status();
    cudaError_t err = cudaMemcpyAsync(out.data(), static_cast<const std::byte*>(base_) + offset,
                                      out.size(), cudaMemcpyDeviceToHost, *stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(*stream);
    give_back(*stream);
    if (err != cudaSuccess) {
      return Status::Internal(std::string("copy out of the CUDA IPC region: ") +
                              cudaGetErrorString(err));
    }
    return Status::Ok();
  }

 private:
  // A non-blocking stream no other copy uses now: the decode threads copy at once, and none of
  // them waits on the model's work (the legacy default stream would).
  Result<cudaStream_t> take_stream() {
    {
      const std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        const cudaStream_t s = idle_.back();
        idle_.pop_back();
        return s;
      }
    }
    cudaStream_t s = nullptr;
    if (const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        err != cudaSuccess) {
      return cuda_status(err, "cudaStreamCreateWithFlags");
    }
    const std::lock_guard lock(mu_);
    streams_.push_back(s);
    return s;
  }
  void give_back(cudaStream_t s) {
    const std::lock_guard lock(mu_);
    idle_.push_back(s);
  }

  void* base_;
  int64_t bytes_;
  std::mutex mu_;                      // guards the streams
  std::vector<cudaStream_t> streams_;  // every stream made
  std::vector<cudaStream_t> idle_;
};

}  // namespace

Result<std::unique_ptr<kv::PeerRegion>> create_cuda_peer_region(int64_t bytes) {
  if (bytes <= kv::kPeerRegionHeaderBytes) {
    return Status::InvalidArgument("a peer region of " + std::to_string(bytes) +
                                   " bytes holds no slot");
  }
  void* base = nullptr;
  if (const cudaError_t err = cudaMalloc(&base, static_cast<size_t>(bytes)); err != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(err, "--kv-peer-region-bytes: cudaMalloc of " + std::to_string(bytes) +
                                " bytes (the region comes on top of the KV pool)");
  }
  cudaIpcMemHandle_t h{};
  if (const cudaError_t err = cudaIpcGetMemHandle(&h, base); err != cudaSuccess) {
    cudaFree(base);
    return cuda_status(err, "cudaIpcGetMemHandle");
  }
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  std::array<std::byte, kv::kPeerRegionHeaderUsedBytes> header{};
  kv::encode_peer_region_header({kv::PeerRegionKind::kCudaIpc, id, static_cast<uint64_t>(bytes)},
                                header);
  if (const cudaError_t err =
          cudaMemcpy(base, header.data(), header.size(), cudaMemcpyHostToDevice);
      err != cudaSuccess) {
    cudaFree(base);
    return cuda_status(err, "writing the peer region's header");
  }
  std::string handle(reinterpret_cast<const char*>(&h), sizeof(h));
  return std::unique_ptr<kv::PeerRegion>(new CudaRegion(base, bytes, id, std::move(handle)));
}

Result<std::unique_ptr<kv::PeerRegionView>> open_cuda_peer_region(std::string_view handle,
                                                                  uint64_t region_id,
                                                                  int64_t size_bytes) {
  cudaIpcMemHandle_t h{};
  if (handle.size() != sizeof(h)) {
    return Status::InvalidArgument("a CUDA IPC handle of " + std::to_string(handle.size()) +
                                   " bytes");
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  void* base = nullptr;
  if (const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
      err != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(err, "cudaIpcOpenMemHandle");
  }
  auto view = std::make_unique<CudaView>(base, size_bytes);
  std::array<std::byte, kv::kPeerRegionHeaderUsedBytes> header{};
  STRATA_RETURN_IF_ERROR(view->copy_out(0, header));
  STRATA_RETURN_IF_ERROR(kv::check_peer_region_header(
      header, {kv::PeerRegionKind::kCudaIpc, region_id, static_cast<uint64_t>(size_bytes)}));
  return std::unique_ptr<kv::PeerRegionView>(std::move(view));
}

}  // namespace strata::model
