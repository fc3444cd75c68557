//! One load generator's slice of a run spread over several (`msgbench run --shard I/N`).
//!
//! A request/response run's schedule is already a set of per-connection schedules: connection
//! `g` of `C` paces itself (rate: `R/C` offset by `g/R`; interval: `batch` every tick; Poisson:
//! its own stream seeded by `g`) and takes `ops/C` of the operation budget (`g < ops % C` one
//! more). Shard `I` of `N` opens the connections `g ≡ I (mod N)` and keeps their global index,
//! so the union of the shards' intended send times *is* the unsharded schedule, exactly, for
//! every pacing mode and budget — nothing is rescaled.
use serde::{Deserialize, Serialize};

/// Most shards of one run.
pub const MAX_SHARDS: u32 = 10_000;

/// Which slice of the run this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u32,
    /// How many shards share the run.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The whole run, unsharded.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// True for shard 0 of 1.
    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// `I/N` as given to `--shard`; `k8s/N` takes `I` from `JOB_COMPLETION_INDEX` (a
    /// Kubernetes Indexed Job), `slurm` takes both from the Slurm task's environment
    /// ([`slurm_task`]).
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let usage = "give I/N with 0 ≤ I < N (e.g. --shard 0/4), k8s/N (index from \
                     JOB_COMPLETION_INDEX) or slurm (the Slurm task: srun's rank, or a job array's index)";
        let from_env = |name: &str| -> Result<String, String> {
            env(name).ok_or_else(|| format!("--shard {text}: {name} is not set; {usage}"))
        };
        let (index, count, from) = match text.trim() {
            "slurm" => {
                let (index, count, from) = slurm_task(env, &from_env)?;
                (index.to_string(), count.to_string(), from)
            }
            t => match t.split_once('/') {
                Some(("k8s", n)) => (
                    from_env("JOB_COMPLETION_INDEX")?,
                    n.to_string(),
                    "JOB_COMPLETION_INDEX/N",
                ),
                Some((i, n)) => (i.to_string(), n.to_string(), "I/N"),
                None => return Err(format!("--shard {text}: {usage}")),
            },
        };
        let number = |s: &str| s.trim().parse::<u32>().ok();
        match (number(&index), number(&count)) {
            (Some(_), Some(0)) => Err(format!("--shard {text}: 0 shards cannot run; {usage}")),
            (Some(i), Some(n)) if i >= n => Err(format!(
                "--shard {text}: shard {i} does not exist when there are {n} (shards count \
                 from 0: the last of {n} is {}/{n})",
                n - 1
            )),
            (Some(_), Some(n)) if n > MAX_SHARDS => Err(format!(
                "--shard {text}: at most {MAX_SHARDS} shards; {usage}"
            )),
            (Some(index), Some(count)) => Ok(Shard { index, count }),
            _ => Err(format!(
                "--shard {text}: {from} is {index:?}/{count:?}, not two whole numbers; {usage}"
            )),
        }
    }

    /// How many of `total` items (connections, clients) are this shard's: those `g` with
    /// `g % count == index`.
    pub fn share_of(&self, total: usize) -> usize {
        let (i, n) = (self.index as usize, self.count as usize);
        total / n + usize::from(i < total % n)
    }

    /// Item `g` of the run (a connection, a publisher, a consumer) is this shard's.
    pub fn holds(&self, g: u64) -> bool {
        g % u64::from(self.count) == u64::from(self.index)
    }

    /// The global index of this shard's `local`-th item.
    pub fn global(&self, local: usize) -> usize {
        self.index as usize + local * self.count as usize
    }
}

/// `--shard slurm`: this Slurm task's place among the job's, as (index, count, where read).
///
/// The variables differ with how the task was launched. Under `srun` (a job step) they are the
/// task's rank `SLURM_PROCID` of the step's `SLURM_STEP_NUM_TASKS` (a step may be smaller than
/// the job: `SLURM_NTASKS` is only the fallback). A task of a job array (`sbatch --array`) has
/// no rank beyond 0 and no `SLURM_NTASKS` at all: its place is its array index,
/// `(SLURM_ARRAY_TASK_ID − MIN) / STEP` of `SLURM_ARRAY_TASK_COUNT` — times the step's tasks
/// when the array task runs `srun -n K` itself. The batch script's own process in a job of
/// several tasks (`SLURM_NTASKS` > 1, no `SLURM_STEP_ID`) is refused: it is one process, and
/// taking rank 0 of N would leave N − 1 shards missing.
fn slurm_task(
    env: &dyn Fn(&str) -> Option<String>,
    from_env: &dyn Fn(&str) -> Result<String, String>,
) -> Result<(u64, u64, &'static str), String> {
    let number = |name: &str| -> Result<Option<u64>, String> {
        match env(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("--shard slurm: {name} is {v:?}, not a whole number")),
        }
    };
    let in_step = env("SLURM_STEP_ID").is_some();
    let step_tasks = match (number("SLURM_STEP_NUM_TASKS")?, number("SLURM_NTASKS")?) {
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => 1,
    };
    let Some(id) = number("SLURM_ARRAY_TASK_ID")? else {
        let rank: u64 = from_env("SLURM_PROCID")?
            .trim()
            .parse()
            .map_err(|_| "--shard slurm: SLURM_PROCID is not a whole number".to_string())?;
        if !in_step && step_tasks > 1 && rank == 0 {
            return Err(format!(
                "--shard slurm: this is the batch script's own process of a job of \
                 {step_tasks} tasks (SLURM_NTASKS={step_tasks}, no SLURM_STEP_ID): it would be \
                 shard 0 of {step_tasks} with no other; start msgbench under srun, which runs \
                 one task per shard (`srun msgbench run … --shard slurm`), or use a job array \
                 (`msgbench slurm` prints either)"
            ));
        }
        return Ok((rank, step_tasks, "SLURM_PROCID/SLURM_STEP_NUM_TASKS"));
    };
    let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = number("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let tasks = number("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
        "--shard slurm: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not".to_string()
    })?;
    let offset = id
        .checked_sub(min)
        .filter(|o| o % step == 0 && o / step < tasks);
    let Some(offset) = offset else {
        return Err(format!(
            "--shard slurm: array task {id} is not one of {tasks} evenly spaced from {min} by \
             {step}: give the array as a range, --array=0-{}",
            tasks.saturating_sub(1)
        ));
    };
    let (rank, per_task) = if in_step {
        (number("SLURM_PROCID")?.unwrap_or(0), step_tasks)
    } else {
        (0, 1)
    };
    Ok((
        offset / step * per_task + rank,
        tasks * per_task,
        "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT",
    ))
}

/// Item `g`'s share of `ops` spread over `total` items (`None`: no budget).
pub fn budget_of(ops: Option<u64>, total: usize, g: usize) -> Option<u64> {
    let total = total.max(1) as u64;
    ops.map(|n| n / total + u64::from((g as u64) < n % total))
}

/// Time every planned run gets beyond its warm-up, duration and drain: to connect (the runner
/// wakes [`SETUP_LEAD_MS`] before the planned start) and write its result.
pub const SLOT_SPARE_MS: u64 = 3_000;
/// How long before a run's planned start the runner begins it (connecting every connection):
/// a run whose connections take longer starts late, and says so.
pub const SETUP_LEAD_MS: u64 = 2_000;

/// The planned start of every run of `experiment` (points × replicates, in order), Unix ms,
/// when the first is to start at `start_at_ms`: each run gets a slot of its warm-up, duration
/// and drain timeout plus [`SLOT_SPARE_MS`], so that every shard starts run `k` at the same
/// instant whatever its connections took. A run ended by an operation budget alone has no
/// known length: followed by another run, it is refused.
pub fn planned_starts(
    experiment: &crate::Experiment,
    start_at_ms: u64,
) -> Result<Vec<u64>, String> {
    let mut starts = Vec::new();
    let mut at = start_at_ms;
    let runs = experiment.run_count();
    for point in &experiment.points {
        let run = &point.scenario.run;
        for _ in 0..experiment.replicates {
            starts.push(at);
            if run.duration.is_zero() && starts.len() < runs {
                return Err(
                    "--start-at: a run ended by run.operations alone has no known \
                            length, so the shards cannot agree when the next one starts; give \
                            run.duration too, or run one point"
                        .into(),
                );
            }
            at += run.slot_ms();
        }
    }
    Ok(starts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn parses_what_users_type_and_refuses_the_rest() {
        assert_eq!(Shard::parse("1/4", &none), Ok(Shard { index: 1, count: 4 }));
        for (bad, says) in [
            ("4/4", "does not exist"),
            ("0/0", "0 shards"),
            ("1", "give I/N"),
            ("a/4", "two whole numbers"),
            ("-1/4", "two whole numbers"),
            ("k8s/4", "JOB_COMPLETION_INDEX is not set"),
            ("slurm", "SLURM_PROCID is not set"),
        ] {
            let e = Shard::parse(bad, &none).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let env = |name: &str| match name {
            "JOB_COMPLETION_INDEX" => Some("3".to_string()),
            "SLURM_PROCID" => Some("2".to_string()),
            "SLURM_NTASKS" => Some("8".to_string()),
            "SLURM_STEP_ID" => Some("0".to_string()),
            _ => None,
        };
        assert_eq!(
            Shard::parse("k8s/4", &env),
            Ok(Shard { index: 3, count: 4 })
        );
        assert_eq!(
            Shard::parse("slurm", &env),
            Ok(Shard { index: 2, count: 8 })
        );
    }

    /// `--shard slurm` under each launch, with the variables Slurm 22.05 set in each (read
    /// off the one-node cluster of scripts/slurm-cluster.sh).
    #[test]
    fn a_slurm_task_finds_its_shard_however_it_was_launched() {
        let parse = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Shard::parse("slurm", &move |name: &str| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        let shard = |index, count| Ok(Shard { index, count });
        // srun -n 2 inside a job of 4 tasks: the step's count, not the job's.
        let step = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ];
        assert_eq!(parse(&step), shard(1, 2));
        // sbatch --array=0-3: rank 0 everywhere and no SLURM_NTASKS.
        let array = [
            ("SLURM_PROCID", "0"),
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(parse(&array), shard(2, 4));
        // --array=10-16:2 — task 14 is the third of four.
        let spaced = [
            ("SLURM_PROCID", "0"),
            ("SLURM_ARRAY_TASK_ID", "14"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(parse(&spaced), shard(2, 4));
        // An array of 4 whose tasks each srun -n 2: 8 shards, array task 3's rank 1 is the last.
        let both = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(parse(&both), shard(7, 8));
        // A one-task job's batch script is shard 0 of 1.
        assert_eq!(
            parse(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]),
            shard(0, 1)
        );
        for (vars, says) in [
            (
                vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")],
                "batch script's own process",
            ),
            (
                vec![
                    ("SLURM_ARRAY_TASK_ID", "7"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "3"),
                ],
                "--array=0-2",
            ),
            (
                vec![("SLURM_ARRAY_TASK_ID", "1")],
                "SLURM_ARRAY_TASK_COUNT is not",
            ),
            (
                vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "four")],
                "not a whole number",
            ),
        ] {
            let e = parse(&vars).unwrap_err();
            assert!(e.contains(says), "{vars:?}: {e}");
        }
    }

    #[test]
    fn the_slices_are_disjoint_and_cover_every_item_and_operation() {
        for total in [1usize, 5, 7, 64, 100] {
            for count in 1..=total.min(9) as u32 {
                let mut seen = vec![0u32; total];
                let mut ops = 0;
                for index in 0..count {
                    let s = Shard { index, count };
                    for local in 0..s.share_of(total) {
                        seen[s.global(local)] += 1;
                        ops += budget_of(Some(1001), total, s.global(local)).unwrap();
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "{total} over {count}");
                assert_eq!(ops, 1001);
            }
        }
    }
}
