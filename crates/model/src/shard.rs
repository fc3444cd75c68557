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
    /// Kubernetes Indexed Job), `slurm` takes both from `SLURM_PROCID`/`SLURM_NTASKS`.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let usage = "give I/N with 0 ≤ I < N (e.g. --shard 0/4), k8s/N (index from \
                     JOB_COMPLETION_INDEX) or slurm (SLURM_PROCID/SLURM_NTASKS)";
        let from_env = |name: &str| -> Result<String, String> {
            env(name).ok_or_else(|| format!("--shard {text}: {name} is not set; {usage}"))
        };
        let (index, count, from) = match text.trim() {
            "slurm" => (
                from_env("SLURM_PROCID")?,
                from_env("SLURM_NTASKS")?,
                "SLURM_PROCID/SLURM_NTASKS",
            ),
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

    /// The global index of this shard's `local`-th item.
    pub fn global(&self, local: usize) -> usize {
        self.index as usize + local * self.count as usize
    }
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
            let slot = run.warmup + run.duration + run.drain_timeout;
            at += slot.as_millis() as u64 + SLOT_SPARE_MS;
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
