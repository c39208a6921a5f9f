#pragma once
// Comparisons the engine suites share: relative L2 errors of logit rows and of top-K logprob
// lists, reading an int32 tensor of a reference safetensors file, and a transformers fixture's
// first prompt.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "engine/sampler.h"
#include "model/safetensors.h"

namespace strata::engine::test_util {

inline std::vector<int32_t> int_tensor(const TensorView& t) {
  const auto* p = static_cast<const int32_t*>(t.data);
  return {p, p + t.numel()};
}

// The first prompt of the transformers fixture tests/data/models/<name> (its reference file).
inline std::vector<int32_t> fixture_prompt(const std::string& name) {
  const auto ref = model::SafetensorsFile::open(std::string(STRATA_TEST_DATA_DIR) + "/models/" +
                                                name + "/reference.safetensors");
  return int_tensor(ref.tensor("prompt.0"));
}

// max over rows of ||a - b|| / ||b||, rows of vocab floats.
inline double max_row_rel_err(const float* a, const float* b, int64_t rows, int64_t vocab) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double diff = 0.0, norm = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double x = a[r * vocab + v], y = b[r * vocab + v];
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    worst = std::max(worst, std::sqrt(diff) / std::sqrt(norm));
  }
  return worst;
}

// max over generated tokens of the relative L2 distance of two top-K logprob lists, whose token
// ids must agree (a gtest failure otherwise).
inline double max_top_logprobs_rel_err(const std::vector<TokenLogprobs>& a,
                                       const std::vector<TokenLogprobs>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const auto& x = a[i].top_logprobs;
    const auto& y = b[i].top_logprobs;
    EXPECT_EQ(x.size(), y.size());
    double diff = 0.0, norm = 0.0;
    for (size_t k = 0; k < std::min(x.size(), y.size()); ++k) {
      EXPECT_EQ(x[k].first, y[k].first) << "token " << i << " alternative " << k;
      diff += (x[k].second - y[k].second) * (x[k].second - y[k].second);
      norm += static_cast<double>(y[k].second) * y[k].second;
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  return worst;
}

}  // namespace strata::engine::test_util
