# serve_testing.sh: starting `strata serve` for a test script. Source it after cli_testing.sh,
# with `strata` set (the binary).
#   start_server ARGS...   starts `strata serve --port 0 ARGS...` in the background, waits for
#                          its "serving ... on http://127.0.0.1:PORT" line and sets server_pid,
#                          base (http://127.0.0.1:PORT) and server_log; fails the script if it
#                          does not come up. Every server started is killed on exit unless
#                          waited for; a second call starts another (server_pid, base name it).
#   free_ports N           prints N distinct free TCP ports on 127.0.0.1, one a line (all bound
#                          at once, so no two are the same).
#   wait_for LOG PATTERN   waits up to 30 s for LOG to have a line matching PATTERN and prints
#                          the first match's \1 (sed -n 's|PATTERN|\1|p'); fails the script
#                          with LOG's text if none comes.

server_pids=()
start_server() {
  server_log="$tmp/serve.$RANDOM.log"
  "$strata" serve --port 0 "$@" >"$server_log" 2>&1 &
  server_pid=$!
  server_pids+=("$server_pid")
  trap 'kill "${server_pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
  local port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$server_log")
    [[ -n "$port" ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    echo "FAIL: the server did not start: $(cat "$server_log")"
    exit 1
  fi
  base="http://127.0.0.1:$port"
}

free_ports() {
  python3 -c 'import socket,sys
s=[socket.socket() for _ in range(int(sys.argv[1]))]
[x.bind(("127.0.0.1",0)) for x in s]
print("\n".join(str(x.getsockname()[1]) for x in s))' "$1"
}

wait_for() {
  local got=""
  for _ in $(seq 1 300); do
    got=$(sed -n "s|$2|\1|p" "$1" | head -1)
    [[ -n "$got" ]] && break
    sleep 0.1
  done
  [[ -n "$got" ]] || { echo "FAIL: nothing in $1: $(cat "$1")"; exit 1; }
  printf '%s' "$got"
}
