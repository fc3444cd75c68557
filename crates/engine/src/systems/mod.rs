//! Systems under test. Each one takes a validated scenario, drives it through the pacer and
//! records into [`crate::recorder`]; the runner turns what it measured into a result.
use crate::recorder::{LiveCallback, Recording};
use msgbench_model::result::{CpuTimes, ThreadCpu};
use msgbench_model::scenario::{Scenario, System};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub mod queue;

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
    /// Length of the measured window, ns (shorter than configured when stopped early).
    pub window_ns: u64,
    /// Wall-clock time (Unix ms) at which the measured window began.
    pub window_start_unix_ms: u64,
    /// Process CPU over the whole run.
    pub process_cpu: CpuTimes,
    /// CPU of each worker thread over the measured window.
    pub threads: Vec<ThreadCpu>,
    /// True when the stop flag cut the run short.
    pub interrupted: bool,
    /// One-line description of the configuration.
    pub config: String,
}

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `sched_setaffinity` refused.
    #[error("cannot pin the {role} thread to CPU {cpu}: {source}; choose a CPU this process may use (see `taskset -p $$`)")]
    Pin {
        /// Thread role.
        role: &'static str,
        /// The CPU.
        cpu: usize,
        /// OS error.
        source: std::io::Error,
    },
    /// A worker thread panicked (a bug in msgbench).
    #[error(
        "the {0} thread panicked; this is a bug in msgbench, please report it with the scenario"
    )]
    WorkerPanicked(&'static str),
}

/// Runs one scenario on its system under test.
pub fn run(scenario: &Scenario, ctx: &RunContext) -> Result<Measured, EngineError> {
    match &scenario.system {
        System::Queue(q) => queue::run(scenario, q, ctx),
    }
}
