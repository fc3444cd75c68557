#!/bin/bash
# msgbench slurm: experiment {experiment} as {shards} shards, one job of {shards} tasks.
# The shards start {start_note}.
# Submit: sbatch THIS-FILE (or pipe `msgbench slurm ...` into sbatch). srun starts every task
# (`msgbench run --shard slurm`: shard I is task I); when all have ended, the last step merges
# what they wrote:
#   {results_note}/JOBID/shard-I/     each task's result directory
#   {results_note}/JOBID/merged/      the merged result (report.md, report.html)
# A task that failed is named by the merge (shard I/{shards} missing) and fails the job.
#SBATCH --job-name={job}
#SBATCH --ntasks={shards}
#SBATCH --ntasks-per-node={per_node}
#SBATCH --cpus-per-task={cpus}
#SBATCH --output={job}-%j.out
# A node that fails does not end the job: the merge still runs and names its shards.
#SBATCH --no-kill
{options}set -u
MSGBENCH={msgbench}
JOB_DIR={results}/"$SLURM_JOB_ID"
mkdir -p "$JOB_DIR" || exit 1
# The resolved scenario (every --set applied when this script was printed).
cat >"$JOB_DIR/scenario.toml" <<'{eof}'
{scenario}{eof}
# One start for every task, computed once: here, after the allocation, so that no task can
# wait in the queue past it.
START={start}
echo "msgbench slurm: job $SLURM_JOB_ID, {shards} shards starting at $START (Unix ms)"
# --kill-on-bad-exit=0 --wait=0: a task that fails (or ends early) does not end the others;
# the merge names it. --cpus-per-task again: since Slurm 22.05 srun does not take sbatch's.
srun --kill-on-bad-exit=0 --wait=0 --cpus-per-task={cpus} bash -c \
  '"$0" run "$1" --shard slurm --start-at "$2" --out "$3/shard-$SLURM_PROCID" --quiet' \
  "$MSGBENCH" "$JOB_DIR/scenario.toml" "$START" "$JOB_DIR"
echo "msgbench slurm: srun ended with status $?; merging what the shards wrote"
shopt -s nullglob
written=("$JOB_DIR"/shard-*/*/latest)
if [ ${#written[@]} -eq 0 ]; then
  echo "msgbench slurm: no shard wrote a result: all {shards} are missing (the srun lines above say why)" >&2
  exit 1
fi
"$MSGBENCH" merge "${written[@]}" --out "$JOB_DIR/merged"
