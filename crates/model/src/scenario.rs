//! A scenario: one configuration to measure (system under test + load shape + measurement
//! settings).
//!
//! Configuration happens in two stages. [`ScenarioSpec`] is what a TOML file (or `--set`) says,
//! deserialized strictly (unknown keys are errors that name the valid keys). [`Scenario`] is the
//! validated model the engine runs: every value checked, every unit converted.
use crate::duration::{serde_text, serde_text_opt};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest duration any field accepts (one year): keeps every timestamp sum far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Most raw latencies a run keeps (`run.emit_latencies`): 800 MB of memory.
pub const MAX_RAW_LATENCIES: u64 = 100_000_000;

/// The raw scenario file. Every section has defaults, so an empty file is a valid scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ScenarioSpec {
    /// Name of the experiment; results go to `<out>/<name>/<stamp>/`.
    pub name: String,
    /// Which system under test to drive.
    pub system: SystemKind,
    /// How long, how often, what to keep.
    pub run: RunSpec,
    /// When the driver means to send.
    pub pacing: PacingSpec,
    /// Settings of the `queue` system under test.
    pub queue: QueueSpec,
    /// Connections, window and policies of the request/response drivers (`rpc`, `redis`).
    pub client: crate::client::ClientSpec,
    /// Settings of the `rpc` system under test.
    pub rpc: crate::rpc::RpcSpec,
    /// Settings of the `redis` system under test.
    pub redis: crate::rpc::RedisSpec,
    /// Settings of the `ticks` system (WebSocket broadcast stream).
    pub ticks: crate::ticks::TicksSpec,
    /// Settings of the `ws-rpc` system (JSON-RPC over WebSocket).
    pub ws_rpc: crate::ws_rpc::WsRpcSpec,
    /// An external server process to start for each run (`rpc`, `redis`, `ticks`, `ws-rpc`).
    pub sut: crate::rpc::SutSpec,
    /// How reports judge the results.
    pub report: ReportSpec,
    /// Sweep axes: `"queue.capacity" = [64, 8]`; runs are their cartesian product.
    #[schemars(with = "std::collections::BTreeMap<String, Vec<serde_json::Value>>")]
    pub sweep: toml::Table,
}

impl Default for ScenarioSpec {
    fn default() -> Self {
        ScenarioSpec {
            name: "msgbench".into(),
            system: SystemKind::Queue,
            run: RunSpec::default(),
            pacing: PacingSpec::default(),
            queue: QueueSpec::default(),
            client: Default::default(),
            rpc: Default::default(),
            redis: Default::default(),
            ticks: Default::default(),
            ws_rpc: Default::default(),
            sut: Default::default(),
            report: Default::default(),
            sweep: toml::Table::new(),
        }
    }
}

/// The `[report]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReportSpec {
    /// Latency objective for advice and `msgbench search`, e.g. `"p99 < 10ms"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<String>,
}

/// The systems under test msgbench knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SystemKind {
    /// In-process bounded single-producer/single-consumer ring.
    Queue,
    /// Framed request/response over TCP: the built-in server or any address speaking the
    /// protocol of `docs/protocol.md`.
    Rpc,
    /// A Redis server (RESP: PING, GET, SET).
    Redis,
    /// A WebSocket server broadcasting market ticks to native and browser clients.
    Ticks,
    /// JSON-RPC 2.0 over WebSocket.
    WsRpc,
}

/// Measurement settings of every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    /// Measured time per run (after warm-up), e.g. `"5s"`.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub duration: Duration,
    /// Time run and discarded before measuring, e.g. `"1s"`.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub warmup: Duration,
    /// Stop after this many measured operations instead (whichever comes first with duration).
    pub operations: Option<u64>,
    /// How many times each sweep point is run.
    pub replicates: u32,
    /// How long to wait for in-flight messages after the last send.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub drain_timeout: Duration,
    /// Keep up to this many raw per-message latencies per run (`runs/<id>.latencies.csv`).
    pub emit_latencies: Option<u64>,
    /// Seed for random arrivals, so Poisson schedules are reproducible.
    pub seed: u64,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            duration: Duration::from_secs(3),
            warmup: Duration::from_millis(500),
            operations: None,
            replicates: 1,
            drain_timeout: Duration::from_secs(1),
            emit_latencies: None,
            seed: 1,
        }
    }
}

/// When the driver means to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PacingSpec {
    /// `immediate`, `interval`, `rate`, `relative` or `closed-loop`.
    pub mode: PacingMode,
    /// Period of `interval` and `relative` pacing (`"1ms"`); `"0"` means immediate.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub every: Option<Duration>,
    /// Messages sent per tick of `interval` / `relative` pacing.
    pub batch: u32,
    /// Target messages per second of `rate` pacing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_sec: Option<f64>,
    /// Arrival process of `rate` pacing.
    pub arrivals: Arrivals,
    /// How long before a deadline the pacer stops sleeping and spins (precision vs CPU).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub spin: Duration,
}

impl Default for PacingSpec {
    fn default() -> Self {
        PacingSpec {
            mode: PacingMode::Immediate,
            every: None,
            batch: 1,
            per_sec: None,
            arrivals: Arrivals::Uniform,
            spin: Duration::from_micros(80),
        }
    }
}

/// Pacing modes (see `docs/concepts.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PacingMode {
    /// Send as fast as the system accepts.
    Immediate,
    /// Every `every`, send `batch` messages, on an absolute schedule.
    Interval,
    /// `per_sec` messages per second on an absolute schedule.
    Rate,
    /// Sleep `every` after each batch (relative sleeping: drifts on purpose).
    Relative,
    /// Request/response systems: send the next request when a response frees a window slot
    /// (latency then counts from the actual send: there is no schedule).
    ClosedLoop,
}

/// Arrival processes for `rate` pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Evenly spaced.
    Uniform,
    /// Exponentially distributed gaps (seeded).
    Poisson,
}

/// Settings of the in-process queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSpec {
    /// Slots in the ring (any positive number).
    pub capacity: u64,
    /// Ring implementation: `msgbench` (ours) or `rtrb` (the crate).
    pub ring: RingKind,
    /// What the producer does when the ring is full: `drop` or `block`.
    pub when_full: WhenFull,
    /// How the producer waits for space (`block` only).
    pub producer_wait: WaitStrategy,
    /// How the consumer waits for items.
    pub consumer_wait: WaitStrategy,
    /// CPU pinning of producer and consumer threads.
    pub pin: PinSpec,
    /// Bytes of a per-consumer buffer touched per item (simulated work).
    pub work_bytes: u64,
    /// Nanoseconds of busy work per item (simulated work).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub work: Duration,
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            capacity: 1024,
            ring: RingKind::Msgbench,
            when_full: WhenFull::Block,
            producer_wait: WaitStrategy::BusySpin,
            consumer_wait: WaitStrategy::BusySpin,
            pin: PinSpec::default(),
            work_bytes: 0,
            work: Duration::ZERO,
        }
    }
}

/// CPU pinning of a two-thread system.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PinSpec {
    /// CPU of the producer thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<usize>,
    /// CPU of the consumer thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<usize>,
}

/// SPSC ring implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RingKind {
    /// msgbench's own ring (cache-padded, cached indices).
    Msgbench,
    /// The `rtrb` crate.
    Rtrb,
}

/// Policy when the system is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WhenFull {
    /// Count the message as dropped and go on.
    Drop,
    /// Wait for space; the wait counts as latency.
    Block,
}

/// How a thread waits for something to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Spin on the CPU (lowest latency, burns a core).
    BusySpin,
    /// `sched_yield` between checks.
    Yield,
    /// Sleep (futex) until woken by the other side.
    Park,
    /// Spin, then yield, then park.
    Backoff,
}

/// A validated scenario: what the engine runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Experiment name.
    pub name: String,
    /// Measurement settings.
    pub run: RunSettings,
    /// Validated pacing.
    pub pacing: Pacing,
    /// Validated system under test.
    pub system: System,
    /// The latency objective (`report.slo`), if any.
    pub slo: Option<crate::slo::Slo>,
}

/// Validated measurement settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Measured window.
    pub duration: Duration,
    /// Discarded warm-up.
    pub warmup: Duration,
    /// Optional operation budget of the measured window.
    pub operations: Option<u64>,
    /// Drain timeout after the last send.
    pub drain_timeout: Duration,
    /// Raw latencies to keep.
    pub emit_latencies: Option<u64>,
    /// Seed of random arrivals.
    pub seed: u64,
}

/// Validated pacing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// As fast as possible.
    Immediate,
    /// `batch` messages every `every_ns`, absolute schedule.
    Interval {
        /// Period in ns (> 0).
        every_ns: u64,
        /// Messages per tick (> 0).
        batch: u32,
    },
    /// Open-loop rate on an absolute schedule.
    Rate {
        /// Messages per second (> 0).
        per_sec: f64,
        /// Arrival process.
        arrivals: Arrivals,
    },
    /// Relative sleeping after each batch (drifts; for reproducing the trap).
    Relative {
        /// Sleep in ns (> 0).
        every_ns: u64,
        /// Messages per wake-up.
        batch: u32,
    },
    /// Request/response only: a new request whenever a response frees a window slot.
    ClosedLoop,
}

impl Pacing {
    /// The rate this pacing aims at, if it aims at one.
    pub fn target_per_sec(&self) -> Option<f64> {
        match *self {
            Pacing::Immediate | Pacing::ClosedLoop => None,
            Pacing::Interval { every_ns, batch } | Pacing::Relative { every_ns, batch } => {
                Some(batch as f64 * 1e9 / every_ns as f64)
            }
            Pacing::Rate { per_sec, .. } => Some(per_sec),
        }
    }
}

/// A validated system under test.
#[derive(Debug, Clone, PartialEq)]
pub enum System {
    /// The in-process queue.
    Queue(QueueConfig),
    /// Request/response over TCP with msgbench's framing.
    Rpc {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Protocol, mix and built-in server.
        rpc: crate::rpc::RpcConfig,
        /// External server to start, if any.
        sut: Option<crate::rpc::SutConfig>,
    },
    /// A Redis server.
    Redis {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Address, keys and mix.
        redis: crate::rpc::RedisConfig,
        /// External server to start, if any.
        sut: Option<crate::rpc::SutConfig>,
    },
    /// A WebSocket tick stream.
    Ticks {
        /// Server, format and client groups.
        ticks: crate::ticks::TicksConfig,
        /// External server to start, if any.
        sut: Option<crate::rpc::SutConfig>,
    },
    /// JSON-RPC over WebSocket.
    WsRpc {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Address, methods, wait strategy and built-in server.
        ws_rpc: crate::ws_rpc::WsRpcConfig,
        /// External server to start, if any.
        sut: Option<crate::rpc::SutConfig>,
    },
}

impl System {
    /// The name results carry (`queue`, `rpc`, `redis`).
    pub fn kind(&self) -> &'static str {
        match self {
            System::Queue(_) => "queue",
            System::Rpc { .. } => "rpc",
            System::Redis { .. } => "redis",
            System::Ticks { .. } => "ticks",
            System::WsRpc { .. } => "ws-rpc",
        }
    }

    /// One line with every setting, in scenario-file spelling.
    pub fn describe(&self) -> String {
        match self {
            System::Queue(q) => q.describe(),
            System::Rpc { client, rpc, sut } => format!(
                "rpc {} {} request_bytes={} response_bytes={} ops={}{}",
                rpc.address.as_deref().unwrap_or("built-in"),
                client.describe(),
                rpc.request_bytes,
                rpc.response_bytes,
                rpc.ops
                    .iter()
                    .map(|o| format!(
                        "{}:{:.0}%:{}",
                        o.name,
                        o.share * 100.0,
                        crate::duration::format(Duration::from_nanos(o.service_ns))
                    ))
                    .collect::<Vec<_>>()
                    .join(","),
                sut.as_ref()
                    .map(|s| format!(" sut=`{}`", s.command))
                    .unwrap_or_default()
            ),
            System::Redis { client, redis, sut } => format!(
                "redis {} {} keys={} value_bytes={} ops={}{}",
                redis.address,
                client.describe(),
                redis.keys,
                redis.value_bytes,
                redis
                    .ops
                    .iter()
                    .map(|(n, share, _)| format!("{n}:{:.0}%", share * 100.0))
                    .collect::<Vec<_>>()
                    .join(","),
                sut.as_ref()
                    .map(|s| format!(" sut=`{}`", s.command))
                    .unwrap_or_default()
            ),
            System::Ticks { ticks, sut } => format!(
                "{}{}",
                ticks.describe(),
                sut.as_ref()
                    .map(|s| format!(" sut=`{}`", s.command))
                    .unwrap_or_default()
            ),
            System::WsRpc {
                client,
                ws_rpc,
                sut,
            } => format!(
                "{}{}",
                ws_rpc.describe(client),
                sut.as_ref()
                    .map(|s| format!(" sut=`{}`", s.command))
                    .unwrap_or_default()
            ),
        }
    }
}

impl Scenario {
    /// The total rate the schedule aims at. Request/response drivers pace each connection:
    /// `interval` sends `batch` per connection per tick; `rate` is split over the connections.
    /// A tick stream sends every tick to every client: its target is the rate × clients.
    pub fn target_per_sec(&self) -> Option<f64> {
        let per_schedule = self.pacing.target_per_sec()?;
        Some(match (&self.system, self.pacing) {
            (
                System::Rpc { client, .. }
                | System::Redis { client, .. }
                | System::WsRpc { client, .. },
                Pacing::Interval { .. } | Pacing::Relative { .. },
            ) => per_schedule * client.total_connections() as f64,
            // Someone else's server keeps its own schedule.
            (System::Ticks { ticks, .. }, _) if ticks.address.is_some() => return None,
            // A broadcast: every client is meant to get every tick.
            (System::Ticks { ticks, .. }, _) => per_schedule * ticks.total_connections() as f64,
            _ => per_schedule,
        })
    }
}

/// Validated queue settings.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// Slots (> 0).
    pub capacity: usize,
    /// Ring implementation.
    pub ring: RingKind,
    /// Full policy.
    pub when_full: WhenFull,
    /// Producer wait strategy.
    pub producer_wait: WaitStrategy,
    /// Consumer wait strategy.
    pub consumer_wait: WaitStrategy,
    /// Producer CPU.
    pub pin_producer: Option<usize>,
    /// Consumer CPU.
    pub pin_consumer: Option<usize>,
    /// Bytes touched per item.
    pub work_bytes: usize,
    /// Busy ns per item.
    pub work_ns: u64,
    /// Spin margin of precise sleeps, in ns.
    pub spin_ns: u64,
}

impl std::fmt::Display for Pacing {
    /// `immediate`, `interval 1ms x 10`, `rate 100000/s uniform`, `relative 1ms x 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |ns: u64| crate::duration::format(Duration::from_nanos(ns));
        match *self {
            Pacing::Immediate => write!(f, "immediate"),
            Pacing::ClosedLoop => write!(f, "closed-loop"),
            Pacing::Interval { every_ns, batch } => write!(f, "interval {} x {batch}", d(every_ns)),
            Pacing::Rate { per_sec, arrivals } => write!(
                f,
                "rate {per_sec}/s {}",
                if arrivals == Arrivals::Poisson {
                    "poisson"
                } else {
                    "uniform"
                }
            ),
            Pacing::Relative { every_ns, batch } => write!(f, "relative {} x {batch}", d(every_ns)),
        }
    }
}

impl QueueConfig {
    /// One line with every setting, in scenario-file spelling.
    pub fn describe(&self) -> String {
        let name = |v: &dyn erased::Spelled| v.spelled();
        let pin = |cpu: Option<usize>| cpu.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        format!(
            "queue capacity={} ring={} when_full={} producer_wait={} consumer_wait={} pin={}/{} work_bytes={} work={}",
            self.capacity,
            name(&self.ring),
            name(&self.when_full),
            name(&self.producer_wait),
            name(&self.consumer_wait),
            pin(self.pin_producer),
            pin(self.pin_consumer),
            self.work_bytes,
            crate::duration::format(Duration::from_nanos(self.work_ns))
        )
    }
}

/// The spelling of enum values in scenario files (`busy-spin`), for descriptions.
mod erased {
    /// A value with a scenario-file spelling.
    pub trait Spelled {
        /// How a scenario file writes it.
        fn spelled(&self) -> String;
    }
    impl<T: serde::Serialize> Spelled for T {
        fn spelled(&self) -> String {
            match serde_json::to_value(self) {
                Ok(serde_json::Value::String(s)) => s,
                other => format!("{other:?}"),
            }
        }
    }
}

/// Why a scenario is not valid. Every message names the field and how to fix it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioError {
    /// The file is not valid TOML or has wrong keys/types (message carries line and column).
    #[error("{source_name}: {message}")]
    Syntax {
        /// File name or `--set`.
        source_name: String,
        /// toml's message (line, column, snippet, expected keys).
        message: String,
    },
    /// A field has a value the engine cannot run.
    #[error("{source_name}: `{field}` {problem}; {fix}")]
    Invalid {
        /// File name.
        source_name: String,
        /// Dotted field path.
        field: String,
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
}

/// CPUs that the process may run on, passed in by the caller so validation stays pure.
#[derive(Debug, Clone)]
pub struct MachineLimits {
    /// Allowed CPU ids.
    pub cpus: Vec<usize>,
}

impl ScenarioSpec {
    /// Checks every value and converts to the model the engine runs.
    pub fn validate(
        &self,
        source_name: &str,
        limits: &MachineLimits,
    ) -> Result<Scenario, ScenarioError> {
        let invalid = |field: &str, problem: String, fix: &str| ScenarioError::Invalid {
            source_name: source_name.into(),
            field: field.into(),
            problem,
            fix: fix.into(),
        };
        let run = &self.run;
        for (field, d) in [
            ("run.duration", run.duration),
            ("run.warmup", run.warmup),
            ("run.drain_timeout", run.drain_timeout),
            ("pacing.every", self.pacing.every.unwrap_or_default()),
            ("pacing.spin", self.pacing.spin),
            ("queue.work", self.queue.work),
        ] {
            if d > MAX_DURATION {
                return Err(invalid(
                    field,
                    format!("is {}", crate::duration::format(d)),
                    "use at most 365 days",
                ));
            }
        }
        if run.duration.is_zero() && run.operations.is_none() {
            return Err(invalid(
                "run.duration",
                "is 0 and no `run.operations` is set".into(),
                "give a duration such as \"5s\" or an operation count",
            ));
        }
        if run.operations == Some(0) {
            return Err(invalid(
                "run.operations",
                "is 0".into(),
                "give a positive count or remove the key",
            ));
        }
        if run.replicates == 0 {
            return Err(invalid("run.replicates", "is 0".into(), "use 1 or more"));
        }
        if run.emit_latencies.is_some_and(|n| n > MAX_RAW_LATENCIES) {
            return Err(invalid("run.emit_latencies", format!("is {}", run.emit_latencies.unwrap_or_default()), &format!("keep at most {MAX_RAW_LATENCIES} (8 bytes each, allocated before the run); the histograms hold every message anyway")));
        }
        if run.emit_latencies == Some(0) {
            return Err(invalid(
                "run.emit_latencies",
                "is 0".into(),
                "give the number of latencies to keep, e.g. 1000000, or remove the key",
            ));
        }
        let pacing = self.pacing.validate(&invalid)?;
        let system = match self.system {
            SystemKind::Queue => {
                if pacing == Pacing::ClosedLoop {
                    return Err(invalid(
                        "pacing.mode",
                        "is `closed-loop`, which needs a request/response system".into(),
                        "for the queue use `immediate` with `queue.when_full = \"block\"`",
                    ));
                }
                System::Queue(self.queue.validate(&self.pacing, limits, &invalid)?)
            }
            SystemKind::Rpc => {
                let client = self.client.validate(&self.pacing, limits, &invalid)?;
                let rpc = self.rpc.validate(limits, &invalid)?;
                let sut = self.sut.validate(rpc.address.as_deref(), &invalid)?;
                if rpc.address.is_none() {
                    let server = &rpc.server;
                    if rpc.request_bytes as u64 + 32 > server.max_frame as u64 {
                        return Err(invalid(
                            "rpc.request_bytes",
                            format!(
                                "is {}, more than the built-in server's max_frame ({}) allows",
                                rpc.request_bytes, server.max_frame
                            ),
                            "raise `rpc.server.max_frame` or send smaller requests",
                        ));
                    }
                    if rpc.response_bytes as u64 + 64 > server.max_frame as u64 {
                        return Err(invalid(
                            "rpc.response_bytes",
                            format!(
                                "is {}, more than the built-in server's max_frame ({}) allows",
                                rpc.response_bytes, server.max_frame
                            ),
                            "raise `rpc.server.max_frame` or ask for smaller responses",
                        ));
                    }
                    if client.total_connections() > server.max_connections {
                        return Err(invalid(
                            "client.connections",
                            format!("makes {} connections, more than the built-in server's max_connections ({})", client.total_connections(), server.max_connections),
                            "raise `rpc.server.max_connections` or open fewer connections",
                        ));
                    }
                }
                if sut.is_some() && rpc.address.is_none() {
                    return Err(invalid(
                        "rpc.address",
                        "is missing while [sut] starts a server".into(),
                        "set it to the address the started server listens on",
                    ));
                }
                System::Rpc { client, rpc, sut }
            }
            SystemKind::Redis => {
                let client = self.client.validate(&self.pacing, limits, &invalid)?;
                let redis = self.redis.validate(&invalid)?;
                let sut = self.sut.validate(Some(&redis.address), &invalid)?;
                System::Redis { client, redis, sut }
            }
            SystemKind::Ticks => {
                if self.run.operations.is_some() {
                    return Err(invalid(
                        "run.operations",
                        "is set for a broadcast stream".into(),
                        "a tick stream runs for `run.duration`; remove `run.operations`",
                    ));
                }
                let ticks = self.ticks.validate(&self.pacing, limits, &invalid)?;
                let ready = ticks.address.as_deref().map(crate::ticks::ws_authority);
                let sut = self.sut.validate(ready, &invalid)?;
                if sut.is_some() && ticks.address.is_none() {
                    return Err(invalid(
                        "ticks.address",
                        "is missing while [sut] starts a server".into(),
                        "set it to the ws:// address the started server listens on",
                    ));
                }
                System::Ticks { ticks, sut }
            }
            SystemKind::WsRpc => {
                let client = self.client.validate(&self.pacing, limits, &invalid)?;
                let ws_rpc = self.ws_rpc.validate(&client, limits, &invalid)?;
                let ready = ws_rpc.address.as_deref().map(crate::ticks::ws_authority);
                let sut = self.sut.validate(ready, &invalid)?;
                if sut.is_some() && ws_rpc.address.is_none() {
                    return Err(invalid(
                        "ws_rpc.address",
                        "is missing while [sut] starts a server".into(),
                        "set it to the ws:// address the started server listens on",
                    ));
                }
                System::WsRpc {
                    client,
                    ws_rpc,
                    sut,
                }
            }
        };
        let slo = match &self.report.slo {
            None => None,
            Some(text) => Some(
                crate::slo::Slo::parse(text)
                    .map_err(|e| invalid("report.slo", format!("is \"{text}\""), &e))?,
            ),
        };
        Ok(Scenario {
            slo,
            name: self.name.clone(),
            run: RunSettings {
                duration: run.duration,
                warmup: run.warmup,
                operations: run.operations,
                drain_timeout: run.drain_timeout,
                emit_latencies: run.emit_latencies,
                seed: run.seed,
            },
            pacing,
            system,
        })
    }
}

/// Builds the error for an invalid field: `(field, problem, fix)`.
pub type Invalid<'a> = dyn Fn(&str, String, &str) -> ScenarioError + 'a;

impl PacingSpec {
    /// Checks the pacing settings (also used by `msgbench serve ticks`).
    pub fn validate(&self, invalid: &Invalid) -> Result<Pacing, ScenarioError> {
        if self.batch == 0 {
            return Err(invalid(
                "pacing.batch",
                "is 0".into(),
                "send at least 1 message per tick",
            ));
        }
        let every = |mode: &str| {
            self.every.ok_or_else(|| {
                invalid(
                    "pacing.every",
                    format!("is missing for mode `{mode}`"),
                    "set it, e.g. \"1ms\"",
                )
            })
        };
        Ok(match self.mode {
            PacingMode::Immediate => Pacing::Immediate,
            PacingMode::ClosedLoop => Pacing::ClosedLoop,
            PacingMode::Interval => match every("interval")? {
                d if d.is_zero() => Pacing::Immediate,
                d => Pacing::Interval {
                    every_ns: d.as_nanos() as u64,
                    batch: self.batch,
                },
            },
            PacingMode::Relative => match every("relative")? {
                d if d.is_zero() => {
                    return Err(invalid(
                        "pacing.every",
                        "is 0 for mode `relative`".into(),
                        "use mode = \"immediate\" to send without sleeping",
                    ))
                }
                d => Pacing::Relative {
                    every_ns: d.as_nanos() as u64,
                    batch: self.batch,
                },
            },
            PacingMode::Rate => {
                let per_sec = self.per_sec.ok_or_else(|| {
                    invalid(
                        "pacing.per_sec",
                        "is missing for mode `rate`".into(),
                        "set it, e.g. 10000",
                    )
                })?;
                if !(per_sec.is_finite() && per_sec >= 0.001) {
                    return Err(invalid(
                        "pacing.per_sec",
                        format!("is {per_sec}"),
                        "give a rate of at least 0.001 messages per second, e.g. 10000",
                    ));
                }
                Pacing::Rate {
                    per_sec,
                    arrivals: self.arrivals,
                }
            }
        })
    }
}

impl QueueSpec {
    fn validate(
        &self,
        pacing: &PacingSpec,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<QueueConfig, ScenarioError> {
        if self.capacity == 0 {
            return Err(invalid(
                "queue.capacity",
                "is 0".into(),
                "a ring needs at least 1 slot, e.g. 64",
            ));
        }
        if self.capacity > (1 << 26) {
            return Err(invalid(
                "queue.capacity",
                format!("is {}", self.capacity),
                "use at most 67108864 slots (each holds a 24-byte item)",
            ));
        }
        if self.work_bytes > (1 << 30) {
            return Err(invalid(
                "queue.work_bytes",
                format!("is {}", self.work_bytes),
                "touch at most 1 GiB per item",
            ));
        }
        for (field, cpu) in [
            ("queue.pin.producer", self.pin.producer),
            ("queue.pin.consumer", self.pin.consumer),
        ] {
            if let Some(cpu) = cpu {
                if !limits.cpus.contains(&cpu) {
                    return Err(invalid(
                        field,
                        format!("is CPU {cpu}, which this process cannot run on"),
                        &format!("pick one of the CPUs {:?}", limits.cpus),
                    ));
                }
            }
        }
        Ok(QueueConfig {
            capacity: self.capacity as usize,
            ring: self.ring,
            when_full: self.when_full,
            producer_wait: self.producer_wait,
            consumer_wait: self.consumer_wait,
            pin_producer: self.pin.producer,
            pin_consumer: self.pin.consumer,
            work_bytes: self.work_bytes as usize,
            work_ns: self.work.as_nanos() as u64,
            spin_ns: pacing.spin.as_nanos() as u64,
        })
    }
}
