#!/usr/bin/env bash
# The KV codec on a real model's KV (docs/benchmarks.md, "The KV codec"): `strata serve` with a
# small pool and host tier, so that the blocks of real text's prompts reach its disk tier, then
# strata_kv_codec_bench over those blocks (split and zstd side by side, every block round-tripped).
#
#   tools/bench/bench_kv_codec.sh STRATA CODEC_BENCH MODEL_DIR KV_DTYPE LAYERS [TEXT_FILE] [--json]
#
# TEXT_FILE (default: fortunes-min's literature file) is cut into prompts of 12,000 characters.
# SERVE_ARGS (space-separated) go to `strata serve` too (fp8: --calculate-kv-scales).
set -euo pipefail
strata="$1" bench="$2" model="$3" dtype="$4" layers="$5"
text="${6:-/usr/share/games/fortunes/literature}"
shift $(($# < 6 ? $# : 6))
tmp="$(mktemp -d)"
pid=""
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$strata" serve --model "$model" --port "$port" --kv-cache-dtype "$dtype" \
  --kv-cache-memory-bytes $((16 << 20)) --kv-offload-bytes $((4 << 20)) \
  --kv-offload-policy write-through --kv-disk-path "$tmp/disk" --kv-disk-bytes $((1 << 30)) \
  ${SERVE_ARGS:-} >"$tmp/serve.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "serving .* on http://" "$tmp/serve.log" && break; sleep 0.1; done
grep -q "serving .* on http://" "$tmp/serve.log" || { cat "$tmp/serve.log"; exit 1; }
python3 - "$port" "$text" >&2 <<'PY'
import json, sys, urllib.request
port, path = sys.argv[1], sys.argv[2]
text = open(path, errors="replace").read()
chunks = [text[i:i + 12000] for i in range(0, len(text), 12000)]
model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
for n, chunk in enumerate(chunks[:8]):
    body = json.dumps({"model": model, "prompt": chunk, "max_tokens": 1}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    usage = json.load(urllib.request.urlopen(req))["usage"]
    print(f"prompt {n + 1}/{min(len(chunks), 8)}: {usage['prompt_tokens']} tokens", flush=True)
PY
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""
"$bench" --dir "$tmp/disk" --dtype "$dtype" --layers "$layers" "$@"
