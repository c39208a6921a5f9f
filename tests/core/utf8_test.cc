// UTF-8 validity and the lossy repair (src/core/utf8.h): every class of lead byte and its
// second-byte range, and the replacement of maximal invalid subparts (Unicode's recommended
// practice, as Rust's from_utf8_lossy and Python's decode(errors="replace") do).

#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace strata {
namespace {

const std::string R(kReplacementChar);

TEST(Utf8Test, ValidLengthsAndTheirBoundaries) {
  EXPECT_EQ(utf8_valid_length("a", 0), 1u);
  EXPECT_EQ(utf8_valid_length("\xC2\x80", 0), 2u);
  EXPECT_EQ(utf8_valid_length("\xC1\xBF", 0), 0u);          // overlong 2-byte
  EXPECT_EQ(utf8_valid_length("\xE0\xA0\x80", 0), 3u);      // U+0800
  EXPECT_EQ(utf8_valid_length("\xE0\x9F\xBF", 0), 0u);      // overlong 3-byte
  EXPECT_EQ(utf8_valid_length("\xED\x9F\xBF", 0), 3u);      // U+D7FF
  EXPECT_EQ(utf8_valid_length("\xED\xA0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(utf8_valid_length("\xF0\x90\x80\x80", 0), 4u);  // U+10000
  EXPECT_EQ(utf8_valid_length("\xF0\x8F\xBF\xBF", 0), 0u);  // overlong 4-byte
  EXPECT_EQ(utf8_valid_length("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF
  EXPECT_EQ(utf8_valid_length("\xF4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_valid_length("\xF5\x80\x80\x80", 0), 0u);
  EXPECT_EQ(utf8_valid_length("\xE2\x82", 0), 0u);          // truncated
  EXPECT_EQ(utf8_valid_length("\xE2\x82\x41", 0), 0u);      // bad third byte
  EXPECT_EQ(utf8_valid_length("\x80", 0), 0u);              // lone continuation
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("h\xC3llo"));
}

TEST(Utf8Test, LossyReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(utf8_lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  // A truncated 3-byte sequence is one subpart: one replacement, then the next character.
  EXPECT_EQ(utf8_lossy("\xE2\x82" "A"), R + "A");
  // A surrogate's lead byte cannot start a valid sequence with 0xA0: each byte is replaced.
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), R + R + R);
  // Overlong and out-of-range leads likewise.
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), R + R + R + R);
  // A valid prefix of a 4-byte sequence cut by an ASCII byte: one replacement.
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98" "x"), R + "x");
  EXPECT_EQ(utf8_lossy("\x80\x80"), R + R);
  EXPECT_EQ(utf8_lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

}  // namespace
}  // namespace strata
