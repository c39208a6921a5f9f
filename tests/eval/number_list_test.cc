// Number lists of the eval commands: plain lists, "a,b,...,c" progressions, and one error per
// kind of bad input.

#include "eval/number_list.h"

#include <gtest/gtest.h>

namespace strata::eval {
namespace {

TEST(NumberListTest, PlainListKeepsOrderAndValues) {
  auto v = parse_number_list("0.5, 0,1,0.25");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, (std::vector<double>{0.5, 0.0, 1.0, 0.25}));
}

TEST(NumberListTest, ProgressionExpandsToTheLastValueExactly) {
  auto v = parse_number_list("0,0.1,...,1");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->size(), 11u);
  for (int i = 0; i <= 10; ++i) EXPECT_DOUBLE_EQ((*v)[static_cast<size_t>(i)], i / 10.0);
  EXPECT_EQ((*v)[3], 0.3);  // rounded, not 0.30000000000000004
  auto down = parse_int_list("4096,3072,...,1024", 1, 1 << 20);
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(*down, (std::vector<int32_t>{4096, 3072, 2048, 1024}));
}

TEST(NumberListTest, BadInputIsAnError) {
  for (const char* text : {"", "1,,2", "a", "1,2x", "nan", "inf", "...", "0,...,1", "0,1,...",
                           "0,0.3,...,1", "0,0,...,1", "1,2,...,0", "0,1e-9,...,1", "1,2,3,..."}) {
    EXPECT_FALSE(parse_number_list(text).ok()) << "'" << text << "'";
  }
}

TEST(NumberListTest, IntListChecksIntegersAndRange) {
  EXPECT_TRUE(parse_int_list("512,1024", 1, 4096).ok());
  EXPECT_FALSE(parse_int_list("512.5", 1, 4096).ok());
  EXPECT_FALSE(parse_int_list("0", 1, 4096).ok());
  EXPECT_FALSE(parse_int_list("8192", 1, 4096).ok());
  const auto err = parse_int_list("1.5", 1, 10);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("1.5 is not an integer in [1, 10]"), std::string::npos)
      << err.status().message();
}

}  // namespace
}  // namespace strata::eval
