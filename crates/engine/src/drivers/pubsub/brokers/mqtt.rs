//! MQTT 3.1.1 and 5 ([`wire::mqtt`]): `PUBLISH` and `SUBSCRIBE` at QoS 0 or 1 (at 1, each
//! publish answered by a PUBACK and each delivery acknowledged with one), shared subscriptions
//! as `$share/` filters.
use crate::drivers::pubsub::client::BrokerClient;
use crate::drivers::pubsub::protocol::{AckId, BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::wire::mqtt;
use msgbench_model::pubsub::PubsubConfig;

/// MQTT, of version 3.1.1 or (`v5`) 5.
pub struct Mqtt {
    /// MQTT 5.
    pub v5: bool,
}

impl BrokerProtocol for Mqtt {
    fn name(&self) -> &'static str {
        if self.v5 {
            "mqtt5"
        } else {
            "mqtt"
        }
    }

    fn hello(&self, hello: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        // Client ids are unique per broker: two runs (or two processes) must not take over
        // each other's connections.
        let id = format!("msgbench-{}-{}", std::process::id(), hello.name);
        let login = hello.auth.and_then(|a| {
            let user = a.user.as_deref()?;
            Some((user, a.password.as_ref().map(|p| p.expose())))
        });
        mqtt::connect(&id, self.v5, login, out);
        Ok(())
    }

    fn subscribe(&self, topic: &str, group: Option<&str>, sid: u64, qos: u8, out: &mut Vec<u8>) {
        let filter = match group {
            Some(g) => format!("$share/{g}/{topic}"),
            None => topic.to_string(),
        };
        mqtt::subscribe(&filter, qos, (sid % 65_535 + 1) as u16, self.v5, out);
    }

    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        let Some((packet, used)) = mqtt::decode(buf, self.v5).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let incoming = match packet {
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
            mqtt::Packet::Disconnect(_) => Incoming::Error(b"the broker sent DISCONNECT (MQTT 5)"),
        };
        Ok(Some((incoming, used)))
    }

    fn ack(&self, id: AckId<'_>, out: &mut Vec<u8>) {
        if let AckId::Packet(id) = id {
            mqtt::puback(id, out);
        }
    }
}

impl BrokerClient for Mqtt {
    fn publish_frame(&self, config: &PubsubConfig, topic: &str, _: Option<&str>) -> PublishFrame {
        let size = config.message_bytes as usize;
        let prefix = mqtt::publish_prefix(topic, config.qos, size, self.v5);
        PublishFrame {
            // MQTT 5's empty properties block follows the id.
            id_at: (config.qos > 0).then(|| prefix.len() - 2 - usize::from(self.v5)),
            prefix,
            suffix: b"",
        }
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}
