//! Settings of the `ticks` system: a WebSocket server broadcasting market ticks to groups of
//! clients — native clients (msgbench's own, optionally slowed down per message) and headless
//! browsers running a page the server serves — each message stamped with its sequence number
//! and its intended send time (`docs/protocol.md`, "The tick stream").
use crate::check::{
    check_pins, check_ws_address, check_ws_server, Invalid, MachineLimits, ScenarioError,
    MAX_DURATION,
};
use crate::duration::serde_text;
use crate::pacing::PacingSpec;
use crate::sut::SutConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Most ticks an `unbounded` queue holds for one client before the server gives up on it
/// (16 bytes each: 1 GiB). Past it the client is disconnected and the fault counted.
pub const UNBOUNDED_QUEUE_CAP: u64 = 1 << 26;

/// Most client connections of one run (all groups).
pub const MAX_TICK_CLIENTS: u64 = 1000;

/// Most headless browsers one run starts.
pub const MAX_BROWSERS: u64 = 8;

/// The `[ticks]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TicksSpec {
    /// `ws://host:port/path` of a running tick server. Omitted: msgbench starts its built-in
    /// server in-process on an ephemeral loopback port (configured by `[ticks.server]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Wire format of the ticks: `binary` (36 bytes) or `json` (~85 bytes).
    pub format: TickFormat,
    /// Distinct symbols the stream cycles through.
    pub symbols: u32,
    /// How often each client sends a cumulative acknowledgement (messages processed so far).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub ack_every: Duration,
    /// What a client does when the server closes its connection: `continue` (the run goes on
    /// without it), `reconnect`, or `stop` the run.
    pub on_close: OnClose,
    /// What gaps in a client's sequence numbers mean: `error` (a message was lost: the run
    /// fails, unless the built-in server says it dropped them under its slow-client policy) or
    /// `drops` (the server sheds load on purpose: gaps count as dropped).
    pub gaps: GapPolicy,
    /// Receive buffer of each native client socket, bytes (`SO_RCVBUF`); 0 leaves the OS default.
    pub receive_buffer: u32,
    /// The built-in server started when `address` is omitted.
    pub server: TickServerSpec,
    /// Client groups by name. Default: one group `client` with one native connection.
    pub clients: BTreeMap<String, TickClientSpec>,
    /// Someone else's feed at `address`: how to subscribe and read its messages (then no
    /// acknowledgements are sent and msgbench's tick format is not expected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feed: Option<crate::feed::FeedSpec>,
    /// A gRPC server stream at `address` (`http://` or `https://`) instead of a WebSocket:
    /// each connection makes this call and reads its messages as `[ticks.feed]` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<crate::grpc::GrpcStreamSpec>,
    /// A Server-Sent Events feed at `address` (`http://` or `https://` without `[ticks.grpc]`):
    /// the request and which events count (`[ticks.feed]` reads each event's data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::SseSpec>,
    /// A UDP feed at `address` (`udp://HOST:PORT`): where a multicast group is joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<crate::udp::UdpSpec>,
    /// `wss://`: a PEM file of CA certificates the server's may chain to, besides the Mozilla
    /// roots compiled in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// `wss://`: take any certificate, unverified (the report says so).
    pub insecure: bool,
    /// A client further behind the stream than this by the window's end (the newest stamp
    /// the freshest client had read, minus its own) is named in the run's warnings.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub behind_limit: Duration,
}

/// The default of `ticks.behind_limit`: far above a client that keeps up (milliseconds behind
/// the freshest on a loaded 2-core host), far below one whose backlog makes its latencies.
pub const BEHIND_LIMIT: Duration = Duration::from_millis(500);

impl Default for TicksSpec {
    fn default() -> Self {
        TicksSpec {
            address: None,
            format: TickFormat::Binary,
            symbols: 100,
            ack_every: Duration::from_millis(1),
            on_close: OnClose::Continue,
            gaps: GapPolicy::Error,
            receive_buffer: 0,
            server: TickServerSpec::default(),
            clients: BTreeMap::new(),
            feed: None,
            grpc: None,
            sse: None,
            udp: None,
            ca_file: None,
            insecure: false,
            behind_limit: BEHIND_LIMIT,
        }
    }
}

/// How ticks travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TickFormat {
    /// One binary WebSocket message of 36 bytes per tick.
    Binary,
    /// One text WebSocket message of JSON per tick.
    Json,
}

impl TickFormat {
    /// The scenario-file spelling.
    pub fn name(self) -> &'static str {
        match self {
            TickFormat::Binary => "binary",
            TickFormat::Json => "json",
        }
    }
}

/// What a client does when the server closes its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnClose {
    /// That client is done; the others go on (a slow client disconnected by the server).
    Continue,
    /// Connect again (every 100 ms until it works); the new connection starts a new sequence.
    Reconnect,
    /// End the run; what was measured is kept and the result says why.
    Stop,
}

/// What gaps in a client's sequence numbers mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GapPolicy {
    /// A gap the server did not account for is a lost message: a sequence error.
    Error,
    /// The server drops on purpose: gaps count as dropped messages.
    Drops,
}

/// What the server does with a client whose send queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SlowClientPolicy {
    /// Evict the oldest queued tick to make room (latency stays bounded, drops are counted).
    DropOldest,
    /// Refuse the new tick (the queue keeps the oldest ones).
    DropNewest,
    /// Close the client's connection.
    Disconnect,
    /// Let the queue grow (up to 64 Mi ticks): reproduces unbounded queueing latency.
    Unbounded,
}

impl SlowClientPolicy {
    /// The scenario-file spelling.
    pub fn name(self) -> &'static str {
        match self {
            SlowClientPolicy::DropOldest => "drop-oldest",
            SlowClientPolicy::DropNewest => "drop-newest",
            SlowClientPolicy::Disconnect => "disconnect",
            SlowClientPolicy::Unbounded => "unbounded",
        }
    }
}

/// The built-in tick server (`[ticks.server]`, and the flags of `msgbench serve ticks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TickServerSpec {
    /// Server threads, each a single-threaded event loop with its own generator; connections
    /// are dealt to them round-robin.
    pub threads: u32,
    /// CPUs of the server threads, one per thread (empty: not pinned).
    pub pin: Vec<usize>,
    /// Ticks each client's send queue holds before the slow-client policy applies.
    pub queue: u64,
    /// What happens to a client whose queue is full.
    pub policy: SlowClientPolicy,
    /// Ticks written to a socket before one flush (a batch of WebSocket frames, one syscall).
    pub write_batch: u32,
    /// Send buffer of each server socket, bytes (`SO_SNDBUF`); 0 leaves the OS default.
    /// The kernel's buffers are a queue too: a small one keeps `drop-oldest` latency low.
    pub send_buffer: u32,
    /// Largest message a client may send (acknowledgements, reports), bytes; a larger one
    /// closes that client's connection.
    pub max_frame: u32,
    /// Most client connections at once; more are refused.
    pub max_connections: u32,
    /// A connection that has not subscribed (`?wait=1`) and sends nothing for this long is
    /// closed; `"0"`: never. Subscribed clients are never idle (a client that stops reading
    /// meets the slow-client policy instead).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub idle_timeout: Duration,
}

impl Default for TickServerSpec {
    fn default() -> Self {
        TickServerSpec {
            threads: 1,
            pin: Vec::new(),
            queue: 65_536,
            policy: SlowClientPolicy::DropOldest,
            write_batch: 256,
            send_buffer: 0,
            max_frame: 1 << 20,
            max_connections: 1024,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// One group of clients (`[ticks.clients.<name>]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TickClientSpec {
    /// `native` (msgbench's client) or `browser` (headless Chromium running the server's page).
    pub kind: ClientKind,
    /// Connections in this group.
    pub connections: u32,
    /// Native clients: threads this group's connections are spread over.
    pub threads: u32,
    /// Native clients: CPUs of the threads, one per thread (empty: not pinned).
    pub pin: Vec<usize>,
    /// Simulated processing cost per message, spent before the message counts as processed.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub cost: Duration,
    /// How the cost is spent: `busy` (spin on the CPU, as a real client's parsing would) or
    /// `sleep` (the client behaves as if each message took `cost`, without using the CPU).
    pub work: CostWork,
    /// Browsers: what the page does with each message besides measuring it: `none`, `dom`
    /// (write the price into the page per message) or `frame` (once per animation frame).
    pub page: PageWork,
}

impl Default for TickClientSpec {
    fn default() -> Self {
        TickClientSpec {
            kind: ClientKind::Native,
            connections: 1,
            threads: 1,
            pin: Vec::new(),
            cost: Duration::ZERO,
            work: CostWork::Busy,
            page: PageWork::None,
        }
    }
}

/// Which program a client group runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// msgbench's own client threads.
    Native,
    /// Headless Chromium (Debian's `chromium`) running the page the tick server serves.
    Browser,
}

/// How a native client spends its simulated per-message cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CostWork {
    /// Spin for `cost` per message.
    Busy,
    /// Account `cost` per message in virtual time and sleep it off in slices.
    Sleep,
}

/// What the browser page does per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PageWork {
    /// Measure only.
    None,
    /// Write each message's price into the page (a DOM update per message).
    Dom,
    /// Keep the latest price and write it once per animation frame.
    Frame,
}

impl PageWork {
    /// The scenario-file spelling.
    pub fn name(self) -> &'static str {
        match self {
            PageWork::None => "none",
            PageWork::Dom => "dom",
            PageWork::Frame => "frame",
        }
    }
}

/// Validated `[ticks]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TicksConfig {
    /// `ws://…` of an external server; `None`: the built-in one, in-process.
    pub address: Option<String>,
    /// Wire format.
    pub format: TickFormat,
    /// Symbols cycled through.
    pub symbols: u32,
    /// Acknowledgement period, ns.
    pub ack_every_ns: u64,
    /// Server-close policy.
    pub on_close: OnClose,
    /// Meaning of gaps.
    pub gaps: GapPolicy,
    /// Client `SO_RCVBUF` (0: default).
    pub receive_buffer: u32,
    /// Built-in server settings.
    pub server: TickServerConfig,
    /// Client groups, in name order (the order of the result's classes).
    pub groups: Vec<TickGroup>,
    /// Spin margin of the generator's precise waits, ns (`pacing.spin`).
    pub spin_ns: u64,
    /// Someone else's feed: its schema (`None`: msgbench's tick protocol).
    pub feed: Option<crate::feed::FeedConfig>,
    /// A gRPC server stream instead of a WebSocket (then `feed` reads its messages).
    pub grpc: Option<Box<crate::grpc::GrpcStream>>,
    /// A Server-Sent Events feed instead of a WebSocket (then `feed` reads its events' data).
    pub sse: Option<crate::sse::SseStream>,
    /// A UDP feed instead of a WebSocket (msgbench's binary ticks, or what `feed` says).
    pub udp: Option<crate::udp::UdpFeed>,
    /// `wss://`: extra CA certificates.
    pub ca_file: Option<String>,
    /// `wss://`: no verification.
    pub insecure: bool,
    /// Which of the run's clients this process opens (all of them unless `--shard`).
    pub shard: crate::shard::Shard,
    /// `ticks.behind_limit`, ns.
    pub behind_limit_ns: u64,
}

/// Validated built-in tick server settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TickServerConfig {
    /// Threads.
    pub threads: usize,
    /// CPU per thread.
    pub pin: Vec<usize>,
    /// Queue capacity per client, ticks.
    pub queue: usize,
    /// Slow-client policy.
    pub policy: SlowClientPolicy,
    /// Frames per flush.
    pub write_batch: usize,
    /// `SO_SNDBUF` (0: default).
    pub send_buffer: u32,
    /// Largest client message, bytes.
    pub max_frame: usize,
    /// Connection limit.
    pub max_connections: usize,
    /// Unsubscribed and silent this long: closed (0: never).
    pub idle_timeout_ns: u64,
}

/// One validated client group.
#[derive(Debug, Clone, PartialEq)]
pub struct TickGroup {
    /// Group name (also the operation class of its latencies).
    pub name: String,
    /// Native or browser.
    pub kind: ClientKind,
    /// Connections.
    pub connections: usize,
    /// Threads (native).
    pub threads: usize,
    /// CPU per thread (native).
    pub pin: Vec<usize>,
    /// Cost per message, ns.
    pub cost_ns: u64,
    /// How the cost is spent.
    pub work: CostWork,
    /// Page work (browser).
    pub page: PageWork,
}

impl TickGroup {
    /// Name of connection `i` of this group: `fast-0`.
    pub fn connection_name(&self, i: usize) -> String {
        format!("{}-{i}", self.name)
    }
}

impl TicksConfig {
    /// Connections over all groups.
    pub fn total_connections(&self) -> usize {
        self.groups.iter().map(|g| g.connections).sum()
    }

    /// The clients this process opens, as (group, index in the group): every client, or a
    /// shard's — those whose run-wide index (groups in order) is `≡ shard.index (mod count)`.
    pub fn local_clients(&self) -> Vec<(usize, usize)> {
        let all = self
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, group)| (0..group.connections).map(move |i| (g, i)));
        let (index, count) = (self.shard.index as usize, self.shard.count as usize);
        all.enumerate()
            .filter(|(global, _)| global % count == index)
            .map(|(_, client)| client)
            .collect()
    }

    /// One line in scenario-file spelling.
    pub fn describe(&self) -> String {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let what = match g.kind {
                    ClientKind::Native => format!(
                        "native:cost={}:{}",
                        crate::duration::format(Duration::from_nanos(g.cost_ns)),
                        match g.work {
                            CostWork::Busy => "busy",
                            CostWork::Sleep => "sleep",
                        }
                    ),
                    ClientKind::Browser => format!(
                        "browser:page={}:cost={}",
                        g.page.name(),
                        crate::duration::format(Duration::from_nanos(g.cost_ns))
                    ),
                };
                format!("{}x{}({what})", g.name, g.connections)
            })
            .collect();
        let server = match &self.address {
            Some(a) => a.clone(),
            None => format!(
                "built-in(threads={} queue={} policy={} write_batch={} send_buffer={})",
                self.server.threads,
                self.server.queue,
                self.server.policy.name(),
                self.server.write_batch,
                self.server.send_buffer
            ),
        };
        let stream = match &self.feed {
            // A feed keeps its own schedule and format: say how it is read instead.
            Some(f) => format!(
                "feed({} stamp={} {} seq={}, its own schedule)",
                f.format.name(),
                f.field_name(&f.timestamp),
                f.clock.name(),
                f.sequence
                    .as_ref()
                    .map_or("none".to_string(), |s| f.field_name(s)),
            ),
            None => format!("format={} symbols={}", self.format.name(), self.symbols),
        };
        format!("ticks {server} {stream} clients={}", groups.join(","))
    }
}

/// A broadcast stream's schedule is absolute: it cannot wait for replies.
fn broadcast_pacing(pacing: &PacingSpec, invalid: &Invalid) -> Result<(), ScenarioError> {
    use crate::pacing::PacingMode;
    if matches!(pacing.mode, PacingMode::ClosedLoop | PacingMode::Relative) {
        return Err(invalid(
            "pacing.mode",
            format!(
                "is `{}`, which a broadcast stream cannot use",
                if pacing.mode == PacingMode::Relative {
                    "relative"
                } else {
                    "closed-loop"
                }
            ),
            "use `rate` or `interval` (an absolute schedule), or `immediate` (as fast as the slowest client takes them)",
        ));
    }
    Ok(())
}

impl TicksSpec {
    /// `[ticks.grpc]`: the call, and the message its stream carries.
    fn grpc_stream(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<Option<(crate::grpc::GrpcStream, prost_reflect::MessageDescriptor)>, ScenarioError>
    {
        let Some(spec) = &self.grpc else {
            return Ok(None);
        };
        let Some(address) = &self.address else {
            return Err(invalid(
                "ticks.grpc",
                "is given without ticks.address".into(),
                "name the gRPC server, e.g. address = \"http://127.0.0.1:50051\"",
            ));
        };
        spec.validate(address, (self.ca_file.as_deref(), self.insecure), limits)
            .map(Some)
            .map_err(|(field, problem, fix)| invalid(&field, problem, &fix))
    }

    pub(crate) fn validate(
        &self,
        pacing: &PacingSpec,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<TicksConfig, ScenarioError> {
        broadcast_pacing(pacing, invalid)?;
        let grpc = self.grpc_stream(limits, invalid)?;
        let sse = self.event_stream(grpc.is_some(), invalid)?;
        let udp = self.udp_feed(invalid)?;
        if let (Some(a), None, None, None) = (&self.address, &grpc, &sse, &udp) {
            check_ws_address("ticks.address", a, invalid)?;
        }
        if self.symbols == 0 {
            return Err(invalid(
                "ticks.symbols",
                "is 0".into(),
                "cycle through at least 1 symbol, e.g. 100",
            ));
        }
        if self.behind_limit.is_zero() {
            return Err(invalid(
                "ticks.behind_limit",
                "is 0".into(),
                "name clients more than a while behind the stream, e.g. \"500ms\"",
            ));
        }
        if self.ack_every.is_zero() || self.ack_every > Duration::from_secs(10) {
            return Err(invalid(
                "ticks.ack_every",
                format!("is {}", crate::duration::format(self.ack_every)),
                "acknowledge between every 1ns and every 10s, e.g. \"1ms\"",
            ));
        }
        let server = self.server.validate(limits, invalid)?;
        let feed = self.checked_feed(grpc.as_ref().map(|(_, m)| m), sse.is_some(), invalid)?;
        let groups = self.checked_groups(&server, limits, invalid)?;
        let wss = self
            .address
            .as_deref()
            .is_some_and(|a| a.starts_with("wss://") || a.starts_with("https://"));
        crate::check::check_tls_options(
            "ticks",
            wss,
            (self.ca_file.as_deref(), self.insecure),
            invalid,
        )?;
        Ok(TicksConfig {
            feed,
            grpc: grpc.map(|(g, _)| Box::new(g)),
            sse,
            udp,
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
            address: self.address.clone(),
            format: self.format,
            symbols: self.symbols,
            ack_every_ns: self.ack_every.as_nanos() as u64,
            on_close: self.on_close,
            gaps: self.gaps,
            receive_buffer: self.receive_buffer,
            server,
            groups,
            spin_ns: pacing.spin_ns(),
            shard: crate::shard::Shard::WHOLE,
            behind_limit_ns: self.behind_limit.as_nanos() as u64,
        })
    }

    /// `[ticks.udp]`: the UDP feed at a `udp://` address.
    fn udp_feed(&self, invalid: &Invalid) -> Result<Option<crate::udp::UdpFeed>, ScenarioError> {
        let udp = self
            .address
            .as_deref()
            .filter(|a| a.starts_with(crate::udp::UDP_SCHEME));
        let Some(address) = udp else {
            if self.udp.is_some() {
                return Err(invalid(
                    "ticks.udp",
                    "is given without a udp:// ticks.address".into(),
                    "name the feed's address, e.g. address = \"udp://239.1.1.1:9500\"",
                ));
            }
            return Ok(None);
        };
        if self.grpc.is_some() || self.sse.is_some() {
            return Err(invalid(
                "ticks.address",
                "is a udp:// address with [ticks.grpc] or [ticks.sse]".into(),
                "a UDP feed is datagrams: drop the other section",
            ));
        }
        if let Some(f) = &self.feed {
            if !f.subscribe.is_empty() || f.format == crate::feed::FeedFormat::Protobuf {
                return Err(invalid(
                    "ticks.feed",
                    "has subscribe messages or format = \"protobuf\" for a UDP feed".into(),
                    "a UDP feed takes no messages; its datagrams are JSON or binary (fields at offsets)",
                ));
            }
        }
        let clients: usize = self
            .clients
            .values()
            .map(|c| c.connections as usize)
            .sum::<usize>()
            .max(1);
        self.udp
            .clone()
            .unwrap_or_default()
            .validate(address, clients, invalid)
            .map(Some)
    }

    /// `[ticks.sse]`: the event stream at an `http[s]://` address without `[ticks.grpc]`.
    fn event_stream(
        &self,
        grpc: bool,
        invalid: &Invalid,
    ) -> Result<Option<crate::sse::SseStream>, ScenarioError> {
        let http = self
            .address
            .as_deref()
            .filter(|a| a.starts_with("http://") || a.starts_with("https://"));
        match (http, &self.sse) {
            (Some(_), Some(_)) if grpc => Err(invalid(
                "ticks.sse",
                "is given with [ticks.grpc]".into(),
                "a stream is a gRPC call or an event stream: keep one of the sections",
            )),
            (Some(_), None) if grpc => Ok(None),
            (Some(address), spec) => spec
                .clone()
                .unwrap_or_default()
                .validate(address, invalid)
                .map(Some),
            (None, Some(_)) => Err(invalid(
                "ticks.sse",
                "is given without an http:// or https:// ticks.address".into(),
                "name the event stream's URL, e.g. address = \"http://127.0.0.1:8080/events\"",
            )),
            (None, None) => Ok(None),
        }
    }

    /// The feed of someone else's server (a gRPC stream must say where its fields are);
    /// `streamed` is the message a gRPC stream carries.
    fn checked_feed(
        &self,
        streamed: Option<&prost_reflect::MessageDescriptor>,
        sse: bool,
        invalid: &Invalid,
    ) -> Result<Option<crate::feed::FeedConfig>, ScenarioError> {
        Ok(match &self.feed {
            Some(_) if self.address.is_none() => {
                return Err(invalid(
                    "ticks.feed",
                    "is given without ticks.address".into(),
                    "a feed is someone else's server: give its URL, e.g. address = \"ws://127.0.0.1:9443/ws\"",
                ))
            }
            Some(f) => Some(f.validate(streamed, sse, invalid)?),
            None if sse => {
                return Err(invalid(
                    "ticks.feed",
                    "is missing for an event stream".into(),
                    "say where each event's fields are: [ticks.feed] sequence = \"@id\" (or a path in the data), timestamp = \"ts\", clock = \"unix-ms\"",
                ))
            }
            None if streamed.is_some() => {
                return Err(invalid(
                    "ticks.feed",
                    "is missing for a gRPC stream".into(),
                    "say where each message's fields are: [ticks.feed] format = \"protobuf\", sequence = \"seq\", timestamp = \"sent_ns\", clock = \"monotonic-ns\"",
                ))
            }
            None => None,
        })
    }

    /// The client groups (one `client` group by default), within the run's connection and
    /// browser caps and the built-in server's connection limit.
    fn checked_groups(
        &self,
        server: &TickServerConfig,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<Vec<TickGroup>, ScenarioError> {
        let default_groups: BTreeMap<String, TickClientSpec> =
            [("client".to_string(), TickClientSpec::default())].into();
        let specs = if self.clients.is_empty() {
            &default_groups
        } else {
            &self.clients
        };
        let mut groups = Vec::new();
        for (name, g) in specs {
            groups.push(g.validate(name, self.address.is_some(), limits, invalid)?);
        }
        let total: u64 = groups.iter().map(|g| g.connections as u64).sum();
        if total > MAX_TICK_CLIENTS {
            return Err(invalid(
                "ticks.clients",
                format!("open {total} connections in total"),
                &format!("open at most {MAX_TICK_CLIENTS}"),
            ));
        }
        let browsers: u64 = groups
            .iter()
            .filter(|g| g.kind == ClientKind::Browser)
            .map(|g| g.connections as u64)
            .sum();
        if browsers > MAX_BROWSERS {
            return Err(invalid(
                "ticks.clients",
                format!("start {browsers} browsers"),
                &format!(
                    "start at most {MAX_BROWSERS} (each headless Chromium takes a few hundred MB)"
                ),
            ));
        }
        if self.address.is_none() && total > server.max_connections as u64 {
            return Err(invalid(
                "ticks.server.max_connections",
                format!(
                    "is {}, fewer than the {total} clients",
                    server.max_connections
                ),
                "raise it or open fewer connections",
            ));
        }
        Ok(groups)
    }
}

impl TickServerSpec {
    /// Checks the built-in server's settings (also used by `msgbench serve ticks`).
    pub fn validate(
        &self,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<TickServerConfig, ScenarioError> {
        check_ws_server(
            "ticks.server",
            (
                self.threads,
                &self.pin,
                self.max_frame,
                self.max_connections,
            ),
            limits,
            invalid,
        )?;
        if self.queue == 0 || self.queue > UNBOUNDED_QUEUE_CAP {
            return Err(invalid(
                "ticks.server.queue",
                format!("is {}", self.queue),
                &format!("hold 1 to {UNBOUNDED_QUEUE_CAP} ticks per client (use policy \"unbounded\" for no limit)"),
            ));
        }
        if self.idle_timeout > crate::check::MAX_DURATION {
            return Err(invalid(
                "ticks.server.idle_timeout",
                format!("is {}", crate::duration::format(self.idle_timeout)),
                "use at most 365 days, or \"0\" for no timeout",
            ));
        }
        if self.write_batch == 0 || self.write_batch > 65_536 {
            return Err(invalid(
                "ticks.server.write_batch",
                format!("is {}", self.write_batch),
                "write 1 to 65536 frames per flush, e.g. 256",
            ));
        }
        Ok(TickServerConfig {
            threads: self.threads as usize,
            pin: self.pin.clone(),
            queue: if self.policy == SlowClientPolicy::Unbounded {
                UNBOUNDED_QUEUE_CAP as usize
            } else {
                self.queue as usize
            },
            policy: self.policy,
            write_batch: self.write_batch as usize,
            send_buffer: self.send_buffer,
            max_frame: self.max_frame as usize,
            max_connections: self.max_connections as usize,
            idle_timeout_ns: self.idle_timeout.as_nanos() as u64,
        })
    }
}

impl TickClientSpec {
    fn validate(
        &self,
        name: &str,
        external: bool,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<TickGroup, ScenarioError> {
        let field = |key: &str| format!("ticks.clients.{name}.{key}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(
                &format!("ticks.clients.{name}"),
                "has a name other than letters, digits, `-` and `_`".into(),
                "rename the group, e.g. [ticks.clients.fast]",
            ));
        }
        if self.connections == 0 {
            return Err(invalid(
                &field("connections"),
                "is 0".into(),
                "open at least 1 connection per group, or remove the group",
            ));
        }
        if self.cost > Duration::from_secs(1) || self.cost > MAX_DURATION {
            return Err(invalid(
                &field("cost"),
                format!("is {}", crate::duration::format(self.cost)),
                "simulate at most 1s per message",
            ));
        }
        match self.kind {
            ClientKind::Native => self.check_native(&field, limits, invalid)?,
            ClientKind::Browser => self.check_browser(&field, external, invalid)?,
        }
        Ok(TickGroup {
            name: name.to_string(),
            kind: self.kind,
            connections: self.connections as usize,
            threads: self.threads as usize,
            pin: self.pin.clone(),
            cost_ns: self.cost.as_nanos() as u64,
            work: self.work,
            page: self.page,
        })
    }
}

impl TickClientSpec {
    /// A native group: 1 to 64 threads, no more than its connections, pins that fit, no page.
    fn check_native(
        &self,
        field: &dyn Fn(&str) -> String,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if self.threads == 0 || self.threads > 64 {
            return Err(invalid(
                &field("threads"),
                format!("is {}", self.threads),
                "use 1 to 64 threads per group",
            ));
        }
        if self.threads > self.connections {
            return Err(invalid(
                &field("threads"),
                format!(
                    "is {}, more than its {} connections",
                    self.threads, self.connections
                ),
                "use at most one thread per connection",
            ));
        }
        check_pins(
            &field("pin"),
            "client",
            &self.pin,
            self.threads,
            limits,
            invalid,
        )?;
        if self.page != PageWork::None {
            return Err(invalid(
                &field("page"),
                "is set for a native group".into(),
                "`page` applies to kind = \"browser\"; remove it or set the kind",
            ));
        }
        Ok(())
    }

    /// A browser group: the built-in server's page only, no threads, pins or sleeping cost.
    fn check_browser(
        &self,
        field: &dyn Fn(&str) -> String,
        external: bool,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if external {
            return Err(invalid(
                &field("kind"),
                "is `browser`, but `ticks.address` names an external server".into(),
                "browsers run the page msgbench's built-in server serves: remove `ticks.address`",
            ));
        }
        if !self.pin.is_empty() || self.threads != 1 {
            return Err(invalid(
                &field("threads"),
                "or `pin` is set for a browser group".into(),
                "threads and pinning apply to native clients; remove them",
            ));
        }
        if self.work != CostWork::Busy {
            return Err(invalid(
                &field("work"),
                "is `sleep` for a browser group".into(),
                "a page spends its cost busy; remove `work`",
            ));
        }
        Ok(())
    }
}

impl TicksConfig {
    /// What the `ticks` system checks across sections: a broadcast runs for a duration, not an
    /// operation count, and a `[sut]` server has an address.
    pub(crate) fn check_with(
        &self,
        operations: Option<u64>,
        sut: Option<&SutConfig>,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if operations.is_some() {
            return Err(invalid(
                "run.operations",
                "is set for a broadcast stream".into(),
                "a tick stream runs for `run.duration`; remove `run.operations`",
            ));
        }
        crate::sut::check_address_given(
            sut,
            self.address.as_deref(),
            "ticks.address",
            "ws:// address",
            invalid,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn ticks_refuse_what_they_cannot_run() {
        for (text, field) in [
            (
                "[run]\noperations = 5\nduration = \"1s\"\n",
                "run.operations",
            ),
            ("[ticks]\nsymbols = 0\n", "ticks.symbols"),
            ("[ticks.server]\nqueue = 0\n", "ticks.server.queue"),
            (
                "[ticks.clients.many]\nconnections = 1001\n",
                "ticks.clients",
            ),
            ("[pacing]\nmode = \"closed-loop\"\n", "pacing.mode"),
        ] {
            assert_eq!(
                refused(&format!("system = \"ticks\"\n{text}")).0,
                field,
                "{text}"
            );
        }
    }

    #[test]
    fn a_started_tick_server_needs_a_ws_address() {
        let (field, msg) =
            refused("system = \"ticks\"\n[sut]\ncommand = \"true\"\nready = \"127.0.0.1:9\"\n");
        assert_eq!(field, "ticks.address");
        assert!(msg.contains("ws:// address"), "{msg}");
        valid("system = \"ticks\"\n[ticks]\naddress = \"ws://127.0.0.1:9/ticks\"\n[sut]\ncommand = \"true\"\n");
    }
}
