//! Validity verdicts: may a run's numbers be trusted? A run is invalid when the engine warned
//! about it (target rate missed, driver late, sequence errors, messages left in flight,
//! interrupted) or when it was not in a steady state: delivered rate or p99 still trending
//! across its one-second intervals.
use msgbench_model::result::{IntervalSample, RunResult};

/// The verdict of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Why the run is not valid; empty when it is.
    pub reasons: Vec<String>,
}

impl Verdict {
    /// True when nothing speaks against the run.
    pub fn is_valid(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// What a report says when no run is invalid.
pub const ALL_VALID: &str =
    "Every run is valid: targets reached, driver on schedule, no sequence errors, steady.";

/// `(run id, reasons)` of every invalid run, in order.
pub fn invalid_runs(runs: &[RunResult]) -> Vec<(&str, String)> {
    runs.iter()
        .filter_map(|r| {
            let v = judge(r);
            (!v.is_valid()).then(|| (r.run_id.as_str(), v.reasons.join("; ")))
        })
        .collect()
}

/// Relative change of the delivered rate across the window that counts as a trend.
pub const RATE_TREND: f64 = 0.10;
/// Growth factor of p99 across the window that counts as a trend.
pub const P99_TREND: f64 = 2.0;

/// Judges one run.
pub fn judge(run: &RunResult) -> Verdict {
    let mut reasons = run.warnings.clone();
    // Only seconds inside the measured window: the drain after it is not the steady state.
    let window: Vec<IntervalSample> = run
        .intervals
        .iter()
        .filter(|i| i.start_s + i.length_s <= run.duration_s + 0.01)
        .cloned()
        .collect();
    reasons.extend(trend(&window));
    reasons.extend(crate::streams::backlog_trends(run));
    reasons.extend(driver_saturated(run));
    Verdict { reasons }
}

/// A driver thread that used (nearly) a whole CPU while the run missed its target: the load
/// generator, not the system, set the pace.
fn driver_saturated(run: &RunResult) -> Option<String> {
    let target = run.target_per_sec?;
    let attempted = run.counters.attempted as f64 / run.duration_s.max(1e-9);
    if run.duration_s <= 0.0 || attempted >= 0.99 * target {
        return None;
    }
    let busiest = run
        .cpu
        .threads
        .iter()
        .max_by(|a, b| a.cpu.total_s().total_cmp(&b.cpu.total_s()))?;
    let share = busiest.cpu.total_s() / run.duration_s;
    (share >= 0.95).then(|| {
        format!(
            "driver CPU saturated: the {} thread used {:.0} % of a CPU while the target rate was missed; the load generator, not the system, was the bottleneck (add driver threads or CPUs)",
            busiest.role,
            100.0 * share
        )
    })
}

/// "not steady" reasons from the full one-second intervals of the measured window (at least 4
/// are needed): a least-squares line through the delivered rate, and through log p99.
fn trend(intervals: &[IntervalSample]) -> Vec<String> {
    let full: Vec<&IntervalSample> = intervals.iter().filter(|i| i.length_s >= 0.9).collect();
    if full.len() < 4 {
        return Vec::new();
    }
    let xs: Vec<f64> = full.iter().map(|i| i.start_s).collect();
    let span = xs[xs.len() - 1] - xs[0];
    let mut reasons = Vec::new();
    let rates: Vec<f64> = full
        .iter()
        .map(|i| i.delivered as f64 / i.length_s)
        .collect();
    let mean_rate = rates.iter().sum::<f64>() / rates.len() as f64;
    if mean_rate > 0.0 {
        let change = slope(&xs, &rates) * span / mean_rate;
        if change.abs() > RATE_TREND {
            reasons.push(format!(
                "not steady: delivered rate changed {:+.0} % across the window",
                100.0 * change
            ));
        }
    }
    if full.iter().all(|i| i.latency_p99_ns > 0) {
        let logs: Vec<f64> = full
            .iter()
            .map(|i| (i.latency_p99_ns as f64).ln())
            .collect();
        let growth = (slope(&xs, &logs) * span).exp();
        if growth > P99_TREND {
            reasons.push(format!(
                "not steady: p99 grew {growth:.1}x across the window (a queue is building up)"
            ));
        }
    }
    reasons
}

fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let num: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intervals(rates: &[u64], p99s: &[u64]) -> Vec<IntervalSample> {
        rates
            .iter()
            .zip(p99s)
            .enumerate()
            .map(|(k, (&d, &p))| IntervalSample {
                start_s: k as f64,
                length_s: 1.0,
                delivered: d,
                latency_p99_ns: p,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn a_flat_run_is_steady() {
        assert!(trend(&intervals(
            &[1000, 1010, 990, 1000, 1005],
            &[50, 55, 48, 52, 50]
        ))
        .is_empty());
    }

    #[test]
    fn a_growing_p99_is_not_steady() {
        let r = trend(&intervals(
            &[1000; 5],
            &[1_000, 2_000, 4_000, 8_000, 16_000],
        ));
        assert!(r.len() == 1 && r[0].contains("p99 grew 16.0x"), "{r:?}");
    }

    #[test]
    fn a_falling_rate_is_not_steady() {
        let r = trend(&intervals(&[1000, 900, 800, 700, 600], &[50; 5]));
        assert!(
            r.len() == 1 && r[0].contains("delivered rate changed -"),
            "{r:?}"
        );
    }

    #[test]
    fn short_runs_are_not_judged_for_trends() {
        assert!(trend(&intervals(&[1000, 10, 1], &[1, 1000, 100000])).is_empty());
    }
}
