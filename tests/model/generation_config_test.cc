#include "model/generation_config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

GenerationConfig parse(const std::string& text) {
  return parse_generation_config_text(text, "generation_config.json");
}

std::string error_of(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no strata::Error for " << text;
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(GenerationConfigTest, Llama31InstructStyle) {
  const GenerationConfig g = parse(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
      "transformers_version": "4.42.3"})");
  EXPECT_EQ(g.bos_token_id, 128000);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.9);
  EXPECT_FALSE(g.top_k.has_value());
  EXPECT_FALSE(g.pad_token_id.has_value());
  EXPECT_FALSE(g.max_new_tokens.has_value());
}

TEST(GenerationConfigTest, Qwen25InstructStyle) {
  const GenerationConfig g = parse(R"({"bos_token_id": 151643, "pad_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.05,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "max_new_tokens": 2048})");
  EXPECT_EQ(g.pad_token_id, 151643);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.repetition_penalty, 1.05);
  EXPECT_EQ(g.min_p, 0.0);
  EXPECT_EQ(g.max_new_tokens, 2048);
}

TEST(GenerationConfigTest, SingleEosAndNulls) {
  const GenerationConfig g = parse(R"({"eos_token_id": 2, "pad_token_id": null, "top_k": null})");
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(g.pad_token_id.has_value());
  EXPECT_FALSE(g.top_k.has_value());
}

TEST(GenerationConfigTest, MissingFileGivesDefaults) {
  testing::TempDir dir;
  EXPECT_EQ(load_generation_config(dir.path()), GenerationConfig{});
  testing::write_file(dir / "generation_config.json", R"({"eos_token_id": 7})");
  EXPECT_EQ(load_generation_config(dir.path()).eos_token_ids, std::vector<int64_t>{7});
  testing::write_file(dir / "generation_config.json", "{");
  EXPECT_THROW((void)load_generation_config(dir.path()), Error);
}

TEST(GenerationConfigTest, MalformedValuesAreErrors) {
  EXPECT_CONTAINS(error_of("not json"),
                  "generation_config.json: generation config is not valid JSON");
  EXPECT_CONTAINS(error_of("[]"), "is not a JSON object");
  EXPECT_CONTAINS(error_of(R"({"temperature": "hot"})"), "'temperature' must be a number");
  EXPECT_CONTAINS(error_of(R"({"temperature": -1})"), "'temperature' must be in [0");
  EXPECT_CONTAINS(error_of(R"({"top_p": 0})"), "'top_p' must be in (0");
  EXPECT_CONTAINS(error_of(R"({"top_p": 1.5})"), "'top_p' must be in (0");
  EXPECT_CONTAINS(error_of(R"({"min_p": 2})"), "'min_p' must be in [0");
  EXPECT_CONTAINS(error_of(R"({"top_k": -1})"), "'top_k' must be >= 0");
  EXPECT_CONTAINS(error_of(R"({"top_k": 1.5})"), "'top_k' must be an integer");
  EXPECT_CONTAINS(error_of(R"({"do_sample": 1})"), "'do_sample' must be true or false");
  EXPECT_CONTAINS(error_of(R"({"eos_token_id": "</s>"})"), "'eos_token_id' must be an integer");
  EXPECT_CONTAINS(error_of(R"({"bos_token_id": -3})"), "'bos_token_id' must be >= 0");
  EXPECT_CONTAINS(error_of(R"({"repetition_penalty": 0})"), "'repetition_penalty' must be in (0");
  EXPECT_CONTAINS(error_of(R"({"max_new_tokens": 0})"), "'max_new_tokens' must be > 0");
}

}  // namespace
}  // namespace strata::model
