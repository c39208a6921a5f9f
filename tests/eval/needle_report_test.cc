// The needle report: counts per (context, depth) in first-use order, the table, and an SVG that
// is well formed and colours each cell by its accuracy.

#include "eval/needle_report.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::eval {
namespace {

NeedlePrompt prompt(int32_t context, double depth, int32_t trial) {
  NeedlePrompt p;
  p.context = context;
  p.depth = depth;
  p.trial = trial;
  return p;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

class NeedleReportTest : public ::testing::Test {
 protected:
  NeedleReportTest() {
    // 2 contexts x 3 depths x 2 trials; wrong: (1024, 0.5, both) and (256, 1.0, trial 1).
    for (int32_t c : {1024, 256}) {
      for (double d : {0.0, 0.5, 1.0}) {
        for (int32_t t = 0; t < 2; ++t) {
          prompts_.push_back(prompt(c, d, t));
          outcomes_.push_back({{}, !((c == 1024 && d == 0.5) || (c == 256 && d == 1.0 && t == 1))});
        }
      }
    }
  }
  std::vector<NeedlePrompt> prompts_;
  std::vector<NeedleOutcome> outcomes_;
};

TEST_F(NeedleReportTest, CountsEachCellInFirstUseOrder) {
  const NeedleReport r = summarize_needle(prompts_, outcomes_);
  EXPECT_EQ(r.contexts, (std::vector<int32_t>{1024, 256}));
  EXPECT_EQ(r.depths, (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_EQ(r.num_prompts, 12);
  EXPECT_EQ(r.num_correct, 9);
  EXPECT_DOUBLE_EQ(r.cell(0, 1).accuracy(), 0.0);
  EXPECT_DOUBLE_EQ(r.cell(1, 2).accuracy(), 0.5);
  EXPECT_DOUBLE_EQ(r.cell(1, 0).accuracy(), 1.0);
  EXPECT_EQ(r.context_total(0).num_correct, 4);
  EXPECT_EQ(r.context_total(1).num_trials, 6);
}

TEST_F(NeedleReportTest, TableHasARowPerContextAndTheOverallScore) {
  const std::string t = format_needle_table(summarize_needle(prompts_, outcomes_));
  EXPECT_NE(t.find("   1024  1.00  0.00  1.00  0.67\n"), std::string::npos) << t;
  EXPECT_NE(t.find("    256  1.00  1.00  0.50  0.83\n"), std::string::npos) << t;
  EXPECT_NE(t.find("overall 9/12 = 75.0%"), std::string::npos) << t;
}

TEST_F(NeedleReportTest, HeatmapIsOneSvgWithACellPerContextAndDepth) {
  const std::string svg = needle_heatmap_svg(summarize_needle(prompts_, outcomes_), "a <b> & c");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect "), 1u + 6u);                          // background + cells
  EXPECT_EQ(count(svg, "</rect>"), 6u);  // the background rect is self-closed
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; c"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_EQ(count(svg, "fill='#d73027'"), 1u);  // 0%: red
  EXPECT_EQ(count(svg, "fill='#1a9850'"), 4u);  // 100%: green
  EXPECT_EQ(count(svg, "fill='#fee08b'"), 1u);  // 50%: yellow
}

}  // namespace
}  // namespace strata::eval
