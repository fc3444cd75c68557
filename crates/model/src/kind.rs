//! The systems under test msgbench knows, by name, and the scenario sections each reads: on
//! the model's ground floor (it imports nothing of the crate), read by the scenario, the
//! results and the verdict alike.
use serde::{Deserialize, Serialize};

/// The systems under test msgbench knows.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SystemKind {
    /// In-process bounded single-producer/single-consumer ring.
    #[default]
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
    /// Any HTTP/1.1 server: named requests, statuses counted.
    Http,
    /// Publish/subscribe through a message broker (NATS, Redis Pub/Sub).
    Pubsub,
    /// A request/response protocol described in the scenario (`[wire]`): framing, requests,
    /// matching.
    Wire,
}

impl SystemKind {
    /// Its name in scenario and result files (`queue`, `rpc`, `redis`, `ticks`, `ws-rpc`,
    /// `http`).
    pub fn name(self) -> &'static str {
        match self {
            SystemKind::Queue => "queue",
            SystemKind::Rpc => "rpc",
            SystemKind::Redis => "redis",
            SystemKind::Ticks => "ticks",
            SystemKind::WsRpc => "ws-rpc",
            SystemKind::Http => "http",
            SystemKind::Pubsub => "pubsub",
            SystemKind::Wire => "wire",
        }
    }

    /// The system's own sections it reads; every system reads `name`, `system`, `run`,
    /// `pacing`, `report` and `sweep`, and none reads the others'.
    pub fn sections(self) -> &'static [&'static str] {
        match self {
            SystemKind::Queue => &["queue"],
            SystemKind::Rpc => &["client", "rpc", "sut"],
            SystemKind::Redis => &["client", "redis", "sut"],
            SystemKind::Ticks => &["ticks", "sut"],
            SystemKind::WsRpc => &["client", "ws_rpc", "sut"],
            SystemKind::Http => &["client", "http", "sut"],
            SystemKind::Pubsub => &["pubsub", "sut"],
            SystemKind::Wire => &["client", "wire", "sut"],
        }
    }

    /// The section of `axis` (a dotted path, maybe quoted) when it is another system's:
    /// setting it changes nothing this system does.
    pub fn foreign_section(self, axis: &str) -> Option<&str> {
        let axis = axis.trim_matches('"');
        let section = axis.split('.').next().unwrap_or(axis);
        (SYSTEM_SECTIONS.contains(&section) && !self.sections().contains(&section))
            .then_some(section)
    }
}

/// Sections some systems read and others do not (see [`SystemKind::sections`]).
pub const SYSTEM_SECTIONS: [&str; 10] = [
    "queue", "client", "rpc", "redis", "ticks", "ws_rpc", "http", "pubsub", "sut", "wire",
];

impl std::fmt::Display for SystemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
