#!/usr/bin/env bash
# End-to-end checks of `strata tokenize`, `strata detokenize` and `strata generate --prompt`:
# ids equal to the Hugging Face fixtures on the real tokenizer files (when install_deps.sh has
# fetched them), a directory with only tokenizer files is enough, generate gains `text`, and bad
# input gives one line on stderr and a non-zero exit.
# Usage: tokenize_cli_test.sh STRATA_BINARY TEST_DATA_DIR
set -uo pipefail
strata=$1
data=$2
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/../tools/cli_testing.sh"

# A character-level tokenizer whose ids fit the test models' 160-entry vocabulary.
python3 - "$tmp/tok" <<'PY'
import json, os, sys
os.makedirs(sys.argv[1])
vocab = {chr(c): c - 32 for c in range(32, 127)}
vocab.update({"he": 95, "ll": 96, "hell": 97, "hello": 98, "<s>": 99})
tok = {"added_tokens": [{"id": 99, "content": "<s>", "special": True, "normalized": False,
                         "lstrip": False, "rstrip": False, "single_word": False}],
       "normalizer": None, "pre_tokenizer": None,
       "post_processor": {"type": "TemplateProcessing",
                          "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                     {"Sequence": {"id": "A", "type_id": 0}}],
                          "special_tokens": {"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}}},
       "decoder": {"type": "Fuse"},
       "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", "l l", "he ll", "hell o"]}}
json.dump(tok, open(os.path.join(sys.argv[1], "tokenizer.json"), "w"))
PY

# 1. tokenize / detokenize with a directory holding only tokenizer.json
[[ $("$strata" tokenize --model "$tmp/tok" "hello hi") == "98,0,72,73" ]] && ok || fail "tokenize"
[[ $("$strata" tokenize --model "$tmp/tok" --add-special-tokens "hello") == "99,98" ]] && ok \
  || fail "tokenize --add-special-tokens"
[[ $(printf 'hello' | "$strata" tokenize --model "$tmp/tok") == "98" ]] && ok || fail "stdin"
"$strata" tokenize --model "$tmp/tok" --json "hello" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["ids"]==[98] and d["tokens"]==["hello"]' \
  && ok || fail "tokenize --json"
[[ $("$strata" detokenize --model "$tmp/tok" 99,98,0,72) == "<s>hello h" ]] && ok || fail "detokenize"
[[ $("$strata" detokenize --model "$tmp/tok" --skip-special-tokens 99,98) == "hello" ]] && ok \
  || fail "detokenize --skip-special-tokens"

# 2. generate --prompt: the prompt is encoded with the model's tokenizer, the output gains text
model=$data/models/llama3-gqa
mkdir "$tmp/m" && cp "$model/config.json" "$tmp/m/" && cp "$tmp/tok/tokenizer.json" "$tmp/m/"
"$strata" generate --model "$tmp/m" --load-format dummy --prompt "hello" --max-tokens 3 \
  --temperature 0 --json |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["prompt_ids"]==[99,98], d; assert isinstance(d["text"], str)' \
  && ok || fail "generate --prompt"

# 3. real tokenizer files: ids equal to Hugging Face's for a fixture text
for name in qwen3 llama3_1 deepseek_v3 llama2; do
  dir=$data/tokenizers/$name
  [[ -f $dir/tokenizer.json ]] || { echo "skip $name: $dir absent (run scripts/install_deps.sh)"; continue; }
  read -r text_b64 ids < <(python3 - "$data/tokenizer_fixtures" "$name" <<'PY'
import base64, json, sys
texts = json.load(open(f"{sys.argv[1]}/texts.json"))
cases = json.load(open(f"{sys.argv[1]}/{sys.argv[2]}.json"))["cases"]
i = next(k for k, t in enumerate(texts) if "<|im_start|>" in t and "\n" in t)
print(base64.b64encode(texts[i].encode()).decode(), ",".join(map(str, cases[i]["ids"])))
PY
)
  got=$(printf '%s' "$text_b64" | base64 -d | "$strata" tokenize --model "$dir")
  [[ $got == "$ids" ]] && ok || fail "$name: tokenize gave $got, Hugging Face $ids"
done

# 4. bad input: one line on stderr, non-zero exit, never a crash
expect_error missing-dir "tokenizer.json" tokenize --model "$tmp/nope" hi
expect_error bad-id "token id 5000" detokenize --model "$tmp/tok" 1,5000
expect_error negative-id "token id -1" detokenize --model "$tmp/tok" 1,-1
mkdir "$tmp/bad" && echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' \
  >"$tmp/bad/tokenizer.json"
expect_error malformed "not in the vocab" tokenize --model "$tmp/bad" hi
printf '{"model": ' >"$tmp/bad/tokenizer.json"
expect_error truncated "not valid JSON" tokenize --model "$tmp/bad" hi
expect_error prompt-and-ids "excludes" generate --model "$tmp/m" --prompt hi --prompt-ids 1
expect_error no-prompt "prompt TEXT" generate --model "$tmp/m" --load-format dummy

finish tokenize_cli_test
