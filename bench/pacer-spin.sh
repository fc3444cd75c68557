#!/usr/bin/env bash
# The pacer's spin, priced: a paced rpc client against `msgbench serve rpc` (another process, one
# thread, neither pinned: as a user runs it) at 1k, 10k and 50k requests/s, with `pacing.spin`
# 0, 10 µs, 20 µs, 80 µs and `auto` (the default: the smaller of 80 µs and a tenth of the
# interval). Each cell is the median of REPS runs of 3 s (default 3) with the spread (min–max):
# the driver's CPU per second of run (what the spin takes from the host, and on a 2-core box
# from the system measured), the send lag p99 (what the spin buys: how late the sends went) and
# the latency p50/p99 (from the intended send time, so a late wake-up shows there too).
#
#   bash bench/pacer-spin.sh            # about 3 minutes
#   REPS=5 bash bench/pacer-spin.sh
source "$(dirname "$0")/common.sh"
REPS="${REPS:-3}"
build_all
machine
rpc_server_in_work 1 600
cat > "$WORK/spin.toml" <<TOML
name = "pacer-spin"
system = "rpc"
[run]
duration = "3s"
warmup = "500ms"
[pacing]
mode = "rate"
[rpc]
address = "127.0.0.1:$PORT"
[client]
connections = 1
TOML
printf "%-8s %-6s %-22s %-24s %-24s %-24s\n" rate/s spin "driver CPU-s per s" "send lag p99" "latency p50" "latency p99"
cell() { python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(sys.argv[1] % (statistics.median(v), min(v), max(v)))' "$@"; }
for rate in 1000 10000 50000; do
  for spin in 0 10us 20us 80us auto; do
    cpu=(); lag=(); p50=(); p99=()
    for _ in $(seq "$REPS"); do
      line=$("$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/spin.toml" \
        --set pacing.per_sec=$rate --set "pacing.spin=\"$spin\"" |
        python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; print(r['cpu']['driver_cpu_s']/r['duration_s'], r['send_lag']['p99_ns']/1e3, r['latency']['p50_ns']/1e3, r['latency']['p99_ns']/1e3)")
      read -r c l a b <<<"$line"
      cpu+=("$c"); lag+=("$l"); p50+=("$a"); p99+=("$b")
    done
    printf "%-8s %-6s %-22s %-24s %-24s %-24s\n" "$rate" "$spin" \
      "$(cell '%.2f (%.2f–%.2f)' "${cpu[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${lag[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${p50[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${p99[@]}")"
  done
done
