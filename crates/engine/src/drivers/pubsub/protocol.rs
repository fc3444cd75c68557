//! What a broker connection says, whatever the broker: the seam the publisher and subscriber
//! threads read and write through ([`BrokerProtocol`]), without I/O. Each broker implements it
//! in its own file under [`super::brokers`]; the threads never name a broker.
use msgbench_model::broker_auth::Credentials;

/// How a delivered message is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckId<'a> {
    /// MQTT QoS 1: a PUBACK of its packet id.
    Packet(u16),
    /// JetStream: an empty publish to its reply subject.
    Subject(&'a [u8]),
    /// RabbitMQ: a `basic.ack` of its delivery tag.
    Tag(u64),
}

/// What a connection's hello is made of.
pub struct Hello<'a> {
    /// The connection's name (`p0`, `t0-s1-c0`).
    pub name: &'a str,
    /// The scenario's credentials, sent as the broker takes them (`[pubsub.auth]`).
    pub auth: Option<&'a Credentials>,
    /// What the broker said first (NATS's `INFO`, with the nonce an NKey signs); empty for a
    /// broker that does not speak first.
    pub greeting: &'a [u8],
}

/// One thing a broker sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// A message of a subscription: its payload, and how to acknowledge it (answer [`BrokerProtocol::ack`]).
    /// On a JetStream publisher's connection, the answer to a publish (its PubAck).
    Message {
        /// The payload.
        payload: &'a [u8],
        /// What the broker waits for, if anything.
        ack: Option<AckId<'a>>,
    },
    /// The broker checks the connection is alive: answer [`BrokerProtocol::pong`].
    Ping,
    /// The broker took a publish (Redis: its reply, the number of subscribers reached).
    Ack,
    /// The broker took every publish of the connection up to this one, counted from 1
    /// (RabbitMQ's publisher confirms).
    Confirmed(u64),
    /// The broker refused something (its text).
    Error(&'a [u8]),
    /// The answer to a command of the connection's opening: NATS's `PONG`, Redis's `+PONG`
    /// or its confirmation of a `SUBSCRIBE`.
    Reply,
    /// Anything else (a server description, `+OK`).
    Other,
}

/// How a broker's connections speak: the opening's greeting and subscription, each publish's
/// framing, what the broker sends back, and the answers it expects.
pub trait BrokerProtocol: Sync {
    /// Its name in scenario files (for messages).
    fn name(&self) -> &'static str;

    /// What a connection sends first; the broker answers it with one [`Incoming::Reply`]
    /// (NATS: `CONNECT` + `PING` → `PONG`; Redis: `PING` → `+PONG`). An error for credentials
    /// it cannot use (an NKey seed that is not one, a server that gave no nonce to sign).
    fn hello(&self, hello: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String>;

    /// What the broker sends before it is spoken to (NATS's `INFO`): the opening checks it
    /// came, to tell a broker of another kind at the address.
    fn greeting(&self) -> Option<&'static [u8]> {
        None
    }

    /// Subscribes to `topic` (in shared `group`) as subscription `sid` at `qos`; the broker
    /// answers with one [`Incoming::Reply`] once the subscription is in place. Nothing for a
    /// broker whose consumers subscribe otherwise (a consumer group, a fetch).
    fn subscribe(&self, topic: &str, group: Option<&str>, sid: u64, qos: u8, out: &mut Vec<u8>) {
        let _ = (topic, group, sid, qos, out);
    }

    /// The next thing at the start of `buf` and the bytes it took; `Ok(None)` when incomplete;
    /// an error for bytes that are not the broker's protocol.
    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String>;

    /// A message that came on a publisher's connection: the answer to its oldest publish
    /// (JetStream's PubAck: `Ok(true)`), or nothing of the publisher's (`Ok(false)`); an error
    /// when the broker refused the publish.
    fn publish_answer(&self, payload: &[u8]) -> Result<bool, String> {
        let _ = payload;
        Ok(false)
    }

    /// Acknowledges a delivered message.
    fn ack(&self, id: AckId<'_>, out: &mut Vec<u8>) {
        let _ = (id, out);
    }

    /// The answer to [`Incoming::Ping`].
    fn pong(&self) -> &'static [u8] {
        b""
    }

    /// What a publisher sends once it owes nothing more (everything written, every publish
    /// answered), answered with one [`Incoming::Reply`] once the broker has taken everything
    /// before it: AMQP's `connection.close`, without which RabbitMQ drops the publishes a
    /// channel had read but not yet routed when the connection ends. Empty: nothing to say.
    fn goodbye(&self) -> &[u8] {
        b""
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
    /// No framing (a broker that frames its publishes otherwise: Kafka's batches).
    pub fn none() -> PublishFrame {
        PublishFrame {
            prefix: Vec::new(),
            id_at: None,
            suffix: b"",
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
