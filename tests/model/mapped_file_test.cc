// MappedFile lives in src/core; its tests sit here with the checkpoint loaders that use it.
#include "core/mapped_file.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model_test_files.h"

namespace strata {
namespace {

using model::testing::TempDir;

TEST(MappedFileTest, MapsTheWholeFile) {
  TempDir dir;
  model::testing::write_file(dir / "f.bin", std::string("hello\0world", 11));
  const MappedFile file = MappedFile::open(dir / "f.bin");
  ASSERT_EQ(file.size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), file.size()),
            std::string("hello\0world", 11));
  EXPECT_EQ(file.path(), dir / "f.bin");
}

TEST(MappedFileTest, EmptyFileMapsToAnEmptySpan) {
  TempDir dir;
  model::testing::write_file(dir / "empty", "");
  const MappedFile file = MappedFile::open(dir / "empty");
  EXPECT_EQ(file.size(), 0u);
  EXPECT_TRUE(file.bytes().empty());
}

TEST(MappedFileTest, MoveTransfersTheMapping) {
  TempDir dir;
  model::testing::write_file(dir / "f.bin", "abc");
  MappedFile a = MappedFile::open(dir / "f.bin");
  const uint8_t* data = a.data();
  MappedFile b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.data(), nullptr);
  MappedFile c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.bytes()[2], 'c');
}

TEST(MappedFileTest, MissingFileThrowsWithPathAndReason) {
  TempDir dir;
  try {
    (void)MappedFile::open(dir / "nope.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nope.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
}

TEST(MappedFileTest, DirectoryIsNotARegularFile) {
  TempDir dir;
  try {
    (void)MappedFile::open(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
