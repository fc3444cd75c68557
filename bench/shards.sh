#!/usr/bin/env bash
# Four shards at R/4 against one process at R, alternating (issue 15): one `serve rpc` (2 threads),
# examples/sharded-rpc.toml (16 connections, rate pacing) at RATE for DURATION. The shard processes
# share this host's CPUs with each other and with the server, so this shows that sharding and the
# merge change nothing (same delivered rate, same tail), not that shards add capacity; for that,
# run them on several hosts (docs/distributed.md).
#   bash bench/shards.sh            ROUNDS=5 RATE=20000 DURATION=3s
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
RATE=${RATE:-20000}
DURATION=${DURATION:-3s}
build_all
machine
rpc_server_in_work 2 1h
SET=(--set "rpc.address=\"127.0.0.1:$PORT\"" --set "pacing.per_sec=$RATE" --duration "$DURATION" --warmup 500ms)
figures() { python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))
print(r['counters']['delivered']/r['duration_s'], r['latency']['p99_ns'], r['counters']['attempted'], len(r['warnings']))" "$1"; }
echo "round  one: delivered/s p99   4 shards merged: delivered/s p99   attempted one/merged   rate ratio  p99 ratio"
rates=(); p99s=()
for round in $(seq "$ROUNDS"); do
  "$MSGBENCH" run "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --quiet --out "$WORK/one-$round"
  read -r one_rate one_p99 one_att _ < <(figures "$WORK/one-$round"/sharded-rpc/latest/runs/000.json)
  start=$(( $(date +%s%3N) + 3000 ))
  for i in 0 1 2 3; do
    "$MSGBENCH" run "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --shard $i/4 --start-at $start \
      --quiet --out "$WORK/shards-$round/$i" &
  done
  wait $(jobs -p | grep -v "^$SERVER_PID$") 2>/dev/null || true
  "$MSGBENCH" merge "$WORK"/shards-$round/*/sharded-rpc/latest --out "$WORK/merged-$round" --quiet
  read -r m_rate m_p99 m_att _ < <(figures "$WORK/merged-$round/runs/000.json")
  rate=$(python3 -c "print(f'{$m_rate/$one_rate:.3f}')"); p99=$(python3 -c "print(f'{$m_p99/$one_p99:.2f}')")
  rates+=("$rate"); p99s+=("$p99")
  printf "%5s  %12.0f %6.0fµs   %12.0f %6.0fµs              %s/%s   %s  %s\n" \
    "$round" "$one_rate" "$(python3 -c "print($one_p99/1e3)")" "$m_rate" "$(python3 -c "print($m_p99/1e3)")" "$one_att" "$m_att" "$rate" "$p99"
done
echo "median merged/one: delivered rate $(median "${rates[@]}")×, p99 $(median "${p99s[@]}")× (rounds: ${rates[*]} / ${p99s[*]})"
