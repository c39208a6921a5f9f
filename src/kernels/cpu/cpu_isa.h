#pragma once
// Which instruction-set path the CPU kernels take, chosen once at run time. The library is built
// for baseline x86-64 (SSE2); faster paths are compiled per function with
// __attribute__((target(...))) and taken only when the running CPU has the instructions, so one
// binary runs everywhere.
//
// Determinism: every path computes each output with the same fp32 operations in the same order
// (8 lanes, separate multiply and add, the same tail and reduction tree), so results are
// bit-identical whichever path runs; tests check this.

#include <array>

namespace strata::cpu {

enum class CpuIsa {
  kPortable,  // GCC vector extensions on SSE2: any x86-64 (and any other target)
  kAvx2,      // AVX2 + F16C: 8-lane fp32, BF16/F16 widened in registers
};

inline constexpr std::array<CpuIsa, 2> kCpuIsas = {CpuIsa::kPortable, CpuIsa::kAvx2};

// True when the running CPU can execute `isa`'s path.
bool cpu_supports(CpuIsa isa);

// The fastest path the running CPU supports (computed once).
CpuIsa best_cpu_isa();

const char* cpu_isa_name(CpuIsa isa);

}  // namespace strata::cpu
