// Behaviour of each tokenizer stage on small hand-written tokenizer.json files: merge formats,
// Metaspace, byte fallback and its decoders, added-token flags, Split behaviours, streaming, and
// the errors malformed files give.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// A SentencePiece-style BPE over a tiny alphabet: ▁ a b c, merges a b -> ab, ab c -> abc,
// ▁ abc -> ▁abc, with the 256 byte tokens for byte_fallback at ids 100..355.
std::string sentencepiece_json(const std::string& merges, const std::string& normalizer,
                               const std::string& pre_tokenizer, const std::string& added) {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "a": 4, "b": 5, "c": 6, "ab": 7,
                         "abc": 8, "▁abc": 9)";
  for (int b = 0; b < 256; ++b) {
    char name[16];
    std::snprintf(name, sizeof(name), ", \"<0x%02X>\": %d", b, 100 + b);
    vocab += name;
  }
  return R"({"version": "1.0", "added_tokens": [)" + added + R"(], "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": )" + pre_tokenizer + R"(,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
      "vocab": {)" +
         vocab + R"(}, "merges": )" + merges + "}}";
}

const std::string kSpecialAdded =
    R"({"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
       {"id": 2, "content": "</s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false})";
const std::string kLlama2Normalizer =
    R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})";

Tokenizer llama2_style(const std::string& merges = R"(["a b", "ab c", "▁ abc"])") {
  return Tokenizer::from_json(sentencepiece_json(merges, kLlama2Normalizer, "null", kSpecialAdded),
                              "", "test");
}

TEST(TokenizerTest, LegacyAndPairMergesGiveTheSameIds) {
  const Tokenizer legacy = llama2_style();
  const Tokenizer pairs = llama2_style(R"([["a", "b"], ["ab", "c"], ["▁", "abc"]])");
  EXPECT_EQ(legacy.encode("abc abc", false), (Ids{9, 9}));
  EXPECT_EQ(pairs.encode("abc abc", false), (Ids{9, 9}));
  EXPECT_EQ(legacy.encode("ab", false), (Ids{3, 7}));
}

TEST(TokenizerTest, PrependNormalizerRunsOnEachPieceBetweenAddedTokens) {
  const Tokenizer t = llama2_style();
  EXPECT_EQ(t.encode("abc<s>abc", false), (Ids{9, 1, 9}));
  EXPECT_EQ(t.encode("abc", true), (Ids{1, 9}));
  EXPECT_EQ(t.encode("", true), (Ids{1}));
}

TEST(TokenizerTest, ByteFallbackEncodesAndDecodesUnknownCharacters) {
  const Tokenizer t = llama2_style();
  // "é" is not in the vocab: its two UTF-8 bytes C3 A9 become <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("é", false), (Ids{3, 100 + 0xC3, 100 + 0xA9}));
  EXPECT_EQ(t.decode(Ids{3, 100 + 0xC3, 100 + 0xA9}, false), "é");
  // A lone continuation byte decodes to U+FFFD, and the leading space is stripped once.
  EXPECT_EQ(t.decode(Ids{9, 100 + 0xA9, 9}, false), "abc\xEF\xBF\xBD abc");
  EXPECT_EQ(t.decode(Ids{1, 9}, false), "<s> abc");
  EXPECT_EQ(t.decode(Ids{1, 9}, true), "abc");
}

TEST(TokenizerTest, StreamDecoderHoldsBackIncompleteCharacters) {
  const Tokenizer t = llama2_style();
  const Ids ids = t.encode("abc 你 abc", false);
  StreamDecoder stream(t, false);
  std::string text;
  std::vector<std::string> deltas;
  for (const int32_t id : ids) deltas.push_back(stream.push(id));
  text += deltas[0];
  for (size_t i = 1; i < deltas.size(); ++i) text += deltas[i];
  text += stream.flush();
  EXPECT_EQ(text, "abc 你 abc");
  for (const std::string& d : deltas) EXPECT_EQ(d.find("\xEF\xBF\xBD"), std::string::npos);
}

// The text a StreamDecoder gives for `ids`, flushed.
std::string streamed(const Tokenizer& t, const Ids& ids) {
  StreamDecoder stream(t, false);
  std::string text;
  for (const int32_t id : ids) text += stream.push(id);
  return text + stream.flush();
}

TEST(TokenizerTest, StreamDecoderMatchesDecodeWhenStripRemovesSeveralSpaces) {
  // After Fuse, Strip acts on the whole text. The stream decodes windows of recent ids, and used
  // to strip each window's start as if it began the text: with "start": 2 a window of one ▁
  // emitted nothing, and the next window lost that space (the fuzzer's "start": 1 -> 2 mutation).
  for (const char* counts :
       {R"("start": 2, "stop": 0)", R"("start": 1, "stop": 1)", R"("start": 3, "stop": 2)"}) {
    std::string json =
        sentencepiece_json(R"(["a b", "ab c", "▁ abc"])", kLlama2Normalizer, "null", kSpecialAdded);
    const std::string llama2_counts = R"("start": 1, "stop": 0)";
    json.replace(json.find(llama2_counts), llama2_counts.size(), counts);
    const Tokenizer t = Tokenizer::from_json(json, "", "test");
    for (const char* text : {"abc   abc", "   abc  ", "abc      abc   ", " ", "abc \n é  "}) {
      const Ids ids = t.encode(text, false);
      EXPECT_EQ(streamed(t, ids), t.decode(ids, false)) << counts << " text " << text;
    }
  }
}

// A token's bytes are what it adds mid-text: a Strip after Fuse acts only at the text's ends.
// token_bytes used to decode "a" + the token and cut the "a" off, which a Strip of "a" with start
// 2 ate into ("abc" came out "bc").
TEST(TokenizerTest, TokenBytesIgnoreStepsAtTheTextsEnds) {
  std::string json =
      sentencepiece_json(R"(["a b", "ab c", "▁ abc"])", kLlama2Normalizer, "null", kSpecialAdded);
  const std::string llama2_strip = R"("content": " ", "start": 1, "stop": 0)";
  json.replace(json.find(llama2_strip), llama2_strip.size(),
               R"("content": "a", "start": 2, "stop": 1)");
  const Tokenizer t = Tokenizer::from_json(json, "", "test");
  const std::optional<int32_t> abc = t.token_to_id("abc");
  ASSERT_TRUE(abc.has_value());
  EXPECT_EQ(t.token_bytes(*abc), "abc");
  EXPECT_EQ(t.decode(Ids{*abc}, false), "bc") << "alone, the text's start loses its a";
  EXPECT_EQ(t.decode(Ids{*abc, *abc}, false), "bcabc") << "mid-text, nothing goes";
}

TEST(TokenizerTest, MetaspacePrependSchemeFirstAndSplit) {
  const std::string meta =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})";
  const Tokenizer t = Tokenizer::from_json(
      sentencepiece_json(R"(["a b", "ab c", "▁ abc"])", "null", meta, kSpecialAdded), "", "test");
  EXPECT_EQ(t.encode("abc abc", false), (Ids{9, 9}));
  // Only the start of the input gets the ▁: after an added token there is none.
  EXPECT_EQ(t.encode("abc</s>abc", false), (Ids{9, 2, 8}));
}

TEST(TokenizerTest, AddedTokenLstripRstripSwallowWhitespace) {
  const std::string added =
      R"({"id": 2, "content": "</s>", "special": true, "normalized": false, "lstrip": true, "rstrip": true, "single_word": false})";
  const Tokenizer t = Tokenizer::from_json(
      sentencepiece_json(R"(["a b", "ab c", "▁ abc"])", kLlama2Normalizer, "null", added), "",
      "test");
  EXPECT_EQ(t.encode("abc  </s>  abc", false), (Ids{9, 2, 9}));
}

std::string byte_level_json(const std::string& pre_tokenizer, bool ignore_merges) {
  return R"({"added_tokens": [], "normalizer": null, "pre_tokenizer": )" + pre_tokenizer + R"(,
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "ignore_merges": )" +
         std::string(ignore_merges ? "true" : "false") +
         R"(, "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "Ġab": 5, "abab": 6},
      "merges": ["Ġ a", "a b", "Ġa b"]}})";
}

TEST(TokenizerTest, SplitInvertAndBehaviors) {
  const auto make = [](const std::string& behavior, bool invert) {
    return Tokenizer::from_json(
        byte_level_json(
            R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "},
           "behavior": ")" +
                behavior + R"(", "invert": )" + (invert ? "true" : "false") +
                R"(}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})",
            false),
        "", "test");
  };
  EXPECT_EQ(make("Isolated", false).encode("ab ab", false), (Ids{3, 2, 3}));
  EXPECT_EQ(make("Removed", false).encode("ab ab", false), (Ids{3, 3}));
  EXPECT_EQ(make("MergedWithNext", false).encode("ab ab", false), (Ids{3, 5}));
  EXPECT_EQ(make("MergedWithPrevious", false).encode("ab ab", false), (Ids{3, 2, 3}));
  // Inverted, the pattern marks what to keep: Removed then drops everything else.
  EXPECT_EQ(make("Removed", true).encode("ab ab", false), (Ids{2}));
  EXPECT_EQ(make("Isolated", false).decode(Ids{3, 2, 3}, false), "ab ab");
}

TEST(TokenizerTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  const std::string pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  EXPECT_EQ(Tokenizer::from_json(byte_level_json(pre, true), "", "t").encode("abab", false),
            (Ids{6}));
  EXPECT_EQ(Tokenizer::from_json(byte_level_json(pre, false), "", "t").encode("abab", false),
            (Ids{3, 3}));
}

TEST(TokenizerTest, InvalidUtf8InputIsRepairedNotRejected) {
  const Tokenizer t = llama2_style();
  EXPECT_EQ(t.encode("a\xFF", false), (Ids{3, 4, 100 + 0xEF, 100 + 0xBF, 100 + 0xBD}));
}

TEST(TokenizerTest, AddBosTokenFromConfigForLlamaClasses) {
  const std::string json =
      sentencepiece_json(R"(["a b", "ab c", "▁ abc"])", kLlama2Normalizer, "null", kSpecialAdded);
  const Tokenizer with_eos = Tokenizer::from_json(
      json, R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": {"content": "<s>"},
                "eos_token": "</s>", "add_bos_token": false, "add_eos_token": true})",
      "t");
  EXPECT_EQ(with_eos.encode("abc", true), (Ids{9, 2}));
  EXPECT_EQ(with_eos.bos_token_id(), 1);
  EXPECT_EQ(with_eos.eos_token_id(), 2);
}

void expect_error(const std::string& json, const std::string& fragment) {
  try {
    (void)Tokenizer::from_json(json, "", "dir");
    FAIL() << "no error for " << json.substr(0, 80);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(TokenizerTest, MalformedFilesGiveClearErrors) {
  expect_error("{not json", "not valid JSON");
  expect_error("[]", "expected a JSON object");
  expect_error(R"({"added_tokens": []})", "missing field 'model'");
  expect_error(R"({"model": {"type": "WordPiece", "vocab": {}}})", "'WordPiece' is not supported");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
               "not in the vocab");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})",
               "used twice");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "vocab id");
  expect_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": [1]}})", "merge 0");
  expect_error(
      R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"},
                   "model": {"type": "BPE", "vocab": {}, "merges": []}})",
      "regex does not compile");
  expect_error(
      R"({"normalizer": {"type": "Precompiled"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
      "normalizer type 'Precompiled'");
  expect_error(
      R"({"added_tokens": [{"id": -1, "content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}})",
      "'id' must be");
}

TEST(TokenizerTest, DecodersThatRewriteAcrossJoinedTokensAreRefused) {
  // After Fuse or ByteLevel the tokens are one text: a step that rewrites more than one character
  // of it could change text a stream has already emitted ("a" streamed, then "ab" -> "X").
  const auto with_decoder = [](const std::string& decoders) {
    return R"({"decoder": {"type": "Sequence", "decoders": [)" + decoders +
           R"(]}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
  };
  const std::string fuse = R"({"type": "Fuse"}, )";
  expect_error(
      with_decoder(fuse + R"({"type": "Replace", "pattern": {"String": "ab"}, "content": "X"})"),
      "a Replace of more than one character after a Fuse or ByteLevel");
  expect_error(with_decoder(fuse + R"({"type": "ByteFallback"})"), "a ByteFallback after");
  expect_error(with_decoder(R"({"type": "ByteLevel"}, {"type": "ByteLevel"})"),
               "a ByteLevel after");
  // Hugging Face's Strip content and Metaspace replacement are one character (a Rust char).
  expect_error(with_decoder(R"({"type": "Strip", "content": "ab", "start": 1, "stop": 0})"),
               "'content' must be one character");
  expect_error(
      with_decoder(R"({"type": "Metaspace", "replacement": "", "add_prefix_space": true})"),
      "'replacement' must be one character");
  // One character at a time stays streamable; so does any Replace before the join.
  const Tokenizer t = Tokenizer::from_json(
      with_decoder(R"({"type": "Replace", "pattern": {"String": "ab"}, "content": "X"}, )" + fuse +
                   R"({"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                      {"type": "Strip", "content": "▁", "start": 1, "stop": 0})"),
      "", "dir");
  EXPECT_EQ(t.decode(Ids{0, 1}, false), "ab");
}

// Sequences nested `levels` deep around one `leaf` stage, under `key` ("normalizer", ...).
std::string nested_sequence(const char* key, const char* list, const char* leaf, int levels) {
  std::string s = std::string("{\"") + key + "\": ";
  for (int i = 0; i < levels; ++i) s += std::string("{\"type\": \"Sequence\", \"") + list + "\": [";
  s += leaf;
  for (int i = 0; i < levels; ++i) s += "]}";
  return s + R"(, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
}

TEST(TokenizerTest, DeeplyNestedSequencesAreOneErrorNotAStackOverflow) {
  // 200K levels: building the stages (one call per level) and copying the value overflowed the
  // stack. The file's depth limit refuses them before either happens.
  expect_error(nested_sequence("normalizer", "normalizers", R"({"type": "NFC"})", 200'000),
               "dir/tokenizer.json: the file is not valid JSON: arrays and objects nest deeper");
  expect_error(
      nested_sequence("pre_tokenizer", "pretokenizers", R"({"type": "Whitespace"})", 200'000),
      "nest deeper than 128 levels");
  expect_error(nested_sequence("decoder", "decoders", R"({"type": "Fuse"})", 200'000),
               "nest deeper than 128 levels");
  // Sequences of Sequences within the limit still load (each level is two JSON levels).
  const Tokenizer t = Tokenizer::from_json(
      nested_sequence("normalizer", "normalizers", R"({"type": "Lowercase"})", 60), "", "dir");
  EXPECT_EQ(t.encode("A", false), (Ids{0}));
}

TEST(TokenizerTest, LoadNamesTheMissingFile) {
  try {
    (void)Tokenizer::load("/nonexistent-dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata::tokenizer
