#!/usr/bin/env bash
# The RPC lab against the TCP floor, back to back in one invocation with the same pinning
# (server on CPU 0, client on CPU 1, 64-byte messages each way, TCP_NODELAY):
#   C floor   — bench/floors/tcp_pingpong: blocking send/recv ping-pong, nothing else
#   msgbench  — rpc, one connection, one request in flight (closed loop), built-in server
#               in-process; every request's latency recorded
# Prints the median round-trip p50 of ROUNDS rounds (default 5) and their ratio (target ≤ 1.3),
# then msgbench's pipelined throughput with 32 requests in flight on that one connection.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
build_all
machine
# 36-byte header + 28 bytes of payload = the floor's 64-byte message.
common=(--set system='"rpc"' --set 'sweep={}' --set pacing.mode='"closed-loop"' --set 'client.pin=[1]'
        --set 'rpc.server.pin=[0]' --set rpc.request_bytes=28 --set rpc.response_bytes=28
        --duration 2s --warmup 300ms)
ours=(); floor=(); ratios=()
for round in $(seq "$ROUNDS"); do
  ours+=("$(msgbench_json "r['latency']['p50_ns']/1000" "${common[@]}" --set client.window=1)")
  floor+=("$("$FLOORS/tcp_pingpong" -n 50000 -s 0 -c 1 | sed -n 's/.*p50=\([0-9.]*\).*/\1/p')")
  ratios+=("$(python3 -c "print(${ours[-1]}/${floor[-1]})")")
  echo "round $round: RTT p50 msgbench ${ours[-1]} µs, C floor ${floor[-1]} µs, ratio ${ratios[-1]}"
done
piped=()
for round in $(seq 3); do
  piped+=("$(msgbench_json "r['counters']['delivered']/r['duration_s']" "${common[@]}" --set client.window=32)")
done
python3 - "$(median "${ours[@]}")" "$(median "${floor[@]}")" "$(median "${ratios[@]}")" "$(median "${piped[@]}")" <<'PY'
import sys
ours, floor, ratio, piped = map(float, sys.argv[1:])
print(f"median RTT p50: msgbench {ours:.1f} µs, C floor {floor:.1f} µs")
print(f"msgbench / C floor = {ratio:.2f}  (median of per-round ratios; target <= 1.30)")
print(f"pipelined, window 32, one connection: {piped/1e3:.0f}k requests/s "
      f"({piped * floor / 1e6:.1f}x the floor's unpipelined round trips/s)")
PY
