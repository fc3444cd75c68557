#!/usr/bin/env bash
# Raw ring micro-benchmark (no timing per item): msgbench's ring vs rtrb, 2 M u64 items per
# iteration through a 1024-slot ring, producer and consumer pinned to CPUs 0 and 1, criterion
# medians; prints the ratio (target: msgbench >= 0.9 x rtrb). Also runs the recorder benchmark
# (target: <= 15 ns to record one delivered message).
source "$(dirname "$0")/common.sh"
cd "$ROOT"
machine
cargo bench -p msgbench-engine --bench ring 2>&1 | grep -A4 '^spsc-ring'
cargo bench -p msgbench-engine --bench recorder 2>&1 | grep -E '^recorder/|time:' || true
python3 - "$ROOT/target/criterion" <<'PY'
import json, sys, os
base = sys.argv[1]
def median_ns(group, name):
    with open(os.path.join(base, group, name, "new", "estimates.json")) as f:
        return json.load(f)["median"]["point_estimate"]
for name in os.listdir(os.path.join(base, "recorder")):
    if name == "report": continue
    print(f"recorder {name}: {median_ns('recorder', name):.1f} ns per message (target <= 15)")
PY
