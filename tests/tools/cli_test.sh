#!/usr/bin/env bash
# End-to-end checks of the strata CLI: right tokens out, the JSON shape (logprobs, echo), dummy
# weights, and every kind of bad input giving exactly one line on stderr and a non-zero exit.
# Usage: cli_test.sh STRATA_BINARY TEST_DATA_DIR
set -uo pipefail
strata=$1
data=$2
model=$data/models/llama3-gqa
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/cli_testing.sh"

# A prompt and its transformers greedy continuation, read from the fixture.
read -r prompt greedy < <(python3 - "$model/reference.safetensors" <<'PY'
import array, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
def ints(name):
    b, e = header[name]["data_offsets"]
    a = array.array("i"); a.frombytes(raw[8 + n + b:8 + n + e]); return a.tolist()
print(",".join(map(str, ints("prompt.0"))), ",".join(map(str, ints("greedy.0")[:12])))
PY
)

# 1. greedy tokens equal transformers' (runs 1-4 pin the CPU: `--device auto` would take a GPU)
out=$("$strata" generate --device cpu --model "$model" --prompt-ids "$prompt" --max-tokens 12 --temperature 0 \
      --ignore-eos --json --threads 2) || fail "greedy generate exited non-zero"
got=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["output_ids"])))' <<<"$out")
[[ "$got" == "$greedy" ]] && ok || fail "greedy ids $got != transformers $greedy"

# 2. logprobs + echo: prompt tokens first, the first entry null, K alternatives each
out=$("$strata" generate --device cpu --model "$model" --prompt-ids 5,17,99,3 --max-tokens 3 --temperature 0 \
      --logprobs 2 --echo --json) || fail "echo generate exited non-zero"
python3 - "$out" <<'PY' && ok || fail "logprobs/echo JSON shape"
import json, sys
j = json.loads(sys.argv[1])
lp = j["logprobs"]
assert lp["tokens"][:4] == [5, 17, 99, 3], lp["tokens"]
assert len(lp["tokens"]) == 4 + len(j["output_ids"]) == 7
assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
assert all(len(t) == 2 for t in lp["top_logprobs"][1:])
PY

# 3. same seed, same output; the readable table mentions the finish reason
a=$("$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 8 --seed 7 --ignore-eos --json)
b=$("$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 8 --seed 7 --ignore-eos --json)
ids() { python3 -c 'import json,sys; print(json.load(sys.stdin)["output_ids"])' <<<"$1"; }
[[ "$(ids "$a")" == "$(ids "$b")" ]] && ok || fail "seeded runs differ"
"$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 2 | grep -q "^finish" && ok \
  || fail "table output"

# 4. dummy weights need only config.json
mkdir "$tmp/config_only" && cp "$model/config.json" "$tmp/config_only/"
"$strata" generate --device cpu --model "$tmp/config_only" --load-format dummy --prompt-ids 1,2,3 \
  --max-tokens 4 --json >/dev/null && ok || fail "dummy load format"

# 5. bad input: one line on stderr, non-zero exit, never a crash
copy_model() { rm -rf "$tmp/m"; cp -r "$model" "$tmp/m"; }

expect_error missing-dir "config.json" generate --model "$tmp/nope" --prompt-ids 1
copy_model; echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": ' >"$tmp/m/config.json"
expect_error malformed-config "config.json" generate --model "$tmp/m" --prompt-ids 1
copy_model; sed -i 's/LlamaForCausalLM/GPT2LMHeadModel/' "$tmp/m/config.json"
expect_error unsupported-arch "LlamaForCausalLM" generate --model "$tmp/m" --prompt-ids 1
copy_model; head -c 4000 "$model/model.safetensors" >"$tmp/m/model.safetensors"
expect_error truncated-weights "safetensors" generate --model "$tmp/m" --prompt-ids 1
copy_model; rm "$tmp/m/model.safetensors"
expect_error no-weights "safetensors" generate --model "$tmp/m" --prompt-ids 1
copy_model; sed -i 's/"intermediate_size": 192/"intermediate_size": 200/' "$tmp/m/config.json"
expect_error shape-mismatch "shape" generate --model "$tmp/m" --prompt-ids 1
copy_model; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' >"$tmp/m/model.safetensors"
expect_error header-overflow "header" generate --model "$tmp/m" --prompt-ids 1
expect_error token-out-of-vocab "vocabulary" generate --model "$model" --prompt-ids 1,160
expect_error bad-block-size "block-size" generate --model "$model" --prompt-ids 1 --block-size 24
expect_error bad-prompt-ids "prompt-ids" generate --model "$model" --prompt-ids 1,x
expect_error too-long "maximum model length" generate --model "$model" --prompt-ids 1 --max-tokens 2000
expect_error bad-top-p "top_p" generate --model "$model" --prompt-ids 1 --top-p 1.5
expect_error no-subcommand "subcommand" 
# mixture of experts: a checkpoint and dummy weights of its config run on the CPU
moe=$data/models/qwen3-moe
"$strata" generate --device cpu --model "$moe" --prompt-ids 1,2,3 --max-tokens 4 --temperature 0 \
  --json >/dev/null && ok || fail "moe generate"
mkdir "$tmp/moe_config_only" && cp "$data/models/mixtral-moe/config.json" "$tmp/moe_config_only/"
"$strata" generate --device cpu --model "$tmp/moe_config_only" --load-format dummy \
  --prompt-ids 1,2,3 --max-tokens 4 --json >/dev/null && ok || fail "moe dummy load format"
# Gemma 3: the fixture generates on the CPU; the multimodal 12B config plans with its window cap
# (dummy weights of its text model are too large here)
gemma=$data/models/gemma3-hybrid
"$strata" generate --device cpu --model "$gemma" --prompt-ids 1,2,3 --max-tokens 4 --temperature 0 \
  --json >/dev/null && ok || fail "gemma3 generate"
"$strata" plan --config "$data/../../bench/models/gemma-3-12b/config.json" --device cpu \
  --kv-cache-memory-bytes 8GiB --max-num-seqs 1 --max-model-len 4096 | grep -q "^window cap     65 blocks" \
  && ok || fail "gemma3 plan window cap"
# DeepSeek (MLA): the fixtures generate on the CPU; DeepSeek-V2-Lite's config plans its latent
# cache (8.89x fewer bytes per token than expanded K/V); --device cuda refuses the fixtures' MLA
# shape (a latent of 48, the GPU kernels take 576) in one line
for ds in deepseek-v2-mla deepseek-v3-mla; do
  "$strata" generate --device cpu --model "$data/models/$ds" --prompt-ids 1,2,3 --max-tokens 4 \
    --temperature 0 --json >/dev/null && ok || fail "$ds generate"
done
"$strata" plan --config "$data/../../bench/models/deepseek-v2-lite/config.json" --device cpu \
  --kv-cache-dtype bfloat16 --kv-cache-memory-bytes 8GiB --max-num-seqs 1 \
  | grep -q "^naive MHA      276480 bytes/token at 16 bits: 8.89x more" && ok || fail "deepseek plan"
# --device cuda plans V2-Lite's latent (a shape the GPU MLA kernels take) byte for byte as the CPU
out=$("$strata" plan --config "$data/../../bench/models/deepseek-v2-lite/config.json" --device cuda \
  --kv-cache-memory-bytes 8GiB --max-num-seqs 1) || fail "deepseek cuda plan exited non-zero"
grep -q "^kv bytes/token 31104 (1152 per layer" <<<"$out" && ! grep -q "only the CPU engine" <<<"$out" \
  && ok || fail "deepseek cuda plan"
expect_error mla-on-cuda "cuda: DeepseekV3ForCausalLM .Multi-head Latent Attention.: the GPU MLA kernels take kv_lora_rank 512" \
  generate --model "$data/models/deepseek-v3-mla" --prompt-ids 1 --device cuda
# structured outputs: strata-tiny (it has a tokenizer) answers one of the choices; a model without
# tokenizer.json and a malformed flag are one line each
tiny="$data/../../models/strata-tiny"
out=$("$strata" generate --device cpu --model "$tiny" --prompt "Pick one:" --max-tokens 20 \
      --structured-output 'choice=red|green|blue' --json) || fail "structured generate exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["text"] in ("red","green","blue"), j["text"]; assert j["finish_reason"]=="stop", j' \
  <<<"$out" && ok || fail "structured generate JSON"
expect_error structured-no-tokenizer "tokenizer" generate --model "$model" --prompt-ids 1 \
  --structured-output json_object
expect_error structured-bad-flag "structured-output" generate --model "$tiny" --prompt-ids 1 \
  --structured-output xml
expect_error structured-bad-regex "offset" generate --model "$tiny" --prompt-ids 1 \
  --structured-output 'regex=(a'
# an EBNF grammar (GBNF): the to-do list of docs/benchmarks.md, regular and bounded, so it ends
out=$("$strata" generate --device cpu --model "$tiny" --prompt "Today:" --max-tokens 1500 \
      --temperature 1 --seed 7 --structured-output "grammar=@$data/grammar/gbnf/list.gbnf" --json) ||
  fail "grammar generate exited non-zero"
python3 -c 'import json,re,sys; j=json.load(sys.stdin); assert j["finish_reason"]=="stop", j
item = r"- \[[ x]\] [A-Za-z0-9][A-Za-z0-9 ,.\x27/-]{0,79} \((high|medium|low)(, due 2[0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))?\)\n"
assert re.fullmatch(r"# [A-Z][A-Za-z0-9 ,\x27-]{0,59}\n\n(" + item + "){1,10}", j["text"]), j["text"]' \
  <<<"$out" && ok || fail "grammar generate JSON"
printf 'root ::= "a\n' >"$tmp/bad.gbnf"
expect_error structured-bad-grammar "line 1, column 10" generate --model "$tiny" --prompt-ids 1 \
  --structured-output "grammar=@$tmp/bad.gbnf"

# 6. quantized KV (docs/kv-quant.md): every spelling parses; int8 and fp8 with computed scales
# run and report their dtype; fp8 without scales is refused unless allowed; bad values are one line
for d in auto float32 fp32 bfloat16 bf16 float16 fp16 fp8 fp8_e4m3 fp8_e5m2 int8 int4; do
  "$strata" plan --model "$model" --kv-cache-dtype "$d" --json >/dev/null && ok || fail "plan $d"
done
# plan --device: int4's residual pool holds bfloat16 blocks on cuda (the default), float32 on cpu
out=$("$strata" plan --model "$model" --kv-cache-dtype int4 --json) || fail "plan int4 exited non-zero"
out_cpu=$("$strata" plan --model "$model" --kv-cache-dtype int4 --device cpu --json) \
  || fail "plan int4 --device cpu exited non-zero"
python3 - "$out" "$out_cpu" <<'PY' && ok || fail "plan --device JSON"
import json, sys
cuda, cpu = (json.loads(a) for a in sys.argv[1:3])
assert cuda["device"] == "cuda" and cuda["int4_residual_pool_dtype"] == "bfloat16", cuda
assert cpu["device"] == "cpu" and cpu["int4_residual_pool_dtype"] == "float32", cpu
assert cuda["int4_residual_pool_blocks"] == cpu["int4_residual_pool_blocks"] > 0, (cuda, cpu)
assert 2 * cuda["int4_residual_pool_bytes"] == cpu["int4_residual_pool_bytes"], (cuda, cpu)
PY
expect_error plan-bad-device "device" plan --model "$model" --device tpu
out=$("$strata" generate --device cpu --model "$model" --prompt-ids "$prompt" --max-tokens 4 --temperature 0 \
      --ignore-eos --json --kv-cache-dtype int8) || fail "int8 generate exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int8", j; assert len(j["output_ids"])==4' \
  <<<"$out" && ok || fail "int8 generate JSON"
"$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 2 --kv-cache-dtype fp8 \
  --calculate-kv-scales --json >/dev/null && ok || fail "fp8 with --calculate-kv-scales"
"$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 2 --kv-cache-dtype fp8_e5m2 \
  --allow-unit-kv-scales --json >/dev/null && ok || fail "fp8_e5m2 with --allow-unit-kv-scales"
expect_error fp8-without-scales "calculate-kv-scales" generate --model "$model" --prompt-ids 1 \
  --kv-cache-dtype fp8
expect_error bad-kv-dtype "kv-cache-dtype 'fp4' is not supported" generate --model "$model" \
  --prompt-ids 1 --kv-cache-dtype fp4
# int4 (KIVI) runs on the CPU with its residual pool; a residual that is not a multiple of the
# block size and the flag without int4 are one line each
out=$("$strata" generate --device cpu --model "$model" --prompt-ids "$prompt" --max-tokens 4 --temperature 0 \
      --ignore-eos --json --kv-cache-dtype int4 --kv-int4-residual 32) \
  || fail "int4 generate exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int4", j; assert len(j["output_ids"])==4; g=j["kv_groups"]; assert len(g)==2 and g[1]["kind"]=="newest blocks" and g[1]["newest_blocks"]==2 and g[1]["num_blocks"] > 1 and g[1]["bytes"] > 0, j' \
  <<<"$out" && ok || fail "int4 generate JSON"
out=$("$strata" eval kv-quant --kv-cache-dtype int4 --num-windows 1 --window-len 48 \
      --needle-trials 2 --needle-contexts 256 --needle-depths 0.5 --threads 2 --json \
      --kv-quant-check) || fail "eval kv-quant int4 exited non-zero"
python3 - "$out" <<'PY' && ok || fail "eval kv-quant int4 JSON"
import json, sys
j = json.loads(sys.argv[1])
r = j["results"][0]
assert r["kv_cache_dtype"].startswith("int4") and r["positions"] == 48 and 0 < r["mean_kl"] < 1, r
PY
expect_error int4-bad-residual "--kv-int4-residual 5 must be a positive multiple of the block size \(16\)" \
  generate --model "$model" --prompt-ids 1 --kv-cache-dtype int4 --kv-int4-residual 5
expect_error int4-residual-without-int4 "applies to --kv-cache-dtype int4 only" \
  bench --model "$model" --kv-cache-dtype int8 --kv-int4-residual 16
expect_error plan-bad-kv-dtype "kv-cache-dtype 'int2' is not supported" plan --model "$model" \
  --kv-cache-dtype int2
expect_error bench-bad-kv-dtype "kv-cache-dtype 'e4m3' is not supported" bench --model "$model" \
  --kv-cache-dtype e4m3
out=$("$strata" eval kv-quant --kv-cache-dtype int8,fp8 --num-windows 1 --window-len 48 \
      --needle-trials 2 --needle-contexts 256 --needle-depths 0.5 --threads 2 --json) \
  || fail "eval kv-quant exited non-zero"
python3 - "$out" <<'PY' && ok || fail "eval kv-quant JSON"
import json, sys
j = json.loads(sys.argv[1])
assert j["needle_prompts"] == 2 and [r["kv_cache_dtype"] for r in j["results"]] == ["int8", "fp8"]
for r in j["results"]:
    assert r["positions"] == 48 and 0 < r["mean_kl"] < 1 and 0 <= r["top1_agreement"] <= 1, r
    assert r["kv_bytes_per_token"] < j["reference"]["kv_bytes_per_token"] / 3, r
assert j["results"][1]["fp8_scales"].startswith("calculated"), j
PY
expect_error eval-kv-quant-bad-dtype "kv-cache-dtype 'int3' is not supported" eval kv-quant \
  --kv-cache-dtype int8,int3
# Token eviction's eval: H2O's windows are teacher-forced and compacted (fewer blocks than the
# same evictions would hold without compaction); SnapKV evicts after the prompt, so it has no
# whole-window measure (its continuation measure: below); progress goes to stderr, a line per
# stage.
out=$("$strata" eval kv-eviction --policies h2o,snapkv --budgets 0.25 --num-windows 1 \
      --window-len 400 --needle-trials 1 --needle-contexts 512 --needle-depths 0.5 --threads 2 \
      --json 2>"$tmp/kv_eviction.err") || fail "eval kv-eviction exited non-zero"
python3 - "$out" "$tmp/kv_eviction.err" <<'PY' && ok || fail "eval kv-eviction JSON"
import json, sys
j = json.loads(sys.argv[1])
h2o, snap = j["results"]
assert h2o["policy"] == "h2o" and snap["policy"] == "snapkv", j
assert h2o["selection"] is None and snap["selection"] == "per_head", j
assert h2o["positions"] == 400 and 0 < h2o["mean_kl"] < 1, h2o
assert h2o["mean_max_held_blocks"] <= 8 < h2o["mean_max_blocks_without_compaction"], h2o
assert snap["mean_kl"] is None and snap["mean_max_held_blocks"] is None, snap
assert 0 <= snap["needle_accuracy"] <= 1 and j["needle_prompts"] == 1, j
err = open(sys.argv[2]).read()
assert "kv-eviction: 3/3 snapkv/per_head at 25.0 % done" in err, err
PY
# The continuation measure: each 400-token window a 300-token prompt and 100 teacher-forced
# tokens; SnapKV selects once after the prompt. A budget of the whole prompt evicts nothing (KL
# exactly 0, top-1 100 %); a quarter of it does, and the continuation reads what stayed.
out=$("$strata" eval kv-eviction --policies snapkv,h2o --snapkv-selections per_head,shared \
      --budgets 1,0.25 --num-windows 1 --window-len 400 --continuation-len 100 \
      --continuation-only --needle-trials 0 --threads 2 --json 2>/dev/null) ||
  fail "eval kv-eviction --continuation-len exited non-zero"
python3 - "$out" <<'PY' && ok || fail "eval kv-eviction continuation JSON"
import json, sys
j = json.loads(sys.argv[1])
rows = {(r["policy"], r["selection"], r["budget_share"]): r for r in j["results"]}
assert len(rows) == 6, j
for (policy, selection, share), r in rows.items():
    c = r["continuation"]
    assert r["mean_kl"] is None, r  # --continuation-only
    assert c["prompt_tokens"] == 300 and c["positions"] == 100, c
    assert c["budget_tokens"] == (300 if share == 1 else 75), c
    if policy == "snapkv" and share == 1:
        assert c["mean_kl"] == 0 and c["top1_agreement"] == 1, c
    else:
        assert c["mean_kl"] > 0, (policy, selection, share, c)
    if policy == "snapkv" and share == 0.25:
        assert c["mean_max_held_blocks"] < 300 / 16, c  # it evicted before the continuation
PY
# SnapKV per (layer, KV head) and with one selection for all, paired in one run.
out=$("$strata" eval kv-eviction --policies snapkv --snapkv-selections per_head,shared \
      --budgets 0.25 --num-windows 1 --window-len 400 --needle-trials 1 --needle-contexts 512 \
      --needle-depths 0.5 --kv-pooling avg --kv-pool-kernel 5 --threads 2 --json 2>/dev/null) ||
  fail "eval kv-eviction --snapkv-selections exited non-zero"
python3 - "$out" <<'PY' && ok || fail "eval kv-eviction selections JSON"
import json, sys
j = json.loads(sys.argv[1])
assert [r["selection"] for r in j["results"]] == ["per_head", "shared"], j
PY
expect_error eval-kv-eviction-bad-selection "'per_layer' is not per_head or shared" \
  eval kv-eviction --policies snapkv --snapkv-selections per_layer
expect_error eval-kv-eviction-bad-policy "'quest' is not streaming_llm, paged_eviction, h2o or snapkv" \
  eval kv-eviction --policies h2o,quest
expect_error eval-bad-kv-dtype "kv-cache-dtype 'fp8e4m3' is not supported" eval needle \
  --model "$model" --kv-cache-dtype fp8e4m3


# 7. per-layer exceptions (docs/kv-quant.md): a skipped layer stays float32 and the bytes per token
# count it exactly (2 layers x 2 KV heads x 16: int8 72 bytes per layer with scales, float32 256),
# in generate and in plan; --kv-quant-check prints its table; bad lists are one line everywhere
out=$("$strata" generate --device cpu --model "$model" --prompt-ids "$prompt" --max-tokens 4 --temperature 0 \
      --ignore-eos --json --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 0) \
  || fail "int8 skip-layers generate exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int8 (layers 0 float32)", j; assert j["kv_bytes_per_token"]==328, j' \
  <<<"$out" && ok || fail "int8 skip-layers generate JSON"
out=$("$strata" generate --device cpu --model "$data/models/mistral-swa" --prompt-ids 1,2,3 --max-tokens 2 --json \
      --kv-cache-dtype int8 --kv-cache-dtype-skip-layers sliding_window) \
  || fail "sliding_window skip-layers generate exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int8 (layers 0,1 float32)", j' \
  <<<"$out" && ok || fail "sliding_window skip-layers: every windowed layer float32"
# The skipped layer holds the engine's precision on the device planned for, not the checkpoint's
# (float32 here): bfloat16 on cuda (2 x 2 x 16 x 2 + int8's 72 = 200), float32 on cpu (328).
out=$("$strata" plan --model "$model" --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 1 --json) \
  || fail "plan skip-layers exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_bytes_per_token"]==200 and j["kv_cache_dtype_skip_layers"]==[1], j' \
  <<<"$out" && ok || fail "plan skip-layers JSON"
out=$("$strata" plan --model "$model" --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 1 --device cpu \
      --json) || fail "plan skip-layers --device cpu exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_bytes_per_token"]==328 and j["kv_cache_dtype_skip_layers_dtype"]=="float32", j' \
  <<<"$out" && ok || fail "plan skip-layers --device cpu JSON"
err=$("$strata" generate --device cpu --model "$model" --prompt-ids 1,2,3 --max-tokens 2 --kv-cache-dtype fp8 \
      --calculate-kv-scales --kv-quant-check --kv-quant-check-threshold 0 2>&1 >/dev/null) \
  || fail "kv-quant-check generate exited non-zero"
grep -q "kv-quant-check keeps layers 0,1 at float32" <<<"$err" && [[ $(grep -c '^  [01] ' <<<"$err") -eq 2 ]] \
  && ok || fail "kv-quant-check table: $err"
expect_error skip-garbage "skip-layers 'abc': 'abc' is not a layer index" generate --model "$model" \
  --prompt-ids 1 --kv-cache-dtype int8 --kv-cache-dtype-skip-layers abc
expect_error skip-duplicate "layer 0 is named twice" generate --model "$model" --prompt-ids 1 \
  --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 0,0
expect_error skip-out-of-range "layer 2 is out of range \(the model has 2 layers" generate \
  --model "$model" --prompt-ids 1 --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 2
expect_error plan-skip-out-of-range "layer 7 is out of range" plan --model "$model" \
  --kv-cache-dtype int8 --kv-cache-dtype-skip-layers sliding_window,7
expect_error bench-skip-out-of-range "layer 9 is out of range" bench --model "$model" \
  --kv-cache-dtype int8 --kv-cache-dtype-skip-layers 9
expect_error serve-skip-garbage "'-1' is not a layer index" serve --model "$model" \
  --kv-cache-dtype int8 --kv-cache-dtype-skip-layers=-1
expect_error needle-skip-empty "empty item" eval needle --model "$model" --kv-cache-dtype int8 \
  --kv-cache-dtype-skip-layers 0,
expect_error kv-quant-skip-duplicate "sliding_window is named twice" eval kv-quant \
  --kv-cache-dtype int8 --kv-cache-dtype-skip-layers sliding_window,sliding_window
expect_error bad-threshold "kv-quant-check-threshold" generate --model "$model" --prompt-ids 1 \
  --kv-cache-dtype int8 --kv-quant-check --kv-quant-check-threshold -1
# Disaggregation's flags: a role without its host tier, its peer or its prefill instance.
expect_error role-no-host-tier "--role prefill and decode move blocks through the host tier" \
  serve --model "$model" --port 0 --role prefill
expect_error decode-no-prefill-url "--role decode needs --prefill-url" serve --model "$model" \
  --port 0 --role decode --kv-offload-bytes 1048576 --kv-peer 127.0.0.1:1
expect_error decode-no-peer "--role decode needs --kv-peer" serve --model "$model" --port 0 \
  --role decode --kv-offload-bytes 1048576 --prefill-url http://127.0.0.1:1
expect_error prefill-url-not-decode "--prefill-url is for --role decode" serve --model "$model" \
  --port 0 --prefill-url http://127.0.0.1:1
expect_error bench-role "--role is for strata serve" bench --model "$model" --role decode \
  --kv-offload-bytes 1048576 --kv-peer 127.0.0.1:1 --num-prompts 1
expect_error bad-peer-listen "--kv-peer-listen: .*not host:port" serve --model "$model" \
  --port 0 --role prefill --kv-offload-bytes 1048576 --kv-peer-listen nowhere
# KV events' flags and vLLM's --kv-events-config: each mistake one line before the model loads
# (a port ZeroMQ refuses: when the engine opens its sockets).
expect_error kv-events-bad-endpoint "--kv-events-endpoint 'localhost:5557': expected tcp://" \
  serve --model "$model" --port 0 --kv-events-endpoint localhost:5557
expect_error kv-events-replay-alone "need --kv-events-endpoint" serve --model "$model" --port 0 \
  --kv-events-replay-endpoint 'tcp://*:5558'
expect_error kv-events-buffer-steps "kv-events-buffer-steps" serve --model "$model" --port 0 \
  --kv-events-endpoint 'tcp://*:5557' --kv-events-buffer-steps 0
expect_error kv-events-config-json "--kv-events-config is not valid JSON" serve --model "$model" \
  --port 0 --kv-events-config '{"enable_kv_cache_events":'
expect_error kv-events-config-key "unknown key 'bogus'" serve --model "$model" --port 0 \
  --kv-events-config '{"enable_kv_cache_events":true,"bogus":1}'
expect_error kv-events-config-type "buffer_steps must be an integer >= 1" serve --model "$model" \
  --port 0 --kv-events-config '{"enable_kv_cache_events":true,"buffer_steps":0}'
expect_error kv-events-config-publisher "publisher 'kafka' is not supported" serve \
  --model "$model" --port 0 --kv-events-config '{"enable_kv_cache_events":true,"publisher":"kafka"}'
expect_error kv-events-config-and-flags "exclude each other" serve --model "$model" --port 0 \
  --kv-events-config '{"enable_kv_cache_events":true}' --kv-events-endpoint 'tcp://*:5557'
expect_error kv-events-bad-port "KV events endpoint tcp://\*:notaport" serve --model "$model" \
  --port 0 --kv-events-endpoint 'tcp://*:notaport'

# 8. hostile files and arguments (issue 33): nesting a million levels deep, files that are not
# regular files, arrival times no replay can wait for, empty or malformed id lists. Each is one
# line and a non-zero exit, never a crash, an abort or a hang.
deep=1000000
deep_array() { repeat "$deep" '['; printf '0'; repeat "$deep" ']'; }  # [[[...0...]]]
# safetensors_file HEADER OUT: the 8-byte little-endian header length, then the header (no data)
safetensors_file() {
  local n le="" i
  n=$(stat -c %s "$1")
  for ((i = 0; i < 8; ++i)); do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  { printf '%b' "$le"; cat "$1"; } >"$2"
}
copy_model; { printf '{"layer_types": ['; deep_array; printf ', "full_attention"],'
  tail -c +2 "$model/config.json"; } >"$tmp/m/config.json"
expect_error deep-layer-types "config.json.*deeper than" generate --model "$tmp/m" --prompt-ids 1
expect_error plan-deep-layer-types "config.json.*deeper than" plan --model "$tmp/m"
copy_model; { printf '{"w": {"dtype": "F32", "shape": [1], "data_offsets": '; deep_array
  printf '}}'; } >"$tmp/header.json"
safetensors_file "$tmp/header.json" "$tmp/m/model.safetensors"
expect_error deep-data-offsets "safetensors.*deeper than" generate --model "$tmp/m" --prompt-ids 1
copy_model; rm "$tmp/m/model.safetensors"
{ printf '{"weight_map": {"model.norm.weight": '; deep_array; printf '}}'; } \
  >"$tmp/m/model.safetensors.index.json"
expect_error deep-weight-map "index.json.*deeper than" generate --model "$tmp/m" --prompt-ids 1
mkdir -p "$tmp/tok"
{ printf '{"normalizer": '; repeat 200000 '{"type": "Sequence", "normalizers": ['
  printf '{"type": "NFC"}'; repeat 200000 ']}'
  printf ', "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}'; } >"$tmp/tok/tokenizer.json"
expect_error deep-normalizer "tokenizer.json.*deeper than" tokenize --model "$tmp/tok" a
{ printf '{"pre_tokenizer": '; repeat 200000 '{"type": "Sequence", "pretokenizers": ['
  printf '{"type": "Whitespace"}'; repeat 200000 ']}'
  printf ', "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}'; } >"$tmp/tok/tokenizer.json"
expect_error deep-pre-tokenizer "tokenizer.json.*deeper than" tokenize --model "$tmp/tok" a
# not regular files: a directory, a device, a FIFO (opening one for reading would wait for a
# writer), a symlink loop
copy_model; rm "$tmp/m/config.json"; mkdir "$tmp/m/config.json"
expect_error config-directory "config.json.*directory" generate --model "$tmp/m" --prompt-ids 1
expect_error plan-config-directory "config.json.*directory" plan --model "$tmp/m"
copy_model; rm "$tmp/m/config.json"; mkfifo "$tmp/m/config.json"
expect_timeout=20 expect_error plan-config-fifo "config.json.*FIFO" plan --model "$tmp/m"
expect_timeout=20 expect_error config-fifo "config.json.*FIFO" generate --model "$tmp/m" --prompt-ids 1
copy_model; rm "$tmp/m/config.json"; ln -s config.json "$tmp/m/config.json"
expect_error config-loop "config.json.*symbolic links" plan --model "$tmp/m"
expect_error generate-config-loop "config.json.*symbolic links" generate --model "$tmp/m" \
  --prompt-ids 1
copy_model; ln -sf /dev/zero "$tmp/m/model.safetensors"
expect_error plan-dev-zero "model.safetensors.*character device" plan --model "$tmp/m"
expect_error dev-zero "model.safetensors.*character device" generate --model "$tmp/m" --prompt-ids 1
copy_model; rm "$tmp/m/model.safetensors"; mkdir "$tmp/m/model.safetensors"
expect_error plan-weights-directory "model.safetensors.*directory" plan --model "$tmp/m"
copy_model; rm "$tmp/m/model.safetensors"; ln -s model.safetensors "$tmp/m/model.safetensors"
expect_error plan-weights-loop "model.safetensors.*symbolic links" plan --model "$tmp/m"
expect_error weights-loop "model.safetensors.*symbolic links" generate --model "$tmp/m" \
  --prompt-ids 1
mkdir -p "$tmp/tokloop"; ln -s tokenizer.json "$tmp/tokloop/tokenizer.json"
expect_error tokenizer-loop "tokenizer.json.*symbolic links" tokenize --model "$tmp/tokloop" a
# traces (docs/bench.md): an arrival no replay can wait for fails at once; epoch
# milliseconds replay from the first line's time
trace_bench() { "$strata" bench --model "$model" --threads 2 --num-blocks 512 "$@"; }
printf '%s\n' '{"arrival_time": 0, "input_length": 4, "output_length": 1}' \
  '{"arrival_time": 1e308, "input_length": 4, "output_length": 1}' >"$tmp/far.jsonl"
expect_timeout=20 expect_error trace-far-arrival "far.jsonl line 2: arrival_time" bench \
  --model "$model" --num-blocks 512 --trace "$tmp/far.jsonl"
printf '%s\n' '{"arrival_time": 0, "input_length": 4, "output_length": 1}' \
  '{"arrival_time": 691200, "input_length": 4, "output_length": 1}' >"$tmp/long.jsonl"
expect_timeout=20 expect_error trace-longer-than-a-week "long.jsonl line 2: .*week" bench \
  --model "$model" --num-blocks 512 --trace "$tmp/long.jsonl"
printf '%s\n' '{"timestamp": 1767225600000, "input_length": 4, "output_length": 1}' \
  '{"timestamp": 1767225600050, "input_length": 4, "output_length": 1}' >"$tmp/epoch.jsonl"
out=$(timeout -k 5 60 "$strata" bench --model "$model" --threads 2 --num-blocks 512 \
      --trace "$tmp/epoch.jsonl" --json) || fail "epoch-millisecond trace exited non-zero"
python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; assert r["num_requests"]==2 and r["duration_s"] < 30, r' \
  <<<"$out" && ok || fail "epoch-millisecond trace: $out"
# token id lists: one parser for --prompt-ids, --stop-token-ids and detokenize's ids
expect_error empty-prompt-ids "prompt-ids.*empty" generate --model "$model" --prompt-ids ''
expect_error prompt-ids-empty-item "prompt-ids '1,,2'.*empty" generate --model "$model" \
  --prompt-ids 1,,2
expect_error prompt-ids-words "prompt-ids 'abc'" generate --model "$model" --prompt-ids abc
expect_error prompt-ids-negative "prompt-ids '-1'" generate --model "$model" --prompt-ids=-1
expect_error prompt-ids-too-large "prompt-ids '2147483648'" generate --model "$model" \
  --prompt-ids 2147483648
expect_error prompt-ids-wrapped "prompt-ids '4294967301'" generate --model "$model" \
  --prompt-ids 4294967301
expect_error stop-token-ids-empty "stop-token-ids.*empty" generate --model "$model" \
  --prompt-ids 1 --stop-token-ids 1,
expect_error detokenize-empty "ids.*empty" detokenize ''

# strata route: a bad --backend or --policy is one line before anything starts.
expect_error route-no-backend "backend.*required" route
expect_error route-backend-scheme "--backend 'h:1'.*http://" route --backend h:1
expect_error route-backend-port "--backend 'http://h:0'.*HOST:PORT" route --backend http://h:0
expect_error route-backend-key "unknown key 'foo'" route --backend http://h:1,foo=tcp://h:2
expect_error route-backend-events "events must be tcp://" route \
  --backend http://h:1,events=http://h:2
expect_error route-backend-replay "replay needs events" route \
  --backend http://h:1,replay=tcp://h:2
expect_error route-policy "policy.*random" route --backend http://h:1 --policy random

finish cli_test
