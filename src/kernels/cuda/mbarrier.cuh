#pragma once
// Shared-memory barriers for warp-specialized kernels (sm_90): mbarriers whose phases hand a
// pipeline stage from the warps that fill it to the warps that read it and back, named barriers
// for a subset of the block, and register reallocation between warpgroups. Internal (.cuh).

#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace strata::cuda::detail {

// One thread initializes; the block synchronizes before any other use.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}

// Waits until the barrier's phase of the given parity has completed. A fresh barrier is in
// phase 0, so waiting on parity 1 returns at once (a stage not yet used counts as released).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Counts one arrival of the calling thread (release: its earlier writes are seen by waiters).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar))
               : "memory");
}

// Counts one arrival of the calling thread once all the cp.async copies it issued so far have
// landed (the arrival is one of the barrier's expected count).
__device__ __forceinline__ void mbarrier_arrive_cp_async(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
}

// Counts the calling thread's arrival and raises the phase's expected bytes by `bytes` (the bulk
// copies issued next complete them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Bulk tensor copy (TMA) of the box at coordinates (c0, c1, c2, c3) of a 4-d tensor map into
// shared memory at dst; its bytes count toward bar's expected bytes.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, int c3, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// Bulk copy (not tensor) of `bytes` contiguous bytes from global src into shared memory at dst;
// both 16-byte aligned, bytes a multiple of 16. Its bytes count toward bar's expected bytes.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Waits for all of this thread's cp.async copies.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// A barrier among `threads` threads (whole warps) of the block; id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts the calling warps' arrival at named barrier `id` without waiting: the warps that
// bar.sync on it are released once `threads` threads (theirs and the arrivals) have come.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation between the warpgroups of a block (every warp of a warpgroup executes
// the same one): a producer gives registers back, consumers take them.
template <uint32_t kRegs>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace strata::cuda::detail
