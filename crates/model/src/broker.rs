//! The brokers msgbench speaks, on the model's ground floor (it imports nothing of the
//! crate): each one's name in scenario files, its title, its usual port and how to start one.
//! One table, read by validation, `import omb`, the CLI and the engine's registry
//! (`drivers::pubsub::brokers`); adding a broker is a variant here and its row.
use serde::{Deserialize, Serialize};

/// A broker and its publish/subscribe mechanism.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Broker {
    /// NATS core: PUB and SUB (queue groups for shared subscriptions); at most once.
    #[default]
    Nats,
    /// Redis Pub/Sub: PUBLISH and SUBSCRIBE; at most once, no shared subscriptions.
    Redis,
    /// MQTT 3.1.1: PUBLISH and SUBSCRIBE at QoS 0 or 1.
    Mqtt,
    /// MQTT 5: the same, with version 5's packets (properties, reason codes).
    Mqtt5,
    /// Apache Kafka: Produce requests (a batch of records per request, `acks`), Fetch from the
    /// end of each partition; shared subscriptions split the partitions.
    Kafka,
    /// Redis Streams: `XADD` (answered with the entry's id), a consumer group per
    /// subscription read with `XREADGROUP` and acknowledged with `XACK`; shared subscriptions
    /// are consumers of one group.
    RedisStreams,
    /// NATS JetStream: a stream per topic, publishes answered by the stream (PubAck), a
    /// durable push consumer per subscription (shared: a deliver group), every delivery
    /// acknowledged (`ack_policy: explicit`).
    Jetstream,
    /// RabbitMQ (AMQP 0.9.1): each topic an exchange, each subscription a queue bound to it
    /// (classic, quorum or stream), publisher confirms when asked, consumers with a prefetch,
    /// manual or automatic acknowledgement.
    Rabbitmq,
}

/// What the rest of msgbench knows of a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Its name in scenario files and on the command line.
    pub name: &'static str,
    /// Its name for people.
    pub title: &'static str,
    /// The port it listens on unless told otherwise.
    pub default_port: u16,
    /// How to start one on `PORT`, for the error when nothing listens.
    pub hint: &'static str,
}

/// Every broker's row, in [`Broker::ALL`]'s order.
const TABLE: [BrokerInfo; 8] = [
    BrokerInfo {
        name: "nats",
        title: "NATS core",
        default_port: 4222,
        hint: "(start one with `nats-server -a 127.0.0.1 -p PORT`, or let the scenario start it: `[sut] command = \"exec nats-server -a 127.0.0.1 -p PORT\"`)",
    },
    BrokerInfo {
        name: "redis",
        title: "Redis Pub/Sub",
        default_port: 6379,
        hint: REDIS_HINT,
    },
    BrokerInfo {
        name: "mqtt",
        title: "MQTT 3.1.1",
        default_port: 1883,
        hint: MQTT_HINT,
    },
    BrokerInfo {
        name: "mqtt5",
        title: "MQTT 5",
        default_port: 1883,
        hint: MQTT_HINT,
    },
    BrokerInfo {
        name: "kafka",
        title: "Apache Kafka",
        default_port: 9092,
        hint: "(start one with `bash scripts/kafka-broker.sh PORT` from msgbench's folder, or let the scenario start it: `[sut] command = \"exec bash scripts/kafka-broker.sh PORT\"`)",
    },
    BrokerInfo {
        name: "redis-streams",
        title: "Redis Streams",
        default_port: 6379,
        hint: REDIS_HINT,
    },
    BrokerInfo {
        name: "jetstream",
        title: "NATS JetStream",
        default_port: 4222,
        hint: "(start one with `nats-server -js -a 127.0.0.1 -p PORT`, or let the scenario start it: `[sut] command = \"exec nats-server -js -a 127.0.0.1 -p PORT\"`)",
    },
    BrokerInfo {
        name: "rabbitmq",
        title: "RabbitMQ",
        default_port: 5672,
        hint: "(start one with `bash scripts/rabbitmq-server.sh PORT` from msgbench's folder, or let the scenario start it: `[sut] command = \"exec bash scripts/rabbitmq-server.sh PORT\"`)",
    },
];

const REDIS_HINT: &str = "(start one with `redis-server --port PORT`, or let the scenario start it: `[sut] command = \"exec redis-server --port PORT\"`)";
const MQTT_HINT: &str = "(start one with `mosquitto -p PORT`, or let the scenario start it: `[sut] command = \"exec mosquitto -p PORT\"`)";

impl Broker {
    /// Every broker msgbench speaks.
    pub const ALL: [Broker; 8] = [
        Broker::Nats,
        Broker::Redis,
        Broker::Mqtt,
        Broker::Mqtt5,
        Broker::Kafka,
        Broker::RedisStreams,
        Broker::Jetstream,
        Broker::Rabbitmq,
    ];

    /// Its row.
    pub fn info(self) -> &'static BrokerInfo {
        &TABLE[self as usize]
    }

    /// The broker named `name` in scenario files.
    pub fn from_name(name: &str) -> Option<Broker> {
        Broker::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Every broker's name, for messages and the command line.
    pub fn names() -> [&'static str; 8] {
        Broker::ALL.map(|b| b.name())
    }

    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Its name for people.
    pub fn title(self) -> &'static str {
        self.info().title
    }

    /// How to start one on `port`, for the error when nothing listens.
    pub fn hint(self) -> &'static str {
        self.info().hint
    }

    /// `127.0.0.1:` its usual port.
    pub fn default_address(self) -> String {
        format!("127.0.0.1:{}", self.info().default_port)
    }

    /// Its messages are kept in a stream until removed by the stream's bound (Redis Streams,
    /// JetStream).
    pub fn is_stream(self) -> bool {
        matches!(self, Broker::RedisStreams | Broker::Jetstream)
    }

    /// MQTT, of either version.
    pub fn is_mqtt(self) -> bool {
        matches!(self, Broker::Mqtt | Broker::Mqtt5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_broker_has_its_own_row_and_its_scenario_name_is_its_serde_name() {
        for (i, b) in Broker::ALL.into_iter().enumerate() {
            assert_eq!(b as usize, i, "ALL is in declaration order");
            let serde = serde_json::to_string(&b).unwrap();
            assert_eq!(serde, format!("\"{}\"", b.name()));
            assert_eq!(Broker::from_name(b.name()), Some(b));
        }
        assert_eq!(Broker::from_name("amqp"), None);
    }
}
