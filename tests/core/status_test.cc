#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/error.h"

namespace strata {
namespace {

TEST(StatusTest, DefaultConstructedIsOk) {
  const Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().to_string(), "ok");
}

TEST(StatusTest, EachFactorySetsItsCodeAndMessage) {
  struct Case {
    Status status;
    StatusCode code;
    std::string text;
  };
  const std::vector<Case> cases = {
      {Status::InvalidArgument("bad top_p"), StatusCode::kInvalidArgument,
       "invalid argument: bad top_p"},
      {Status::NotFound("no such file"), StatusCode::kNotFound, "not found: no such file"},
      {Status::OutOfRange("pos 9"), StatusCode::kOutOfRange, "out of range: pos 9"},
      {Status::ResourceExhausted("out of blocks"), StatusCode::kResourceExhausted,
       "resource exhausted: out of blocks"},
      {Status::Unsupported("head_dim 80"), StatusCode::kUnsupported, "unsupported: head_dim 80"},
      {Status::Internal("oops"), StatusCode::kInternal, "internal: oops"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.text;
    EXPECT_EQ(c.status.code(), c.code) << c.text;
    EXPECT_EQ(c.status.to_string(), c.text);
  }
  EXPECT_EQ(Status::NotFound("x").message(), "x");
}

TEST(StatusTest, ExplicitCodeConstructorKeepsMessage) {
  const Status s(StatusCode::kInternal, "");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "internal: ");
}

TEST(StatusTest, EveryCodeHasADistinctName) {
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "ok");
  EXPECT_STREQ(status_code_name(StatusCode::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(status_code_name(StatusCode::kNotFound), "not found");
  EXPECT_STREQ(status_code_name(StatusCode::kOutOfRange), "out of range");
  EXPECT_STREQ(status_code_name(StatusCode::kResourceExhausted), "resource exhausted");
  EXPECT_STREQ(status_code_name(StatusCode::kUnsupported), "unsupported");
  EXPECT_STREQ(status_code_name(StatusCode::kInternal), "internal");
}

TEST(ResultTest, HoldsAValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  r.value() = 7;
  EXPECT_EQ(*r, 7);
  const Result<int>& cr = r;
  EXPECT_EQ(cr.value(), 7);
  EXPECT_EQ(*cr, 7);
}

TEST(ResultTest, ArrowReachesTheValue) {
  Result<std::string> r = std::string("block");
  EXPECT_EQ(r->size(), 5u);
  const Result<std::string>& cr = r;
  EXPECT_EQ(cr->substr(1), "lock");
}

TEST(ResultTest, HoldsAnErrorStatus) {
  const Result<int> r = Status::ResourceExhausted("out of blocks");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "out of blocks");
}

TEST(ResultTest, MoveOnlyValueCanBeMovedOut) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 5);
}

TEST(ResultDeathTest, ConstructingFromAnOkStatusAborts) {
  EXPECT_DEATH(
      {
        const Result<int> r = Status::Ok();
        (void)r;
      },
      "Result constructed from an OK status");
}

TEST(ResultDeathTest, ValueOfAnErrorAborts) {
  Result<int> r = Status::NotFound("x");
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on an error");
  EXPECT_DEATH((void)*r, "Result::value\\(\\) on an error");
  const Result<int>& cr = r;
  EXPECT_DEATH((void)cr.value(), "Result::value\\(\\) on an error");
  EXPECT_DEATH((void)std::move(r).value(), "Result::value\\(\\) on an error");
}

// ---- STRATA_RETURN_IF_ERROR ---------------------------------------------------------------------

Status record(std::vector<int>& log, int id, Status result) {
  log.push_back(id);
  return result;
}

Status two_steps(std::vector<int>& log, Status first, Status second) {
  STRATA_RETURN_IF_ERROR(record(log, 1, std::move(first)));
  STRATA_RETURN_IF_ERROR(record(log, 2, std::move(second)));
  log.push_back(3);
  return Status::Ok();
}

TEST(ReturnIfErrorTest, ContinuesOnOk) {
  std::vector<int> log;
  const Status s = two_steps(log, Status::Ok(), Status::Ok());
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
}

TEST(ReturnIfErrorTest, ReturnsTheFirstErrorAndStops) {
  std::vector<int> log;
  const Status s = two_steps(log, Status::NotFound("first"), Status::Internal("second"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "first");
  EXPECT_EQ(log, (std::vector<int>{1})) << "evaluated once, nothing after it runs";
}

TEST(ReturnIfErrorTest, ReturnsALaterError) {
  std::vector<int> log;
  const Status s = two_steps(log, Status::Ok(), Status::Internal("second"));
  EXPECT_EQ(s.to_string(), "internal: second");
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
}

Result<int> parse_positive(int x, std::vector<int>& log) {
  STRATA_RETURN_IF_ERROR(record(log, x, x > 0 ? Status::Ok() : Status::InvalidArgument("<= 0")));
  return x * 10;
}

TEST(ReturnIfErrorTest, WorksInAFunctionReturningResult) {
  std::vector<int> log;
  const Result<int> good = parse_positive(4, log);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 40);
  const Result<int> bad = parse_positive(-1, log);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(log, (std::vector<int>{4, -1}));
}

Status in_unbraced_if(bool take_branch, std::vector<int>& log) {
  // The macro is one statement: it nests under an unbraced if/else.
  if (take_branch)
    STRATA_RETURN_IF_ERROR(record(log, 1, Status::Internal("x")));
  else
    log.push_back(2);
  return Status::Ok();
}

TEST(ReturnIfErrorTest, IsASingleStatement) {
  std::vector<int> log;
  EXPECT_FALSE(in_unbraced_if(true, log).ok());
  EXPECT_TRUE(in_unbraced_if(false, log).ok());
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
}

// ---- STRATA_CHECK and Error ---------------------------------------------------------------------

TEST(CheckTest, PassingCheckEvaluatesConditionOnce) {
  int evaluations = 0;
  STRATA_CHECK(++evaluations == 1, "never fails");
  EXPECT_EQ(evaluations, 1);
}

TEST(CheckDeathTest, FailingCheckAbortsWithFileLineConditionAndMessage) {
  EXPECT_DEATH(
      STRATA_CHECK(1 + 1 == 3, "arithmetic is broken"),
      "status_test\\.cc:[0-9]+: STRATA_CHECK\\(1 \\+ 1 == 3\\) failed: arithmetic is broken");
}

TEST(ErrorTest, CarriesTheUserMessage) {
  try {
    throw Error("config.json: missing field 'hidden_size'");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "config.json: missing field 'hidden_size'");
  }
}

}  // namespace
}  // namespace strata
