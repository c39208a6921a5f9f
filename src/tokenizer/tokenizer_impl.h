#pragma once
// The stages a Tokenizer owns (private to src/tokenizer).

#include <cstdint>
#include <optional>
#include <string>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  PostProcessor post_processor;
  Decoder decoder;
  std::optional<int32_t> bos_id, eos_id;
  std::string chat_template;
  int32_t vocab_size = 0;
};

}  // namespace strata::tokenizer
