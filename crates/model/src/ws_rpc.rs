//! Settings of the `ws-rpc` system: JSON-RPC 2.0 over WebSocket (as an Ethereum node's
//! `eth_chainId`), driven with the request/response driver's `[client]` settings. A socket
//! thread owns the connections and hands each response to the calling thread, which waits for
//! it with a wait strategy (`busy-spin`, `yield`, `park`, `backoff`).
use crate::check::{check_pins, check_ws_address, Invalid, MachineLimits, ScenarioError};
use crate::duration::serde_text;
use crate::queue::WaitStrategy;
use crate::rpc::ServiceWork;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `[ws_rpc]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WsRpcSpec {
    /// `ws://host:port[/path]` of a JSON-RPC server. Omitted: msgbench starts its built-in
    /// server in-process on an ephemeral loopback port (configured by `[ws_rpc.server]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// How a calling thread waits for the responses its socket thread hands over.
    pub wait: WaitStrategy,
    /// CPUs of the socket threads, one per client thread (empty: not pinned).
    pub socket_pin: Vec<usize>,
    /// Methods by class name, each with its weight in the mix. Default: one class `chain_id`
    /// calling `eth_chainId`.
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub methods: BTreeMap<String, WsRpcMethodSpec>,
    /// The built-in server started when `address` is omitted.
    pub server: WsRpcServerSpec,
}

impl Default for WsRpcSpec {
    fn default() -> Self {
        WsRpcSpec {
            address: None,
            wait: WaitStrategy::Park,
            socket_pin: Vec::new(),
            methods: BTreeMap::new(),
            server: WsRpcServerSpec::default(),
        }
    }
}

/// One method class of the mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WsRpcMethodSpec {
    /// JSON-RPC method name.
    pub method: String,
    /// Its params (any TOML value, sent as JSON; usually an array).
    pub params: toml::Value,
    /// Relative weight in the mix.
    pub weight: f64,
    /// What the built-in server answers (any TOML value, sent as JSON).
    pub result: toml::Value,
    /// Time the built-in server spends per call of this method.
    #[serde(with = "serde_text")]
    pub service: Duration,
    /// `busy` (the server thread computes) or `sleep` (the answer waits on a timer; responses
    /// then come out of order when methods differ).
    pub work: ServiceWork,
    /// The answer is a stream: several responses carrying the request's id, each `result` a
    /// message, until the one whose `result` is `stream_done`. Besides the call's latency (to
    /// that end), each stream's time to its first message and the gaps between its messages
    /// are measured; an `error` response ends it failed.
    pub stream: bool,
    /// The `result` that ends a stream, uncounted (any TOML value, compared as JSON text).
    pub stream_done: toml::Value,
    /// The built-in server's messages per stream (the end's not among them).
    pub messages: u32,
    /// The built-in server's time between a stream's messages (`service` is its time to the
    /// first).
    #[serde(with = "serde_text")]
    pub every: Duration,
}

impl Default for WsRpcMethodSpec {
    fn default() -> Self {
        WsRpcMethodSpec {
            method: "eth_chainId".into(),
            params: toml::Value::Array(Vec::new()),
            weight: 1.0,
            result: toml::Value::String("0x1".into()),
            service: Duration::ZERO,
            work: ServiceWork::Busy,
            stream: false,
            stream_done: toml::Value::String("[DONE]".into()),
            messages: 20,
            every: Duration::from_millis(10),
        }
    }
}

/// The built-in JSON-RPC server (`[ws_rpc.server]`, and `msgbench serve ws-rpc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WsRpcServerSpec {
    /// Server threads, each a single-threaded event loop; connections dealt round-robin.
    pub threads: u32,
    /// CPUs of the server threads, one per thread (empty: not pinned).
    pub pin: Vec<usize>,
    /// Largest request accepted, bytes; a larger one closes that connection.
    pub max_frame: u32,
    /// Most connections at once; more are refused.
    pub max_connections: u32,
    /// A connection that sends nothing (and waits for no answer) for this long is closed, as is
    /// one that reads none of its answers for this long; `"0"`: never.
    #[serde(with = "crate::duration::serde_text")]
    #[schemars(with = "String")]
    pub idle_timeout: std::time::Duration,
}

impl Default for WsRpcServerSpec {
    fn default() -> Self {
        WsRpcServerSpec {
            threads: 1,
            pin: Vec::new(),
            max_frame: 1 << 20,
            max_connections: 1024,
            idle_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// One validated method class.
#[derive(Debug, Clone, PartialEq)]
pub struct WsRpcMethod {
    /// Class name.
    pub name: String,
    /// Share of the mix (shares sum to 1).
    pub share: f64,
    /// JSON-RPC method.
    pub method: String,
    /// Params as JSON text.
    pub params_json: String,
    /// The built-in server's answer, as JSON text.
    pub result_json: String,
    /// Built-in server's time per call, ns.
    pub service_ns: u64,
    /// How it spends it.
    pub work: ServiceWork,
    /// A streamed answer: the `result` that ends it, as JSON text.
    pub stream_done: Option<String>,
    /// The built-in server's messages per stream.
    pub messages: u32,
    /// The built-in server's time between a stream's messages, ns.
    pub every_ns: u64,
}

/// Validated `[ws_rpc]`.
#[derive(Debug, Clone, PartialEq)]
pub struct WsRpcConfig {
    /// External server; `None`: built-in.
    pub address: Option<String>,
    /// Caller wait strategy.
    pub wait: WaitStrategy,
    /// Socket thread CPUs.
    pub socket_pin: Vec<usize>,
    /// The method mix, in name order.
    pub methods: Vec<WsRpcMethod>,
    /// Built-in server settings.
    pub server: WsRpcServerConfig,
}

/// Validated built-in server settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WsRpcServerConfig {
    /// Threads.
    pub threads: usize,
    /// CPU per thread.
    pub pin: Vec<usize>,
    /// Largest request, bytes.
    pub max_frame: usize,
    /// Connection limit.
    pub max_connections: usize,
    /// Idle (and non-reading) connections are closed after this long, ns (0: never).
    pub idle_timeout_ns: u64,
}

impl WsRpcConfig {
    /// One line in scenario-file spelling.
    pub fn describe(&self, client: &crate::client::ClientConfig) -> String {
        let wait = serde_json::to_value(self.wait)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        format!(
            "ws-rpc {} {} wait={wait} methods={}",
            self.address.as_deref().unwrap_or("built-in"),
            client.describe(),
            self.methods
                .iter()
                .map(|m| format!("{}:{}:{:.0}%", m.name, m.method, 100.0 * m.share))
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

fn json_text(field: &str, value: &toml::Value, invalid: &Invalid) -> Result<String, ScenarioError> {
    serde_json::to_string(value).map_err(|e| {
        invalid(
            field,
            format!("cannot be written as JSON: {e}"),
            "use strings, numbers, booleans, arrays and tables",
        )
    })
}

impl WsRpcMethodSpec {
    /// A streamed method's end (`stream_done` as JSON), its built-in stream within bounds.
    fn stream_of(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Option<String>, ScenarioError> {
        if !self.stream {
            return Ok(None);
        }
        if self.messages > MAX_STREAM_MESSAGES {
            return Err(invalid(
                &field("messages"),
                format!("is {}", self.messages),
                &format!(
                    "the built-in server streams at most {MAX_STREAM_MESSAGES} messages a call"
                ),
            ));
        }
        if self.every > Duration::from_secs(60) {
            return Err(invalid(
                &field("every"),
                format!("is {}", crate::duration::format(self.every)),
                "space a stream's messages at most 60s apart",
            ));
        }
        let done = json_text(&field("stream_done"), &self.stream_done, invalid)?;
        if done == json_text(&field("result"), &self.result, invalid)? {
            return Err(invalid(
                &field("stream_done"),
                format!("is {done}, the method's `result` too"),
                "the built-in server's messages would each end the stream: give `result` and `stream_done` different values",
            ));
        }
        Ok(Some(done))
    }
}

/// Most messages a built-in server's stream carries.
pub const MAX_STREAM_MESSAGES: u32 = 100_000;

impl WsRpcSpec {
    pub(crate) fn validate(
        &self,
        client: &crate::client::ClientConfig,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<WsRpcConfig, ScenarioError> {
        if let Some(a) = &self.address {
            check_ws_address("ws_rpc.address", a, invalid)?;
        }
        check_pins(
            "ws_rpc.socket_pin",
            "socket",
            &self.socket_pin,
            client.threads as u32,
            limits,
            invalid,
        )?;
        let default_methods: BTreeMap<String, WsRpcMethodSpec> =
            [("chain_id".to_string(), WsRpcMethodSpec::default())].into();
        let methods = if self.methods.is_empty() {
            &default_methods
        } else {
            &self.methods
        };
        let shares = crate::check::shares("ws_rpc.methods", methods, |m| m.weight, invalid)?;
        let mut out = Vec::new();
        for ((name, m), share) in methods.iter().zip(shares) {
            let field = |key: &str| format!("ws_rpc.methods.{name}.{key}");
            if m.method.is_empty() || m.method.contains(['"', '\\']) || m.method.len() > 256 {
                return Err(invalid(
                    &field("method"),
                    format!("is {:?}", m.method),
                    "name a JSON-RPC method such as \"eth_chainId\" (no quotes or backslashes)",
                ));
            }
            if m.service > Duration::from_secs(60) {
                return Err(invalid(
                    &field("service"),
                    format!("is {}", crate::duration::format(m.service)),
                    "simulate at most 60s per call",
                ));
            }
            out.push(WsRpcMethod {
                name: name.clone(),
                share,
                method: m.method.clone(),
                params_json: json_text(&field("params"), &m.params, invalid)?,
                result_json: json_text(&field("result"), &m.result, invalid)?,
                service_ns: m.service.as_nanos() as u64,
                work: m.work,
                stream_done: m.stream_of(&field, invalid)?,
                messages: m.messages,
                every_ns: m.every.as_nanos() as u64,
            });
        }
        let server = self.server.validate(limits, invalid)?;
        if self.address.is_none() && client.total_connections() > server.max_connections {
            return Err(invalid(
                "client.connections",
                format!(
                    "makes {} connections, more than the built-in server's max_connections ({})",
                    client.total_connections(),
                    server.max_connections
                ),
                "raise `ws_rpc.server.max_connections` or open fewer connections",
            ));
        }
        Ok(WsRpcConfig {
            address: self.address.clone(),
            wait: self.wait,
            socket_pin: self.socket_pin.clone(),
            methods: out,
            server,
        })
    }
}

impl WsRpcServerSpec {
    /// Checks the built-in server's settings (also used by `msgbench serve ws-rpc`).
    pub fn validate(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<WsRpcServerConfig, ScenarioError> {
        crate::check::check_ws_server(
            "ws_rpc.server",
            (
                self.threads,
                &self.pin,
                self.max_frame,
                self.max_connections,
            ),
            limits,
            invalid,
        )?;
        if self.idle_timeout > crate::check::MAX_DURATION {
            return Err(invalid(
                "ws_rpc.server.idle_timeout",
                format!("is {}", crate::duration::format(self.idle_timeout)),
                "use at most 365 days, or \"0\" for no timeout",
            ));
        }
        Ok(WsRpcServerConfig {
            threads: self.threads as usize,
            pin: self.pin.clone(),
            max_frame: self.max_frame as usize,
            max_connections: self.max_connections as usize,
            idle_timeout_ns: self.idle_timeout.as_nanos() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn ws_rpc_refuses_what_it_cannot_run() {
        for (text, field) in [
            (
                "[ws_rpc]\naddress = \"http://127.0.0.1:1/\"\n",
                "ws_rpc.address",
            ),
            (
                "[ws_rpc.methods.m]\nmethod = \"a\\\"b\"\n",
                "ws_rpc.methods.m.method",
            ),
            ("[ws_rpc]\nsocket_pin = [0, 1]\n", "ws_rpc.socket_pin"),
        ] {
            assert_eq!(
                refused(&format!("system = \"ws-rpc\"\n{text}")).0,
                field,
                "{text}"
            );
        }
    }

    #[test]
    fn a_started_json_rpc_server_needs_a_ws_address() {
        let (field, _) =
            refused("system = \"ws-rpc\"\n[sut]\ncommand = \"true\"\nready = \"127.0.0.1:9\"\n");
        assert_eq!(field, "ws_rpc.address");
        let s = valid("system = \"ws-rpc\"\n[ws_rpc]\naddress = \"ws://127.0.0.1:9/\"\n");
        assert!(matches!(s.system, crate::scenario::System::WsRpc { .. }));
    }
}
