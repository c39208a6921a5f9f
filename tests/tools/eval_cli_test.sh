#!/usr/bin/env bash
# `strata eval needle` end to end on strata-tiny: the JSON (every prompt's result), the table, the
# SVG heatmap, same seed -> same prompts, a paired run with another engine setting, strata-tiny as
# every command's default --model, and one-line errors for bad input.
# Usage: eval_cli_test.sh STRATA_BINARY STRATA_TINY_DIR
set -uo pipefail
strata=$1
model=$2
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/cli_testing.sh"
grid=(--contexts 256,512 --depths 0,0.5,1 --trials 1 --threads 2)

# 1. JSON: 2 x 3 prompts, all retrieved, every prompt's result kept; the heatmap is one SVG
"$strata" eval needle --model "$model" "${grid[@]}" --json --plot "$tmp/h.svg" >"$tmp/a.json" \
  || fail "eval needle --json exited non-zero"
python3 - "$tmp/a.json" "$tmp/h.svg" <<'PY' && ok || fail "JSON shape or heatmap"
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
assert j["num_prompts"] == 6 and j["contexts"] == [256, 512] and j["depths"] == [0, 0.5, 1], j
assert j["accuracy"] == 1.0, j["grid"]
assert len(j["grid"]) == 2 and all(len(r) == 3 for r in j["grid"])
for p in j["prompts"]:
    assert p["correct"] and p["output_ids"] == p["answer_ids"] and p["output_text"] == p["key"], p
    assert p["prompt_tokens"] + len(p["answer_ids"]) == p["context"]
svg = ET.parse(sys.argv[2]).getroot()
assert svg.tag.endswith("svg")
assert len([e for e in svg.iter() if e.tag.endswith("rect")]) == 1 + 6
PY

# 2. the table, and the same prompts for the same seed (and other ones for another seed)
"$strata" eval needle --model "$model" "${grid[@]}" | grep -q "^overall 6/6 = 100.0%" && ok \
  || fail "table"
keys() { python3 -c 'import json,sys; print([p["key"] for p in json.load(open(sys.argv[1]))["prompts"]])' "$1"; }
"$strata" eval needle --model "$model" "${grid[@]}" --json --no-enable-prefix-caching --block-size 32 \
  >"$tmp/b.json" || fail "paired run exited non-zero"
python3 - "$tmp/a.json" "$tmp/b.json" <<'PY' && ok || fail "paired run differs"
import json, sys
a, b = (json.load(open(f))["prompts"] for f in sys.argv[1:])
assert [p["key"] for p in a] == [p["key"] for p in b]
assert [p["output_ids"] for p in a] == [p["output_ids"] for p in b]
PY
"$strata" eval needle --model "$model" "${grid[@]}" --json --seed 1 >"$tmp/c.json"
[[ "$(keys "$tmp/a.json")" != "$(keys "$tmp/c.json")" ]] && ok || fail "seed 1 gave seed 0's keys"

# 3. strata-tiny is the default model of every command
out=$("$strata" generate --prompt "And it came to pass" --max-tokens 8 --seed 1 --json) \
  || fail "generate without --model"
python3 -c 'import json,sys; t=json.loads(sys.argv[1])["text"]; assert t.strip(), t' "$out" && ok \
  || fail "generate without --model gave no text"
[[ $("$strata" tokenize "And") == "$("$strata" tokenize --model "$model" "And")" ]] && ok \
  || fail "tokenize default model"
# strata tokenize gives the `tokenizers` library's ids (tools/tiny/make_tiny_fixture.py wrote them)
ids_json=$model/../../tests/data/models/strata-tiny-reference/tokenizer_ids.json
python3 - "$strata" "$ids_json" <<'PY' && ok || fail "strata tokenize differs from tokenizers"
import json, subprocess, sys
for case in json.load(open(sys.argv[2])):
    if not case["text"] or "<|" in case["text"]:
        continue  # an empty argument reads stdin; added tokens are covered by the gtest
    out = subprocess.run([sys.argv[1], "tokenize", case["text"]], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ",".join(map(str, case["ids"])), (case["text"], out, case["ids"])
PY
"$strata" plan | grep -q "strata-tiny/config.json" && ok || fail "plan without --model"
"$strata" eval needle --contexts 256 --depths 1 --trials 1 --threads 2 | grep -q "^overall 1/1" \
  && ok || fail "eval needle without --model"

# 4. bad input: one line on stderr, non-zero exit
expect_error bad-contexts "contexts.*not a number" eval needle --model "$model" --contexts 512,abc
expect_error short-context "too short" eval needle --model "$model" --contexts 20
expect_error long-context "max_position_embeddings" eval needle --model "$model" --contexts 8192
expect_error bad-depth "outside \[0, 1\]" eval needle --model "$model" --depths 0,1.5
expect_error bad-progression "progression" eval needle --model "$model" --depths 0,0.3,...,1
expect_error zero-trials "trials" eval needle --model "$model" --trials 0
expect_error missing-model "tokenizer.json" eval needle --model "$tmp/nope"
mkdir "$tmp/nofiller" && cp "$model"/*.json "$model"/*.safetensors "$tmp/nofiller/"
expect_error no-filler "needle_filler.txt" eval needle --model "$tmp/nofiller"
expect_error no-task "subcommand" eval
expect_error bad-plot "heatmap" eval needle --model "$model" --contexts 256 --depths 0 --trials 1 \
  --plot "$tmp/no/such/dir/h.svg"

finish eval_cli_test
