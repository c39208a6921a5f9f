#pragma once
// STRATA_CUDA_CHECK: turns a failed CUDA runtime call into a Status (STYLE.md, "Errors": launchers
// return Status, never ignore a return code). Host-only; includes no device code.

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace strata::cuda {

// Status::Internal("<expr> failed at <file>:<line>: <cudaGetErrorName>: <cudaGetErrorString>").
Status cuda_error_status(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace strata::cuda

// Evaluates a cudaError_t expression; returns a non-OK Status from the enclosing function on error.
#define STRATA_CUDA_CHECK(expr)                                                              \
  do {                                                                                       \
    const cudaError_t strata_cuda_err_ = (expr);                                             \
    if (strata_cuda_err_ != cudaSuccess) [[unlikely]] {                                      \
      return ::strata::cuda::cuda_error_status(strata_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())
