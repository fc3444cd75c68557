#!/bin/bash
# msgbench slurm: experiment {experiment} as {shards} shards, a job array of {shards} one-task
# jobs. The shards start {start_note}: submit before then (sbatch THIS-FILE).
# Array task I runs shard I (`msgbench run --shard slurm`); array task 0 also submits the
# merge, a job that waits for every task of the array (afterany: it merges what they wrote,
# whatever became of them):
#   {results_note}/ARRAYJOBID/shard-I/     each task's result directory
#   {results_note}/ARRAYJOBID/merged/      the merged result (report.md, report.html)
# A task that failed, or started after the agreed start, is named by the merge (shard I/{shards}
# missing) and fails the merge job. If task 0 never runs, no merge job is submitted: merge by
# hand, `msgbench merge RESULTS/ARRAYJOBID/shard-*/*/latest --out RESULTS/ARRAYJOBID/merged`.
#SBATCH --job-name={job}
#SBATCH --array=0-{last}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --output={job}-%A_%a.out
{options}set -u
MSGBENCH={msgbench}
JOB_DIR={results}/"$SLURM_ARRAY_JOB_ID"
TASK_DIR="$JOB_DIR/shard-$SLURM_ARRAY_TASK_ID"
mkdir -p "$TASK_DIR" || exit 1
# The resolved scenario (every --set applied when this script was printed).
cat >"$TASK_DIR/scenario.toml" <<'{eof}'
{scenario}{eof}
merge_failed=0
# Task 0 submits the merge, once (a requeued task 0 finds the lock taken), under this job's
# account and QOS: afterany, so it runs when every task of the array has ended, however.
if [ "$SLURM_ARRAY_TASK_ID" = 0 ] && mkdir "$JOB_DIR/merge.lock" 2>/dev/null; then
  printf '#!/bin/bash\nexec %q merge %q/shard-*/*/latest --out %q\n' \
    "$MSGBENCH" "$JOB_DIR" "$JOB_DIR/merged" >"$JOB_DIR/merge.sh"
  account=()
  [ -n "${SLURM_JOB_ACCOUNT:-}" ] && account+=(--account="$SLURM_JOB_ACCOUNT")
  [ -n "${SLURM_JOB_QOS:-}" ] && account+=(--qos="$SLURM_JOB_QOS")
  if ! sbatch --parsable --dependency=afterany:"$SLURM_ARRAY_JOB_ID" --job-name={job}-merge \
    --ntasks=1 --time=30 --output={job}-"$SLURM_ARRAY_JOB_ID"-merge.out "${account[@]}" \
    {merge_options}"$JOB_DIR/merge.sh" >"$JOB_DIR/merge-job"; then
    echo FAILED >"$JOB_DIR/merge-job"
    echo "msgbench slurm: the merge job was not submitted; merge by hand: $(tail -n 1 "$JOB_DIR/merge.sh")" >&2
    merge_failed=1
  fi
fi
"$MSGBENCH" run "$TASK_DIR/scenario.toml" --shard slurm --start-at {start} \
  --out "$TASK_DIR" --quiet
status=$?
[ "$merge_failed" = 0 ] || exit 1
exit "$status"
