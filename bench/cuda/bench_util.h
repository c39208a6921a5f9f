#pragma once
// What the CUDA benchmarks share: exiting with one line on an error, the seeded bf16 values the
// attention benchmarks' Q rows hold (and those rows as the kernels multiply them), and event
// timing (the median of runs of back-to-back calls).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/event.h"
#include "kernels/cuda/query_codes.h"
#include "kernels/cuda/random_fill.h"

namespace strata::cuda::bench {

// Prints "what: error" and exits 1 on a failed status or CUDA call.
inline void die_if(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}
inline void die_if(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <typename T>
T take(Result<T> r, const char* what) {
  die_if(r.status(), what);
  return std::move(r).value();
}

// Element i of random_fill's seeded values in [lo, hi) as bf16 holds it (the host conversions,
// named in full: strata::cuda has device conversions of the same names).
inline float bf16_value(uint64_t seed, int64_t i, float lo, float hi) {
  return strata::bf16_to_f32(strata::f32_to_bf16(random_fill_value(seed, i, lo, hi)));
}

// The attention benchmarks' query row at element offset `off` (d values of bf16_value(seed, ..,
// -2, 2)) as attention over a cache of kv_dtype multiplies it: over FP8 and INT8 caches rounded
// to codes as the kernels round it (query_codes.h).
inline std::vector<double> query_row(uint64_t seed, int64_t off, int32_t d, DType kv_dtype) {
  std::vector<double> q(static_cast<size_t>(d));
  for (int32_t e = 0; e < d; ++e) q[static_cast<size_t>(e)] = bf16_value(seed, off + e, -2, 2);
  round_query_row(std::span<double>(q), kv_dtype);
  return q;
}

// The median over `runs` of the milliseconds per call of `calls` back-to-back launch(i)
// (i = 0 .. calls - 1) between two events on `stream`. launch returns a Status (checked) or
// nothing (the stream's last error is checked at the end).
template <typename F>
double median_ms_per_call(cudaStream_t stream, int runs, int calls, F&& launch) {
  Event start = take(Event::create(), "event");
  Event end = take(Event::create(), "event");
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    die_if(start.record(stream), "record");
    for (int i = 0; i < calls; ++i) {
      if constexpr (std::is_void_v<decltype(launch(i))>) {
        launch(i);
      } else {
        die_if(launch(i), "launch");
      }
    }
    die_if(end.record(stream), "record");
    die_if(end.synchronize(), "sync");
    ms.push_back(take(Event::elapsed_ms(start, end), "elapsed") / calls);
  }
  die_if(cudaGetLastError(), "launch");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Microseconds per call when max(copies, 20) launches (launch(i % copies)) are replayed from one
// CUDA graph: no per-launch host cost, which is what a captured decode step pays. For kernels
// short enough that an event pair around one launch times the launch rather than the kernel.
template <typename F>
double time_graph_us(cudaStream_t stream, int copies, F&& launch) {
  const int calls = std::max(copies, 20);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  die_if(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) die_if(launch(i % copies), "captured launch");
  die_if(cudaStreamEndCapture(stream, &graph), "end capture");
  die_if(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  die_if(cudaGraphLaunch(exec, stream), "graph launch");
  die_if(cudaStreamSynchronize(stream), "sync");
  const double us = 1e3 / calls * median_ms_per_call(stream, 5, 1, [&](int) {
                      return cudaGraphLaunch(exec, stream);
                    });
  die_if(cudaGraphExecDestroy(exec), "destroy");
  die_if(cudaGraphDestroy(graph), "destroy");
  return us;
}

}  // namespace strata::cuda::bench
