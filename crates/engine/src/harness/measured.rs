//! What a run hands its system ([`RunContext`]) and what a system hands back ([`Measured`]).
use crate::cpu::CpuSnapshot;
use crate::error::EngineError;
use crate::recorder::{LiveCallback, Recording};
use msgbench_model::result::{CpuTimes, Faults, StreamClient, ThreadCpu};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What the runner hands a system for one run.
#[derive(Clone)]
pub struct RunContext {
    /// Raised by Ctrl-C: stop sending, drain, and report what was measured.
    pub stop: Arc<AtomicBool>,
    /// Live figures for a progress line.
    pub live: Option<LiveCallback>,
}

/// What a system measured in one run.
#[derive(Debug)]
pub struct Measured {
    /// Merged recording.
    pub recording: Recording,
    /// Names of the operation classes, indexed like the recording's histograms.
    pub classes: Vec<String>,
    /// Length of the measured span, ns (shorter than configured when stopped early).
    pub span_ns: u64,
    /// Wall-clock time (Unix ms) at which the measured span began.
    pub span_start_unix_ms: u64,
    /// Process CPU over the whole run.
    pub process_cpu: CpuTimes,
    /// CPU of each worker thread over the measured span.
    pub threads: Vec<ThreadCpu>,
    /// True when the stop flag cut the run short.
    pub interrupted: bool,
    /// One-line description of the configuration.
    pub config: String,
    /// Faults of request/response systems.
    pub faults: Faults,
    /// CPU seconds of the system under test over the measured span, when measured apart.
    pub sut_cpu_s: Option<f64>,
    /// Why an error of the system under test stopped the run early (`on_error = "stop"`).
    pub stopped_by: Option<String>,
    /// What the reader must know about how this run went (a server's counts, a process that
    /// exited, …).
    pub notes: Vec<String>,
    /// Per-client results of a broadcast stream (empty for other systems).
    pub streams: Vec<StreamClient>,
    /// How to read the figures (not a warning: the run is not less valid for it).
    pub info: Vec<String>,
    /// Publish latency (pubsub: the broker's answer − intended publish time), when measured.
    pub publish_latency: Option<msgbench_model::histogram::Percentiles>,
    /// A shard of a publish/subscribe run: what `merge` accounts again across the shards.
    pub pubsub_shard: Option<msgbench_model::result::PubsubShardFigures>,
}

/// What a driver measured besides the recording.
#[derive(Debug)]
pub struct DriverOutput {
    /// Merged recording.
    pub recording: Recording,
    /// Length of the measured span, ns.
    pub span_ns: u64,
    /// When it began (clock ns).
    pub measure_start_ns: u64,
    /// CPU of each driver thread over the measured span.
    pub threads: Vec<ThreadCpu>,
    /// Faults by kind.
    pub faults: Faults,
    /// True when Ctrl-C or an error stopped the run early.
    pub interrupted: bool,
    /// Why the run stopped early, when an error stopped it.
    pub stopped_by: Option<String>,
    /// CPU of the system under test over the measured span, seconds.
    pub sut_cpu_s: Option<f64>,
}

impl Measured {
    /// What a driver measured, with the system's class names, configuration and notes.
    pub fn from_driver(
        out: DriverOutput,
        classes: Vec<String>,
        process_before: CpuSnapshot,
        config: String,
        notes: Vec<String>,
    ) -> Measured {
        Measured {
            recording: out.recording,
            classes,
            span_ns: out.span_ns,
            span_start_unix_ms: unix_ms_of(out.measure_start_ns),
            process_cpu: CpuSnapshot::process().since(&process_before),
            threads: out.threads,
            interrupted: out.interrupted,
            config,
            faults: out.faults,
            sut_cpu_s: out.sut_cpu_s,
            stopped_by: out.stopped_by,
            notes,
            streams: Vec::new(),
            info: Vec::new(),
            publish_latency: None,
            pubsub_shard: None,
        }
    }
}

/// Wall-clock time (Unix ms) of the clock instant `ns`, from how long ago it was (now, if it is
/// still to come).
pub fn unix_ms_of(ns: u64) -> u64 {
    let now_ns = crate::clock::now_ns();
    crate::environment::unix_ms() - now_ns.saturating_sub(ns) / 1_000_000
}

/// What a driver thread returns: its threads' CPU and its faults.
pub type ThreadOutput = Result<(Vec<ThreadCpu>, Faults), EngineError>;

/// Merges what the driver threads returned; the last error (or panic of `role`) wins.
pub fn gather(
    outs: impl IntoIterator<Item = std::thread::Result<ThreadOutput>>,
    role: &'static str,
) -> ThreadOutput {
    let mut threads = Vec::new();
    let mut faults = Faults::default();
    let mut failed = None;
    for out in outs {
        match out {
            Ok(Ok((cpu, f))) => {
                threads.extend(cpu);
                faults += f;
            }
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(EngineError::WorkerPanicked(role)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((threads, faults)),
    }
}
