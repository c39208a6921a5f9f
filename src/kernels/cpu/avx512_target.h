#pragma once
// What every AVX-512 kernel file includes first: <immintrin.h>, and STRATA_AVX512, the
// per-function target of its kernels. The rest of the library stays baseline x86-64; cpu_isa.cc
// checks these features before an AVX-512 path is chosen.

#if defined(__x86_64__)
// gcc 12's AVX-512 intrinsics start from _mm512_undefined_ps() (a self-initialized variable),
// which its own -Wuninitialized then reports once they are inlined; the warning is about the
// header, not the kernels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#endif
