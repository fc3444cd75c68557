#!/usr/bin/env bash
# `msgbench merge` of two one-day shards (issue 43: the per-second merge was quadratic — two
# one-day shards took 28 s, a week ~23 min). Two real shards of a short rpc run (one
# `serve rpc`, --shard 0/2 and 1/2, one --start-at), each then stretched to 86 400 per-second
# intervals in its JSON and its .hlog (the first whole second repeated; counters and the
# run's histogram left as measured, so every check of the merge still applies); the merge is
# timed ROUNDS times. Prints each round's seconds, the median, and the merged interval count.
# The issue's target is under 2 s (2026-11-28, 2 vCPUs: a median of 1.55 s).
#   bash bench/merge-day.sh            ROUNDS=3 SECONDS_PER_SHARD=86400
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
DAY=${SECONDS_PER_SHARD:-86400}
build_all
machine
rpc_server_in_work 1 60s
start=$(( $(date +%s%3N) + 2000 ))
for i in 0 1; do
  "$MSGBENCH" run "$ROOT/examples/sharded-rpc.toml" --set "rpc.address=\"127.0.0.1:$PORT\"" \
    --set "pacing.per_sec=2000" --duration 3s --warmup 0s --shard $i/2 --start-at $start \
    --quiet --out "$WORK/shard-$i" &
done
wait $(jobs -p | grep -v "^$SERVER_PID$") 2>/dev/null || true
python3 - "$DAY" "$WORK"/shard-*/sharded-rpc/latest <<'PY'
import json, sys
day = int(sys.argv[1])
for d in sys.argv[2:]:
    p = f"{d}/runs/000.json"
    r = json.load(open(p))
    whole = [i for i in r["intervals"] if i["length_s"] >= 0.999][0]
    r["intervals"] = [dict(whole, start_s=float(k), length_s=1.0) for k in range(day)]
    r["duration_s"] = float(day)
    json.dump(r, open(p, "w"))
    lines = open(f"{d}/runs/000.hlog").read().splitlines()
    head = [l for l in lines if l.startswith("#") or l.startswith('"')]
    body = [l for l in lines if l and l[0].isdigit()]
    first = body[0].split(",", 2)
    rest = first[2]
    with open(f"{d}/runs/000.hlog", "w") as f:
        f.write("\n".join(head) + "\n")
        for k in range(day):
            f.write(f"{k}.000,1.000,{rest}\n")
PY
times=()
for round in $(seq "$ROUNDS"); do
  rm -rf "$WORK/merged"
  t0=$(date +%s.%N)
  "$MSGBENCH" merge "$WORK"/shard-*/sharded-rpc/latest --out "$WORK/merged" --quiet
  t1=$(date +%s.%N)
  s=$(python3 -c "print(f'{$t1-$t0:.2f}')")
  times+=("$s")
  echo "round $round: merge of two $DAY-second shards took $s s"
done
python3 -c "
import json,statistics,sys
t=[float(x) for x in sys.argv[2:]]
r=json.load(open(sys.argv[1]))
print(f'median {statistics.median(t):.2f} s over {len(t)} rounds (min {min(t):.2f}, max {max(t):.2f}); merged run: {len(r[\"intervals\"])} intervals')
" "$WORK/merged/runs/000.json" "${times[@]}"
