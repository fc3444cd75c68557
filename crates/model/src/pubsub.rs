//! The `[pubsub]` section: publish/subscribe through a message broker ([`PubsubSpec`] →
//! [`PubsubConfig`]). Publishers × subscriptions × topics, as the OpenMessaging Benchmark lays
//! them out: `publishers_per_topic` publishers on each topic, `subscriptions_per_topic`
//! subscriptions of each topic (each gets every message: fan-out), each subscription read by
//! `consumers_per_subscription` connections (more than one: a shared subscription, each message
//! to one of them). Every message carries its publisher, its sequence number and its intended
//! publish time; its end-to-end latency is receipt − intended publish time.
pub use crate::broker::Broker;
use crate::check::{check_address, Invalid, ScenarioError, MAX_DURATION};
use crate::duration::serde_text;
use crate::pacing::{Pacing, PacingSpec};
use crate::ticks::CostWork;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Bytes of the header every message starts with: intended publish time, sequence number,
/// publisher, magic.
pub const HEADER_BYTES: u32 = 24;
/// Largest message: NATS's default `max_payload` (1 MiB).
pub const MAX_MESSAGE_BYTES: u32 = 1 << 20;
/// Most connections (publishers + consumers) one run opens.
pub const MAX_CONNECTIONS: u64 = 10_000;

/// The `[pubsub]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PubsubSpec {
    /// Which broker, and which of its ways to publish and subscribe: `nats` (NATS core
    /// publish/subscribe; shared subscriptions are queue groups), `redis` (Redis Pub/Sub:
    /// PUBLISH and SUBSCRIBE), `mqtt` (MQTT 3.1.1, e.g. Mosquitto; shared subscriptions are
    /// `$share/` filters), `mqtt5` (the same in MQTT 5), `kafka`, `redis-streams` (Redis
    /// Streams: XADD, XREADGROUP and XACK; a subscription is a consumer group) or `jetstream`
    /// (NATS JetStream: a stream per topic, a push consumer per subscription, every publish
    /// and delivery acknowledged).
    pub broker: Broker,
    /// MQTT's quality of service, for publishing and subscribing: 0 (at most once) or 1 (at
    /// least once: the broker acknowledges each publish, each delivery is acknowledged).
    pub qos: u8,
    /// Kafka's `acks`: how many replicas hold a publish before the broker answers it — `"0"`
    /// (no answer at all), `"1"` (the leader's log) or `"all"` (every in-sync replica).
    pub acks: Acks,
    /// Kafka: partitions per topic (a topic the run creates gets them; an existing topic must
    /// have them). A publisher fills its partitions in turn, one request's batch each;
    /// order holds within a partition only.
    pub partitions: u32,
    /// Redis Streams and JetStream: the most messages a topic's stream keeps (older ones are
    /// removed: Redis's `XADD … MAXLEN ~`, JetStream's `max_msgs` with `discard: old`). A
    /// subscription that falls further behind loses what was removed: counted as dropped.
    pub stream_max_messages: u64,
    /// `host:port` of the broker.
    pub address: String,
    /// `host:port` per broker, for a scenario that compares brokers (a sweep over
    /// `pubsub.broker`): `{ nats = "127.0.0.1:4222", redis = "127.0.0.1:6379" }`. The
    /// broker's entry, when there is one, is used instead of `address`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, String>,
    /// `host:port` the subscriptions' connections go to, when not `address`: another server of
    /// the broker's cluster (NATS routes, a JetStream or Redis cluster), so every message
    /// crosses the route between them and its latency shows what the route costs. Not for
    /// Kafka or Redis Streams, whose consumers read where the data lives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_address: Option<String>,
    /// Number of topics (NATS subjects, Redis channels): `<topic_prefix>.<n>`.
    pub topics: u32,
    /// Names of the topics start with it; letters, digits, `-` and `_` only.
    pub topic_prefix: String,
    /// Publisher connections per topic; the pacing's rate is split evenly over all publishers.
    pub publishers_per_topic: u32,
    /// Subscriptions per topic: each one gets every message of its topic.
    pub subscriptions_per_topic: u32,
    /// Connections reading one subscription: above 1, the subscription is shared (NATS queue
    /// group) and each message goes to one of them.
    pub consumers_per_subscription: u32,
    /// Bytes of each message, its 24-byte header included.
    pub message_bytes: u32,
    /// Threads that publish (publishers are spread over them).
    pub publisher_threads: u32,
    /// Threads that read the subscriptions at full speed.
    pub subscriber_threads: u32,
    /// How many subscriptions of each topic are slow: they spend `slow_cost` per message, on a
    /// thread of their own, next to the fast ones.
    pub slow_subscriptions: u32,
    /// What a slow subscription spends per message.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub slow_cost: Duration,
    /// How a slow subscription spends it: `busy` (spins) or `sleep`.
    pub slow_work: CostWork,
    /// Bytes a publisher may hold that its socket has not taken yet; when the broker reads
    /// slower than the schedule, publishing waits (the wait counts in the latency of what
    /// waits: `block`).
    pub max_unsent_bytes: u32,
    /// `SO_RCVBUF` of each consumer connection, bytes (0: the OS default, which grows to
    /// megabytes): a small one makes a slow subscription's backlog wait in the broker, where
    /// its limits apply, rather than in this host's kernel.
    pub receive_buffer: u32,
    /// Longest the opening (the broker's preparation, each connection's handshake and
    /// subscription) may go without a new connection opened: past it — a broker that answers,
    /// but a byte at a time — every connection of the opening is shut and the run fails.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub open_timeout: Duration,
    /// Kafka's own settings: `[pubsub.kafka] acks`, `partitions`.
    #[serde(skip_serializing_if = "is_default")]
    pub kafka: KafkaOptions,
    /// MQTT's own settings: `[pubsub.mqtt] qos`.
    #[serde(skip_serializing_if = "is_default")]
    pub mqtt: MqttOptions,
    /// The stream brokers' own settings (Redis Streams, JetStream): `[pubsub.stream]
    /// max_messages`.
    #[serde(skip_serializing_if = "is_default")]
    pub stream: StreamOptions,
    /// RabbitMQ's own settings: `[pubsub.rabbitmq] exchange_type`, `queue_type`, `confirms`,
    /// `prefetch`, `ack`, `persistent`.
    #[serde(skip_serializing_if = "is_default")]
    pub rabbitmq: crate::rabbitmq::RabbitmqOptions,
    /// Who msgbench is to a broker that asks: `[pubsub.auth] user`, and the password or token
    /// from an environment variable or a file (`password_env`, `password_file`, `token_env`,
    /// `token_file`), never from the scenario.
    #[serde(skip_serializing_if = "crate::broker_auth::AuthSpec::is_empty")]
    pub auth: crate::broker_auth::AuthSpec,
    /// TLS to the broker, on when the section is there: `[pubsub.tls] ca_file`, `insecure`,
    /// `server_name`, `cert_file` and `key_file` (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::broker_tls::BrokerTlsSpec>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// `[pubsub.kafka]`: Kafka's own settings (read also as `pubsub.acks` and `pubsub.partitions`,
/// their names before brokers had sections: give each once).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaOptions {
    /// See `pubsub.acks`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acks: Option<Acks>,
    /// See `pubsub.partitions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// How each published batch is compressed, as a producer's `compression.type`: `"none"`
    /// (the default), `"gzip"`, `"snappy"`, `"lz4"` or `"zstd"`. Compressed batches of any
    /// producer are read whatever this says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
}

/// A Kafka record batch's compression (its attributes' low three bits).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Uncompressed.
    #[default]
    None,
    /// gzip (DEFLATE).
    Gzip,
    /// Snappy, in the xerial framing Kafka's producers write.
    Snappy,
    /// LZ4, in LZ4's frame format.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// Every codec, in Kafka's order (its attribute value).
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Its name, as `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Its value in a record batch's attributes.
    pub fn attribute(self) -> i16 {
        self as i16
    }

    /// The codec of a batch's attributes (`None`: a value Kafka does not define).
    pub fn of_attributes(attributes: i16) -> Option<Compression> {
        Compression::ALL.get((attributes & 0x07) as usize).copied()
    }
}

/// `[pubsub.mqtt]`: MQTT's own settings (`mqtt` and `mqtt5`; `qos` read also as `pubsub.qos`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MqttOptions {
    /// See `pubsub.qos`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<u8>,
}

/// `[pubsub.stream]`: the stream brokers' own settings (`redis-streams`, `jetstream`;
/// `max_messages` read also as `pubsub.stream_max_messages`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StreamOptions {
    /// See `pubsub.stream_max_messages`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u64>,
}

impl Default for PubsubSpec {
    fn default() -> Self {
        PubsubSpec {
            broker: Broker::Nats,
            qos: 0,
            acks: Acks::Leader,
            partitions: 1,
            stream_max_messages: DEFAULT_STREAM_MAX_MESSAGES,
            address: Broker::Nats.default_address(),
            addresses: BTreeMap::new(),
            subscriber_address: None,
            topics: 1,
            topic_prefix: "msgbench".into(),
            publishers_per_topic: 1,
            subscriptions_per_topic: 1,
            consumers_per_subscription: 1,
            message_bytes: 256,
            publisher_threads: 1,
            subscriber_threads: 1,
            slow_subscriptions: 0,
            slow_cost: Duration::ZERO,
            slow_work: CostWork::Busy,
            max_unsent_bytes: 1 << 20,
            receive_buffer: 0,
            open_timeout: Duration::from_secs(30),
            kafka: KafkaOptions::default(),
            mqtt: MqttOptions::default(),
            stream: StreamOptions::default(),
            rabbitmq: crate::rabbitmq::RabbitmqOptions::default(),
            auth: crate::broker_auth::AuthSpec::default(),
            tls: None,
        }
    }
}

/// Flat keys read from a broker's section, with the key as written there.
type Moved = Vec<(&'static str, &'static str)>;

/// Messages a stream keeps by default (Redis Streams, JetStream).
pub const DEFAULT_STREAM_MAX_MESSAGES: u64 = 1_000_000;
/// Most messages a stream may be told to keep.
pub const MAX_STREAM_MAX_MESSAGES: u64 = 1_000_000_000;

/// Kafka's `acks` setting of a producer: `"0"`, `"1"` or `"all"` (the integers 0, 1 and -1
/// too, as Kafka's own configuration writes them).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(try_from = "AcksText")]
pub enum Acks {
    /// No answer: a publish is done once written.
    #[serde(rename = "0")]
    None,
    /// The leader appended it to its log.
    #[default]
    #[serde(rename = "1")]
    Leader,
    /// Every in-sync replica has it.
    #[serde(rename = "all")]
    All,
}

/// What a scenario may write for [`Acks`].
#[derive(Deserialize)]
#[serde(untagged)]
enum AcksText {
    Number(i64),
    Text(String),
}

impl TryFrom<AcksText> for Acks {
    type Error = String;
    fn try_from(t: AcksText) -> Result<Acks, String> {
        match t {
            AcksText::Number(0) => Ok(Acks::None),
            AcksText::Number(1) => Ok(Acks::Leader),
            AcksText::Number(-1) => Ok(Acks::All),
            AcksText::Text(s) if s == "0" => Ok(Acks::None),
            AcksText::Text(s) if s == "1" => Ok(Acks::Leader),
            AcksText::Text(s) if s == "all" || s == "-1" => Ok(Acks::All),
            AcksText::Number(n) => Err(format!("acks {n} is not Kafka's: give 0, 1 or \"all\"")),
            AcksText::Text(s) => Err(format!("acks \"{s}\" is not Kafka's: give 0, 1 or \"all\"")),
        }
    }
}

impl Acks {
    /// Its value in a Produce request.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        }
    }
}

/// One subscription of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// `t0-s1`: topic 0, subscription 1.
    pub name: String,
    /// Its run-wide index, in plan order (topic by topic).
    pub index: u32,
    /// Its topic's index.
    pub topic: u32,
    /// Spends `slow_cost` per message.
    pub slow: bool,
}

/// The validated `[pubsub]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct PubsubConfig {
    /// The broker.
    pub broker: Broker,
    /// MQTT's quality of service (0 elsewhere).
    pub qos: u8,
    /// Kafka's acks.
    pub acks: Acks,
    /// Kafka's partitions per topic (1 elsewhere).
    pub partitions: u32,
    /// Kafka: how published batches are compressed.
    pub compression: Compression,
    /// Redis Streams and JetStream: messages a topic's stream keeps.
    pub stream_max_messages: u64,
    /// RabbitMQ's settings (their defaults for another broker).
    pub rabbitmq: crate::rabbitmq::RabbitmqConfig,
    /// Its `host:port`.
    pub address: String,
    /// Where the subscriptions' connections go (`None`: `address`).
    pub subscriber_address: Option<String>,
    /// Topic names, by index.
    pub topics: Vec<String>,
    /// Publishers per topic.
    pub publishers_per_topic: u32,
    /// Subscriptions per topic.
    pub subscriptions_per_topic: u32,
    /// Consumers per subscription.
    pub consumers_per_subscription: u32,
    /// Bytes per message.
    pub message_bytes: u32,
    /// Publishing threads.
    pub publisher_threads: u32,
    /// Fast subscriber threads.
    pub subscriber_threads: u32,
    /// Slow subscriptions per topic.
    pub slow_subscriptions: u32,
    /// Cost per message of a slow subscription, ns.
    pub slow_cost_ns: u64,
    /// How it is spent.
    pub slow_work: CostWork,
    /// Unsent bytes a publisher may hold.
    pub max_unsent_bytes: u32,
    /// `SO_RCVBUF` of each consumer connection (0: the OS default).
    pub receive_buffer: u32,
    /// Longest the opening may go without a new connection.
    pub open_timeout: Duration,
    /// Credentials for a broker that asks (`None`: none sent).
    pub auth: Option<crate::broker_auth::Credentials>,
    /// TLS to the broker (`None`: plain TCP).
    pub tls: Option<crate::broker_tls::BrokerTls>,
    /// Each publisher's pacing (the scenario's, its rate split over the publishers).
    pub publisher_pacing: Pacing,
    /// Which shard of the run this process is (`--shard`): it opens the publishers and the
    /// subscriptions whose run-wide index `g` has `g % count == index` (see
    /// [`crate::shard`]); the whole run unsharded.
    pub shard: crate::shard::Shard,
}

impl PubsubConfig {
    /// Every publisher, as its topic's index (publisher `p` publishes on `topic_of[p]`).
    pub fn publishers(&self) -> Vec<u32> {
        (0..self.topics.len() as u32)
            .flat_map(|t| std::iter::repeat_n(t, self.publishers_per_topic as usize))
            .collect()
    }

    /// This process's subscriptions: those it reads with at least one consumer (every one,
    /// unsharded), topic by topic; the first `slow_subscriptions` of each topic are slow.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.all_subscriptions()
            .into_iter()
            .filter(|s| !self.local_consumers(s).is_empty())
            .collect()
    }

    /// Every subscription of the run, whatever the shard.
    pub fn all_subscriptions(&self) -> Vec<Subscription> {
        let per_topic = self.subscriptions_per_topic;
        (0..self.topics.len() as u32)
            .flat_map(|t| {
                (0..per_topic).map(move |s| Subscription {
                    name: format!("t{t}-s{s}"),
                    index: t * per_topic + s,
                    topic: t,
                    slow: s < self.slow_subscriptions,
                })
            })
            .collect()
    }

    /// Which of `sub`'s consumers (`0..consumers_per_subscription`) this process opens: those
    /// whose run-wide consumer index `sub.index × consumers_per_subscription + k` is this
    /// shard's — a shared subscription's consumers spread over the shards — but Kafka's,
    /// whose consumer group is joined in one exchange, stay together in the shard of their
    /// subscription's index.
    pub fn local_consumers(&self, sub: &Subscription) -> Vec<u32> {
        let (per, shard) = (self.consumers_per_subscription, self.shard);
        if self.broker == Broker::Kafka {
            let mine = shard.holds(u64::from(sub.index));
            return if mine { (0..per).collect() } else { Vec::new() };
        }
        (0..per)
            .filter(|&k| shard.holds(u64::from(sub.index) * u64::from(per) + u64::from(k)))
            .collect()
    }

    /// This process's publishers, as their run-wide indices (every one, unsharded).
    pub fn local_publishers(&self) -> Vec<u32> {
        (0..self.publishers().len() as u32)
            .filter(|&g| self.shard.holds(u64::from(g)))
            .collect()
    }

    /// What this process opens of the run's connections, and the run's: (its publishers and
    /// consumers, all of them).
    pub fn shard_connections(&self) -> (usize, usize) {
        let consumers: usize = (self.all_subscriptions().iter())
            .map(|s| self.local_consumers(s).len())
            .sum();
        let per = self.consumers_per_subscription as usize;
        let all = self.publishers().len() + self.all_subscriptions().len() * per;
        (self.local_publishers().len() + consumers, all)
    }

    /// Makes this process shard `shard` of the run; refused when a shard would be left
    /// without a publisher or a consumer.
    pub fn set_shard(&mut self, shard: crate::shard::Shard) -> Result<(), String> {
        let publishers = self.publishers().len();
        let (consumers, what) = match self.broker {
            // Kafka's consumers of a subscription stay together: a shard takes subscriptions.
            Broker::Kafka => (self.all_subscriptions().len(), "subscription(s)"),
            _ => (
                self.all_subscriptions().len() * self.consumers_per_subscription as usize,
                "consumer(s)",
            ),
        };
        let most = publishers.min(consumers);
        if shard.count as usize > most {
            return Err(format!(
                "--shard {shard}: the run has {publishers} publisher(s) and {consumers} {what}, and each shard takes at least one of each, so it splits into at most {most} shard(s); run fewer shards, or more publishers (publishers_per_topic) and subscriptions (subscriptions_per_topic)"
            ));
        }
        self.shard = shard;
        Ok(())
    }

    /// What subscription `sub` spends per message, ns (0 but for a slow one).
    pub fn cost_ns(&self, sub: &Subscription) -> u64 {
        if sub.slow {
            self.slow_cost_ns
        } else {
            0
        }
    }

    /// The broker answers every publish: Redis (PUBLISH's reply, XADD's id), MQTT at QoS 1
    /// (PUBACK), Kafka at acks 1 or all, JetStream (its PubAck).
    pub fn answers_publishes(&self) -> bool {
        match self.broker {
            Broker::Nats => false,
            Broker::Redis => true,
            Broker::Mqtt | Broker::Mqtt5 => self.qos > 0,
            Broker::Kafka => self.acks != Acks::None,
            Broker::RedisStreams | Broker::Jetstream => true,
            Broker::Rabbitmq => self.rabbitmq.confirms,
        }
    }

    /// The operation classes: end-to-end latency of the fast subscriptions, and of the slow
    /// ones when there are.
    pub fn class_names(&self) -> Vec<String> {
        let mut names = vec!["subscriber".to_string()];
        if self.slow_subscriptions > 0 {
            names.push("slow-subscriber".into());
        }
        names
    }

    /// One line with every setting, in scenario-file spelling (a shard's the same: the
    /// shards of one run describe one run).
    pub fn describe(&self) -> String {
        let broker = match self.broker {
            Broker::Mqtt | Broker::Mqtt5 => format!("{} qos={}", self.broker.name(), self.qos),
            Broker::Kafka => format!(
                "kafka acks={} partitions={}",
                self.acks.name(),
                self.partitions
            ),
            Broker::RedisStreams | Broker::Jetstream => format!(
                "{} stream_max_messages={}",
                self.broker.name(),
                self.stream_max_messages
            ),
            Broker::Rabbitmq => format!("rabbitmq {}", self.rabbitmq.describe()),
            other => other.name().to_string(),
        };
        let mut s = format!(
            "pubsub {} {} topics={} publishers_per_topic={} subscriptions_per_topic={} consumers_per_subscription={} message_bytes={}",
            broker,
            self.address,
            self.topics.len(),
            self.publishers_per_topic,
            self.subscriptions_per_topic,
            self.consumers_per_subscription,
            self.message_bytes
        );
        if self.slow_subscriptions > 0 {
            s += &format!(
                " slow_subscriptions={} slow_cost={}",
                self.slow_subscriptions,
                crate::duration::format(Duration::from_nanos(self.slow_cost_ns))
            );
        }
        if self.compression != Compression::None {
            s += &format!(" compression={}", self.compression.name());
        }
        if let Some(at) = &self.subscriber_address {
            s += &format!(" subscriber_address={at}");
        }
        if let Some(tls) = &self.tls {
            s += match (tls.insecure, tls.client_cert.is_some()) {
                (true, _) => " tls=insecure",
                (false, true) => " tls=mutual",
                (false, false) => " tls",
            };
        }
        if let Some(auth) = &self.auth {
            s += &format!(" auth={}", auth.method());
        }
        s
    }
}

impl PubsubSpec {
    /// Checks the section against the scenario's pacing. A broker's own settings may be given
    /// in its section (`[pubsub.kafka]`, `[pubsub.mqtt]`, `[pubsub.stream]`) or by their flat
    /// names (`pubsub.acks`, …), once; a refusal names the key as it was written.
    pub fn validate(
        &self,
        pacing_spec: &PacingSpec,
        invalid: &Invalid,
    ) -> Result<PubsubConfig, ScenarioError> {
        let (spec, moved) = self.grouped(invalid)?;
        spec.validate_flat(pacing_spec, invalid).map_err(|mut e| {
            if let ScenarioError::Invalid { field, .. } = &mut e {
                if let Some((_, grouped)) = moved.iter().find(|(flat, _)| flat == field) {
                    *field = grouped.to_string();
                }
            }
            e
        })
    }

    /// This section with its brokers' sections read into the flat keys the checks name, and
    /// which flat key came from which section.
    fn grouped(&self, invalid: &Invalid) -> Result<(PubsubSpec, Moved), ScenarioError> {
        let (mut spec, mut moved, d) = (self.clone(), Vec::new(), PubsubSpec::default());
        let mut take = |flat: &'static str, given: bool, grouped: &'static str| {
            if given {
                return Err(invalid(
                    grouped,
                    format!("is given, and so is {flat}"),
                    &format!("give it once: as {grouped} (the broker's section; {flat} is its older flat name)"),
                ));
            }
            moved.push((flat, grouped));
            Ok(())
        };
        if let Some(qos) = self.mqtt.qos {
            take("pubsub.qos", self.qos != d.qos, "pubsub.mqtt.qos")?;
            spec.qos = qos;
        }
        if let Some(acks) = self.kafka.acks {
            take("pubsub.acks", self.acks != d.acks, "pubsub.kafka.acks")?;
            spec.acks = acks;
        }
        if let Some(partitions) = self.kafka.partitions {
            take(
                "pubsub.partitions",
                self.partitions != d.partitions,
                "pubsub.kafka.partitions",
            )?;
            spec.partitions = partitions;
        }
        if let Some(max) = self.stream.max_messages {
            let given = self.stream_max_messages != d.stream_max_messages;
            take(
                "pubsub.stream_max_messages",
                given,
                "pubsub.stream.max_messages",
            )?;
            spec.stream_max_messages = max;
        }
        Ok((spec, moved))
    }

    /// [`PubsubSpec::validate`] on the flat keys.
    fn validate_flat(
        &self,
        pacing_spec: &PacingSpec,
        invalid: &Invalid,
    ) -> Result<PubsubConfig, ScenarioError> {
        let address = self.checked_address(invalid)?;
        let publishers = self.checked_counts(invalid)?;
        // Kafka's own bound first: one message, one answer.
        self.check_kafka(invalid)?;
        self.check_stream(invalid)?;
        if !(HEADER_BYTES..=MAX_MESSAGE_BYTES).contains(&self.message_bytes) {
            return Err(invalid(
                "pubsub.message_bytes",
                format!("is {}", self.message_bytes),
                &format!("give {HEADER_BYTES} to {MAX_MESSAGE_BYTES} bytes (each message carries a {HEADER_BYTES}-byte header)"),
            ));
        }
        self.check_broker_rules(invalid)?;
        self.check_slow(invalid)?;
        let least = self.message_bytes.saturating_mul(2).max(4096);
        if self.max_unsent_bytes < least {
            return Err(invalid(
                "pubsub.max_unsent_bytes",
                format!(
                    "is {} with {}-byte messages",
                    self.max_unsent_bytes, self.message_bytes
                ),
                &format!("give at least {least} (4096 bytes and two messages' worth)"),
            ));
        }
        let publisher_pacing = self.publisher_pacing(pacing_spec, publishers, invalid)?;
        Ok(PubsubConfig {
            broker: self.broker,
            qos: self.qos,
            acks: self.acks,
            partitions: self.partitions,
            compression: self.kafka.compression.unwrap_or_default(),
            stream_max_messages: self.stream_max_messages,
            rabbitmq: self.rabbitmq.validate(self.broker, invalid)?,
            address: address.to_string(),
            subscriber_address: self.checked_subscriber_address(invalid)?,
            topics: (0..self.topics)
                .map(|t| format!("{}.{t}", self.topic_prefix))
                .collect(),
            publishers_per_topic: self.publishers_per_topic,
            subscriptions_per_topic: self.subscriptions_per_topic,
            consumers_per_subscription: self.consumers_per_subscription,
            message_bytes: self.message_bytes,
            publisher_threads: self.publisher_threads.min(publishers as u32),
            subscriber_threads: self.subscriber_threads,
            slow_subscriptions: self.slow_subscriptions,
            slow_cost_ns: self.slow_cost.as_nanos() as u64,
            slow_work: self.slow_work,
            max_unsent_bytes: self.max_unsent_bytes,
            receive_buffer: self.receive_buffer,
            open_timeout: self.open_timeout,
            auth: self.auth.validate(self.broker, invalid)?,
            tls: match &self.tls {
                Some(tls) => Some(tls.validate("pubsub.tls", address, invalid)?),
                None => None,
            },
            publisher_pacing,
            shard: crate::shard::Shard::WHOLE,
        })
    }
}

impl PubsubSpec {
    /// The broker's address: its entry of `addresses`, else `address`; every key of
    /// `addresses` a broker's name.
    fn checked_address(&self, invalid: &Invalid) -> Result<&str, ScenarioError> {
        for name in self.addresses.keys() {
            if !Broker::ALL.iter().any(|b| b.name() == name) {
                return Err(invalid(
                    &format!("pubsub.addresses.{name}"),
                    "names no broker msgbench speaks".into(),
                    &format!(
                        "key the addresses by broker: {}",
                        Broker::ALL.map(|b| b.name()).join(", ")
                    ),
                ));
            }
        }
        let (field, address) = match self.addresses.get(self.broker.name()) {
            Some(a) => (format!("pubsub.addresses.{}", self.broker.name()), a),
            None => ("pubsub.address".to_string(), &self.address),
        };
        check_address(&field, address, invalid)?;
        Ok(address)
    }

    /// `subscriber_address`: an address, for a broker whose subscriptions may read elsewhere.
    fn checked_subscriber_address(
        &self,
        invalid: &Invalid,
    ) -> Result<Option<String>, ScenarioError> {
        let Some(address) = &self.subscriber_address else {
            return Ok(None);
        };
        if matches!(self.broker, Broker::Kafka | Broker::RedisStreams) {
            return Err(invalid(
                "pubsub.subscriber_address",
                format!("is given with broker = \"{}\"", self.broker.name()),
                "its consumers read where the data lives (a partition's leader, the stream's node): take subscriber_address out",
            ));
        }
        check_address("pubsub.subscriber_address", address, invalid)?;
        Ok(Some(address.clone()))
    }

    /// Every count at least 1, the connections within [`MAX_CONNECTIONS`], the topic prefix a
    /// name: the number of publishers.
    fn checked_counts(&self, invalid: &Invalid) -> Result<u64, ScenarioError> {
        for (field, value) in [
            ("pubsub.topics", self.topics),
            ("pubsub.publishers_per_topic", self.publishers_per_topic),
            (
                "pubsub.subscriptions_per_topic",
                self.subscriptions_per_topic,
            ),
            (
                "pubsub.consumers_per_subscription",
                self.consumers_per_subscription,
            ),
            ("pubsub.publisher_threads", self.publisher_threads),
            ("pubsub.subscriber_threads", self.subscriber_threads),
        ] {
            if value == 0 {
                return Err(invalid(field, "is 0".into(), "give at least 1"));
            }
        }
        let publishers = u64::from(self.topics) * u64::from(self.publishers_per_topic);
        let consumers = u64::from(self.topics)
            * u64::from(self.subscriptions_per_topic)
            * u64::from(self.consumers_per_subscription);
        if publishers + consumers > MAX_CONNECTIONS {
            return Err(invalid(
                "pubsub.topics",
                format!("with its publishers and subscriptions makes {publishers} publisher and {consumers} consumer connections"),
                &format!("open at most {MAX_CONNECTIONS} connections in one run (fewer topics, publishers or subscriptions)"),
            ));
        }
        if self.topic_prefix.is_empty()
            || self.topic_prefix.len() > 200
            || !self
                .topic_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid(
                "pubsub.topic_prefix",
                format!("is {:?}", self.topic_prefix),
                "use 1 to 200 letters, digits, `-` or `_` (topics are named <prefix>.<n>)",
            ));
        }
        Ok(publishers)
    }

    /// What one broker cannot do: a shared subscription on Redis Pub/Sub, QoS 1 but on MQTT,
    /// QoS 2 anywhere.
    fn check_broker_rules(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        if self.consumers_per_subscription > 1 && self.broker == Broker::Redis {
            return Err(invalid(
                "pubsub.consumers_per_subscription",
                format!("is {} with broker = \"redis\"", self.consumers_per_subscription),
                "Redis Pub/Sub sends every message to every subscriber and has no shared subscription: set it to 1, or use broker = \"nats\" (queue groups) or \"mqtt\" ($share)",
            ));
        }
        if self.qos > 1 || (self.qos > 0 && !self.broker.is_mqtt()) {
            return Err(invalid(
                "pubsub.qos",
                format!("is {} with broker = \"{}\"", self.qos, self.broker.name()),
                if self.qos > 1 {
                    "give 0 (at most once) or 1 (at least once); msgbench does not speak QoS 2"
                } else {
                    "QoS 1 is MQTT's: use broker = \"mqtt\", or qos = 0 (NATS core and Redis Pub/Sub deliver at most once)"
                },
            ));
        }
        Ok(())
    }

    /// Slow subscriptions: no more than there are, with a cost, of at most 1 s a message.
    fn check_slow(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        if self.slow_subscriptions > self.subscriptions_per_topic {
            return Err(invalid(
                "pubsub.slow_subscriptions",
                format!(
                    "is {} of {} subscriptions per topic",
                    self.slow_subscriptions, self.subscriptions_per_topic
                ),
                "make at most subscriptions_per_topic of them slow",
            ));
        }
        if self.slow_subscriptions > 0 && self.slow_cost.is_zero() {
            return Err(invalid(
                "pubsub.slow_cost",
                "is 0 with slow subscriptions".into(),
                "give what a slow subscription spends per message, e.g. \"100us\"",
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.open_timeout) {
            return Err(invalid(
                "pubsub.open_timeout",
                format!("is {}", crate::duration::format(self.open_timeout)),
                "give 1s to 1h (Kafka's group join alone may take 30s)",
            ));
        }
        if self.slow_cost > MAX_DURATION || self.slow_cost > Duration::from_secs(1) {
            return Err(invalid(
                "pubsub.slow_cost",
                format!("is {}", crate::duration::format(self.slow_cost)),
                "give at most 1s per message",
            ));
        }
        Ok(())
    }

    /// Each publisher's pacing: the scenario's, its rate split over the `publishers`; closed
    /// loop refused (a publish gets no response to close it on).
    fn publisher_pacing(
        &self,
        pacing_spec: &PacingSpec,
        publishers: u64,
        invalid: &Invalid,
    ) -> Result<Pacing, ScenarioError> {
        let pacing = pacing_spec.validate(invalid)?;
        Ok(match pacing {
            Pacing::ClosedLoop => {
                return Err(invalid(
                    "pacing.mode",
                    "is closed-loop".into(),
                    "a publisher gets no response to close a loop on: pace it (rate, interval) or publish as fast as the broker takes messages (immediate)",
                ))
            }
            Pacing::Rate { per_sec, arrivals } => Pacing::Rate {
                per_sec: per_sec / publishers as f64,
                arrivals,
            },
            other => other,
        })
    }
}

impl PubsubSpec {
    /// A stream's bound, where the broker keeps streams.
    fn check_stream(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        if !(1..=MAX_STREAM_MAX_MESSAGES).contains(&self.stream_max_messages) {
            return Err(invalid(
                "pubsub.stream_max_messages",
                format!("is {}", self.stream_max_messages),
                &format!("give 1 to {MAX_STREAM_MAX_MESSAGES}"),
            ));
        }
        if !self.broker.is_stream() && self.stream_max_messages != DEFAULT_STREAM_MAX_MESSAGES {
            return Err(invalid(
                "pubsub.stream_max_messages",
                format!(
                    "is {} with broker = \"{}\"",
                    self.stream_max_messages,
                    self.broker.name()
                ),
                "a stream's bound is Redis Streams' and JetStream's: remove it, or use broker = \"redis-streams\" or \"jetstream\"",
            ));
        }
        Ok(())
    }

    /// Kafka's settings: partitions and acks only where the broker has them; a shared
    /// subscription needs a partition per consumer.
    fn check_kafka(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err(invalid(
                "pubsub.partitions",
                format!("is {}", self.partitions),
                &format!("give 1 to {MAX_PARTITIONS}"),
            ));
        }
        if self.broker == Broker::Kafka {
            if self.message_bytes > MAX_KAFKA_MESSAGE_BYTES {
                return Err(invalid(
                    "pubsub.message_bytes",
                    format!("is {} with broker = \"kafka\"", self.message_bytes),
                    &format!("give at most {MAX_KAFKA_MESSAGE_BYTES} bytes: a record batch must stay under the broker's default max.message.bytes (1048588)"),
                ));
            }
            if self.consumers_per_subscription > self.partitions {
                return Err(invalid(
                    "pubsub.consumers_per_subscription",
                    format!(
                        "is {} with {} partition{} per topic",
                        self.consumers_per_subscription,
                        self.partitions,
                        if self.partitions == 1 { "" } else { "s" }
                    ),
                    "a Kafka consumer reads whole partitions: give at least as many partitions as consumers per subscription (the others would get nothing)",
                ));
            }
            return Ok(());
        }
        if self.partitions != 1 {
            return Err(invalid(
                "pubsub.partitions",
                format!(
                    "is {} with broker = \"{}\"",
                    self.partitions,
                    self.broker.name()
                ),
                "partitions are Kafka's: set it to 1, or use broker = \"kafka\"",
            ));
        }
        if self.kafka.compression.is_some() {
            return Err(invalid(
                "pubsub.kafka.compression",
                format!("is given with broker = \"{}\"", self.broker.name()),
                "compression is Kafka's batches': remove it, or use broker = \"kafka\"",
            ));
        }
        if self.acks != Acks::Leader {
            return Err(invalid(
                "pubsub.acks",
                format!("is \"{}\" with broker = \"{}\"", self.acks.name(), self.broker.name()),
                "acks is Kafka's: remove it, or use broker = \"kafka\" (MQTT's acknowledgements are qos = 1)",
            ));
        }
        Ok(())
    }
}

/// Largest Kafka message (its batch, with framing, under `max.message.bytes`).
pub const MAX_KAFKA_MESSAGE_BYTES: u32 = 1_000_000;

/// Most partitions per topic.
pub const MAX_PARTITIONS: u32 = 1024;

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};
    use crate::pacing::Pacing;
    use crate::scenario::System;

    fn config(extra: &str) -> super::PubsubConfig {
        match valid(&format!("system = \"pubsub\"\n{extra}")).system {
            System::Pubsub { pubsub, .. } => pubsub,
            other => panic!("not pubsub: {other:?}"),
        }
    }

    #[test]
    fn a_shard_takes_every_nth_publisher_and_subscription_and_needs_one_of_each() {
        use crate::shard::Shard;
        let mut c =
            config("[pubsub]\ntopics = 2\npublishers_per_topic = 2\nsubscriptions_per_topic = 2");
        let whole = (c.publishers().len(), c.all_subscriptions().len());
        c.set_shard(Shard { index: 1, count: 3 }).unwrap();
        assert_eq!(c.local_publishers(), [1]);
        let names: Vec<String> = c.subscriptions().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["t0-s1"]);
        assert_eq!(c.shard_connections(), (2, 8));
        assert_eq!((c.publishers().len(), c.all_subscriptions().len()), whole);
        // Five shards of four publishers: one would have none.
        let e = c.set_shard(Shard { index: 0, count: 5 }).unwrap_err();
        assert!(e.contains("at most 4 shard(s)"), "{e}");
        // A shared subscription's consumers spread over the shards (run-wide consumer
        // index 3 × sub + k); Kafka's stay with their subscription.
        let mut c = config("[pubsub]\npublishers_per_topic = 2\nsubscriptions_per_topic = 2\nconsumers_per_subscription = 3");
        c.set_shard(Shard { index: 1, count: 2 }).unwrap();
        let subs = c.all_subscriptions();
        assert_eq!(
            (c.local_consumers(&subs[0]), c.local_consumers(&subs[1])),
            (vec![1], vec![0, 2])
        );
        assert_eq!(c.subscriptions().len(), 2);
        let kafka = "[pubsub]\nbroker = \"kafka\"\naddress = \"127.0.0.1:9092\"\npartitions = 3\n";
        let mut k = config(&format!("{kafka}publishers_per_topic = 2\nsubscriptions_per_topic = 2\nconsumers_per_subscription = 3"));
        k.set_shard(Shard { index: 1, count: 2 }).unwrap();
        let subs = k.all_subscriptions();
        assert_eq!(
            (
                k.local_consumers(&subs[0]).len(),
                k.local_consumers(&subs[1]).len()
            ),
            (0, 3)
        );
    }

    #[test]
    fn a_broker_s_own_settings_are_read_from_its_section_or_their_flat_names_once() {
        use crate::check::testing::refused;
        let kafka = "[pubsub]\nbroker = \"kafka\"\naddress = \"127.0.0.1:9092\"\n";
        let grouped = config(&format!(
            "{kafka}[pubsub.kafka]\nacks = \"all\"\npartitions = 4"
        ));
        let flat = config(&format!("{kafka}acks = \"all\"\npartitions = 4"));
        assert_eq!((grouped.acks, grouped.partitions), (super::Acks::All, 4));
        assert_eq!(grouped, flat);
        let mqtt = "[pubsub]\nbroker = \"mqtt\"\naddress = \"127.0.0.1:1883\"\n";
        assert_eq!(config(&format!("{mqtt}[pubsub.mqtt]\nqos = 1")).qos, 1);
        let js = "[pubsub]\nbroker = \"jetstream\"\naddress = \"127.0.0.1:4222\"\n";
        let kept = config(&format!("{js}[pubsub.stream]\nmax_messages = 5000"));
        assert_eq!(kept.stream_max_messages, 5000);
        // Given twice: refused, naming the section's key; a setting the broker does not have
        // is refused under the key as it was written.
        for (text, field, fix) in [
            (
                format!("{mqtt}qos = 1\n[pubsub.mqtt]\nqos = 1"),
                "pubsub.mqtt.qos",
                "give it once",
            ),
            (
                "[pubsub]\n[pubsub.kafka]\npartitions = 4".to_string(),
                "pubsub.kafka.partitions",
                "Kafka's",
            ),
            (
                format!("{mqtt}[pubsub.mqtt]\nqos = 2"),
                "pubsub.mqtt.qos",
                "QoS 2",
            ),
            (
                "[pubsub]\n[pubsub.stream]\nmax_messages = 9".to_string(),
                "pubsub.stream.max_messages",
                "redis-streams",
            ),
        ] {
            let (at, message) = refused(&format!("system = \"pubsub\"\n{text}"));
            assert_eq!(at, field, "{text}");
            assert!(message.contains(fix), "{message}");
        }
    }

    #[test]
    fn kafka_acks_are_written_as_kafka_writes_them() {
        use super::Acks;
        for (text, acks) in [
            ("0", Acks::None),
            ("1", Acks::Leader),
            ("-1", Acks::All),
            ("\"0\"", Acks::None),
            ("\"all\"", Acks::All),
        ] {
            let c = config(&format!("[pubsub]\nbroker = \"kafka\"\nacks = {text}"));
            assert_eq!(c.acks, acks, "{text}");
        }
        for bad in ["2", "\"ALL\""] {
            let e = toml::from_str::<super::PubsubSpec>(&format!("acks = {bad}")).unwrap_err();
            assert!(e.to_string().contains("give 0, 1 or \"all\""), "{e}");
        }
    }

    #[test]
    fn the_rate_is_split_over_every_publisher_and_topics_are_named_by_prefix() {
        let c = config(
            "[pacing]\nmode = \"rate\"\nper_sec = 6000\n[pubsub]\ntopics = 3\npublishers_per_topic = 2\nsubscriptions_per_topic = 2\nslow_subscriptions = 1\nslow_cost = \"1ms\"",
        );
        assert!(matches!(c.publisher_pacing, Pacing::Rate { per_sec, .. } if per_sec == 1000.0));
        assert_eq!(c.topics, ["msgbench.0", "msgbench.1", "msgbench.2"]);
        assert_eq!(c.publishers(), [0, 0, 1, 1, 2, 2]);
        let subs = c.subscriptions();
        assert_eq!(subs.len(), 6);
        assert_eq!(
            (subs[0].name.as_str(), subs[0].slow, subs[1].slow),
            ("t0-s0", true, false)
        );
        assert_eq!(c.class_names(), ["subscriber", "slow-subscriber"]);
    }

    #[test]
    fn stream_brokers_take_a_bound_and_shared_subscriptions() {
        let c = config("[pubsub]\nbroker = \"redis-streams\"\nconsumers_per_subscription = 3\nstream_max_messages = 5000");
        assert_eq!(
            (c.consumers_per_subscription, c.stream_max_messages),
            (3, 5000)
        );
        assert!(c.answers_publishes());
        assert!(c
            .describe()
            .contains("redis-streams stream_max_messages=5000"));
        let c = config("[pubsub]\nbroker = \"jetstream\"");
        assert_eq!(c.stream_max_messages, super::DEFAULT_STREAM_MAX_MESSAGES);
    }

    #[test]
    fn a_broker_comparison_takes_each_brokers_own_address() {
        let text = "[pubsub]\naddress = \"127.0.0.1:1\"\naddresses = { nats = \"127.0.0.1:4297\", redis = \"127.0.0.1:4296\" }";
        assert_eq!(config(text).address, "127.0.0.1:4297");
        let redis = text.replace("[pubsub]", "[pubsub]\nbroker = \"redis\"");
        assert_eq!(config(&redis).address, "127.0.0.1:4296");
        let (field, message) =
            refused("system = \"pubsub\"\n[pubsub]\naddresses = { pulsar = \"127.0.0.1:6650\" }");
        assert_eq!(field, "pubsub.addresses.pulsar");
        assert!(
            message.contains("nats, redis, mqtt, mqtt5, kafka, redis-streams, jetstream"),
            "{message}"
        );
    }

    #[test]
    fn what_no_broker_can_do_is_refused_with_the_fix() {
        for (extra, field, fix) in [
            ("[pubsub]\ntopics = 0", "pubsub.topics", "at least 1"),
            ("[pubsub]\nmessage_bytes = 8", "pubsub.message_bytes", "24-byte header"),
            ("[pubsub]\ntopic_prefix = \"a b\"", "pubsub.topic_prefix", "letters"),
            ("[pubsub]\ntopic_prefix = \"a.>\"", "pubsub.topic_prefix", "letters"),
            (
                "[pubsub]\nbroker = \"redis\"\naddress = \"127.0.0.1:6379\"\nconsumers_per_subscription = 2",
                "pubsub.consumers_per_subscription",
                "queue groups",
            ),
            ("[pubsub]\nslow_subscriptions = 2", "pubsub.slow_subscriptions", "at most"),
            ("[pubsub]\nqos = 1", "pubsub.qos", "QoS 1 is MQTT's"),
            ("[pubsub]\nbroker = \"mqtt\"\nqos = 2", "pubsub.qos", "does not speak QoS 2"),
            ("[pubsub]\nslow_subscriptions = 1", "pubsub.slow_cost", "per message"),
            ("[pacing]\nmode = \"closed-loop\"", "pacing.mode", "no response"),
            ("[run]\noperations = 100", "run.operations", "run.duration"),
            ("[pubsub]\naddress = \"nats\"", "pubsub.address", "host:port"),
            ("[pubsub]\ntopics = 5000\nsubscriptions_per_topic = 2", "pubsub.topics", "at most 10000"),
            ("[pubsub]\nmax_unsent_bytes = 100", "pubsub.max_unsent_bytes", "4096"),
            ("[pubsub]\nopen_timeout = \"100ms\"", "pubsub.open_timeout", "1s to 1h"),
            ("[pubsub]\npartitions = 4", "pubsub.partitions", "Kafka's"),
            ("[pubsub]\nacks = \"all\"", "pubsub.acks", "Kafka's"),
            ("[pubsub]\nstream_max_messages = 100", "pubsub.stream_max_messages", "redis-streams"),
            (
                "[pubsub]\nbroker = \"jetstream\"\nstream_max_messages = 0",
                "pubsub.stream_max_messages",
                "give 1 to",
            ),
            (
                "[pubsub]\nbroker = \"kafka\"\nmessage_bytes = 2000000",
                "pubsub.message_bytes",
                "at most 1000000",
            ),
            ("[pubsub]\nbroker = \"kafka\"\npartitions = 0", "pubsub.partitions", "1 to 1024"),
            (
                "[pubsub]\nbroker = \"kafka\"\npartitions = 2\nconsumers_per_subscription = 3",
                "pubsub.consumers_per_subscription",
                "as many partitions as consumers",
            ),
        ] {
            let (f, message) = refused(&format!("system = \"pubsub\"\n{extra}"));
            assert_eq!(f, field, "{extra}: {message}");
            assert!(message.contains(fix), "{extra}: {message}");
        }
    }
}
