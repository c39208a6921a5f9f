#pragma once
// ProgressBar: the bench's progress on stderr. On a terminal, one line redrawn in place at most
// every redraw_s; otherwise (a log, a pipe) a plain line every line_s, so logs stay short.
// Takes the time from its caller (Progress::elapsed_s), so tests need no clock. Not thread-safe.

#include <cstdio>
#include <string>

#include "bench/driver.h"

namespace strata::bench {

class ProgressBar {
 public:
  ProgressBar(std::FILE* out, bool is_terminal, std::string label, double redraw_s = 0.1,
              double line_s = 5.0);
  void update(const Progress& p);
  // The last state on its own line (a terminal's bar is ended with a newline).
  void finish(const Progress& p);

  // The text of one update, without control characters.
  static std::string render(const std::string& label, const Progress& p, int bar_width);

 private:
  std::FILE* out_;
  bool is_terminal_;
  std::string label_;
  double redraw_s_;
  double line_s_;
  double last_s_ = -1e300;
};

}  // namespace strata::bench
