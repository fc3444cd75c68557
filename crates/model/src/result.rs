//! The result of one run: the contract between the engine and every report.
//!
//! Versioned ([`SCHEMA_VERSION`]) and published as a JSON schema (`docs/schema/run.schema.json`,
//! checked by a test). It carries the full histograms, so any percentile can be recomputed later.
use crate::fairness::{ConnectionResult, Fairness};
use crate::histogram::Percentiles;
use crate::kind::SystemKind;
use crate::warning::Warning;
use serde::{Deserialize, Serialize};
use std::ops::AddAssign;

/// Version of the run JSON format. Bump on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One run: one sweep point, one replicate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// Format version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Unique within the experiment, also the file name: `003-capacity=8-r2`.
    pub run_id: String,
    /// Experiment name.
    pub experiment: String,
    /// Index of the sweep point.
    pub point: usize,
    /// Replicate number, from 1.
    pub replicate: u32,
    /// Sweep parameters of this point, in the order of the sweep axes.
    pub params: Vec<Param>,
    /// System under test (`queue`, `rpc`, `redis`, `ticks`, `ws-rpc`).
    pub system: SystemKind,
    /// Human description of the configuration, e.g. `queue cap=64 ring=msgbench drop`.
    pub config: String,
    /// Wall-clock time (Unix ms) at which the measured window began (after warm-up).
    pub started_unix_ms: u64,
    /// Length of the measured window in seconds (after warm-up, before drain).
    pub duration_s: f64,
    /// Warm-up discarded before it, seconds.
    pub warmup_s: f64,
    /// The send lag p99 above which the run is late (`run.send_lag_limit`), ns; absent when it
    /// is the default, [`crate::verdict::SEND_LAG_LIMIT_NS`] (1 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_limit_ns: Option<u64>,
    /// Rate the pacing aimed at, if any.
    pub target_per_sec: Option<f64>,
    /// The span the schedule covered (`run.duration`), seconds; absent when `run.operations`
    /// alone ends the run. The measured window (`duration_s`) runs past it when the last
    /// sends went out late; whether the target was reached is judged on this one (the late
    /// sends are the send lag's to report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_s: Option<f64>,
    /// True when Ctrl-C or a stop request cut the run short.
    pub interrupted: bool,
    /// Message accounting.
    pub counters: Counters,
    /// Sequence checking on the receiving side.
    pub sequence: SequenceErrors,
    /// Deliveries whose latency came out below zero: they completed before their intended
    /// send time on this host's clock, so the clock that stamped them runs ahead of this one
    /// (a feed's wall-clock stamp from another host). Each was recorded as a latency of 0.
    /// Absent when there were none.
    #[serde(default, skip_serializing_if = "Early::is_none")]
    pub early: Early,
    /// Faults of request/response systems, by kind (all zero for the queue).
    #[serde(default)]
    pub faults: Faults,
    /// Latency (completion − intended send), all classes.
    pub latency: Percentiles,
    /// Service time (completion − actual send), all classes.
    pub service: Percentiles,
    /// Send lag (actual − scheduled send).
    pub send_lag: Percentiles,
    /// The send lag split by whose it is. `pacer`: sends that waited for nothing but the
    /// driver — its thread woke or ran late (a busy host, a thread short of CPU). `held`: sends
    /// that first waited for room in a full window (`when_full = "block"`) or a full queue —
    /// the system pushing back. Empty in files written before it.
    #[serde(default)]
    pub send_lag_split: SendLagSplit,
    /// How long each measured request that got no answer had waited, from its intended send,
    /// when it was given up: it timed out, its connection failed, or the run ended with it in
    /// flight. Each is a lower bound on a latency `latency` cannot hold (it counts answers
    /// only), so a stall that answered nothing still shows here. Empty for systems without
    /// requests and in files written before it.
    #[serde(default)]
    pub unanswered: Percentiles,
    /// Publish latency (the broker's answer to a publish − its intended publish time) of the
    /// measured messages the broker answered: `pubsub` on Redis (PUBLISH's reply), MQTT at
    /// QoS 1 (PUBACK) and Kafka at acks 1 or all (the Produce response of its batch). Absent
    /// for other systems and brokers that answer no publish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_latency: Option<Percentiles>,
    /// Responses that were streams of messages (`[http.requests.NAME] stream = "sse"`): time to
    /// the first message, gaps between messages, time per message. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed: Option<StreamedResponses>,
    /// Per operation class.
    pub classes: Vec<ClassResult>,
    /// CPU used by the driver (and the system under test, when in-process).
    pub cpu: CpuUsage,
    /// One-second interval samples of the measured window.
    pub intervals: Vec<IntervalSample>,
    /// `stages` pacing: each stage as the run's seconds saw it, a spike's recovery time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::stages::StageResult>,
    /// Full histograms, HdrHistogram base64 compressed V2.
    pub histograms: Histograms,
    /// Problems noticed during the run (e.g. "target rate not reached"), one sentence each.
    pub warnings: Vec<Warning>,
    /// Per client of a broadcast stream (`ticks`): what the server did for it and what it got.
    /// Empty (and absent from the file) for other systems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamClient>,
    /// Per connection of a request/response run (`rpc`, `http`, `redis`, `ws-rpc`): what each
    /// got. Empty (and absent from the file) for other systems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<ConnectionResult>,
    /// How equally the connections were served: one entry over a request/response run's
    /// connections, or one per group of two or more stream clients. Empty with fewer than two
    /// connections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fairness: Vec<Fairness>,
    /// What the reader must know to read the figures (what a feed's timestamp means, that a
    /// TLS certificate was not verified), one sentence each. Unlike `warnings`, these do not
    /// make a run invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<String>,
    /// This run is one shard of a run spread over several load generators (`run --shard`):
    /// which slice, on which host, started how close to the agreed time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// A shard of a publish/subscribe run: what its publishers sent and what its
    /// subscriptions got from every publisher, which `merge` accounts again across the shards
    /// (each subscription against every shard's publishers). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pubsub_shard: Option<PubsubShardFigures>,
    /// This run merged shards (`msgbench merge`): each shard's own figures. The run's figures
    /// are the whole's: histograms added, counters summed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardRow>,
}

/// What one shard of a publish/subscribe run measured, for the merge's accounting.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PubsubShardFigures {
    /// Publishers in the whole run (every shard's).
    pub publishers_total: u32,
    /// Publishers of each topic (`publishers_total` is a multiple of it).
    pub publishers_per_topic: u32,
    /// This shard's publishers.
    pub publishers: Vec<PublisherFigures>,
    /// This shard's subscriptions.
    pub subscriptions: Vec<SubscriptionFigures>,
}

/// What one publisher sent in the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublisherFigures {
    /// Its run-wide index.
    pub index: u32,
    /// Messages of the measured window it published.
    pub measured: u64,
    /// The sequence number of its first message of the window.
    pub first_measured: Option<u64>,
    /// Of those, per second of the window (by intended publish time).
    pub per_second: Vec<u64>,
}

/// What one subscription got, per publisher of its topic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionFigures {
    /// Its name (`t0-s1`), as in `streams`.
    pub name: String,
    /// Its topic's index.
    pub topic: u32,
    /// Its connection ended before the run did: what never came failed.
    pub closed: bool,
    /// Per publisher of its topic (in run-wide order): messages of the window received.
    pub delivered: Vec<u64>,
    /// Per publisher of its topic: the highest sequence number a loss is judged up to (the
    /// highest received, or less for a shared subscription's consumers).
    pub loss_horizon: Vec<Option<u64>>,
}

/// One client connection of a broadcast stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamClient {
    /// Connection name, `<group>-<index>` (`fast-0`); a reconnection adds `.<n>`.
    pub name: String,
    /// Its group (also the operation class of its latencies).
    pub group: String,
    /// `native` (a WebSocket client), `browser`, or a feed's transport (`grpc`, `sse`, `udp`);
    /// for a publish/subscribe subscription, its broker (`nats`, `redis`).
    pub kind: String,
    /// The sender its messages came from, `host:port`: a UDP feed's. A client that hears
    /// several senders has an entry per sender (named `<client>@<sender>` after the first),
    /// each sender's sequence numbers its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The server's counts for this client's measured ticks; null when the server is not
    /// msgbench's (then `counters` are inferred from the sequence numbers the client saw).
    pub server: Option<StreamServerCounts>,
    /// This client's share of the run's accounting (the run's counters are their sum).
    pub counters: Counters,
    /// Sequence errors not explained by the server's counted drops.
    pub sequence: SequenceErrors,
    /// Every gap in its sequence numbers, explained (server drops) or not.
    pub gaps_seen: u64,
    /// Every number it read twice, explained or not (a lossy UDP feed's are explained: the
    /// network duplicates datagrams).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicates_seen: u64,
    /// Every number it read after a later one, explained or not.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reordered_seen: u64,
    /// Latency of its measured ticks (completion − intended send).
    pub latency: Percentiles,
    /// Encoded latency histogram.
    pub latency_histogram: String,
    /// Faults of this connection (server closed it, bad frames, …).
    pub faults: Faults,
    /// Why and when (seconds into the measured window) the connection ended early, if it did.
    pub closed: Option<String>,
    /// Times it connected again after the server closed it (`ticks.on_close = "reconnect"`);
    /// an event stream that resumes sends its last event id (`Last-Event-ID`) each time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconnects: u64,
    /// Browser clients: the page's clock as measured at its start.
    pub page_clock: Option<PageClock>,
    /// How far behind the stream it was at the window's end, ns: the newest stamp any client
    /// of the run had read by then, minus the newest this one had (absent: none read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_ns: Option<u64>,
    /// One sample per second, on the run's interval grid.
    pub intervals: Vec<StreamInterval>,
}

/// What the server counted for one client, measured ticks only (intended send time in the
/// measured window).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct StreamServerCounts {
    /// Ticks generated while the client was subscribed.
    pub generated: u64,
    /// Ticks accepted into its send queue.
    pub queued: u64,
    /// Ticks dropped by the slow-client policy (refused or evicted).
    pub dropped: u64,
    /// Ticks handed to its socket (a flushed write).
    pub written: u64,
    /// Ticks the client acknowledged as processed (its last cumulative acknowledgement).
    pub acked: u64,
    /// Largest number of ticks waiting in its queue at once.
    pub queue_peak: u64,
}

/// A browser page's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageClock {
    /// Smallest step of `performance.now()` the page observed, ns.
    pub resolution_ns: u64,
    /// Round trip of the best clock-sync exchange, ns: the page's offset to the server clock
    /// is known to within half of it.
    pub sync_rtt_ns: u64,
}

/// One second of one stream client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamInterval {
    /// Start, seconds since the measured window began.
    pub start_s: f64,
    /// Length, seconds.
    pub length_s: f64,
    /// Ticks generated for it (by intended send time).
    pub generated: u64,
    /// Ticks written to its socket.
    pub written: u64,
    /// Ticks it processed.
    pub delivered: u64,
    /// Ticks dropped for it.
    pub dropped: u64,
    /// Generated − processed − dropped − failed, cumulative, at the end of the second: ticks
    /// waiting in the server's queue, the kernel's buffers or the client.
    pub backlog: i64,
    /// Median latency of the ticks it processed in this second.
    pub latency_p50_ns: u64,
    /// p99 latency of the ticks it processed in this second.
    pub latency_p99_ns: u64,
    /// Max latency of the ticks it processed in this second.
    pub latency_max_ns: u64,
}

/// What went wrong on the connections of a request/response run, by kind. Failed requests are
/// also in `counters.failed`; these count the events behind them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Requests that got no response within `client.timeout`.
    pub timeouts: u64,
    /// Connections the server closed or reset.
    pub disconnects: u64,
    /// Connection attempts that failed (refused, unreachable) during the run.
    pub connect_failures: u64,
    /// Responses that broke the protocol (garbage, oversized or unknown frames).
    pub protocol_errors: u64,
    /// Error replies from the server (e.g. Redis `-ERR`).
    pub server_errors: u64,
    /// Replies whose id matched no request in flight (a described wire's server answering
    /// twice, or with an id it made up; a timeout closes its connection, so a late answer
    /// never comes): skipped, the connection kept. No request failed by them: not in
    /// `failed`, nor in [`Faults::total`].
    pub unmatched_replies: u64,
    /// Peers that answered a WebSocket upgrade with something else (not a WebSocket server,
    /// a refused upgrade).
    pub handshake_failures: u64,
    /// UDP feeds: datagrams the kernel dropped for this client's socket because its receive
    /// buffer was full (`/proc/net/udp`'s `drops`, warm-up included): the client did not read
    /// fast enough. They show as gaps too. Not in [`Faults::total`].
    #[serde(skip_serializing_if = "is_zero")]
    pub receive_buffer_drops: u64,
    /// The server's error replies by message (`ERR unknown command 'FOO'`, `JSON-RPC error
    /// -32601 "method not found"`), most frequent first; at most [`ErrorCount::KINDS`] messages,
    /// the rest counted under [`ErrorCount::OTHER`]. Empty when the system has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ErrorCount>,
    /// The words of the first protocol error (what the server sent that is not a valid
    /// response, and why): under `client.on_error = "reconnect"` no stop message carries
    /// them, so the result does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_protocol_error: Option<String>,
    /// How the connections were used: not faults, but carried with them because they are
    /// counted in the same place (a driver's connection loop) and merged the same way.
    #[serde(skip_serializing_if = "Connections::is_empty")]
    pub connections: Connections,
}

/// How a request/response run's connections were used, apart from its faults: reopenings the
/// server asked for (`Connection: close`) and TLS handshakes, whose time is kept out of every
/// request's latency.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Connections {
    /// Connections the server closed after a response that announced it (`Connection:
    /// close`, or HTTP/1.0 without keep-alive); each was reopened at once, and the response
    /// that announced it counted as delivered.
    pub closed_by_server: u64,
    /// TLS handshakes completed (the first connections and every reopening).
    pub tls_handshakes: u64,
    /// Their total time, ns (TCP connect excluded).
    pub tls_handshake_ns_total: u64,
    /// The longest one, ns.
    pub tls_handshake_ns_max: u64,
    /// HTTP/2 request bodies that waited for the server's flow-control window (a body larger
    /// than the window the server gave it): sent as the server's WINDOW_UPDATEs came.
    pub flow_control_waits: u64,
    /// Their total time waiting for WINDOW_UPDATEs once their first bytes went, ns (part of
    /// those requests' latency).
    pub flow_control_wait_ns_total: u64,
    /// The longest, ns.
    pub flow_control_wait_ns_max: u64,
    /// Time connections spent down, summed over connections, ns (warm-up included): from a
    /// failure (or a close the server announced) until reopened, or until the run ended. A
    /// closed-loop run sends nothing on a connection that is down, so its success rate cannot
    /// show an outage; this does.
    pub down_ns_total: u64,
    /// Kafka in a cluster: partitions whose leader moved during the run and were followed to
    /// their new leader, per client that followed (a broker refused a Produce or a Fetch with
    /// `NOT_LEADER_OR_FOLLOWER` or a fenced epoch, or its connection ended).
    pub leaders_followed: u64,
    /// Kafka: Produce requests sent again to a partition's new leader — refused by the old
    /// one or not written whole to it (at acks all, as an idempotent producer: any not
    /// answered, the broker writing each once).
    pub produce_resent: u64,
}

impl Connections {
    /// Nothing to say.
    pub fn is_empty(&self) -> bool {
        *self == Connections::default()
    }

    /// Counts one TLS handshake that took `ns`.
    pub fn add_handshake(&mut self, ns: u64) {
        self.tls_handshakes += 1;
        self.tls_handshake_ns_total += ns;
        self.tls_handshake_ns_max = self.tls_handshake_ns_max.max(ns);
    }

    /// Counts a connection that was down from `since_ns` (0: it was not) to `now_ns`.
    pub fn add_down(&mut self, since_ns: u64, now_ns: u64) {
        if since_ns != 0 {
            self.down_ns_total += now_ns.saturating_sub(since_ns);
        }
    }

    /// Counts one request body that waited `ns` for the server's flow-control window.
    pub fn add_flow_control_wait(&mut self, ns: u64) {
        self.flow_control_waits += 1;
        self.flow_control_wait_ns_total += ns;
        self.flow_control_wait_ns_max = self.flow_control_wait_ns_max.max(ns);
    }
}

impl AddAssign for Connections {
    fn add_assign(&mut self, o: Connections) {
        self.closed_by_server += o.closed_by_server;
        self.tls_handshakes += o.tls_handshakes;
        self.tls_handshake_ns_total += o.tls_handshake_ns_total;
        self.tls_handshake_ns_max = self.tls_handshake_ns_max.max(o.tls_handshake_ns_max);
        self.flow_control_waits += o.flow_control_waits;
        self.flow_control_wait_ns_total += o.flow_control_wait_ns_total;
        self.flow_control_wait_ns_max = self
            .flow_control_wait_ns_max
            .max(o.flow_control_wait_ns_max);
        self.down_ns_total += o.down_ns_total;
        self.leaders_followed += o.leaders_followed;
        self.produce_resent += o.produce_resent;
    }
}

/// How many error replies carried one message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorCount {
    /// The message as the server sent it (its first 160 characters, [`ErrorCount::MAX_CHARS`], then
    /// `…` when it was longer).
    pub message: String,
    /// Replies that carried it.
    pub count: u64,
}

impl ErrorCount {
    /// Distinct messages kept: error texts that embed an id or a key would otherwise grow the
    /// list with every reply.
    pub const KINDS: usize = 16;
    /// Characters of a message kept (a longer one is cut there and marked with `…`).
    pub const MAX_CHARS: usize = 160;
    /// The message under which replies beyond [`ErrorCount::KINDS`] distinct messages count.
    pub const OTHER: &'static str = "(other messages)";

    /// Counts `n` replies with `message` in `list`, keeping it bounded. Allocates only for a
    /// message not seen before.
    pub fn add(list: &mut Vec<ErrorCount>, message: &str, n: u64) {
        let kept = truncate_chars(message, Self::MAX_CHARS);
        let cut = kept.len() < message.len();
        // A message kept cut reads `kept…`; cutting it again gives it back (merging is exact).
        let same = |m: &str| match cut {
            true => m.strip_suffix(CUT).is_some_and(|m| m == kept),
            false => m == kept,
        };
        if let Some(e) = list.iter_mut().find(|e| same(&e.message)) {
            e.count += n;
            return;
        }
        if list.len() >= Self::KINDS {
            return Self::add_other(list, n);
        }
        list.push(ErrorCount {
            message: if cut {
                format!("{kept}{CUT}")
            } else {
                kept.to_string()
            },
            count: n,
        });
    }

    /// Counts `n` replies under [`ErrorCount::OTHER`].
    fn add_other(list: &mut Vec<ErrorCount>, n: u64) {
        match list.iter_mut().find(|e| e.message == Self::OTHER) {
            Some(e) => e.count += n,
            None => list.push(ErrorCount {
                message: Self::OTHER.to_string(),
                count: n,
            }),
        }
    }

    /// Sorts most frequent first (ties by message), the catch-all last.
    pub fn sort(list: &mut [ErrorCount]) {
        list.sort_by(|a, b| {
            (a.message == Self::OTHER)
                .cmp(&(b.message == Self::OTHER))
                .then(b.count.cmp(&a.count))
                .then(a.message.cmp(&b.message))
        });
    }
}

/// What marks a message cut at [`ErrorCount::MAX_CHARS`].
const CUT: &str = "…";

/// At most `max` characters of `s` (a string from outside is quoted, not echoed whole).
pub fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl AddAssign for Faults {
    /// Adds another worker's faults.
    fn add_assign(&mut self, o: Faults) {
        self.timeouts += o.timeouts;
        self.disconnects += o.disconnects;
        self.connect_failures += o.connect_failures;
        self.protocol_errors += o.protocol_errors;
        self.server_errors += o.server_errors;
        self.unmatched_replies += o.unmatched_replies;
        self.handshake_failures += o.handshake_failures;
        self.receive_buffer_drops += o.receive_buffer_drops;
        self.connections += o.connections;
        if self.first_protocol_error.is_none() {
            self.first_protocol_error = o.first_protocol_error;
        }
        for e in o.errors {
            ErrorCount::add(&mut self.errors, &e.message, e.count);
        }
        ErrorCount::sort(&mut self.errors);
    }
}

impl Faults {
    /// Total events.
    pub fn total(&self) -> u64 {
        self.timeouts
            + self.disconnects
            + self.connect_failures
            + self.protocol_errors
            + self.server_errors
            + self.handshake_failures
    }
}

/// Accounting of every message. Invariants (checked by [`Counters::check`]):
/// `attempted = sent + skipped` and `sent = delivered + dropped + failed + in_flight_end`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// Messages the schedule called for.
    pub attempted: u64,
    /// Messages handed to the system under test.
    pub sent: u64,
    /// Messages the driver did not send (window full, `skip`).
    pub skipped: u64,
    /// Messages that completed.
    pub delivered: u64,
    /// Messages the system rejected or lost (queue full under `drop`).
    pub dropped: u64,
    /// Messages that failed (errors, timeouts).
    pub failed: u64,
    /// Messages still in flight when the drain timeout ended.
    pub in_flight_end: u64,
    /// Why the skipped ones were not sent; they add up to `skipped`. Absent when nothing was
    /// skipped (and in files written before it was counted).
    #[serde(default, skip_serializing_if = "SkippedBy::is_zero")]
    pub skipped_by: SkippedBy,
    /// Sent messages that first waited for room: a full window (`when_full = "block"`), the
    /// queue lab's full ring, a publisher's full socket or unacknowledged publishes. Their send
    /// lag is the system pushing back (`RunResult::send_lag_split`); the rest is the pacer's
    /// own lateness (its thread woke or ran late: the host). Absent when none waited.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_by_window: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a measured request was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipCause {
    /// Its connection's window was full (`skip`, `adapt`, unpaced `immediate` with `skip`).
    WindowFull,
    /// No connection was up to send it on (down, or being reopened).
    NoConnection,
    /// The run ended first: a `block` backlog given up at the span's end or at an early stop,
    /// or a push a stop abandoned.
    RunEnded,
}

/// Skipped requests by [`SkipCause`].
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct SkippedBy {
    /// The window was full (`skip`, `adapt`, unpaced `immediate` with `skip`).
    pub window_full: u64,
    /// No connection was up (down, or being reopened under `on_error = "reconnect"`).
    pub no_connection: u64,
    /// Still waiting when the run ended: a `block` backlog given up at the span's end or at
    /// an early stop (an error under `on_error = "stop"`, Ctrl-C), or a push a stop abandoned.
    pub run_ended: u64,
}

impl SkippedBy {
    /// Nothing counted.
    pub fn is_zero(&self) -> bool {
        *self == SkippedBy::default()
    }

    /// Their sum.
    pub fn total(&self) -> u64 {
        self.window_full + self.no_connection + self.run_ended
    }

    /// Counts one.
    #[inline]
    pub fn count(&mut self, why: SkipCause) {
        match why {
            SkipCause::WindowFull => self.window_full += 1,
            SkipCause::NoConnection => self.no_connection += 1,
            SkipCause::RunEnded => self.run_ended += 1,
        }
    }
}

impl AddAssign for SkippedBy {
    fn add_assign(&mut self, o: SkippedBy) {
        self.window_full += o.window_full;
        self.no_connection += o.no_connection;
        self.run_ended += o.run_ended;
    }
}

impl AddAssign for Counters {
    /// Adds another worker's (or client's) accounting.
    fn add_assign(&mut self, o: Counters) {
        self.attempted += o.attempted;
        self.sent += o.sent;
        self.skipped += o.skipped;
        self.delivered += o.delivered;
        self.dropped += o.dropped;
        self.failed += o.failed;
        self.in_flight_end += o.in_flight_end;
        self.skipped_by += o.skipped_by;
        self.held_by_window += o.held_by_window;
    }
}

impl AddAssign for SequenceErrors {
    /// Adds another receiver's sequence errors.
    fn add_assign(&mut self, o: SequenceErrors) {
        self.gaps += o.gaps;
        self.duplicates += o.duplicates;
        self.reordered += o.reordered;
    }
}

impl Counters {
    /// Checks both accounting invariants; the error says which one broke and by how much.
    pub fn check(&self) -> Result<(), String> {
        // Summed wide: counters read back from a file may be anything.
        let sum = |v: &[u64]| v.iter().map(|&x| u128::from(x)).sum::<u128>();
        if u128::from(self.attempted) != sum(&[self.sent, self.skipped]) {
            return Err(format!(
                "attempted {} != sent {} + skipped {}",
                self.attempted, self.sent, self.skipped
            ));
        }
        let accounted = sum(&[
            self.delivered,
            self.dropped,
            self.failed,
            self.in_flight_end,
        ]);
        if u128::from(self.sent) != accounted {
            return Err(format!(
                "sent {} != delivered {} + dropped {} + failed {} + in_flight_end {}",
                self.sent, self.delivered, self.dropped, self.failed, self.in_flight_end
            ));
        }
        // Files written before the causes were counted have none.
        let b = &self.skipped_by;
        let causes = sum(&[b.window_full, b.no_connection, b.run_ended]);
        if causes != 0 && causes != u128::from(self.skipped) {
            return Err(format!(
                "skipped {} != window full {} + no connection {} + run ended {}",
                self.skipped, b.window_full, b.no_connection, b.run_ended
            ));
        }
        Ok(())
    }

    /// Whether this run's send lag tail is the driver's own lateness rather than the system
    /// pushing back: fewer than 1 % of its sends waited for a full window, so the slowest 1 %
    /// of sends (send lag p99) holds sends that waited for nothing but the driver.
    pub fn lag_is_the_drivers(&self) -> bool {
        u128::from(self.held_by_window) * 100 < u128::from(self.sent)
    }

    /// delivered / attempted (1.0 when nothing was attempted; NaN for counters that break the
    /// accounting, which have no meaningful share).
    pub fn success_rate(&self) -> f64 {
        if self.check().is_err() {
            return f64::NAN;
        }
        ratio(self.delivered, self.attempted)
    }

    /// (dropped + skipped) / attempted: the share the system or driver shed (NaN as above).
    pub fn drop_rate(&self) -> f64 {
        if self.check().is_err() {
            f64::NAN
        } else if self.attempted == 0 {
            0.0
        } else {
            (self.dropped + self.skipped) as f64 / self.attempted as f64
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

/// Sequence errors seen by the receiver (each one is a bug in the system under test).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct SequenceErrors {
    /// Sequence numbers skipped.
    pub gaps: u64,
    /// Sequence numbers seen twice.
    pub duplicates: u64,
    /// Sequence numbers that arrived after a later one.
    pub reordered: u64,
}

/// Deliveries that completed before their intended send time ([`RunResult::early`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct Early {
    /// How many.
    pub count: u64,
    /// By how much the earliest of them was early, ns.
    pub most_ns: u64,
}

impl Early {
    /// None was early.
    pub fn is_none(&self) -> bool {
        self.count == 0
    }
    /// Counts one delivery `by_ns` early.
    #[inline]
    pub fn add(&mut self, by_ns: u64) {
        self.count += 1;
        self.most_ns = self.most_ns.max(by_ns);
    }
}

impl AddAssign for Early {
    /// Adds another receiver's early deliveries.
    fn add_assign(&mut self, o: Early) {
        self.count += o.count;
        self.most_ns = self.most_ns.max(o.most_ns);
    }
}

impl SequenceErrors {
    /// Total of all kinds.
    pub fn total(&self) -> u64 {
        self.gaps + self.duplicates + self.reordered
    }
}

/// One operation class (the queue has one: `item`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassResult {
    /// Class name.
    pub name: String,
    /// Latency of this class.
    pub latency: Percentiles,
    /// Service time of this class.
    pub service: Percentiles,
    /// Encoded latency histogram of this class.
    pub latency_histogram: String,
}

/// The send lag of a run, split by whose it is (see `RunResult::send_lag_split`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendLagSplit {
    /// Sends that waited for nothing but the driver's pacer: the host's lateness, or msgbench's.
    pub pacer: Percentiles,
    /// Sends that first waited for room in a full window or queue: the system's.
    pub held: Percentiles,
}

impl SendLagSplit {
    /// The split of `total`, of which `held` is the held sends' part. A `held` that is not a
    /// part of `total` (a damaged shard file) leaves the pacer's the whole.
    pub fn of(total: &hdrhistogram::Histogram<u64>, held: &hdrhistogram::Histogram<u64>) -> Self {
        let mut pacer = total.clone();
        if pacer.subtract(held).is_err() {
            pacer = total.clone();
        }
        SendLagSplit {
            pacer: Percentiles::of(&pacer),
            held: Percentiles::of(held),
        }
    }
}

/// Responses that were streams of messages (`[http.requests.NAME] stream = "sse"`), over the
/// measured window's requests: per stream, how long its first message took from the request's
/// *intended* send (as latency: a server that stalls makes the streams behind it wait, and that
/// wait counts), every gap between two of its messages as they arrived, and its time per message
/// (from its first message to its last, over the messages after the first). The request's own
/// latency (`latency`) runs to the stream's end. A message's arrival is the read that brought
/// it: messages in one read share a time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StreamedResponses {
    /// Streams completed (their requests delivered).
    pub streams: u64,
    /// Messages they carried (events with data; the end sentinel, `[DONE]`, not counted).
    pub messages: u64,
    /// Bytes of those messages' data.
    pub bytes: u64,
    /// Completed streams without a message.
    pub empty: u64,
    /// Streams cut short: their connection failed or timed out before the stream ended (the
    /// request failed).
    pub cut: u64,
    /// Messages those had delivered before they were cut.
    pub cut_messages: u64,
    /// Time to the first message, from the request's intended send.
    pub first_message: Percentiles,
    /// Every gap between two consecutive messages of a stream.
    pub gap: Percentiles,
    /// Per stream of two or more messages: (last − first message) / (messages − 1). Its
    /// inverse is the stream's messages (tokens) per second.
    pub per_message: Percentiles,
    /// `first_message`'s histogram, encoded as the run's (for `merge`).
    pub first_message_histogram: String,
    /// `gap`'s histogram, encoded.
    pub gap_histogram: String,
    /// `per_message`'s histogram, encoded.
    pub per_message_histogram: String,
}

/// Full histograms of the run, encoded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Histograms {
    /// Latency, all classes.
    pub latency: String,
    /// Service time, all classes.
    pub service: String,
    /// Send lag.
    pub send_lag: String,
    /// Send lag of the sends that first waited for room in a full window or queue (a part of
    /// `send_lag`; empty in files written before it).
    #[serde(default)]
    pub send_lag_held: String,
    /// Waits of the requests that got no answer (empty in files written before it).
    #[serde(default)]
    pub unanswered: String,
}

/// CPU time and scheduling of one thread or process over the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuTimes {
    /// User-mode CPU seconds.
    pub user_s: f64,
    /// Kernel-mode CPU seconds.
    pub sys_s: f64,
    /// Voluntary context switches (the thread slept).
    pub ctx_switches_voluntary: u64,
    /// Involuntary context switches (the thread was preempted).
    pub ctx_switches_involuntary: u64,
    /// CPU migrations, where the OS exposes them (`/proc/thread-self/sched`).
    pub migrations: Option<u64>,
    /// Seconds the thread was ready to run but waited for a CPU (the run delay of
    /// `/proc/thread-self/schedstat`): what the host took from msgbench, where the kernel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_s: Option<f64>,
}

impl CpuTimes {
    /// user + sys.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
}

/// One thread's CPU use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadCpu {
    /// Role: `producer`, `consumer`, …
    pub role: String,
    /// CPU it was pinned to.
    pub pinned_cpu: Option<usize>,
    /// Its CPU use.
    pub cpu: CpuTimes,
}

/// CPU use of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuUsage {
    /// The whole msgbench process over the run (includes warm-up and drain).
    pub process: CpuTimes,
    /// Each worker thread over the measured window.
    pub threads: Vec<ThreadCpu>,
    /// CPU seconds of the driver's worker threads (the measured window).
    pub driver_cpu_s: f64,
    /// CPU seconds of the system under test, when it is measured apart.
    pub sut_cpu_s: Option<f64>,
    /// Delivered messages per CPU-second of all worker threads.
    pub delivered_per_cpu_s: f64,
}

/// One second of the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IntervalSample {
    /// Start of the interval, seconds since the measured window began.
    pub start_s: f64,
    /// Length, seconds.
    pub length_s: f64,
    /// Messages sent in it.
    pub sent: u64,
    /// Messages delivered in it.
    pub delivered: u64,
    /// Messages the system dropped in it.
    pub dropped: u64,
    /// Messages the driver never sent in it (`counters.skipped`: a full window under `skip`,
    /// no connection, the run's end). Absent in older files, whose `dropped` counted them too.
    #[serde(default)]
    pub skipped: u64,
    /// Median latency of messages completed in it.
    pub latency_p50_ns: u64,
    /// p99 latency of messages completed in it.
    pub latency_p99_ns: u64,
    /// Max latency of messages completed in it.
    pub latency_max_ns: u64,
    /// Sent − delivered − dropped, cumulative, at its end (messages waiting in the system).
    pub backlog: i64,
}

/// One sweep parameter of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Axis: the dotted path of the swept field, e.g. `queue.capacity`.
    pub axis: String,
    /// The value of this run, rendered compactly (`64`, `2ms`, `producer=0 consumer=1`).
    pub value: String,
}

/// The longest run id a result may carry: the id is a file name (`<id>.latencies.csv` must
/// stay under the usual 255-byte limit; ids msgbench makes of two long swept values reach
/// ~245).
pub const MAX_RUN_ID_LEN: usize = 240;

/// Why `id` cannot be a run's id, or `None` when it can. A run id becomes a file name under
/// `runs/` (`msgbench merge` writes `runs/<id>.json` from a shard's file), so one read from a
/// file is untrusted: only the characters msgbench itself puts in ids (ASCII letters, digits,
/// `-_.=`), never a leading dot, never a path separator — so no id can name a file outside
/// `runs/`.
pub fn run_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("is empty".into());
    }
    if id.len() > MAX_RUN_ID_LEN {
        return Some(format!(
            "is {} bytes long (at most {MAX_RUN_ID_LEN})",
            id.len()
        ));
    }
    if id.starts_with('.') {
        return Some("starts with a dot".into());
    }
    id.chars()
        .find(|c| !crate::files::is_name_char(*c))
        .map(|c| format!("holds {c:?} (a run id is ASCII letters, digits and -_.= only)"))
}

/// The largest count a result read from a file may hold: 2^50 (10^15 messages, a billion a
/// second for twelve days). More is no run's, and sums of up to 2^13 such counts cannot wrap.
pub const MAX_COUNT: u64 = 1 << 50;
/// The longest measured window a result read from a file may have, seconds (a year).
pub const MAX_DURATION_S: f64 = 366.0 * 86_400.0;

impl RunResult {
    /// Why this result, read from a file, cannot be one msgbench wrote, or `None`: its
    /// counters break the accounting or exceed [`MAX_COUNT`], its window or rate is not a
    /// finite, plausible number, its latency histogram does not hold one latency per delivered
    /// message, or its percentiles are not in order. `merge` refuses such a shard: every sum
    /// it makes of them is then exact, and no tampered bucket becomes a merged p99.
    pub fn implausible(&self) -> Option<String> {
        let c = &self.counters;
        if let Err(e) = c.check() {
            return Some(format!("its counters break the accounting ({e})"));
        }
        if c.held_by_window > c.sent {
            return Some(format!(
                "held_by_window {} is more than the {} sent",
                c.held_by_window, c.sent
            ));
        }
        let (q, f) = (&self.sequence, &self.faults);
        let counts = [
            ("attempted", c.attempted),
            ("gaps", q.gaps),
            ("duplicates", q.duplicates),
            ("reordered", q.reordered),
            ("early", self.early.count),
            ("timeouts", f.timeouts),
            ("disconnects", f.disconnects),
            ("connect_failures", f.connect_failures),
            ("protocol_errors", f.protocol_errors),
            ("server_errors", f.server_errors),
            ("unmatched_replies", f.unmatched_replies),
            ("handshake_failures", f.handshake_failures),
            ("receive_buffer_drops", f.receive_buffer_drops),
        ];
        let errors = f.errors.iter().map(|e| ("errors", e.count));
        if let Some((name, n)) = counts
            .into_iter()
            .chain(errors)
            .find(|(_, n)| *n > MAX_COUNT)
        {
            return Some(format!(
                "{name} {n} is more than any run counts (at most {MAX_COUNT})"
            ));
        }
        if !(self.duration_s.is_finite() && (0.0..=MAX_DURATION_S).contains(&self.duration_s)) {
            return Some(format!(
                "duration_s {} is not a measured window (0 to {MAX_DURATION_S} s)",
                self.duration_s
            ));
        }
        if let Some(t) = self
            .target_per_sec
            .filter(|t| !(t.is_finite() && *t >= 0.0))
        {
            return Some(format!("target_per_sec {t} is not a rate"));
        }
        self.latency_implausible()
    }

    /// The latency part of [`RunResult::implausible`].
    fn latency_implausible(&self) -> Option<String> {
        let total = if self.histograms.latency.is_empty() {
            0
        } else {
            match crate::histogram::decode(&self.histograms.latency) {
                Ok(h) => h.len(),
                Err(e) => return Some(format!("its latency histogram does not decode ({e})")),
            }
        };
        if total != self.counters.delivered || self.latency.count != self.counters.delivered {
            return Some(format!(
                "its latency histogram holds {total} latencies and says {}, for {} delivered",
                self.latency.count, self.counters.delivered
            ));
        }
        let l = &self.latency;
        let order = [
            l.min_ns, l.p50_ns, l.p90_ns, l.p95_ns, l.p99_ns, l.p999_ns, l.p9999_ns, l.max_ns,
        ];
        if total > 0 && order.windows(2).any(|w| w[0] > w[1]) {
            return Some(format!(
                "its latency percentiles are not in order ({order:?})"
            ));
        }
        None
    }

    /// The value of a sweep axis in this run.
    pub fn param(&self, axis: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|p| p.axis == axis)
            .map(|p| p.value.as_str())
    }

    /// A lower bound on the largest latency above the answered ones' max: the longest wait of a
    /// request that got no answer, when it is longer. `None` when `latency.max_ns` is the max.
    pub fn max_latency_at_least(&self) -> Option<u64> {
        (self.unanswered.count > 0 && self.unanswered.max_ns > self.latency.max_ns)
            .then_some(self.unanswered.max_ns)
    }

    /// Latency percentiles over every measured request, those that got no answer counted at
    /// their wait: each a lower bound on the true percentile (an unanswered request's latency is
    /// at least its wait), where `latency` describes the answered ones only. `None` when every
    /// request was answered (or a histogram does not load).
    pub fn latency_at_least(&self) -> Option<Percentiles> {
        if self.unanswered.count == 0 {
            return None;
        }
        let mut all = crate::histogram::decode(&self.histograms.latency).ok()?;
        all.add(crate::histogram::decode(&self.histograms.unanswered).ok()?)
            .ok()?;
        Some(Percentiles::of(&all))
    }

    /// Delivered messages per second of the measured window.
    pub fn delivered_per_sec(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.counters.delivered as f64 / self.duration_s
        } else {
            0.0
        }
    }
}

/// A shard's identity and start, as its result records them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardInfo {
    /// This shard, from 0.
    pub index: u32,
    /// How many shards share the run.
    pub count: u32,
    /// Connections this shard opened (global indices `index`, `index + count`, …).
    pub connections: u64,
    /// Connections of the whole run.
    pub total_connections: u64,
    /// The host it ran on.
    pub host: String,
    /// The agreed start of this run's schedule (`--start-at` and the run's slot), Unix ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_start_unix_ms: Option<u64>,
    /// How late the schedule started after the agreed start, ms (0: on time).
    pub start_late_ms: u64,
    /// What the host's clock discipline said of its wall clock at start.
    pub clock: WallClockStatus,
}

/// The wall clock's state as the kernel knows it (`adjtimex`): shards' intervals are aligned
/// on wall-clock time, so two hosts' offset shifts one's seconds against the other's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WallClockStatus {
    /// True when an NTP/PTP daemon disciplines the clock (kernel status not `UNSYNC`).
    pub synchronized: bool,
    /// Estimated error of the wall clock, µs (`adjtimex` esterror; 0 when unknown).
    pub estimated_error_us: u64,
    /// Maximum error of the wall clock, µs (`adjtimex` maxerror).
    pub max_error_us: u64,
    /// The offset the clock discipline last measured against its reference, µs (`adjtimex`
    /// offset; 0 without a daemon).
    #[serde(default)]
    pub offset_us: i64,
}

/// One shard's figures in a merged run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardRow {
    /// The shard's identity and start.
    pub shard: ShardInfo,
    /// Its counters.
    pub counters: Counters,
    /// Its measured span, seconds.
    pub duration_s: f64,
    /// Its latency.
    pub latency: crate::histogram::Percentiles,
    /// Its send lag.
    pub send_lag: crate::histogram::Percentiles,
    /// Its driver threads' CPU over the span, seconds.
    pub driver_cpu_s: f64,
    /// Wall clock at which its measured span began, Unix ms.
    pub started_unix_ms: u64,
    /// Its warnings, as sentences.
    pub warnings: Vec<String>,
}

/// Every fairness figure of a run: over its connections, or over each group of two or more
/// stream clients that stayed connected for the whole run (one that left early or reconnected
/// got less by its own history, not by the server's choice).
pub fn fairness_of(r: &RunResult) -> Vec<Fairness> {
    if !r.connections.is_empty() {
        return crate::fairness::of_connections(&r.connections)
            .into_iter()
            .collect();
    }
    let mut groups: Vec<&str> = Vec::new();
    for c in &r.streams {
        if !groups.contains(&c.group.as_str()) {
            groups.push(&c.group);
        }
    }
    groups
        .into_iter()
        .filter_map(|g| {
            let served: Vec<crate::fairness::Served> = (r.streams.iter())
                .filter(|c| c.group == g && stayed(c))
                .map(|c| crate::fairness::Served {
                    name: c.name.clone(),
                    delivered: c.counters.delivered,
                    p99_ns: c.latency.p99_ns,
                })
                .collect();
            crate::fairness::fairness(&format!("group {g}"), &served)
        })
        .collect()
}

/// A stream client connected from the start to the end: not a reconnection (`fast-0.1`), not
/// closed early.
fn stayed(c: &StreamClient) -> bool {
    c.closed.is_none() && !c.name[c.group.len().min(c.name.len())..].contains('.')
}

/// Upper median (the larger middle value of an even count): a fair half never reads as starved.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_that_could_name_another_file_are_refused() {
        for ok in ["000", "003-capacity=8-every=1ms-r2", "001-ratio=0.5"] {
            assert_eq!(run_id_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "../x",
            "/abs/x",
            "a/../../x",
            "a\\b",
            "x\0",
        ] {
            assert!(run_id_problem(bad).is_some(), "{bad}");
        }
        assert!(run_id_problem(&"x".repeat(MAX_RUN_ID_LEN + 1)).is_some());
    }

    #[test]
    fn error_messages_stay_bounded_and_lose_no_count() {
        let mut list = Vec::new();
        for i in 0..100u64 {
            ErrorCount::add(&mut list, &format!("ERR key {i} is busy"), 1);
            ErrorCount::add(&mut list, "ERR wrong type", 2);
        }
        assert!(list.len() <= ErrorCount::KINDS + 1, "{}", list.len());
        assert_eq!(list.iter().map(|e| e.count).sum::<u64>(), 300);
        ErrorCount::sort(&mut list);
        assert_eq!(list[0].message, "ERR wrong type");
        assert_eq!(list.last().unwrap().message, ErrorCount::OTHER);
        let long = "x".repeat(1000);
        let mut one = Vec::new();
        ErrorCount::add(&mut one, &long, 1);
        ErrorCount::add(&mut one, &format!("{long}y"), 1); // the same once cut
        let kept = "x".repeat(ErrorCount::MAX_CHARS);
        assert_eq!(
            one,
            [ErrorCount {
                message: format!("{kept}…"),
                count: 2
            }]
        );
        // Merging a cut message again (another worker's faults) keeps it as it is.
        let mut again = one.clone();
        ErrorCount::add(&mut again, &one[0].message, 3);
        assert_eq!(
            again,
            [ErrorCount {
                message: format!("{kept}…"),
                count: 5
            }]
        );
        // A message of exactly MAX_CHARS characters is whole: no mark.
        let mut whole = Vec::new();
        ErrorCount::add(&mut whole, &kept, 1);
        assert_eq!(whole[0].message, kept);
        let mut merged = Faults::default();
        merged += Faults {
            server_errors: 300,
            errors: list,
            ..Default::default()
        };
        assert_eq!(merged.errors.iter().map(|e| e.count).sum::<u64>(), 300);
    }
}
