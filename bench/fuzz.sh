#!/usr/bin/env bash
# The long fuzz run: every decoder a peer or a file from another host can reach
# (crates/engine/tests/fuzz.rs and fuzz_wires.rs), CASES mutated inputs each (default 10 million;
# the file readers a fifth of it, the run-result numbers a fiftieth), release build. Prints one
# line per decoder: inputs, no panic, seconds. The suite runs the same tests with 100 000.
#
#   bash bench/fuzz.sh
#   CASES=1000000 bash bench/fuzz.sh
source "$(dirname "$0")/common.sh"
machine
cd "$ROOT"
export MSGBENCH_FUZZ_CASES="${CASES:-10000000}"
started=$(date +%s)
cargo test --release --quiet -p msgbench-engine --test fuzz --test fuzz_wires -- --nocapture --test-threads 1 2>&1 |
  grep -oE 'fuzz [^:]+: .*|panicked.*|FAILED.*|^error.*' || true
echo "all in $(( $(date +%s) - started )) s"
