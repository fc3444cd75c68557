#!/usr/bin/env bash
# What the live view (issue 48, item 4) costs the run it shows: the same open-loop rpc run
# against one `msgbench serve rpc` (on a free loopback port), inside a pseudo-terminal
# (`script`, so that stdout and stderr are terminals as on a desk), with `--progress live`
# (the panel redrawn every second) and `--progress line` (the one-line progress), alternating,
# ROUNDS rounds (default 5), at RATE requests/s (default 20000) over 4 connections for 5 s.
# Prints each round's driver send lag p99 and p99.9 (how late the schedule's sends went out:
# what a drawing that got in the driver's way would move) and the driver's CPU per request,
# then the medians and the ratios live / line.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
RATE=${RATE:-20000}
build_all
machine
rpc_server_in_work 1 600s
figures() {  # DIR: "send_lag_p99_ns send_lag_p999_ns cpu_ns_per_request" of its one run
  python3 - "$1" <<'PY'
import glob, json, sys
r = json.load(open(glob.glob(f"{sys.argv[1]}/*/latest/runs/000.json")[0]))
c = r["counters"]; assert c["delivered"] == c["sent"], c
print(r["send_lag"]["p99_ns"], r["send_lag"]["p999_ns"], r["cpu"]["driver_cpu_s"] / c["sent"] * 1e9)
PY
}
once() {  # PROGRESS ROUND
  local out="$WORK/$1-$2"
  script -qec "'$MSGBENCH' run '$ROOT/examples/sharded-rpc.toml' --set 'rpc.address=\"127.0.0.1:$PORT\"' \
    --set pacing.per_sec=$RATE --set client.connections=4 --duration 5s --warmup 500ms \
    --progress $1 --out '$out'" /dev/null > "$WORK/$1-$2.tty"
  figures "$out"
}
live=(); line=()
for round in $(seq "$ROUNDS"); do
  live+=("$(once live "$round")")
  line+=("$(once line "$round")")
  echo "round $round: send lag p99 / p99.9 / CPU ns per request: live ${live[-1]}  line ${line[-1]}"
done
grep -q "send lag p99" "$WORK/live-1.tty" || { echo "the live view was not drawn" >&2; exit 1; }
python3 - "$RATE" "${live[@]}" -- "${line[@]}" <<'PY'
import statistics, sys
rate = sys.argv[1]; rest = sys.argv[2:]; cut = rest.index("--")
def columns(rows): return [statistics.median(float(r.split()[k]) for r in rows) for k in range(3)]
live, line = columns(rest[:cut]), columns(rest[cut + 1:])
print(f"at {rate}/s, medians: send lag p99 live {live[0]/1e3:.1f} us, line {line[0]/1e3:.1f} us; "
      f"p99.9 live {live[1]/1e3:.1f} us, line {line[1]/1e3:.1f} us; CPU per request live {live[2]:.0f} ns, line {line[2]:.0f} ns")
print(f"live / line: send lag p99 {live[0]/line[0]:.2f}, p99.9 {live[1]/line[1]:.2f}, CPU per request {live[2]/line[2]:.2f}")
PY
