// MappedFile lives in src/core; its tests sit here with the checkpoint loaders that use it.
#include "core/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
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

std::string open_error(const std::filesystem::path& path) {
  try {
    (void)MappedFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MappedFileTest, RefusesWhatIsNotARegularFileByName) {
  TempDir dir;
  std::filesystem::create_directory(dir / "config.json");
  EXPECT_NE(open_error(dir / "config.json").find("it is a directory"), std::string::npos);
  // /dev/zero would read forever: refused by what it is, through a symlink too.
  std::filesystem::create_symlink("/dev/zero", dir / "model.safetensors");
  EXPECT_NE(open_error(dir / "model.safetensors").find("it is a character device"),
            std::string::npos);
  EXPECT_THROW((void)MappedFile::regular_file_bytes(dir / "model.safetensors"), Error);
}

TEST(MappedFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  // A blocking open would wait here forever: no process ever opens the FIFO for writing.
  EXPECT_NE(open_error(dir / "fifo").find("it is a FIFO"), std::string::npos);
  EXPECT_THROW((void)MappedFile::open_if_exists(dir / "fifo"), Error);
}

TEST(MappedFileTest, ASymlinkLoopIsNamed) {
  TempDir dir;
  std::filesystem::create_symlink("loop", dir / "loop");
  EXPECT_NE(open_error(dir / "loop").find("symbolic links"), std::string::npos);
  EXPECT_TRUE(file_exists(dir / "loop"));  // there, just unreadable: not "missing"
  EXPECT_THROW((void)MappedFile::open_if_exists(dir / "loop"), Error);
}

TEST(MappedFileTest, OpenIfExistsTellsAbsentFromUnreadable) {
  TempDir dir;
  EXPECT_FALSE(MappedFile::open_if_exists(dir / "absent.json").has_value());
  EXPECT_FALSE(file_exists(dir / "absent.json"));
  std::filesystem::create_symlink("absent.json", dir / "dangling.json");
  EXPECT_FALSE(MappedFile::open_if_exists(dir / "dangling.json").has_value());
  model::testing::write_file(dir / "f.json", "{}");
  const std::optional<MappedFile> file = MappedFile::open_if_exists(dir / "f.json");
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->text(), "{}");
  EXPECT_EQ(MappedFile::regular_file_bytes(dir / "f.json"), 2u);
}

}  // namespace
}  // namespace strata
