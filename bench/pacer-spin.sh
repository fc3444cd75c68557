#!/usr/bin/env bash
# The pacer's spin, priced: a paced rpc client (one connection, a window of 32) against `msgbench
# serve rpc` (the run's [sut], one thread, neither pinned: as a user runs it) at 1k, 10k and 50k requests/s, with `pacing.spin`
# 0, 10 µs, 20 µs, 80 µs and `auto` (the default: the smaller of 80 µs and a tenth of the
# interval). Each cell is the median of REPS runs of 3 s (default 3) with the spread (min–max):
# the driver's CPU per second of run (what the spin takes from the host, and on a 2-core box
# from the system measured), the send lag p99 (what the spin buys: how late the sends went) and
# the latency p50/p99 (from the intended send time, so a late wake-up shows there too).
#
#   bash bench/pacer-spin.sh            # about 3 minutes
#   REPS=5 RATES="10000" SPINS="0 80us" bash bench/pacer-spin.sh
source "$(dirname "$0")/common.sh"
REPS="${REPS:-3}"
RATES="${RATES:-1000 10000 50000}"
SPINS="${SPINS:-0 10us 20us 80us auto}"
build_all
machine
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PORT=$(free_port)
# The server is the run's [sut]: its CPU is measured beside the driver's. A window of 32 keeps
# the sends the pacer's (a reply never holds one back at these rates).
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
window = 32
[sut]
command = "exec $MSGBENCH serve rpc --listen 127.0.0.1:$PORT --threads 1"
ready = "127.0.0.1:$PORT"
TOML
printf "%-8s %-6s %-20s %-20s %-24s %-24s %-24s\n" rate/s spin "driver CPU-s per s" "server CPU-s per s" "send lag p99" "latency p50" "latency p99"
cell() { python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(sys.argv[1] % (statistics.median(v), min(v), max(v)))' "$@"; }
for rate in $RATES; do
  for spin in $SPINS; do
    cpu=(); sut=(); lag=(); p50=(); p99=()
    for _ in $(seq "$REPS"); do
      line=$("$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/spin.toml" \
        --set pacing.per_sec=$rate --set "pacing.spin=\"$spin\"" |
        python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; print(r['cpu']['driver_cpu_s']/r['duration_s'], (r['cpu'].get('sut_cpu_s') or 0)/r['duration_s'], r['send_lag']['p99_ns']/1e3, r['latency']['p50_ns']/1e3, r['latency']['p99_ns']/1e3)")
      read -r c v l a b <<<"$line"
      cpu+=("$c"); sut+=("$v"); lag+=("$l"); p50+=("$a"); p99+=("$b")
    done
    printf "%-8s %-6s %-20s %-20s %-24s %-24s %-24s\n" "$rate" "$spin" \
      "$(cell '%.2f (%.2f–%.2f)' "${cpu[@]}")" \
      "$(cell '%.2f (%.2f–%.2f)' "${sut[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${lag[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${p50[@]}")" \
      "$(cell '%.1f µs (%.1f–%.1f)' "${p99[@]}")"
  done
done
