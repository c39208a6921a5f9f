#!/usr/bin/env bash
# `strata bench` end to end on a small fixture model: the JSON report's fields and their
# relations, a side-by-side comparison, an agentic run whose hit rate approaches its cacheable
# share, a Mooncake trace replay, the HTTP backend (--endpoint) against a real `strata serve`,
# and one-line errors with a non-zero exit for bad input.
# Usage: bench_cli_test.sh STRATA_BINARY TEST_DATA_DIR
set -uo pipefail
strata=$1
data=$2
model=$data/models/llama3-gqa
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/cli_testing.sh"
bench() { "$strata" bench --model "$model" --threads 2 --num-blocks 512 "$@"; }
bench_error() {  # bench_error NAME PATTERN ARGS...: expect_error on `strata bench` on the model
  local name=$1 pattern=$2; shift 2
  expect_error "$name" "$pattern" bench --model "$model" --num-blocks 512 "$@"
}

# 1. random workload, two schedulers x two allocators side by side, JSON
bench --num-prompts 12 --input-len 16:64 --output-len 4:12 --scheduler continuous,static \
  --allocator paged,contiguous --batch-timeout-ms 5 --json >"$tmp/random.json" 2>"$tmp/err" \
  || fail "random bench exited non-zero: $(cat "$tmp/err")"
python3 - "$tmp/random.json" <<'PY' && ok || fail "random bench JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["header"]["workload"]["name"] == "random"
assert j["header"]["workload"]["request_rate"] is None  # offline
runs = j["runs"]
assert [(r["scheduler"], r["allocator"]) for r in runs] == [
    ("continuous", "paged"), ("continuous", "contiguous"), ("static", "paged"),
    ("static", "contiguous")], runs
for r in runs:
    assert r["num_requests"] == 12
    # the same workload every run: same prompt and output token counts
    assert r["prompt_tokens"] == runs[0]["prompt_tokens"]
    assert r["output_tokens"] == runs[0]["output_tokens"]
    assert 12 * 4 <= r["output_tokens"] <= 12 * 12
    assert r["output_tokens_per_s"] > 0 and r["total_tokens_per_s"] > r["output_tokens_per_s"]
    assert abs(r["requests_per_s"] - 12 / r["duration_s"]) < 1e-6 * r["requests_per_s"]
    for k in ("ttft_s", "inter_token_latency_s", "e2e_latency_s", "schedule_s"):
        d = r[k]
        assert 0 <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"], (k, d)
    assert r["ttft_s"]["p50"] <= r["e2e_latency_s"]["p50"]
    assert 0 < r["pool_utilization"] <= 1 and 0 < r["pool_utilization_bound"] < 1
    assert 0 < r["block_fill"] <= 1
    # llama3-gqa: 2 layers x 2 KV heads x head_dim 16 x 2 (K, V) x 4 bytes (f32 KV)
    assert r["kv_bytes_per_token"] == 512, r["kv_bytes_per_token"]
    assert 1 <= r["max_concurrency"] <= 12
    assert 0 <= r["schedule_share"] < 1
    assert r["preemptions"] >= 0 and r["steps"] > 0
PY

# 2. agentic: sessions share a system prefix and each turn extends the last, so most of the
#    prompt is cacheable and the engine's hit rate comes close to that share
bench --workload agentic --num-sessions 3 --turns 4 --length-scale 0.04 --json \
  >"$tmp/agentic.json" 2>"$tmp/err" || fail "agentic bench exited non-zero: $(cat "$tmp/err")"
python3 - "$tmp/agentic.json" <<'PY' && ok || fail "agentic bench JSON"
import json, sys
j = json.load(open(sys.argv[1]))
r = j["runs"][0]
assert j["header"]["workload"]["num_sessions"] == 3
assert r["num_requests"] == 12, r["num_requests"]
assert r["cacheable_share"] > 0.5, r["cacheable_share"]
assert r["prefix_hit_rate"] <= r["cacheable_share"] + 1e-9
assert r["prefix_hit_rate"] >= 0.9 * r["cacheable_share"], (r["prefix_hit_rate"], r["cacheable_share"])
PY

# 3. a Mooncake trace scaled to 16-token blocks, replayed at 10x speed
cat >"$tmp/mooncake.jsonl" <<'JSONL'
{"timestamp": 0, "input_length": 1500, "output_length": 8, "hash_ids": [0, 1, 2]}
{"timestamp": 20, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 3]}
{"timestamp": 45, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1, 2, 4]}
JSONL
bench --trace "$tmp/mooncake.jsonl" --trace-block-size 16 --trace-time-scale 0.1 --json \
  >"$tmp/trace.json" 2>"$tmp/err" || fail "trace bench exited non-zero: $(cat "$tmp/err")"
python3 - "$tmp/trace.json" <<'PY' && ok || fail "trace bench JSON"
import json, sys
j = json.load(open(sys.argv[1]))
r = j["runs"][0]
assert j["header"]["workload"]["trace_timestamps"] is True
assert r["num_requests"] == 3 and r["output_tokens"] == 19
# prompts 32 + ceil(476 / 32), 32 + ceil(76 / 32), 48 + ceil(464 / 32) tokens; blocks [0 1] are
# shared (request 1 has only 15 tokens of block 2, so its third block differs from request 3's)
assert r["prompt_tokens"] == 47 + 35 + 63, r["prompt_tokens"]
assert r["cacheable_tokens"] == 32 + 32, r["cacheable_tokens"]
PY

# 4. the readable table names every run
bench --num-prompts 2 --input-len 8 --output-len 2 --allocator paged,contiguous >"$tmp/table" \
  2>/dev/null || fail "table bench exited non-zero"
grep -q "continuous / paged" "$tmp/table" && grep -q "continuous / contiguous" "$tmp/table" \
  && grep -q "^prefix hit rate" "$tmp/table" && ok || fail "table: $(cat "$tmp/table")"

# 5. the HTTP backend: the same workload through a running `strata serve` on the same model gives
#    the same requests and token counts as in-process, and an agentic run hits the server's
#    prefix cache (its cached tokens come back in each stream's usage)
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/../server/serve_testing.sh"
start_server --model "$model" --threads 2 --num-blocks 512
http_args=(--num-prompts 8 --input-len 8:40 --output-len 3:9 --request-rate 40 --seed 3 --json)
bench "${http_args[@]}" >"$tmp/inproc.json" 2>"$tmp/err" || fail "in-process: $(cat "$tmp/err")"
bench "${http_args[@]}" --endpoint "$base" >"$tmp/http.json" 2>"$tmp/err" \
  || fail "--endpoint bench exited non-zero: $(cat "$tmp/err")"
python3 - "$tmp/inproc.json" "$tmp/http.json" "$base" <<'PY' && ok || fail "--endpoint bench JSON"
import json, sys
a, h = (json.load(open(p)) for p in sys.argv[1:3])
assert h["header"]["endpoint"] == sys.argv[3] and h["header"]["engine"] is None, h["header"]
assert a["header"]["endpoint"] is None
r, i = h["runs"][0], a["runs"][0]
assert (r["scheduler"], r["allocator"]) == ("http", sys.argv[3][len("http://"):]), r
assert r["num_requests"] == 8 and r["prompt_tokens"] == i["prompt_tokens"], (r, i)
assert r["output_tokens"] == i["output_tokens"] and 8 * 3 <= r["output_tokens"] <= 8 * 9, r
assert r["kv_bytes_per_token"] == 512, r["kv_bytes_per_token"]  # from the server's /metrics
for k in ("ttft_s", "inter_token_latency_s", "e2e_latency_s"):
    d = r[k]
    assert d["count"] > 0 and 0 <= d["p50"] <= d["p99"] <= d["max"], (k, d)
# Several SSE events can land in one read (a loaded machine delivers a short stream in one burst):
# a 0 inter-token gap is real, even for every token of the run. Time to first token and end to
# end are never 0.
assert r["ttft_s"]["max"] > 0 and r["e2e_latency_s"]["max"] > 0, r
assert r["ttft_s"]["p50"] > 0 and r["ttft_s"]["p50"] <= r["e2e_latency_s"]["p50"]
assert 1 <= r["max_concurrency"] <= 8
PY
bench --workload agentic --num-sessions 2 --turns 3 --length-scale 0.03 --endpoint "$base" --json \
  >"$tmp/http-agentic.json" 2>"$tmp/err" || fail "--endpoint agentic: $(cat "$tmp/err")"
python3 - "$tmp/http-agentic.json" <<'PY' && ok || fail "--endpoint agentic JSON"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert r["num_requests"] == 6, r["num_requests"]
assert r["cacheable_share"] > 0.3 and 0 < r["prefix_hit_rate"] <= r["cacheable_share"] + 1e-9, r
PY
bench --num-prompts 2 --input-len 8 --output-len 2 --endpoint "$base" >"$tmp/http-table" \
  2>/dev/null && grep -q "^server     $base" "$tmp/http-table" && grep -q "^TTFT" "$tmp/http-table" \
  && ! grep -q "^block fill" "$tmp/http-table" && ok || fail "--endpoint table: $(cat "$tmp/http-table")"
# 5b. two instances: the requests go round-robin, half to each, and the report sums both servers'
#     counters
first=$base first_pid=$server_pid
prompt_tokens() { curl -s "$1/metrics" | sed -n 's/^strata:prompt_tokens_total \([0-9.]*\)$/\1/p'; }
before=$(prompt_tokens "$first")
start_server --model "$model" --threads 2 --num-blocks 512
bench --num-prompts 6 --input-len 10 --output-len 2 --endpoint "$first" --endpoint "$base" --json \
  >"$tmp/http-two.json" 2>"$tmp/err" || fail "two endpoints: $(cat "$tmp/err")"
python3 - "$tmp/http-two.json" "$first,$base" "$before" "$(prompt_tokens "$first")" \
  "$(prompt_tokens "$base")" <<'PY' && ok || fail "two endpoints JSON"
import json, sys
j = json.load(open(sys.argv[1]))
r = j["runs"][0]
assert j["header"]["endpoint"] == sys.argv[2], j["header"]
assert r["num_requests"] == 6 and r["prompt_tokens"] == 60, r
assert float(sys.argv[4]) - float(sys.argv[3]) == 30 and float(sys.argv[5]) == 30, sys.argv[3:]
PY
# Gone, not going: a server told to stop may still answer while it drains (the probe would pass
# and a request fail instead).
kill "$server_pid" && wait "$server_pid" 2>/dev/null
bench_error endpoint-second-down "cannot reach $base" --endpoint "$first,$base"
kill "$first_pid" && wait "$first_pid" 2>/dev/null
base=$first
bench_error endpoint-down "cannot reach" --endpoint "$base"
bench_error endpoint-malformed "endpoint" --endpoint "not a url"
# 5c. requests the server refuses (it lets 2 wait at once; 8 arrive together) are counted as
#     failed, left out of the latencies, and the run goes on to the end
start_server --model "$model" --threads 2 --num-blocks 512 --max-waiting-requests 2
bench --num-prompts 8 --input-len 64 --output-len 20 --seed 5 --endpoint "$base" --json \
  >"$tmp/http-refused.json" 2>"$tmp/err" || fail "--endpoint, some refused: $(cat "$tmp/err")"
python3 - "$tmp/http-refused.json" <<'PY' && ok || fail "--endpoint refused requests JSON"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
failed = r["failed_requests"]
assert r["num_requests"] == 8 and 0 < failed < 8, r
assert "HTTP 503" in r["first_failure"] and "at capacity" in r["first_failure"], r["first_failure"]
assert r["ttft_s"]["count"] == 8 - failed and r["e2e_latency_s"]["count"] == 8 - failed, r
assert r["output_tokens"] == 20 * (8 - failed), r
PY
kill "$server_pid" && wait "$server_pid" 2>/dev/null
# 5d. a server that closes connections past its per-client limit (2 here; 32 requests arrive
#     together): the client's writes on those sockets fail (EPIPE), each request is counted as
#     failed and the run ends normally -- never killed by SIGPIPE (exit 141), which before
#     happened in about one run of three
start_server --model "$model" --threads 2 --num-blocks 512 --max-connections-per-client 2
for round in 1 2 3 4 5 6; do
  rc=0
  bench --num-prompts 32 --input-len 64 --output-len 4 --seed "$round" --endpoint "$base" --json \
    >"$tmp/http-closed.json" 2>"$tmp/err" || rc=$?
  ((rc == 0)) || { fail "--endpoint, connections closed: exit $rc (round $round)"; break; }
done
((rc == 0)) && python3 - "$tmp/http-closed.json" "$base" <<'PY' && ok || fail "--endpoint closed connections JSON"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert r["num_requests"] == 32 and 0 < r["failed_requests"] < 32, r
assert sys.argv[2] in r["first_failure"], r["first_failure"]
PY
kill "$server_pid" && wait "$server_pid" 2>/dev/null

# 6. bad input: one line on stderr, non-zero exit, never a crash
printf '{"input_length": 4, "output_length": 2}\n{"input_length": 4}\n' >"$tmp/missing.jsonl"
printf '{"input_length": 4, "output_length": 2}\nnot json\n' >"$tmp/garbage.jsonl"
printf '{"input_ids": [1, 2, 99999], "output_length": 2}\n' >"$tmp/vocab.jsonl"
printf '{"input_length": 1500, "output_length": 2, "hash_ids": [1]}\n' >"$tmp/hash.jsonl"
bench_error unknown-workload "unknown workload" --workload nope
bench_error bad-range "--input-len" --input-len 9:3
bench_error too-long "max model length" --input-len 1000 --output-len 100
bench_error missing-trace "cannot read the trace" --trace "$tmp/nope.jsonl"
bench_error trace-missing-field "line 2: missing output_length" --trace "$tmp/missing.jsonl"
bench_error trace-not-json "line 2: not valid JSON" --trace "$tmp/garbage.jsonl"
bench_error trace-vocab "trace line 1: token id 99999" --trace "$tmp/vocab.jsonl"
bench_error trace-hash-count "trace line 1: 1 hash_ids" --trace "$tmp/hash.jsonl"
bench_error bad-rate "request-rate" --request-rate fast
bench_error bad-scheduler "scheduler" --scheduler eager
bench_error agentic-too-long "length-scale" --workload agentic

finish bench_cli_test
