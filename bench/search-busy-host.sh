#!/usr/bin/env bash
# `msgbench search` on a busy host (issue 44): the same search against `msgbench serve rpc`
# (pinned to CPU 1) with msgbench's caller pinned to CPU 0, three times — quiet, with a busy
# loop pinned to CPU 0 beside the caller, quiet again. On a quiet host the answer is the
# system's; with the hog every step's sends go out late because the caller waits for its CPU,
# and the search must stop with "this host cannot keep a schedule of N/s" at the rate where the
# host failed instead of bisecting down to a figure of the host's (before: "2/s").
# Prints each search's last lines and exit code. About two minutes.
#
#   bash bench/search-busy-host.sh
source "$(dirname "$0")/common.sh"
build_all
machine
rpc_server_in_work 1 900s
taskset -pc 1 "$SERVER_PID" >/dev/null
cat > "$WORK/search.toml" <<TOML
name = "search-busy-host"
system = "rpc"
[rpc]
address = "127.0.0.1:$PORT"
[client]
connections = 1
pin = [0]
TOML
search() {
  local code=0
  "$MSGBENCH" search "$WORK/search.toml" --out "$WORK/out" --slo "p99 < 1ms" --start 2000 \
    --duration 1s --warmup 200ms > "$WORK/search.log" 2>&1 || code=$?
  grep -E "Maximum sustainable|cannot keep|host|^step|exit" "$WORK/search.log" | tail -6
  echo "exit code: $code"
}
echo "== quiet host"
search
echo "== a busy loop pinned to CPU 0, beside msgbench's caller"
taskset -c 0 sh -c 'while :; do :; done' &
HOG=$!
search
kill "$HOG"; wait "$HOG" 2>/dev/null || true
echo "== quiet again"
search
