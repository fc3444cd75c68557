//! Systems under test. Each one takes a validated scenario, drives it through the pacer and
//! records into [`crate::recorder`]; the runner turns what it measured into a result.
use crate::recorder::{LiveCallback, Recording};
use msgbench_model::result::{CpuTimes, Faults, ThreadCpu};
use msgbench_model::scenario::{Scenario, System};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub mod client;
pub mod queue;
pub mod redis;
pub mod rpc;
pub mod ticks;
pub mod window;
pub mod ws_rpc;

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
    /// Faults of request/response systems.
    pub faults: Faults,
    /// CPU seconds of the system under test over the measured window, when measured apart.
    pub sut_cpu_s: Option<f64>,
    /// What the reader must know about how this run went (why it stopped early, …).
    pub notes: Vec<String>,
    /// Per-client results of a broadcast stream (empty for other systems).
    pub streams: Vec<msgbench_model::result::StreamClient>,
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
    /// The server did not accept a connection.
    #[error(
        "cannot connect to {address}: {source}; is the server running and listening there? {hint}"
    )]
    Connect {
        /// The address.
        address: String,
        /// OS error.
        source: std::io::Error,
        /// How to get a server there.
        hint: String,
    },
    /// An address did not resolve.
    #[error("cannot resolve `{0}` to an address; write it as host:port, e.g. 127.0.0.1:6379")]
    Resolve(String),
    /// The external server process could not be started or did not become ready.
    #[error("system under test `{command}`: {problem}")]
    Sut {
        /// Its command.
        command: String,
        /// What went wrong.
        problem: String,
    },
    /// The peer accepted TCP but is not a WebSocket server, or refused the upgrade.
    #[error("cannot open a WebSocket to {address}: {problem}")]
    Handshake {
        /// The address.
        address: String,
        /// What went wrong.
        problem: String,
    },
    /// A browser client could not be started or did not connect.
    #[error("browser client: {0}")]
    Browser(String),
    /// The built-in server could not start.
    #[error("cannot start the built-in server: {0}")]
    Server(std::io::Error),
    /// An OS call of the event loop failed.
    #[error("event loop: {0}")]
    Io(std::io::Error),
}

/// Runs one scenario on its system under test.
pub fn run(scenario: &Scenario, ctx: &RunContext) -> Result<Measured, EngineError> {
    match &scenario.system {
        System::Queue(q) => queue::run(scenario, q, ctx),
        System::Rpc { client, rpc, sut } => rpc::run(scenario, client, rpc, sut.as_ref(), ctx),
        System::Redis { client, redis, sut } => {
            redis::run(scenario, client, redis, sut.as_ref(), ctx)
        }
        System::Ticks { ticks, sut } => ticks::run(scenario, ticks, sut.as_ref(), ctx),
        System::WsRpc {
            client,
            ws_rpc,
            sut,
        } => ws_rpc::run(scenario, client, ws_rpc, sut.as_ref(), ctx),
    }
}
