// What constrained decoding costs (docs/benchmarks.md, "Structured outputs"): per JSON schema,
// the compile time (schema -> regex -> byte DFA) and the DFA's size, and the same per EBNF
// grammar (GBNF text -> byte NFA -> byte DFA, recursion expanded to --grammar-depth); per vocabulary, the trie's
// build time; and the token mask per decoding step, measured along constrained outputs: a fresh
// TokenMasker per output (as a request has), each step's mask, then a random allowed token (the
// end token where the state accepts, with probability 1/8), up to --max-tokens. A step's token is
// the first allowed one from a random id on. Then the same outputs again with one MaskCache per
// schema, shared by its requests and warmed by one request's walk: a schema's later requests.
//
// Usage: strata_grammar_bench --tokenizer DIR [--tokenizer DIR ...] [--schemas DIR]
//                             [--grammars DIR [--grammar-depth N]] [--outputs N]
//                             [--max-tokens N] [--json]
// DIR of --schemas holds one JSON schema per *.json file; DIR of --grammars one GBNF grammar
// per *.gbnf file.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/ebnf_nfa.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_masker.h"
#include "guarded_main.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_bytes.h"

namespace {

using namespace strata;
using namespace strata::grammar;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Compiled {
  std::string name;
  double compile_s = 0;
  std::shared_ptr<const ByteDfa> dfa;
  std::shared_ptr<MaskCache> cache;  // the schema's masks shared by its requests (per vocabulary)
  // Its DFA's liveness classes at the vocabulary's longest token: the caches' keys, as the
  // engine's (GrammarCompiler) are.
  std::shared_ptr<const std::vector<int32_t>> keys;
  int depth = -1;  // a grammar's recursion depth (compile_ebnf_dfa); -1 for a schema
};

// The first token m allows from word `from` on (wrapping), or -1 when it allows none.
int32_t first_allowed(const TokenMask& m, size_t from) {
  const size_t words = m.words.size();
  for (size_t w = 0; w < words; ++w) {
    const size_t i = (from + w) % words;
    if (m.words[i] != 0) {
      return static_cast<int32_t>(i * 64 + static_cast<size_t>(std::countr_zero(m.words[i])));
    }
  }
  return -1;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int run(int argc, char** argv) {
  CLI::App app{"Constrained decoding's compile time and token-mask cost"};
  std::vector<std::string> tokenizers;
  std::string schemas_dir, grammars_dir;
  int outputs = 20, max_tokens = 256, grammar_depth = EbnfLimits{}.max_depth;
  bool json = false;
  app.add_option("--tokenizer", tokenizers, "a tokenizer directory (tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--schemas", schemas_dir, "a directory of *.json schemas")
      ->check(CLI::ExistingDirectory);
  app.add_option("--grammars", grammars_dir, "a directory of *.gbnf EBNF grammars")
      ->check(CLI::ExistingDirectory);
  app.add_option("--grammar-depth", grammar_depth, "the grammars' recursion depth")
      ->check(CLI::Range(0, 64));
  app.add_option("--outputs", outputs, "constrained outputs per schema and vocabulary")
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-tokens", max_tokens, "tokens per output at most")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--json", json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  if (schemas_dir.empty() && grammars_dir.empty()) {
    std::fprintf(stderr, "strata_grammar_bench: give --schemas, --grammars or both\n");
    return 2;
  }

  const auto files_in = [](const std::string& dir, const char* extension) {
    std::vector<std::filesystem::path> files;
    if (dir.empty()) return files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == extension) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  };
  const std::vector<std::filesystem::path> schemas = files_in(schemas_dir, ".json");
  const std::vector<std::filesystem::path> grammars = files_in(grammars_dir, ".gbnf");
  std::vector<std::filesystem::path> files = schemas;
  files.insert(files.end(), grammars.begin(), grammars.end());
  EbnfLimits ebnf;
  ebnf.max_depth = grammar_depth;
  std::vector<Compiled> compiled;
  for (const std::filesystem::path& f : files) {
    std::ifstream in(f);
    const bool grammar = f.extension() == ".gbnf";
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto start = Clock::now();
    // A grammar at the deepest depth up to --grammar-depth that fits, as the engine builds it.
    Result<ByteDfa> dfa = Status::InvalidArgument("not read");
    int depth = -1;
    if (grammar) {
      Result<EbnfDfa> built =
          compile_ebnf_dfa(text, {}, ebnf, RegexLimits{}.max_nfa_states, 1 << 16);
      if (built.ok()) depth = built->depth;
      dfa = built.ok() ? Result<ByteDfa>(std::move(built->dfa)) : Result<ByteDfa>(built.status());
    } else {
      const nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      const Result<std::string> regex = json_schema_regex(schema);
      Result<Nfa> nfa = regex.ok() ? compile_regex(*regex) : Result<Nfa>(regex.status());
      dfa = nfa.ok() ? ByteDfa::build(*nfa) : Result<ByteDfa>(nfa.status());
    }
    if (!dfa.ok()) {
      std::fprintf(stderr, "strata_grammar_bench: %s: %s\n", f.c_str(),
                   dfa.status().to_string().c_str());
      return 1;
    }
    compiled.push_back({(grammar ? "gbnf:" : "") + f.stem().string(), since(start),
                        std::make_shared<const ByteDfa>(std::move(dfa).value()), nullptr, nullptr,
                        depth});
  }

  nlohmann::json out;
  if (!json) {
    std::printf("%-28s %10s %8s %6s\n", "schema", "compile ms", "states", "depth");
    for (const Compiled& c : compiled) {
      std::printf("%-28s %10.2f %8d %6s\n", c.name.c_str(), c.compile_s * 1e3,
                  c.dfa->num_states(), c.depth < 0 ? "" : std::to_string(c.depth).c_str());
    }
  }
  for (const Compiled& c : compiled) {
    nlohmann::json row = {
        {"name", c.name}, {"compile_s", c.compile_s}, {"dfa_states", c.dfa->num_states()}};
    if (c.depth >= 0) row["grammar_depth"] = c.depth;
    out["schemas"].push_back(std::move(row));
  }
  for (const std::string& dir : tokenizers) {
    const tokenizer::Tokenizer t = tokenizer::Tokenizer::load(dir);
    auto start = Clock::now();
    const auto vocab = std::make_shared<const VocabTrie>(tokenizer::vocab_bytes(t));
    const double trie_s = since(start);
    start = Clock::now();
    int64_t num_classes = 0, num_states = 0;
    double slowest_classes_s = 0;
    std::string slowest;
    for (Compiled& c : compiled) {
      c.cache = std::make_shared<MaskCache>();
      const auto one = Clock::now();
      c.keys = std::make_shared<const std::vector<int32_t>>(
          c.dfa->liveness_classes(vocab->max_token_bytes()));
      if (since(one) > slowest_classes_s) {
        slowest_classes_s = since(one);
        slowest = c.name;
      }
      num_states += c.dfa->num_states();
      num_classes += c.keys->empty() ? c.dfa->num_states()
                                     : *std::max_element(c.keys->begin(), c.keys->end()) + 1;
    }
    const double classes_s = since(start);
    nlohmann::json row = {{"tokenizer", std::filesystem::path(dir).filename().string()},
                          {"vocab_size", t.vocab_size()},
                          {"trie_build_s", trie_s},
                          {"trie_nodes", vocab->nodes().size()},
                          {"liveness_classes_s", classes_s},
                          {"slowest_liveness_classes_s", slowest_classes_s},
                          {"slowest_liveness_classes_schema", slowest},
                          {"dfa_states", num_states},
                          {"liveness_classes", num_classes}};
    if (!json) {
      std::printf("\n%s: %d tokens, trie %zu nodes in %.0f ms; %lld DFA states in %lld liveness "
                  "classes (%.0f ms; slowest %s, %.0f ms)\n",
                  row["tokenizer"].get<std::string>().c_str(), t.vocab_size(),
                  vocab->nodes().size(), trie_s * 1e3, static_cast<long long>(num_states),
                  static_cast<long long>(num_classes), classes_s * 1e3, slowest.c_str(),
                  slowest_classes_s * 1e3);
    }
    // Each output a request with a cache of its own, then the same outputs sharing one cache per
    // schema, warmed by the first pass (a schema's later requests).
    for (const bool shared : {false, true}) {
      std::mt19937 rng(1);
      std::vector<double> step_us, cold_us;
      int64_t tokens = 0, finished = 0;
      for (const Compiled& c : compiled) {
        for (int o = 0; o < outputs; ++o) {
          TokenMasker masker(c.dfa, vocab, shared ? c.cache : nullptr, c.keys);
          int32_t state = c.dfa->start();
          for (int k = 0; k < max_tokens; ++k) {
            const int64_t before = masker.num_computed();
            start = Clock::now();
            const std::shared_ptr<const TokenMask> held = masker.mask(state);
            const double us = since(start) * 1e6;
            const TokenMask& m = *held;
            step_us.push_back(us);
            if (masker.num_computed() > before) cold_us.push_back(us);
            ++tokens;
            if (c.dfa->accepting(state) && (m.count() == 0 || rng() % 8 == 0)) {
              ++finished;
              break;
            }
            // The first allowed token from a random place on: cheap, random enough.
            const int32_t pick = first_allowed(m, rng() % m.words.size());
            if (pick < 0) break;  // cannot happen: a live state can always go on or end
            state = masker.advance(state, pick);
          }
        }
        if (!shared) {  // warm the shared cache with what a first request of the schema walks
          TokenMasker warm(c.dfa, vocab, c.cache, c.keys);
          int32_t state = c.dfa->start();
          for (int k = 0; k < max_tokens && !c.dfa->accepting(state); ++k) {
            const int32_t pick = first_allowed(*warm.mask(state), 0);
            if (pick < 0) break;
            state = warm.advance(state, pick);
          }
        }
      }
      double sum = 0;
      for (const double u : step_us) sum += u;
      const nlohmann::json stats = {{"tokens", tokens},
                                    {"outputs_finished", finished},
                                    {"mask_us_mean", sum / static_cast<double>(step_us.size())},
                                    {"mask_us_p50", percentile(step_us, 0.5)},
                                    {"mask_us_p99", percentile(step_us, 0.99)},
                                    {"cold_mask_us_p50", percentile(cold_us, 0.5)},
                                    {"cold_masks", cold_us.size()}};
      row[shared ? "shared_cache" : "per_request_cache"] = stats;
      if (!json) {
        std::printf(
            "  %s: %lld masked steps (%lld outputs ended by the grammar); mask per step: mean "
            "%.1f us, p50 %.1f, p99 %.1f; walked (%zu masks): p50 %.1f us\n",
            shared ? "one cache per schema, warmed" : "a cache per request         ",
            static_cast<long long>(tokens), static_cast<long long>(finished),
            stats["mask_us_mean"].get<double>(), stats["mask_us_p50"].get<double>(),
            stats["mask_us_p99"].get<double>(), cold_us.size(),
            stats["cold_mask_us_p50"].get<double>());
      }
    }
    out["vocabularies"].push_back(row);
  }
  if (json) std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_grammar_bench", run, argc, argv);
}
