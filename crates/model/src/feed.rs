//! The `[ticks.feed]` section: how to read someone else's WebSocket feed (an exchange's trades,
//! a market-data gateway) with the tick clients — what to send after the handshake, where each
//! message's sequence number and timestamp are (JSON field paths or binary offsets), which
//! messages count, and what clock the timestamp is on ([`FeedSpec`] → [`FeedConfig`]).
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};

/// The `[ticks.feed]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FeedSpec {
    /// `json` (text messages) or `binary`.
    pub format: FeedFormat,
    /// Text messages sent, in order, right after the handshake (a subscription).
    pub subscribe: Vec<String>,
    /// JSON: the dotted path of the sequence number (`"t"`, `"data.u"`), or `"@id"` for a
    /// Server-Sent Event's `id:`; binary: see `sequence_at`. Omitted: gaps are not checked,
    /// and the report says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<String>,
    /// JSON: the dotted path of the timestamp latency counts from (`"E"`, `"data.T"`).
    pub timestamp: String,
    /// Binary: where the sequence number is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_at: Option<BinaryField>,
    /// Binary: where the timestamp is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp_at: Option<BinaryField>,
    /// The timestamp's clock and unit: `monotonic-ns` (a server on this host reading
    /// CLOCK_MONOTONIC), or wall clock: `unix-s`, `unix-ms`, `unix-us`, `unix-ns`.
    pub clock: FeedClock,
    /// What the timestamp is: `event` (when the event happened: an exchange's trade time) or
    /// `send` (when the server sent the message).
    pub stamp: FeedStamp,
    /// JSON: only messages whose field at `filter.path` equals `filter.equals` count (others,
    /// such as subscription answers, are skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<FeedFilter>,
}

impl Default for FeedSpec {
    fn default() -> Self {
        FeedSpec {
            format: FeedFormat::Json,
            subscribe: Vec::new(),
            sequence: None,
            timestamp: String::new(),
            sequence_at: None,
            timestamp_at: None,
            clock: FeedClock::UnixMs,
            stamp: FeedStamp::Event,
            filter: None,
        }
    }
}

/// Text or binary messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FeedFormat {
    /// Text messages of JSON.
    Json,
    /// Binary messages with fields at fixed offsets.
    Binary,
    /// Protobuf messages of a gRPC server stream (`[ticks.grpc]`): fields by their names in
    /// the `.proto` (`"seq"`, `"header.sent_at"`).
    Protobuf,
    /// The message is its timestamp, as text (a number in `clock`'s unit): an event stream's
    /// data (`data: 1733570000123`, its sequence number its `id:` with `sequence = "@id"`) or a
    /// UDP datagram.
    Text,
}

impl FeedFormat {
    /// Its name in a scenario.
    pub fn name(self) -> &'static str {
        match self {
            FeedFormat::Json => "json",
            FeedFormat::Binary => "binary",
            FeedFormat::Protobuf => "protobuf",
            FeedFormat::Text => "text",
        }
    }
}

/// A timestamp's clock and unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FeedClock {
    /// CLOCK_MONOTONIC ns of this host.
    MonotonicNs,
    /// Unix seconds (may be fractional in JSON).
    UnixS,
    /// Unix milliseconds.
    UnixMs,
    /// Unix microseconds.
    UnixUs,
    /// Unix nanoseconds.
    UnixNs,
}

impl FeedClock {
    /// Nanoseconds per unit.
    pub fn ns_per_unit(self) -> f64 {
        match self {
            FeedClock::MonotonicNs | FeedClock::UnixNs => 1.0,
            FeedClock::UnixUs => 1e3,
            FeedClock::UnixMs => 1e6,
            FeedClock::UnixS => 1e9,
        }
    }

    /// The wall clock (its latency includes the offset between the hosts' clocks).
    pub fn is_wall(self) -> bool {
        self != FeedClock::MonotonicNs
    }

    /// Its name in a scenario.
    pub fn name(self) -> &'static str {
        match self {
            FeedClock::MonotonicNs => "monotonic-ns",
            FeedClock::UnixS => "unix-s",
            FeedClock::UnixMs => "unix-ms",
            FeedClock::UnixUs => "unix-us",
            FeedClock::UnixNs => "unix-ns",
        }
    }
}

/// What a timestamp marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FeedStamp {
    /// When the event happened.
    Event,
    /// When the server sent the message.
    Send,
}

/// A field of a binary message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BinaryField {
    /// Byte offset from the message's start.
    pub offset: usize,
    /// `u32le`, `u32be`, `u64le`, `u64be`.
    #[serde(rename = "type")]
    pub kind: BinaryType,
}

/// An unsigned integer's width and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BinaryType {
    /// 4 bytes, little-endian.
    U32le,
    /// 4 bytes, big-endian.
    U32be,
    /// 8 bytes, little-endian.
    U64le,
    /// 8 bytes, big-endian.
    U64be,
}

impl BinaryType {
    /// Its width, bytes.
    pub fn width(self) -> usize {
        match self {
            BinaryType::U32le | BinaryType::U32be => 4,
            BinaryType::U64le | BinaryType::U64be => 8,
        }
    }
}

/// Only messages whose field equals a value count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedFilter {
    /// Dotted path of the field.
    pub path: String,
    /// The value it must have (a string, or a number written as text).
    pub equals: String,
}

/// Where a field is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldAt {
    /// A JSON path, split at its dots.
    Json(Vec<String>),
    /// A binary field.
    Binary(BinaryField),
    /// A field of a protobuf message.
    Proto(crate::grpc::ProtoField),
    /// A Server-Sent Event's `id:` (`sequence = "@id"`).
    EventId,
    /// The whole message (a `text` feed's timestamp).
    Whole,
}

/// How `[ticks.feed] sequence` names a Server-Sent Event's id.
pub const EVENT_ID: &str = "@id";

/// Validated `[ticks.feed]`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedConfig {
    /// Text or binary.
    pub format: FeedFormat,
    /// Sent after the handshake.
    pub subscribe: Vec<String>,
    /// The sequence number (`None`: not checked).
    pub sequence: Option<FieldAt>,
    /// The timestamp.
    pub timestamp: FieldAt,
    /// Its clock.
    pub clock: FeedClock,
    /// What it marks.
    pub stamp: FeedStamp,
    /// JSON: path and value of the filter.
    pub filter: Option<(Vec<String>, String)>,
}

/// A dotted path's parts; `None` when a part is empty.
fn path(text: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = text.split('.').map(str::to_string).collect();
    (!text.is_empty() && parts.iter().all(|p| !p.is_empty())).then_some(parts)
}

impl FeedSpec {
    /// The validated feed; `streamed` is the message a gRPC stream carries (`[ticks.grpc]`),
    /// whose fields a `protobuf` feed's paths name.
    /// `sse`: the feed is an event stream (whose `id:` may be the sequence).
    pub(crate) fn validate(
        &self,
        streamed: Option<&prost_reflect::MessageDescriptor>,
        sse: bool,
        invalid: &Invalid,
    ) -> Result<FeedConfig, ScenarioError> {
        if sse && !matches!(self.format, FeedFormat::Json | FeedFormat::Text) {
            return Err(invalid(
                "ticks.feed.format",
                format!("is {:?} for an event stream", self.format.name()),
                "Server-Sent Events carry text: format = \"json\", with the fields' paths in each event's data (or \"text\": the data is the timestamp)",
            ));
        }
        if sse && !self.subscribe.is_empty() {
            return Err(invalid(
                "ticks.feed.subscribe",
                "is given for an event stream".into(),
                "an event stream takes no messages: put what selects the feed in the URL or in [ticks.sse] headers",
            ));
        }
        match (self.format, streamed) {
            (FeedFormat::Protobuf, None) => {
                return Err(invalid(
                    "ticks.feed.format",
                    "is \"protobuf\" without [ticks.grpc]".into(),
                    "protobuf feeds are gRPC server streams: add [ticks.grpc] with proto and call",
                ))
            }
            (FeedFormat::Json | FeedFormat::Binary | FeedFormat::Text, Some(_)) => {
                return Err(invalid(
                    "ticks.feed.format",
                    format!("is {:?} for a gRPC stream", self.format.name()),
                    "a gRPC stream's messages are protobuf: format = \"protobuf\"",
                ))
            }
            _ => {}
        }
        let (sequence, timestamp) = match (self.format, streamed) {
            (FeedFormat::Protobuf, Some(message)) => self.proto_fields(message, invalid)?,
            (FeedFormat::Json, _) => self.json_fields(sse, invalid)?,
            (FeedFormat::Text, _) => self.text_fields(sse, invalid)?,
            _ => self.binary_fields(invalid)?,
        };
        let filter = match &self.filter {
            Some(f) => Some((
                json_path("ticks.feed.filter.path", &f.path, invalid)?,
                f.equals.clone(),
            )),
            None => None,
        };
        if let Some(bad) = self.subscribe.iter().find(|m| m.len() > 64 * 1024) {
            return Err(invalid(
                "ticks.feed.subscribe",
                format!("has a message of {} bytes", bad.len()),
                "keep each subscribe message under 64 KiB",
            ));
        }
        Ok(FeedConfig {
            format: self.format,
            subscribe: self.subscribe.clone(),
            sequence,
            timestamp,
            clock: self.clock,
            stamp: self.stamp,
            filter,
        })
    }
}

impl FeedSpec {
    /// A protobuf feed's sequence and timestamp: fields of the streamed `message`.
    fn proto_fields(
        &self,
        message: &prost_reflect::MessageDescriptor,
        invalid: &Invalid,
    ) -> Result<(Option<FieldAt>, FieldAt), ScenarioError> {
        if self.sequence_at.is_some() || self.timestamp_at.is_some() || self.filter.is_some() {
            return Err(invalid(
                "ticks.feed.timestamp_at",
                "(or a filter) is given for a protobuf feed".into(),
                "protobuf fields are named: sequence = \"seq\", timestamp = \"sent_ns\" (filters are for JSON feeds)",
            ));
        }
        let at = |field: &str, text: &str, role| {
            crate::grpc::field_path(message, text, role)
                .map(FieldAt::Proto)
                .map_err(|e| invalid(field, e, "name a field of the streamed message"))
        };
        let sequence = match &self.sequence {
            Some(s) => Some(at("ticks.feed.sequence", s, crate::grpc::Role::Sequence)?),
            None => None,
        };
        let timestamp = at(
            "ticks.feed.timestamp",
            &self.timestamp,
            crate::grpc::Role::Timestamp,
        )?;
        if let FieldAt::Proto(f) = &timestamp {
            if f.kind == crate::grpc::ProtoKind::Timestamp && self.clock != FeedClock::UnixNs {
                return Err(invalid(
                    "ticks.feed.clock",
                    format!(
                        "is {:?}, but {} is a google.protobuf.Timestamp",
                        self.clock.name(),
                        f.path
                    ),
                    "a Timestamp is read as Unix nanoseconds: clock = \"unix-ns\"",
                ));
            }
        }
        Ok((sequence, timestamp))
    }

    /// A JSON feed's sequence and timestamp: dotted paths.
    fn json_fields(
        &self,
        sse: bool,
        invalid: &Invalid,
    ) -> Result<(Option<FieldAt>, FieldAt), ScenarioError> {
        if self.sequence_at.is_some() || self.timestamp_at.is_some() {
            return Err(invalid(
                "ticks.feed.timestamp_at",
                "is given for a JSON feed".into(),
                "JSON fields are paths: sequence = \"t\", timestamp = \"E\"",
            ));
        }
        let sequence = match &self.sequence {
            Some(s) if s == EVENT_ID && sse => Some(FieldAt::EventId),
            Some(s) if s == EVENT_ID => {
                return Err(invalid(
                    "ticks.feed.sequence",
                    format!("is {EVENT_ID:?} for a feed that is no event stream"),
                    "\"@id\" is a Server-Sent Event's id: name the sequence's path in the message, e.g. sequence = \"t\"",
                ))
            }
            Some(s) => Some(FieldAt::Json(json_path("ticks.feed.sequence", s, invalid)?)),
            None => None,
        };
        let timestamp = FieldAt::Json(json_path("ticks.feed.timestamp", &self.timestamp, invalid)?);
        Ok((sequence, timestamp))
    }

    /// A text feed's: the message is the timestamp; the sequence, an event's id or none.
    fn text_fields(
        &self,
        sse: bool,
        invalid: &Invalid,
    ) -> Result<(Option<FieldAt>, FieldAt), ScenarioError> {
        let given = !self.timestamp.is_empty()
            || self.sequence_at.is_some()
            || self.timestamp_at.is_some()
            || self.filter.is_some();
        if given {
            return Err(invalid(
                "ticks.feed.timestamp",
                "(or a field's place, or a filter) is given for a text feed".into(),
                "a text feed's message is its timestamp: leave timestamp, *_at and filter out",
            ));
        }
        let sequence = match self.sequence.as_deref() {
            None => None,
            Some(EVENT_ID) if sse => Some(FieldAt::EventId),
            Some(other) => {
                return Err(invalid(
                    "ticks.feed.sequence",
                    format!("is {other:?} for a text feed"),
                    "a text feed's sequence can only be an event stream's id: sequence = \"@id\" (or none)",
                ))
            }
        };
        Ok((sequence, FieldAt::Whole))
    }

    /// A binary feed's sequence and timestamp: offsets and types.
    fn binary_fields(
        &self,
        invalid: &Invalid,
    ) -> Result<(Option<FieldAt>, FieldAt), ScenarioError> {
        if self.sequence.is_some() || !self.timestamp.is_empty() || self.filter.is_some() {
            return Err(invalid(
                "ticks.feed.timestamp",
                "is a JSON path (or a filter is set) for a binary feed".into(),
                "binary fields are offsets: timestamp_at = { offset = 8, type = \"u64le\" }",
            ));
        }
        let Some(timestamp) = self.timestamp_at else {
            return Err(invalid(
                "ticks.feed.timestamp_at",
                "is missing".into(),
                "say where the timestamp is: timestamp_at = { offset = 8, type = \"u64le\" }",
            ));
        };
        Ok((
            self.sequence_at.map(FieldAt::Binary),
            FieldAt::Binary(timestamp),
        ))
    }
}

/// `text` as a dotted field path of `field`, or why not.
fn json_path(field: &str, text: &str, invalid: &Invalid) -> Result<Vec<String>, ScenarioError> {
    path(text).ok_or_else(|| {
        invalid(
            field,
            format!("is {text:?}"),
            "give a dotted field path, e.g. \"E\" or \"data.E\"",
        )
    })
}

impl FeedConfig {
    /// A field's place in words: `E` or `@8:u64le`.
    pub fn field_name(&self, at: &FieldAt) -> String {
        match at {
            FieldAt::Json(path) => path.join("."),
            FieldAt::Proto(field) => field.path.clone(),
            FieldAt::EventId => EVENT_ID.into(),
            FieldAt::Whole => "(the message)".into(),
            FieldAt::Binary(b) => format!(
                "@{}:{}",
                b.offset,
                match b.kind {
                    BinaryType::U32le => "u32le",
                    BinaryType::U32be => "u32be",
                    BinaryType::U64le => "u64le",
                    BinaryType::U64be => "u64be",
                }
            ),
        }
    }

    /// What the reader of a run's report must know about its latency, one sentence each.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let what = match self.stamp {
            FeedStamp::Event => "the event's time (queueing at the source counts)",
            FeedStamp::Send => "the server's send time",
        };
        let resolution = match self.clock {
            FeedClock::UnixS => Some("1 s"),
            FeedClock::UnixMs => Some("1 ms"),
            FeedClock::UnixUs => Some("1 µs"),
            _ => None,
        };
        let mut sentence = format!(
            "feed latency counts from each message's timestamp ({}, {what})",
            self.clock.name()
        );
        if let Some(r) = resolution {
            sentence.push_str(&format!(
                "; stamps of {r} resolution make every latency uncertain by up to {r}, which bounds what a p50 can say"
            ));
        }
        notes.push(sentence);
        if self.clock.is_wall() {
            notes.push("feed timestamps are wall-clock: across hosts, every latency includes the offset between their clocks (check NTP/PTP)".into());
        }
        if self.sequence.is_none() {
            notes.push(
                "feed has no sequence field: gaps, duplicates and reordering were not checked"
                    .into(),
            );
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    const FEED: &str =
        "system = \"ticks\"\n[ticks]\naddress = \"ws://127.0.0.1:9443/\"\n[ticks.feed]\n";

    #[test]
    fn a_json_feed_has_paths_and_a_binary_one_offsets() {
        let s = valid(&format!(
            "{FEED}sequence = \"data.t\"\ntimestamp = \"E\"\nfilter = {{ path = \"e\", equals = \"trade\" }}\n"
        ));
        let crate::scenario::System::Ticks { ticks, .. } = &s.system else {
            panic!("ticks")
        };
        let feed = ticks.feed.as_ref().unwrap();
        assert_eq!(
            feed.sequence,
            Some(super::FieldAt::Json(vec!["data".into(), "t".into()]))
        );
        assert_eq!(feed.notes().len(), 2, "ms resolution and wall clock");
        valid(&format!("{FEED}format = \"binary\"\ntimestamp_at = {{ offset = 8, type = \"u64le\" }}\nclock = \"monotonic-ns\"\n"));
    }

    #[test]
    fn a_feed_refuses_what_it_cannot_read() {
        for (text, field) in [
            ("", "ticks.feed.timestamp"),
            ("timestamp = \"a..b\"\n", "ticks.feed.timestamp"),
            (
                "timestamp = \"E\"\ntimestamp_at = { offset = 0, type = \"u32le\" }\n",
                "ticks.feed.timestamp_at",
            ),
            ("format = \"binary\"\n", "ticks.feed.timestamp_at"),
            (
                "format = \"binary\"\ntimestamp = \"E\"\n",
                "ticks.feed.timestamp",
            ),
        ] {
            assert_eq!(refused(&format!("{FEED}{text}")).0, field, "{text}");
        }
        assert_eq!(
            refused("system = \"ticks\"\n[ticks.feed]\ntimestamp = \"E\"\n").0,
            "ticks.feed"
        );
    }
}
