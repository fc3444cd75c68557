//! The `[rpc]` section: msgbench's framed request/response protocol over TCP, its operation
//! mix and its built-in server ([`RpcSpec`] → [`RpcConfig`]), and what the `rpc` system checks
//! across sections.
use crate::check::{check_endpoint, shares, Invalid, MachineLimits, ScenarioError, MAX_DURATION};
use crate::client::ClientConfig;
use crate::duration::{serde_text, serde_text_opt};
use crate::sut::SutConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest frame the protocol allows at all (the server's `max_frame` may be lower).
pub const MAX_FRAME_LIMIT: u32 = 64 << 20;
/// Longest service time a scenario or a server may allow at all.
pub const MAX_SERVICE: Duration = Duration::from_secs(3600);

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
    /// Longest service time a request may ask for; a longer one is served for this long and
    /// counted as clamped (a frame asking for 2^63 ns must not hold a thread for centuries).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub max_service: Duration,
    /// A connection that neither sends nor reads anything for this long is closed (counted);
    /// `"0"` keeps idle connections open for ever.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub idle_timeout: Duration,
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
            max_service: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
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
    /// Longest service time served, ns (longer requests are clamped and counted).
    pub max_service_ns: u64,
    /// Idle connections are closed after this long, ns (0: never).
    pub idle_timeout_ns: u64,
}

impl Default for RpcServerConfig {
    fn default() -> Self {
        RpcServerSpec::default()
            .validate(&MachineLimits::default(), &|field, problem, fix| {
                ScenarioError::Invalid {
                    source_name: "default".into(),
                    field: field.into(),
                    problem,
                    fix: fix.into(),
                }
            })
            .expect("defaults are valid")
    }
}

impl RpcSpec {
    pub(crate) fn validate(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<RpcConfig, ScenarioError> {
        if let Some(a) = &self.address {
            check_endpoint("rpc.address", a, invalid)?;
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
            if op.service > MAX_SERVICE {
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
        if self.max_service.is_zero() || self.max_service > MAX_SERVICE {
            return Err(invalid(
                "rpc.server.max_service",
                format!("is {}", crate::duration::format(self.max_service)),
                "use 1ns to 1h",
            ));
        }
        if self.idle_timeout > MAX_DURATION {
            return Err(invalid(
                "rpc.server.idle_timeout",
                format!("is {}", crate::duration::format(self.idle_timeout)),
                "use at most 365 days, or \"0\" for no timeout",
            ));
        }
        crate::check::check_pins(
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
            max_service_ns: self.max_service.as_nanos() as u64,
            idle_timeout_ns: self.idle_timeout.as_nanos() as u64,
        })
    }
}

impl RpcConfig {
    /// What the `rpc` system checks across sections: requests, responses and connections fit
    /// the built-in server's limits, and a `[sut]` server has an address.
    pub(crate) fn check_with(
        &self,
        client: &ClientConfig,
        sut: Option<&SutConfig>,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        crate::sut::check_address_given(
            sut,
            self.address.as_deref(),
            "rpc.address",
            "address",
            invalid,
        )?;
        if self.address.is_some() {
            return Ok(());
        }
        let server = &self.server;
        if self.request_bytes as u64 + 32 > server.max_frame as u64 {
            return Err(invalid(
                "rpc.request_bytes",
                format!(
                    "is {}, more than the built-in server's max_frame ({}) allows",
                    self.request_bytes, server.max_frame
                ),
                "raise `rpc.server.max_frame` or send smaller requests",
            ));
        }
        if self.response_bytes as u64 + 64 > server.max_frame as u64 {
            return Err(invalid(
                "rpc.response_bytes",
                format!(
                    "is {}, more than the built-in server's max_frame ({}) allows",
                    self.response_bytes, server.max_frame
                ),
                "raise `rpc.server.max_frame` or ask for smaller responses",
            ));
        }
        if let Some(op) = self
            .ops
            .iter()
            .find(|o| o.service_ns > server.max_service_ns)
        {
            return Err(invalid(
                &format!("rpc.ops.{}.service", op.name),
                format!(
                    "is {}, longer than the built-in server's max_service ({})",
                    crate::duration::format(std::time::Duration::from_nanos(op.service_ns)),
                    crate::duration::format(std::time::Duration::from_nanos(server.max_service_ns))
                ),
                "raise `rpc.server.max_service` or simulate a shorter service time",
            ));
        }
        if client.total_connections() > server.max_connections {
            return Err(invalid(
                "client.connections",
                format!(
                    "makes {} connections, more than the built-in server's max_connections ({})",
                    client.total_connections(),
                    server.max_connections
                ),
                "raise `rpc.server.max_connections` or open fewer connections",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn the_rpc_section_refuses_what_it_cannot_run() {
        for (text, field) in [
            ("[rpc.server]\nthreads = 0\n", "rpc.server.threads"),
            (
                "[rpc.server]\nmax_service = \"0\"\n",
                "rpc.server.max_service",
            ),
            (
                "[rpc.server]\nmax_service = \"2h\"\n",
                "rpc.server.max_service",
            ),
            (
                "[rpc.ops.slow]\nservice = \"11s\"\n",
                "rpc.ops.slow.service",
            ),
            ("[rpc.server]\npin = [0, 1]\n", "rpc.server.pin"),
            ("[rpc.server]\nmax_frame = 10\n", "rpc.server.max_frame"),
            ("[rpc]\naddress = \"nowhere\"\n", "rpc.address"),
        ] {
            assert_eq!(
                refused(&format!("system = \"rpc\"\n{text}")).0,
                field,
                "{text}"
            );
        }
    }

    #[test]
    fn the_built_in_server_must_take_what_the_client_sends() {
        let big =
            "system = \"rpc\"\n[rpc]\nrequest_bytes = 2000000\n[rpc.server]\nmax_frame = 1048576\n";
        assert_eq!(refused(big).0, "rpc.request_bytes");
        let many =
            "system = \"rpc\"\n[client]\nconnections = 20\n[rpc.server]\nmax_connections = 10\n";
        assert_eq!(refused(many).0, "client.connections");
        // Someone else's server: its limits are its own.
        valid("system = \"rpc\"\n[rpc]\naddress = \"127.0.0.1:9\"\nrequest_bytes = 2000000\n[rpc.server]\nmax_frame = 1048576\n");
    }

    #[test]
    fn a_started_server_needs_an_address() {
        let (field, msg) =
            refused("system = \"rpc\"\n[sut]\ncommand = \"true\"\nready = \"127.0.0.1:9\"\n");
        assert_eq!(field, "rpc.address");
        assert!(msg.contains("[sut] starts a server"), "{msg}");
    }
}
