#include "kernels/cuda/cublas_lt_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/check.h"

namespace strata::cuda::detail {
namespace {

// The soname of the toolkit the kernels are built against (CUDA 13).
constexpr const char* kLibrary = "libcublasLt.so.13";

struct Loaded {
  CublasLt api;
  Status status;
};

template <typename F>
bool resolve(void* lib, const char* name, F& out, Status& status) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr && status.ok()) {
    status = Status::Unavailable(std::string(kLibrary) + " has no " + name);
  }
  return out != nullptr;
}

Loaded load() {
  Loaded l;
  // Never closed: the handles it creates live until the process ends.
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.status = Status::Unavailable(std::string("cannot load ") + kLibrary + ": " +
                                   (why != nullptr ? why : "unknown error"));
    return l;
  }
  CublasLt& a = l.api;
  Status& s = l.status;
  resolve(lib, "cublasLtCreate", a.Create, s);
  resolve(lib, "cublasLtDestroy", a.Destroy, s);
  resolve(lib, "cublasLtGetStatusName", a.GetStatusName, s);
  resolve(lib, "cublasLtGetStatusString", a.GetStatusString, s);
  resolve(lib, "cublasLtMatmul", a.Matmul, s);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", a.MatmulAlgoGetHeuristic, s);
  resolve(lib, "cublasLtMatmulDescCreate", a.MatmulDescCreate, s);
  resolve(lib, "cublasLtMatmulDescDestroy", a.MatmulDescDestroy, s);
  resolve(lib, "cublasLtMatmulDescSetAttribute", a.MatmulDescSetAttribute, s);
  resolve(lib, "cublasLtMatmulPreferenceCreate", a.MatmulPreferenceCreate, s);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", a.MatmulPreferenceDestroy, s);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", a.MatmulPreferenceSetAttribute, s);
  resolve(lib, "cublasLtMatrixLayoutCreate", a.MatrixLayoutCreate, s);
  resolve(lib, "cublasLtMatrixLayoutDestroy", a.MatrixLayoutDestroy, s);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();  // thread-safe, once
  return l;
}

}  // namespace

Result<const CublasLt*> load_cublas_lt() {
  const Loaded& l = loaded();
  if (!l.status.ok()) return l.status;
  return &l.api;
}

const CublasLt& cublas_lt() {
  const Loaded& l = loaded();
  STRATA_CHECK(l.status.ok(), "cuBLASLt used before it was loaded");
  return l.api;
}

}  // namespace strata::cuda::detail
