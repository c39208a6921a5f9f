#include "bench/progress.h"

#include <algorithm>
#include <utility>

namespace strata::bench {

ProgressBar::ProgressBar(std::FILE* out, bool is_terminal, std::string label, double redraw_s,
                         double line_s)
    : out_(out),
      is_terminal_(is_terminal),
      label_(std::move(label)),
      redraw_s_(redraw_s),
      line_s_(line_s) {}

std::string ProgressBar::render(const std::string& label, const Progress& p, int bar_width) {
  const double done = p.num_requests > 0 ? static_cast<double>(p.num_finished) / p.num_requests : 1;
  std::string bar;
  if (bar_width > 0) {
    const int filled = std::clamp(static_cast<int>(done * bar_width), 0, bar_width);
    bar = "[" + std::string(filled, '#') + std::string(bar_width - filled, '.') + "] ";
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "%s %s%lld/%lld requests, %d running, %d waiting, %.1f output tokens/s, %.1f s",
                label.c_str(), bar.c_str(), static_cast<long long>(p.num_finished),
                static_cast<long long>(p.num_requests), p.num_running, p.num_waiting,
                p.elapsed_s > 0 ? p.num_output_tokens / p.elapsed_s : 0.0, p.elapsed_s);
  return line;
}

void ProgressBar::update(const Progress& p) {
  const double interval = is_terminal_ ? redraw_s_ : line_s_;
  if (p.elapsed_s - last_s_ < interval) return;
  last_s_ = p.elapsed_s;
  if (is_terminal_) {
    std::fprintf(out_, "\r\033[K%s", render(label_, p, 30).c_str());
  } else {
    std::fprintf(out_, "%s\n", render(label_, p, 0).c_str());
  }
  std::fflush(out_);
}

void ProgressBar::finish(const Progress& p) {
  if (is_terminal_) {
    std::fprintf(out_, "\r\033[K%s\n", render(label_, p, 30).c_str());
  } else {
    std::fprintf(out_, "%s\n", render(label_, p, 0).c_str());
  }
  std::fflush(out_);
}

}  // namespace strata::bench
