#!/usr/bin/env bash
# The queue lab against its peers, back to back in one invocation with the same pinning
# (producer on CPU 0, consumer on CPU 1, capacity 1024, unpaced, producer blocks when full):
#   msgbench queue  — msgbench's ring, every item's latency and service time recorded
#   rtrb ring       — the same harness and recording through the rtrb crate (run twice: the
#                     second run is an A/A control that shows this machine's noise)
#   C floor         — bench/floors/spsc_ring --ts (bare ring, one clock read per item, log2 histogram)
# Prints the median items/s of ROUNDS rounds (default 5) and the ratios the issue asks for:
# msgbench ≥ 0.8 × C floor and ≥ 1.0 × rtrb.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
build_all
machine
common=(--set 'sweep={}' --set pacing.mode=immediate --set queue.when_full=block --set queue.capacity=1024
        --set queue.pin.producer=0 --set queue.pin.consumer=1 --duration 2s --warmup 200ms)
ours=(); crate=(); again=(); floor=()
for round in $(seq "$ROUNDS"); do
  ours+=("$(msgbench_json "r['counters']['delivered']/r['duration_s']" "${common[@]}" --set queue.ring=msgbench)")
  crate+=("$(msgbench_json "r['counters']['delivered']/r['duration_s']" "${common[@]}" --set queue.ring=rtrb)")
  again+=("$(msgbench_json "r['counters']['delivered']/r['duration_s']" "${common[@]}" --set queue.ring=rtrb)")
  floor+=("$("$FLOORS/spsc_ring" -n 50000000 -p 0 -c 1 --ts | sed -n 's/^throughput: \([0-9.]*\) Mitems.*/\1/p' | python3 -c 'import sys; print(float(sys.stdin.read())*1e6)')")
  echo "round $round: msgbench ${ours[-1]%.*}/s  rtrb ${crate[-1]%.*}/s  C floor ${floor[-1]%.*}/s"
done
m_ours=$(median "${ours[@]}"); m_crate=$(median "${crate[@]}"); m_again=$(median "${again[@]}"); m_floor=$(median "${floor[@]}")
python3 - "$m_ours" "$m_crate" "$m_floor" "$m_again" <<'PY'
import sys
ours, crate, floor, again = map(float, sys.argv[1:])
print(f"median items/s: msgbench {ours/1e6:.2f} M, rtrb {crate/1e6:.2f} M, C floor {floor/1e6:.2f} M")
print(f"msgbench / C floor = {ours/floor:.2f}  (target >= 0.80)")
print(f"msgbench / rtrb    = {ours/crate:.2f}  (target >= 1.00; A/A control rtrb / rtrb = {again/crate:.2f})")
PY
