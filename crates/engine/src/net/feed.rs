//! Someone else's feed messages read as ticks ([`FeedDecoder`]): the sequence number and the
//! timestamp found at the `[ticks.feed]` paths (JSON) or offsets (binary), the timestamp moved
//! onto this host's monotonic clock, messages outside the filter skipped.
//!
//! JSON is walked once per message ([`super::json_path`]).
use super::json_path::Found;
use super::proto_wire::{self, Value};
use super::tick::Tick;
use msgbench_model::feed::{BinaryField, BinaryType, FeedClock, FeedConfig, FieldAt};

/// Why a message could not be read as the feed says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    /// Not JSON.
    #[error("not JSON")]
    Json,
    /// The timestamp is not where the schema says, or not a number.
    #[error("no numeric timestamp at its path")]
    NoTimestamp,
    /// The sequence number is not where the schema says, or not a whole number.
    #[error("no whole sequence number at its path")]
    NoSequence,
    /// Not a protobuf message.
    #[error("not a protobuf message")]
    Protobuf,
    /// A binary message too short for its fields, or a message of the other kind.
    #[error("a binary message too short for its fields, or a message of the other kind")]
    Shape,
}

/// Reads a feed's messages as ticks.
#[derive(Debug, Clone)]
pub struct FeedDecoder {
    config: FeedConfig,
    /// Unix ns − monotonic ns, read once: moves wall-clock stamps onto the monotonic clock.
    wall_minus_monotonic_ns: i128,
}

/// Up to three paths looked for at once: timestamp, sequence, filter.
const TIMESTAMP: usize = 0;
const SEQUENCE: usize = 1;
const FILTER: usize = 2;

impl FeedDecoder {
    /// A decoder for `config`, its clock offset read now.
    pub fn new(config: FeedConfig) -> FeedDecoder {
        FeedDecoder {
            config,
            wall_minus_monotonic_ns: crate::clock::wall_minus_now_ns(),
        }
    }

    /// Why the schema fits none of the messages, from one of them: `error`, and what the
    /// message holds (its top-level fields, or its size), so the fix is in sight. Cold path.
    pub fn mismatch(&self, payload: &[u8], error: &FeedError) -> String {
        format!(
            "the feed schema fits none of the first messages ({error}); one of them was {}: fix [ticks.feed] (timestamp, sequence, format)",
            holds(payload)
        )
    }

    /// One message that did not decode, as a note says it: what it lacked and what it held.
    pub fn fault(&self, payload: &[u8], error: &FeedError) -> String {
        let at = match error {
            FeedError::NoSequence => self.config.sequence.as_ref().map(place),
            FeedError::NoTimestamp => Some(place(&self.config.timestamp)),
            _ => None,
        };
        format!(
            "{error}{} in {}: check [ticks.feed] (timestamp, sequence, format)",
            at.map(|a| format!(" ({a})")).unwrap_or_default(),
            holds(payload)
        )
    }

    /// The clock under which `payload`'s stamp reads as now (within `bound_ns` of
    /// `now_ns`), when the configured one does not: a unit set wrong, said with the one that
    /// fits. Cold path: the first message only.
    pub fn clock_that_fits(&self, payload: &[u8], text: bool, now_ns: u64) -> Option<&'static str> {
        let clocks = [
            FeedClock::UnixS,
            FeedClock::UnixMs,
            FeedClock::UnixUs,
            FeedClock::UnixNs,
            FeedClock::MonotonicNs,
        ];
        clocks.into_iter().find_map(|clock| {
            let mut other = self.clone();
            other.config.clock = clock;
            let tick = other.decode(payload, text, &mut 0).ok()??;
            let plausible = tick.intended_ns != 0
                && tick.intended_ns != u64::MAX
                && now_ns.abs_diff(tick.intended_ns) <= stamp_bound_ns(clock);
            (plausible && clock != self.config.clock).then_some(clock.name())
        })
    }

    /// Its messages' format.
    pub fn format(&self) -> msgbench_model::feed::FeedFormat {
        self.config.format
    }

    /// Its timestamps' clock.
    pub fn clock(&self) -> FeedClock {
        self.config.clock
    }

    /// Its timestamps' clock, as the scenario names it.
    pub fn clock_name(&self) -> &'static str {
        self.config.clock.name()
    }

    /// The messages to send after the handshake.
    pub fn subscribe(&self) -> &[String] {
        &self.config.subscribe
    }

    /// The tick in `payload` (`Ok(None)`: skipped by the filter). Without a sequence field,
    /// `counter` numbers the messages (so no gap can be seen).
    pub fn decode(
        &self,
        payload: &[u8],
        text: bool,
        counter: &mut u64,
    ) -> Result<Option<Tick>, FeedError> {
        let (stamp, seq) = match (&self.config.timestamp, text) {
            (FieldAt::Json(_), true) => match self.decode_json(payload)? {
                Some(found) => found,
                None => return Ok(None),
            },
            (FieldAt::Whole, true) => (
                Found::Text(std::borrow::Cow::Borrowed(
                    std::str::from_utf8(payload)
                        .map_err(|_| FeedError::NoTimestamp)?
                        .trim(),
                )),
                None,
            ),
            (FieldAt::Proto(at), false) => (
                match proto_wire::read(payload, at).map_err(|_| FeedError::Protobuf)? {
                    Some(Value::Int(n)) => Found::Int(n),
                    Some(Value::Float(f)) => Found::Float(f),
                    None => return Err(FeedError::NoTimestamp),
                },
                match &self.config.sequence {
                    // proto3 leaves a zero out: a missing sequence number is 0.
                    Some(FieldAt::Proto(s)) => match proto_wire::read(payload, s) {
                        Ok(Some(Value::Int(n))) => Some(n),
                        Ok(None) => Some(0),
                        _ => return Err(FeedError::NoSequence),
                    },
                    _ => None,
                },
            ),
            (FieldAt::Binary(at), false) => (
                Found::Int(read_binary(payload, *at)?),
                match self.config.sequence {
                    Some(FieldAt::Binary(s)) => Some(read_binary(payload, s)?),
                    _ => None,
                },
            ),
            _ => return Err(FeedError::Shape),
        };
        let seq = seq.unwrap_or_else(|| {
            *counter += 1;
            *counter - 1
        });
        Ok(Some(Tick {
            seq,
            intended_ns: self.to_monotonic(&stamp)?,
            sent_ns: 0,
            symbol: 0,
            price: 0.0,
        }))
    }

    /// The tick in a Server-Sent Event's data, its sequence number the event's `id` when the
    /// feed says `sequence = "@id"`.
    pub fn decode_event(
        &self,
        data: &[u8],
        id: Option<&[u8]>,
        counter: &mut u64,
    ) -> Result<Option<Tick>, FeedError> {
        let Some(mut tick) = self.decode(data, true, counter)? else {
            return Ok(None);
        };
        if self.config.sequence == Some(FieldAt::EventId) {
            tick.seq = id
                .and_then(|id| std::str::from_utf8(id).ok())
                .and_then(|id| id.trim().parse().ok())
                .ok_or(FeedError::NoSequence)?;
        }
        Ok(Some(tick))
    }

    /// Timestamp and sequence number of a JSON message; `None` when the filter skips it.
    fn decode_json<'de>(
        &self,
        payload: &'de [u8],
    ) -> Result<Option<(Found<'de>, Option<u64>)>, FeedError> {
        let mut paths: [&[String]; 3] = [&[], &[], &[]];
        if let FieldAt::Json(p) = &self.config.timestamp {
            paths[TIMESTAMP] = p;
        }
        if let Some(FieldAt::Json(p)) = &self.config.sequence {
            paths[SEQUENCE] = p;
        }
        if let Some((p, _)) = &self.config.filter {
            paths[FILTER] = p;
        }
        let found = super::json_path::find(payload, &paths).map_err(|_| FeedError::Json)?;
        if let Some((_, equals)) = &self.config.filter {
            let holds = match &found[FILTER] {
                Found::Text(t) => t == equals,
                Found::Int(n) => equals.parse::<u64>().ok() == Some(*n),
                _ => false,
            };
            if !holds {
                return Ok(None);
            }
        }
        let [stamp, seq, _] = found;
        let seq = match (&self.config.sequence, seq) {
            (None | Some(FieldAt::EventId), _) => None,
            (Some(_), Found::Int(n)) => Some(n),
            (Some(_), Found::Text(t)) => Some(t.parse().map_err(|_| FeedError::NoSequence)?),
            (Some(_), _) => return Err(FeedError::NoSequence),
        };
        Ok(Some((stamp, seq)))
    }

    /// A timestamp on this host's monotonic clock, ns.
    fn to_monotonic(&self, stamp: &Found<'_>) -> Result<u64, FeedError> {
        let value = match stamp {
            Found::Int(n) => *n as f64,
            Found::Float(f) => *f,
            Found::Text(t) => t.parse::<f64>().map_err(|_| FeedError::NoTimestamp)?,
            _ => return Err(FeedError::NoTimestamp),
        };
        if !value.is_finite() || value < 0.0 {
            return Err(FeedError::NoTimestamp);
        }
        let ns = match stamp {
            // Whole nanoseconds stay exact (an f64 holds 2^53 ns: 104 days of uptime).
            Found::Int(n) if self.config.clock.ns_per_unit() == 1.0 => *n as i128,
            _ => (value * self.config.clock.ns_per_unit()) as i128,
        };
        let monotonic = if self.config.clock == FeedClock::MonotonicNs {
            ns
        } else {
            ns - self.wall_minus_monotonic_ns
        };
        // A stamp from before this host booted becomes 0: the reader's first-stamp check
        // takes 0 for what it is (no stamp of this run), whatever the host's uptime.
        Ok(monotonic.clamp(0, u64::MAX as i128) as u64)
    }
}

/// How far a first stamp on `clock` may be from this host's clock: 60 s for a monotonic stamp
/// (it comes from this host), an hour for a wall-clock one (a host whose clock is off).
pub fn stamp_bound_ns(clock: FeedClock) -> u64 {
    if clock.is_wall() {
        3_600_000_000_000
    } else {
        60_000_000_000
    }
}

/// Where a field is, as a scenario gives it.
fn place(at: &FieldAt) -> String {
    match at {
        FieldAt::Json(path) => format!("`{}`", path.join(".")),
        FieldAt::Binary(b) => format!("byte offset {}", b.offset),
        FieldAt::Proto(p) => format!("protobuf field {p:?}"),
        FieldAt::EventId => "the event's id".into(),
        FieldAt::Whole => "the whole message".into(),
    }
}

/// What a message holds, in a few words: a JSON object's field names, the start of a text, a
/// binary message's length.
fn holds(payload: &[u8]) -> String {
    match serde_json::from_slice::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(
        payload,
    ) {
        Ok(fields) => format!(
            "a JSON object with the fields {}",
            fields
                .keys()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(_) if std::str::from_utf8(payload).is_ok() => format!(
            "{:?}",
            String::from_utf8_lossy(&payload[..payload.len().min(120)])
        ),
        Err(_) => format!("a binary message of {} bytes", payload.len()),
    }
}

/// An unsigned integer at a binary field.
fn read_binary(payload: &[u8], at: BinaryField) -> Result<u64, FeedError> {
    let bytes = payload
        .get(at.offset..at.offset + at.kind.width())
        .ok_or(FeedError::Shape)?;
    Ok(match at.kind {
        BinaryType::U32le => u32::from_le_bytes(bytes.try_into().expect("4")) as u64,
        BinaryType::U32be => u32::from_be_bytes(bytes.try_into().expect("4")) as u64,
        BinaryType::U64le => u64::from_le_bytes(bytes.try_into().expect("8")),
        BinaryType::U64be => u64::from_be_bytes(bytes.try_into().expect("8")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::feed::{FeedFormat, FeedStamp};

    fn json(sequence: Option<&str>, timestamp: &str, clock: FeedClock) -> FeedDecoder {
        let split = |p: &str| p.split('.').map(str::to_string).collect::<Vec<_>>();
        FeedDecoder {
            config: FeedConfig {
                format: FeedFormat::Json,
                subscribe: vec![],
                sequence: sequence.map(|s| FieldAt::Json(split(s))),
                timestamp: FieldAt::Json(split(timestamp)),
                clock,
                stamp: FeedStamp::Event,
                filter: Some((split("e"), "trade".into())),
            },
            wall_minus_monotonic_ns: 1_000_000_000_000,
        }
    }

    #[test]
    fn json_fields_are_found_at_their_paths_and_the_filter_skips_the_rest() {
        let d = json(Some("t"), "E", FeedClock::UnixMs);
        let mut n = 0;
        let trade = br#"{"e":"trade","E":1000123,"s":"BTCUSDT","t":81234,"p":"97012.5","q":"0.01","m":true,"x":{"y":[1,{"E":5}]}}"#;
        let t = d.decode(trade, true, &mut n).unwrap().unwrap();
        assert_eq!(
            (t.seq, t.intended_ns),
            (81234, 1_000_123_000_000 - 1_000_000_000_000)
        );
        let other = br#"{"e":"depthUpdate","E":1,"u":5}"#;
        assert_eq!(d.decode(other, true, &mut n), Ok(None));
        let answer = br#"{"result":null,"id":1}"#;
        assert_eq!(d.decode(answer, true, &mut n), Ok(None));
        assert_eq!(d.decode(b"not json", true, &mut n), Err(FeedError::Json));
        let no_seq = br#"{"e":"trade","E":1000123}"#;
        assert_eq!(d.decode(no_seq, true, &mut n), Err(FeedError::NoSequence));
        let text_numbers = br#"{"e":"trade","E":"1000123.5","t":"7"}"#;
        let t = d.decode(text_numbers, true, &mut n).unwrap().unwrap();
        assert_eq!(
            (t.seq, t.intended_ns),
            (7, 1_000_123_500_000 - 1_000_000_000_000)
        );
        assert_eq!(d.decode(trade, false, &mut n), Err(FeedError::Shape));
    }

    #[test]
    fn nested_paths_and_feeds_without_a_sequence() {
        let d = json(None, "data.T", FeedClock::UnixS);
        let mut n = 10;
        let m = br#"{"stream":"x","data":{"e":"no","T":1000.25},"e":"trade"}"#;
        let t = d.decode(m, true, &mut n).unwrap().unwrap();
        assert_eq!((t.seq, n), (10, 11), "numbered by the counter");
        assert_eq!(t.intended_ns, 1_000_250_000_000 - 1_000_000_000_000);
        let m = br#"{"e":"trade","data":{"T":-3}}"#;
        assert_eq!(d.decode(m, true, &mut n), Err(FeedError::NoTimestamp));
    }

    #[test]
    fn binary_fields_are_read_at_their_offsets() {
        let d = FeedDecoder {
            config: FeedConfig {
                format: FeedFormat::Binary,
                subscribe: vec![],
                sequence: Some(FieldAt::Binary(BinaryField {
                    offset: 0,
                    kind: BinaryType::U64le,
                })),
                timestamp: FieldAt::Binary(BinaryField {
                    offset: 8,
                    kind: BinaryType::U32be,
                }),
                clock: FeedClock::MonotonicNs,
                stamp: FeedStamp::Send,
                filter: None,
            },
            wall_minus_monotonic_ns: 0,
        };
        let mut m = 42u64.to_le_bytes().to_vec();
        m.extend_from_slice(&7u32.to_be_bytes());
        let t = d.decode(&m, false, &mut 0).unwrap().unwrap();
        assert_eq!((t.seq, t.intended_ns), (42, 7));
        assert_eq!(d.decode(&m[..11], false, &mut 0), Err(FeedError::Shape));
    }
}
