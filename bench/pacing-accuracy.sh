#!/usr/bin/env bash
# Pacing accuracy: open-loop `rate` pacing at 1k, 10k, 100k and 1M messages/s (absolute schedule,
# sleep then spin), producer and consumer pinned, 3 s each; then `relative` sleeping at a nominal
# 1k/s (usleep(1000) after each message) to show the drift it reproduces. Prints achieved rate
# vs target (target: within 0.5 %) and send lag p50/p99/max.
source "$(dirname "$0")/common.sh"
build_all
machine
printf "%-22s %14s %14s %9s %12s %12s %12s\n" pacing target/s achieved/s ratio "lag p50" "lag p99" "lag max"
row() {
  local label="$1"; shift
  msgbench_json "'%-22s %14.0f %14.1f %9.4f %10.1fus %10.1fus %10.1fus' % ('$label', r['target_per_sec'], r['counters']['sent']/r['duration_s'], r['counters']['sent']/r['duration_s']/r['target_per_sec'], r['send_lag']['p50_ns']/1e3, r['send_lag']['p99_ns']/1e3, r['send_lag']['max_ns']/1e3)" \
    --set 'sweep={}' --set queue.pin.producer=0 --set queue.pin.consumer=1 --duration 3s --warmup 500ms "$@"
}
for rate in 1000 10000 100000 1000000; do
  row "rate $rate/s" --set pacing.mode=rate --set pacing.per_sec=$rate
done
row "relative every 1ms" --set pacing.mode=relative --set pacing.every=1ms
echo
echo "floor: what this host lets any sleeper do right now (absolute 1 ms deadlines, timer slack 1 ns, CPU 0):"
"$FLOORS/timer_accuracy" -m abs -p 1000000 -d 3 -s 1 -c 0 | tail -1
echo "(compare with msgbench's send lag: lag above the floor's is msgbench's own; the rest is the host)"
