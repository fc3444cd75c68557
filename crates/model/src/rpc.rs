//! Settings of the `rpc` system (msgbench's framed request/response protocol over TCP), the
//! `redis` system (RESP), and of an external server process started for a run (`[sut]`).
use crate::duration::{serde_text, serde_text_opt};
use crate::scenario::{Invalid, MachineLimits, ScenarioError, MAX_DURATION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest frame the protocol allows at all (the server's `max_frame` may be lower).
pub const MAX_FRAME_LIMIT: u32 = 64 << 20;

/// The `[rpc]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RpcSpec {
    /// `host:port` of a running server. Omitted: msgbench starts its built-in server in-process
    /// on an ephemeral loopback port (configured by `[rpc.server]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Payload bytes of each request.
    pub request_bytes: u32,
    /// Payload bytes the server sends back in each response.
    pub response_bytes: u32,
    /// Operation classes by name, each with its weight in the mix and the service time the
    /// server simulates for it (the time travels in the request, so any `msgbench serve rpc`
    /// serves any mix). Default: one class `call` with no service time.
    pub ops: BTreeMap<String, RpcOpSpec>,
    /// The built-in server started when `address` is omitted.
    pub server: RpcServerSpec,
}

impl Default for RpcSpec {
    fn default() -> Self {
        RpcSpec {
            address: None,
            request_bytes: 16,
            response_bytes: 16,
            ops: BTreeMap::new(),
            server: RpcServerSpec::default(),
        }
    }
}

/// One operation class of the `rpc` mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RpcOpSpec {
    /// Relative weight in the mix (any positive number; `50` and `50` is half each).
    pub weight: f64,
    /// Service time the server spends per request of this class (mean, for `exponential`).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub service: Duration,
    /// `fixed` or `exponential` service times.
    pub distribution: ServiceDistribution,
    /// `busy`: the server thread computes for the service time (it serves nothing else
    /// meanwhile); `sleep`: the response is held back on a timer (the thread serves others).
    pub work: ServiceWork,
}

impl Default for RpcOpSpec {
    fn default() -> Self {
        RpcOpSpec {
            weight: 1.0,
            service: Duration::ZERO,
            distribution: ServiceDistribution::Fixed,
            work: ServiceWork::Busy,
        }
    }
}

/// Distribution of simulated service times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceDistribution {
    /// Always the configured time.
    Fixed,
    /// Exponentially distributed with the configured mean (drawn by the client, seeded).
    Exponential,
}

/// How the server spends a service time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceWork {
    /// Spin on the CPU.
    Busy,
    /// Hold the response on a timer.
    Sleep,
}

/// The built-in RPC server (`[rpc.server]`, and the flags of `msgbench serve rpc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RpcServerSpec {
    /// Server threads; connections are dealt to them round-robin.
    pub threads: u32,
    /// Largest frame accepted, bytes; a client sending a larger one is disconnected.
    pub max_frame: u32,
    /// Most connections open at once; more are accepted and closed at once.
    pub max_connections: u32,
    /// Fault injection: every `stall_every`, every server thread stops serving for `stall_for`.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub stall_every: Option<Duration>,
    /// Length of each stall.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub stall_for: Duration,
    /// CPUs of the server threads, one per thread (empty: not pinned).
    pub pin: Vec<usize>,
}

impl Default for RpcServerSpec {
    fn default() -> Self {
        RpcServerSpec {
            threads: 1,
            max_frame: 1 << 20,
            max_connections: 4096,
            stall_every: None,
            stall_for: Duration::from_millis(100),
            pin: Vec::new(),
        }
    }
}

/// Validated operation class.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcOp {
    /// Class name.
    pub name: String,
    /// Share of the mix, 0..=1 (shares sum to 1).
    pub share: f64,
    /// Service time (mean), ns.
    pub service_ns: u64,
    /// Distribution.
    pub distribution: ServiceDistribution,
    /// Busy or sleeping.
    pub work: ServiceWork,
}

/// Validated `[rpc]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcConfig {
    /// Server address; `None`: the built-in server, in-process.
    pub address: Option<String>,
    /// Request payload bytes.
    pub request_bytes: u32,
    /// Response payload bytes.
    pub response_bytes: u32,
    /// The operation mix.
    pub ops: Vec<RpcOp>,
    /// Built-in server settings.
    pub server: RpcServerConfig,
}

/// Validated built-in server settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcServerConfig {
    /// Threads.
    pub threads: usize,
    /// Frame limit, bytes.
    pub max_frame: u32,
    /// Connection limit.
    pub max_connections: usize,
    /// `(every, for)` of injected stalls, ns.
    pub stall: Option<(u64, u64)>,
    /// CPU per thread.
    pub pin: Vec<usize>,
}

impl Default for RpcServerConfig {
    fn default() -> Self {
        RpcServerSpec::default()
            .validate(
                &MachineLimits { cpus: Vec::new() },
                &|field, problem, fix| ScenarioError::Invalid {
                    source_name: "default".into(),
                    field: field.into(),
                    problem,
                    fix: fix.into(),
                },
            )
            .expect("defaults are valid")
    }
}

/// Checks `host:port` without resolving it (resolution happens when connecting).
pub(crate) fn check_address(
    field: &str,
    address: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    let ok = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("is \"{address}\", not host:port"),
            "write it like \"127.0.0.1:6379\" or \"[::1]:7000\"",
        ))
    }
}

/// Turns weights into shares; the map's order (by name) is the class order.
pub(crate) fn shares<T>(
    field: &str,
    ops: &BTreeMap<String, T>,
    weight: impl Fn(&T) -> f64,
    invalid: &Invalid,
) -> Result<Vec<f64>, ScenarioError> {
    if ops.len() > 64 {
        return Err(invalid(
            field,
            format!("has {} classes", ops.len()),
            "use at most 64 operation classes",
        ));
    }
    for (name, op) in ops {
        let w = weight(op);
        if !(w.is_finite() && w > 0.0) {
            return Err(invalid(
                &format!("{field}.{name}.weight"),
                format!("is {w}"),
                "give a positive weight, e.g. 50",
            ));
        }
    }
    let total: f64 = ops.values().map(&weight).sum();
    Ok(ops.values().map(|op| weight(op) / total).collect())
}

impl RpcSpec {
    pub(crate) fn validate(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<RpcConfig, ScenarioError> {
        if let Some(a) = &self.address {
            check_address("rpc.address", a, invalid)?;
        }
        for (field, bytes) in [
            ("rpc.request_bytes", self.request_bytes),
            ("rpc.response_bytes", self.response_bytes),
        ] {
            if bytes > MAX_FRAME_LIMIT - 64 {
                return Err(invalid(
                    field,
                    format!("is {bytes}"),
                    "use at most 67108800 bytes (64 MiB minus the header) per payload",
                ));
            }
        }
        let default_ops: BTreeMap<String, RpcOpSpec> =
            [("call".to_string(), RpcOpSpec::default())].into();
        let ops = if self.ops.is_empty() {
            &default_ops
        } else {
            &self.ops
        };
        let shares = shares("rpc.ops", ops, |o| o.weight, invalid)?;
        let mut out = Vec::new();
        for ((name, op), share) in ops.iter().zip(shares) {
            if op.service > Duration::from_secs(3600) {
                return Err(invalid(
                    &format!("rpc.ops.{name}.service"),
                    format!("is {}", crate::duration::format(op.service)),
                    "simulate at most 1h per request",
                ));
            }
            out.push(RpcOp {
                name: name.clone(),
                share,
                service_ns: op.service.as_nanos() as u64,
                distribution: op.distribution,
                work: op.work,
            });
        }
        Ok(RpcConfig {
            address: self.address.clone(),
            request_bytes: self.request_bytes,
            response_bytes: self.response_bytes,
            ops: out,
            server: self.server.validate(limits, invalid)?,
        })
    }
}

impl RpcServerSpec {
    /// Checks the built-in server's settings (also used by `msgbench serve rpc`).
    pub fn validate(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<RpcServerConfig, ScenarioError> {
        if self.threads == 0 || self.threads > 256 {
            return Err(invalid(
                "rpc.server.threads",
                format!("is {}", self.threads),
                "use 1 to 256 server threads",
            ));
        }
        if self.max_frame < 64 || self.max_frame > MAX_FRAME_LIMIT {
            return Err(invalid(
                "rpc.server.max_frame",
                format!("is {}", self.max_frame),
                "use 64 bytes to 64 MiB",
            ));
        }
        if self.max_connections == 0 {
            return Err(invalid(
                "rpc.server.max_connections",
                "is 0".into(),
                "allow at least 1 connection",
            ));
        }
        let stall = match self.stall_every {
            None => None,
            Some(every) if every.is_zero() || every > MAX_DURATION => {
                return Err(invalid(
                    "rpc.server.stall_every",
                    format!("is {}", crate::duration::format(every)),
                    "give a period between 1ns and 365 days, or remove the key",
                ))
            }
            Some(every) if self.stall_for >= every => {
                return Err(invalid(
                    "rpc.server.stall_for",
                    format!(
                        "is {}, not shorter than stall_every ({})",
                        crate::duration::format(self.stall_for),
                        crate::duration::format(every)
                    ),
                    "make each stall shorter than the period between stalls",
                ))
            }
            Some(every) => Some((every.as_nanos() as u64, self.stall_for.as_nanos() as u64)),
        };
        crate::client::check_pins(
            "rpc.server.pin",
            "server",
            &self.pin,
            self.threads,
            limits,
            invalid,
        )?;
        Ok(RpcServerConfig {
            threads: self.threads as usize,
            max_frame: self.max_frame,
            max_connections: self.max_connections as usize,
            stall,
            pin: self.pin.clone(),
        })
    }
}

/// The `[redis]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSpec {
    /// `host:port` of the Redis server.
    pub address: String,
    /// Keys are `key:000000000000` … `key:<keys−1>`, picked uniformly (`redis-benchmark -r`);
    /// 0 uses the single key `key:__rand_int__` as `redis-benchmark` does without `-r`.
    pub keys: u64,
    /// Bytes of each SET value (`redis-benchmark -d`).
    pub value_bytes: u32,
    /// Command classes by name, each with its weight and command. Default: `ping`.
    pub ops: BTreeMap<String, RedisOpSpec>,
}

impl Default for RedisSpec {
    fn default() -> Self {
        RedisSpec {
            address: "127.0.0.1:6379".into(),
            keys: 0,
            value_bytes: 3,
            ops: BTreeMap::new(),
        }
    }
}

/// One class of the Redis command mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisOpSpec {
    /// Relative weight in the mix.
    pub weight: f64,
    /// `ping`, `get` or `set`.
    pub command: RedisCommand,
}

impl Default for RedisOpSpec {
    fn default() -> Self {
        RedisOpSpec {
            weight: 1.0,
            command: RedisCommand::Ping,
        }
    }
}

/// Redis commands the driver sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RedisCommand {
    /// `PING` (answer `+PONG`).
    Ping,
    /// `GET key` (answer a bulk string or nil).
    Get,
    /// `SET key value` (answer `+OK`).
    Set,
}

/// Validated `[redis]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// Server address.
    pub address: String,
    /// Key space (0: one fixed key).
    pub keys: u64,
    /// SET value size.
    pub value_bytes: u32,
    /// The mix: `(class name, share, command)`.
    pub ops: Vec<(String, f64, RedisCommand)>,
}

impl RedisSpec {
    pub(crate) fn validate(&self, invalid: &Invalid) -> Result<RedisConfig, ScenarioError> {
        check_address("redis.address", &self.address, invalid)?;
        if self.value_bytes > 512 << 20 {
            return Err(invalid(
                "redis.value_bytes",
                format!("is {}", self.value_bytes),
                "Redis values are at most 512 MiB",
            ));
        }
        let default_ops: BTreeMap<String, RedisOpSpec> =
            [("ping".to_string(), RedisOpSpec::default())].into();
        let ops = if self.ops.is_empty() {
            &default_ops
        } else {
            &self.ops
        };
        let shares = shares("redis.ops", ops, |o| o.weight, invalid)?;
        Ok(RedisConfig {
            address: self.address.clone(),
            keys: self.keys,
            value_bytes: self.value_bytes,
            ops: ops
                .iter()
                .zip(shares)
                .map(|((name, op), share)| (name.clone(), share, op.command))
                .collect(),
        })
    }
}

/// The `[sut]` section: an external server msgbench starts before the run and stops after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SutSpec {
    /// Shell command that starts the server in the foreground (run with `sh -c`, in its own
    /// process group, so everything it starts is measured and stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `host:port` that accepts TCP connections once the server is ready (default: the
    /// system's address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// How long to wait for readiness.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub ready_timeout: Option<Duration>,
}

/// Validated `[sut]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SutConfig {
    /// The command.
    pub command: String,
    /// Readiness address.
    pub ready: String,
    /// Readiness timeout.
    pub ready_timeout: Duration,
}

impl SutSpec {
    pub(crate) fn validate(
        &self,
        system_address: Option<&str>,
        invalid: &Invalid,
    ) -> Result<Option<SutConfig>, ScenarioError> {
        let Some(command) = &self.command else {
            if self.ready.is_some() || self.ready_timeout.is_some() {
                return Err(invalid(
                    "sut.command",
                    "is missing".into(),
                    "name the command that starts the server, or remove the [sut] section",
                ));
            }
            return Ok(None);
        };
        if command.trim().is_empty() {
            return Err(invalid(
                "sut.command",
                "is empty".into(),
                "name the command that starts the server",
            ));
        }
        let ready = match (&self.ready, system_address) {
            (Some(r), _) => r.clone(),
            (None, Some(a)) => a.to_string(),
            (None, None) => {
                return Err(invalid(
                    "sut.ready",
                    "is missing and the system has no address".into(),
                    "set `sut.ready = \"127.0.0.1:PORT\"` and the system's address to the server's port",
                ))
            }
        };
        check_address("sut.ready", &ready, invalid)?;
        let ready_timeout = self.ready_timeout.unwrap_or(Duration::from_secs(10));
        if ready_timeout.is_zero() || ready_timeout > MAX_DURATION {
            return Err(invalid(
                "sut.ready_timeout",
                format!("is {}", crate::duration::format(ready_timeout)),
                "give a timeout such as \"10s\"",
            ));
        }
        Ok(Some(SutConfig {
            command: command.clone(),
            ready,
            ready_timeout,
        }))
    }
}
