#include "eval/needle_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace strata::eval {
namespace {

template <typename T>
size_t index_of(std::vector<T>& values, T v) {
  const auto it = std::find(values.begin(), values.end(), v);
  if (it != values.end()) return static_cast<size_t>(it - values.begin());
  values.push_back(v);
  return values.size() - 1;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Red (0) -> yellow (0.5) -> green (1), the usual diverging scale.
std::string cell_color(double a) {
  struct Rgb {
    double r, g, b;
  };
  constexpr Rgb kRed{215, 48, 39}, kYellow{254, 224, 139}, kGreen{26, 152, 80};
  const Rgb& lo = a < 0.5 ? kRed : kYellow;
  const Rgb& hi = a < 0.5 ? kYellow : kGreen;
  const double t = a < 0.5 ? a / 0.5 : (a - 0.5) / 0.5;
  char buf[16];
  const auto channel = [t](double from, double to) {
    return static_cast<unsigned>(std::lround(from + t * (to - from)));
  };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", channel(lo.r, hi.r), channel(lo.g, hi.g),
                channel(lo.b, hi.b));
  return buf;
}

}  // namespace

NeedleCell NeedleReport::context_total(size_t context_idx) const {
  NeedleCell total;
  for (size_t d = 0; d < depths.size(); ++d) {
    total.num_correct += cell(context_idx, d).num_correct;
    total.num_trials += cell(context_idx, d).num_trials;
  }
  return total;
}

NeedleReport summarize_needle(const std::vector<NeedlePrompt>& prompts,
                              const std::vector<NeedleOutcome>& outcomes) {
  STRATA_CHECK(prompts.size() == outcomes.size(), "one outcome per needle prompt");
  NeedleReport r;
  for (const NeedlePrompt& p : prompts) {
    index_of(r.contexts, p.context);
    index_of(r.depths, p.depth);
  }
  r.cells.resize(r.contexts.size() * r.depths.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t c = index_of(r.contexts, prompts[i].context);
    const size_t d = index_of(r.depths, prompts[i].depth);
    NeedleCell& cell = r.cells[c * r.depths.size() + d];
    cell.num_trials += 1;
    cell.num_correct += outcomes[i].correct ? 1 : 0;
    r.num_correct += outcomes[i].correct ? 1 : 0;
  }
  r.num_prompts = static_cast<int64_t>(prompts.size());
  return r;
}

std::string format_needle_table(const NeedleReport& r) {
  std::string s = "context";
  for (double d : r.depths) s += format("%6.2f", d);
  s += "   all\n";
  for (size_t c = 0; c < r.contexts.size(); ++c) {
    s += format("%7.0f", r.contexts[c]);
    for (size_t d = 0; d < r.depths.size(); ++d) s += format("%6.2f", r.cell(c, d).accuracy());
    s += format("%6.2f", r.context_total(c).accuracy()) + "\n";
  }
  s += "overall " + std::to_string(r.num_correct) + "/" + std::to_string(r.num_prompts) + " = " +
       format("%.1f%%", 100.0 * r.accuracy()) + "\n";
  return s;
}

std::string needle_heatmap_svg(const NeedleReport& r, const std::string& title) {
  constexpr int kLeft = 78, kTop = 48, kCellW = 84, kCellH = 26, kBottom = 52;
  const int width = kLeft + static_cast<int>(r.contexts.size()) * kCellW + 16;
  const int height = kTop + static_cast<int>(r.depths.size()) * kCellH + kBottom;
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) +
                  "' height='" + std::to_string(height) +
                  "' font-family='sans-serif' font-size='12'>\n";
  s += "<rect width='100%' height='100%' fill='white'/>\n";
  s += "<text x='" + std::to_string(width / 2) + "' y='20' text-anchor='middle' " +
       "font-size='14'>" + xml_escape(title) + "</text>\n";
  s += "<text x='" + std::to_string(width / 2) + "' y='36' text-anchor='middle'>overall " +
       std::to_string(r.num_correct) + "/" + std::to_string(r.num_prompts) + " (" +
       format("%.1f%%", 100.0 * r.accuracy()) + ")</text>\n";
  for (size_t c = 0; c < r.contexts.size(); ++c) {
    const int x = kLeft + static_cast<int>(c) * kCellW;
    for (size_t d = 0; d < r.depths.size(); ++d) {
      const int y = kTop + static_cast<int>(d) * kCellH;
      const double a = r.cell(c, d).accuracy();
      s += "<rect x='" + std::to_string(x) + "' y='" + std::to_string(y) + "' width='" +
           std::to_string(kCellW) + "' height='" + std::to_string(kCellH) + "' fill='" +
           cell_color(a) + "' stroke='white'><title>context " + std::to_string(r.contexts[c]) +
           ", depth " + format("%g", r.depths[d]) + ": " +
           std::to_string(r.cell(c, d).num_correct) + "/" +
           std::to_string(r.cell(c, d).num_trials) + "</title></rect>\n";
      s += "<text x='" + std::to_string(x + kCellW / 2) + "' y='" +
           std::to_string(y + kCellH / 2 + 4) + "' text-anchor='middle'>" +
           format("%.0f%%", 100.0 * a) + "</text>\n";
    }
    s += "<text x='" + std::to_string(x + kCellW / 2) + "' y='" +
         std::to_string(kTop + static_cast<int>(r.depths.size()) * kCellH + 16) +
         "' text-anchor='middle'>" + std::to_string(r.contexts[c]) + "</text>\n";
  }
  for (size_t d = 0; d < r.depths.size(); ++d) {
    s += "<text x='" + std::to_string(kLeft - 8) + "' y='" +
         std::to_string(kTop + static_cast<int>(d) * kCellH + kCellH / 2 + 4) +
         "' text-anchor='end'>" + format("%g%%", 100.0 * r.depths[d]) + "</text>\n";
  }
  s += "<text x='" + std::to_string(kLeft + static_cast<int>(r.contexts.size()) * kCellW / 2) +
       "' y='" + std::to_string(height - 12) +
       "' text-anchor='middle'>context length (tokens)</text>\n";
  s += "<text x='16' y='" + std::to_string(kTop + static_cast<int>(r.depths.size()) * kCellH / 2) +
       "' text-anchor='middle' transform='rotate(-90 16 " +
       std::to_string(kTop + static_cast<int>(r.depths.size()) * kCellH / 2) +
       ")'>needle depth</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace strata::eval
