#pragma once
// Every token's bytes (Tokenizer::token_bytes) in id order: the vocabulary a grammar's token
// masks are walked over (grammar::VocabTrie). O(vocabulary) decoder calls: 65-90 ms for 128-152K
// tokens, so callers build it once per tokenizer.

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {

std::vector<std::string> vocab_bytes(const Tokenizer& tokenizer);

}  // namespace strata::tokenizer
