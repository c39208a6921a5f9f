#include "eval_logits_kl.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/mapped_file.h"

namespace strata::cli {
namespace {

// log_softmax of one row, in double.
std::vector<double> log_softmax(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  const double log_sum = std::log(sum) + max;
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) out[static_cast<size_t>(i)] = row[i] - log_sum;
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> text_windows(const tokenizer::Tokenizer& tok,
                                               const std::string& model_dir,
                                               const std::string& text, int32_t num_windows,
                                               int32_t window_len) {
  const std::filesystem::path path = text.empty()
                                         ? std::filesystem::path(model_dir) / "needle_filler.txt"
                                         : std::filesystem::path(text);
  std::optional<MappedFile> file;
  try {
    file = MappedFile::open(path);  // not a directory, a FIFO or /dev/zero
  } catch (const Error& e) {
    throw Error(std::string("cannot read the held-out text (--text FILE): ") + e.what());
  }
  const std::vector<int32_t> ids = tok.encode(file->text(), /*add_special_tokens=*/false);
  const int64_t need = static_cast<int64_t>(num_windows) * window_len;
  if (static_cast<int64_t>(ids.size()) < need) {
    throw Error(path.string() + " has " + std::to_string(ids.size()) + " tokens; " +
                std::to_string(num_windows) + " windows of " + std::to_string(window_len) +
                " need " + std::to_string(need));
  }
  std::vector<std::vector<int32_t>> windows;
  for (int32_t w = 0; w < num_windows; ++w) {
    const auto begin = ids.begin() + static_cast<int64_t>(w) * window_len;
    windows.emplace_back(begin, begin + window_len);
  }
  return windows;
}

LogitsComparison compare_logits(const std::vector<std::vector<float>>& ref,
                                const std::vector<std::vector<float>>& q, int64_t vocab,
                                int64_t first_row) {
  double kl_sum = 0.0;
  int64_t agree = 0;
  int64_t n = 0;
  for (size_t w = 0; w < ref.size(); ++w) {
    const int64_t rows = static_cast<int64_t>(ref[w].size()) / vocab;
    for (int64_t row = first_row; row < rows; ++row) {
      const float* a = ref[w].data() + row * vocab;
      const float* b = q[w].data() + row * vocab;
      const std::vector<double> la = log_softmax(a, vocab);
      const std::vector<double> lb = log_softmax(b, vocab);
      double kl = 0.0;
      for (size_t i = 0; i < la.size(); ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
      kl_sum += kl;
      agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b ? 1 : 0;
      ++n;
    }
  }
  LogitsComparison c;
  c.num_positions = n;
  c.mean_kl = n > 0 ? kl_sum / static_cast<double>(n) : 0.0;
  c.top1_agreement = n > 0 ? static_cast<double>(agree) / static_cast<double>(n) : 0.0;
  return c;
}

void add_quality_eval_options(CLI::App& cmd, QualityEvalOptions& o) {
  cmd.add_option("--text", o.text, "Held-out text for the KL (default: the model's filler text)");
  cmd.add_option("--num-windows", o.num_windows, "Text windows")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--window-len", o.window_len, "Tokens per window")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--needle-contexts", o.needle_contexts, "Needle prompt lengths in tokens")
      ->capture_default_str();
  cmd.add_option("--needle-depths", o.needle_depths, "Needle depths in [0, 1]")
      ->capture_default_str();
  cmd.add_option("--needle-trials", o.needle_trials, "Prompts per (context, depth); 0 = none")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "Seed of the needle prompts");
  cmd.add_option("--threads", o.threads, "Worker threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--block-size", o.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "Sequences in one step")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_flag("--json", o.json, "Print the result as JSON");
}

}  // namespace strata::cli
