#pragma once
// Accuracy of a needle run by context and depth, and its two readable forms: a text table and an
// SVG heatmap (context across, depth down, red 0% to green 100%, as needle-in-a-haystack results
// are usually drawn). Pure functions of the prompts and their outcomes.

#include <cstdint>
#include <string>
#include <vector>

#include "eval/needle_prompt.h"
#include "eval/needle_run.h"

namespace strata::eval {

struct NeedleCell {
  int32_t num_correct = 0;
  int32_t num_trials = 0;
  double accuracy() const {
    return num_trials ? static_cast<double>(num_correct) / num_trials : 0.0;
  }
};

// Contexts and depths in the order the prompts first use them; cells row-major
// [context][depth].
struct NeedleReport {
  std::vector<int32_t> contexts;
  std::vector<double> depths;
  std::vector<NeedleCell> cells;
  int64_t num_correct = 0;
  int64_t num_prompts = 0;

  const NeedleCell& cell(size_t context_idx, size_t depth_idx) const {
    return cells[context_idx * depths.size() + depth_idx];
  }
  double accuracy() const {
    return num_prompts ? static_cast<double>(num_correct) / static_cast<double>(num_prompts) : 0.0;
  }
  // Over all depths of one context.
  NeedleCell context_total(size_t context_idx) const;
};

// prompts and outcomes are index-aligned (run_needle's contract; checked).
NeedleReport summarize_needle(const std::vector<NeedlePrompt>& prompts,
                              const std::vector<NeedleOutcome>& outcomes);

// Rows: contexts, columns: depths, then each context's total; a last line with the overall score.
std::string format_needle_table(const NeedleReport& report);

// A standalone SVG document; `title` is escaped.
std::string needle_heatmap_svg(const NeedleReport& report, const std::string& title);

}  // namespace strata::eval
