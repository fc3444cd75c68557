//! Apache Kafka: Produce requests (a batch of records per request, `acks`), Fetch from the end
//! of each partition ([`wire::kafka`]), each sent to the partition's leader ([`cluster`]).
//! Before the run the topics exist with the scenario's partitions (created when missing) and
//! every subscription's consumers have joined its consumer group ([`group`]); at the end each
//! group's positions are committed and the group left. Kafka keeps every message: one that had
//! not come is on its way, never lost.
pub mod cluster;
pub mod group;
pub mod pull;
pub mod sasl;

use crate::drivers::pubsub::client::{
    Batches, BrokerClient, Ended, Framing, OpenedPublisher, Patience, Reroute, Slot,
};
use crate::drivers::pubsub::consumer::{turn_bytes, Consumer};
use crate::drivers::pubsub::opening::{Opening, OPEN_TIMEOUT};
use crate::drivers::pubsub::protocol::{BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::kafka::Node;
use crate::drivers::pubsub::wire::{kafka, kafka_group};
use crate::error::EngineError;
use cluster::{Cluster, Follow};
use msgbench_model::pubsub::{PubsubConfig, Subscription};
use pull::{Beats, KafkaPull};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// Apache Kafka.
#[derive(Default)]
pub struct Kafka {
    /// The cluster's brokers and the leader of each partition, as the opening found them.
    cluster: Cluster,
    /// How the run's threads follow a leader that moves (a cluster of several brokers).
    follow: Option<Arc<Follow>>,
}

/// A connection to broker `node` of the cluster (`None`: the scenario's address, the
/// bootstrap server), TLS started, logged in when the scenario gives credentials (SASL,
/// before any other request).
pub fn connect(
    run: &Opening<'_>,
    node: Option<&Node>,
    receive_buffer: u32,
) -> Result<OpeningStream, EngineError> {
    let mut stream = match node {
        Some(n) => run.connect_named(&n.host, n.port, receive_buffer)?,
        None => run.connect(receive_buffer)?,
    };
    if let Some(credentials) = &run.config.auth {
        sasl::log_in(&mut stream, credentials).map_err(|e| run.error(e))?;
    }
    Ok(stream)
}

impl BrokerProtocol for Kafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    /// Kafka's opening is its own: metadata, offsets, groups.
    /// Nothing: Kafka's login is its own exchange ([`sasl`]).
    fn hello(&self, _hello: &Hello<'_>, _out: &mut Vec<u8>) -> Result<(), String> {
        Ok(())
    }

    /// A consumer's fetch responses and a producer's answers are read whole ([`KafkaPull`],
    /// the publisher's batches), not message by message.
    fn decode<'a>(&self, _buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        Err("Kafka's responses are read whole (wire::kafka)".into())
    }
}

impl BrokerClient for Kafka {
    fn prepare(&mut self, run: &Opening<'_>) -> Result<(), EngineError> {
        self.cluster = prepare_topics(run)?;
        if self.cluster.nodes.len() > 1 {
            self.follow = Some(Arc::new(Follow::new(run, &self.cluster)?));
        }
        Ok(())
    }

    /// Each subscription a consumer group, its consumers the group's members; a member reads
    /// its partitions from their leaders, a connection to each.
    fn open_consumers(
        &mut self,
        run: &Opening<'_>,
        sub: &Subscription,
        slots: &[Slot],
    ) -> Result<Vec<Consumer>, EngineError> {
        let config = run.config;
        let topic = &config.topics[sub.topic as usize];
        let group = group_id(topic, &sub.name);
        let members = group::join(run, &self.cluster, topic, &group, slots.len() as u32)?;
        let cost = config.cost_ns(sub);
        // A slow subscription fetches about what it handles in one of its turns.
        let max_bytes = turn_bytes(config, cost).min(kafka::FETCH_MAX_BYTES as usize) as i32;
        let mut consumers = Vec::new();
        for joined in members {
            let member = self.member_consumers(run, sub.topic as usize, joined, max_bytes)?;
            consumers.extend(member);
        }
        Ok(consumers)
    }

    fn open_publisher(
        &mut self,
        run: &Opening<'_>,
        index: u32,
        topic: &str,
    ) -> Result<OpenedPublisher, EngineError> {
        let config = run.config;
        let ppt = config.publishers_per_topic;
        let partitions = publisher_partitions(config.partitions, index % ppt, ppt);
        let t = index / ppt;
        let producer = |partitions| {
            kafka::Producer::new(topic, config.acks.wire(), partitions, config.compression)
        };
        // A connection to each broker that leads one of its partitions.
        let mut legs = Vec::new();
        for (leader, partitions) in self.cluster.by_leader(t as usize, &partitions) {
            let stream = self.cluster.connect(run, leader, 0)?;
            legs.push((leader, stream, producer(partitions)));
        }
        let (node, mut stream, mut producer) = legs.remove(0);
        // In a cluster at acks all, an idempotent producer (as Kafka's own is by default): a
        // request sent again to a new leader is written once.
        if self.follow.is_some() && config.acks.wire() == -1 {
            let (id, epoch) = producer_id(run, &mut stream)?;
            producer.make_idempotent(id, epoch);
            for (_, _, p) in &mut legs {
                p.make_idempotent(id, epoch);
            }
        }
        let reroute = (self.follow.clone()).map(|f| f as Arc<dyn Reroute>);
        Ok(OpenedPublisher {
            stream,
            leftover: Vec::new(),
            framing: Framing::Batches(Batches {
                node,
                producer,
                more: legs,
                reroute,
            }),
        })
    }

    /// Records are framed by [`kafka::Producer`], in batches.
    fn publish_frame(&self, _: &PubsubConfig, _: &str, _: Option<&str>) -> PublishFrame {
        PublishFrame::none()
    }

    /// Order holds within a partition only: a topic of several is followed like a shared
    /// subscription (counted, not sequenced).
    fn ordered(&self, config: &PubsubConfig) -> bool {
        config.partitions == 1
    }

    fn retains(&self) -> bool {
        true
    }

    fn finish(&mut self, run: &Opening<'_>, subscriptions: &[Ended<'_>]) -> Vec<String> {
        let mut notes = Vec::new();
        for s in subscriptions {
            let pulls = s.consumers.iter();
            let pulls: Vec<&KafkaPull> = pulls
                .filter_map(|c| c.pull.as_ref()?.as_any().downcast_ref::<KafkaPull>())
                .collect();
            let (members, rebalanced) = pull::members(&pulls);
            let mut coordinator = pulls.first().map_or(-1, |k| k.coordinator);
            let group = group_id(s.topic, s.name);
            notes.extend(rebalanced.map(|why| format!("consumer group {group} {why}")));
            // In a cluster the coordinator may have moved during the run: asked again.
            let now = self.follow.as_ref();
            if let Some(now) = now.and_then(|f| f.coordinator(&group, &patience(3)).ok()) {
                coordinator = now;
            }
            let left = group::leave(run, &self.cluster, coordinator, s.topic, &members);
            if let Err(why) = left {
                notes.push(format!(
                    "consumer group {group} was not committed and left at the end ({why}): its members expire after {} s",
                    kafka_group::SESSION_TIMEOUT_MS / 1000
                ));
            }
        }
        notes
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }

    /// Which broker led each partition when the run opened — and, in a cluster whose
    /// leaders moved during the run, at its end.
    fn info(&self, config: &PubsubConfig) -> Vec<String> {
        let mut lines = self.cluster.describe(&config.topics, "were");
        let now = self.follow.as_ref().map(|f| f.cluster(&patience(3)));
        match now {
            Some(Ok(now)) if now.leaders != self.cluster.leaders => {
                lines.extend(now.describe(&config.topics, "were at the end"));
            }
            Some(Err(why)) => lines.push(format!(
                "kafka: where the partitions were led at the end is not known: {why}"
            )),
            _ => {}
        }
        lines
    }
}

impl Kafka {
    /// The consumers of one joined member of a group, each fetching from its partitions'
    /// leader on a connection of its own: one per broker (one broker), or one per partition
    /// (a cluster: each follows its partition alone when its leader moves). The member's
    /// group protocol stays on the connection it joined on, to its group's coordinator,
    /// carried by its first consumer.
    fn member_consumers(
        &self,
        run: &Opening<'_>,
        t: usize,
        joined: group::GroupConsumer,
        max_bytes: i32,
    ) -> Result<Vec<Consumer>, EngineError> {
        let config = run.config;
        let topic = &config.topics[t];
        let identity = (joined.member.clone(), joined.coordinator);
        let held = (topic.as_str(), config.partitions, joined.partitions.clone());
        let mut beats = Some(Beats::aside(joined.stream, joined.member, held)?);
        let mut opened = Vec::new();
        for (leader, partitions) in self.cluster.by_leader(t, &joined.partitions) {
            let each: Vec<Vec<i32>> = match self.follow {
                Some(_) => partitions.iter().map(|&p| vec![p]).collect(),
                None => vec![partitions],
            };
            for partitions in each {
                let stream = self.cluster.connect(run, leader, config.receive_buffer)?;
                opened.push((stream, partitions, beats.take().unwrap_or(Beats::Elsewhere)));
            }
        }
        let mut consumers = Vec::new();
        for (stream, partitions, beats) in opened {
            let (stream, fetcher) = start_consumer(run, stream, topic, &partitions, max_bytes)?;
            let pull = KafkaPull::new(fetcher, identity.clone(), beats, self.follow.clone());
            let size = config.message_bytes as usize;
            let consumer = Consumer::pulling(stream, &[], size, Box::new(pull));
            consumers.push(consumer.map_err(EngineError::Io)?);
        }
        Ok(consumers)
    }
}

/// An idempotent producer's id and epoch, asked of a broker on `stream` until its producer
/// ids are served (a new cluster loads them first): up to three opening timeouts.
fn producer_id(run: &Opening<'_>, stream: &mut OpeningStream) -> Result<(i64, i16), EngineError> {
    once_settled(
        run,
        || kafka::init_producer_id(stream),
        "it refused a producer id",
    )
}

/// The answer of `ask` once the broker's coordinators have settled: asked again every 100 ms
/// while it answers that one is loading or not ready (a new cluster, a first group), up to
/// three opening timeouts; another refusal is `refused`, with the error's name.
pub fn once_settled<T>(
    run: &Opening<'_>,
    mut ask: impl FnMut() -> Result<Result<T, i16>, String>,
    refused: &str,
) -> Result<T, EngineError> {
    let deadline = std::time::Instant::now() + OPEN_TIMEOUT * 3;
    loop {
        let answer = ask().map_err(|e| run.error(e))?;
        run.progress();
        match answer {
            Ok(answer) => return Ok(answer),
            Err(code) if kafka_group::settling(code) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(code) => {
                return Err(run.error(format!("{refused}: {}", kafka::error_name(code))));
            }
        }
    }
}

/// A wait of the opening's thread (the end of the run: nothing to stop it but its deadline)
/// of `seconds` at most.
fn patience(seconds: u64) -> Patience<'static> {
    Patience {
        deadline: std::time::Instant::now() + Duration::from_secs(seconds),
        stop: &|| false,
    }
}

/// The consumer group of Kafka subscription `subscription` of `topic` (`msgbench.0-t0-s1`):
/// named after its topic, so runs on other topics never share a group.
pub fn group_id(topic: &str, subscription: &str) -> String {
    format!("{topic}-{subscription}")
}

/// Kafka: the run's topics exist with `partitions` partitions each (created when missing,
/// with the cluster's default replicas), and every partition has a leader, before any
/// consumer asks for its end. Returns the cluster: its brokers and each partition's leader.
fn prepare_topics(run: &Opening<'_>) -> Result<Cluster, EngineError> {
    let config = run.config;
    let mut stream = connect(run, None, 0)?;
    let fail = |problem: String| run.error(problem);
    let found = kafka::metadata(&mut stream, &config.topics)
        .map_err(fail)?
        .topics;
    let missing: Vec<&str> = found
        .iter()
        .filter(|(_, error, _)| *error == 3)
        .map(|(name, ..)| name.as_str())
        .collect();
    if !missing.is_empty() {
        for (name, error, message) in
            kafka::create_topics(&mut stream, &missing, config.partitions).map_err(fail)?
        {
            if error != 0 && error != 36 {
                return Err(fail(format!(
                    "it refused to create topic {name}: {}{}",
                    kafka::error_name(error),
                    if message.is_empty() {
                        String::new()
                    } else {
                        format!(" ({message})")
                    }
                )));
            }
        }
    }
    let deadline = std::time::Instant::now() + OPEN_TIMEOUT * 3;
    loop {
        let metadata = kafka::metadata(&mut stream, &config.topics).map_err(fail)?;
        run.progress();
        let mut waiting = None;
        for (name, error, partitions) in &metadata.topics {
            if *error == 0 && partitions.len() != config.partitions as usize {
                return Err(fail(partitions_differ(
                    name,
                    partitions.len(),
                    config.partitions,
                )));
            }
            if *error != 0 && *error != 3 && *error != 5 {
                return Err(fail(format!(
                    "it refused the metadata of topic {name}: {}",
                    kafka::error_name(*error)
                )));
            }
            if *error != 0 || partitions.iter().any(|&(_, leader)| leader < 0) {
                waiting = Some(name.clone());
            }
        }
        let Some(name) = waiting else {
            return Cluster::of(metadata, &config.topics).map_err(fail);
        };
        if std::time::Instant::now() > deadline {
            return Err(fail(format!(
                "topic {name} has no leader for every partition after {} s",
                (OPEN_TIMEOUT * 3).as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The partitions publisher `j` of a topic's `publishers` fills, in turn.
fn publisher_partitions(partitions: u32, j: u32, publishers: u32) -> Vec<i32> {
    if partitions < publishers {
        return vec![(j % partitions) as i32];
    }
    (0..partitions as i32)
        .filter(|p| *p as u32 % publishers == j)
        .collect()
}

/// Starts a Kafka consumer of `partitions` of `topic` on its `stream`: their end offsets, and
/// its first fetch sent (the subscription is in place from those offsets on).
fn start_consumer(
    run: &Opening<'_>,
    mut stream: OpeningStream,
    topic: &str,
    partitions: &[i32],
    max_bytes: i32,
) -> Result<(OpeningStream, kafka::Fetcher), EngineError> {
    // A topic just created may not be served yet though it has a leader: ask again.
    let deadline = std::time::Instant::now() + OPEN_TIMEOUT * 3;
    let offsets = loop {
        let answer = kafka::end_offsets(&mut stream, topic, partitions)
            .map_err(|problem| run.error(problem))?;
        run.progress();
        match answer {
            Ok(offsets) => break offsets,
            Err((_, code)) if kafka::retriable(code) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err((p, code)) => {
                return Err(run.error(format!(
                    "it refused the end offset of {topic} partition {p}: {}",
                    kafka::error_name(code)
                )))
            }
        }
    };
    let mut fetcher = kafka::Fetcher::new(topic, offsets, max_bytes);
    let mut out = Vec::new();
    fetcher.request(&mut out);
    stream
        .write_all(&out)
        .map_err(|e| run.error(format!("writing a fetch failed ({e})")))?;
    stream.set_read_timeout(None).map_err(EngineError::Io)?;
    Ok((stream, fetcher))
}

/// A topic that exists with `found` partitions where the scenario asks for `asked`: what to
/// set — never more partitions than a scenario may ask for.
fn partitions_differ(topic: &str, found: usize, asked: u32) -> String {
    let max = msgbench_model::pubsub::MAX_PARTITIONS;
    if found > max as usize {
        format!(
            "topic {topic} exists with {found} partitions, more than msgbench reads ({max}), and the scenario asks for {asked}: use another pubsub.topic_prefix"
        )
    } else {
        format!(
            "topic {topic} exists with {found} partitions, and the scenario asks for {asked}: set pubsub.partitions = {found}, or use another pubsub.topic_prefix"
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_topic_of_other_partitions_is_told_what_to_set_within_the_limit() {
        let fits = super::partitions_differ("t.0", 4, 2);
        assert!(fits.contains("set pubsub.partitions = 4"), "{fits}");
        let huge = super::partitions_differ("t.0", 200_000, 2);
        assert!(!huge.contains("pubsub.partitions = 200000"), "{huge}");
        assert!(huge.contains("more than msgbench reads (1024)"), "{huge}");
    }
}
