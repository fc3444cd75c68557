//! The tick stream's wire format (`docs/protocol.md`, "The tick stream"): one WebSocket
//! message per tick, binary (36 bytes) or JSON, each with its own sequence number, its intended
//! send time and the time the server began writing it; and the small JSON control messages both
//! sides exchange (acknowledgements, clock sync, browser reports, the end of the stream).
//!
//! The binary layout is the report's 20-byte tick (symbol u32, price f64, timestamp i64) plus
//! the two stamps an honest measurement needs (sequence number, send time).
use bytes::{BufMut, BytesMut};
use msgbench_model::ticks::TickFormat;
use serde::{Deserialize, Serialize};

/// Size of a binary tick.
pub const BINARY_TICK_BYTES: usize = 36;

/// One market tick as it travels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Position in the stream: 0, 1, 2, … (every client sees the same numbers).
    pub seq: u64,
    /// When the schedule meant it to go (CLOCK_MONOTONIC ns): latency counts from here.
    pub intended_ns: u64,
    /// When the server began writing the batch holding it (CLOCK_MONOTONIC ns; 0: unknown).
    pub sent_ns: u64,
    /// Instrument.
    pub symbol: u32,
    /// Price.
    pub price: f64,
}

impl Tick {
    /// The tick at `seq` of a stream over `symbols` instruments: symbol and price follow from
    /// the sequence number, so every server thread generates the same stream.
    #[inline]
    pub fn at(seq: u64, intended_ns: u64, symbols: u32) -> Tick {
        Tick {
            seq,
            intended_ns,
            sent_ns: 0,
            symbol: (seq % u64::from(symbols.max(1))) as u32,
            // An integer divided by 100: the closest double to a two-decimal price, so JSON
            // writes it short ("100.07").
            price: (10_000 + (seq.wrapping_mul(7_919) % 10_000)) as f64 / 100.0,
        }
    }

    /// Appends the 36-byte binary form (little-endian).
    #[inline]
    pub fn encode_binary(&self, out: &mut BytesMut) {
        out.put_u64_le(self.seq);
        out.put_u64_le(self.intended_ns);
        out.put_u64_le(self.sent_ns);
        out.put_u32_le(self.symbol);
        out.put_f64_le(self.price);
    }

    /// Appends the JSON form: `{"seq":…,"ts":…,"sent":…,"sym":…,"px":…}`.
    #[inline]
    pub fn encode_json(&self, out: &mut BytesMut) {
        let json = JsonTick {
            seq: self.seq,
            ts: self.intended_ns,
            sent: self.sent_ns,
            sym: self.symbol,
            px: self.price,
        };
        // Writing into memory cannot fail.
        let _ = serde_json::to_writer(out.writer(), &json);
    }

    /// Appends the tick in `format`.
    #[inline]
    pub fn encode(&self, format: TickFormat, out: &mut BytesMut) {
        match format {
            TickFormat::Binary => self.encode_binary(out),
            TickFormat::Json => self.encode_json(out),
        }
    }

    /// Decodes a binary message (36 bytes, little-endian).
    #[inline]
    pub fn decode_binary(payload: &[u8]) -> Result<Tick, TickError> {
        if payload.len() != BINARY_TICK_BYTES {
            return Err(TickError::Size(payload.len()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(payload[i..i + 8].try_into().expect("8"));
        Ok(Tick {
            seq: u64_at(0),
            intended_ns: u64_at(8),
            sent_ns: u64_at(16),
            symbol: u32::from_le_bytes(payload[24..28].try_into().expect("4")),
            price: f64::from_le_bytes(payload[28..36].try_into().expect("8")),
        })
    }

    /// Decodes a text message of JSON (`sent` may be missing; fields in any order).
    #[inline]
    pub fn decode_json(payload: &[u8]) -> Result<Tick, TickError> {
        let j: JsonTick = serde_json::from_slice(payload).map_err(|_| TickError::Json)?;
        Ok(Tick {
            seq: j.seq,
            intended_ns: j.ts,
            sent_ns: j.sent,
            symbol: j.sym,
            price: j.px,
        })
    }

    /// Decodes a WebSocket message: text is JSON, binary is the 36-byte form. (The message's
    /// type decides, never its first byte: a binary tick may well start with `{`.)
    #[inline]
    pub fn decode(payload: &[u8], text: bool) -> Result<Tick, TickError> {
        if text {
            Tick::decode_json(payload)
        } else {
            Tick::decode_binary(payload)
        }
    }
}

/// When the stream runs, on the clock's timeline (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The schedule's start: tick 0 is due here.
    pub t0_ns: u64,
    /// Start of the measured window: ticks due from here on are counted.
    pub measure_start_ns: u64,
    /// End of the schedule: no tick due at or after it is generated.
    pub end_ns: u64,
}

impl Schedule {
    /// True for a tick of the measured window.
    #[inline]
    pub fn measures(&self, intended_ns: u64) -> bool {
        intended_ns >= self.measure_start_ns && intended_ns < self.end_ns
    }

    /// The second of the measured window `ns` falls in (0 before it).
    #[inline]
    pub fn second(&self, ns: u64) -> usize {
        (ns.saturating_sub(self.measure_start_ns) / 1_000_000_000) as usize
    }
}

/// Why a message is not a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TickError {
    /// A binary message of the wrong size.
    #[error("a binary message of {0} bytes, not a {BINARY_TICK_BYTES}-byte tick")]
    Size(usize),
    /// A text message that is not a JSON tick.
    #[error("a text message that is not a JSON tick")]
    Json,
}

#[derive(Serialize, Deserialize)]
struct JsonTick {
    seq: u64,
    ts: u64,
    #[serde(default)]
    sent: u64,
    sym: u32,
    px: f64,
}

/// True when a text message is a control message (`{"type":…}`) rather than a JSON tick.
#[inline]
pub fn is_control(payload: &[u8]) -> bool {
    payload.starts_with(b"{\"type\"")
}

/// What a client sends the server (text messages of JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMessage {
    /// Cumulative acknowledgement: ticks processed since the connection opened.
    Ack {
        /// Ticks processed so far.
        processed: u64,
    },
    /// Clock sync: the server answers with its clock at once.
    Ping {
        /// The client's clock, echoed (any unit).
        t: f64,
    },
    /// Start the stream on a connection opened with `?wait=1` (after its clock sync).
    Subscribe,
    /// A browser page's clock, measured after its sync.
    Clock {
        /// Smallest step of `performance.now()`, ns.
        resolution_ns: f64,
        /// Round trip of the best sync exchange, ns.
        rtt_ns: f64,
    },
    /// A browser page's measurements of one second (or its last, partial one).
    Report(PageReport),
}

/// One second of a browser page's measurements, on the run's interval grid.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageReport {
    /// Interval index (seconds since the measured window began).
    pub k: u64,
    /// True for the page's last report (the stream ended).
    #[serde(default)]
    pub last: bool,
    /// Measured ticks processed in this second.
    pub delivered: u64,
    /// Latencies of those ticks as `[value_ns, count, value_ns, count, …]`, values rounded down
    /// to HdrHistogram's bucket (3 significant digits), so they convert exactly.
    pub latency: Vec<u64>,
    /// Service times (completion − the server's write stamp), in the same form.
    pub service: Vec<u64>,
    /// Gaps, duplicates and reordered ticks seen so far (cumulative).
    pub sequence: [u64; 3],
    /// Ticks processed since the connection opened (cumulative, warm-up included).
    pub processed: u64,
}

/// What the server sends a client besides ticks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerMessage {
    /// Answer to a ping.
    Pong {
        /// The client's stamp, echoed.
        t: f64,
        /// The server's clock (CLOCK_MONOTONIC ns) when it answered.
        now_ns: u64,
    },
    /// The measured window, sent to browser pages before the first tick.
    Window {
        /// Start of the measured window, ns.
        start_ns: u64,
        /// End of the schedule's measured part, ns.
        end_ns: u64,
    },
    /// The stream is over: no tick follows.
    End {
        /// Ticks generated for this connection in all (its last sequence number + 1 − first).
        generated: u64,
    },
}

impl ServerMessage {
    /// The message as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("serializable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed vector: what any implementation of the format must produce for this tick.
    const VECTOR: Tick = Tick {
        seq: 0x0102_0304_0506_0708,
        intended_ns: 1_000_000_007,
        sent_ns: 1_000_002_000,
        symbol: 42,
        price: 101.25,
    };

    #[test]
    fn binary_matches_the_fixed_vector() {
        let mut out = BytesMut::new();
        VECTOR.encode_binary(&mut out);
        let expected: [u8; BINARY_TICK_BYTES] = [
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // seq
            0x07, 0xca, 0x9a, 0x3b, 0x00, 0x00, 0x00, 0x00, // intended 1_000_000_007
            0xd0, 0xd1, 0x9a, 0x3b, 0x00, 0x00, 0x00, 0x00, // sent 1_000_002_000
            0x2a, 0x00, 0x00, 0x00, // symbol 42
            0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x59, 0x40, // price 101.25
        ];
        assert_eq!(&out[..], &expected[..]);
        assert_eq!(Tick::decode(&expected, false).unwrap(), VECTOR);
    }

    #[test]
    fn json_matches_the_fixed_vector() {
        let mut out = BytesMut::new();
        VECTOR.encode_json(&mut out);
        let expected =
            r#"{"seq":72623859790382856,"ts":1000000007,"sent":1000002000,"sym":42,"px":101.25}"#;
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected);
        assert_eq!(Tick::decode(expected.as_bytes(), true).unwrap(), VECTOR);
        // Fields in another order, and without the optional `sent`, decode too.
        let other = r#"{"px":101.25,"sym":42,"ts":1000000007,"seq":72623859790382856}"#;
        let t = Tick::decode(other.as_bytes(), true).unwrap();
        assert_eq!((t.seq, t.sent_ns, t.price), (VECTOR.seq, 0, 101.25));
    }

    #[test]
    fn generated_ticks_are_deterministic_and_short_in_json() {
        let a = Tick::at(7, 123, 100);
        assert_eq!(a, Tick::at(7, 123, 100));
        assert_eq!(a.symbol, 7);
        let mut out = BytesMut::new();
        a.encode_json(&mut out);
        assert!(out.len() < 80, "{}", std::str::from_utf8(&out).unwrap());
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert_eq!(Tick::decode(&[0u8; 20], false), Err(TickError::Size(20)));
        assert_eq!(Tick::decode(b"{\"seq\":1}", true), Err(TickError::Json));
        assert_eq!(Tick::decode(b"{garbage", true), Err(TickError::Json));
        // A binary tick whose first byte happens to be `{` (seq 123) is still binary.
        let mut out = BytesMut::new();
        Tick::at(123, 5, 10).encode_binary(&mut out);
        assert_eq!(out[0], b'{');
        assert_eq!(Tick::decode(&out, false).unwrap().seq, 123);
        assert!(is_control(br#"{"type":"end","generated":3}"#));
        assert!(!is_control(br#"{"seq":1,"ts":2,"sym":3,"px":4.0}"#));
    }

    #[test]
    fn control_messages_round_trip() {
        let m: ClientMessage = serde_json::from_str(r#"{"type":"ack","processed":12}"#).unwrap();
        assert_eq!(m, ClientMessage::Ack { processed: 12 });
        assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"ack"}"#).is_err());
        assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"nope"}"#).is_err());
        let end = ServerMessage::End { generated: 5 }.to_json();
        assert_eq!(end, r#"{"type":"end","generated":5}"#);
    }
}
