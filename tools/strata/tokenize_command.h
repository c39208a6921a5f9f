#pragma once
// `strata tokenize` and `strata detokenize`: text to ids and back with a model directory's
// tokenizer.json (a directory holding only the tokenizer files is enough).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace strata::cli {

struct TokenizeOptions {
  std::string model_dir;
  std::optional<std::string> text;  // absent: read stdin
  bool add_special_tokens = false;
  bool json = false;
};

struct DetokenizeOptions {
  std::string model_dir;
  std::vector<std::string> ids;  // each one or more comma-separated ids (parse_token_id_list)
  bool skip_special_tokens = false;
};

void add_tokenize_command(CLI::App& app, TokenizeOptions& options);
void add_detokenize_command(CLI::App& app, DetokenizeOptions& options);
// Return the process exit code; throw strata::Error for bad files or ids.
int run_tokenize(const TokenizeOptions& options);
int run_detokenize(const DetokenizeOptions& options);

}  // namespace strata::cli
