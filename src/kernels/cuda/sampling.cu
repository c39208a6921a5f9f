#include "kernels/cuda/sampling.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

// A cluster of kStatBlocks thread blocks per row takes the first pass (max, argmax and the sum of
// exp over the raw row: all a greedy row needs), each over one slice of the row, merged in rank
// order through distributed shared memory; block 0 of the cluster then goes on alone. Every phase
// below is a loop of the whole block over the row (in
// global memory, or over the candidates compacted into shared memory) followed by a fixed-order
// reduction, so a row's result never depends on the other rows. Sums that decide which tokens
// survive are integers (token counts, probability mass in fixed point), so the order in which
// atomics land cannot change a threshold; the only float reductions run over the row in a fixed
// thread order. docs/gpu-engine.md, "GPU sampling", has the walk-through.

namespace strata::cuda {
namespace {

constexpr int kThreads = 512;
// Blocks of a row's cluster in the first pass: one block read the 128K logits of a large vocabulary
// with a dependent exponential per element, tens of microseconds for a greedy batch-1 draw.
constexpr int kStatBlocks = 8;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 8;  // loads in flight per thread in a pass over the row
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// The histogram of s = y - max(y): bin b holds s in (-(b + 1) / 8, -b / 8]; s <= -256 falls in
// kUnderflowBin, which is counted but not binned.
constexpr int kBinsPerNat = 8;
constexpr int kValueBins = 2048;
constexpr int kUnderflowBin = kValueBins;
// Radix select over the 32-bit order key of y: digits of 11, 11 and 10 bits (shifts 21, 10, 0).
constexpr int kRadixBins = 2048;
// Candidates (y, token id) the exact phase may hold in shared memory.
constexpr int kCandidates = 6144;
// Probability mass in fixed point: exp(s) * 2^44 (exp(s) <= 1); 152K tokens sum below 2^62.
constexpr float kMassScale = 17592186044416.0f;  // 2^44
constexpr double kMassScaleD = 17592186044416.0;

struct SampleArgs {
  const float* logits;
  int32_t num_rows;
  int32_t vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const uint64_t* seeds;
  int32_t* out_tokens;
  float* out_logprobs;
};

struct RowStats {  // online softmax of the raw row, and its argmax
  float m;         // max (-inf when every logit is -inf / NaN)
  float s;         // sum of exp(x - m)
  int32_t arg;     // lowest id with x == m; -1 when m == -inf
};

struct Best {  // a Gumbel score and its token
  float score;
  int32_t id;
};
constexpr Best kNoBest{-INFINITY, INT32_MAX};

struct Shared {
  unsigned long long radix[kRadixBins];
  uint32_t bins[kValueBins];
  float cand_y[kCandidates];
  int32_t cand_id[kCandidates];
  RowStats red_stats[kWarps];
  Best red_best[kWarps];
  unsigned long long red_u64[kWarps];
  int32_t num_cand;
  int32_t found_digit;
  unsigned long long found_rest;
};

// ---- element helpers ------------------------------------------------------------------------

__device__ __forceinline__ float sanitize(float x) { return isnan(x) ? -INFINITY : x; }

// a - b, with +inf - +inf = 0 (the CPU sampler's shift(): +inf tokens share the mass).
__device__ __forceinline__ float shift(float a, float b) { return a == b ? 0.0f : a - b; }

// The temperature-scaled logit; -0 becomes +0 so that equal values have equal order keys.
__device__ __forceinline__ float scaled(float x, float temperature) {
  const float y = sanitize(x) / temperature;
  return y == 0.0f ? 0.0f : y;
}

// Monotone map float -> uint32 (larger float, larger key).
__device__ __forceinline__ uint32_t order_key(float y) {
  const uint32_t u = __float_as_uint(y);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ int value_bin(float s) {
  const float t = -s * static_cast<float>(kBinsPerNat);
  return t < static_cast<float>(kValueBins) ? static_cast<int>(t) : kUnderflowBin;
}

__device__ __forceinline__ unsigned long long mass_fixed(float s) {
  return __float2ull_rn(expf(s) * kMassScale);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Gumbel variate of (seed, token): u = (32 random bits + 0.5) / 2^32 in (0, 1), g = -log(-log u),
// with -log u taken from whichever of u and 1 - u is small so that neither tail is cut short
// (g spans about [-3.1, 22.9]).
__device__ __forceinline__ float gumbel(uint64_t mixed_seed, int32_t token) {
  const uint64_t h = mix64(mixed_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(token) + 1));
  const uint32_t bits = static_cast<uint32_t>(h >> 32);
  float e;
  if (bits < 0x80000000u) {
    e = -logf((static_cast<float>(bits) + 0.5f) * 0x1p-32f);
  } else {
    e = -log1pf(-((static_cast<float>(0xFFFFFFFFu - bits) + 0.5f) * 0x1p-32f));
  }
  return -logf(e);
}
// Above every value gumbel() returns (its largest is -log(-log1p(-2^-33)) = 22.87).
constexpr float kGumbelMax = 23.0f;

// ---- block reductions (fixed order: every lane of every warp ends with the same bits) ---------

__device__ __forceinline__ RowStats merge(RowStats a, RowStats b) {
  if (a.m < b.m) {
    const RowStats t = a;
    a = b;
    b = t;
  }
  if (b.m == -INFINITY) return a;
  const int32_t arg = a.m == b.m ? min(a.arg, b.arg) : a.arg;
  return {a.m, a.s + b.s * expf(shift(b.m, a.m)), arg};
}
// A total order (score, then lower id), so the butterfly's lanes agree.
__device__ __forceinline__ Best merge(Best a, Best b) {
  return (b.score > a.score || (b.score == a.score && b.id < a.id)) ? b : a;
}
__device__ __forceinline__ unsigned long long merge(unsigned long long a, unsigned long long b) {
  return a + b;
}

__device__ __forceinline__ RowStats shfl_xor(RowStats v, int o) {
  return {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o),
          __shfl_xor_sync(kFullMask, v.arg, o)};
}
__device__ __forceinline__ Best shfl_xor(Best v, int o) {
  return {__shfl_xor_sync(kFullMask, v.score, o), __shfl_xor_sync(kFullMask, v.id, o)};
}
__device__ __forceinline__ unsigned long long shfl_xor(unsigned long long v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}

template <typename T>
__device__ T block_reduce(T v, T identity, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = merge(v, shfl_xor(v, o));
  const int lane = threadIdx.x & 31;
  __syncthreads();  // the previous reduction's readers are done with scratch
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  // Every lane of every warp must end with the total (block-uniform branches follow), so the
  // butterfly spans all 32 lanes, lanes >= kWarps holding the identity.
  v = lane < kWarps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = merge(v, shfl_xor(v, o));
  return v;
}

// ---- passes over a row ------------------------------------------------------------------------

// f(i, x) for every element of the row, thread t taking i = t, t + kThreads, ... in order.
template <typename F>
__device__ __forceinline__ void for_each_raw(const float* x, int32_t vocab, F&& f) {
  for (int32_t base = 0; base < vocab; base += kThreads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = base + u * kThreads + static_cast<int32_t>(threadIdx.x);
      v[u] = i < vocab ? __ldg(x + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = base + u * kThreads + static_cast<int32_t>(threadIdx.x);
      if (i < vocab) f(i, v[u]);
    }
  }
}

// What a sampled row's passes read: the row, its scalars, and where its candidates are.
struct Row {
  const float* x;
  int32_t vocab;
  float temperature;
  float y_max;      // max of scaled(x)
  float log_min_p;  // -inf when min-p is off
  int max_bin;      // candidates have value_bin(s) <= max_bin (kUnderflowBin: no bound)
  bool compacted;   // candidates are sh.cand_* [0, num_cand) instead of the row
  int32_t num_cand;
};

// f(id, y, s) for every candidate of the row: s = y - y_max > -inf, s >= log_min_p and
// value_bin(s) <= max_bin. Over the row or over the compacted candidates (any order).
template <typename F>
__device__ __forceinline__ void for_each_candidate(const Row& r, const Shared& sh, F&& f) {
  if (r.compacted) {
    for (int32_t i = threadIdx.x; i < r.num_cand; i += kThreads) {
      const float y = sh.cand_y[i];
      f(sh.cand_id[i], y, shift(y, r.y_max));
    }
    return;
  }
  for_each_raw(r.x, r.vocab, [&](int32_t i, float x) {
    const float y = scaled(x, r.temperature);
    const float s = shift(y, r.y_max);
    if (s == -INFINITY || !(s >= r.log_min_p)) return;
    if (r.max_bin < kUnderflowBin && value_bin(s) > r.max_bin) return;
    f(i, y, s);
  });
}

// Pass A: max, argmax and sum of exp over the raw row elements [begin, end), block-uniform.
__device__ RowStats row_stats(const float* x, int32_t begin, int32_t end, Shared& sh) {
  RowStats st{-INFINITY, 0.0f, -1};
  for_each_raw(x + begin, end - begin, [&](int32_t j, float raw) {
    const int32_t i = begin + j;
    const float v = sanitize(raw);
    if (v > st.m) {
      st.s = st.s * expf(shift(st.m, v)) + 1.0f;
      st.m = v;
      st.arg = i;
    } else if (v != -INFINITY) {
      st.s += expf(shift(v, st.m));
    }
  });
  return block_reduce(st, RowStats{-INFINITY, 0.0f, -1}, sh.red_stats);
}

// One warp: walking items j = 0, 1, ... (top-down), the first j at which the running sum of
// weight(j) reaches goal, and goal minus the sum before j; -1 when the total stays below goal.
// Weights are >= 0, so the lane holding the crossing is the first whose inclusive sum reaches it.
template <typename T, typename W>
__device__ int warp_find_crossing(int n, W&& weight, T goal, T& rest) {
  const int lane = threadIdx.x & 31;
  const int per = n / 32;
  T sum = 0;
  for (int k = 0; k < per; ++k) sum += weight(lane * per + k);
  T incl = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += t;
  }
  const unsigned ballot = __ballot_sync(kFullMask, incl >= goal);
  if (ballot == 0) return -1;
  const int src = __ffs(ballot) - 1;
  int found = -1;
  T r = 0;
  if (lane == src) {
    T c = incl - sum;
    for (int k = 0; k < per; ++k) {
      const T w = weight(lane * per + k);
      if (c + w >= goal) {
        found = lane * per + k;
        r = goal - c;
        break;
      }
      c += w;
    }
  }
  rest = __shfl_sync(kFullMask, r, src);
  return __shfl_sync(kFullMask, found, src);
}

// The largest order key t such that the candidates with key >= max(t, lower) weigh at least goal
// (weight 1 per token, or its fixed-point mass); goal >= 1. False when they weigh less in all.
template <bool kMass>
__device__ bool radix_select(const Row& r, Shared& sh, uint32_t lower, unsigned long long goal,
                             uint32_t& key_out) {
  uint32_t prefix = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift_bits = level == 0 ? 21 : (level == 1 ? 10 : 0);
    const int digit_bits = level == 2 ? 10 : 11;
    const int nb = 1 << digit_bits;
    const uint32_t high_mask = level == 0 ? 0u : (~0u << (shift_bits + digit_bits));
    for (int i = threadIdx.x; i < nb; i += kThreads) sh.radix[i] = 0;
    __syncthreads();
    for_each_candidate(r, sh, [&](int32_t, float y, float s) {
      const uint32_t key = order_key(y);
      if (key < lower || (key & high_mask) != prefix) return;
      const uint32_t d = (key >> shift_bits) & static_cast<uint32_t>(nb - 1);
      if constexpr (kMass) {
        atomicAdd(&sh.radix[d], mass_fixed(s));
      } else {  // tokens of one warp that share a digit add once
        const unsigned peers = __match_any_sync(__activemask(), d);
        if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) {
          atomicAdd(&sh.radix[d], static_cast<unsigned long long>(__popc(peers)));
        }
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      unsigned long long rest = 0;
      const int j = warp_find_crossing<unsigned long long>(
          nb, [&](int jj) { return sh.radix[nb - 1 - jj]; }, goal, rest);
      if (threadIdx.x == 0) {
        sh.found_digit = j < 0 ? -1 : nb - 1 - j;
        sh.found_rest = rest;
      }
    }
    __syncthreads();
    const int digit = sh.found_digit;
    goal = sh.found_rest;
    if (digit < 0) return false;
    prefix |= static_cast<uint32_t>(digit) << shift_bits;
  }
  key_out = prefix;
  return true;
}

// Pass B: histogram of s over the candidates; returns the number below the binned range and,
// when want_mass, the candidates' total fixed-point mass.
__device__ void bin_pass(const Row& r, Shared& sh, bool want_mass, unsigned long long& under,
                         unsigned long long& mass) {
  for (int i = threadIdx.x; i < kValueBins; i += kThreads) sh.bins[i] = 0;
  __syncthreads();
  unsigned long long my_under = 0, my_mass = 0;
  for_each_candidate(r, sh, [&](int32_t, float, float s) {
    if (want_mass) my_mass += mass_fixed(s);
    const int b = value_bin(s);
    if (b == kUnderflowBin) {
      ++my_under;
      return;
    }
    // Tokens of one warp that share a bin add once (logits crowd into few bins).
    const unsigned peers = __match_any_sync(__activemask(), b);
    if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicAdd(&sh.bins[b], static_cast<uint32_t>(__popc(peers)));
    }
  });
  under = block_reduce(my_under, 0ull, sh.red_u64);
  mass = want_mass ? block_reduce(my_mass, 0ull, sh.red_u64) : 0ull;
}

// Pass C: copies the candidates (y, id) into shared memory; the caller knows they fit.
__device__ void compact(Row& r, Shared& sh) {
  if (threadIdx.x == 0) sh.num_cand = 0;
  __syncthreads();
  for_each_candidate(r, sh, [&](int32_t id, float y, float) {
    const unsigned active = __activemask();
    const int lane = threadIdx.x & 31;
    const int leader = __ffs(active) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(&sh.num_cand, __popc(active));
    base = __shfl_sync(active, base, leader);
    const int pos = base + __popc(active & ((1u << lane) - 1u));
    if (pos < kCandidates) {
      sh.cand_y[pos] = y;
      sh.cand_id[pos] = id;
    }
  });
  __syncthreads();
  r.num_cand = min(sh.num_cand, kCandidates);
  r.compacted = true;
}

// The Gumbel-max draw over the candidates with order key >= min_key.
__device__ int32_t gumbel_argmax(const Row& r, Shared& sh, uint32_t min_key, uint64_t seed) {
  const uint64_t mixed_seed = mix64(seed + 0x632BE59BD9B4E019ull);
  Best best = kNoBest;
  for_each_candidate(r, sh, [&](int32_t id, float y, float s) {
    // A token whose s + max(g) stays below this thread's best cannot win: skip its hash and logs.
    if (order_key(y) < min_key || s + kGumbelMax < best.score) return;
    best = merge(best, Best{s + gumbel(mixed_seed, id), id});
  });
  // The row's max always survives, so a token is found; -1 would report a broken invariant.
  const int32_t id = block_reduce(best, kNoBest, sh.red_best).id;
  return id == INT32_MAX ? -1 : id;
}

// Where the survivors of top-k / top-p can lie, from pass B's histogram (warp 0 decides, all read).
struct Bracket {
  int max_bin;       // candidates: value_bin(s) <= max_bin
  int64_t num_cand;  // how many
  bool top_k_cuts;   // fewer than all candidates survive top-k
};

__device__ Bracket find_bracket(Shared& sh, int32_t top_k, bool use_k, float top_p, bool use_p,
                                unsigned long long under, unsigned long long mass_all) {
  __shared__ Bracket result;
  if (threadIdx.x < 32) {
    unsigned long long binned = 0;
    for (int b = threadIdx.x; b < kValueBins; b += 32) binned += sh.bins[b];
    for (int o = 16; o > 0; o >>= 1) binned += __shfl_xor_sync(kFullMask, binned, o);
    const unsigned long long total = binned + under;
    Bracket br{kUnderflowBin, static_cast<int64_t>(total), false};
    const auto count = [&](int b) { return static_cast<unsigned long long>(sh.bins[b]); };
    if (use_k && total > static_cast<unsigned long long>(top_k)) {
      // The k-th largest lies in the first bin where the running count reaches k.
      br.top_k_cuts = true;
      unsigned long long rest = 0;
      const int b = warp_find_crossing<unsigned long long>(
          kValueBins, count, static_cast<unsigned long long>(top_k), rest);
      if (b >= 0) br.max_bin = b;
    } else if (use_p) {
      // Each token of bin b weighs more than exp(-(b + 1) / 8): the first bin where that lower
      // bound of the running mass reaches top_p of the exact total holds the nucleus' threshold.
      const double goal = static_cast<double>(top_p) * static_cast<double>(mass_all) / kMassScaleD;
      double rest = 0.0;
      const int b = warp_find_crossing<double>(
          kValueBins,
          [&](int bb) {
            // Rounding to fixed point may lose half a unit per token.
            const double lo = exp(-(bb + 1.0) / kBinsPerNat) * (1.0 - 1e-6) - 0.5 / kMassScaleD;
            return lo > 0.0 ? static_cast<double>(sh.bins[bb]) * lo : 0.0;
          },
          goal + 1.0 / kMassScaleD, rest);
      if (b >= 0) br.max_bin = b;
    }
    if (br.max_bin < kUnderflowBin) {
      unsigned long long n = 0;
      for (int b = threadIdx.x; b <= br.max_bin; b += 32) n += sh.bins[b];
      for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(kFullMask, n, o);
      br.num_cand = static_cast<int64_t>(n);
    }
    if (threadIdx.x == 0) result = br;
  }
  __syncthreads();
  return result;
}

// A sampled (not greedy) row whose max is above -inf.
__device__ int32_t sample_row(const SampleArgs& a, int32_t row, const float* x, float max_logit,
                              Shared& sh) {
  const float temperature = a.temperature[row];
  const int32_t top_k = a.top_k != nullptr ? a.top_k[row] : 0;
  const float top_p = a.top_p != nullptr ? a.top_p[row] : 1.0f;
  const float min_p = a.min_p != nullptr ? a.min_p[row] : 0.0f;
  Row r{x,
        a.vocab,
        temperature,
        scaled(max_logit, temperature),
        min_p > 0.0f ? logf(fminf(min_p, 1.0f)) : -INFINITY,
        kUnderflowBin,
        false,
        0};
  const bool use_k = top_k > 0 && top_k < a.vocab;
  const bool use_p = top_p < 1.0f;
  uint32_t min_key = 0;
  if (use_k || use_p) {
    unsigned long long under = 0, mass_all = 0;
    bin_pass(r, sh, use_p, under, mass_all);
    const Bracket br = find_bracket(sh, top_k, use_k, top_p, use_p, under, mass_all);
    if (br.top_k_cuts || use_p) {
      r.max_bin = br.max_bin;
      if (br.num_cand <= kCandidates) compact(r, sh);
      if (br.top_k_cuts) {
        // Cannot fail: the candidates hold at least top_k tokens.
        radix_select<false>(r, sh, 0u, static_cast<unsigned long long>(top_k), min_key);
      }
      if (use_p) {
        unsigned long long mass = mass_all;  // top-k off: the candidates' bracket was cut by mass
        if (br.top_k_cuts) {
          unsigned long long my_mass = 0;
          for_each_candidate(r, sh, [&](int32_t, float y, float s) {
            if (order_key(y) >= min_key) my_mass += mass_fixed(s);
          });
          mass = block_reduce(my_mass, 0ull, sh.red_u64);
        }
        const double want = ceil(static_cast<double>(top_p) * static_cast<double>(mass));
        const unsigned long long goal = want < 1.0 ? 1ull : static_cast<unsigned long long>(want);
        uint32_t p_key = 0;
        if (radix_select<true>(r, sh, min_key, goal, p_key)) min_key = max(min_key, p_key);
      }
    }
  }
  return gumbel_argmax(r, sh, min_key, a.seeds[row]);
}

// Pass A over the row by the kStatBlocks blocks of its cluster, each over one slice, merged in
// rank order (a fixed order; the argmax, the lowest id at the maximum, is the same for any
// slicing). Every block returns the row's stats.
__device__ RowStats cluster_row_stats(const float* x, int32_t vocab, Shared& sh) {
  namespace cg = cooperative_groups;
  __shared__ RowStats slice_stats;
  const cg::cluster_group cluster = cg::this_cluster();
  const auto rank = static_cast<int32_t>(cluster.block_rank());
  const int32_t chunk = (vocab + kStatBlocks - 1) / kStatBlocks;
  const int32_t begin = min(vocab, rank * chunk);
  const int32_t end = min(vocab, begin + chunk);
  const RowStats mine = row_stats(x, begin, end, sh);
  if (threadIdx.x == 0) slice_stats = mine;
  cluster.sync();  // every slice's stats written
  RowStats st{-INFINITY, 0.0f, -1};
  for (int32_t r = 0; r < kStatBlocks; ++r) {
    st = merge(st, *cluster.map_shared_rank(&slice_stats, static_cast<unsigned>(r)));
  }
  cluster.sync();  // no block exits (its shared memory going away) while another reads it
  return st;
}

__global__ void __cluster_dims__(kStatBlocks, 1, 1) __launch_bounds__(kThreads, 2)
    sample_kernel(const __grid_constant__ SampleArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  const int32_t row = static_cast<int32_t>(blockIdx.x) / kStatBlocks;
  const float* x = a.logits + static_cast<int64_t>(row) * a.vocab;
  const RowStats st = cluster_row_stats(x, a.vocab, sh);
  if (blockIdx.x % kStatBlocks != 0) return;  // block 0 of the cluster draws
  int32_t token = -1;
  if (st.m != -INFINITY) {
    const bool greedy = a.temperature == nullptr ||
                        !(a.temperature[row] >= kSampleGreedyTemperature) ||
                        (a.top_k != nullptr && a.top_k[row] == 1);
    token = greedy ? st.arg : sample_row(a, row, x, st.m, sh);
  }
  if (threadIdx.x == 0) {
    a.out_tokens[row] = token;
    if (a.out_logprobs != nullptr) {
      a.out_logprobs[row] = token < 0 ? -INFINITY : shift(sanitize(x[token]), st.m) - logf(st.s);
    }
  }
}

// One block per row; each thread takes whole 64-bit words of the mask, so a word is read once
// and only its clear bits are written.
__global__ void token_mask_kernel(const __grid_constant__ TokenMaskParams p) {
  const int32_t row = static_cast<int32_t>(blockIdx.x);
  const int32_t m = p.mask_row[row];
  if (m < 0) return;
  const uint64_t* mask = p.masks + static_cast<int64_t>(m) * p.mask_words;
  float* x = p.logits + static_cast<int64_t>(row) * p.vocab;
  const int32_t words = (p.vocab + 63) / 64;
  for (int32_t w = static_cast<int32_t>(threadIdx.x); w < words; w += static_cast<int32_t>(blockDim.x)) {
    uint64_t clear = ~__ldcv(reinterpret_cast<const unsigned long long*>(mask) + w);
    const int32_t base = w * 64;
    while (clear != 0) {
      const int32_t bit = __ffsll(static_cast<long long>(clear)) - 1;
      clear &= clear - 1;
      if (base + bit < p.vocab) x[base + bit] = -INFINITY;
    }
  }
}

__global__ void wait_host_signal_kernel(const uint32_t* signal) {
  const uint32_t awaited = __ldcv(signal);
  while (static_cast<int32_t>(__ldcv(signal + 1) - awaited) < 0) __nanosleep(256);
}

}  // namespace

Status wait_host_signal(const uint32_t* signal, cudaStream_t stream) {
  if (signal == nullptr) return Status::InvalidArgument("wait_host_signal: signal is required");
  wait_host_signal_kernel<<<1, 1, 0, stream>>>(signal);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status apply_token_masks(const TokenMaskParams& p, cudaStream_t stream) {
  if (p.num_rows < 0) return Status::InvalidArgument("apply_token_masks: num_rows must be >= 0");
  if (p.num_rows == 0) return Status::Ok();
  if (p.vocab <= 0) return Status::InvalidArgument("apply_token_masks: vocab must be positive");
  if (p.logits == nullptr || p.mask_row == nullptr || p.masks == nullptr) {
    return Status::InvalidArgument("apply_token_masks: logits, mask_row and masks are required");
  }
  if (p.mask_words < (int64_t{p.vocab} + 63) / 64) {
    return Status::InvalidArgument("apply_token_masks: a mask is shorter than the vocabulary");
  }
  token_mask_kernel<<<static_cast<unsigned>(p.num_rows), 256, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status sample(const SampleParams& p, cudaStream_t stream) {
  if (p.num_rows < 0) return Status::InvalidArgument("sample: num_rows must be >= 0");
  if (p.num_rows == 0) return Status::Ok();
  if (p.vocab <= 0) return Status::InvalidArgument("sample: vocab must be positive");
  if (p.logits == nullptr || p.out_tokens == nullptr) {
    return Status::InvalidArgument("sample: logits and out_tokens are required");
  }
  if (p.temperature != nullptr && p.seeds == nullptr) {
    return Status::InvalidArgument("sample: seeds are required when temperature is given");
  }
  const SampleArgs a{p.logits, p.num_rows, p.vocab, p.temperature, p.top_k,
                     p.top_p,  p.min_p,    p.seeds, p.out_tokens,  p.out_logprobs};
  constexpr int kSmemBytes = static_cast<int>(sizeof(Shared));
  STRATA_CUDA_CHECK(
      cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const auto blocks = static_cast<unsigned>(p.num_rows * kStatBlocks);  // kStatBlocks a row
  sample_kernel<<<blocks, kThreads, kSmemBytes, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
