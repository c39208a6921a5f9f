#pragma once
// The one parser of token id lists given on the command line (generate --prompt-ids and
// --stop-token-ids, detokenize's ids): "1,2,3", spaces around an item allowed. CLI11's own
// conversion turned '' and '1,,2' into token 0 without a word, and said only "Could not convert"
// for a bad item; this names the flag, the text and the item.

#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::cli {

// The ids of `text`, each in [0, 2^31 - 1]. Throws strata::Error "<flag> '<text>': <why>" for an
// empty list, an empty item, an item that is not a decimal integer, a negative id or one above
// 2^31 - 1 (never wrapped).
std::vector<int32_t> parse_token_id_list(std::string_view text, std::string_view flag);

}  // namespace strata::cli
