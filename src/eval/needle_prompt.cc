#include "eval/needle_prompt.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace strata::eval {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

uint64_t fmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t splitmix64(uint64_t x) { return fmix(x + kGolden); }

// SplitMix64's stream: next() = fmix(state += golden). tools/tiny/tiny_needle.py has the same.
class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}
  uint64_t next() { return fmix(state_ += kGolden); }

 private:
  uint64_t state_;
};

// floor(x + 0.5) in both languages; Python's round() would round halves to even.
uint64_t depth_permille(double depth) {
  return static_cast<uint64_t>(std::floor(depth * 1000.0 + 0.5));
}

Rng prompt_rng(uint64_t seed, int32_t context, double depth, int32_t trial) {
  uint64_t s = splitmix64(seed);
  s = splitmix64(s ^ static_cast<uint64_t>(context));
  s = splitmix64(s ^ depth_permille(depth));
  s = splitmix64(s ^ static_cast<uint64_t>(trial));
  return Rng(s);
}

std::string needle_text(const std::string& key) {
  std::string t(kNeedleTemplate);
  t.replace(t.find("{key}"), 5, key);
  return t;
}

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids, size_t from = 0,
            size_t to = std::string::npos) {
  to = std::min(to, ids.size());
  out.insert(out.end(), ids.begin() + static_cast<std::ptrdiff_t>(from),
             ids.begin() + static_cast<std::ptrdiff_t>(to));
}

}  // namespace

NeedleFiller::NeedleFiller(const tokenizer::Tokenizer& tok, std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
      lines_.push_back(tok.encode(std::string(line) + "\n", /*add_special_tokens=*/false));
    }
    start = end + 1;
  }
  if (lines_.empty()) throw Error("the needle filler text has no non-blank line");
}

NeedleFiller NeedleFiller::load(const tokenizer::Tokenizer& tok,
                                const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / kNeedleFillerFile;
  std::optional<MappedFile> file;
  try {
    file = MappedFile::open(path);  // not a directory, a FIFO or /dev/zero
  } catch (const Error& e) {
    throw Error(std::string("cannot read the model's needle filler text (one line of text per ") +
                "line, written by tools/tiny/make_tiny_corpus.py for strata-tiny): " + e.what());
  }
  try {
    return NeedleFiller(tok, file->text());
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
}

Result<NeedlePrompt> build_needle_prompt(const tokenizer::Tokenizer& tok,
                                         const NeedleFiller& filler, uint64_t seed, int32_t context,
                                         double depth, int32_t trial) {
  if (!(depth >= 0.0 && depth <= 1.0)) {
    return Status::InvalidArgument("depth " + std::to_string(depth) + " is outside [0, 1]");
  }
  if (trial < 0) return Status::InvalidArgument("trial must be >= 0");
  Rng rng = prompt_rng(seed, context, depth, trial);
  NeedlePrompt p{context, depth, trial, std::to_string(10000 + rng.next() % 90000), {}, {}, 0};
  const std::vector<int32_t> prefix = tok.encode("", /*add_special_tokens=*/true);
  const std::vector<int32_t> needle = tok.encode(needle_text(p.key), false);
  const std::vector<int32_t> question = tok.encode(std::string(kNeedleQuestion), false);
  p.answer = tok.encode(p.key, false);
  const int64_t num_filler =
      int64_t{context} -
      static_cast<int64_t>(prefix.size() + needle.size() + question.size() + p.answer.size());
  if (num_filler < 0) {
    return Status::InvalidArgument("context " + std::to_string(context) +
                                   " is too short for the needle, question and answer (" +
                                   std::to_string(int64_t{context} - num_filler) + " tokens)");
  }
  // Whole lines from a random first line (wrapping around) until there are enough; the first
  // line is then cut from the front so the filler ends on a complete line.
  auto line = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(filler.num_lines()));
  std::vector<int32_t> all;
  std::vector<int64_t> starts;
  while (static_cast<int64_t>(all.size()) < num_filler) {
    starts.push_back(static_cast<int64_t>(all.size()));
    append(all, filler.line(line));
    line = (line + 1) % filler.num_lines();
  }
  const int64_t drop = static_cast<int64_t>(all.size()) - num_filler;
  std::set<int64_t> boundaries = {0, num_filler};
  for (int64_t s : starts) {
    if (s - drop > 0) boundaries.insert(s - drop);
  }
  // The boundary nearest depth x filler length; ties go to the earlier one (set order).
  const double target = depth * static_cast<double>(num_filler);
  int64_t pos = 0;
  double best = -1.0;
  for (int64_t b : boundaries) {
    const double d = std::fabs(static_cast<double>(b) - target);
    if (best < 0.0 || d < best) {
      best = d;
      pos = b;
    }
  }
  p.prompt = prefix;
  append(p.prompt, all, static_cast<size_t>(drop), static_cast<size_t>(drop + pos));
  p.needle_pos = static_cast<int32_t>(p.prompt.size());
  append(p.prompt, needle);
  append(p.prompt, all, static_cast<size_t>(drop + pos));
  append(p.prompt, question);
  return p;
}

Result<std::vector<NeedlePrompt>> build_needle_prompts(const tokenizer::Tokenizer& tok,
                                                       const NeedleFiller& filler, uint64_t seed,
                                                       const std::vector<int32_t>& contexts,
                                                       const std::vector<double>& depths,
                                                       int32_t trials) {
  std::vector<NeedlePrompt> out;
  for (int32_t context : contexts) {
    for (double depth : depths) {
      for (int32_t trial = 0; trial < trials; ++trial) {
        Result<NeedlePrompt> p = build_needle_prompt(tok, filler, seed, context, depth, trial);
        if (!p.ok()) return p.status();
        out.push_back(std::move(*p));
      }
    }
  }
  return out;
}

}  // namespace strata::eval
