//! NATS core: `PUB` and `SUB` ([`wire::nats`]), shared subscriptions as queue groups; at most
//! once, nothing answered. JetStream ([`super::jetstream`]) speaks the same protocol.
use crate::drivers::pubsub::client::BrokerClient;
use crate::drivers::pubsub::protocol::{AckId, BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::wire::nats;
use msgbench_model::pubsub::PubsubConfig;

/// NATS core.
pub struct Nats;

impl BrokerProtocol for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn hello(&self, hello: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        nats::connect(hello, false, out)
    }

    fn greeting(&self) -> Option<&'static [u8]> {
        Some(b"INFO")
    }

    fn subscribe(&self, topic: &str, group: Option<&str>, sid: u64, _qos: u8, out: &mut Vec<u8>) {
        subscribe(topic, group, sid, out);
    }

    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        decode(buf, false)
    }

    fn pong(&self) -> &'static [u8] {
        nats::PONG
    }
}

impl BrokerClient for Nats {
    fn publish_frame(
        &self,
        config: &PubsubConfig,
        topic: &str,
        inbox: Option<&str>,
    ) -> PublishFrame {
        publish_frame(config, topic, inbox)
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}

/// A subscription, answered by the `PONG` of a `PING` sent after it (NATS confirms nothing
/// else).
pub fn subscribe(topic: &str, group: Option<&str>, sid: u64, out: &mut Vec<u8>) {
    nats::subscribe(topic, group, sid, out);
    out.extend_from_slice(b"PING\r\n");
}

/// `PUB topic [inbox] size`, the payload, `\r\n`.
pub fn publish_frame(config: &PubsubConfig, topic: &str, inbox: Option<&str>) -> PublishFrame {
    PublishFrame {
        prefix: nats::publish_prefix(topic, inbox, config.message_bytes as usize),
        id_at: None,
        suffix: nats::PUBLISH_SUFFIX,
    }
}

/// What a NATS server sent, as the threads act on it; `acks`: deliveries carry a reply
/// subject to acknowledge (JetStream).
pub fn decode(buf: &[u8], acks: bool) -> Result<Option<(Incoming<'_>, usize)>, String> {
    let Some((op, used)) = nats::decode(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
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
            ack: reply.filter(|_| acks).map(AckId::Subject),
        },
        nats::ServerOp::Ping => Incoming::Ping,
        nats::ServerOp::Err(text) => Incoming::Error(text),
        nats::ServerOp::Pong => Incoming::Reply,
        nats::ServerOp::Info(_) | nats::ServerOp::Ok => Incoming::Other,
    };
    Ok(Some((incoming, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_operations_map_to_what_the_driver_acts_on() {
        let (m, _) = Nats.decode(b"MSG t.0 1 2\r\nab\r\n").unwrap().unwrap();
        assert_eq!(
            m,
            Incoming::Message {
                payload: b"ab",
                ack: None
            }
        );
        let (p, _) = Nats.decode(b"PING\r\n").unwrap().unwrap();
        assert_eq!(p, Incoming::Ping);
        let (e, _) = Nats.decode(b"-ERR 'Slow Consumer'\r\n").unwrap().unwrap();
        assert_eq!(e, Incoming::Error(b"Slow Consumer"));
        assert!(Nats.decode(b"*3\r\n").is_err());
    }
}
