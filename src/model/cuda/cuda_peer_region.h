#pragma once
// The CUDA IPC peer region (kv/peer_region.h): one cudaMalloc'd region of a prefill instance's
// GPU, exported once with cudaIpcGetMemHandle, which a decode instance in another process on the
// same GPU opens with cudaIpcOpenMemHandle and copies blocks out of (docs/kv.md,
// "Disaggregation", "One machine"). The prefill instance's CudaBlockMover writes its slots device
// to device (CudaBlockMover::to_region).
//
// The handle is the cudaIpcMemHandle_t's 64 bytes. cudaIpcOpenMemHandle refuses a handle of the
// calling process itself, so the reader is only ever another process; a handle that does not
// open (another machine's, a dead process's, garbage) is an error, which makes the blocks a miss.
// Both run on the calling thread's current device (device 0 unless the caller set another).

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/status.h"
#include "kv/peer_region.h"

namespace strata::model {

// The owner's region of bytes (header included) in device memory. Unavailable when cudaMalloc
// or the export fails.
Result<std::unique_ptr<kv::PeerRegion>> create_cuda_peer_region(int64_t bytes);

// A peer's region, opened; its header checked against region_id and size_bytes. data() is the
// mapping's device pointer, which the decode instance's CudaBlockMover copies slots from straight
// into its pool (start_from_region, device to device). copy_out copies device to host (by the
// copy engines) on a stream of its own per concurrent caller, never the legacy default stream.
Result<std::unique_ptr<kv::PeerRegionView>> open_cuda_peer_region(std::string_view handle,
                                                                  uint64_t region_id,
                                                                  int64_t size_bytes);

}  // namespace strata::model
