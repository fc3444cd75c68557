#!/usr/bin/env bash
# examples/sharded-rpc.toml launched by a real Slurm cluster (issue 50): the one-node cluster of
# scripts/slurm-cluster.sh, one `serve rpc`, and the scripts `msgbench slurm` prints piped to
# sbatch — one job of 4 tasks under srun, then a job array of 4 with its dependent merge job,
# then a job whose task 2 is killed mid-run. Each merged result beside one process offering the
# same schedule (attempted must be equal, to the message); the killed job's merge step names
# the missing shard. Prints what the jobs printed. About a minute. docs/distributed.md quotes it.
#
#   bash bench/slurm.sh        RATE=8000 DURATION=3s
source "$(dirname "$0")/common.sh"
RATE=${RATE:-8000}
DURATION=${DURATION:-3s}
build_all
machine
rpc_server_in_work 1 10m
CLUSTER="$WORK/cluster"
trap 'bash "$ROOT/scripts/slurm-cluster.sh" stop "$CLUSTER"; stop_server; rm -rf "$WORK"' EXIT
bash "$ROOT/scripts/slurm-cluster.sh" start "$CLUSTER" >/dev/null
export SLURM_CONF="$CLUSTER/slurm.conf"
echo "slurm: $(sinfo --version), node: $(sinfo -h -N -o '%N %c CPUs %t')"
SET=(--set "rpc.address=\"127.0.0.1:$PORT\"" --set "pacing.per_sec=$RATE" --duration "$DURATION")
cd "$WORK"
attempted() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['counters']['attempted'])" "$1"; }

"$MSGBENCH" run "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --quiet --out one
ONE=$(attempted one/sharded-rpc/latest/runs/000.json)
echo "one process: attempted $ONE"

echo
echo "== msgbench slurm examples/sharded-rpc.toml --shards 4 --tasks-per-node 4 ... | sbatch --wait"
"$MSGBENCH" slurm "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --shards 4 --tasks-per-node 4 \
  --cpus-per-task 1 --results srun 2>/dev/null | sbatch --wait
JOB=$(ls srun)
cat "msgbench-sharded-rpc-$JOB.out"
echo "attempted: one process $ONE, 4 Slurm tasks merged $(attempted "srun/$JOB/merged/runs/000.json")"

echo
echo "== the same with --array --start-at +15s: a job array of 4 and a dependent merge job"
"$MSGBENCH" slurm "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --shards 4 --array \
  --start-at +15s --cpus-per-task 1 --results array 2>/dev/null | sbatch
for _ in $(seq 240); do [ -z "$(squeue -h)" ] && break; sleep 0.5; done
JOB=$(ls array)
echo "merge job $(cat "array/$JOB/merge-job"):"
cat msgbench-sharded-rpc-*-merge.out
echo "attempted: one process $ONE, 4 array tasks merged $(attempted "array/$JOB/merged/runs/000.json")"

echo
echo "== a job whose task 2 is killed (SIGKILL) 2 s into its run"
"$MSGBENCH" slurm "$ROOT/examples/sharded-rpc.toml" "${SET[@]}" --shards 4 --tasks-per-node 4 \
  --cpus-per-task 1 --start-at +2s --results killed 2>/dev/null | sbatch --wait &
SUBMIT=$!
victim=""
for _ in $(seq 200); do
  for p in $(pgrep -f -- "--shard slurm" || true); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=2" &&
       [ "$(cat "/proc/$p/comm" 2>/dev/null)" = msgbench ]; then victim=$p; fi
  done
  [ -n "$victim" ] && break
  sleep 0.05
done
[ -n "$victim" ] || { echo "task 2 never started" >&2; exit 1; }
sleep 4
kill -KILL "$victim"
code=0; wait "$SUBMIT" || code=$?
JOB=$(ls killed)
cat "msgbench-sharded-rpc-$JOB.out"
echo "sbatch --wait exit code: $code"
for i in 0 1 3; do
  python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))
print('shard', sys.argv[2], 'measured', r['duration_s'], 's, attempted', r['counters']['attempted'], ', delivered', r['counters']['delivered'])" \
    "killed/$JOB/shard-$i/sharded-rpc/latest/runs/000.json" "$i/4"
done
