#!/usr/bin/env bash
# KV events end to end: `strata serve` on the bundled model publishing its prefix cache's events
# over ZeroMQ, read by kv_events_consumer.py, a consumer of vLLM's wire format that shares no code
# with Strata (python3-zmq, python3-msgpack): stored blocks with their tokens and parent chain,
# the shared prefix stored once, evictions from a small pool, replay from sequence 0. A second
# server takes vLLM's --kv-events-config instead of the flags, and sends AllBlocksCleared on
# POST /reset_prefix_cache; a third has a host and a disk tier, whose media are checked.
# Usage: kv_events_test.sh STRATA_BINARY. Exit 77 (skipped) when python3-zmq or python3-msgpack
# is not installed.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Debian's python3, where python3-zmq and python3-msgpack are, may not be the first on PATH.
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c 'import zmq, msgpack' 2>/dev/null; then py=$candidate; break; fi
done
if [[ -z "$py" ]]; then
  echo "kv_events_test: python3-zmq and python3-msgpack are not installed: skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/serve_testing.sh"

# Six free TCP ports for the three servers' PUB and ROUTER sockets.
mapfile -t ports < <(free_ports 6)
pub=${ports[0]} replay=${ports[1]} pub2=${ports[2]} replay2=${ports[3]}
pub3=${ports[4]} replay3=${ports[5]}
bs=16
# The PUB socket binds only on a wildcard address, as vLLM's does; subscribers connect to 127.0.0.1.
start_server --threads 1 --block-size $bs --num-blocks 24 \
  --kv-events-endpoint "tcp://*:$pub" --kv-events-replay-endpoint "tcp://127.0.0.1:$replay" \
  --kv-events-topic kv
grep -qF "KV events on tcp://*:$pub" "$server_log" && ok || fail "no KV events line"
"$py" "$here/kv_events_consumer.py" full "$base" "tcp://127.0.0.1:$pub" \
  "tcp://127.0.0.1:$replay" kv $bs && ok || fail "the consumer (flags)"

config='{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:'$pub2'",'
config+='"replay_endpoint":"tcp://127.0.0.1:'$replay2'","topic":"","buffer_steps":100,"hwm":1000}'
start_server --threads 1 --block-size $bs --num-blocks 64 --kv-events-config "$config"
"$py" "$here/kv_events_consumer.py" quick "$base" "tcp://127.0.0.1:$pub2" \
  "tcp://127.0.0.1:$replay2" "" $bs && ok || fail "the consumer (--kv-events-config)"
"$py" "$here/kv_events_consumer.py" reset "$base" "tcp://127.0.0.1:$pub2" \
  "tcp://127.0.0.1:$replay2" "" $bs && ok || fail "the consumer (/reset_prefix_cache)"

# The tiers' media: a pool of 24 blocks over a host tier of 8 (a block of strata-tiny is 96 KiB
# on the CPU) over a disk tier.
disk=$(mktemp -d)
start_server --threads 1 --block-size $bs --num-blocks 24 --kv-offload-bytes $((8 * 98304)) \
  --kv-disk-path "$disk" --kv-disk-bytes $((64 << 20)) \
  --kv-events-endpoint "tcp://*:$pub3" --kv-events-replay-endpoint "tcp://127.0.0.1:$replay3"
"$py" "$here/kv_events_consumer.py" tiers "$base" "tcp://127.0.0.1:$pub3" \
  "tcp://127.0.0.1:$replay3" "" $bs && ok || fail "the consumer (tiers)"
rm -rf "$disk"
finish kv_events_test
