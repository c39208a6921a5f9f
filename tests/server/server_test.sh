#!/usr/bin/env bash
# Starts `strata serve` on a free port and drives it with the official openai npm client
# (openai_client_test.mjs), runs the bad-request suite (bad_request_test.mjs), then checks
# raw-HTTP error cases and that it still serves.
# Usage: server_test.sh STRATA_BINARY. Exit 77 (skipped) when the pinned client is not installed.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ! -d "$here/client/node_modules/openai" ]] || ! command -v node >/dev/null; then
  echo "server_test: the openai client is not installed (scripts/install_deps.sh): skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
log="$tmp/serve.log"
key=test-key
"$strata" serve --port 0 --threads 2 --num-blocks 1024 --api-key "$key" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { echo "FAIL: the server did not start: $(cat "$log")"; exit 1; }
base="http://127.0.0.1:$port"

node "$here/openai_client_test.mjs" "$base" "$key" && ok || fail "openai client suite"
node "$here/bad_request_test.mjs" "$base" "$key" && ok || fail "bad-request suite"

# Raw HTTP: auth, malformed JSON, wrong method, unknown path, oversize body, tokenize, metrics.
status() { curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $key" "$@"; }
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/v1/models") == 401 ]] && ok || fail "no key: 401"
[[ $(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$base/v1/models") \
  == 401 ]] && ok || fail "wrong key: 401"
[[ $(status "$base/tokenize" -d '{"prompt":"In the beginning"}') == 200 ]] && ok || fail "tokenize"
ids=$(sed -n 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/p' "$tmp/body")
[[ $(status "$base/detokenize" -d "{\"tokens\":$ids}") == 200 ]] &&
  grep -q 'In the beginning' "$tmp/body" && ok || fail "detokenize round trip ($ids)"
[[ $(status "$base/metrics") == 200 ]] &&
  grep -qE '^strata:generation_tokens_total [1-9]' "$tmp/body" &&
  grep -qE '^strata:time_to_first_token_seconds_count [1-9]' "$tmp/body" &&
  grep -q 'strata:request_success_total{finished_reason="length"}' "$tmp/body" &&
  grep -qE '^strata:prefix_cache_blocks [1-9]' "$tmp/body" &&
  grep -qE '^strata:kv_group_blocks\{group="0",kind="full_attention"\} [1-9]' "$tmp/body" &&
  grep -qE '^strata:kv_group_used_blocks\{group="0",kind="full_attention"\} [0-9]' "$tmp/body" &&
  grep -qE '^strata:kv_group_bytes\{group="0",kind="full_attention"\} [1-9]' "$tmp/body" &&
  ok || fail "metrics"
# Token eviction: a 200-token prompt under a 64-token budget completes on both endpoints, and
# /metrics counts the blocks it gave back.
long=$(printf '7,%.0s' $(seq 1 199))7
for policy in streaming_llm paged_eviction; do
  [[ $(status "$base/v1/completions" -d "{\"prompt\":[$long],\"max_tokens\":24,\"ignore_eos\":true,
       \"kv_eviction\":{\"policy\":\"$policy\",\"budget_tokens\":64}}") == 200 ]] &&
    grep -q '"completion_tokens":24' "$tmp/body" && ok || fail "completion with $policy: $(cat "$tmp/body")"
done
[[ $(status "$base/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Tell me a long story about the sea"}],
     "max_tokens":40,"ignore_eos":true,"kv_eviction":{"policy":"streaming_llm","budget_tokens":16,"sink_tokens":4}}') \
  == 200 ]] && grep -q '"completion_tokens":40' "$tmp/body" && ok || fail "chat with kv_eviction: $(cat "$tmp/body")"
[[ $(status "$base/metrics") == 200 ]] && grep -qE '^strata:kv_evicted_blocks_total [1-9]' "$tmp/body" \
  && ok || fail "kv_evicted_blocks_total"
[[ $(status "$base/v1/completions" -d '{bad') == 400 ]] && grep -q '"error"' "$tmp/body" \
  && ok || fail "malformed JSON"
[[ $(status -X GET "$base/v1/completions") == 405 ]] && ok || fail "wrong method"
[[ $(status "$base/v1/nope" -d '{}') == 404 ]] && ok || fail "unknown path"
head -c 20000000 /dev/zero | tr '\0' 'a' >"$tmp/big"
[[ $(status "$base/v1/completions" --data-binary @"$tmp/big") == 413 ]] && ok || fail "oversize body"
[[ $(status "$base/health") == 200 ]] && ok || fail "healthy at the end"
kill -TERM "$pid"
wait "$pid" && ok || fail "exit status after SIGTERM"
finish server_test
