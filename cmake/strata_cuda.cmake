# Decides STRATA_WITH_CUDA from STRATA_CUDA (AUTO | ON | OFF) and enables the CUDA language.
# Kernels are built for Hopper only (sm_90a: wgmma and the bulk tensor copy engine need the "a"
# target), so the architecture flags are given explicitly rather than through
# CMAKE_CUDA_ARCHITECTURES.
set(STRATA_WITH_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(STRATA_WITH_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler was found (install NVIDIA's CUDA 13 "
                        "toolkit, or configure with -DSTRATA_CUDA=OFF)")
  endif()
endif()
if(STRATA_WITH_CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag; tell it (harmless where it does know). Set after
  # enable_language, whose compiler module would otherwise leave it empty.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(STRATA_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a")
  message(STATUS "strata: CUDA backend ON (${CMAKE_CUDA_COMPILER_VERSION}, sm_90a)")
else()
  message(STATUS "strata: CUDA backend OFF")
endif()
