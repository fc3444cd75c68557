//! `msgbench compare A B`: per metric, the change from A to B in %, a confidence interval, and a
//! verdict — improved, regressed, no significant change, or no verdict.
//!
//! **Samples are replicates, never seconds.** One run's one-second intervals are correlated
//! (the same host state, the same regime of a bistable ring, the same connection) and say
//! nothing of how much a second invocation would differ: resampling them gave "−21 % improved"
//! between two identical runs. So a verdict needs at least [`MIN_REPLICATES`] replicates on each
//! side; with fewer, the change is shown without an interval and the verdict says how many
//! replicates it needs.
//!
//! **The interval** is Welch's t-interval on the logarithm of each replicate's value: the
//! difference of mean logs is the log of the ratio of geometric means, so the interval is a
//! ratio (latency figures are skewed and multiplicative; a log keeps a doubling and a halving
//! symmetric). Its confidence is Bonferroni-corrected over the metrics of a point, so that the
//! chance of *any* false verdict on a point is at most 5 % (one metric at 1 − 0.05/m). With three
//! replicates the Student quantile is large (≈ 5.1 at 99.3 %, df 4): few replicates give wide
//! intervals, as they should. A and B are shown as the geometric means the interval compares.
//!
//! **A verdict** needs the interval to exclude 0 % *and* the change to exceed the noise
//! threshold: a statistically clear 1 % is not a change worth a verdict, and replicates taken
//! back to back share a host state that a later session does not, so the threshold also absorbs
//! between-session drift (`bench/compare-aa.sh` measures it).
use crate::format::percent;
use msgbench_model::percentile::{latency_columns, SloMetric};
use msgbench_model::result::RunResult;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Replicates each side needs for a verdict.
pub const MIN_REPLICATES: usize = 3;

/// The chance of at least one false verdict on a point, shared by its metrics.
const FAMILY_ALPHA: f64 = 0.05;

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
    /// Too few replicates for an interval: (A's, B's).
    NeedsReplicates(usize, usize),
}

/// One row of a comparison.
#[derive(Debug, Clone)]
pub struct Change {
    /// Metric name.
    pub metric: &'static str,
    /// Geometric mean of A's replicates.
    pub a: f64,
    /// Geometric mean of B's replicates.
    pub b: f64,
    /// B over A, minus 1: the ratio the interval is about.
    pub change: f64,
    /// The confidence interval of the change (ratio of geometric means − 1), when both sides
    /// have enough replicates.
    pub interval: Option<(f64, f64)>,
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
}

/// What a compared metric reads from a run.
#[derive(Clone, Copy)]
enum Read {
    /// A figure of the run.
    Figure(fn(&RunResult) -> f64),
    /// A latency percentile (the columns `compare` shows are chosen in
    /// [`latency_columns::COMPARE`]).
    Latency(SloMetric),
}

impl Read {
    fn of(self, r: &RunResult) -> f64 {
        match self {
            Read::Figure(read) => read(r),
            Read::Latency(m) => m.of(&r.latency) as f64,
        }
    }
}

fn metrics() -> Vec<(&'static str, Better, Read)> {
    let mut metrics = vec![(
        "delivered/s",
        Better::Higher,
        Read::Figure(|r| r.delivered_per_sec()),
    )];
    let latency = latency_columns::COMPARE.iter();
    metrics.extend(latency.map(|m| (m.name(), Better::Lower, Read::Latency(*m))));
    metrics.push((
        "CPU/msg",
        Better::Lower,
        Read::Figure(|r| r.cpu.driver_cpu_s / r.counters.delivered.max(1) as f64),
    ));
    metrics
}

/// The metrics a comparison judges, by name.
pub fn metric_names() -> Vec<&'static str> {
    metrics().iter().map(|(name, _, _)| *name).collect()
}

/// How much worse B is than A on `c`'s metric, as a fraction (negative: better): a rise for
/// latency and CPU, a fall for throughput.
pub fn worse_by(c: &Change) -> f64 {
    match metrics().iter().find(|(name, _, _)| *name == c.metric) {
        Some((_, Better::Higher, _)) => -c.change,
        _ => c.change,
    }
}

/// Compares B against A; `noise` is the smallest relative change given a verdict.
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
    let judged = metrics().len();
    let mut out = Vec::new();
    for (metric, better, read) in metrics() {
        let xa: Vec<f64> = a.iter().map(|r| read.of(r)).collect();
        let xb: Vec<f64> = b.iter().map(|r| read.of(r)).collect();
        let (ma, mb) = (geometric_mean(&xa), geometric_mean(&xb));
        if ma <= 0.0 {
            continue; // nothing measured in A (no latency, no CPU figure): no baseline
        }
        // The ratio the interval is about: a B that delivered nothing is −100 %, not a
        // missing row.
        let change = mb / ma - 1.0;
        let (interval, verdict) = if a.len() < MIN_REPLICATES || b.len() < MIN_REPLICATES {
            (None, Verdict::NeedsReplicates(a.len(), b.len()))
        } else {
            let (low, high) = log_ratio_interval(&xa, &xb, FAMILY_ALPHA / judged as f64);
            (Some((low, high)), judge(change, (low, high), noise, better))
        };
        out.push(Change {
            metric,
            a: ma,
            b: mb,
            change,
            interval,
            verdict,
        });
    }
    Ok(out)
}

/// Improved or regressed when the interval excludes 0 % and the change exceeds the noise.
fn judge(change: f64, (low, high): (f64, f64), noise: f64, better: Better) -> Verdict {
    let significant = (low > 0.0 || high < 0.0) && change.abs() > noise;
    match (significant, (change > 0.0) == (better == Better::Higher)) {
        (false, _) => Verdict::NoSignificantChange,
        (true, true) => Verdict::Improved,
        (true, false) => Verdict::Regressed,
    }
}

/// Welch's two-sided (1 − alpha) interval of geomean(B) / geomean(A) − 1. Values must be
/// positive; a zero is clamped to the smallest positive number (and then dominates the spread).
fn log_ratio_interval(xa: &[f64], xb: &[f64], alpha: f64) -> (f64, f64) {
    let logs =
        |xs: &[f64]| -> Vec<f64> { xs.iter().map(|x| x.max(f64::MIN_POSITIVE).ln()).collect() };
    let (la, lb) = (logs(xa), logs(xb));
    let (ma, va, na) = mean_var(&la);
    let (mb, vb, nb) = mean_var(&lb);
    let diff = mb - ma;
    let (sa, sb) = (va / na, vb / nb);
    let se = (sa + sb).sqrt();
    if se == 0.0 {
        return (diff.exp_m1(), diff.exp_m1()); // identical replicates on each side
    }
    let df = (sa + sb).powi(2) / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let t = StudentsT::new(0.0, 1.0, df)
        .map(|d| d.inverse_cdf(1.0 - alpha / 2.0))
        .unwrap_or(f64::INFINITY);
    ((diff - t * se).exp_m1(), (diff + t * se).exp_m1())
}

/// exp(mean(ln x)); 0 when any value is 0 (nothing measured in a replicate).
fn geometric_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() || xs.iter().any(|&x| x <= 0.0) {
        return 0.0;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

/// Mean, sample variance and count.
fn mean_var(xs: &[f64]) -> (f64, f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var, n)
}

pub(crate) use msgbench_model::stats::median;

/// Renders the comparison as a Markdown table.
pub fn table(changes: &[Change], noise: f64) -> String {
    let mut out = String::from(
        "| metric | A | B | change | interval | verdict |\n|---|---|---|---|---|---|\n",
    );
    let signed = |v: f64| format!("{}{}", if v >= 0.0 { "+" } else { "−" }, percent(v.abs()));
    for c in changes {
        let show = |v: f64| match c.metric {
            "delivered/s" => crate::format::count(v),
            "CPU/msg" => crate::format::duration_ns((v * 1e9) as u64),
            _ => crate::format::duration_ns(v as u64),
        };
        let interval = c
            .interval
            .map(|(low, high)| format!("{} … {}", signed(low), signed(high)))
            .unwrap_or_else(|| "–".into());
        out.push_str(&format!(
            "| {} | {} | {} | {} | {interval} | {} |\n",
            c.metric,
            show(c.a),
            show(c.b),
            signed(c.change),
            verdict_text(&c.verdict)
        ));
    }
    if let Some(Verdict::NeedsReplicates(na, nb)) = changes.first().map(|c| &c.verdict) {
        out.push_str(&format!(
            "\nNo verdict: A has {na} and B has {nb} replicate(s); a verdict needs at least {MIN_REPLICATES} on each side (rerun both with --replicates {MIN_REPLICATES}). One run's seconds are not independent samples: they cannot tell a change from the difference between two invocations.\n"
        ));
    } else {
        out.push_str(&format!(
            "\nInterval: Welch's t on the log of each replicate, {} confidence per metric (95 % for the point's {} metrics together). Noise threshold {}: smaller changes, or intervals that include 0 %, are no significant change.\n",
            percent(1.0 - FAMILY_ALPHA / metrics().len() as f64),
            metrics().len(),
            percent(noise)
        ));
    }
    out
}

/// The verdict as the table prints it.
pub fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Improved => "improved".into(),
        Verdict::Regressed => "regressed".into(),
        Verdict::NoSignificantChange => "no significant change".into(),
        Verdict::NeedsReplicates(..) => format!("no verdict (needs {MIN_REPLICATES} replicates)"),
    }
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
            send_lag_limit_ns: None,
            target_per_sec: None,
            schedule_s: None,
            interrupted: false,
            counters: Counters {
                attempted: rate as u64,
                sent: rate as u64,
                delivered: rate as u64,
                ..Default::default()
            },
            sequence: SequenceErrors::default(),
            early: Default::default(),
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
            send_lag_split: Default::default(),
            unanswered: Percentiles::default(),
            publish_latency: None,
            streamed: None,
            classes: vec![],
            cpu: CpuUsage {
                driver_cpu_s: 1.0,
                ..Default::default()
            },
            intervals: vec![],
            stages: vec![],
            histograms: Histograms::default(),
            warnings: vec![],
            streams: vec![],
            connections: vec![],
            fairness: vec![],
            info: vec![],
            shard: None,
            pubsub_shard: None,
            shards: vec![],
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
        assert!(
            (p99.change - 0.97).abs() < 0.05 && p99.interval.unwrap().0 > 0.5,
            "{p99:?}"
        );
    }

    #[test]
    fn one_replicate_gives_the_change_but_no_verdict() {
        let a = vec![run(1, 1000.0, 100)];
        let b = vec![
            run(1, 1000.0, 200),
            run(2, 1000.0, 200),
            run(3, 1000.0, 200),
        ];
        let c = compare(&a, &b, 0.05).unwrap();
        let p99 = c.iter().find(|c| c.metric == "p99").unwrap();
        assert!((p99.change - 1.0).abs() < 1e-9, "{p99:?}");
        assert_eq!(p99.interval, None);
        assert_eq!(p99.verdict, Verdict::NeedsReplicates(1, 3));
        let text = table(&c, 0.05);
        assert!(text.contains("a verdict needs at least 3"), "{text}");
        assert!(!text.contains("regressed"), "{text}");
    }

    #[test]
    fn the_interval_widens_with_few_replicates_and_covers_an_equal_pair() {
        let xs = [100.0, 110.0, 90.0];
        let (low, high) = log_ratio_interval(&xs, &xs, 0.05);
        assert!(low < 0.0 && high > 0.0, "{low} {high}");
        let many: Vec<f64> = (0..30).map(|i| xs[i % 3]).collect();
        let (low30, high30) = log_ratio_interval(&many, &many, 0.05);
        assert!(high30 - low30 < (high - low) / 3.0, "{low30} {high30}");
        // A tenfold change with tight replicates is outside any reasonable interval.
        let b: Vec<f64> = xs.iter().map(|x| x * 10.0).collect();
        let (low, high) = log_ratio_interval(&xs, &b, 0.05 / 7.0);
        assert!(low > 5.0 && high < 15.0, "{low} {high}");
    }

    #[test]
    fn a_change_below_the_noise_threshold_is_no_verdict_even_when_clear() {
        assert_eq!(
            judge(0.02, (0.01, 0.03), 0.05, Better::Lower),
            Verdict::NoSignificantChange
        );
        assert_eq!(
            judge(0.2, (0.1, 0.3), 0.05, Better::Lower),
            Verdict::Regressed
        );
        assert_eq!(
            judge(0.2, (0.1, 0.3), 0.05, Better::Higher),
            Verdict::Improved
        );
        assert_eq!(
            judge(0.2, (-0.1, 0.5), 0.05, Better::Higher),
            Verdict::NoSignificantChange
        );
    }

    #[test]
    fn different_systems_are_refused() {
        let b = vec![run(1, 1000.0, 100), run(2, 1000.0, 100)];
        let mut a = b.clone();
        a[0].system = msgbench_model::scenario::SystemKind::Rpc;
        assert!(matches!(
            compare(&a, &b, 0.05),
            Err(CompareError::DifferentSystems { .. })
        ));
        assert_eq!(
            compare(&[], &b, 0.05).unwrap_err(),
            CompareError::Empty("A")
        );
    }
}
