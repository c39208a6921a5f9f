#pragma once
// cuBLASLt, loaded on first use: libcublasLt.so.13 is opened with dlopen when the first Gemm is
// created, not linked into every binary that links the CUDA kernels. The library's start-up
// initialization takes about 0.4 s of every process that loads it, device or not; a `strata`
// run on the CPU, and a test or tool that never multiplies on the GPU, no longer pays it.
// Host-only header (gemm.cc is its one user).

#include <cublasLt.h>

#include "core/status.h"

namespace strata::cuda::detail {

// The entry points gemm.cc calls, resolved from the loaded library.
struct CublasLt {
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtGetStatusName) GetStatusName = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
};

// Loads the library once (thread-safe) and returns its entry points, or Unavailable naming the
// library or the missing symbol and dlerror()'s reason.
Result<const CublasLt*> load_cublas_lt();

// The entry points once load_cublas_lt() has succeeded (checked): for code that only runs after
// a Gemm exists.
const CublasLt& cublas_lt();

}  // namespace strata::cuda::detail
