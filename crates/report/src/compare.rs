//! `msgbench compare A B`: per metric, the change from A to B in %, a 95 % bootstrap confidence
//! interval, and a verdict — improved, regressed, or no significant change.
//!
//! Samples are the replicates of each side when both have at least 2; otherwise the one-second
//! intervals of the measured window (rate, p50, p99, max per second). The bootstrap resamples
//! each side with replacement, takes the ratio of medians, and reads the 2.5th and 97.5th
//! percentiles of 2000 such ratios (seeded: the same inputs always give the same answer). A
//! change is significant when the interval excludes 0 % and the median change exceeds the noise
//! threshold.
use crate::format::percent;
use msgbench_model::result::RunResult;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Resamples per metric.
const RESAMPLES: usize = 2000;

/// Whether higher values of a metric are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Throughput.
    Higher,
    /// Latency, CPU.
    Lower,
}

/// The outcome for one metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// B is better beyond noise.
    Improved,
    /// B is worse beyond noise.
    Regressed,
    /// The interval includes 0 % or the change is below the noise threshold.
    NoSignificantChange,
}

/// One row of a comparison.
#[derive(Debug, Clone)]
pub struct Change {
    /// Metric name.
    pub metric: &'static str,
    /// Median of A's samples.
    pub a: f64,
    /// Median of B's samples.
    pub b: f64,
    /// (B − A) / A of the medians.
    pub change: f64,
    /// 95 % confidence interval of the change.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// Why two result sets cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompareError {
    /// One side has no runs.
    #[error("{0} has no runs to compare")]
    Empty(&'static str),
    /// Different systems under test.
    #[error(
        "A measured `{a}` and B measured `{b}`: results of different systems are not comparable"
    )]
    DifferentSystems {
        /// A's system.
        a: String,
        /// B's system.
        b: String,
    },
    /// Too few samples for an interval.
    #[error("{0} has fewer than 2 replicates and fewer than 2 full one-second intervals; rerun with --replicates 3 or a longer --duration")]
    TooFewSamples(&'static str),
}

type Read = fn(&Samples) -> Vec<f64>;

/// The samples of one side: replicates, or seconds of a single run.
struct Samples<'a> {
    runs: &'a [RunResult],
}

impl Samples<'_> {
    fn by_replicate(&self, f: impl Fn(&RunResult) -> f64) -> Option<Vec<f64>> {
        (self.runs.len() >= 2).then(|| self.runs.iter().map(f).collect())
    }

    fn by_second(&self, f: impl Fn(&msgbench_model::result::IntervalSample) -> f64) -> Vec<f64> {
        let r = &self.runs[0];
        r.intervals
            .iter()
            .filter(|i| i.length_s >= 0.9 && i.start_s + i.length_s <= r.duration_s + 0.01)
            .map(f)
            .collect()
    }
}

fn metrics() -> Vec<(&'static str, Better, Read)> {
    vec![
        ("delivered/s", Better::Higher, |s| {
            s.by_replicate(|r| r.delivered_per_sec())
                .unwrap_or_else(|| s.by_second(|i| i.delivered as f64 / i.length_s))
        }),
        ("p50", Better::Lower, |s| {
            s.by_replicate(|r| r.latency.p50_ns as f64)
                .unwrap_or_else(|| s.by_second(|i| i.latency_p50_ns as f64))
        }),
        ("p99", Better::Lower, |s| {
            s.by_replicate(|r| r.latency.p99_ns as f64)
                .unwrap_or_else(|| s.by_second(|i| i.latency_p99_ns as f64))
        }),
        ("p99.9", Better::Lower, |s| {
            s.by_replicate(|r| r.latency.p999_ns as f64)
                .unwrap_or_default()
        }),
        ("p99.99", Better::Lower, |s| {
            s.by_replicate(|r| r.latency.p9999_ns as f64)
                .unwrap_or_default()
        }),
        ("max", Better::Lower, |s| {
            s.by_replicate(|r| r.latency.max_ns as f64)
                .unwrap_or_else(|| s.by_second(|i| i.latency_max_ns as f64))
        }),
        ("CPU/msg", Better::Lower, |s| {
            s.by_replicate(|r| r.cpu.driver_cpu_s / r.counters.delivered.max(1) as f64)
                .unwrap_or_default()
        }),
    ]
}

/// Compares B against A; `noise` is the smallest relative change reported as significant.
pub fn compare(a: &[RunResult], b: &[RunResult], noise: f64) -> Result<Vec<Change>, CompareError> {
    let (first_a, first_b) = (
        a.first().ok_or(CompareError::Empty("A"))?,
        b.first().ok_or(CompareError::Empty("B"))?,
    );
    if first_a.system != first_b.system {
        return Err(CompareError::DifferentSystems {
            a: first_a.system.to_string(),
            b: first_b.system.to_string(),
        });
    }
    let (sa, sb) = (Samples { runs: a }, Samples { runs: b });
    let mut rng = SmallRng::seed_from_u64(0x6d73_6762);
    let mut out = Vec::new();
    for (metric, better, read) in metrics() {
        let (xa, xb) = (read(&sa), read(&sb));
        if metric == "delivered/s" {
            if xa.len() < 2 {
                return Err(CompareError::TooFewSamples("A"));
            }
            if xb.len() < 2 {
                return Err(CompareError::TooFewSamples("B"));
            }
        }
        if xa.len() < 2 || xb.len() < 2 || median(&xa) == 0.0 {
            continue; // e.g. p99.99 needs replicates: seconds have no p99.99 of their own
        }
        let change = median(&xb) / median(&xa) - 1.0;
        let mut ratios: Vec<f64> = (0..RESAMPLES)
            .map(|_| {
                median(&resample(&xb, &mut rng))
                    / median(&resample(&xa, &mut rng)).max(f64::MIN_POSITIVE)
                    - 1.0
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let (low, high) = (
            ratios[RESAMPLES * 25 / 1000],
            ratios[RESAMPLES * 975 / 1000],
        );
        let significant = (low > 0.0 || high < 0.0) && change.abs() > noise;
        let verdict = match (significant, (change > 0.0) == (better == Better::Higher)) {
            (false, _) => Verdict::NoSignificantChange,
            (true, true) => Verdict::Improved,
            (true, false) => Verdict::Regressed,
        };
        out.push(Change {
            metric,
            a: median(&xa),
            b: median(&xb),
            change,
            low,
            high,
            verdict,
        });
    }
    Ok(out)
}

fn resample(xs: &[f64], rng: &mut SmallRng) -> Vec<f64> {
    (0..xs.len())
        .map(|_| xs[rng.gen_range(0..xs.len())])
        .collect()
}

pub(crate) use msgbench_model::stats::median;

/// Renders the comparison as a Markdown table.
pub fn table(changes: &[Change], noise: f64) -> String {
    let mut out = String::from(
        "| metric | A | B | change | 95 % interval | verdict |\n|---|---|---|---|---|---|\n",
    );
    for c in changes {
        let show = |v: f64| {
            if c.metric == "delivered/s" {
                crate::format::count(v)
            } else {
                crate::format::duration_ns(if c.metric == "CPU/msg" {
                    (v * 1e9) as u64
                } else {
                    v as u64
                })
            }
        };
        let signed = |v: f64| format!("{}{}", if v >= 0.0 { "+" } else { "−" }, percent(v.abs()));
        let verdict = match c.verdict {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::NoSignificantChange => "no significant change",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} … {} | {verdict} |\n",
            c.metric,
            show(c.a),
            show(c.b),
            signed(c.change),
            signed(c.low),
            signed(c.high)
        ));
    }
    out.push_str(&format!("\nNoise threshold {}: smaller changes, or intervals that include 0 %, are reported as no significant change.\n", percent(noise)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::histogram::Percentiles;
    use msgbench_model::result::*;

    fn run(replicate: u32, rate: f64, p99: u64) -> RunResult {
        RunResult {
            schema_version: SCHEMA_VERSION,
            run_id: format!("r{replicate}"),
            experiment: "t".into(),
            point: 0,
            replicate,
            params: vec![],
            system: msgbench_model::scenario::SystemKind::Queue,
            config: String::new(),
            started_unix_ms: 0,
            duration_s: 1.0,
            warmup_s: 0.0,
            target_per_sec: None,
            interrupted: false,
            counters: Counters {
                attempted: rate as u64,
                sent: rate as u64,
                delivered: rate as u64,
                ..Default::default()
            },
            sequence: SequenceErrors::default(),
            faults: Default::default(),
            latency: Percentiles {
                p50_ns: p99 / 10,
                p99_ns: p99,
                p999_ns: p99 * 2,
                p9999_ns: p99 * 3,
                max_ns: p99 * 4,
                ..Default::default()
            },
            service: Percentiles::default(),
            send_lag: Percentiles::default(),
            unanswered: Percentiles::default(),
            classes: vec![],
            cpu: CpuUsage {
                driver_cpu_s: 1.0,
                ..Default::default()
            },
            intervals: vec![],
            histograms: Histograms::default(),
            warnings: vec![],
            streams: vec![],
        }
    }

    fn verdict(changes: &[Change], metric: &str) -> Verdict {
        changes
            .iter()
            .find(|c| c.metric == metric)
            .unwrap()
            .verdict
            .clone()
    }

    #[test]
    fn replicates_of_one_configuration_show_no_significant_change() {
        let a: Vec<_> = [(1000.0, 100), (1010.0, 104), (990.0, 98)]
            .iter()
            .enumerate()
            .map(|(i, &(r, p))| run(i as u32 + 1, r, p))
            .collect();
        let b: Vec<_> = [(1005.0, 101), (995.0, 103), (1002.0, 97)]
            .iter()
            .enumerate()
            .map(|(i, &(r, p))| run(i as u32 + 1, r, p))
            .collect();
        let c = compare(&a, &b, 0.05).unwrap();
        assert!(
            c.iter().all(|c| c.verdict == Verdict::NoSignificantChange),
            "{c:?}"
        );
    }

    #[test]
    fn a_doubled_latency_is_a_regression_and_a_higher_rate_an_improvement() {
        let a: Vec<_> = (1..=5)
            .map(|i| run(i, 1000.0 + i as f64, 100 + i as u64))
            .collect();
        let b: Vec<_> = (1..=5)
            .map(|i| run(i, 1500.0 + i as f64, 200 + i as u64))
            .collect();
        let c = compare(&a, &b, 0.05).unwrap();
        assert_eq!(verdict(&c, "p99"), Verdict::Regressed);
        assert_eq!(verdict(&c, "delivered/s"), Verdict::Improved);
        let p99 = c.iter().find(|c| c.metric == "p99").unwrap();
        assert!((p99.change - 0.97).abs() < 0.05 && p99.low > 0.5, "{p99:?}");
    }

    #[test]
    fn different_systems_and_thin_samples_are_refused() {
        let a = vec![run(1, 1000.0, 100)];
        let mut b = vec![run(1, 1000.0, 100), run(2, 1000.0, 100)];
        assert_eq!(
            compare(&a, &b, 0.05).unwrap_err(),
            CompareError::TooFewSamples("A")
        );
        b[0].system = msgbench_model::scenario::SystemKind::Rpc;
        assert!(matches!(
            compare(
                &b,
                &b.clone()
                    .into_iter()
                    .map(|mut r| {
                        r.system = msgbench_model::scenario::SystemKind::Queue;
                        r
                    })
                    .collect::<Vec<_>>(),
                0.05
            ),
            Err(CompareError::DifferentSystems { .. })
        ));
    }
}
