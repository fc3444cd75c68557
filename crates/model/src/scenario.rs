//! A scenario: one configuration to measure (system under test + load shape + measurement
//! settings).
//!
//! Configuration happens in two stages. [`ScenarioSpec`] is what a TOML file (or `--set`) says,
//! deserialized strictly (unknown keys are errors that name the valid keys). [`Scenario`] is the
//! validated model the engine runs: every value checked, every unit converted.
//!
//! This file composes the sections: the run settings, the pacing ([`crate::pacing`]), then
//! each system's own section and its cross-checks in that system's file ([`crate::queue`],
//! [`crate::rpc`], [`crate::redis`], [`crate::ticks`], [`crate::ws_rpc`], with [`crate::client`]
//! and [`crate::sut`]); the shared checks are in [`crate::check`].
use crate::check::{Invalid, MachineLimits, ScenarioError, MAX_DURATION, MAX_RAW_LATENCIES};
use crate::duration::serde_text;
pub use crate::kind::{SystemKind, SYSTEM_SECTIONS};
use crate::pacing::{Pacing, PacingSpec};
use crate::queue::{QueueConfig, QueueSpec};
use crate::threshold::Threshold;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// Connections, window and policies of the request/response drivers (`rpc`, `redis`, `ws-rpc`).
    pub client: crate::client::ClientSpec,
    /// Settings of the `rpc` system under test.
    pub rpc: crate::rpc::RpcSpec,
    /// Settings of the `redis` system under test.
    pub redis: crate::redis::RedisSpec,
    /// Settings of the `ticks` system (WebSocket broadcast stream).
    pub ticks: crate::ticks::TicksSpec,
    /// Settings of the `ws-rpc` system (JSON-RPC over WebSocket).
    pub ws_rpc: crate::ws_rpc::WsRpcSpec,
    /// Settings of the `http` system (HTTP/1.1 requests).
    pub http: crate::http::HttpSpec,
    /// Settings of the `pubsub` system (publish/subscribe through a broker).
    pub pubsub: crate::pubsub::PubsubSpec,
    /// Settings of the `wire` system (a request/response protocol described here).
    pub wire: crate::wire::WireSpec,
    /// An external server process to start for each run (`rpc`, `redis`, `ticks`, `ws-rpc`).
    pub sut: crate::sut::SutSpec,
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
            http: Default::default(),
            pubsub: Default::default(),
            wire: Default::default(),
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
    /// Sweep axes that are load besides the built-in ones ([`crate::sweep::LOAD_AXES`]): a knee
    /// and advice are given along load axes only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_axes: Vec<String>,
    /// Pass/fail checks on every run, for CI: `["p99 < 10ms", "delivered >= 99.9%",
    /// "failed == 0"]` (the grammar of `slo`, plus counts, rates and scopes: docs/metrics.md,
    /// "Thresholds"). A run that fails one makes `msgbench run` exit 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<String>,
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
    /// Send lag p99 above which a run is late (not valid), e.g. `"1ms"` (the default).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub send_lag_limit: Duration,
    /// Seed for random arrivals, so Poisson schedules are reproducible.
    pub seed: u64,
    /// Most runs (sweep points × replicates) one experiment may make: a typo such as a sweep
    /// of 10⁴ × 10⁴ values is refused before its points are built.
    pub max_runs: u64,
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
            send_lag_limit: Duration::from_nanos(crate::verdict::SEND_LAG_LIMIT_NS),
            seed: 1,
            max_runs: 10_000,
        }
    }
}

/// The share of a core the pacer's spin may take from which a run's notes say so.
pub const SPIN_NOTE_SHARE: f64 = 0.25;

/// A validated scenario: what the engine runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Experiment name.
    pub name: String,
    /// Measurement settings.
    pub run: RunSettings,
    /// Validated pacing.
    pub pacing: Pacing,
    /// How long before each due send the pacer spins (`pacing.spin`, `auto` resolved), ns.
    pub spin_ns: u64,
    /// Validated system under test.
    pub system: System,
    /// The latency objective (`report.slo`), if any.
    pub slo: Option<crate::slo::Slo>,
    /// The checks every run must pass (`report.thresholds`).
    pub thresholds: Vec<Threshold>,
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
    /// Send lag p99 above which a run is late, ns.
    pub send_lag_limit_ns: u64,
    /// Seed of random arrivals.
    pub seed: u64,
    /// When the schedule is to start, wall clock (Unix ns): a sharded run's agreed start
    /// (`--start-at`). Not from the scenario file: the runner sets it per run. `None`: as soon
    /// as every worker is ready.
    pub start_unix_ns: Option<u64>,
}

impl RunSettings {
    /// The time one run is given in a sharded run's agreed schedule: its warm-up, duration
    /// and drain timeout, plus [`crate::shard::SLOT_SPARE_MS`].
    pub fn slot_ms(&self) -> u64 {
        (self.warmup + self.duration + self.drain_timeout).as_millis() as u64
            + crate::shard::SLOT_SPARE_MS
    }

    /// The send-lag bound to record in a result: `None` for the default (1 ms).
    pub fn send_lag_limit_ns(&self) -> Option<u64> {
        (self.send_lag_limit_ns != crate::verdict::SEND_LAG_LIMIT_NS)
            .then_some(self.send_lag_limit_ns)
    }
}

/// A validated system under test.
// A variant's pacing may hold a profile of stages inline (see `Pacing`): a scenario is built
// once per run, not per message.
#[allow(clippy::large_enum_variant)]
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
        sut: Option<crate::sut::SutConfig>,
    },
    /// A Redis server.
    Redis {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Address, keys and mix.
        redis: crate::redis::RedisConfig,
        /// External server to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
    /// A WebSocket tick stream.
    Ticks {
        /// Server, format and client groups.
        ticks: crate::ticks::TicksConfig,
        /// External server to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
    /// JSON-RPC over WebSocket.
    WsRpc {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Address, methods, wait strategy and built-in server.
        ws_rpc: crate::ws_rpc::WsRpcConfig,
        /// External server to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
    /// An HTTP/1.1 server.
    Http {
        /// Connections and window (above 1: pipelining).
        client: crate::client::ClientConfig,
        /// URL, requests, accepted statuses.
        http: crate::http::HttpConfig,
        /// External server to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
    /// A request/response protocol described in the scenario.
    Wire {
        /// Connections and window.
        client: crate::client::ClientConfig,
        /// Address, framing, requests, matching.
        wire: crate::wire::WireConfig,
        /// External server to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
    /// Publish/subscribe through a broker.
    Pubsub {
        /// Broker, topics, publishers and subscriptions.
        pubsub: crate::pubsub::PubsubConfig,
        /// The broker process to start, if any.
        sut: Option<crate::sut::SutConfig>,
    },
}

impl System {
    /// The names of its operation classes, in the order of the result's `classes` (for
    /// `ticks`, the client groups). One source for the drivers and the live view.
    pub fn class_names(&self) -> Vec<String> {
        match self {
            System::Queue(_) => vec!["item".into()],
            System::Rpc { rpc, .. } => rpc.ops.iter().map(|o| o.name.clone()).collect(),
            System::Redis { redis, .. } => redis.ops.iter().map(|o| o.0.clone()).collect(),
            System::Ticks { ticks, .. } => ticks.groups.iter().map(|g| g.name.clone()).collect(),
            System::WsRpc { ws_rpc, .. } => ws_rpc.methods.iter().map(|m| m.name.clone()).collect(),
            System::Http { http, .. } => http.requests.iter().map(|r| r.name.clone()).collect(),
            System::Pubsub { pubsub, .. } => pubsub.class_names(),
            System::Wire { wire, .. } => wire.requests.iter().map(|r| r.name.clone()).collect(),
        }
    }

    /// The request/response driver's settings, for the systems driven through one. (No
    /// wildcard: a new system must say.)
    pub fn client(&self) -> Option<&crate::client::ClientConfig> {
        match self {
            System::Rpc { client, .. }
            | System::Redis { client, .. }
            | System::WsRpc { client, .. }
            | System::Http { client, .. }
            | System::Wire { client, .. } => Some(client),
            System::Queue(_) | System::Ticks { .. } | System::Pubsub { .. } => None,
        }
    }

    /// The server this run connects to, as configured (`None`: an in-process server).
    pub fn server_address(&self) -> Option<&str> {
        match self {
            System::Queue(_) => None,
            System::Rpc { rpc, .. } => rpc.address.as_deref(),
            System::Redis { redis, .. } => Some(&redis.address),
            System::Ticks { ticks, .. } => ticks.address.as_deref(),
            System::WsRpc { ws_rpc, .. } => ws_rpc.address.as_deref(),
            System::Http { http, .. } => Some(&http.address),
            System::Pubsub { pubsub, .. } => Some(&pubsub.address),
            System::Wire { wire, .. } => Some(&wire.address),
        }
    }

    /// Which shard of the run this process is (the whole run unless `--shard`).
    pub fn shard(&self) -> crate::shard::Shard {
        match self {
            System::Ticks { ticks, .. } => ticks.shard,
            System::Pubsub { pubsub, .. } => pubsub.shard,
            _ => self
                .client()
                .map_or(crate::shard::Shard::WHOLE, |c| c.shard),
        }
    }

    /// What this process opens of the run's connections (or stream clients): (its own, the
    /// whole run's).
    pub fn shard_connections(&self) -> (usize, usize) {
        match self {
            System::Ticks { ticks, .. } => (ticks.local_clients().len(), ticks.total_connections()),
            System::Pubsub { pubsub, .. } => pubsub.shard_connections(),
            _ => self
                .client()
                .map_or((0, 0), |c| (c.local_connections(), c.total_connections())),
        }
    }

    /// Makes this process shard `shard` of the run: it opens its slice of the connections
    /// (see [`crate::shard`]). Refused, with the reason and the fix, for what cannot be split:
    /// an in-process system, a built-in server each shard would start for itself, a `[sut]`
    /// process, fewer connections than shards.
    pub fn set_shard(&mut self, shard: crate::shard::Shard) -> Result<(), String> {
        let own_server = "each shard would start its own built-in server and measure that one; \
                          start one server for all shards (e.g. `msgbench serve rpc`) and set";
        let refusal = match self {
            System::Queue(_) => Some(
                "the queue lab runs inside one process and cannot be split over shards; run \
                 it unsharded"
                    .to_string(),
            ),
            System::Pubsub { sut: Some(_), .. } => Some(
                "[sut] starts the broker in every shard; start it once where the shards can \
                 reach it, remove [sut] and give its address"
                    .to_string(),
            ),
            System::Ticks { ticks, .. } if ticks.address.is_none() => Some(format!(
                "{own_server} ticks.address (`msgbench serve ticks`), or point it at your feed"
            )),
            System::Rpc { rpc, .. } if rpc.address.is_none() => {
                Some(format!("{own_server} rpc.address to its address"))
            }
            System::WsRpc { ws_rpc, .. } if ws_rpc.address.is_none() => Some(format!(
                "{own_server} ws_rpc.address (`msgbench serve ws-rpc`)"
            )),
            System::Rpc { sut: Some(_), .. }
            | System::Ticks { sut: Some(_), .. }
            | System::Redis { sut: Some(_), .. }
            | System::WsRpc { sut: Some(_), .. }
            | System::Http { sut: Some(_), .. }
            | System::Wire { sut: Some(_), .. } => Some(
                "[sut] starts the server in every shard; start it once where the shards can \
                 reach it, remove [sut] and give its address"
                    .to_string(),
            ),
            _ => None,
        };
        if let Some(why) = refusal {
            return Err(format!("--shard {shard}: {why}"));
        }
        let (total, mine, what) = match self {
            System::Rpc { client, .. }
            | System::Redis { client, .. }
            | System::WsRpc { client, .. }
            | System::Http { client, .. }
            | System::Wire { client, .. } => {
                client.shard = shard;
                let what = "connections (client.threads × client.connections)";
                (client.total_connections(), client.local_connections(), what)
            }
            System::Ticks { ticks, .. } => {
                ticks.shard = shard;
                let what = "clients (the groups' connections)";
                (ticks.total_connections(), ticks.local_clients().len(), what)
            }
            System::Pubsub { pubsub, .. } => {
                return pubsub.set_shard(shard);
            }
            System::Queue(_) => unreachable!("refused above"),
        };
        // Checked for every shard alike (not only the ones left empty), so that no shard of
        // an impossible split runs for nothing.
        if shard.count as usize > total || mine == 0 {
            return Err(format!(
                "--shard {shard}: the run has {total} {what}, so it splits into at most {total} \
                 shards; run fewer shards or open more"
            ));
        }
        Ok(())
    }

    /// Which system this is (results carry it).
    pub fn kind(&self) -> SystemKind {
        match self {
            System::Queue(_) => SystemKind::Queue,
            System::Rpc { .. } => SystemKind::Rpc,
            System::Redis { .. } => SystemKind::Redis,
            System::Ticks { .. } => SystemKind::Ticks,
            System::WsRpc { .. } => SystemKind::WsRpc,
            System::Http { .. } => SystemKind::Http,
            System::Pubsub { .. } => SystemKind::Pubsub,
            System::Wire { .. } => SystemKind::Wire,
        }
    }

    /// One line with every setting, in scenario-file spelling.
    pub fn describe(&self) -> String {
        let own = match self {
            System::Queue(q) => q.describe(),
            System::Rpc { client, rpc, .. } => describe_rpc(client, rpc),
            System::Redis { client, redis, .. } => describe_redis(client, redis),
            System::Ticks { ticks, .. } => ticks.describe(),
            System::WsRpc { client, ws_rpc, .. } => ws_rpc.describe(client),
            System::Http { client, http, .. } => describe_http(client, http),
            System::Pubsub { pubsub, .. } => pubsub.describe(),
            System::Wire { client, wire, .. } => wire.describe(client),
        };
        let sut = match self {
            System::Queue(_) => None,
            System::Rpc { sut, .. }
            | System::Redis { sut, .. }
            | System::Ticks { sut, .. }
            | System::WsRpc { sut, .. }
            | System::Http { sut, .. }
            | System::Wire { sut, .. }
            | System::Pubsub { sut, .. } => sut.as_ref(),
        };
        match sut {
            Some(s) => format!("{own} sut=`{}`", s.command),
            None => own,
        }
    }
}

/// An rpc run's settings: address, client, sizes and its operations' shares and service.
fn describe_rpc(client: &crate::client::ClientConfig, rpc: &crate::rpc::RpcConfig) -> String {
    format!(
        "rpc {} {} request_bytes={} response_bytes={} ops={}",
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
    )
}

/// A redis run's settings: address, client, keys, value size and the operations' shares.
fn describe_redis(
    client: &crate::client::ClientConfig,
    redis: &crate::redis::RedisConfig,
) -> String {
    format!(
        "redis {} {} keys={} value_bytes={} ops={}",
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
    )
}

/// An http run's settings: URL, version, client and each request's share (a gRPC call's
/// method named).
fn describe_http(client: &crate::client::ClientConfig, http: &crate::http::HttpConfig) -> String {
    format!(
        "http {} {} {} requests={}",
        http.url,
        match http.version {
            crate::http::HttpVersion::Http1 => "HTTP/1.1",
            crate::http::HttpVersion::Http2 => "HTTP/2",
        },
        client.describe(),
        http.requests
            .iter()
            .map(|r| match r.grpc {
                true => format!(
                    "{}:{:.0}% (gRPC {})",
                    r.name,
                    r.share * 100.0,
                    &r.parts.target[1..]
                ),
                false => match r.vary.as_deref() {
                    Some(crate::http_vary::Vary::File(f)) => format!(
                        "{}:{:.0}% ({} requests of {}, {})",
                        r.name,
                        r.share * 100.0,
                        f.len(),
                        f.path,
                        match f.order {
                            crate::http_vary::FileOrder::Cycle => "cycled",
                            crate::http_vary::FileOrder::Random => "at random",
                        }
                    ),
                    Some(crate::http_vary::Vary::Template(_)) => {
                        format!("{}:{:.0}% (filled in per request)", r.name, r.share * 100.0)
                    }
                    None => format!("{}:{:.0}%", r.name, r.share * 100.0),
                },
            })
            .collect::<Vec<_>>()
            .join(","),
    )
}

impl Scenario {
    /// What the pacer's spin costs at this schedule, for a run's notes, when it may take a
    /// quarter of a core or more: at most spin × rate of a core, all threads together (`None`
    /// below that, without a schedule, or without a spin: a note on every paced run would say
    /// nothing).
    pub fn spin_note(&self) -> Option<String> {
        let rate = self.pacing.target_per_sec()?;
        // Someone else's tick server keeps its own schedule: nothing of msgbench's spins.
        let foreign =
            matches!(&self.system, System::Ticks { ticks, .. } if ticks.address.is_some());
        if self.spin_ns == 0 || foreign {
            return None;
        }
        let share = (self.spin_ns as f64 * rate / 1e9).min(1.0);
        if share < SPIN_NOTE_SHARE {
            return None;
        }
        Some(format!(
            "the pacer spins the last {} before each due send (pacing.spin): at most {:.0} % of a core at {:.0}/s, which on a small host the system measured may miss; pacing.spin = 0 sleeps instead, each send then as late as the host's wake-up (tens of µs)",
            crate::duration::format(std::time::Duration::from_nanos(self.spin_ns)),
            100.0 * share,
            rate
        ))
    }

    /// The rate the schedule asked for over the second before `elapsed_s` into the measured
    /// window: [`Self::target_per_sec`], except in stages, where it is that second's (this
    /// process's part of it, on a shard).
    pub fn target_per_sec_at(&self, elapsed_s: f64) -> Option<f64> {
        let whole = self.target_per_sec()?;
        let Pacing::Stages(p) = self.pacing else {
            return Some(whole);
        };
        let end = p.warmup_ns + (elapsed_s.max(0.0) * 1e9) as u64;
        let start = end.saturating_sub(1_000_000_000).max(p.warmup_ns);
        let seconds = (end - start).max(1) as f64 / 1e9;
        let part = whole / p.mean_per_sec().max(1e-9);
        Some((p.count_at(end) - p.count_at(start)) / seconds * part)
    }

    /// The total rate the schedule aims at. Request/response drivers pace each connection:
    /// `interval` sends `batch` per connection per tick; `rate` is split over the connections.
    /// A tick stream sends every tick to every client: its target is the rate × clients.
    pub fn target_per_sec(&self) -> Option<f64> {
        let per_schedule = self.pacing.target_per_sec()?;
        Some(match (&self.system, self.system.client(), self.pacing) {
            // A shard's target is its connections' part of the schedule.
            (_, Some(client), Pacing::Interval { .. } | Pacing::Relative { .. }) => {
                per_schedule * client.local_connections() as f64
            }
            (_, Some(client), _) if !client.shard.is_whole() => {
                per_schedule * client.local_connections() as f64 / client.total_connections() as f64
            }
            // Someone else's server keeps its own schedule.
            (System::Ticks { ticks, .. }, _, _) if ticks.address.is_some() => return None,
            // Every subscription is meant to get every message of its topic.
            (
                System::Pubsub { pubsub, .. },
                _,
                Pacing::Interval { .. } | Pacing::Relative { .. },
            ) => {
                per_schedule
                    * (pubsub.topics.len() as u32 * pubsub.publishers_per_topic) as f64
                    * pubsub.subscriptions_per_topic as f64
                    * pubsub.subscriptions().len() as f64
                    / pubsub.all_subscriptions().len() as f64
            }
            // A shard's part: its subscriptions' (each counts what every publisher sent).
            (System::Pubsub { pubsub, .. }, _, _) => {
                per_schedule
                    * pubsub.subscriptions_per_topic as f64
                    * pubsub.subscriptions().len() as f64
                    / pubsub.all_subscriptions().len() as f64
            }
            // A broadcast: every client is meant to get every tick.
            (System::Ticks { ticks, .. }, _, _) => per_schedule * ticks.total_connections() as f64,
            _ => per_schedule,
        })
    }
}

impl ScenarioSpec {
    /// Checks every value and converts to the model the engine runs: the run settings, the
    /// pacing, then the system's sections, each checked in its own file.
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
        let run = self.run.validate(&invalid)?;
        let pacing = self
            .pacing
            .validate_for(Some((run.warmup, run.duration)), &invalid)?;
        self.check_stages_system(&pacing, &invalid)?;
        let system = self.validate_system(&pacing, run.operations, limits, &invalid)?;
        let (slo, thresholds) = self.report_checks(&system, &invalid)?;
        Ok(Scenario {
            slo,
            thresholds,
            name: self.name.clone(),
            run,
            pacing,
            spin_ns: self.pacing.spin_ns(),
            system,
        })
    }
}

impl ScenarioSpec {
    /// Stages pace request/response systems: their driver splits a rate over connections.
    fn check_stages_system(&self, pacing: &Pacing, invalid: &Invalid) -> Result<(), ScenarioError> {
        let request_response = matches!(
            self.system,
            SystemKind::Rpc
                | SystemKind::Redis
                | SystemKind::Http
                | SystemKind::WsRpc
                | SystemKind::Wire
        );
        if matches!(pacing, Pacing::Stages(_)) && !request_response {
            return Err(invalid(
                "pacing.mode",
                format!("is stages, and the system is {}", serde_json::to_value(self.system).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()),
                "stages pace request/response systems (rpc, redis, http, ws-rpc, wire) for now: give rate here, and sweep pacing.per_sec for steps between runs",
            ));
        }
        Ok(())
    }

    /// A recovery threshold needs a spike to judge.
    fn check_recovery(&self, threshold: &Threshold) -> Result<(), String> {
        let spike = (self.pacing.stages.iter()).any(|s| s.shape == crate::stages::Shape::Spike);
        if threshold.metric == crate::threshold::Metric::Recovery && !spike {
            return Err("it names recovery, and the pacing has no spike stage: give pacing.mode = \"stages\" with a { shape = \"spike\", to = RATE, over = DURATION }".into());
        }
        Ok(())
    }

    /// The system's sections, each validated, then its cross-checks.
    fn validate_system(
        &self,
        pacing: &Pacing,
        ops: Option<u64>,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<System, ScenarioError> {
        let pacing_spec = &self.pacing;
        Ok(match self.system {
            SystemKind::Queue => {
                System::Queue(self.queue.validate(pacing_spec, limits, invalid)?)
            }
            SystemKind::Rpc => {
                let client = self.client.validate(pacing_spec, limits, invalid)?;
                let rpc = self.rpc.validate(limits, invalid)?;
                let sut = self.sut.validate(rpc.address.as_deref(), invalid)?;
                rpc.check_with(&client, sut.as_ref(), invalid)?;
                System::Rpc { client, rpc, sut }
            }
            SystemKind::Redis => {
                let client = self.client.validate(pacing_spec, limits, invalid)?;
                let redis = self.redis.validate(invalid)?;
                let sut = self.sut.validate(Some(&redis.address), invalid)?;
                System::Redis { client, redis, sut }
            }
            SystemKind::Ticks => {
                let ticks = self.ticks.validate(pacing_spec, limits, invalid)?;
                let ready = ticks.address.as_deref().map(crate::check::ws_authority);
                let sut = self.sut.validate(ready, invalid)?;
                ticks.check_with(ops, sut.as_ref(), invalid)?;
                System::Ticks { ticks, sut }
            }
            SystemKind::WsRpc => {
                let client = self.client.validate(pacing_spec, limits, invalid)?;
                let ws_rpc = self.ws_rpc.validate(&client, limits, invalid)?;
                let ready = ws_rpc.address.as_deref().map(crate::check::ws_authority);
                let sut = self.sut.validate(ready, invalid)?;
                crate::sut::check_address_given(
                    sut.as_ref(),
                    ws_rpc.address.as_deref(),
                    "ws_rpc.address",
                    "ws:// address",
                    invalid,
                )?;
                System::WsRpc {
                    client,
                    ws_rpc,
                    sut,
                }
            }
            SystemKind::Http => {
                let client = self.client.validate(pacing_spec, limits, invalid)?;
                let http = self.http.validate(limits, invalid)?;
                crate::http::check_paced_calls(&http, &client, pacing, invalid)?;
                let sut = self.sut.validate(Some(&http.address), invalid)?;
                System::Http { client, http, sut }
            }
            SystemKind::Pubsub => {
                if ops.is_some() {
                    return Err(invalid(
                        "run.operations",
                        "is set for a publish/subscribe run".into(),
                        "publishers publish for `run.duration`; remove `run.operations`",
                    ));
                }
                let pubsub = self.pubsub.validate(pacing_spec, invalid)?;
                let sut = self.sut.validate(Some(&pubsub.address), invalid)?;
                System::Pubsub { pubsub, sut }
            }
            SystemKind::Wire => {
                let client = self.client.validate(pacing_spec, limits, invalid)?;
                let wire = self.wire.validate(invalid)?;
                wire.check_with(&client, invalid)?;
                let sut = self.sut.validate(Some(&wire.address), invalid)?;
                System::Wire { client, wire, sut }
            }
        })
    }

    /// The report's SLO and thresholds, each threshold's names checked against `system`.
    fn report_checks(
        &self,
        system: &System,
        invalid: &Invalid,
    ) -> Result<(Option<crate::slo::Slo>, Vec<Threshold>), ScenarioError> {
        let slo = match &self.report.slo {
            None => None,
            Some(text) => Some(
                crate::slo::Slo::parse(text)
                    .map_err(|e| invalid("report.slo", format!("is \"{text}\""), &e))?,
            ),
        };
        let thresholds = self
            .report
            .thresholds
            .iter()
            .map(|text| {
                let t = Threshold::parse(text)
                    .and_then(|t| check_threshold_names(&t, system).map(|()| t))
                    .and_then(|t| self.check_recovery(&t).map(|()| t));
                t.map_err(|e| invalid("report.thresholds", format!("has \"{text}\""), &e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((slo, thresholds))
    }
}

impl RunSpec {
    /// Checks the `[run]` section.
    fn validate(&self, invalid: &Invalid) -> Result<RunSettings, ScenarioError> {
        for (field, d) in [
            ("run.duration", self.duration),
            ("run.warmup", self.warmup),
            ("run.drain_timeout", self.drain_timeout),
            ("run.send_lag_limit", self.send_lag_limit),
        ] {
            if d > MAX_DURATION {
                return Err(invalid(
                    field,
                    format!("is {}", crate::duration::format(d)),
                    "use at most 365 days",
                ));
            }
        }
        if self.duration.is_zero() && self.operations.is_none() {
            return Err(invalid(
                "run.duration",
                "is 0 and no `run.operations` is set".into(),
                "give a duration such as \"5s\" or an operation count",
            ));
        }
        if self.operations == Some(0) {
            return Err(invalid(
                "run.operations",
                "is 0".into(),
                "give a positive count or remove the key",
            ));
        }
        if self.replicates == 0 {
            return Err(invalid("run.replicates", "is 0".into(), "use 1 or more"));
        }
        if self.send_lag_limit.is_zero() {
            return Err(invalid(
                "run.send_lag_limit",
                "is 0".into(),
                "give the send lag p99 a run may have and stay valid, e.g. \"1ms\" (the default)",
            ));
        }
        if let Some(n) = self.emit_latencies.filter(|&n| n > MAX_RAW_LATENCIES) {
            return Err(invalid("run.emit_latencies", format!("is {n}"), &format!("keep at most {MAX_RAW_LATENCIES} (8 bytes each, allocated before the run); the histograms hold every message anyway")));
        }
        if self.emit_latencies == Some(0) {
            return Err(invalid(
                "run.emit_latencies",
                "is 0".into(),
                "give the number of latencies to keep, e.g. 1000000, or remove the key",
            ));
        }
        Ok(RunSettings {
            duration: self.duration,
            warmup: self.warmup,
            operations: self.operations,
            drain_timeout: self.drain_timeout,
            emit_latencies: self.emit_latencies,
            send_lag_limit_ns: self.send_lag_limit.as_nanos().min(u64::MAX as u128) as u64,
            seed: self.seed,
            start_unix_ns: None,
        })
    }
}

/// Refuses a threshold whose scope names no class or stream client of `system`, listing those it has.
fn check_threshold_names(threshold: &Threshold, system: &System) -> Result<(), String> {
    match &threshold.scope {
        crate::threshold::Scope::Run => Ok(()),
        crate::threshold::Scope::Publish => match system {
            System::Pubsub { pubsub, .. } if pubsub.answers_publishes() => {
                Ok(())
            }
            System::Pubsub { pubsub, .. } => Err(format!(
                "it names publish latency, and broker \"{}\"{} answers no publish: use redis, redis-streams, jetstream, mqtt with qos = 1, or kafka with acks 1 or all",
                pubsub.broker.name(),
                if pubsub.broker.is_mqtt() { " at qos 0" } else if pubsub.broker == crate::pubsub::Broker::Kafka { " at acks 0" } else { "" }
            )),
            _ => Err("it names publish latency, which only a pubsub run has".to_string()),
        },
        crate::threshold::Scope::Class(name) => {
            let classes = system.class_names();
            if classes.iter().any(|c| c.eq_ignore_ascii_case(name)) {
                return Ok(());
            }
            Err(format!(
                "it names class `{name}`, which the scenario does not have (its classes: {})",
                classes.join(", ")
            ))
        }
        crate::threshold::Scope::Client(name) => {
            if let System::Pubsub { pubsub, .. } = system {
                // A pubsub run's clients are its subscriptions (t0-s1), grouped as
                // subscriber and slow-subscriber.
                let mut names: Vec<String> =
                    pubsub.subscriptions().into_iter().map(|s| s.name).collect();
                names.extend(pubsub.class_names());
                if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                    return Ok(());
                }
                let subs: Vec<String> =
                    pubsub.subscriptions().into_iter().map(|s| s.name).collect();
                let listed = if subs.len() <= 8 {
                    subs.join(", ")
                } else {
                    format!("{} … {} (tT-sS)", subs[0], subs[subs.len() - 1])
                };
                return Err(format!(
                    "it names client `{name}`, which the scenario does not have (its subscriptions: {listed}; its groups: {})",
                    pubsub.class_names().join(", ")
                ));
            }
            let System::Ticks { ticks, .. } = system else {
                return Err(
                    "it names a stream client, and only the ticks and pubsub systems have them: \
                            use class.NAME for an operation class"
                        .to_string(),
                );
            };
            let mut names = Vec::new();
            for g in &ticks.groups {
                names.push(g.name.clone());
                names.extend((0..g.connections).map(|i| format!("{}-{i}", g.name)));
            }
            if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                return Ok(());
            }
            let groups: Vec<&str> = ticks.groups.iter().map(|g| g.name.as_str()).collect();
            Err(format!(
                "it names client `{name}`, which the scenario does not have (its groups: \
                 {}; a client is GROUP-N from 0)",
                groups.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn an_empty_file_is_the_default_queue_scenario() {
        let s = valid("");
        assert_eq!(s.system.kind(), crate::scenario::SystemKind::Queue);
    }

    #[test]
    fn the_run_section_refuses_what_cannot_run() {
        for (text, field) in [
            ("[run]\nduration = \"0s\"\n", "run.duration"),
            ("[run]\noperations = 0\n", "run.operations"),
            ("[run]\nreplicates = 0\n", "run.replicates"),
            ("[run]\nemit_latencies = 0\n", "run.emit_latencies"),
            ("[run]\nemit_latencies = 100000001\n", "run.emit_latencies"),
            ("[run]\nwarmup = \"400d\"\n", "run.warmup"),
            ("[report]\nslo = \"p99 > 5ms\"\n", "report.slo"),
        ] {
            assert_eq!(refused(text).0, field, "{text}");
        }
        let s = valid("[run]\nduration = \"0s\"\noperations = 10\n");
        assert_eq!(s.run.operations, Some(10));
    }
}
