#!/usr/bin/env bash
# msgbench's event-stream client (issue 47, item 1) against a floor: curl reading the same
# Server-Sent Events feed. `msgbench serve sse` sends RATE events/s (default 50 000) at
# /events; each round, alternating, (a) a msgbench `ticks` run of one client reads it for 5 s —
# every event cut by the SSE parser, its JSON data walked for `ts`, its id checked for gaps, its
# latency recorded — and (b) `curl -sN` reads it for 5 s, doing nothing with the bytes. Prints,
# per round and as medians with the spread: events/s read, CPU per event of each, and the ratio
# msgbench / curl; msgbench's latency p50/p99 (stamps on the monotonic clock: the true figure).
# ROUNDS rounds (default 3).
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-50000}
build_all
machine
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
PORT=$(free_port)
"$MSGBENCH" serve sse --listen "127.0.0.1:$PORT" --rate "$RATE" >/dev/null 2>&1 & PIDS+=($!)
wait_port "$PORT"
cat > "$WORK/feed.toml" <<TOML
system = "ticks"
[run]
duration = "5s"
warmup = "500ms"
[pacing]
mode = "rate"
per_sec = $RATE
[ticks]
address = "http://127.0.0.1:$PORT/events"
gaps = "error"
[ticks.sse]
event = "tick"
[ticks.feed]
sequence = "@id"
timestamp = "ts"
clock = "monotonic-ns"
TOML

ours() { # -> "events_per_s cpu_ns_per_event p50_us p99_us"
  "$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/feed.toml" |
    python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; c=r['counters']; l=r['latency']; assert c['delivered']==c['sent'] and r['sequence']['gaps']==0, c; print(c['delivered']/r['duration_s'], r['cpu']['driver_cpu_s']/c['delivered']*1e9, l['p50_ns']/1e3, l['p99_ns']/1e3)"
}
floor() { # -> "events_per_s cpu_ns_per_event"
  python3 - "http://127.0.0.1:$PORT/events" <<'PY'
import resource, subprocess, sys
p = subprocess.run(["timeout", "5", "curl", "-sN", sys.argv[1]], stdout=subprocess.PIPE)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
events = p.stdout.count(b"event: tick")
print(events / 5.0, (ru.ru_utime + ru.ru_stime) / max(events, 1) * 1e9)
PY
}
declare -a OR OC OP50 OP99 FR FC
for round in $(seq "$ROUNDS"); do
  read -r r c p50 p99 <<< "$(ours)"; OR+=("$r"); OC+=("$c"); OP50+=("$p50"); OP99+=("$p99")
  read -r fr fc <<< "$(floor)"; FR+=("$fr"); FC+=("$fc")
  printf 'round %s: msgbench %.0f events/s, %.0f ns CPU/event (p50 %.0f µs, p99 %.0f µs); curl %.0f events/s, %.0f ns CPU/event\n' \
    "$round" "$r" "$c" "$p50" "$p99" "$fr" "$fc"
done
python3 - "${OR[*]}" "${OC[*]}" "${OP50[*]}" "${OP99[*]}" "${FR[*]}" "${FC[*]}" <<'PY'
import statistics, sys
a = [[float(x) for x in s.split()] for s in sys.argv[1:]]
med = lambda v: statistics.median(v)
rng = lambda v: f"{min(v):.0f}-{max(v):.0f}"
ratios = [o / f for o, f in zip(a[1], a[5])]
print(f"msgbench: {med(a[0]):.0f} events/s, {med(a[1]):.0f} ns CPU/event (rounds {rng(a[1])}), latency p50 {med(a[2]):.0f} µs, p99 {med(a[3]):.0f} µs")
print(f"curl:     {med(a[4]):.0f} events/s, {med(a[5]):.0f} ns CPU/event (rounds {rng(a[5])})")
print(f"CPU per event, msgbench / curl: median {med(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})")
PY
