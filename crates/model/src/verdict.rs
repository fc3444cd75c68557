//! May a run's numbers be trusted? One answer, used by the engine (the warnings it writes into
//! each result, the search's steps) and by every report alike.
//!
//! * [`Warning`] ([`crate::warning`]): what the engine noticed about a run, as a value.
//! * [`warnings`]: the checks made on a finished run (accounting, sequence, delivery and
//!   failures, target rate, send lag, unanswered requests, unequal service across
//!   connections, drain, interruption).
//! * [`judge`]: the verdict: every warning, plus what only the whole measured span shows — a
//!   delivered rate or p99 still trending, a stream client's backlog growing, a driver thread
//!   that saturated its CPU while the target was missed.
use crate::kind::SystemKind;
use crate::result::{IntervalSample, RunResult, StreamInterval};
use crate::warning::{LagCause, Warning};

/// Send lag p99 above which a run is late, unless `run.send_lag_limit` says otherwise.
pub const SEND_LAG_LIMIT_NS: u64 = 1_000_000;

/// The checks made on a finished run; the engine writes them into the result after the notes
/// of the system.
pub fn warnings(r: &RunResult) -> Vec<Warning> {
    let mut w = Vec::new();
    if let Err(broken) = r.counters.check() {
        w.push(Warning::AccountingBroken(broken));
    }
    if r.sequence.total() > 0 {
        w.push(Warning::SequenceErrors {
            gaps: r.sequence.gaps,
            duplicates: r.sequence.duplicates,
            reordered: r.sequence.reordered,
        });
    }
    let c = &r.counters;
    if !r.early.is_none() {
        w.push(Warning::Early {
            deliveries: r.early.count,
            delivered: c.delivered,
            most_ms: round_to(r.early.most_ns as f64 / 1e6, 3),
        });
    }
    // A stream run already failed for its closed clients says so once, not twice.
    let stopped = r.warnings.iter().any(Warning::is_stopped_early);
    if c.delivered == 0 && !r.interrupted && r.system == SystemKind::Ticks {
        if !stopped {
            w.push(Warning::NothingReceived);
        }
    } else if c.delivered == 0 && !r.interrupted {
        w.push(Warning::NothingDelivered {
            attempted: c.attempted,
            sent: c.sent,
        });
    } else if c.failed > 0 {
        w.push(Warning::Failed {
            failed: c.failed,
            attempted: c.attempted,
            percent: round_to(100.0 * c.failed as f64 / c.attempted.max(1) as f64, 1),
        });
    }
    w.extend(target_missed(r));
    let limit = r.send_lag_limit_ns.unwrap_or(SEND_LAG_LIMIT_NS);
    if r.send_lag.p99_ns > limit {
        w.push(Warning::SendLag {
            p99_ms: round_to(r.send_lag.p99_ns as f64 / 1e6, 2),
            cause: lag_cause(r, limit),
        });
    }
    if let Some(wait_ns) = r.max_latency_at_least() {
        w.push(Warning::Unanswered {
            requests: r.unanswered.count,
            longest_wait_ms: round_to(wait_ns as f64 / 1e6, 3),
        });
    }
    w.extend(
        (r.fairness.iter())
            .filter_map(crate::fairness::unequal_service)
            .map(Warning::Unequal),
    );
    if c.in_flight_end > 0 {
        w.push(Warning::InFlightAtEnd {
            messages: c.in_flight_end,
        });
    }
    if r.interrupted {
        w.push(Warning::Interrupted);
    }
    w
}

/// Whose lateness a send lag p99 over `limit` is. The host's when one of msgbench's threads
/// waited for a CPU past [`HOST_WAIT_SHARE`] (its replies then sat unread too, so its window
/// looked full: a hog beside the driver made 3 ms of "held" lag); else the pacer's when its
/// own sends' p99 is over the limit; the system's when at least 1 % of the sends waited for
/// room (a full window, queue or socket: then the slowest 1 % hold them) and their p99 is over
/// it; both when both are, or when neither alone is (the tail is a mix of the two).
pub fn lag_cause(r: &RunResult, limit: u64) -> LagCause {
    let split = &r.send_lag_split;
    if r.system == SystemKind::Ticks {
        return LagCause::Stream;
    }
    if host_busy(r).is_some() {
        return LagCause::Pacer;
    }
    if split.pacer.count + split.held.count == 0 {
        return LagCause::Either;
    }
    let pacer = split.pacer.p99_ns > limit;
    // Of the sends the split counts (a publish is one send, whatever its subscriptions).
    let sends = split.pacer.count + split.held.count;
    let held = split.held.count * 100 >= sends && split.held.p99_ns > limit;
    match (pacer, held) {
        (true, false) => LagCause::Pacer,
        (false, true) => LagCause::Held,
        _ => LagCause::Both,
    }
}

/// The target rate missed by more than chance allows.
fn target_missed(r: &RunResult) -> Option<Warning> {
    let target = r.target_per_sec?;
    let window = schedule_window(r);
    let achieved = attempted_per_sec(r);
    // Exact for uniform schedules; Poisson counts vary by about 1/sqrt(n), so allow 3 sigma.
    let tolerance = 0.005_f64.max(3.0 / (target * window).max(1.0).sqrt());
    if r.interrupted || achieved >= (1.0 - tolerance) * target {
        return None;
    }
    Some(Warning::TargetMissed {
        achieved_per_sec: round_to(achieved, 0),
        target_per_sec: round_to(target, 0),
        percent: round_to(100.0 * achieved / target, 1),
        stream: r.system == SystemKind::Ticks,
    })
}

/// The span the attempts were due in: the schedule's, or the measured window when it is
/// shorter (cut by `run.operations` or a stop) or there was none. A window that ran past the
/// schedule's span (the last sends went late) is not a rate missed.
fn schedule_window(r: &RunResult) -> f64 {
    r.schedule_s.map_or(r.duration_s, |s| s.min(r.duration_s))
}

/// Attempts per second of [`schedule_window`].
fn attempted_per_sec(r: &RunResult) -> f64 {
    let window = schedule_window(r);
    if window > 0.0 {
        r.counters.attempted as f64 / window
    } else {
        0.0
    }
}

/// `v` rounded to `digits` decimals, as `{:.digits$}` would print it.
fn round_to(v: f64, digits: usize) -> f64 {
    format!("{v:.digits$}").parse().unwrap_or(v)
}

/// The verdict on one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Why the run is not valid, in words; empty when it is.
    pub reasons: Vec<String>,
}

impl Verdict {
    /// True when nothing speaks against the run.
    pub fn is_valid(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// Relative change of the delivered rate across the window that counts as a trend.
pub const RATE_TREND: f64 = 0.10;
/// Whole one-second intervals a run needs before its steadiness is judged.
pub const MIN_TREND_SECONDS: usize = 4;
/// Growth factor of p99 across the window that counts as a trend.
pub const P99_TREND: f64 = 2.0;
/// A stream client's backlog growing by more than this share of what was generated for it per
/// second is "not steady".
pub const BACKLOG_TREND: f64 = 0.05;
/// Seconds of stream intervals needed to judge a backlog trend.
pub const BACKLOG_MIN_SECONDS: usize = 3;

/// Judges one run: its warnings, then what only its whole window shows.
pub fn judge(run: &RunResult) -> Verdict {
    let mut reasons: Vec<String> = impossible(run);
    reasons.extend(run.warnings.iter().map(|w| w.to_string()));
    // Only seconds inside the measured window: the drain after it is not the steady state.
    let window: Vec<IntervalSample> = run
        .intervals
        .iter()
        .filter(|i| i.start_s + i.length_s <= run.duration_s + 0.01)
        .cloned()
        .collect();
    // A run in stages changes its load on purpose: a trend across its window is the question
    // it asks (each stage and a spike's recovery are reported on their own), not a flaw.
    if run.stages.is_empty() {
        reasons.extend(trend(&window));
    }
    reasons.extend(backlog_trends(run));
    reasons.extend(driver_saturated(run));
    reasons.extend(host_busy(run));
    Verdict { reasons }
}

/// What no run can have measured: counters that break the accounting, a latency histogram
/// that does not decode (a file edited by hand or damaged on disk).
fn impossible(run: &RunResult) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Err(e) = run.counters.check() {
        reasons.push(format!(
            "impossible counters ({e}): the result file was changed or damaged after the run"
        ));
    }
    // A window no run can have (a file edited by hand): 1e-300 s made a 300-digit rate.
    let year_and_a_day = 366.0 * 86_400.0;
    let window_ok = run.duration_s.is_finite()
        && (0.0..=year_and_a_day).contains(&run.duration_s)
        && (run.duration_s >= 1e-6 || run.counters.delivered == 0);
    if !window_ok {
        reasons.push(format!(
            "an impossible measured window ({} s with {} delivered): the result file was changed or damaged after the run",
            run.duration_s, run.counters.delivered
        ));
    }
    if !run.histograms.latency.is_empty() {
        if let Err(e) = crate::histogram::decode(&run.histograms.latency) {
            reasons.push(format!(
                "its latency histogram cannot be read ({e}): the result file was changed or damaged after the run"
            ));
        }
    }
    reasons
}

/// Share of the measured span one of msgbench's threads may wait for a CPU (ready to run, the
/// host running something else) before the run is the host's: a late pacer and a late reader
/// make latencies no system has.
pub const HOST_WAIT_SHARE: f64 = 0.05;

/// A thread of msgbench's that waited for a CPU more than [`HOST_WAIT_SHARE`] of the span.
pub fn host_busy(run: &RunResult) -> Option<String> {
    if run.duration_s <= 0.0 {
        return None;
    }
    let (thread, wait_s) = (run.cpu.threads.iter())
        .filter_map(|t| Some((t, t.cpu.cpu_wait_s?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (wait_s > HOST_WAIT_SHARE * run.duration_s).then(|| {
        format!(
            "the host was busy: msgbench's {} thread waited {:.0} ms for a CPU ({:.0} % of the measured span) — its sends and reads were late for the host, not the system (run it where nothing else takes its CPUs, or pin it away from what does)",
            thread.role,
            wait_s * 1e3,
            100.0 * wait_s / run.duration_s
        )
    })
}

/// A driver thread that used (nearly) a whole CPU while the run missed its target: the load
/// generator, not the system, set the pace.
fn driver_saturated(run: &RunResult) -> Option<String> {
    let target = run.target_per_sec?;
    let attempted = attempted_per_sec(run);
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
pub fn trend(intervals: &[IntervalSample]) -> Vec<String> {
    let full: Vec<&IntervalSample> = intervals.iter().filter(|i| i.length_s >= 0.9).collect();
    if full.len() < MIN_TREND_SECONDS {
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
        let k = slope(&xs, &rates);
        if (k * span / mean_rate).abs() > RATE_TREND {
            // The fitted line's ends, kept within what was observed (a steep line through a
            // collapse would end below zero).
            let (low, high) = rates
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
            let mean_x = xs.iter().sum::<f64>() / xs.len() as f64;
            let at = |x: f64| (mean_rate + k * (x - mean_x)).clamp(low, high);
            let (from, to) = (at(xs[0]), at(xs[xs.len() - 1]));
            reasons.push(format!(
                "not steady: delivered rate {} from {}/s to {}/s across the window (a line fitted through its seconds)",
                if to < from { "fell" } else { "rose" },
                count(from),
                count(to)
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

/// "not steady" reasons of a broadcast stream: a client whose backlog keeps growing is being
/// fed faster than it processes, so its latency is queueing time that grows with the run.
pub fn backlog_trends(run: &RunResult) -> Vec<String> {
    let mut reasons = Vec::new();
    for c in run.streams.iter().filter(|c| c.server.is_some()) {
        let window: Vec<&StreamInterval> = c
            .intervals
            .iter()
            .filter(|i| i.start_s + i.length_s <= run.duration_s + 0.01)
            .collect();
        if window.len() < BACKLOG_MIN_SECONDS {
            continue;
        }
        let per_second = |f: fn(&StreamInterval) -> u64| {
            window.iter().map(|i| f(i)).sum::<u64>() as f64 / window.len() as f64
        };
        let generated = per_second(|i| i.generated);
        let growth = (window[window.len() - 1].backlog - window[0].backlog) as f64
            / (window.len() - 1) as f64;
        if generated > 0.0 && growth > BACKLOG_TREND * generated {
            // The rates are the stream table's (counts ÷ the measured window, the drain's
            // deliveries included): one figure per quantity wherever it is quoted.
            let rate = |n: u64| count(n as f64 / run.duration_s.max(1e-9));
            reasons.push(format!(
                "not steady: client {}'s backlog grew by {}/s over the measured window (its delivered/s {} of generated/s {}, the drain's deliveries included): its latency is queueing time that grows with the run",
                c.name,
                count(growth),
                rate(c.counters.delivered),
                rate(c.counters.attempted)
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

/// `1.23`, `12.3`, `123`: three significant digits for 1 ≤ v < 1000.
pub fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `950`, `12.3k`, `4.56M`, `1.00G`: three significant digits.
pub fn count(v: f64) -> String {
    let three = three_digits;
    if v < 1e3 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{}k", three(v / 1e3))
    } else if v < 1e9 {
        format!("{}M", three(v / 1e6))
    } else {
        format!("{}G", three(v / 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_as_the_sentences_always_printed_them() {
        // `{:.0}` rounds half to even: 1234.5/s was written "1234/s".
        assert_eq!(round_to(1234.5, 0), 1234.0);
        assert_eq!(round_to(1235.5, 0), 1236.0);
        assert_eq!(round_to(61.75, 1).to_string(), format!("{:.1}", 61.75));
    }

    #[test]
    fn the_send_lag_bound_is_the_runs_own() {
        let mut r = RunResult {
            counters: crate::result::Counters {
                attempted: 10,
                sent: 10,
                delivered: 10,
                ..Default::default()
            },
            ..Default::default()
        };
        r.send_lag.p99_ns = 3_000_000;
        let late = |r: &RunResult| {
            warnings(r)
                .iter()
                .any(|w| matches!(w, Warning::SendLag { .. }))
        };
        assert!(late(&r), "3 ms is late under the default 1 ms");
        r.send_lag_limit_ns = Some(5_000_000);
        assert!(!late(&r), "and on time under run.send_lag_limit = \"5ms\"");
    }

    #[test]
    fn a_window_past_the_schedule_is_not_a_rate_missed() {
        // 100 000 attempted of 100 000 due in 1 s; the last sends went 11 ms late.
        let mut r = RunResult {
            target_per_sec: Some(100_000.0),
            duration_s: 1.011,
            schedule_s: Some(1.0),
            counters: crate::result::Counters {
                attempted: 100_000,
                sent: 100_000,
                delivered: 100_000,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(target_missed(&r), None);
        // Without the schedule's span (older files) the window is all there is.
        r.schedule_s = None;
        assert!(target_missed(&r).is_some());
        // Fewer attempts than the span called for are a rate missed.
        r.schedule_s = Some(1.0);
        r.counters.attempted = 90_000;
        r.counters.sent = 90_000;
        r.counters.delivered = 90_000;
        assert!(target_missed(&r).is_some());
        // A run cut short (run.operations) is judged on the window it had.
        r.duration_s = 0.9;
        assert_eq!(target_missed(&r), None);
    }

    #[test]
    fn counts_have_three_digits() {
        assert_eq!(count(950.0), "950");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(4_560_000.0), "4.56M");
    }

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
            r.len() == 1 && r[0].contains("delivered rate fell from 1.00k/s to 600/s"),
            "{r:?}"
        );
        // A collapse: the fitted line would end below zero; the sentence stays in range.
        let r = trend(&intervals(&[1000, 500, 100, 10, 0], &[50; 5]));
        assert!(r.len() == 1 && r[0].contains("from 820/s to 0/s"), "{r:?}");
    }

    #[test]
    fn a_window_no_run_can_have_makes_the_run_invalid() {
        let run = |duration_s: f64, delivered: u64| RunResult {
            duration_s,
            counters: crate::result::Counters {
                attempted: delivered,
                sent: delivered,
                delivered,
                ..Default::default()
            },
            ..Default::default()
        };
        for (d, n) in [
            (1e-300, 1000),
            (f64::INFINITY, 1000),
            (-1.0, 0),
            (1e12, 1000),
        ] {
            let reasons = impossible(&run(d, n));
            assert!(
                reasons
                    .iter()
                    .any(|r| r.contains("impossible measured window")),
                "{d}: {reasons:?}"
            );
        }
        // A run stopped in its warm-up measured nothing in no time: sane.
        assert!(impossible(&run(0.0, 0)).is_empty());
        assert!(impossible(&run(2.5, 1000)).is_empty());
    }

    #[test]
    fn short_runs_are_not_judged_for_trends() {
        assert!(trend(&intervals(&[1000, 10, 1], &[1, 1000, 100000])).is_empty());
    }
}
