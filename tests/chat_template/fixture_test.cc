// The renderer against @huggingface/jinja: every case of tests/data/chat_templates/fixtures.json
// (a real chat template, a conversation, add_generation_prompt and extras) must render byte for
// byte as the reference did. Templates under tests/data/tokenizers are fetched by
// scripts/install_deps.sh; their cases skip when the files are absent.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::chat_template {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json load_fixtures() {
  return Json::parse(read_file(fs::path(STRATA_TEST_DATA_DIR) / "chat_templates/fixtures.json"));
}

TEST(ChatTemplateFixtureTest, RendersLikeHuggingFaceJinja) {
  const Json fixtures = load_fixtures();
  std::map<std::string, std::string> sources;  // config path -> chat_template
  size_t num_checked = 0;
  size_t num_skipped = 0;
  for (const Json& c : fixtures["cases"]) {
    const std::string config_path = c["source"];
    if (!sources.count(config_path)) {
      fs::path path = fs::path(STRATA_SOURCE_DIR) / config_path;
      sources[config_path] =
          fs::exists(path) ? Json::parse(read_file(path))["chat_template"].get<std::string>() : "";
    }
    const std::string& source = sources[config_path];
    if (source.empty()) {
      ++num_skipped;
      continue;
    }
    Json context = c["extra"];
    context["messages"] = fixtures["conversations"][c["conversation"].get<std::string>()];
    context["add_generation_prompt"] = c["add_generation_prompt"];
    context["bos_token"] = c["bos_token"];
    context["eos_token"] = c["eos_token"];
    const std::string label = c["template"].get<std::string>() + " / " +
                              c["conversation"].get<std::string>() + " / " + c["extra"].dump() +
                              " / add_generation_prompt=" + c["add_generation_prompt"].dump();
    Result<std::string> rendered = render_chat_template(source, context);
    if (c.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << label;
    } else {
      ASSERT_TRUE(rendered.ok()) << label << ": " << rendered.status().to_string();
      EXPECT_EQ(*rendered, c["expected"].get<std::string>()) << label;
    }
    ++num_checked;
  }
  if (num_checked == 0) GTEST_SKIP() << "no template sources (run scripts/install_deps.sh)";
  std::cout << num_checked << " cases checked, " << num_skipped << " skipped\n";
}

// render_tokenizer_chat_template takes bos_token / eos_token from the tokenizer's own ids; on these
// tokenizers they are the strings tokenizer_config.json names, so the fixtures hold.
TEST(ChatTemplateFixtureTest, TokenizerHelperMatchesFixtures) {
  const Json fixtures = load_fixtures();
  std::map<std::string, fs::path> dirs = {
      {"strata_tiny", fs::path(STRATA_SOURCE_DIR) / "models/strata-tiny"},
      {"qwen3", fs::path(STRATA_TEST_DATA_DIR) / "tokenizers/qwen3"},
      {"llama3_1", fs::path(STRATA_TEST_DATA_DIR) / "tokenizers/llama3_1"},
      {"deepseek_v3", fs::path(STRATA_TEST_DATA_DIR) / "tokenizers/deepseek_v3"}};
  for (const auto& [name, dir] : dirs) {
    if (!fs::exists(dir / "tokenizer.json")) continue;
    tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
    for (const Json& c : fixtures["cases"]) {
      if (c["template"] != name || c.contains("error")) continue;
      const Json& messages = fixtures["conversations"][c["conversation"].get<std::string>()];
      Json options = c["extra"];
      options["add_generation_prompt"] = c["add_generation_prompt"];
      Result<std::string> rendered = render_tokenizer_chat_template(tok, messages, options);
      ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
      EXPECT_EQ(*rendered, c["expected"].get<std::string>()) << name << " / " << c["conversation"];
    }
  }
}

}  // namespace
}  // namespace strata::chat_template
