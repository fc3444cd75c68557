#!/usr/bin/env bash
# The tick server against a peer written with tokio-tungstenite (bench/peers/tungstenite-ticks,
# built here, outside the workspace), measured by the same client in the same invocation:
# msgbench's native tick client on CPU 1, every tick's latency recorded, sequence numbers
# checked; each server on CPU 0, one thread, the same binary tick format and write batching.
#   1. at RATE ticks/s (default 1M/s): delivered rate, gaps, latency p50/p99 of each server
#   2. unpaced (each server writes as fast as the socket takes them): delivered rate, ratio
# ROUNDS rounds (default 3), alternating; medians and per-round ratios are printed. On a 2-CPU
# machine the unpaced figure is bounded by whichever side saturates its CPU first; the client
# (one thread decoding, checking and recording every tick) is the same for both servers.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-1000000}
build_all
build_tungstenite_peer
machine

trap stop_server EXIT

# measure WHAT : the client against the server at $URL; prints "delivered_per_s gaps p50_us p99_us".
measure() {
  msgbench_json "f\"{r['counters']['delivered']/r['duration_s']:.0f} {r['streams'][0]['gaps_seen']} {r['latency']['p50_ns']/1e3:.1f} {r['latency']['p99_ns']/1e3:.1f}\"" \
    --set system='"ticks"' --set 'sweep={}' --set "ticks.address=\"$URL/ticks\"" \
    --set 'ticks.clients.client.pin=[1]' --set ticks.gaps='"drops"' --duration 3s --warmup 500ms
}

declare -A results
for round in $(seq "$ROUNDS"); do
  for mode in paced unpaced; do
    if [ "$mode" = paced ]; then ours_rate=(--rate "$RATE"); peer_rate=(--rate "$RATE"); else ours_rate=(--immediate); peer_rate=(--rate 0); fi
    start_server "$MSGBENCH" serve ticks --listen 127.0.0.1:0 --pin 0 "${ours_rate[@]}"
    ours=$(measure); stop_server
    start_server "$PEER" --listen 127.0.0.1:0 --pin 0 "${peer_rate[@]}"
    peer=$(measure); stop_server
    echo "round $round $mode: msgbench server [$ours]  tungstenite peer [$peer]  (delivered/s gaps p50µs p99µs)"
    results[$mode-ours]+="$ours;"; results[$mode-peer]+="$peer;"
  done
done
python3 - "${results[paced-ours]}" "${results[paced-peer]}" "${results[unpaced-ours]}" "${results[unpaced-peer]}" "$RATE" <<'PY'
import statistics, sys
def rows(text): return [list(map(float, r.split())) for r in text.strip(';').split(';')]
po, pp, uo, up = map(rows, sys.argv[1:5]); rate = float(sys.argv[5])
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"paced at {rate/1e6:g}M ticks/s (median of {len(po)} rounds):")
for name, rs in (("msgbench serve ticks", po), ("tokio-tungstenite peer", pp)):
    print(f"  {name:24s} delivered {med(rs,0)/1e6:.2f}M/s, gaps {med(rs,1):.0f}, p50 {med(rs,2):.1f} µs, p99 {med(rs,3):.1f} µs")
print(f"  p99 ratio msgbench/peer: {statistics.median(a[3]/b[3] for a, b in zip(po, pp)):.2f}")
print("unpaced (as fast as each server writes):")
for name, rs in (("msgbench serve ticks", uo), ("tokio-tungstenite peer", up)):
    print(f"  {name:24s} delivered {med(rs,0)/1e6:.2f}M/s")
print(f"  throughput ratio msgbench/peer: {statistics.median(a[0]/b[0] for a, b in zip(uo, up)):.2f} (median of per-round ratios)")
print("  (a ratio near 1 means neither server is the bottleneck: the one client thread is)")
PY
