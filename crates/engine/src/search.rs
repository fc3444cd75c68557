//! `msgbench search`: the highest open-loop rate a system sustains under a latency SLO.
//!
//! Ramp the rate geometrically (×2) from a start until a step fails, then bisect (geometric
//! midpoints) between the last rate that passed and the first that failed until they are within
//! the precision. Every step is a full run (warm-up + measured window) per replicate; a step
//! passes only when every replicate is valid by the reports' own verdict
//! ([`msgbench_model::verdict::judge`]: target reached, on schedule, nothing lost, steady, driver
//! not saturated), delivered at least `min_success` of what it attempted and kept its send lag
//! under the SLO bound, and the median of the SLO's percentile over replicates meets the SLO. All
//! runs and `search.json` go to one directory.
use crate::environment::Environment;
use crate::harness::measured::RunContext;
use crate::runner::{context, run_one, Observer, RunError};
use crate::store::ResultStore;
use msgbench_model::pacing::{Arrivals, Pacing};
use msgbench_model::result::RunResult;
use msgbench_model::search::{SearchRecord, SearchStep};
use msgbench_model::slo::Slo;
use msgbench_model::stats::median;
use msgbench_model::sweep::SweepPoint;
use msgbench_model::verdict;
use msgbench_model::warning::{LagCause, Warning};
use msgbench_model::Experiment;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How to search.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// The objective.
    pub slo: Slo,
    /// First rate tried, per second.
    pub start_per_sec: f64,
    /// Highest rate ever tried.
    pub max_per_sec: f64,
    /// Stop bisecting when failed / passed − 1 is below this.
    pub precision: f64,
    /// Smallest delivered share of attempted.
    pub min_success: f64,
    /// Most steps in all.
    pub max_steps: usize,
}

/// What a search produced.
#[derive(Debug)]
pub struct SearchOutcome {
    /// Result directory.
    pub dir: PathBuf,
    /// The record (also in `search.json`).
    pub record: SearchRecord,
    /// Every run of every step.
    pub results: Vec<RunResult>,
}

/// Searches with `experiment`'s single point as the template (its pacing becomes `rate`).
pub fn search(
    experiment: &Experiment,
    settings: &SearchSettings,
    out_root: &Path,
    env: Environment,
    stop: Arc<AtomicBool>,
    observer: Arc<dyn Observer>,
) -> Result<SearchOutcome, RunError> {
    crate::clock::calibrate();
    let template = &experiment.points[0];
    let mut searched = experiment.clone();
    searched.axes = vec!["pacing.per_sec".into()];
    let mut store = ResultStore::create(out_root, &searched, &env)?;
    // Observers see no points: the steps are decided one by one.
    let announced = Experiment {
        points: Vec::new(),
        ..searched.clone()
    };
    observer.experiment_started(&announced, store.dir());
    let ctx = context(&stop, &observer);
    let arrivals = match template.scenario.pacing {
        Pacing::Rate { arrivals, .. } => arrivals,
        _ => Arrivals::Uniform,
    };
    let mut record = new_record(settings);
    let mut results = Vec::new();
    let mut next = Some(settings.start_per_sec);
    while let Some(rate) = next {
        // A late step's retry is run even past `--max-steps`: one late look is a hiccup.
        let retry = record.steps.last().is_some_and(|s| s.host_late);
        if stop.load(Ordering::Relaxed) || (record.steps.len() >= settings.max_steps && !retry) {
            break;
        }
        let index = record.steps.len();
        let point = step_point(template, index, rate, arrivals);
        let step_runs = run_step(&searched, &point, (&mut store, &ctx, &observer), rate)?;
        if stop.load(Ordering::Relaxed) {
            record.interrupted = true;
            results.extend(step_runs);
            break;
        }
        let step = judge(rate, &step_runs, settings);
        observer.step_judged(index + 1, &step);
        if step.host_late {
            // Once: a hiccup of the host passes the second time. Twice: the host cannot keep
            // this schedule, and every rate below it would measure the host too.
            let again = record
                .steps
                .last()
                .is_some_and(|s| s.host_late && s.rate_per_sec == rate);
            record.steps.push(step);
            results.extend(step_runs);
            write_record(&store, &record)?;
            if again {
                record.host_limited_per_sec = Some(rate);
                break;
            }
            next = Some(rate);
            continue;
        }
        bracket(&mut record, rate, step.passed);
        record.steps.push(step);
        results.extend(step_runs);
        write_record(&store, &record)?;
        next = next_rate(&record, settings);
    }
    record.interrupted |= stop.load(Ordering::Relaxed);
    write_record(&store, &record)?;
    Ok(SearchOutcome {
        dir: store.dir().to_path_buf(),
        record,
        results,
    })
}

/// Step `index` of the search: the template's scenario paced at `rate` with its `arrivals`.
fn step_point(template: &SweepPoint, index: usize, rate: f64, arrivals: Arrivals) -> SweepPoint {
    let mut scenario = template.scenario.clone();
    scenario.pacing = Pacing::Rate {
        per_sec: rate,
        arrivals,
    };
    SweepPoint {
        index,
        params: vec![("pacing.per_sec".into(), format!("{rate:.0}"))],
        scenario,
    }
}

/// The record of a search with no step yet.
fn new_record(settings: &SearchSettings) -> SearchRecord {
    SearchRecord {
        slo: settings.slo.to_string(),
        min_success: settings.min_success,
        precision: settings.precision,
        steps: Vec::new(),
        sustainable_per_sec: None,
        failed_per_sec: None,
        interrupted: false,
        host_limited_per_sec: None,
    }
}

/// A step at `rate` passed (the highest such is sustainable) or failed (the lowest such is
/// the upper bound).
fn bracket(record: &mut SearchRecord, rate: f64, passed: bool) {
    if passed {
        record.sustainable_per_sec = Some(record.sustainable_per_sec.map_or(rate, |r| r.max(rate)));
    } else {
        record.failed_per_sec = Some(record.failed_per_sec.map_or(rate, |r| r.min(rate)));
    }
}

/// Writes `search.json` as it stands.
fn write_record(store: &ResultStore, record: &SearchRecord) -> Result<(), RunError> {
    let json = serde_json::to_vec_pretty(record).expect("serializable");
    Ok(store.write_file("search.json", &json)?)
}

/// Every replicate of one step at `rate` (fewer when Ctrl-C stops it).
fn run_step(
    searched: &Experiment,
    point: &SweepPoint,
    (store, ctx, observer): (&mut ResultStore, &RunContext, &Arc<dyn Observer>),
    rate: f64,
) -> Result<Vec<RunResult>, RunError> {
    let index = point.index;
    let mut step_runs = Vec::new();
    for replicate in 1..=searched.replicates {
        if ctx.stop.load(Ordering::Relaxed) {
            break;
        }
        let run_id = format!(
            "step{:02}-rate={rate:.0}{}",
            index + 1,
            if searched.replicates > 1 {
                format!("-r{replicate}")
            } else {
                String::new()
            }
        );
        observer.run_started(&run_id, index + 1, 0);
        let r = match run_one(searched, (point, replicate, None), run_id, store, ctx) {
            Ok(r) => r,
            Err(e) if store.discard_if_empty() => return Err(e.without_dir()), // a dead server leaves no folder
            Err(e) => return Err(e),
        };
        store.mark_latest();
        observer.run_finished(&r);
        step_runs.push(r);
    }
    Ok(step_runs)
}

/// The next rate: double while everything passed, halve while everything failed, then bisect.
fn next_rate(r: &SearchRecord, s: &SearchSettings) -> Option<f64> {
    match (r.sustainable_per_sec, r.failed_per_sec) {
        (Some(ok), None) => (ok < s.max_per_sec).then(|| (ok * 2.0).min(s.max_per_sec)),
        (None, Some(bad)) => (bad / 2.0 >= 0.001).then_some(bad / 2.0),
        (Some(ok), Some(bad)) => (bad / ok - 1.0 > s.precision).then(|| (ok * bad).sqrt()),
        (None, None) => Some(s.start_per_sec),
    }
}

/// Whether a step's runs pass, and why not: every run must be valid by the same verdict the
/// reports give ([`msgbench_model::verdict::judge`]), deliver at least `min_success` of what it
/// attempted and keep its send lag under the SLO's bound; the median of the SLO's percentile
/// over the replicates must meet the SLO.
fn judge(rate: f64, runs: &[RunResult], s: &SearchSettings) -> SearchStep {
    let mut reasons = Vec::new();
    for r in runs {
        let success = r.counters.success_rate();
        if success < s.min_success {
            reasons.push(format!(
                "{}: {:.2} % delivered (needs {:.2} %)",
                r.run_id,
                100.0 * success,
                100.0 * s.min_success
            ));
        }
        // The verdict's own send-lag warning (above `run.send_lag_limit`) already says it; this
        // catches a lag under that bound that still exceeds a tighter SLO.
        if r.send_lag.p99_ns > s.slo.bound_ns && !lag_warned(r) {
            reasons.push(format!(
                "{}: send lag p99 {:.2} ms exceeds the SLO bound: {}",
                r.run_id,
                r.send_lag.p99_ns as f64 / 1e6,
                lag_cause(r, s.slo.bound_ns)
            ));
        }
        reasons.extend(
            verdict::judge(r)
                .reasons
                .into_iter()
                .map(|why| format!("{}: {why}", r.run_id)),
        );
    }
    let latency = median(
        &runs
            .iter()
            .map(|r| s.slo.metric.of(&r.latency) as f64)
            .collect::<Vec<_>>(),
    );
    if !s.slo.met_by(latency as u64) {
        reasons.insert(
            0,
            format!(
                "{} = {:.2} ms misses {}",
                s.slo.metric.name(),
                latency / 1e6,
                s.slo
            ),
        );
    }
    let passed = reasons.is_empty() && !runs.is_empty();
    SearchStep {
        rate_per_sec: rate,
        passed,
        host_late: !passed && !runs.is_empty() && runs.iter().all(|r| driver_late(r, s)),
        reasons,
        run_ids: runs.iter().map(|r| r.run_id.clone()).collect(),
        latency_ns: latency as u64,
        delivered_per_sec: median(
            &runs
                .iter()
                .map(|r| r.delivered_per_sec())
                .collect::<Vec<_>>(),
        ),
    }
}

/// Whether the verdict already warned about `r`'s send lag.
fn lag_warned(r: &RunResult) -> bool {
    (r.warnings.iter()).any(|w| matches!(w, Warning::SendLag { .. }))
}

/// Whose lateness `r`'s send lag over `bound_ns` is, in words.
fn lag_cause(r: &RunResult, bound_ns: u64) -> String {
    let held = r.counters.held_by_window;
    match verdict::lag_cause(r, bound_ns) {
        LagCause::Pacer => return "msgbench's pacer ran late (the host's lateness)".into(),
        LagCause::Held => {
            return format!("the system pushed back ({held} sends waited for room first)")
        }
        LagCause::Both => {
            return format!("msgbench's pacer ran late, and the system pushed back ({held} sends waited for room first)")
        }
        LagCause::Stream | LagCause::Either => {}
    }
    if !windowed(r) {
        "the driver fell behind its schedule, or the system pushed back".into()
    } else if r.counters.lag_is_the_drivers() {
        "the driver fell behind its schedule (fewer than 1 % of sends waited for a full window)"
            .into()
    } else {
        format!("the system pushed back ({held} sends waited for a full window under `block`)")
    }
}

/// Whether run `r` went out late by the driver's own doing: its send lag is over the SLO's
/// bound or warned about, and it is a request/response run (whose launcher counts the sends a
/// full window held) in which fewer than 1 % of sends waited for the window. A stream's
/// publishers have no window to count, so their lag is never called the host's here.
fn driver_late(r: &RunResult, s: &SearchSettings) -> bool {
    // Nothing lost or failed: a step that also failed for the system's faults is the system's.
    let sound = r.counters.success_rate() >= s.min_success && r.faults.total() == 0;
    let late = lag_warned(r) || r.send_lag.p99_ns > s.slo.bound_ns;
    let bound = match lag_warned(r) {
        true => r.send_lag_limit_ns.unwrap_or(verdict::SEND_LAG_LIMIT_NS),
        false => s.slo.bound_ns,
    };
    // Latency counts from the intended time: lag + the time from the actual send. When the
    // SLO's percentile misses the bound by more than the worst lag, its messages waited in
    // the system after they left — a saturated server, not a late host.
    let queued = s
        .slo
        .metric
        .of(&r.latency)
        .saturating_sub(r.send_lag.max_ns)
        > s.slo.bound_ns;
    // msgbench's own threads waited for a CPU: whatever the step measured, it was the host's.
    let host_busy = msgbench_model::verdict::host_busy(r).is_some();
    // Whose the lag was: the split send lag says, for every system; files without it, only a
    // request/response run's count of held sends.
    let pacer_late = match verdict::lag_cause(r, bound) {
        LagCause::Pacer => true,
        LagCause::Either => windowed(r) && r.counters.lag_is_the_drivers(),
        LagCause::Held | LagCause::Both | LagCause::Stream => false,
    };
    host_busy || (sound && late && !queued && pacer_late)
}

/// A request/response run: its launcher counts the sends a full window held.
fn windowed(r: &RunResult) -> bool {
    use msgbench_model::scenario::SystemKind;
    matches!(
        r.system,
        SystemKind::Rpc | SystemKind::Redis | SystemKind::WsRpc | SystemKind::Http
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SearchSettings {
        SearchSettings {
            slo: Slo::parse("p99 < 10ms").unwrap(),
            start_per_sec: 1000.0,
            max_per_sec: 1e7,
            precision: 0.05,
            min_success: 0.999,
            max_steps: 30,
        }
    }

    /// Replays the search's rate choices against a system that passes below `capacity`.
    fn simulate(capacity: f64) -> (Vec<f64>, SearchRecord) {
        let s = settings();
        let mut r = SearchRecord {
            slo: String::new(),
            min_success: 0.0,
            precision: s.precision,
            steps: Vec::new(),
            sustainable_per_sec: None,
            failed_per_sec: None,
            interrupted: false,
            host_limited_per_sec: None,
        };
        let mut rates = Vec::new();
        let mut next = Some(s.start_per_sec);
        while let Some(rate) = next {
            rates.push(rate);
            if rate <= capacity {
                r.sustainable_per_sec =
                    Some(r.sustainable_per_sec.map_or(rate, |x: f64| x.max(rate)));
            } else {
                r.failed_per_sec = Some(r.failed_per_sec.map_or(rate, |x: f64| x.min(rate)));
            }
            next = next_rate(&r, &s);
            assert!(rates.len() < 40);
        }
        (rates, r)
    }

    #[test]
    fn ramps_then_bisects_to_the_precision() {
        let (rates, r) = simulate(5000.0);
        assert_eq!(&rates[..4], &[1000.0, 2000.0, 4000.0, 8000.0]);
        let (ok, bad) = (r.sustainable_per_sec.unwrap(), r.failed_per_sec.unwrap());
        assert!(
            ok <= 5000.0 && bad > 5000.0 && bad / ok - 1.0 <= 0.05,
            "{ok} {bad}"
        );
    }

    #[test]
    fn a_step_failed_by_the_drivers_lateness_is_told_from_the_systems_pushback() {
        use msgbench_model::scenario::SystemKind;
        let late = |system, held: u64| {
            let mut r = RunResult {
                system,
                run_id: "step01".into(),
                ..Default::default()
            };
            (r.counters.attempted, r.counters.sent, r.counters.delivered) = (1000, 1000, 1000);
            r.counters.held_by_window = held;
            r.latency.count = 1000;
            r.warnings.push(Warning::SendLag {
                p99_ms: 3.7,
                cause: LagCause::Either,
            });
            r
        };
        let s = settings();
        let host = judge(250.0, &[late(SystemKind::Rpc, 0)], &s);
        assert!(!host.passed && host.host_late, "{host:?}");
        // Under 1 % of sends held by a full window: still the driver's lag.
        assert!(judge(250.0, &[late(SystemKind::Http, 9)], &s).host_late);
        // 5 % held: the system pushed back (block), the lag is the system's.
        assert!(!judge(250.0, &[late(SystemKind::Redis, 50)], &s).host_late);
        // No window to count: a stream's lag is never called the host's.
        assert!(!judge(250.0, &[late(SystemKind::Pubsub, 0)], &s).host_late);
        // Late, but the p99 is far beyond what the lag explains (200 ms with at most 2 ms of
        // lag): the messages queued in the server after they left — its capacity, not the host.
        let mut saturated = late(SystemKind::Rpc, 0);
        (saturated.latency.p99_ns, saturated.send_lag.max_ns) = (200_000_000, 2_000_000);
        let step = judge(1044.0, &[saturated], &s);
        assert!(!step.passed && !step.host_late, "{step:?}");
        // A step that passed is not late.
        let mut ok = late(SystemKind::Rpc, 0);
        ok.warnings.clear();
        assert!(!judge(250.0, &[ok.clone()], &s).host_late);
        // A step whose thread waited for a CPU a fifth of its window is the host's, whatever
        // the system (a stream's too).
        let mut busy = late(SystemKind::Pubsub, 0);
        busy.duration_s = 1.0;
        busy.cpu.threads.push(msgbench_model::result::ThreadCpu {
            role: "publisher-0".into(),
            pinned_cpu: None,
            cpu: msgbench_model::result::CpuTimes {
                cpu_wait_s: Some(0.2),
                ..Default::default()
            },
        });
        assert!(judge(250.0, &[busy], &s).host_late);
    }

    #[test]
    fn a_failing_start_halves_down() {
        let (rates, r) = simulate(300.0);
        assert_eq!(&rates[..3], &[1000.0, 500.0, 250.0]);
        assert!(r.sustainable_per_sec.unwrap() <= 300.0);
    }
}
