#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

using testing::raw_bytes;
using testing::raw_safetensors;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::TestTensor;

std::span<const uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Parses `file` and returns the strata::Error message; fails the test if nothing is thrown.
std::string parse_error(const std::string& file) {
  try {
    (void)parse_safetensors(as_span(file), "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no strata::Error thrown";
  return "";
}

// A one-tensor header around `entry` (the JSON object of tensor "w"), with `data` after it.
std::string one_tensor(const std::string& entry, std::string_view data = std::string(16, '\0')) {
  return raw_safetensors("{\"w\":" + entry + "}", data);
}

#define EXPECT_PARSE_ERROR(file, needle)                                        \
  do {                                                                          \
    const std::string message_ = parse_error(file);                             \
    EXPECT_NE(message_.find("bad.safetensors"), std::string::npos) << message_; \
    EXPECT_NE(message_.find(needle), std::string::npos) << message_;            \
  } while (0)

// Laid out widest element first, as the reference writer does, so every tensor is aligned.
std::vector<TestTensor> four_dtypes() {
  return {
      {"i64", "I64", {3}, raw_bytes(std::vector<int64_t>{-1, 0, int64_t{1} << 40})},
      {"f32", "F32", {2, 3}, raw_bytes(std::vector<float>{1, -2, 3.5f, 4, 5, 6})},
      {"bf16",
       "BF16",
       {4},
       raw_bytes(
           std::vector<uint16_t>{f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(2.0f), 0})},
      {"f16",
       "F16",
       {1, 2},
       raw_bytes(std::vector<uint16_t>{f32_to_f16(0.25f), f32_to_f16(-8.0f)})},
  };
}

TEST(SafetensorsTest, RoundTripsF32Bf16F16I64) {
  TempDir dir;
  const auto tensors = four_dtypes();
  testing::write_file(dir / "m.safetensors", safetensors_bytes(tensors));
  const SafetensorsFile file = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_EQ(file.tensors().size(), 4u);

  const TensorView f32 = file.tensor("f32");
  EXPECT_EQ(f32.dtype, DType::kF32);
  ASSERT_EQ(f32.rank, 2);
  EXPECT_EQ(f32.shape[0], 2);
  EXPECT_EQ(f32.shape[1], 3);
  EXPECT_EQ(load_as_f32(f32.data, f32.dtype, 2), 3.5f);

  const TensorView bf16 = file.tensor("bf16");
  EXPECT_EQ(bf16.dtype, DType::kBF16);
  EXPECT_EQ(load_as_f32(bf16.data, bf16.dtype, 1), -0.5f);
  const TensorView f16 = file.tensor("f16");
  EXPECT_EQ(f16.dtype, DType::kF16);
  EXPECT_EQ(load_as_f32(f16.data, f16.dtype, 1), -8.0f);
  const TensorView i64 = file.tensor("i64");
  EXPECT_EQ(i64.dtype, DType::kI64);
  EXPECT_EQ(static_cast<const int64_t*>(i64.data)[2], int64_t{1} << 40);

  for (const TestTensor& t : tensors) {
    const TensorView v = file.tensor(t.name);
    ASSERT_EQ(static_cast<size_t>(v.nbytes()), t.bytes.size()) << t.name;
    EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
}

TEST(SafetensorsTest, ViewsPointIntoTheMappingWithoutCopies) {
  TempDir dir;
  testing::write_file(dir / "m.safetensors", safetensors_bytes(four_dtypes()));
  SafetensorsFile file = SafetensorsFile::open(dir / "m.safetensors");
  const SafetensorsTensor* f32 = file.table().find("f32");
  const SafetensorsTensor* i64 = file.table().find("i64");
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(i64, nullptr);
  const auto* a = static_cast<const uint8_t*>(file.tensor("f32").data);
  const auto* b = static_cast<const uint8_t*>(file.tensor("i64").data);
  EXPECT_EQ(b - a, static_cast<ptrdiff_t>(i64->file_offset - f32->file_offset));
  // Moving the owner keeps the mapping, so views stay valid.
  const SafetensorsFile moved = std::move(file);
  EXPECT_EQ(static_cast<const uint8_t*>(moved.tensor("f32").data), a);
}

TEST(SafetensorsTest, ParseReportsAbsoluteOffsetsSortedByName) {
  const std::string bytes = safetensors_bytes(four_dtypes());
  const SafetensorsTable table = parse_safetensors(as_span(bytes), "mem");
  EXPECT_EQ(table.data_offset, 8 + table.header_bytes);
  EXPECT_EQ(table.header_bytes % 8, 0u);
  ASSERT_EQ(table.tensors.size(), 4u);
  EXPECT_EQ(table.tensors[0].name, "bf16");
  EXPECT_EQ(table.tensors[3].name, "i64");
  const SafetensorsTensor* f32 = table.find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(table.find("i64")->file_offset, table.data_offset);  // first in the data section
  EXPECT_EQ(f32->file_offset, table.data_offset + 24);
  EXPECT_EQ(f32->size_bytes, 24u);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(table.find("nope"), nullptr);
}

TEST(SafetensorsTest, AcceptsMetadataEmptyTensorsAndScalars) {
  const std::string bytes = safetensors_bytes(
      {{"empty", "F32", {0, 4}, ""}, {"scalar", "F32", {}, raw_bytes(std::vector<float>{7})}},
      R"({"format":"pt"})");
  const SafetensorsTable table = parse_safetensors(as_span(bytes), "mem");
  ASSERT_EQ(table.tensors.size(), 2u);
  EXPECT_EQ(table.find("empty")->size_bytes, 0u);
  EXPECT_TRUE(table.find("scalar")->shape.empty());
}

TEST(SafetensorsTest, AcceptsAnEmptyTable) {
  const std::string bytes = raw_safetensors("{}        ");
  EXPECT_TRUE(parse_safetensors(as_span(bytes), "mem").tensors.empty());
}

TEST(SafetensorsTest, RejectsFileShorterThan8Bytes) {
  EXPECT_PARSE_ERROR(std::string("\x02\0\0", 3), "shorter than the 8-byte header length");
  EXPECT_PARSE_ERROR(std::string(), "file is 0 bytes");
}

TEST(SafetensorsTest, RejectsHeaderLengthPastEndOfFile) {
  EXPECT_PARSE_ERROR(raw_safetensors("{}", "", 3), "header length 3 exceeds the 2 bytes");
}

TEST(SafetensorsTest, RejectsHeaderLengthThatWouldOverflow) {
  EXPECT_PARSE_ERROR(raw_safetensors("{}", "", UINT64_MAX), "header length 18446744073709551615");
  EXPECT_PARSE_ERROR(raw_safetensors("{}", "", UINT64_MAX - 7), "exceeds");
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotJson) {
  EXPECT_PARSE_ERROR(raw_safetensors("{\"w\": "), "header is not valid JSON");
  EXPECT_PARSE_ERROR(raw_safetensors(std::string("{}\0\0", 4)), "NUL byte at header offset 2");
}

TEST(SafetensorsTest, RejectsDeeplyNestedHeaderValuesInOneBoundedLine) {
  // data_offsets nested a million levels deep overflowed the stack when the message dumped it.
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": )" + deep + "}"),
                     "header is not valid JSON: arrays and objects nest deeper than 128 levels");
  // Within the limit but large: only the start of the value is quoted.
  const std::string big = "[\"" + std::string(1 << 20, '7') + "\"]";
  const std::string msg =
      parse_error(one_tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": )" + big + "}"));
  EXPECT_NE(msg.find("'data_offsets' must be [begin, end] with non-negative integers, got [\"777"),
            std::string::npos)
      << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 400u);
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotAnObject) {
  EXPECT_PARSE_ERROR(raw_safetensors("[1, 2]"), "header is not a JSON object");
}

TEST(SafetensorsTest, RejectsEntryThatIsNotAnObject) {
  EXPECT_PARSE_ERROR(one_tensor("[1]"), "tensor 'w': entry must be an object");
}

TEST(SafetensorsTest, RejectsMissingDtype) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"shape":[4],"data_offsets":[0,16]})"),
                     "tensor 'w': missing 'dtype'");
}

TEST(SafetensorsTest, RejectsMissingShape) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","data_offsets":[0,16]})"),
                     "tensor 'w': missing 'shape'");
}

TEST(SafetensorsTest, RejectsMissingDataOffsets) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[4]})"),
                     "tensor 'w': missing 'data_offsets'");
}

TEST(SafetensorsTest, RejectsDtypeOfWrongType) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":4,"shape":[4],"data_offsets":[0,16]})"),
                     "'dtype' must be a string");
}

TEST(SafetensorsTest, RejectsShapeOfWrongType) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})"),
                     "'shape' must be an array");
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]})"),
                     "'shape' must hold integers");
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":["4"],"data_offsets":[0,16]})"),
                     "'shape' must hold integers");
}

TEST(SafetensorsTest, RejectsDataOffsetsOfWrongType) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})"),
                     "'data_offsets' must be [begin, end]");
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":["0",16]})"),
                     "'data_offsets' must be [begin, end]");
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[-1,16]})"),
                     "'data_offsets' must be [begin, end]");
}

TEST(SafetensorsTest, RejectsUnknownDtype) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F4","shape":[4],"data_offsets":[0,16]})"),
                     "tensor 'w': unknown dtype 'F4' (supported: F64, F32");
}

TEST(SafetensorsTest, RejectsNegativeDimension) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"),
                     "negative dimension -4");
}

TEST(SafetensorsTest, RejectsOverflowingShapeProduct) {
  EXPECT_PARSE_ERROR(
      one_tensor(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,16]})"),
      "element count overflows");
  EXPECT_PARSE_ERROR(
      one_tensor(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,16]})"),
      "element count overflows");
  EXPECT_PARSE_ERROR(
      one_tensor(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,16]})"),
      "byte size of shape [2305843009213693952] overflows");
}

TEST(SafetensorsTest, RejectsBeginAfterEnd) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[16,0]})"),
                     "data_offsets [16, 0] has begin > end");
}

TEST(SafetensorsTest, RejectsEndPastDataSection) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[8],"data_offsets":[0,32]})"),
                     "end is past the data section (16 bytes)");
}

TEST(SafetensorsTest, RejectsByteSizeThatDisagreesWithShape) {
  EXPECT_PARSE_ERROR(one_tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"),
                     "covers 16 bytes, but shape [3] of F32 needs 12");
}

TEST(SafetensorsTest, RejectsOverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_PARSE_ERROR(raw_safetensors(header, std::string(16, '\0')), "tensors 'a' and 'b' overlap");
}

TEST(SafetensorsTest, AllowsTensorsThatShareOnlyAnEmptyRange) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  const std::string bytes = raw_safetensors(header, std::string(16, '\0'));
  EXPECT_EQ(parse_safetensors(as_span(bytes), "mem").tensors.size(), 3u);
}

TEST(SafetensorsTest, RejectsDuplicateTensorName) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_PARSE_ERROR(raw_safetensors(header, std::string(16, '\0')), "'a': appears twice");
}

TEST(SafetensorsTest, RejectsMetadataThatIsNotAStringMap) {
  EXPECT_PARSE_ERROR(raw_safetensors(R"({"__metadata__":{"format":1}})"),
                     "'__metadata__' value for 'format' must be a string");
  EXPECT_PARSE_ERROR(raw_safetensors(R"({"__metadata__":[]})"), "'__metadata__' must be an object");
}

TEST(SafetensorsFileTest, MissingFileNamesThePath) {
  TempDir dir;
  try {
    (void)SafetensorsFile::open(dir / "absent.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors': No such file"), std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsFileTest, EmptyFileIsTooShort) {
  TempDir dir;
  testing::write_file(dir / "empty.safetensors", "");
  EXPECT_THROW((void)SafetensorsFile::open(dir / "empty.safetensors"), Error);
}

TEST(SafetensorsFileTest, TensorRejectsUnknownNameAndRankAbove4) {
  TempDir dir;
  testing::write_file(dir / "m.safetensors", safetensors_bytes({{"r5", "U8", {1, 1, 1, 1, 2}, "ab"},
                                                                {"r4", "U8", {1, 1, 1, 2}, "cd"}}));
  const SafetensorsFile file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(file.tensor("r4").rank, 4);
  EXPECT_TRUE(file.contains("r5"));
  EXPECT_FALSE(file.contains("x"));
  try {
    (void)file.tensor("r5");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'r5': has rank 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)file.tensor("x"), Error);
}

TEST(SafetensorsFileTest, TensorRejectsMisalignedData) {
  TempDir dir;
  // A 1-byte tensor first pushes the F32 tensor to an odd offset.
  testing::write_file(dir / "m.safetensors",
                      safetensors_bytes({{"a", "U8", {1}, "x"}, {"b", "F32", {1}, "abcd"}}));
  const SafetensorsFile file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(file.tensor("a").numel(), 1);
  EXPECT_THROW((void)file.tensor("b"), Error);
}

}  // namespace
}  // namespace strata::model
