// Token masks (src/grammar/token_masker.h) against brute force: at every state a random walk
// reaches, a token is allowed exactly when walking its bytes from there stays live -- over a
// vocabulary of single bytes, ASCII words, multi-byte characters and fragments of them (as
// byte-level BPE has); special tokens (no bytes) never are; the cache returns what a fresh walk
// would, also when it evicts.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/regex.h"
#include "grammar/token_masker.h"
#include "tests/grammar/dfa_sampling.h"

namespace strata::grammar {
namespace {

std::shared_ptr<const ByteDfa> dfa_of(const std::string& pattern) {
  Result<Nfa> nfa = compile_regex(pattern);
  EXPECT_TRUE(nfa.ok()) << nfa.status().message();
  Result<ByteDfa> dfa = ByteDfa::build(*nfa);
  EXPECT_TRUE(dfa.ok()) << dfa.status().message();
  return std::make_shared<const ByteDfa>(std::move(dfa).value());
}

// Every single byte, then words and pieces a byte-level BPE vocabulary has, then special tokens.
std::shared_ptr<const VocabTrie> test_vocab(std::mt19937& rng) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  const std::vector<std::string> pieces = {"\"",
                                           "{\"",
                                           "\":",
                                           "\",\"",
                                           "true",
                                           "false",
                                           "null",
                                           "\"}",
                                           "}",
                                           "[",
                                           "],",
                                           "12",
                                           "3.5",
                                           "-",
                                           "e+",
                                           "name",
                                           "age",
                                           " \"",
                                           "\\n",
                                           "\\u00",
                                           "\xC3\xA9",
                                           "\xE2\x82",
                                           "\xAC\"",
                                           "ab",
                                           "abc",
                                           "bc",
                                           "  ",
                                           "\n",
                                           "x",
                                           "zz",
                                           "\xF0\x9F\x98\x80",
                                           "\xF0\x9F"};
  for (const std::string& p : pieces) v.push_back(p);
  const std::string letters = "abcxz019\"{}[],:.-e \\n";
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int len = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) t += letters[rng() % letters.size()];
    v.push_back(t);
  }
  v.emplace_back();  // a special token: no bytes
  v.emplace_back();
  return std::make_shared<const VocabTrie>(v);
}

TEST(TokenMaskerTest, AllowsExactlyTheTokensThatKeepAValidPrefix) {
  std::mt19937 rng(3);
  const std::shared_ptr<const VocabTrie> vocab = test_vocab(rng);
  for (const char* pattern : {"\\{\"name\":\"[a-z]{1,8}\",\"age\":(0|[1-9][0-9]*)\\}", "(ab|c)*x",
                              "[^\"]{0,5}\"", "(true|false|null|-?[0-9]+(\\.[0-9]+)?)",
                              "\xC3\xA9+\xE2\x82\xAC?\"", "(\xF0\x9F\x98\x80|z)+"}) {
    const std::shared_ptr<const ByteDfa> dfa = dfa_of(pattern);
    TokenMasker masker(dfa, vocab, std::make_shared<MaskCache>(/*capacity=*/4));
    for (int walk = 0; walk < 40; ++walk) {
      int32_t state = dfa->start();
      const std::string target = sample_match(*dfa, rng, 24);
      for (size_t i = 0; i <= target.size(); ++i) {
        const TokenMask& m = *masker.mask(state);
        for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
          const bool want =
              !vocab->bytes(id).empty() && dfa->walk(state, vocab->bytes(id)) != ByteDfa::kDead;
          ASSERT_EQ(m.allows(id), want) << pattern << " token " << id << " at byte " << i;
        }
        if (i < target.size()) state = dfa->next(state, static_cast<uint8_t>(target[i]));
      }
      EXPECT_TRUE(dfa->accepting(state));
    }
    EXPECT_EQ(masker.mask(ByteDfa::kDead)->count(), 0);
  }
}

// Keyed by liveness class at the longest token, every state still gets exactly its own mask,
// and a counting pattern's states share a few masks instead of one each.
TEST(TokenMaskerTest, LivenessClassKeysGiveEveryStateItsOwnMaskFromFewWalks) {
  std::mt19937 rng(5);
  const std::shared_ptr<const VocabTrie> vocab = test_vocab(rng);
  for (const char* pattern : {"[a-z]{80}x", "([ab]{30}c){2}", "(ab|c)*x", "[^\"]{0,50}\"",
                              "\\{\"k\":[0-9]{1,40}\\}"}) {
    const std::shared_ptr<const ByteDfa> dfa = dfa_of(pattern);
    auto keys = std::make_shared<const std::vector<int32_t>>(
        dfa->liveness_classes(vocab->max_token_bytes()));
    ASSERT_EQ(keys->size(), static_cast<size_t>(dfa->num_states())) << pattern;
    EXPECT_EQ((*keys)[ByteDfa::kDead], 0);
    TokenMasker masker(dfa, vocab, std::make_shared<MaskCache>(4096), keys);
    std::set<int32_t> distinct(keys->begin(), keys->end());
    for (int32_t s = 0; s < dfa->num_states(); ++s) {
      const TokenMask& m = *masker.mask(s);
      for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
        const bool want =
            !vocab->bytes(id).empty() && dfa->walk(s, vocab->bytes(id)) != ByteDfa::kDead;
        ASSERT_EQ(m.allows(id), want) << pattern << " state " << s << " token " << id;
      }
    }
    EXPECT_EQ(masker.num_computed(), static_cast<int64_t>(distinct.size())) << pattern;
    if (std::string(pattern) == "[a-z]{80}x") {
      EXPECT_LT(masker.num_computed(), dfa->num_states() / 2) << "the counting states share masks";
    }
  }
}

TEST(TokenMaskerTest, TheCacheAnswersAsAFreshWalkAndEvictsTheLeastRecent) {
  std::mt19937 rng(5);
  const std::shared_ptr<const VocabTrie> vocab = test_vocab(rng);
  const std::shared_ptr<const ByteDfa> dfa = dfa_of("(ab|c)*x");
  TokenMasker masker(dfa, vocab, std::make_shared<MaskCache>(/*capacity=*/2));
  const int32_t a = dfa->start();
  const int32_t b = dfa->next(a, 'a');
  const int32_t c = dfa->next(b, 'b') == a ? dfa->next(a, 'x') : dfa->next(b, 'b');
  ASSERT_NE(b, a);
  ASSERT_NE(c, a);
  ASSERT_NE(c, b);
  const TokenMask first = *masker.mask(a);
  EXPECT_EQ(masker.num_computed(), 1);
  EXPECT_EQ(masker.mask(a)->words, first.words);
  EXPECT_EQ(masker.num_computed(), 1) << "cached";
  masker.mask(b);
  masker.mask(a);  // a is the most recent again
  EXPECT_EQ(masker.num_computed(), 2);
  masker.mask(c);  // evicts b
  masker.mask(a);
  EXPECT_EQ(masker.num_computed(), 3);
  masker.mask(b);
  EXPECT_EQ(masker.num_computed(), 4);
  EXPECT_EQ(masker.mask(a)->words, first.words);
  EXPECT_EQ(masker.advance(a, 'x' /* token 'x' is byte 0x78 */), dfa->next(a, 'x'));
  EXPECT_TRUE(dfa->accepting(masker.advance(a, 'x')));
}

TEST(TokenMaskerTest, RequestsOfOneGrammarShareItsMasks) {
  std::mt19937 rng(9);
  const std::shared_ptr<const VocabTrie> vocab = test_vocab(rng);
  const std::shared_ptr<const ByteDfa> dfa = dfa_of("(ab|c)*x");
  const auto cache = std::make_shared<MaskCache>();
  TokenMasker first(dfa, vocab, cache), second(dfa, vocab, cache);
  const std::shared_ptr<const TokenMask> m = first.mask(dfa->start());
  EXPECT_EQ(second.mask(dfa->start()), m) << "the same mask, not walked again";
  EXPECT_EQ(second.num_computed(), 0);
  EXPECT_EQ(cache->size(), 1u);
  // A masker of its own shares nothing.
  TokenMasker alone(dfa, vocab);
  EXPECT_EQ(alone.mask(dfa->start())->words, m->words);
  EXPECT_EQ(alone.num_computed(), 1);
  // Masks stay valid for whoever holds them after the cache lets them go.
  const auto tiny = std::make_shared<MaskCache>(/*capacity=*/1);
  TokenMasker evicting(dfa, vocab, tiny);
  const std::shared_ptr<const TokenMask> held = evicting.mask(dfa->start());
  evicting.mask(dfa->next(dfa->start(), 'c'));
  EXPECT_EQ(held->words, m->words);
}

TEST(TokenMaskerTest, ThreadsSharingACacheSeeWhatAFreshWalkGives) {
  std::mt19937 rng(13);
  const std::shared_ptr<const VocabTrie> vocab = test_vocab(rng);
  const std::shared_ptr<const ByteDfa> dfa =
      dfa_of("\\{\"name\":\"[a-z]{1,8}\",\"age\":(0|[1-9][0-9]*)\\}");
  const auto cache = std::make_shared<MaskCache>(/*capacity=*/3);  // small: evictions race too
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 local(static_cast<uint32_t>(100 + t));
      TokenMasker shared(dfa, vocab, cache), alone(dfa, vocab);
      for (int walk = 0; walk < 30; ++walk) {
        const std::string target = sample_match(*dfa, local, 24);
        int32_t state = dfa->start();
        for (size_t i = 0; i <= target.size(); ++i) {
          if (shared.mask(state)->words != alone.mask(state)->words)
            ++mismatches[static_cast<size_t>(t)];
          if (i < target.size()) state = dfa->next(state, static_cast<uint8_t>(target[i]));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const int m : mismatches) EXPECT_EQ(m, 0);
  EXPECT_LE(cache->size(), 3u);
}

}  // namespace
}  // namespace strata::grammar
