#!/usr/bin/env bash
# Tick fan-out: one server thread streaming RATE ticks/s (default 10k/s) to each of N clients
# (default 100, 400, 1000), msgbench's `serve ticks` against the tokio-tungstenite peer
# (bench/peers/tungstenite-ticks, built here), alternating, measured by msgbench's native client
# (CLIENT_THREADS threads, default 1, pinned to CPU 1; the server on CPU 0), every tick recorded.
# Prints per server and client count: ticks delivered per second against what was offered
# (N x RATE), gaps, send lag p99 and latency p99; the delivered ratio msgbench/peer. Send lag
# (how late the server's generator ran) is known only for msgbench's server run in-process (a
# third row, the same pinning): a separate server does not report it. On 2 CPUs the figures say which side
# bounds the fan-out: a server whose send lag grows is the server; both servers delivering the
# same short of the offer is the client. About 1 minute per round.
source "$(dirname "$0")/common.sh"
RATE=${RATE:-10000}
COUNTS=${COUNTS:-"100 400 1000"}
CLIENT_THREADS=${CLIENT_THREADS:-1}
SERVER_THREADS=${SERVER_THREADS:-1}
build_all
build_tungstenite_peer
machine

trap stop_server EXIT

# measure N [ARGS...] : prints "delivered_per_s gaps send_lag_p99_us latency_p99_us" for N clients
# of the server at $URL (or, with ARGS, of the in-process server they configure).
measure() {
  local n=$1; shift
  local where=(--set "ticks.address=\"$URL/ticks\"")
  [ $# -gt 0 ] && where=("$@")
  msgbench_json "f\"{r['counters']['delivered']/r['duration_s']:.0f} {sum(s['gaps_seen'] for s in r['streams'])} {r['send_lag']['p99_ns']/1e3 if r['send_lag']['count'] else float('nan'):.1f} {r['latency']['p99_ns']/1e3:.1f}\"" \
    --set system='"ticks"' --set 'sweep={}' "${where[@]}" --set pacing.mode=rate --set "pacing.per_sec=$RATE" \
    --set "ticks.clients.client.connections=$n" --set "ticks.clients.client.threads=$CLIENT_THREADS" \
    --set 'ticks.clients.client.pin=[1]' --set ticks.gaps='"drops"' --duration 3s --warmup 500ms
}

printf "%-8s %-22s %12s %10s %6s %14s %12s\n" clients server delivered/s offered gaps "send lag p99" "p99"
for n in $COUNTS; do
  start_server "$MSGBENCH" serve ticks --listen 127.0.0.1:0 --pin 0 --threads "$SERVER_THREADS" \
    --rate "$RATE" --max-connections 4096
  ours=($(measure "$n")); stop_server
  start_server "$PEER" --listen 127.0.0.1:0 --pin 0 --rate "$RATE"
  peer=($(measure "$n")); stop_server
  inproc=($(measure "$n" --set "ticks.server.threads=$SERVER_THREADS" --set 'ticks.server.pin=[0]'))
  offered=$((n * RATE))
  for row in "msgbench serve ticks:${ours[*]}" "tokio-tungstenite peer:${peer[*]}" "msgbench in-process:${inproc[*]}"; do
    name=${row%%:*}; set -- ${row#*:}
    printf "%-8s %-22s %12.0f %10d %6s %11s µs %9s µs\n" "$n" "$name" "$1" "$offered" "$2" "$3" "$4"
  done
  python3 -c "import sys; print(f'         delivered msgbench/peer = {float(sys.argv[1])/float(sys.argv[2]):.2f}')" "${ours[0]}" "${peer[0]}"
done
