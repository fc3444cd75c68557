#!/usr/bin/env bash
# Hostile clients against each built-in server (`msgbench serve rpc|ws-rpc|ticks`): random
# bytes, truncated frames, oversized length fields, maximal service times, clients that never
# read, slowloris heads, 10 000 idle connections, connection churn. For each, a well-behaved
# `msgbench run` beside the attack: its p99 against its quiet figure (pass: within 2×, or
# within 100 µs of it), and the server's peak RSS against its cap in docs/limits.md.
# Takes about four minutes; loopback only; every process it starts it stops.
#
#   bash bench/hostile.sh
#   MSGBENCH_HOSTILE_ONLY=ws-rpc:slowloris bash bench/hostile.sh   # one cell (or one server)
source "$(dirname "$0")/common.sh"
build_all
machine
# 10 000 idle connections need as many descriptors in this process (the servers raise their own).
ulimit -n "$(ulimit -Hn)"
cd "$ROOT"
cargo test --release --quiet -p msgbench --test hostile_matrix -- --ignored --nocapture 2>&1 |
  grep -v -E '^(running|test |$)'
