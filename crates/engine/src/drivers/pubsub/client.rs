//! The seam of the broker family: [`BrokerClient`], one implementation per broker in
//! [`super::brokers`], one line each in its registry. A broker prepares what the run needs
//! (topics, streams, groups), opens its consumers and publishers, speaks its protocol
//! ([`BrokerProtocol`]) and says what it left behind at the end. The run
//! ([`super::drive`]) and its threads never name a broker.
use super::consumer::Consumer;
use super::opening::{open, open_consumer, Opening};
use super::protocol::{BrokerProtocol, PublishFrame};
use super::stream::OpeningStream;
use super::wire::kafka;
use crate::error::EngineError;
use msgbench_model::pubsub::{PubsubConfig, Subscription};

/// How a publisher frames its messages.
pub enum Framing {
    /// Each message framed on its own (NATS, Redis, MQTT, …).
    Each(PublishFrame),
    /// Messages gathered into batches, one request each (Kafka's Produce).
    Batches(Batches),
}

/// A Kafka publisher's producers: one per broker leading a partition it fills.
pub struct Batches {
    /// The broker its connection ([`OpenedPublisher::stream`]) goes to, and its producer.
    pub node: i32,
    /// See [`Batches::node`].
    pub producer: kafka::Producer,
    /// Each other broker: its node id, a connection to it and its producer.
    pub more: Vec<(i32, OpeningStream, kafka::Producer)>,
    /// How it follows a partition whose leader moves (a cluster); without it a refusal ends
    /// the publisher.
    pub reroute: Option<std::sync::Arc<dyn Reroute>>,
}

/// How a publisher finds where a partition went when its broker says it no longer leads it
/// (Kafka in a cluster), and reaches it. Blocking, each step bounded (a second or so): called
/// from the publisher's thread, its other publishers wait meanwhile (their lateness shows as
/// send lag).
pub trait Reroute: Send + Sync {
    /// The leader of each partition of `topic` now, by partition (node ids), asked until
    /// `patience` runs out.
    fn leaders(&self, topic: &str, patience: &Patience<'_>) -> Result<Vec<i32>, String>;
    /// A connection to broker `node`, logged in.
    fn connect(&self, node: i32) -> Result<OpeningStream, String>;
    /// How long following a moved partition may take at most.
    fn patience(&self) -> std::time::Duration;
}

/// How long a wait of the run's threads may last, and what ends it sooner (Ctrl-C, the run's
/// stop).
pub struct Patience<'a> {
    /// When it gives up.
    pub deadline: std::time::Instant,
    /// True once the run stops.
    pub stop: &'a dyn Fn() -> bool,
}

impl Patience<'_> {
    /// Past its deadline, or the run stops.
    pub fn over(&self) -> bool {
        std::time::Instant::now() > self.deadline || (self.stop)()
    }
}

/// A publisher's connection, opened, and how it frames.
pub struct OpenedPublisher {
    /// The connection, its opening answered.
    pub stream: OpeningStream,
    /// Bytes read past the opening's answers.
    pub leftover: Vec<u8>,
    /// How it frames its messages.
    pub framing: Framing,
}

/// One subscription at the end of the run: what its broker may have to close.
pub struct Ended<'a> {
    /// Its name (`t0-s1`).
    pub name: &'a str,
    /// Its topic's name.
    pub topic: &'a str,
    /// Its consumers.
    pub consumers: &'a [Consumer],
}

/// A broker as msgbench's `pubsub` system uses it. One value per run (it may hold what its
/// opening needs across calls, e.g. JetStream's API connection); its protocol is shared by the
/// publisher and subscriber threads.
pub trait BrokerClient: BrokerProtocol {
    /// Before any connection of the run: what the run needs in place (Kafka's topics, Redis
    /// Streams' consumer groups, JetStream's streams).
    fn prepare(&mut self, run: &Opening<'_>) -> Result<(), EngineError> {
        let _ = run;
        Ok(())
    }

    /// Opens this process's consumers of subscription `sub`, subscribed from now on: `slots`,
    /// each its index in the subscription and its subscription id (all
    /// `consumers_per_subscription` unsharded; a shard's share of them, `--shard`).
    fn open_consumers(
        &mut self,
        run: &Opening<'_>,
        sub: &Subscription,
        slots: &[Slot],
    ) -> Result<Vec<Consumer>, EngineError> {
        let topic = &run.config.topics[sub.topic as usize];
        open_subscribed(run, self.protocol(), sub, topic, slots)
    }

    /// Opens publisher `index`'s connection, publishing on `topic`.
    fn open_publisher(
        &mut self,
        run: &Opening<'_>,
        index: u32,
        topic: &str,
    ) -> Result<OpenedPublisher, EngineError> {
        let (stream, leftover) = open(run, self.protocol(), &format!("p{index}"), None)?;
        Ok(OpenedPublisher {
            stream,
            leftover,
            framing: Framing::Each(self.publish_frame(run.config, topic, None)),
        })
    }

    /// How a publisher frames its messages on `topic` (answered on `inbox`, when the broker
    /// answers publishes there).
    fn publish_frame(
        &self,
        config: &PubsubConfig,
        topic: &str,
        inbox: Option<&str>,
    ) -> PublishFrame;

    /// Every connection is open: what the opening alone needed may go.
    fn opened(&mut self) {}

    /// Messages of one publisher come in order to a subscription with one consumer (false:
    /// Kafka's topic of several partitions, ordered only within each).
    fn ordered(&self, config: &PubsubConfig) -> bool {
        let _ = config;
        true
    }

    /// The broker keeps every message until it is read (Kafka's log): one that has not come
    /// is on its way, never lost.
    fn retains(&self) -> bool {
        false
    }

    /// At the end of the run: what the broker must be told (Kafka: each group's positions
    /// committed, the group left). What failed is returned, a note each.
    fn finish(&mut self, run: &Opening<'_>, subscriptions: &[Ended<'_>]) -> Vec<String> {
        let _ = (run, subscriptions);
        Vec::new()
    }

    /// How to read the run's figures, a line each (Kafka: which broker led each partition).
    fn info(&self, config: &PubsubConfig) -> Vec<String> {
        let _ = config;
        Vec::new()
    }

    /// Itself as the protocol its connections speak.
    fn protocol(&self) -> &dyn BrokerProtocol;
}

/// One consumer of a subscription to open: its index in the subscription (`c<k>` of its
/// name) and its subscription id on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its index among the subscription's consumers.
    pub k: u32,
    /// Its subscription id.
    pub sid: u64,
}

/// Opens subscription `sub`'s consumers, one per slot, each subscribed to `subject` (in the
/// subscription's shared group when it has more than one consumer).
pub fn open_subscribed(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    sub: &Subscription,
    subject: &str,
    slots: &[Slot],
) -> Result<Vec<Consumer>, EngineError> {
    let group = shared_group(run.config, sub);
    let size = run.config.message_bytes as usize;
    let mut consumers = Vec::new();
    for &Slot { k, sid } in slots {
        let name = consumer_name(sub, k);
        let (stream, leftover) = open_consumer(run, protocol, &name, (subject, group, sid))?;
        consumers.push(Consumer::new(stream, &leftover, size).map_err(EngineError::Io)?);
    }
    Ok(consumers)
}

/// Consumer `k` of subscription `sub` (`t0-s1-c0`), as the broker is told its name.
pub fn consumer_name(sub: &Subscription, k: u32) -> String {
    format!("{}-c{k}", sub.name)
}

/// The group subscription `sub`'s consumers share (NATS queue groups, MQTT `$share/`), when it
/// has more than one.
pub fn shared_group<'a>(config: &PubsubConfig, sub: &'a Subscription) -> Option<&'a str> {
    (config.consumers_per_subscription > 1).then_some(sub.name.as_str())
}
