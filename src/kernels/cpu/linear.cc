#include "kernels/cpu/linear.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16_avx512.h"
#include "kernels/cpu/linear_avx512.h"
#include "kernels/cpu/linear_fma_avx2.h"

namespace strata::cpu {
namespace {

constexpr int64_t kNTile = 16;  // rows of W per task (widened to fp32 together when BF16/F16)
constexpr int64_t kMTile = 64;  // rows of x per task

Status validate(const float* x, const TensorView& weight, const TensorView& bias, const float* out,
                int64_t m) {
  if (weight.empty() || weight.rank != 2) {
    return Status::InvalidArgument("linear: weight must be a non-null [n, k] tensor");
  }
  if (weight.shape[0] <= 0 || weight.shape[1] <= 0) {
    return Status::InvalidArgument("linear: weight dimensions must be positive");
  }
  if (!is_cpu_float_dtype(weight.dtype)) {
    return Status::Unsupported("linear: weight dtype " + std::string(dtype_name(weight.dtype)) +
                               " (supported: F32, BF16, F16)");
  }
  if (!bias.empty()) {
    if (bias.rank != 1 || bias.shape[0] != weight.shape[0]) {
      return Status::InvalidArgument("linear: bias must be [n] with n = weight.dim(0)");
    }
    if (!is_cpu_float_dtype(bias.dtype)) {
      return Status::Unsupported("linear: bias dtype " + std::string(dtype_name(bias.dtype)) +
                                 " (supported: F32, BF16, F16)");
    }
  }
  if (m < 0) return Status::InvalidArgument("linear: negative m");
  if (m > 0 && (x == nullptr || out == nullptr)) {
    return Status::InvalidArgument("linear: x and out must not be null");
  }
  return Status::Ok();
}

// The [mt, nt] block of out at `out` (row stride ldo): dot products, then + bias (if any), so each
// output is exactly dot(x row, w row) + bias[c] in fp32.
void compute_block(const float* x, int64_t mt, const float* w, int64_t nt, int64_t k,
                   const float* bias, float* out, int64_t ldo) {
  detail::matmul_nt(x, k, mt, w, k, nt, k, out, ldo);
  if (bias == nullptr) return;
  for (int64_t r = 0; r < mt; ++r) {
    for (int64_t c = 0; c < nt; ++c) out[r * ldo + c] += bias[c];
  }
}

// cpu_supports() once per path: it runs CPUID, which traps to the hypervisor in a virtual machine
// (~8 us each on the development machine, 1.7 % of a 16-stream decode step at ~170 calls a step).
bool supported(CpuIsa isa) {
  static const std::array<bool, kCpuIsas.size()> supported_isas = [] {
    std::array<bool, kCpuIsas.size()> s{};
    for (size_t i = 0; i < kCpuIsas.size(); ++i) s[i] = cpu_supports(kCpuIsas[i]);
    return s;
  }();
  for (size_t i = 0; i < kCpuIsas.size(); ++i) {
    if (kCpuIsas[i] == isa) return supported_isas[i];
  }
  return false;
}

std::vector<float>& weight_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Tasks [0, num_tasks) split into one contiguous region per participant. The owner of a region
// claims it front to back, a grain at a time, and in halving claims (down to min_grain) once less
// than two grains are left; a participant whose region is done takes min_grain tasks at a time
// from the back of the others', so one the OS delays (the machine is shared) leaves its work to
// the rest instead of stalling the call, and the threads of a call end within about min_grain
// of each other. Each region's (front, back) is one atomic word.
class RegionClaims {
 public:
  RegionClaims(int64_t num_tasks, int64_t num_regions)
      : num_regions_(num_regions),
        words_(std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(num_regions))) {
    STRATA_CHECK(num_tasks < (int64_t{1} << 32), "linear: too many tasks for one call");
    for (int64_t r = 0; r < num_regions; ++r) {
      words_[r].store(pack(num_tasks * r / num_regions, num_tasks * (r + 1) / num_regions),
                      std::memory_order_relaxed);
    }
  }
  int64_t num_regions() const { return num_regions_; }

  // Claims tasks from the front (owner: half of what is left, between min_grain and grain) or
  // the back (thief: min_grain) of region r; false when it is empty. min_grain <= grain.
  bool claim(int64_t r, bool from_front, int64_t grain, int64_t min_grain, int64_t* begin,
             int64_t* end) {
    uint64_t word = words_[r].load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<int64_t>(word >> 32);
      const auto back = static_cast<int64_t>(word & 0xFFFFFFFFu);
      if (front >= back) return false;
      const int64_t count =
          from_front ? std::clamp<int64_t>((back - front) / 2, min_grain, grain) : min_grain;
      *begin = from_front ? front : std::max(front, back - count);
      *end = from_front ? std::min(back, front + count) : back;
      const uint64_t next = from_front ? pack(*end, back) : pack(front, *begin);
      if (words_[r].compare_exchange_weak(word, next, std::memory_order_relaxed)) return true;
    }
  }

 private:
  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  int64_t num_regions_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

// A decode step (m = 1) claims about this many weight bytes at a time (2-4 us of streaming). The
// threads end a call within about one claim of each other, and a decode step makes ~170 calls:
// the prefill grain, an eighth of the matrix at 2 threads, could leave one thread idle for up to
// a quarter of a call.
constexpr int64_t kDecodeClaimBytes = 128 * 1024;

// The AVX-512 and AVX2 paths. Tasks are (block of rows of x, group of kAvx512TileCols /
// kFmaAvx2GroupCols rows of W), x-block major. Each thread owns a contiguous region of them
// (RegionClaims), so its claims follow one another in memory and the micro-kernel's prefetch of
// the next weight group at the end of one claim fetches the start of the next (claims from one
// shared counter interleaved the threads: every claim started cold and ended prefetching another
// thread's group). A prefill keeps its x block in L2 while W streams past; a decode step (m = 1)
// reads long runs of consecutive weight rows. Each claimed range is one micro-kernel call per x
// block it touches.

// Rows of x per block of the AVX-512 kernels: at most 64, and few enough that the block (re-read
// once per group of weight rows) stays in a 1 MB L2 next to the weights streaming past, e.g. 24
// rows for k = 4864.
int64_t avx512_block_rows(int64_t x_row_bytes) {
  constexpr int64_t kXBlockBytes = 512 * 1024;
  return std::clamp<int64_t>(kXBlockBytes / x_row_bytes / 4 * 4, 4, kMTile);
}

// Rows of x per block of the AVX2 kernel: it reads x in k-blocks of 256 columns (1 KB a row), so
// the block's size is set by how many rows share each widened weight slab, not by L2.
constexpr int64_t kAvx2BlockRows = 128;

// Splits [m, n] over the pool as the AVX-512 and AVX2 paths do (below) and calls
// tile(m0, rows, n0, cols, bias) for each claimed range: blocks of m_tile rows of x, groups of
// `group` weight rows of group_bytes each.
template <class Tile>
void run_claimed_tiles(int64_t m, int64_t n, int64_t m_tile, int64_t group, int64_t group_bytes,
                       const TensorView& bias, ThreadPool& pool, const Tile& tile) {
  const int64_t num_groups = (n + group - 1) / group;
  const int64_t num_m_tiles = (m + m_tile - 1) / m_tile;
  // The bias as fp32 once per call (n floats; the kernel adds it after the dot product).
  thread_local std::vector<float> bias_f32;
  if (!bias.empty()) {
    bias_f32.resize(static_cast<size_t>(n));
    detail::load_f32(bias.data, bias.dtype, 0, n, bias_f32.data());
  }
  const float* b = bias.empty() ? nullptr : bias_f32.data();
  const int64_t num_tasks = num_m_tiles * num_groups;
  const int64_t prefill_grain = std::max<int64_t>(1, num_tasks / (4 * pool.num_threads()));
  const int64_t grain = m == 1
                            ? std::clamp<int64_t>(kDecodeClaimBytes / group_bytes, 1, prefill_grain)
                            : prefill_grain;
  // A prefill's claims shrink to 1/32 of the weight groups at the end of a region (the last
  // quarter-region claim left one thread idle for 2-6 % of a call, median, 25 % at p90); a decode
  // step's claims are already small and keep one size (a thief's claims, read back to front,
  // start cold).
  const int64_t min_grain = m == 1 ? grain : std::clamp<int64_t>(num_groups / 32, 1, grain);
  RegionClaims claims(num_tasks,
                      std::min<int64_t>(pool.num_threads(), (num_tasks + grain - 1) / grain));
  const auto run = [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t g0 = begin % num_groups;
      const int64_t g1 = std::min(num_groups, g0 + (end - begin));
      const int64_t m0 = (begin / num_groups) * m_tile;
      const int64_t n0 = g0 * group;
      const int64_t nt = std::min(n, g1 * group) - n0;
      tile(m0, std::min(m_tile, m - m0), n0, nt, b == nullptr ? nullptr : b + n0);
      begin += g1 - g0;
    }
  };
  pool.parallel_for(claims.num_regions(), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      int64_t begin = 0;
      int64_t end = 0;
      while (claims.claim(r, true, grain, min_grain, &begin, &end)) run(begin, end);
    }
    for (int64_t i = 1; i < claims.num_regions(); ++i) {
      const int64_t r = (last - 1 + i) % claims.num_regions();
      int64_t begin = 0;
      int64_t end = 0;
      while (claims.claim(r, false, grain, min_grain, &begin, &end)) run(begin, end);
    }
  });
}

// The fp32 kernels of the AVX-512 and AVX2 paths (matmul_nt_avx512, matmul_nt_fma_avx2), one call
// per claimed range: blocks of m_tile rows of x against groups of `group` weight rows.
using MatmulNt = void (*)(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype,
                          int64_t n, int64_t k, const float* bias, float* out, int64_t ldo);
void linear_fp32(MatmulNt matmul_nt, int64_t m_tile, int64_t group, const float* x,
                 const TensorView& weight, const TensorView& bias, float* out, int64_t m,
                 ThreadPool& pool) {
  const int64_t n = weight.shape[0];
  const int64_t k = weight.shape[1];
  const int64_t w_elem_bytes = dtype_size(weight.dtype);
  const char* w = static_cast<const char*>(weight.data);
  run_claimed_tiles(m, n, m_tile, group, group * k * w_elem_bytes, bias, pool,
                    [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float* b) {
                      matmul_nt(x + m0 * k, k, rows, w + n0 * k * w_elem_bytes, weight.dtype, cols,
                                k, b, out + m0 * n + n0, n);
                    });
}

// The BF16 path (LinearPrecision::kBf16, BF16 weights): x rounded to BF16 once per call, rows
// zero-padded to a multiple of 32 -- a decode step's single row as it is, more rows packed in
// row tiles (pack_rows_to_bf16) -- then the AVX-512 split over vdpbf16ps tiles
// (gemm_bf16_avx512.h). Every row count takes it, so a row's result never depends on the batch.
void linear_bf16_avx512(const float* x, const TensorView& weight, const TensorView& bias,
                        float* out, int64_t m, ThreadPool& pool) {
  const int64_t n = weight.shape[0];
  const int64_t k = weight.shape[1];
  const int64_t ldx = (k + 31) / 32 * 32;
  const auto* w = static_cast<const uint16_t*>(weight.data);
  const int64_t group_bytes = detail::kBf16TileCols * k * static_cast<int64_t>(sizeof(uint16_t));
  thread_local std::vector<uint16_t> x_bf16;
  if (m == 1) {
    x_bf16.resize(static_cast<size_t>(ldx));
    uint16_t* xb = x_bf16.data();
    detail::round_rows_to_bf16(x, k, 1, k, xb, ldx);
    run_claimed_tiles(1, n, 1, detail::kBf16TileCols, group_bytes, bias, pool,
                      [&](int64_t, int64_t, int64_t n0, int64_t cols, const float* b) {
                        detail::gemv_bf16_avx512(xb, w + n0 * k, cols, k, b, out + n0);
                      });
    return;
  }
  const int64_t tile_rows = detail::kBf16TileRows;
  x_bf16.resize(static_cast<size_t>((m + tile_rows - 1) / tile_rows * tile_rows * ldx));
  uint16_t* xb = x_bf16.data();
  pool.parallel_for(
      m, [&](int64_t r0, int64_t r1) { detail::pack_rows_to_bf16(x, k, r0, r1, k, xb, ldx); },
      /*min_chunk=*/16);
  // run_claimed_tiles' x blocks are a multiple of 4 rows, so each starts at a row tile.
  static_assert(detail::kBf16TileRows == 4);
  run_claimed_tiles(m, n, avx512_block_rows(ldx * static_cast<int64_t>(sizeof(uint16_t))),
                    detail::kBf16TileCols, group_bytes, bias, pool,
                    [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float* b) {
                      detail::matmul_nt_bf16_avx512(xb + m0 * ldx, ldx, rows, w + n0 * k, cols, k,
                                                    b, out + m0 * n + n0, n);
                    });
}

// Process-wide, not per thread: a forward pass's linear() calls also run on pool workers (the
// MoE block runs whole experts on them), which must follow the scope the step loop opened.
std::atomic<LinearPrecision> g_precision{LinearPrecision::kF32};

}  // namespace

LinearPrecisionScope::LinearPrecisionScope(LinearPrecision precision)
    : saved_(g_precision.exchange(precision, std::memory_order_relaxed)) {}

LinearPrecisionScope::~LinearPrecisionScope() {
  g_precision.store(saved_, std::memory_order_relaxed);
}

LinearPrecision current_linear_precision() { return g_precision.load(std::memory_order_relaxed); }

bool linear_precision_supported(LinearPrecision precision) {
  switch (precision) {
    case LinearPrecision::kF32:
      return true;
    case LinearPrecision::kBf16:
      return cpu_supports_avx512_bf16();
  }
  return false;
}

const char* linear_precision_name(LinearPrecision precision) {
  switch (precision) {
    case LinearPrecision::kF32:
      return "fp32";
    case LinearPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

Status linear(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
              ThreadPool& pool) {
  if (weight.dtype == DType::kBF16 &&
      g_precision.load(std::memory_order_relaxed) == LinearPrecision::kBf16) {
    return detail::linear_bf16(x, weight, bias, out, m, pool);
  }
  return detail::linear_with_isa(best_cpu_isa(), x, weight, bias, out, m, pool);
}

namespace detail {

Status linear_bf16(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
                   ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate(x, weight, bias, out, m));
  if (weight.dtype != DType::kBF16) {
    return Status::InvalidArgument("linear_bf16: weight dtype " +
                                   std::string(dtype_name(weight.dtype)) + " is not BF16");
  }
  static const bool supported_bf16 = cpu_supports_avx512_bf16();
  if (!supported_bf16) {
    return Status::Unsupported("linear: this CPU has no AVX-512 BF16 dot products (vdpbf16ps)");
  }
  if (m == 0) return Status::Ok();
  linear_bf16_avx512(x, weight, bias, out, m, pool);
  return Status::Ok();
}

Status linear_with_isa(CpuIsa isa, const float* x, TensorView weight, TensorView bias, float* out,
                       int64_t m, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate(x, weight, bias, out, m));
  if (!supported(isa)) {
    return Status::Unsupported(std::string("linear: this CPU cannot run the ") + cpu_isa_name(isa) +
                               " path");
  }
  const int64_t n = weight.shape[0];
  const int64_t k = weight.shape[1];
  if (m == 0) return Status::Ok();
  if (isa == CpuIsa::kAvx512) {
    linear_fp32(detail::matmul_nt_avx512,
                avx512_block_rows(k * static_cast<int64_t>(sizeof(float))), detail::kAvx512TileCols,
                x, weight, bias, out, m, pool);
    return Status::Ok();
  }
  if (isa == CpuIsa::kAvx2) {
    linear_fp32(detail::matmul_nt_fma_avx2, kAvx2BlockRows, detail::kFmaAvx2GroupCols, x, weight,
                bias, out, m, pool);
    return Status::Ok();
  }
  // The portable path. Tasks are n-tile major so a thread's consecutive tasks share one weight
  // tile, widened to fp32 once.
  const int64_t num_m_tiles = (m + kMTile - 1) / kMTile;
  const int64_t num_n_tiles = (n + kNTile - 1) / kNTile;
  pool.parallel_for(num_m_tiles * num_n_tiles, [&](int64_t begin, int64_t end) {
    std::vector<float>& scratch = weight_scratch();
    std::array<float, kNTile> bias_tile{};
    const float* w = nullptr;
    int64_t cached_n_tile = -1;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n_tile = task / num_m_tiles;
      const int64_t m0 = (task % num_m_tiles) * kMTile;
      const int64_t n0 = n_tile * kNTile;
      const int64_t nt = std::min(kNTile, n - n0);
      const int64_t mt = std::min(kMTile, m - m0);
      const float* bias_f32 = bias.empty() ? nullptr : bias_tile.data();
      if (n_tile != cached_n_tile) {
        if (!bias.empty()) detail::load_f32(bias.data, bias.dtype, n0, nt, bias_tile.data());
        if (weight.dtype == DType::kF32) {
          w = static_cast<const float*>(weight.data) + n0 * k;
        } else {
          scratch.resize(static_cast<size_t>(kNTile * k));
          detail::load_f32(weight.data, weight.dtype, n0 * k, nt * k, scratch.data());
          w = scratch.data();
        }
        cached_n_tile = n_tile;
      }
      compute_block(x + m0 * k, mt, w, nt, k, bias_f32, out + m0 * n + n0, n);
    }
  });
  return Status::Ok();
}

}  // namespace detail

}  // namespace strata::cpu
