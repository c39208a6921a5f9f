#include "tokenize_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "core/error.h"
#include "token_id_list.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {

void add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of TEXT (or of stdin)");
  cmd->add_option("--model", o.model_dir, "Directory with tokenizer.json")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  cmd->add_flag("--add-special-tokens", o.add_special_tokens,
                "Add the BOS/EOS tokens the model expects (post-processor, add_bos_token)");
  cmd->add_flag("--json", o.json, "Print {\"ids\": [...], \"tokens\": [...]} as JSON");
  cmd->add_option("text", o.text, "Text to tokenize; stdin when absent");
}

void add_detokenize_command(CLI::App& app, DetokenizeOptions& o) {
  CLI::App* cmd = app.add_subcommand("detokenize", "Print the text of comma-separated token IDS");
  cmd->add_option("--model", o.model_dir, "Directory with tokenizer.json")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  cmd->add_flag("--skip-special-tokens", o.skip_special_tokens, "Leave out special tokens");
  cmd->add_option("ids", o.ids, "Token ids, comma- or space-separated")->required();
}

int run_tokenize(const TokenizeOptions& o) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o.model_dir);
  std::string text;
  if (o.text) {
    text = *o.text;
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const std::vector<int32_t> ids = tok.encode(text, o.add_special_tokens);
  if (o.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (const int32_t id : ids) tokens.push_back(tok.id_to_token(id).value_or(""));
    const nlohmann::json out = {{"ids", ids}, {"tokens", tokens}, {"num_tokens", ids.size()}};
    // Byte-level tokens are valid UTF-8, so strict dumping cannot fail; replace just in case.
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_detokenize(const DetokenizeOptions& o) {
  std::vector<int32_t> ids;
  for (const std::string& list : o.ids) {
    const std::vector<int32_t> some = parse_token_id_list(list, "ids");
    ids.insert(ids.end(), some.begin(), some.end());
  }
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o.model_dir);
  for (const int32_t id : ids) {
    if (id >= tok.vocab_size() || !tok.id_to_token(id)) {
      throw Error("token id " + std::to_string(id) + " is not in the tokenizer (ids 0.." +
                  std::to_string(tok.vocab_size() - 1) + ")");
    }
  }
  const std::string text = tok.decode(ids, o.skip_special_tokens);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace strata::cli
