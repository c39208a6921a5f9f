#include "kernels/cuda/cuda_check.h"

#include <string>

namespace strata::cuda {

Status cuda_error_status(cudaError_t err, const char* expr, const char* file, int line) {
  std::string msg = std::string(expr) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  return Status::Internal(std::move(msg));
}

}  // namespace strata::cuda
