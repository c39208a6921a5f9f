#pragma once
// Pass-key retrieval prompts ("needle in a haystack") for `strata eval needle`, built from a
// model's own filler text (needle_filler.txt in the model directory). The format, which the
// strata-tiny training data shares (tools/tiny/tiny_needle.py builds the same prompts in Python):
//
//   [BOS]  filler lines ...  "The pass key is 48213. Remember it.\n"  filler lines ...
//          "What is the pass key? The pass key is "   -> answer "48213"
//
// Each filler line is encoded on its own as line + "\n"; the needle goes in at the line boundary
// nearest depth x (filler length); the first line is cut from the front so that prompt + answer
// is exactly `context` tokens. Every random choice (the key, the first line) comes from SplitMix64
// seeded by a pure function of (seed, context, depth, trial): a prompt never depends on which
// other prompts a run builds, so two engine configurations compare on identical prompts, pair by
// pair, whatever grid each run asks for.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::eval {

inline constexpr std::string_view kNeedleFillerFile = "needle_filler.txt";
inline constexpr std::string_view kNeedleTemplate = "The pass key is {key}. Remember it.\n";
inline constexpr std::string_view kNeedleQuestion = "What is the pass key? The pass key is ";

// The filler's lines, encoded once. Owns the token ids; immutable after construction.
class NeedleFiller {
 public:
  // Every non-blank line of `text`, encoded as line + "\n" without special tokens. Throws
  // strata::Error when the text has no such line.
  NeedleFiller(const tokenizer::Tokenizer& tok, std::string_view text);
  // model_dir/needle_filler.txt; throws strata::Error naming the file when it is missing or empty.
  static NeedleFiller load(const tokenizer::Tokenizer& tok, const std::filesystem::path& model_dir);

  int64_t num_lines() const { return static_cast<int64_t>(lines_.size()); }
  const std::vector<int32_t>& line(int64_t i) const { return lines_[static_cast<size_t>(i)]; }

 private:
  std::vector<std::vector<int32_t>> lines_;
};

struct NeedlePrompt {
  int32_t context = 0;  // prompt + answer tokens
  double depth = 0.0;   // requested depth in [0, 1]
  int32_t trial = 0;
  std::string key;              // the pass key, 5 digits
  std::vector<int32_t> prompt;  // context - answer.size() tokens
  std::vector<int32_t> answer;  // the key's tokens
  int32_t needle_pos = 0;       // index of the needle's first token in `prompt`
};

// The prompt for one (seed, context, depth, trial). InvalidArgument when depth is outside [0, 1],
// trial < 0, or context leaves no room for BOS + needle + question + answer.
Result<NeedlePrompt> build_needle_prompt(const tokenizer::Tokenizer& tok,
                                         const NeedleFiller& filler, uint64_t seed, int32_t context,
                                         double depth, int32_t trial);

// Every (context, depth, trial), contexts outermost, then depths, then trials 0..trials-1.
Result<std::vector<NeedlePrompt>> build_needle_prompts(const tokenizer::Tokenizer& tok,
                                                       const NeedleFiller& filler, uint64_t seed,
                                                       const std::vector<int32_t>& contexts,
                                                       const std::vector<double>& depths,
                                                       int32_t trials);

}  // namespace strata::eval
