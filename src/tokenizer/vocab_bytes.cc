#include "tokenizer/vocab_bytes.h"

namespace strata::tokenizer {

std::vector<std::string> vocab_bytes(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (size_t id = 0; id < bytes.size(); ++id) {
    bytes[id] = tokenizer.token_bytes(static_cast<int32_t>(id));
  }
  return bytes;
}

}  // namespace strata::tokenizer
