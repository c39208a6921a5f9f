// Tokenizer::token_bytes (what constrained decoding walks) on the real tokenizer files: the
// tokens' bytes, concatenated, are the text decode() gives for the same ids after a first token
// (whole characters; a byte-level token may hold part of one), special tokens have none, and
// SentencePiece's word boundary is the space it stands for, also mid-text.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {
namespace {

const std::filesystem::path kDir = std::filesystem::path(STRATA_TEST_DATA_DIR) / "tokenizers";

TEST(TokenBytesTest, ConcatenatedTheyAreWhatDecodeGivesMidText) {
  for (const char* name : {"llama2", "llama3_1", "qwen3", "deepseek_v3"}) {
    const Tokenizer t = Tokenizer::load(kDir / name);
    const std::vector<int32_t> lead = t.encode("a", /*add_special_tokens=*/false);
    ASSERT_EQ(lead.size(), 1u) << name;
    const std::string lead_text = t.decode(lead, false);
    std::mt19937 rng(7);
    int checked = 0;
    for (int trial = 0; trial < 400; ++trial) {
      // Real text's ids (multi-byte characters included), and random ids.
      std::vector<int32_t> ids =
          trial % 2 == 0
              ? t.encode("Héllo, wörld! 你好 \xF0\x9F\x98\x80 {\"a\": [1, 2]}\n  x", false)
              : std::vector<int32_t>{};
      for (int k = 0; k < 6; ++k) ids.push_back(static_cast<int32_t>(rng() % t.vocab_size()));
      std::string bytes;
      std::vector<int32_t> with_lead = lead;
      bool special = false;
      for (const int32_t id : ids) {
        special |= t.is_special(id);
        bytes += t.token_bytes(id);
        with_lead.push_back(id);
      }
      if (special || !is_valid_utf8(bytes)) continue;  // decode() repairs or drops those
      ASSERT_EQ(lead_text + bytes, t.decode(with_lead, false)) << name << " trial " << trial;
      ++checked;
    }
    EXPECT_GT(checked, 150) << name;
    if (const std::optional<int32_t> eos = t.eos_token_id()) {
      EXPECT_TRUE(t.token_bytes(*eos).empty()) << name;
    }
    EXPECT_TRUE(t.token_bytes(t.vocab_size() + 5).empty());
  }
}

TEST(TokenBytesTest, AWordBoundaryIsItsSpaceAndAByteTokenItsByte) {
  const Tokenizer llama2 = Tokenizer::load(kDir / "llama2");
  EXPECT_EQ(llama2.token_bytes(*llama2.token_to_id("\xE2\x96\x81the")), " the");
  EXPECT_EQ(llama2.token_bytes(*llama2.token_to_id("<0xE2>")), "\xE2");
  const Tokenizer llama3 = Tokenizer::load(kDir / "llama3_1");
  EXPECT_EQ(llama3.token_bytes(*llama3.token_to_id("\xC4\xA0hello")), " hello");  // Ġhello
}

}  // namespace
}  // namespace strata::tokenizer
