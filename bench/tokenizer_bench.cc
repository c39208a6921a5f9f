// Tokenizer encode throughput on a 1 MB mixed text (English prose, code with tabs and space
// runs, CJK, Arabic, Cyrillic, emoji, numbers, URLs), in MB/s of input, for the real tokenizer
// files that scripts/install_deps.sh fetches. The peer, measured in the same run on the same
// machine: one plain PCRE2 JIT pass of the Llama 3 pre-tokenizer regex over the same text, the
// floor of the regex stage that every encode includes.

#include <benchmark/benchmark.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

const std::string& mixed_text() {
  static const std::string text = [] {
    const std::vector<std::string> parts = {
        "The quick brown fox jumps over the lazy dog. ",
        "It's what they've said, isn't it? ",
        "Inference engines batch requests continuously; the KV cache is paged. ",
        "def encode(self, text):\n\tids = []\n        for piece in split(text):\n            ids "
        "+= bpe(piece)\n\treturn ids\n",
        "if (x != nullptr && y[i] >= 42) {\n    return x->value + 3.14159;\n}\n",
        "我们今天去公园散步吧，天气很好。",
        "日本語のテキストとカタカナ。",
        "مرحبا بالعالم، كيف حالك؟ ",
        "Привет, мир! Как дела? ",
        "😀 👨\u200d👩\u200d👧 🇯🇵 ",
        "12345678901234 2026-11-29 ",
        "https://example.com/path?query=1&b=two ",
        "\r\n",
        "\n\n",
        "    ",
        "Ünïcödé naïve café ",
    };
    const std::vector<int> weights = {20, 10, 12, 6, 6, 5, 3, 3, 3, 2, 3, 3, 2, 4, 2, 3};
    std::string s;
    uint64_t state = 88172645463325252ull;
    int total = 0;
    for (const int w : weights) total += w;
    while (s.size() < (1u << 20)) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      int r = static_cast<int>(state % static_cast<uint64_t>(total));
      size_t k = 0;
      while (r >= weights[k]) r -= weights[k++];
      s += parts[k];
    }
    return s;
  }();
  return text;
}

// Encodes the 1 MiB text whole (chunk_bytes 0) or as prompts of about chunk_bytes each, cut at
// character boundaries.
void encode_bench(benchmark::State& state, const char* name, size_t chunk_bytes) {
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR) / "tokenizers" / name;
  if (!fs::exists(dir / "tokenizer.json")) {
    state.SkipWithError("tests/data/tokenizers is absent: run scripts/install_deps.sh");
    return;
  }
  const auto tok = strata::tokenizer::Tokenizer::load(dir);
  const std::string& text = mixed_text();
  std::vector<std::string_view> chunks;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = chunk_bytes == 0 ? text.size() : std::min(text.size(), begin + chunk_bytes);
    while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
    chunks.push_back(std::string_view(text).substr(begin, end - begin));
    begin = end;
  }
  size_t num_tokens = 0;
  for (auto _ : state) {
    num_tokens = 0;
    for (const std::string_view chunk : chunks) {
      const std::vector<int32_t> ids = tok.encode(chunk, false);
      num_tokens += ids.size();
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.size()) / 1e6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(num_tokens);
}

void BM_Encode(benchmark::State& state, const char* name) { encode_bench(state, name, 0); }
void BM_Encode4K(benchmark::State& state, const char* name) { encode_bench(state, name, 4096); }
BENCHMARK_CAPTURE(BM_Encode, qwen3, "qwen3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, llama3_1, "llama3_1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, deepseek_v3, "deepseek_v3")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, llama2, "llama2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode4K, qwen3, "qwen3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode4K, llama2, "llama2")->Unit(benchmark::kMillisecond)->UseRealTime();

// The peer: Llama 3's Split regex alone, PCRE2 with JIT, every match visited once.
void BM_Pcre2RegexFloor(benchmark::State& state) {
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const std::string& text = mixed_text();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t num_pieces = 0;
  for (auto _ : state) {
    num_pieces = 0;
    for (size_t start = 0; start < text.size();) {
      if (pcre2_jit_match(code, subject, text.size(), start, 0, md, nullptr) < 0) break;
      start = pcre2_get_ovector_pointer(md)[1];
      ++num_pieces;
    }
    benchmark::DoNotOptimize(num_pieces);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.size()) / 1e6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pieces"] = static_cast<double>(num_pieces);
  pcre2_match_data_free(md);
  pcre2_code_free(code);
}
BENCHMARK(BM_Pcre2RegexFloor)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
