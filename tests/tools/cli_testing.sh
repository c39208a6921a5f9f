# cli_testing.sh: what the CLI test scripts share. Source it after setting `strata` (the binary):
#   tmp               a scratch directory, removed on exit
#   ok / fail MSG     count a passed / failed check (fail prints MSG)
#   expect_error NAME PATTERN ARGS...
#                     runs `strata ARGS...` and checks the error contract: a non-zero exit that is
#                     not a crash, exactly one line on stderr, matching PATTERN (case-insensitive),
#                     within $expect_timeout seconds (default 120: a hang is a failure, not a stall)
#   repeat N TEXT     prints TEXT N times (deeply nested JSON for the hostile-input cases)
#   finish NAME       prints the tally and exits non-zero when anything failed
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
passed=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }

expect_error() {
  local name=$1 pattern=$2; shift 2
  local err rc
  err=$(timeout -k 5 "${expect_timeout:-120}" "$strata" "$@" 2>&1 >/dev/null); rc=$?
  if ((rc == 0)); then fail "$name: exit 0"; return; fi
  if ((rc == 124)); then fail "$name: still running after ${expect_timeout:-120} s"; return; fi
  if ((rc > 128)); then fail "$name: crashed (exit $rc): $err"; return; fi
  if [[ $(printf '%s\n' "$err" | wc -l) -ne 1 ]]; then fail "$name: not one line: $err"; return; fi
  if ! grep -qiE -e "$pattern" <<<"$err"; then fail "$name: '$err' lacks /$pattern/"; return; fi
  ok
}

repeat() { awk -v n="$1" -v s="$2" 'BEGIN { for (i = 0; i < n; ++i) printf "%s", s }'; }

finish() {
  echo "$1: $passed passed, $failures failed"
  ((failures == 0))
}
