#pragma once
// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl() may be scheduled
// while the kernel before it on the stream is still finishing (its blocks exiting), instead of
// after it has completed and its launch has been processed; inside a CUDA graph the dependency
// becomes a programmatic edge. The kernel must call pdl_wait() before it touches any memory the
// previous kernels write or read: pdl_wait() returns once they have completed and their writes
// are visible. Launched without the attribute (or before sm_90) pdl_wait() returns at once.
//
// pdl_launch_dependents() lets the next kernel on the stream launch before this one's blocks have
// exited: its blocks are scheduled beside this kernel's and run up to their own pdl_wait() (the
// small-batch GEMV loads its first weights there). Without it the next kernel launches as this
// one's blocks exit.
//
// Before pdl_wait() a kernel may read what no kernel of the step writes: weights, and the step's
// inputs (positions, slots, the block table), which the host copies in before the step's first
// kernel, itself launched without the attribute. Loads of those issued before the wait are off
// the path from the previous kernel's end to this one's output (the GEMV's first weights, the
// norms' weights, RoPE's cos / sin table, the decode attention's K/V prefetched into L2).
//
// Decode steps are chains of small kernels (at batch 1 each costs its launch and a ramp more
// than its bytes): the norms, RoPE with the KV append, attention and SiLU go through here.

#include <cuda_runtime.h>

#include <utility>

namespace strata::cuda::detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace strata::cuda::detail
