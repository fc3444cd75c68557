//! Runs an experiment: every sweep point × replicate, in order, each result written to disk the
//! moment its run ends. Ctrl-C (the `stop` flag) ends the current run early — it is still
//! measured, marked `interrupted` and written — and no further run starts.
use crate::environment::Environment;
use crate::error::EngineError;
use crate::harness::{Measured, RunContext};
pub use crate::recorder::LiveStatus;
use crate::store::{ResultStore, StoreError};
use crate::systems;
use msgbench_model::histogram::{encode, Percentiles};
use msgbench_model::pacing::Pacing;
use msgbench_model::result::{ClassResult, CpuUsage, Histograms, Param, RunResult, SCHEMA_VERSION};
use msgbench_model::stage_judge::stage_results;
use msgbench_model::sweep::{short_axis, SweepPoint};
use msgbench_model::verdict;
use msgbench_model::warning::Warning;
use msgbench_model::Experiment;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Hears about progress (the terminal's progress line and summary; tests).
pub trait Observer: Send + Sync {
    /// The result directory exists and runs are about to start.
    fn experiment_started(&self, _experiment: &Experiment, _dir: &Path) {}
    /// Run `number` of `total` starts.
    fn run_started(&self, _run_id: &str, _number: usize, _total: usize) {}
    /// Live figures of the current run.
    fn live(&self, _status: LiveStatus) {}
    /// A run ended and its files are written.
    fn run_finished(&self, _result: &RunResult) {}
    /// `msgbench search` judged step `number` (from 1), as soon as it is decided.
    fn step_judged(&self, _number: usize, _step: &msgbench_model::search::SearchStep) {}
}

/// An observer that hears nothing.
pub struct Silent;
impl Observer for Silent {}

/// What an experiment produced.
#[derive(Debug)]
pub struct Outcome {
    /// The result directory.
    pub dir: PathBuf,
    /// Every finished run.
    pub results: Vec<RunResult>,
    /// True when Ctrl-C stopped the sweep.
    pub interrupted: bool,
}

/// Why an experiment stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The results directory could not be made (nothing ran): the destination is bad input.
    #[error("{0}")]
    Destination(StoreError),
    /// A result file could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The system under test lost, duplicated or reordered messages: a bug in it, so the
    /// experiment stops. The run itself is on disk.
    #[error("run {run_id} failed: {gaps} gaps, {duplicates} duplicates, {reordered} reordered messages; the system under test broke FIFO delivery{hint} (the run is written to {}; `msgbench report {}` shows it)", dir.display(), dir.display())]
    SequenceBroken {
        /// The failing run.
        run_id: String,
        /// Where its result is.
        dir: PathBuf,
        /// Missing sequence numbers.
        gaps: u64,
        /// Repeated sequence numbers.
        duplicates: u64,
        /// Late sequence numbers.
        reordered: u64,
        /// The setting that reads the stream's gaps as intended, where that may be so.
        hint: &'static str,
    },
    /// A run failed; earlier runs are on disk in `dir` (`None`: none had finished, and the
    /// empty directory was removed).
    #[error("run {run_id} failed: {source}{}", kept(dir))]
    Engine {
        /// The failing run.
        run_id: String,
        /// Where earlier results are.
        dir: Option<PathBuf>,
        /// The cause.
        source: EngineError,
    },
}

impl RunError {
    /// The result directory, when it was created before the error.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            RunError::Store(_) | RunError::Destination(_) => None,
            RunError::SequenceBroken { dir, .. } => Some(dir),
            RunError::Engine { dir, .. } => dir.as_deref(),
        }
    }

    /// The same error, once its results directory was removed for holding nothing.
    pub fn without_dir(self) -> RunError {
        match self {
            RunError::Engine { run_id, source, .. } => RunError::Engine {
                run_id,
                dir: None,
                source,
            },
            other => other,
        }
    }
}

/// Where the runs finished before a failure are, in words.
fn kept(dir: &Option<PathBuf>) -> String {
    match dir {
        Some(d) => format!(
            " (the results directory is {}; it holds the runs that finished before)",
            d.display()
        ),
        None => " (no run had finished, so nothing was written)".to_string(),
    }
}

/// Where an experiment's results go.
#[derive(Debug, Clone, Copy)]
pub enum Destination<'a> {
    /// A new directory `<root>/<experiment>/<stamp>/`.
    New(&'a Path),
    /// An existing result directory of the same experiment: runs already written there are
    /// kept and not run again (resuming an interrupted sweep).
    Resume(&'a Path),
}

/// Runs every point and replicate of `experiment`, writing results under `out_root`.
pub fn run_experiment(
    experiment: &Experiment,
    out_root: &Path,
    env: Environment,
    stop: Arc<AtomicBool>,
    observer: Arc<dyn Observer>,
) -> Result<Outcome, RunError> {
    run_experiment_to(experiment, Destination::New(out_root), env, stop, observer)
}

/// A results directory that could not be made: bad input when the path cannot hold one (not
/// a directory, not there, not writable), a failed write when the disk is full or failing.
fn destination_error(e: StoreError) -> RunError {
    let bad_path = [
        libc::ENOENT,
        libc::ENOTDIR,
        libc::EACCES,
        libc::EPERM,
        libc::EROFS,
    ];
    match e.source.raw_os_error() {
        Some(code) if bad_path.contains(&code) => RunError::Destination(e),
        _ => RunError::Store(e),
    }
}

/// Runs every point and replicate of `experiment` not yet in the destination.
pub fn run_experiment_to(
    experiment: &Experiment,
    destination: Destination,
    env: Environment,
    stop: Arc<AtomicBool>,
    observer: Arc<dyn Observer>,
) -> Result<Outcome, RunError> {
    crate::clock::calibrate();
    let fresh = matches!(destination, Destination::New(_));
    let (mut store, done) = match destination {
        Destination::New(root) => (
            ResultStore::create(root, experiment, &env).map_err(destination_error)?,
            Vec::new(),
        ),
        Destination::Resume(dir) => ResultStore::open(dir, experiment)?,
    };
    observer.experiment_started(experiment, store.dir());
    let ctx = context(&stop, &observer);
    let total = experiment.run_count();
    let mut results = done;
    let mut marked = false;
    // A sharded run's runs start at agreed instants (the CLI refused a plan it cannot make).
    let planned = experiment
        .start_at_unix_ms
        .and_then(|at| msgbench_model::shard::planned_starts(experiment, at).ok())
        .unwrap_or_default();
    let mut slot = 0;
    'sweep: for point in &experiment.points {
        for replicate in 1..=experiment.replicates {
            let planned_start_ms = planned.get(slot).copied();
            slot += 1;
            if stop.load(Ordering::Relaxed) {
                break 'sweep;
            }
            let run_id = run_id(point, replicate, experiment.replicates);
            if results.iter().any(|r: &RunResult| r.run_id == run_id) {
                continue;
            }
            if let Some(at) = planned_start_ms {
                if !wait_for_slot(at, &stop) {
                    break 'sweep;
                }
            }
            observer.run_started(&run_id, results.len() + 1, total);
            let run = (point, replicate, planned_start_ms);
            let result = match run_one(experiment, run, run_id, &mut store, &ctx) {
                Ok(r) => r,
                Err(e) => {
                    if fresh && store.discard_if_empty() {
                        return Err(e.without_dir());
                    }
                    return Err(e);
                }
            };
            observer.run_finished(&result);
            if !marked {
                store.mark_latest(); // once a run of this invocation is on disk
                marked = true;
            }
            results.push(result);
        }
    }
    Ok(Outcome {
        dir: store.dir().to_path_buf(),
        results,
        interrupted: stop.load(Ordering::Relaxed),
    })
}

/// The context runs get: the stop flag and live figures for the observer.
pub(crate) fn context(stop: &Arc<AtomicBool>, observer: &Arc<dyn Observer>) -> RunContext {
    let live_observer = observer.clone();
    RunContext {
        stop: stop.clone(),
        live: Some(Arc::new(move |s| live_observer.live(s))),
    }
}

/// Runs one replicate of one point and writes it; a run that broke FIFO delivery is written,
/// then reported as an error.
pub(crate) fn run_one(
    experiment: &Experiment,
    (point, replicate, planned_start_ms): (&SweepPoint, u32, Option<u64>),
    run_id: String,
    store: &mut ResultStore,
    ctx: &RunContext,
) -> Result<RunResult, RunError> {
    let mut scenario = point.scenario.clone();
    scenario.run.start_unix_ns = planned_start_ms.map(|ms| ms * 1_000_000);
    // Each replicate draws its own random arrivals; the seed keeps them reproducible.
    scenario.run.seed = scenario
        .run
        .seed
        .wrapping_add((replicate as u64 - 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let measured = systems::run(&scenario, ctx).map_err(|source| RunError::Engine {
        run_id: run_id.clone(),
        dir: Some(store.dir().to_path_buf()),
        source,
    })?;
    let mut result = assemble(
        experiment,
        point,
        replicate,
        run_id,
        measured.span_start_unix_ms,
        &measured,
    );
    shard_identity(&mut result, &scenario, planned_start_ms);
    store.write_run(
        &result,
        &measured.recording.interval_latency,
        &measured.recording.raw_latencies,
    )?;
    let s = result.sequence;
    if s.total() > 0 {
        return Err(RunError::SequenceBroken {
            run_id: result.run_id.clone(),
            dir: store.dir().to_path_buf(),
            gaps: s.gaps,
            duplicates: s.duplicates,
            reordered: s.reordered,
            hint: broken_sequence_hint(&scenario, &s),
        });
    }
    Ok(result)
}

/// What to add to a broken-sequence error, where the system says more than "a bug in it".
fn broken_sequence_hint(
    scenario: &msgbench_model::Scenario,
    s: &msgbench_model::result::SequenceErrors,
) -> &'static str {
    use msgbench_model::scenario::System;
    match &scenario.system {
        // A feed may skip ids on purpose (conflation, a filter): that is no broken FIFO.
        System::Ticks { ticks, .. } if ticks.udp.is_some() => {
            "; UDP may lose, duplicate and reorder datagrams: ticks.gaps = \"drops\" declares \
             the feed lossy, counting them without failing the run"
        }
        System::Ticks { .. } if s.gaps > 0 => {
            "; a feed that skips sequence numbers on purpose (a conflated or filtered feed) is \
             measured with ticks.gaps = \"drops\", which counts them as dropped"
        }
        System::Queue(q) if q.ring == msgbench_model::queue::RingKind::Library => {
            "; the queue from queue.library returned items it was never given or gave twice \
             (counted as duplicates, never as delivered: docs/own-queue.md)"
        }
        _ => "",
    }
}

/// Sleeps until [`SETUP_LEAD_MS`](msgbench_model::shard::SETUP_LEAD_MS) before a run's planned
/// start (Ctrl-C ends the wait: false).
fn wait_for_slot(planned_ms: u64, stop: &AtomicBool) -> bool {
    let wake_ms = planned_ms.saturating_sub(msgbench_model::shard::SETUP_LEAD_MS);
    while crate::environment::unix_ms() < wake_ms {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = wake_ms.saturating_sub(crate::environment::unix_ms());
        std::thread::sleep(std::time::Duration::from_millis(left.min(50)));
    }
    !stop.load(Ordering::Relaxed)
}

/// Records which shard a run was and how close to its planned start it began; a start late by
/// a second or more shifts its intervals against the other shards' by one, which is a warning.
fn shard_identity(
    result: &mut RunResult,
    scenario: &msgbench_model::Scenario,
    planned_start_ms: Option<u64>,
) {
    let shard = scenario.system.shard();
    let (connections, total_connections) = scenario.system.shard_connections();
    if shard.is_whole() && planned_start_ms.is_none() {
        return;
    }
    // The measured span starts one warm-up after the schedule.
    let late_ms = planned_start_ms.map_or(0, |at| {
        result
            .started_unix_ms
            .saturating_sub(at + scenario.run.warmup.as_millis() as u64)
    });
    if late_ms >= 1_000 {
        result.warnings.push(Warning::Note(format!(
            "started late: {late_ms} ms after its planned start (--start-at); connecting took \
             longer than the {} ms the runner allows, so this shard's seconds are shifted \
             against the others'",
            msgbench_model::shard::SETUP_LEAD_MS
        )));
    } else if late_ms >= 5 {
        result.info.push(format!(
            "started {late_ms} ms after its planned start (--start-at)"
        ));
    }
    // Connections are named by their run-wide index, so shards' lists merge without a clash.
    for c in &mut result.connections {
        c.index = shard.global(c.index as usize) as u32;
    }
    result.shard = Some(msgbench_model::result::ShardInfo {
        index: shard.index,
        count: shard.count,
        connections: connections as u64,
        total_connections: total_connections as u64,
        host: crate::environment::hostname(),
        planned_start_unix_ms: planned_start_ms,
        start_late_ms: late_ms,
        clock: crate::environment::wall_clock_status(),
    });
}

/// `003-capacity=8-every=1ms-r2`: sortable, readable, safe as a file name.
pub(crate) fn run_id(point: &SweepPoint, replicate: u32, replicates: u32) -> String {
    let mut id = format!("{:03}", point.index);
    for (axis, value) in &point.params {
        id.push('-');
        id.push_str(&crate::store::sanitize(&format!(
            "{}={value}",
            short_axis(axis)
        )));
    }
    if replicates > 1 {
        id.push_str(&format!("-r{replicate}"));
    }
    id
}

/// Each operation class's latency and service percentiles, and its latency histogram.
fn class_results(m: &Measured) -> Vec<ClassResult> {
    let rec = &m.recording;
    (m.classes.iter())
        .zip(rec.latency.iter().zip(&rec.service))
        .map(|(name, (l, s))| ClassResult {
            name: name.clone(),
            latency: Percentiles::of(l),
            service: Percentiles::of(s),
            latency_histogram: encode(l),
        })
        .collect()
}

/// The run's CPU: the process's, each driver thread's, their sum, the system under test's,
/// and messages delivered per driver CPU-second.
fn cpu_usage(m: &Measured) -> CpuUsage {
    let driver_cpu_s: f64 = m.threads.iter().map(|t| t.cpu.total_s()).sum();
    CpuUsage {
        process: m.process_cpu,
        threads: m.threads.clone(),
        driver_cpu_s,
        sut_cpu_s: m.sut_cpu_s,
        delivered_per_cpu_s: if driver_cpu_s > 0.0 {
            m.recording.counters.delivered as f64 / driver_cpu_s
        } else {
            0.0
        },
    }
}

/// Turns what a system measured into the result record, with its warnings.
/// The run's full histograms, encoded.
fn histograms(
    rec: &crate::recorder::Recording,
    latency_all: &hdrhistogram::Histogram<u64>,
    service_all: &hdrhistogram::Histogram<u64>,
) -> Histograms {
    Histograms {
        latency: encode(latency_all),
        service: encode(service_all),
        send_lag: encode(&rec.send_lag),
        send_lag_held: encode(&rec.send_lag_held),
        unanswered: encode(&rec.unanswered),
    }
}

fn assemble(
    experiment: &Experiment,
    point: &SweepPoint,
    replicate: u32,
    run_id: String,
    started_unix_ms: u64,
    m: &Measured,
) -> RunResult {
    let rec = &m.recording;
    let scenario = &point.scenario;
    let duration_s = m.span_ns as f64 / 1e9;
    let latency_all = rec.latency_all();
    let service_all = rec.service_all();
    let mut result = RunResult {
        schema_version: SCHEMA_VERSION,
        run_id,
        experiment: experiment.name.clone(),
        point: point.index,
        replicate,
        params: (point.params.iter())
            .map(|(axis, value)| Param {
                axis: axis.clone(),
                value: value.clone(),
            })
            .collect(),
        system: scenario.system.kind(),
        config: m.config.clone(),
        started_unix_ms,
        duration_s,
        warmup_s: scenario.run.warmup.as_secs_f64(),
        send_lag_limit_ns: scenario.run.send_lag_limit_ns(),
        target_per_sec: scenario.target_per_sec(),
        schedule_s: (!scenario.run.duration.is_zero())
            .then_some(scenario.run.duration.as_secs_f64()),
        interrupted: m.interrupted,
        counters: rec.counters,
        sequence: rec.sequence,
        early: rec.early,
        faults: m.faults.clone(),
        latency: Percentiles::of(&latency_all),
        service: Percentiles::of(&service_all),
        send_lag: Percentiles::of(&rec.send_lag),
        send_lag_split: msgbench_model::result::SendLagSplit::of(&rec.send_lag, &rec.send_lag_held),
        unanswered: Percentiles::of(&rec.unanswered),
        publish_latency: m.publish_latency.clone(),
        streamed: rec.streamed.as_ref().map(|s| s.to_result()),
        classes: class_results(m),
        cpu: cpu_usage(m),
        intervals: rec.intervals.clone(),
        stages: match scenario.pacing {
            Pacing::Stages(profile) => stage_results(
                &profile,
                &rec.intervals,
                scenario.run.duration.as_secs_f64(),
            ),
            _ => Vec::new(),
        },
        histograms: histograms(rec, &latency_all, &service_all),
        warnings: Vec::new(),
        streams: m.streams.clone(),
        connections: rec.connections.clone(),
        fairness: Vec::new(),
        info: (m.info.iter().cloned())
            .chain(scenario.spin_note())
            .collect(),
        shard: None,
        pubsub_shard: m.pubsub_shard.clone(),
        shards: Vec::new(),
    };
    result.fairness = msgbench_model::result::fairness_of(&result);
    result.warnings = (m.stopped_by.iter().cloned().map(Warning::StoppedEarly))
        .chain(m.notes.iter().cloned().map(Warning::Note))
        .collect();
    result.warnings.extend(verdict::warnings(&result));
    result
}
