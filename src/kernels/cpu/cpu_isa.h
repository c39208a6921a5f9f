#pragma once
// Which instruction-set path the CPU kernels take, chosen once at run time. The library is built
// for baseline x86-64 (SSE2); faster paths are compiled per function with
// __attribute__((target(...))) and taken only when the running CPU has the instructions, so one
// binary runs everywhere.
//
// Determinism: within one path every output is computed by one fixed sequence of fp32 operations
// whatever the batch size, tile or thread count (what batch and chunking invariance rest on).
// kAvx2 (8 lanes) and kAvx512 (16 lanes) fuse multiply-adds and take exp from a polynomial, so
// they round differently from kPortable's separate multiply and add and std::exp (tests hold each
// to the float64 reference and to exact equality with itself across m, row position, tile and
// thread count). A process uses one path for all its work (best_cpu_isa()).

#include <array>

namespace strata::cpu {

enum class CpuIsa {
  kPortable,  // GCC vector extensions on SSE2: any x86-64 (and any other target)
  kAvx2,      // AVX2 + FMA + F16C: 8-lane fp32, BF16/F16 widened in registers
  kAvx512,    // AVX-512 F/BW/VL + FMA + F16C: 16-lane fused multiply-adds, BF16/F16 widened in
              // registers
};

inline constexpr std::array<CpuIsa, 3> kCpuIsas = {CpuIsa::kPortable, CpuIsa::kAvx2,
                                                   CpuIsa::kAvx512};

// True when the running CPU can execute `isa`'s path.
bool cpu_supports(CpuIsa isa);

// The fastest path the running CPU supports (computed once).
CpuIsa best_cpu_isa();

const char* cpu_isa_name(CpuIsa isa);

// True when the running CPU has kAvx512 and the AVX-512 BF16 dot products (vdpbf16ps,
// vcvtneps2bf16): the BF16 linear path (linear.h, LinearPrecision::kBf16).
bool cpu_supports_avx512_bf16();

}  // namespace strata::cpu
