#!/usr/bin/env bash
# The user's queue through msgbench's queue ABI (issue 46, item 3) against the same design
# compiled into msgbench, back to back in one invocation with queue-vs-floor.sh's method
# (producer on CPU 0, consumer on CPU 1, capacity 1024, unpaced, producer blocks when full):
#   msgbench ring       — crates/engine/src/ring.rs, inlined into the lab (run twice: the second
#                         run is the A/A control that shows this machine's noise)
#   library ring        — examples/queues/spsc_ring.c, the same ring in C, built -O2 as a shared
#                         library and called through function pointers (queue.ring = "library")
# Prints the median items/s of ROUNDS rounds (default 5), the library / msgbench ratio and the
# A/A ratio beside it. Also at 100k/s, the p99 of each (a paced run's latency, not its speed).
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
build_all
bash "$ROOT/scripts/build-queues.sh"
machine
LIB="$ROOT/target/queues/libspsc_ring.so"
common=(--set 'sweep={}' --set pacing.mode=immediate --set queue.when_full=block --set queue.capacity=1024
        --set queue.pin.producer=0 --set queue.pin.consumer=1 --set "queue.library=\"$LIB\""
        --duration 2s --warmup 200ms)
rate() { msgbench_json "r['counters']['delivered']/r['duration_s']" "${common[@]}" "$@"; }
ours=(); again=(); lib=()
for round in $(seq "$ROUNDS"); do
  ours+=("$(rate --set queue.ring=msgbench)")
  lib+=("$(rate --set queue.ring=library)")
  again+=("$(rate --set queue.ring=msgbench)")
  echo "round $round: msgbench ${ours[-1]%.*}/s  library ${lib[-1]%.*}/s  msgbench again ${again[-1]%.*}/s"
done
paced=(--set pacing.mode=rate --set pacing.per_sec=100000)
p99_ours=$(msgbench_json "r['latency']['p99_ns']" "${common[@]}" "${paced[@]}" --set queue.ring=msgbench)
p99_lib=$(msgbench_json "r['latency']['p99_ns']" "${common[@]}" "${paced[@]}" --set queue.ring=library)
python3 - "$(median "${ours[@]}")" "$(median "${lib[@]}")" "$(median "${again[@]}")" "$p99_ours" "$p99_lib" <<'PY'
import sys
ours, lib, again, p99_ours, p99_lib = map(float, sys.argv[1:])
print(f"median items/s: msgbench ring {ours/1e6:.2f} M, library ring {lib/1e6:.2f} M")
print(f"library / msgbench = {lib/ours:.2f}   (A/A control: msgbench again / msgbench = {again/ours:.2f})")
print(f"at 100k/s, p99: msgbench ring {p99_ours/1e3:.1f} us, library ring {p99_lib/1e3:.1f} us")
PY
