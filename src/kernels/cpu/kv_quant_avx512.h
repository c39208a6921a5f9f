#pragma once
// AVX-512 decoders of quantized KV rows (kv_quant.cc picks them when best_cpu_isa() is kAvx512).
// Each output is one fp32 multiply of the code's value by the scale (then, for I4, one fp32 add
// of the zero point), as on the portable path, so both return the same bits. Only call when
// cpu_supports(kAvx512).

#include <cstdint>

namespace strata::cpu::detail {

// dst[i] = codes[i] * scale for i < n.
void dequantize_int8_avx512(const int8_t* codes, float scale, int64_t n, float* dst);
// dst[i] = fp8_to_f32(codes[i]) * scale for i < n, e4m3 or e5m2 codes (decoded in registers;
// exactly the values of fp8_e4m3_table() / fp8_e5m2_table()).
void dequantize_fp8_avx512(const uint8_t* codes, bool e4m3, float scale, int64_t n, float* dst);
// I4, n even, codes packed two per byte (low nibble = even element): K's per-channel form,
// dst[i] = code_i * scales[i] + zeros[i] with fp16 scales / zero points (widened exactly by
// vcvtph2ps), and V's per-row form, dst[i] = code_i * scale + zero (an fp32 multiply, then an
// fp32 add: the portable decoder's bits).
void dequantize_int4_avx512(const uint8_t* codes, const uint16_t* scales, const uint16_t* zeros,
                            int64_t n, float* dst);
void dequantize_int4_row_avx512(const uint8_t* codes, float scale, float zero, int64_t n,
                                float* dst);

}  // namespace strata::cpu::detail
