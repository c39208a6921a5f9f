#!/usr/bin/env bash
# Disaggregation through CUDA IPC on one GPU, end to end (docs/kv.md, "One machine"): three
# `strata serve --device cuda` processes on the bundled model -- a prefill instance with a CUDA
# IPC region (--kv-peer-region-bytes), a decode instance that copies the blocks out of it
# (--kv-peer-region), and a colocated one -- then greedy completions of long prompts (token ids,
# 20-60 blocks) sent to the decode instance must give the colocated instance's tokens (the GPU
# rule: bf16 is not bitwise batch-invariant, so a differing token is reported with both
# top-logprob gaps and fails only where the colocated gap is clear, > 0.05), and every block the
# decode instance read must have come out of the region (strata:kv_peer_region_read_blocks_total
# == kv_peer_read_blocks_total > 0, no fault). Then the prefill instance is killed and the next
# answers must still be right (recomputed). Run on the GPU machine from the repository root:
#
#   tools/gpu/gpu_disaggregation_check.sh BIN_DIR [MODEL_DIR]     (BIN_DIR: .devcarry/gpu/bin)
#
# gpu_check.sh runs it as the step disagg_ipc. Exit 0 when it passed, 1 when not, 77 without a GPU.
set -uo pipefail
bin=$1
model=${2:-models/strata-tiny}
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# serve NAME ARGS...: its URL in url_NAME, pid in pid_NAME.
serve() {
  local name=$1 port=""
  shift
  "$bin/strata" serve --model "$model" --device cuda --port 0 \
    --kv-cache-memory-bytes $((1 << 30)) --kv-offload-bytes $((256 << 20)) "$@" \
    >"$tmp/$name.log" 2>&1 &
  pids+=("$!")
  printf -v "pid_$name" '%s' "$!"
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/$name.log")
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || { echo "FAIL: $name did not start: $(tail -5 "$tmp/$name.log")"; exit 1; }
  printf -v "url_$name" '%s' "http://127.0.0.1:$port"
}

serve prefill --role prefill --kv-peer-listen 127.0.0.1:0 --kv-peer-region-bytes $((256 << 20))
peer=$(sed -n 's|.*KV blocks for decode instances on \([^ ]*\) .*|\1|p' "$tmp/prefill.log")
serve decode --role decode --kv-peer "$peer" --prefill-url "$url_prefill" --kv-peer-region \
  --prefill-timeout 10 --kv-peer-timeout-ms 2000
serve colocated

compare() {  # compare SEED: greedy completions, decode against colocated
  python3 - "$url_decode" "$url_colocated" "$1" <<'PY'
import json, random, sys, urllib.request
decode, colocated, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
model = json.load(urllib.request.urlopen(decode + "/v1/models"))["data"][0]["id"]
rng = random.Random(seed)
bad = 0
for n in (333, 517, 961):
    prompt = [rng.randrange(100, 2000) for _ in range(n)]
    body = {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 2}
    d, c = post(decode, body), post(colocated, body)
    dt, ct = d["choices"][0]["logprobs"]["tokens"], c["choices"][0]["logprobs"]["tokens"]
    if dt == ct:
        print(f"prompt of {n} tokens: the same {len(ct)} tokens")
        continue
    i = next(k for k in range(min(len(dt), len(ct))) if dt[k] != ct[k])
    top = c["choices"][0]["logprobs"]["top_logprobs"][i]
    gap = sorted(top.values(), reverse=True)
    gap = gap[0] - gap[1] if len(gap) > 1 else float("inf")
    print(f"prompt of {n} tokens: token {i} differs ({dt[i]!r} vs {ct[i]!r}), colocated top-2 gap {gap:.4f}")
    bad += gap > 0.05
sys.exit(1 if bad else 0)
PY
}
metric() { curl -s "$1/metrics" | sed -n "s/^$2 //p"; }

fails=0
compare 1 || { echo "FAIL: the decode instance's tokens differ"; fails=1; }
read=$(metric "$url_decode" strata:kv_peer_read_blocks_total)
region=$(metric "$url_decode" strata:kv_peer_region_read_blocks_total)
faults=$(metric "$url_decode" strata:kv_peer_faults_total)
reused=$(metric "$url_decode" strata:kv_peer_region_reused_total)
echo "blocks read: $read, out of the CUDA IPC region: $region, faults: $faults, reused: $reused"
[[ -n "$read" && "$read" != 0 && "$region" == "$read" && "$faults" == 0 ]] ||
  { echo "FAIL: not every block came out of the region"; fails=1; }
grep -i "cuda\|region" "$tmp/decode.log" | grep -iv "^strata: serving" | tail -3

kill -KILL "$pid_prefill"
compare 2 || { echo "FAIL: with the prefill instance gone the answers differ"; fails=1; }
[[ $fails == 0 ]] && echo "PASS: disaggregation through CUDA IPC" || exit 1
