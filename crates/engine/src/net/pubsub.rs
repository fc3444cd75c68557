//! What the `pubsub` system writes and reads on a broker connection, whatever the broker:
//! every message's 24-byte header (intended publish time, sequence number, publisher), and,
//! per broker, how a message is published, how a topic is subscribed to, and what the broker
//! sends back ([`Incoming`]). NATS's protocol is [`super::nats`]; Redis's is RESP
//! ([`super::resp`]): `PUBLISH` and `SUBSCRIBE`, messages as `message` arrays; MQTT's is
//! [`super::mqtt`]; Kafka's [`super::kafka`]; Redis Streams' [`super::redis_streams`];
//! JetStream's is NATS's with [`super::jetstream`]'s subjects and answers.
use super::{jetstream, mqtt, nats, redis_streams, resp};
use msgbench_model::pubsub::{Broker, PubsubConfig, HEADER_BYTES};

/// The last 4 bytes of every header: the run's own mark (random per run), so that a
/// subscription tells its run's messages from another run's on the same topic.
pub type RunMark = [u8; 4];

/// What every message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// When the schedule meant it to be published (clock ns): latency counts from here.
    pub intended_ns: u64,
    /// Its publisher's sequence number: 0, 1, 2, …
    pub seq: u64,
    /// Its publisher (run-wide index).
    pub publisher: u32,
}

impl Header {
    /// Appends a message of `size` bytes (≥ 24): this header with the run's `mark`, then
    /// padding.
    #[inline]
    pub fn write(&self, size: usize, mark: RunMark, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.intended_ns.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.publisher.to_le_bytes());
        out.extend_from_slice(&mark);
        out.resize(out.len() + size - HEADER_BYTES as usize, b'.');
    }

    /// The header of `payload`; `None` for a payload that is not this run's (`mark`).
    #[inline]
    pub fn read(payload: &[u8], mark: RunMark) -> Option<Header> {
        let h = payload.get(..HEADER_BYTES as usize)?;
        if h[20..24] != mark {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        Some(Header {
            intended_ns: word(0),
            seq: word(8),
            publisher: u32::from_le_bytes(h[16..20].try_into().expect("4 bytes")),
        })
    }
}

/// How a delivered message is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckId<'a> {
    /// MQTT QoS 1: a PUBACK of its packet id.
    Packet(u16),
    /// JetStream: an empty publish to its reply subject.
    Subject(&'a [u8]),
}

/// One thing a broker sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// A message of a subscription: its payload, and how to acknowledge it (answer [`ack`]).
    /// On a JetStream publisher's connection, the answer to a publish (its PubAck).
    Message {
        /// The payload.
        payload: &'a [u8],
        /// What the broker waits for, if anything.
        ack: Option<AckId<'a>>,
    },
    /// The broker checks the connection is alive: answer [`pong`].
    Ping,
    /// The broker took a publish (Redis: its reply, the number of subscribers reached).
    Ack,
    /// The broker refused something (its text).
    Error(&'a [u8]),
    /// The answer to a command of the connection's opening: NATS's `PONG`, Redis's `+PONG`
    /// or its confirmation of a `SUBSCRIBE`.
    Reply,
    /// Anything else (a server description, `+OK`).
    Other,
}

/// The next thing at the start of `buf` and the bytes it took; `Ok(None)` when incomplete; an
/// error for bytes that are not the broker's protocol.
pub fn decode(broker: Broker, buf: &[u8]) -> Result<Option<(Incoming<'_>, usize)>, String> {
    match broker {
        Broker::Nats | Broker::Jetstream => Ok(nats::decode(buf)
            .map_err(|e| e.to_string())?
            .map(|(op, used)| {
                let incoming = match op {
                    // JetStream's heartbeats and flow control (not asked for): nothing to act on.
                    nats::ServerOp::Msg {
                        status: Some(s), ..
                    } if s.starts_with(b"100") => Incoming::Other,
                    nats::ServerOp::Msg {
                        status: Some(s), ..
                    } if s.starts_with(b"503") => Incoming::Error(
                        b"no responders (503): no JetStream stream takes this subject; is JetStream enabled (nats-server -js)?",
                    ),
                    nats::ServerOp::Msg {
                        status: Some(s), ..
                    } => Incoming::Error(s),
                    nats::ServerOp::Msg { payload, reply, .. } => Incoming::Message {
                        payload,
                        ack: reply
                            .filter(|_| broker == Broker::Jetstream)
                            .map(AckId::Subject),
                    },
                    nats::ServerOp::Ping => Incoming::Ping,
                    nats::ServerOp::Err(text) => Incoming::Error(text),
                    nats::ServerOp::Pong => Incoming::Reply,
                    nats::ServerOp::Info(_) | nats::ServerOp::Ok => Incoming::Other,
                };
                (incoming, used)
            })),
        Broker::Redis => redis_incoming(buf),
        // A publisher's answers: XADD's id (a bulk string). A consumer's replies are read
        // whole by redis_streams::Reader.
        Broker::RedisStreams => redis_streams_incoming(buf),
        Broker::Mqtt | Broker::Mqtt5 => Ok(mqtt::decode(buf, broker == Broker::Mqtt5)
            .map_err(|e| e.to_string())?
            .map(|(p, used)| {
                let incoming = match p {
                    mqtt::Packet::ConnAck(0) => Incoming::Reply,
                    mqtt::Packet::ConnAck(code) => Incoming::Error(mqtt::connack_refusal(code)),
                    mqtt::Packet::SubAck(0x80) => {
                        Incoming::Error(b"the broker refused the subscription (SUBACK 0x80)")
                    }
                    mqtt::Packet::SubAck(_) => Incoming::Reply,
                    mqtt::Packet::Publish { payload, ack } => Incoming::Message {
                        payload,
                        ack: ack.map(AckId::Packet),
                    },
                    mqtt::Packet::PubAck(_) => Incoming::Ack,
                    mqtt::Packet::PingResp => Incoming::Other,
                    mqtt::Packet::PubRefused(_) => Incoming::Error(
                        b"the broker refused a publish (an MQTT 5 PUBACK reason code of 0x80 or above)",
                    ),
                    mqtt::Packet::Disconnect(_) => {
                        Incoming::Error(b"the broker sent DISCONNECT (MQTT 5)")
                    }
                };
                (incoming, used)
            })),
        // A consumer's fetch responses and a producer's answers are read by kafka::Fetcher
        // and the publisher, not message by message.
        Broker::Kafka => Err("Kafka's responses are read whole (net::kafka)".into()),
    }
}

/// A RESP reply: a `message` push, an integer (a PUBLISH's reply), an error, or other.
fn redis_incoming(buf: &[u8]) -> Result<Option<(Incoming<'_>, usize)>, String> {
    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n";
    let Some((reply, used)) = resp::decode(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let element = &buf[..used];
    let incoming = if reply == resp::Reply::Error {
        Incoming::Error(resp::error_text(buf, used))
    } else if element[0] == b':' {
        Incoming::Ack
    } else if let Some(rest) = element.strip_prefix(MESSAGE) {
        let (_channel, rest) = bulk(rest).ok_or("a Redis message without its channel")?;
        let (payload, _) = bulk(rest).ok_or("a Redis message without its payload")?;
        Incoming::Message { payload, ack: None }
    } else if element.starts_with(b"+PONG") || element.starts_with(b"*3\r\n$9\r\nsubscribe\r\n") {
        Incoming::Reply
    } else {
        Incoming::Other
    };
    Ok(Some((incoming, used)))
}

/// A RESP reply on a Redis Streams publisher's connection: `XADD`'s entry id, an error, or
/// other (`+PONG`).
fn redis_streams_incoming(buf: &[u8]) -> Result<Option<(Incoming<'_>, usize)>, String> {
    let Some((reply, used)) = resp::decode(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let incoming = match (reply, buf[0]) {
        (resp::Reply::Error, _) => Incoming::Error(resp::error_text(buf, used)),
        (_, b'$') => Incoming::Ack,
        _ if buf.starts_with(b"+PONG") => Incoming::Reply,
        _ => Incoming::Other,
    };
    Ok(Some((incoming, used)))
}

/// The bulk string at the start of `buf` (already known complete) and what follows it.
fn bulk(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = buf.strip_prefix(b"$")?;
    let line = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..line]).ok()?.parse().ok()?;
    let data = rest.get(line + 2..line + 2 + len)?;
    Some((data, rest.get(line + 4 + len..)?))
}

/// What a connection sends first; the broker answers it with one [`Incoming::Reply`]
/// (NATS: `CONNECT` + `PING` → `PONG`; Redis: `PING` → `+PONG`).
pub fn hello(broker: Broker, name: &str, out: &mut Vec<u8>) {
    match broker {
        Broker::Nats => nats::connect(name, false, out),
        // Headers on: JetStream's refusals of a publish nobody stores are 503 statuses.
        Broker::Jetstream => nats::connect(name, true, out),
        Broker::Redis | Broker::RedisStreams => out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
        // Client ids are unique per broker: two runs (or two processes) must not take over
        // each other's connections.
        Broker::Mqtt | Broker::Mqtt5 => mqtt::connect(
            &format!("msgbench-{}-{name}", std::process::id()),
            broker == Broker::Mqtt5,
            out,
        ),
        // Kafka's opening is its own (drivers::pubsub::open_kafka): metadata and offsets.
        Broker::Kafka => {}
    }
}

/// Subscribes to `topic` (in shared `group`: NATS queue groups, MQTT `$share/`) as
/// subscription `sid` at `qos` (MQTT); the broker answers with one [`Incoming::Reply`] once the
/// subscription is in place (NATS: the `PONG` of a `PING` sent after it; Redis: its
/// `subscribe` confirmation; MQTT: its SUBACK). JetStream: `topic` is the subject its consumer
/// delivers to (or a publisher's inbox). Redis Streams and Kafka subscribe otherwise (a
/// consumer group, a fetch).
pub fn subscribe(
    broker: Broker,
    topic: &str,
    group: Option<&str>,
    sid: u64,
    qos: u8,
    out: &mut Vec<u8>,
) {
    match broker {
        Broker::Nats | Broker::Jetstream => {
            nats::subscribe(topic, group, sid, out);
            out.extend_from_slice(b"PING\r\n");
        }
        Broker::Redis => {
            out.extend_from_slice(
                format!("*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{topic}\r\n", topic.len()).as_bytes(),
            );
        }
        Broker::Mqtt | Broker::Mqtt5 => {
            let filter = match group {
                Some(g) => format!("$share/{g}/{topic}"),
                None => topic.to_string(),
            };
            mqtt::subscribe(
                &filter,
                qos,
                (sid % 65_535 + 1) as u16,
                broker == Broker::Mqtt5,
                out,
            );
        }
        Broker::Kafka | Broker::RedisStreams => {}
    }
}

/// How one publisher frames its messages: the bytes before each payload (with, at MQTT
/// QoS 1, the place of the packet id to write per message) and after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFrame {
    /// The bytes before the payload.
    pub prefix: Vec<u8>,
    /// Where the prefix holds a two-byte packet id to fill in per message.
    pub id_at: Option<usize>,
    /// The bytes after the payload.
    pub suffix: &'static [u8],
}

impl PublishFrame {
    /// The framing of `config`'s messages on `topic` (JetStream: answered on `inbox`).
    pub fn new(config: &PubsubConfig, topic: &str, inbox: Option<&str>) -> PublishFrame {
        let (broker, size, qos) = (config.broker, config.message_bytes as usize, config.qos);
        match broker {
            Broker::Nats | Broker::Jetstream => PublishFrame {
                prefix: nats::publish_prefix(topic, inbox, size),
                id_at: None,
                suffix: b"\r\n",
            },
            Broker::RedisStreams => PublishFrame {
                prefix: redis_streams::publish_prefix(topic, size, config.stream_max_messages),
                id_at: None,
                suffix: b"\r\n",
            },
            Broker::Redis => PublishFrame {
                prefix: format!(
                    "*3\r\n$7\r\nPUBLISH\r\n${}\r\n{topic}\r\n${size}\r\n",
                    topic.len()
                )
                .into_bytes(),
                id_at: None,
                suffix: b"\r\n",
            },
            Broker::Mqtt | Broker::Mqtt5 => {
                let v5 = broker == Broker::Mqtt5;
                let prefix = mqtt::publish_prefix(topic, qos, size, v5);
                PublishFrame {
                    // MQTT 5's empty properties block follows the id.
                    id_at: (qos > 0).then(|| prefix.len() - 2 - usize::from(v5)),
                    prefix,
                    suffix: b"",
                }
            }
            // Records are framed by kafka::Producer, in batches.
            Broker::Kafka => PublishFrame {
                prefix: Vec::new(),
                id_at: None,
                suffix: b"",
            },
        }
    }

    /// Appends the prefix of message number `seq` (its packet id derived from it).
    #[inline]
    pub fn put_prefix(&self, seq: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.prefix);
        if let Some(at) = self.id_at {
            // Ids 1..=65535 in turn (0 is not a packet id).
            let id = (seq % 65_535 + 1) as u16;
            out[start + at..start + at + 2].copy_from_slice(&id.to_be_bytes());
        }
    }
}

/// Acknowledges a delivered message (MQTT QoS 1: PUBACK; JetStream: an empty publish to its
/// reply subject, `+ACK`).
pub fn ack(id: AckId<'_>, out: &mut Vec<u8>) {
    match id {
        AckId::Packet(id) => mqtt::puback(id, out),
        AckId::Subject(subject) => {
            out.extend_from_slice(b"PUB ");
            out.extend_from_slice(subject);
            out.extend_from_slice(b" 0\r\n\r\n");
        }
    }
}

/// A JetStream publisher's answer (a message on its inbox): taken, or refused (why).
pub fn pub_ack(payload: &[u8]) -> Result<(), String> {
    match jetstream::pub_ack_refusal(payload) {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// The answer to [`Incoming::Ping`].
pub fn pong(broker: Broker) -> &'static [u8] {
    match broker {
        Broker::Nats | Broker::Jetstream => nats::PONG,
        Broker::Redis | Broker::RedisStreams | Broker::Mqtt | Broker::Mqtt5 | Broker::Kafka => b"",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_what_was_written_and_others_payloads_are_not_ours() {
        let h = Header {
            intended_ns: u64::MAX - 3,
            seq: 1 << 40,
            publisher: 7,
        };
        let mut out = Vec::new();
        h.write(100, *b"MSB1", &mut out);
        assert_eq!(out.len(), 100);
        assert_eq!(Header::read(&out, *b"MSB1"), Some(h));
        assert_eq!(Header::read(&out[..23], *b"MSB1"), None);
        // Another run's message (another mark) is not ours.
        assert_eq!(Header::read(&out, *b"MSB2"), None);
    }

    #[test]
    fn redis_messages_acks_and_errors_are_told_apart() {
        let stream = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nt.00\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$4\r\nt.00\r\n$5\r\nhello\r\n:2\r\n-ERR wrong\r\n+PONG\r\n";
        let mut seen = Vec::new();
        let mut at = 0;
        while let Some((inc, used)) = decode(Broker::Redis, &stream[at..]).unwrap() {
            seen.push(inc);
            for cut in at..at + used {
                assert_eq!(decode(Broker::Redis, &stream[at..cut]).unwrap(), None);
            }
            at += used;
        }
        assert_eq!(
            seen,
            [
                Incoming::Reply,
                Incoming::Message {
                    payload: b"hello",
                    ack: None
                },
                Incoming::Ack,
                Incoming::Error(b"ERR wrong"),
                Incoming::Reply
            ]
        );
        assert!(decode(Broker::Redis, b"GARBAGE\r\n").is_err());
    }

    #[test]
    fn nats_operations_map_to_what_the_driver_acts_on() {
        let (m, _) = decode(Broker::Nats, b"MSG t.0 1 2\r\nab\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            m,
            Incoming::Message {
                payload: b"ab",
                ack: None
            }
        );
        let (p, _) = decode(Broker::Nats, b"PING\r\n").unwrap().unwrap();
        assert_eq!(p, Incoming::Ping);
        let (e, _) = decode(Broker::Nats, b"-ERR 'Slow Consumer'\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(e, Incoming::Error(b"Slow Consumer"));
        assert!(decode(Broker::Nats, b"*3\r\n").is_err());
    }
}
