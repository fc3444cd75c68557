//! Publish/subscribe through a broker: every connection opened and subscribed before the
//! schedule starts (so no subscription misses the first message), then publisher threads
//! ([`super::publisher`]) and subscriber threads ([`super::subscriber`]) on the run's
//! timeline, and at the end each subscription's accounting from both ends: what the
//! publishers of its topic sent in the measured window, and what reached it.
//!
//! Per subscription, over the measured window (messages by intended publish time):
//! `attempted = sent` (a publisher blocks, it never skips), `sent = delivered + dropped +
//! failed + in flight`, where *dropped* are the messages missing before the last one that
//! arrived from the same publisher (the broker lost them), *failed* what never came to a
//! subscription whose connection ended, and *in flight* what had not come by the end of the
//! drain. The run's counters are the sum over its subscriptions: every subscription of a topic
//! is meant to get every message of it.
use super::publisher::{Publisher, PublisherThread};
use super::stream_setup::{join_kafka_group, leave_kafka_group, reset_redis_groups, JetstreamApi};
use super::stream_stats::closed_when;
use super::subscriber::{Consumer, KafkaConsumer, Pull, SubscriberThread, SubscriptionState};
use crate::error::EngineError;
use crate::harness::{DriverOutput, RunContext, RunStop, SpanCpu, Timeline};
use crate::net::pubsub::{self as wire, Incoming};
use crate::net::tick::Schedule;
use crate::net::{jetstream, kafka, redis_streams};
use msgbench_model::histogram::{encode, Percentiles};
use msgbench_model::pubsub::{Broker, PubsubConfig};
use msgbench_model::result::{
    Counters, Faults, IntervalSample, SequenceErrors, StreamClient, StreamInterval, ThreadCpu,
};
use msgbench_model::scenario::Scenario;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Longest a connection's opening (connect, handshake, subscription) may take.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(3);

/// What one publisher measured.
#[derive(Debug, Clone, Default)]
pub struct PublisherStats {
    /// Messages it published, warm-up included (its next sequence number).
    pub sent_all: u64,
    /// Sequence number of its first message of the measured window.
    pub first_measured: Option<u64>,
    /// Messages of the measured window it published.
    pub measured: u64,
    /// Of those, per second of the window (by intended publish time).
    pub per_second: Vec<u64>,
    /// Acknowledgements the broker sent (Redis: one reply per PUBLISH).
    pub acks: u64,
    /// Its connection failed.
    pub broken: bool,
}

impl PublisherStats {
    /// Counts message `seq` of the measured window, due at `intended_ns`.
    #[inline]
    pub fn count_measured(&mut self, seq: u64, intended_ns: u64, timeline: &Timeline) {
        self.first_measured.get_or_insert(seq);
        self.measured += 1;
        let second = ((intended_ns - timeline.measure_start_ns) / 1_000_000_000) as usize;
        if second >= self.per_second.len() {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
    }
}

/// What the subscriber threads learn of the publishers: each one's final count, and when
/// publishing stopped.
#[derive(Debug)]
pub struct Progress {
    /// Per publisher, messages it published once it finished (`u64::MAX` until then).
    counts: Vec<AtomicU64>,
    finished: AtomicUsize,
    send_end_ns: AtomicU64,
}

impl Progress {
    fn new(publishers: usize) -> Progress {
        Progress {
            counts: (0..publishers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            finished: AtomicUsize::new(0),
            send_end_ns: AtomicU64::new(0),
        }
    }

    /// A publisher thread stopped sending at `send_end_ns`.
    pub fn stopped_sending(&self, send_end_ns: u64) {
        self.send_end_ns.fetch_max(send_end_ns, Ordering::Relaxed);
    }

    /// Publisher `index` finished, having published `sent` messages.
    pub fn finished(&self, index: u32, sent: u64) {
        self.counts[index as usize].store(sent, Ordering::Release);
        self.finished.fetch_add(1, Ordering::AcqRel);
    }

    /// Publisher `index`'s final count, once it finished.
    pub fn final_count(&self, index: u32) -> Option<u64> {
        match self.counts[index as usize].load(Ordering::Acquire) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    /// When publishing stopped, once every publisher finished.
    pub fn all_finished(&self) -> Option<u64> {
        (self.finished.load(Ordering::Acquire) == self.counts.len())
            .then(|| self.send_end_ns.load(Ordering::Relaxed))
    }
}

/// What the driver measured: the run's recording, and one stream record per subscription.
pub struct PubsubOutput {
    /// The recording, counters and intervals already the subscriptions' sums.
    pub out: DriverOutput,
    /// One per subscription.
    pub streams: Vec<StreamClient>,
    /// Acknowledgements the broker sent for publishes.
    pub acks: u64,
    /// Publish latency (answer − intended publish time) of measured messages, when the
    /// broker answers publishes.
    pub publish_latency: Option<hdrhistogram::Histogram<u64>>,
    /// What the reader must know of the run's end (a Kafka group not left).
    pub notes: Vec<String>,
}

/// Why a connection's `reading` or `writing` failed with `e`: a reset or a broken pipe is
/// the broker closing it.
pub fn broken(e: &std::io::Error, doing: &str) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => {
            format!("the broker closed the connection ({doing} failed: {e})")
        }
        _ => format!("{doing} failed ({e})"),
    }
}

/// A TCP connection to `address` without Nagle's delay, its receive buffer set first when
/// `receive_buffer` is not 0 (so the window it offers is sized from the start).
fn connect(address: SocketAddr, receive_buffer: u32) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(receive_buffer as usize)?;
    }
    socket.connect_timeout(&address.into(), OPEN_TIMEOUT)?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket.into())
}

/// Opens one connection: connect, the broker's hello, and (for a consumer) the subscription,
/// each answered before it returns. Returns the stream and any bytes read past the answers.
pub(crate) fn open(
    config: &PubsubConfig,
    address: SocketAddr,
    name: &str,
    subscription: Option<(&str, Option<&str>, u64)>,
) -> Result<(TcpStream, Vec<u8>), EngineError> {
    let broker_error = |problem: String| broker_error(config, problem);
    let receive_buffer = match subscription {
        Some(_) => config.receive_buffer,
        None => 0,
    };
    let mut stream = connect_for_opening(config, address, receive_buffer)?;
    let mut out = Vec::new();
    wire::hello(config.broker, name, &mut out);
    let mut expected = 1;
    if let Some((topic, group, sid)) = subscription {
        wire::subscribe(config.broker, topic, group, sid, config.qos, &mut out);
        expected += 1;
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut at = 0;
    while expected > 0 {
        match wire::decode(config.broker, &input[at..]) {
            // NATS servers speak first: their INFO.
            Ok(Some(_))
                if matches!(config.broker, Broker::Nats | Broker::Jetstream)
                    && at == 0
                    && !input.starts_with(b"INFO") =>
            {
                return Err(broker_error(format!(
                    "this is not a nats server (it did not begin with INFO but with {:?}); check pubsub.broker and pubsub.address",
                    String::from_utf8_lossy(&input[..input.len().min(40)])
                )))
            }
            Ok(Some((incoming, used))) => {
                match incoming {
                    Incoming::Reply => expected -= 1,
                    Incoming::Error(text) => {
                        return Err(broker_error(format!(
                            "it refused {}: {}",
                            match subscription {
                                Some((topic, ..)) => format!("the subscription to {topic}"),
                                None => "the connection".into(),
                            },
                            String::from_utf8_lossy(text)
                        )))
                    }
                    _ => {}
                }
                at += used;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                return Err(broker_error(format!(
                    "this is not a {} server ({e}); check pubsub.broker and pubsub.address",
                    config.broker.name()
                )))
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(broker_error(format!(
                    "it closed the connection during the opening; is this a {} server? check pubsub.broker and pubsub.address",
                    config.broker.name()
                )))
            }
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(broker_error(format!(
                    "no answer to the opening within {} s; is this a {} server?",
                    OPEN_TIMEOUT.as_secs(),
                    config.broker.name()
                )))
            }
            Err(e) => {
                return Err(broker_error(format!(
                    "{} during the opening; is this a {} server? check pubsub.broker and pubsub.address",
                    broken(&e, "reading"),
                    config.broker.name()
                )))
            }
        }
    }
    stream.set_read_timeout(None).map_err(EngineError::Io)?;
    Ok((stream, input.split_off(at)))
}

/// The error of a broker `problem` at the run's address.
pub(crate) fn broker_error(config: &PubsubConfig, problem: String) -> EngineError {
    EngineError::Broker {
        address: config.address.clone(),
        broker: config.broker.name(),
        problem,
    }
}

/// A connection to the broker, its reads bounded by the opening's timeout; a failure to connect
/// says how to start the broker.
pub(crate) fn connect_for_opening(
    config: &PubsubConfig,
    address: SocketAddr,
    receive_buffer: u32,
) -> Result<TcpStream, EngineError> {
    let stream = connect(address, receive_buffer).map_err(|source| EngineError::Connect {
        address: config.address.clone(),
        source,
        hint: config.broker.hint().into(),
    })?;
    stream
        .set_read_timeout(Some(OPEN_TIMEOUT))
        .map_err(EngineError::Io)?;
    Ok(stream)
}

/// Kafka: the run's topics exist with `partitions` partitions each (created when missing,
/// one replica), and every partition has a leader, before any consumer asks for its end.
fn prepare_kafka_topics(config: &PubsubConfig, address: SocketAddr) -> Result<(), EngineError> {
    let mut stream = connect_for_opening(config, address, 0)?;
    let fail = |problem: String| broker_error(config, problem);
    let found = kafka::metadata(&mut stream, &config.topics).map_err(fail)?;
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
        let found = kafka::metadata(&mut stream, &config.topics).map_err(fail)?;
        let mut waiting = None;
        for (name, error, partitions) in &found {
            if *error == 0 && partitions.len() != config.partitions as usize {
                return Err(fail(format!(
                    "topic {name} exists with {} partitions, and the scenario asks for {}: set pubsub.partitions = {}, or use another pubsub.topic_prefix",
                    partitions.len(),
                    config.partitions,
                    partitions.len()
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
            return Ok(());
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
fn kafka_publisher_partitions(partitions: u32, j: u32, publishers: u32) -> Vec<i32> {
    if partitions < publishers {
        return vec![(j % partitions) as i32];
    }
    (0..partitions as i32)
        .filter(|p| *p as u32 % publishers == j)
        .collect()
}

/// Starts a Kafka consumer of `partitions` of `topic` on its `stream`: their end offsets, and
/// its first fetch sent (the subscription is in place from those offsets on).
fn open_kafka_consumer(
    config: &PubsubConfig,
    mut stream: TcpStream,
    topic: &str,
    partitions: &[i32],
    max_bytes: i32,
) -> Result<(TcpStream, kafka::Fetcher), EngineError> {
    // A topic just created may not be served yet though it has a leader: ask again.
    let deadline = std::time::Instant::now() + OPEN_TIMEOUT * 3;
    let offsets = loop {
        let answer = kafka::end_offsets(&mut stream, topic, partitions)
            .map_err(|problem| broker_error(config, problem))?;
        match answer {
            Ok(offsets) => break offsets,
            Err((_, code)) if kafka::retriable(code) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err((p, code)) => {
                return Err(broker_error(
                    config,
                    format!(
                        "it refused the end offset of {topic} partition {p}: {}",
                        kafka::error_name(code)
                    ),
                ))
            }
        }
    };
    let mut fetcher = kafka::Fetcher::new(topic, offsets, max_bytes);
    let mut out = Vec::new();
    fetcher.request(&mut out);
    stream
        .write_all(&out)
        .map_err(|e| broker_error(config, format!("writing a fetch failed ({e})")))?;
    stream.set_read_timeout(None).map_err(EngineError::Io)?;
    Ok((stream, fetcher))
}

/// Runs the publishers and subscribers of `config` against the broker at `address`.
pub fn drive(
    scenario: &Scenario,
    config: &PubsubConfig,
    address: SocketAddr,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<PubsubOutput, EngineError> {
    let size = config.message_bytes as usize;
    let plan = config.subscriptions();
    // This run's mark on every message: another run publishing on the same topics (another
    // process, another host) is not counted as ours.
    let mark: crate::net::pubsub::RunMark = rand::random();
    let classes = config.class_names();
    let kafka = config.broker == Broker::Kafka;
    if kafka {
        prepare_kafka_topics(config, address)?;
    }
    let redis_group = |sub: &str| format!("msgbench-{sub}");
    if config.broker == Broker::RedisStreams {
        let groups: Vec<(String, String)> = plan
            .iter()
            .map(|s| {
                (
                    config.topics[s.topic as usize].clone(),
                    redis_group(&s.name),
                )
            })
            .collect();
        reset_redis_groups(config, address, &groups)?;
    }
    let mut jetstream_api = match config.broker {
        Broker::Jetstream => Some(JetstreamApi::open(config, address, mark)?),
        _ => None,
    };
    if let Some(api) = jetstream_api.as_mut() {
        for topic in &config.topics {
            api.ensure_stream(topic)?;
        }
    }
    let mut subscriptions = Vec::with_capacity(plan.len());
    let mut sid = 0;
    for sub in &plan {
        let topic = &config.topics[sub.topic as usize];
        let group = (config.consumers_per_subscription > 1).then_some(sub.name.as_str());
        let cost = if sub.slow { config.slow_cost_ns } else { 0 };
        let deliver = jetstream::deliver_subject(mark, &sub.name);
        let mut consumers = Vec::new();
        // Kafka: each subscription a consumer group, its consumers the group's members.
        let mut members = if kafka {
            let group = kafka_group_id(topic, &sub.name);
            join_kafka_group(
                config,
                address,
                topic,
                &group,
                config.consumers_per_subscription,
            )?
        } else {
            Vec::new()
        }
        .into_iter();
        for k in 0..config.consumers_per_subscription {
            sid += 1;
            let name = format!("{}-c{k}", sub.name);
            if config.broker == Broker::RedisStreams {
                // About a turn's worth per read, as a Kafka fetch.
                let count = (super::subscriber::turn_bytes(config, cost)
                    / (config.message_bytes as usize + 64))
                    .clamp(1, 10_000) as u32;
                let reader = redis_streams::Reader::new(
                    topic,
                    &redis_group(&sub.name),
                    &format!("msgbench-{name}"),
                    count,
                );
                let (mut stream, leftover) = open(config, address, &name, None)?;
                let mut first = Vec::new();
                reader.request(&mut first);
                stream
                    .write_all(&first)
                    .map_err(|e| broker_error(config, format!("writing a read failed ({e})")))?;
                let mut consumer =
                    Consumer::new(stream, &leftover, size).map_err(EngineError::Io)?;
                consumer.pull = Some(Pull::Streams(reader));
                consumers.push(consumer);
                continue;
            }
            if config.broker == Broker::Jetstream {
                let (stream, leftover) =
                    open(config, address, &name, Some((&deliver, group, sid)))?;
                consumers.push(Consumer::new(stream, &leftover, size).map_err(EngineError::Io)?);
                continue;
            }
            if let Some(joined) = members.next() {
                // A slow subscription fetches about what it handles in one of its turns.
                let max_bytes = super::subscriber::turn_bytes(config, cost)
                    .min(kafka::FETCH_MAX_BYTES as usize) as i32;
                let (stream, fetcher) = open_kafka_consumer(
                    config,
                    joined.stream,
                    topic,
                    &joined.partitions,
                    max_bytes,
                )?;
                let mut consumer = Consumer::new(stream, &[], size).map_err(EngineError::Io)?;
                consumer.pull = Some(Pull::Kafka(KafkaConsumer {
                    fetcher,
                    member: joined.member,
                    next_heartbeat_ns: crate::clock::now_ns()
                        + crate::net::kafka_group::HEARTBEAT_EVERY_NS,
                }));
                consumers.push(consumer);
                continue;
            }
            let (stream, leftover) = open(config, address, &name, Some((topic, group, sid)))?;
            consumers.push(Consumer::new(stream, &leftover, size).map_err(EngineError::Io)?);
        }
        if let Some(api) = jetstream_api.as_mut() {
            // Its deliveries have somewhere to go: the consumer is made once they listen.
            api.create_consumer(
                topic,
                &jetstream::durable_name(topic, &sub.name),
                &deliver,
                group,
            )?;
        }
        let class = usize::from(sub.slow);
        subscriptions.push(SubscriptionState::new(
            sub.name.clone(),
            class,
            sub.topic,
            config,
            cost,
            consumers,
            mark,
        ));
    }
    let topic_of = config.publishers();
    let mut opened = Vec::with_capacity(topic_of.len());
    for (i, _) in topic_of.iter().enumerate() {
        let name = format!("p{i}");
        opened.push(match config.broker {
            Broker::Kafka => (connect_for_opening(config, address, 0)?, Vec::new()),
            // Its PubAcks come to its inbox.
            Broker::Jetstream => {
                let inbox = jetstream::publisher_inbox(mark, i as u32);
                open(config, address, &name, Some((&inbox, None, 1)))?
            }
            _ => open(config, address, &name, None)?,
        });
    }
    drop(jetstream_api);
    let timeline = Timeline::from_now(&scenario.run);
    let stop = RunStop::new(&ctx.stop);
    let progress = Progress::new(topic_of.len());
    let publisher_threads = config.publisher_threads as usize;
    let (fast, slow): (Vec<_>, Vec<_>) =
        subscriptions.into_iter().partition(|s| s.stats.group == 0);
    let fast_threads = (config.subscriber_threads as usize).min(fast.len());
    let slow_threads = usize::from(!slow.is_empty());
    let mut collector = timeline.collector(
        &scenario.run,
        classes.len(),
        publisher_threads + fast_threads + slow_threads,
    );
    let mut by_thread: Vec<Vec<Publisher>> = (0..publisher_threads).map(|_| Vec::new()).collect();
    for (i, (stream, leftover)) in opened.into_iter().enumerate() {
        let topic = &config.topics[topic_of[i] as usize];
        let mut p = Publisher::new(
            (stream, leftover),
            i as u32,
            topic,
            config,
            &timeline,
            scenario.run.seed,
            mark,
        )
        .map_err(EngineError::Io)?;
        if kafka {
            let ppt = config.publishers_per_topic;
            p.kafka = Some(kafka::Producer::new(
                topic,
                config.acks.wire(),
                kafka_publisher_partitions(config.partitions, i as u32 % ppt, ppt),
            ));
        }
        by_thread[i % publisher_threads].push(p);
    }
    let publishers: Vec<PublisherThread> = by_thread
        .into_iter()
        .enumerate()
        .map(|(index, publishers)| PublisherThread {
            index,
            publishers,
            rec: collector.recorder(false),
            config,
            timeline,
            stop: &stop,
            progress: &progress,
        })
        .collect();
    let mut fast_groups: Vec<Vec<SubscriptionState>> =
        (0..fast_threads).map(|_| Vec::new()).collect();
    for (i, s) in fast.into_iter().enumerate() {
        fast_groups[i % fast_threads].push(s);
    }
    let mut groups: Vec<(String, Vec<SubscriptionState>)> = fast_groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| (format!("subscriber-{i}"), g))
        .collect();
    if !slow.is_empty() {
        groups.push(("slow-subscriber-0".into(), slow));
    }
    let subscribers: Vec<SubscriberThread> = groups
        .into_iter()
        .map(|(role, subscriptions)| SubscriberThread {
            role,
            subscriptions,
            rec: collector.recorder(true),
            broker: config.broker,
            timeline,
            stop: &stop,
            progress: &progress,
        })
        .collect();
    let collecting = collector.start(ctx.live.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (pub_outs, sub_outs, sut_cpu_s) = std::thread::scope(|s| {
        let pub_handles: Vec<_> = publishers
            .into_iter()
            .map(|t| {
                let done = done_tx.clone();
                std::thread::Builder::new()
                    .name(format!("msgbench-publisher-{}", t.index))
                    .spawn_scoped(s, move || t.run(done))
                    .expect("spawning a thread")
            })
            .collect();
        drop(done_tx);
        let sub_handles: Vec<_> = subscribers
            .into_iter()
            .map(|t| {
                std::thread::Builder::new()
                    .name(format!("msgbench-{}", t.role))
                    .spawn_scoped(s, move || t.run())
                    .expect("spawning a thread")
            })
            .collect();
        let cpu = SpanCpu::new(sut_cpu_ns).over_workers(&timeline, &done_rx, pub_handles.len());
        (
            pub_handles
                .into_iter()
                .map(|h| h.join())
                .collect::<Vec<_>>(),
            sub_handles
                .into_iter()
                .map(|h| h.join())
                .collect::<Vec<_>>(),
            cpu,
        )
    });
    let mut recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    let mut threads: Vec<ThreadCpu> = Vec::new();
    let mut faults = Faults::default();
    let mut stats = vec![PublisherStats::default(); topic_of.len()];
    let mut acks = 0;
    let mut publish_latency: Option<hdrhistogram::Histogram<u64>> = None;
    for out in pub_outs {
        let out = out.map_err(|_| EngineError::WorkerPanicked("publisher"))??;
        threads.push(out.cpu);
        faults += out.faults;
        match publish_latency.as_mut() {
            Some(h) => h.add(&out.answer_latency).expect("same bounds"),
            None => publish_latency = Some(out.answer_latency),
        }
        for (i, s) in out.stats {
            acks += s.acks;
            stats[i as usize] = s;
        }
    }
    let mut states = Vec::new();
    for out in sub_outs {
        let out = out.map_err(|_| EngineError::WorkerPanicked("subscriber"))??;
        threads.push(out.cpu);
        states.extend(out.subscriptions);
    }
    states.sort_by_key(|s| plan.iter().position(|p| p.name == s.stats.name));
    let mut notes = Vec::new();
    if kafka {
        for s in &states {
            let members: Vec<_> = s
                .consumers
                .iter()
                .filter_map(|c| match &c.pull {
                    Some(Pull::Kafka(k)) => {
                        Some((k.member.clone(), k.fetcher.positions().to_vec()))
                    }
                    _ => None,
                })
                .collect();
            let topic = &config.topics[s.topic as usize];
            if let Err(why) = leave_kafka_group(config, address, topic, &members) {
                notes.push(format!(
                    "consumer group {} was not committed and left at the end ({why}): its members expire after {} s",
                    kafka_group_id(topic, &s.stats.name),
                    crate::net::kafka_group::SESSION_TIMEOUT_MS / 1000
                ));
            }
        }
    }
    let window = Schedule {
        t0_ns: timeline.t0_ns,
        measure_start_ns: timeline.measure_start_ns,
        end_ns: timeline.end_ns,
    };
    let streams: Vec<StreamClient> = states
        .iter()
        .map(|s| {
            let first = s.topic as usize * config.publishers_per_topic as usize;
            let pubs = &stats[first..first + config.publishers_per_topic as usize];
            stream_of(
                s,
                pubs,
                &classes,
                config.consumers_per_subscription > 1,
                config.broker.name(),
                &window,
            )
        })
        .collect();
    let mut sequence = SequenceErrors::default();
    let mut counters = Counters::default();
    for s in &streams {
        counters += s.counters;
        sequence += s.sequence;
        faults += s.faults.clone();
    }
    recording.counters = counters;
    recording.sequence = sequence;
    patch_intervals(&mut recording.intervals, &streams);
    let out = stop.output(&timeline, recording, (threads, faults), sut_cpu_s);
    let publish_latency = publish_latency.filter(|_| config.answers_publishes());
    Ok(PubsubOutput {
        out,
        streams,
        acks,
        publish_latency,
        notes,
    })
}

/// The consumer group of Kafka subscription `subscription` of `topic` (`msgbench.0-t0-s1`):
/// named after its topic, so runs on other topics never share a group.
pub fn kafka_group_id(topic: &str, subscription: &str) -> String {
    format!("{topic}-{subscription}")
}

/// A subscription's accounting against what the publishers of its topic sent (see the module
/// documentation).
pub fn account(
    delivered: &[u64],
    highest: &[Option<u64>],
    publishers: &[PublisherStats],
    closed: bool,
) -> Counters {
    let mut c = Counters::default();
    for ((p, &got), &top) in publishers.iter().zip(delivered).zip(highest) {
        let sent = p.measured;
        let got = got.min(sent);
        let lost = match (top, p.first_measured) {
            (Some(top), Some(first)) => top
                .saturating_add(1)
                .saturating_sub(first)
                .saturating_sub(got),
            _ => 0,
        }
        .min(sent - got);
        c.sent += sent;
        c.delivered += got;
        c.dropped += lost;
        let rest = sent - got - lost;
        if closed {
            c.failed += rest;
        } else {
            c.in_flight_end += rest;
        }
    }
    c.attempted = c.sent;
    c
}

/// The result record of one subscription.
fn stream_of(
    s: &SubscriptionState,
    publishers: &[PublisherStats],
    classes: &[String],
    shared: bool,
    broker: &str,
    window: &Schedule,
) -> StreamClient {
    let counters = account(
        &s.delivered,
        &s.loss_horizon(),
        publishers,
        s.stats.closed.is_some(),
    );
    let seen = s.sequence();
    let mut faults = s.stats.faults.clone();
    faults.protocol_errors += s.foreign;
    // Gaps of an at-most-once broker are its drops (in `dropped`); a shared subscription's
    // consumers read in parallel, so its order across them means nothing.
    let sequence = SequenceErrors {
        gaps: 0,
        duplicates: seen.duplicates,
        reordered: if shared { 0 } else { seen.reordered },
    };
    let seconds = s.stats.per_second.len().max(
        publishers
            .iter()
            .map(|p| p.per_second.len())
            .max()
            .unwrap_or(0),
    );
    let mut backlog = 0i64;
    let intervals = (0..seconds)
        .map(|k| {
            let generated: u64 = publishers
                .iter()
                .map(|p| p.per_second.get(k).copied().unwrap_or(0))
                .sum();
            let mine = s.stats.per_second.get(k).copied().unwrap_or_default();
            backlog += generated as i64 - mine.delivered as i64;
            StreamInterval {
                start_s: k as f64,
                length_s: 1.0,
                generated,
                written: generated,
                delivered: mine.delivered,
                dropped: 0,
                backlog,
                latency_p50_ns: mine.p50_ns,
                latency_p99_ns: mine.p99_ns,
                latency_max_ns: mine.max_ns,
            }
        })
        .collect();
    StreamClient {
        name: s.stats.name.clone(),
        group: classes[s.stats.group].clone(),
        kind: broker.into(),
        server: None,
        counters,
        sequence,
        gaps_seen: seen.gaps,
        latency: Percentiles::of(&s.stats.total),
        latency_histogram: encode(&s.stats.total),
        faults,
        closed: s
            .stats
            .closed
            .as_ref()
            .map(|(why, at)| closed_when(why, *at, window)),
        page_clock: None,
        intervals,
    }
}

/// The run's seconds: published for all subscriptions, and the backlog (published −
/// delivered, cumulative).
fn patch_intervals(intervals: &mut [IntervalSample], streams: &[StreamClient]) {
    let mut backlog = 0i64;
    for (k, sample) in intervals.iter_mut().enumerate() {
        let generated: u64 = streams
            .iter()
            .filter_map(|s| s.intervals.get(k))
            .map(|i| i.generated)
            .sum();
        sample.sent = generated;
        backlog += generated as i64 - sample.delivered as i64;
        sample.backlog = backlog;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publisher(first: u64, measured: u64) -> PublisherStats {
        PublisherStats {
            sent_all: first + measured,
            first_measured: Some(first),
            measured,
            ..Default::default()
        }
    }

    #[test]
    fn missing_messages_before_the_last_that_came_are_lost_the_rest_in_flight_or_failed() {
        let pubs = [publisher(10, 100), publisher(0, 50)];
        // Publisher 0: 90 of 100 came, the last at seq 104 (so 95 were due by then: 5 lost,
        // 5 after it still on their way); publisher 1: all 50.
        let c = account(&[90, 50], &[Some(104), Some(49)], &pubs, false);
        assert_eq!(
            (
                c.attempted,
                c.sent,
                c.delivered,
                c.dropped,
                c.in_flight_end,
                c.failed
            ),
            (150, 150, 140, 5, 5, 0)
        );
        c.check().unwrap();
        // The same when the subscription's connection ended: the rest failed.
        let c = account(&[90, 50], &[Some(104), Some(49)], &pubs, true);
        assert_eq!((c.dropped, c.failed, c.in_flight_end), (5, 5, 0));
        c.check().unwrap();
        // Nothing measured came at all.
        let c = account(&[0, 0], &[None, None], &pubs, false);
        assert_eq!((c.delivered, c.dropped, c.in_flight_end), (0, 0, 150));
        c.check().unwrap();
    }

    #[test]
    fn progress_tells_subscribers_when_every_publisher_is_done() {
        let p = Progress::new(2);
        p.stopped_sending(7);
        p.finished(1, 30);
        assert_eq!((p.final_count(0), p.final_count(1)), (None, Some(30)));
        assert_eq!(p.all_finished(), None);
        p.stopped_sending(9);
        p.finished(0, 10);
        assert_eq!(p.all_finished(), Some(9));
    }
}
