#!/usr/bin/env bash
# TCP against a Unix domain socket (issue 46, item 2): the same server reached both ways, side
# by side, alternating, ROUNDS rounds (default 5):
#   rpc    — `msgbench serve rpc` (1 thread) listening on a loopback port and, as a second
#            process, on a Unix socket
#   redis  — one `redis-server` listening on both (PING)
# Each round runs, per server and transport: closed loop over 1 connection, window 1, 3 s
# (a round trip at a time: requests/s is 1/latency of the whole path), then 20 000 requests/s
# paced over 2 connections for 3 s (p50 and p99 from the intended send time, driver CPU per
# request). Prints the medians and the ratios unix / tcp.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
build_all
machine
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
RPC_PORT=$(free_port)
"$MSGBENCH" serve rpc --listen "127.0.0.1:$RPC_PORT" --threads 1 >/dev/null 2>&1 & PIDS+=($!)
"$MSGBENCH" serve rpc --listen "unix://$WORK/rpc.sock" --threads 1 >/dev/null 2>&1 & PIDS+=($!)
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$WORK/redis.sock" --save '' --appendonly no >/dev/null 2>&1 & PIDS+=($!)
wait_port "$RPC_PORT"; wait_port "$REDIS_PORT"
for _ in $(seq 100); do [ -S "$WORK/rpc.sock" ] && [ -S "$WORK/redis.sock" ] && break; sleep 0.05; done

scenario() { # NAME SYSTEM ADDRESS
  local section="[rpc]"; [ "$2" = redis ] && section="[redis]"
  printf 'system = "%s"\n[run]\nduration = "3s"\nwarmup = "500ms"\n%s\naddress = "%s"\n' "$2" "$section" "$3" > "$WORK/$1.toml"
}
scenario rpc-tcp rpc "127.0.0.1:$RPC_PORT"; scenario rpc-unix rpc "unix://$WORK/rpc.sock"
scenario redis-tcp redis "127.0.0.1:$REDIS_PORT"; scenario redis-unix redis "unix://$WORK/redis.sock"

closed() { # NAME -> requests/s, one at a time
  "$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/$1.toml" --set pacing.mode=closed-loop \
    --set client.connections=1 --set client.window=1 |
    python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; c=r['counters']; assert c['failed']==0, c; print(c['delivered']/r['duration_s'])"
}
paced() { # NAME -> "p50_us p99_us driver_ns_per_request"
  "$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/$1.toml" --set pacing.mode=rate \
    --set pacing.per_sec=20000 --set client.connections=2 --set client.window=16 |
    python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; c=r['counters']; l=r['latency']; assert c['delivered']==c['sent'], c; print(l['p50_ns']/1e3, l['p99_ns']/1e3, r['cpu']['driver_cpu_s']/c['sent']*1e9)"
}
declare -A RATE P50 P99 CPU
for round in $(seq "$ROUNDS"); do
  for name in rpc-tcp rpc-unix redis-tcp redis-unix; do
    RATE[$name]+="$(closed "$name") "
    read -r p50 p99 cpu <<< "$(paced "$name")"
    P50[$name]+="$p50 "; P99[$name]+="$p99 "; CPU[$name]+="$cpu "
  done
  echo "round $round: closed-loop requests/s: rpc tcp $(echo "${RATE[rpc-tcp]}" | awk '{print $NF}') unix $(echo "${RATE[rpc-unix]}" | awk '{print $NF}'); redis tcp $(echo "${RATE[redis-tcp]}" | awk '{print $NF}') unix $(echo "${RATE[redis-unix]}" | awk '{print $NF}')"
done
for server in rpc redis; do
  python3 - "$server" "${RATE[$server-tcp]}" "${RATE[$server-unix]}" "${P50[$server-tcp]}" "${P50[$server-unix]}" \
    "${P99[$server-tcp]}" "${P99[$server-unix]}" "${CPU[$server-tcp]}" "${CPU[$server-unix]}" <<'PY'
import statistics, sys
name = sys.argv[1]
m = [statistics.median(float(x) for x in a.split()) for a in sys.argv[2:]]
spread = lambda a: (min(float(x) for x in a.split()), max(float(x) for x in a.split()))
(rt, ru), (pt, pu), (qt, qu), (ct, cu) = m[0:2], m[2:4], m[4:6], m[6:8]
print(f"{name}: one at a time: tcp {rt:.0f}/s (rounds {spread(sys.argv[2])[0]:.0f}-{spread(sys.argv[2])[1]:.0f}), unix {ru:.0f}/s (rounds {spread(sys.argv[3])[0]:.0f}-{spread(sys.argv[3])[1]:.0f}): unix / tcp = {ru/rt:.2f}x")
print(f"{name}: at 20000/s: p50 tcp {pt:.1f} us, unix {pu:.1f} us ({pu/pt:.2f}x); p99 tcp {qt:.1f} us, unix {qu:.1f} us ({qu/qt:.2f}x); driver CPU per request tcp {ct:.0f} ns, unix {cu:.0f} ns ({cu/ct:.2f}x)")
PY
done
