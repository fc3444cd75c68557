//! Publish/subscribe through a broker: every connection opened and subscribed before the
//! schedule starts (so no subscription misses the first message), then publisher threads
//! ([`publisher`]) and subscriber threads ([`subscriber`]) on the run's timeline, and at the
//! end each subscription's accounting from both ends ([`accounting`]). The run counters are the
//! sum over its subscriptions: every subscription of a topic is meant to get every message of
//! it.
//!
//! The family's one seam is [`client::BrokerClient`]: each broker is a file in [`brokers`]
//! (its opening, its protocol, its end of run) and one line of [`brokers::client`]; the run
//! and its threads never name a broker. Imports run one way: `brokers` → `client` →
//! `opening` → `protocol`; the threads read only `protocol`, `consumer` and `progress`.
pub mod accounting;
pub mod brokers;
pub mod client;
pub mod consumer;
pub mod message;
pub mod opening;
pub mod progress;
pub mod protocol;
pub mod publisher;
pub mod stream;
pub mod subscriber;
pub mod watchdog;
pub mod wire;

use crate::drivers::streams::stream_stats::{patch_run_intervals, run_sums};
use crate::drivers::tls::TlsConnector;
use crate::error::EngineError;
use crate::harness::threads::run_threads;
use crate::harness::{DriverOutput, RunContext, RunStop, Timeline};
use crate::net::tick::Schedule;
use crate::recorder::Recording;
use accounting::stream_of;
use client::{BrokerClient, Ended, OpenedPublisher};
use msgbench_model::pubsub::PubsubConfig;
use msgbench_model::result::{Faults, StreamClient, ThreadCpu};
use msgbench_model::scenario::Scenario;
use opening::Opening;
use progress::{Progress, PublisherStats};
use protocol::BrokerProtocol;
use publisher::{Publisher, PublisherOut, PublisherThread};
use std::net::SocketAddr;
use stream::TlsOpening;
use subscriber::{SubscriberOut, SubscriberThread, SubscriptionState};
use watchdog::Watchdog;

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
    /// How to read the figures: the TLS handshakes of the opening.
    pub info: Vec<String>,
    /// A shard's figures for `merge` (`--shard`).
    pub shard_figures: Option<msgbench_model::result::PubsubShardFigures>,
}

/// Runs the publishers and subscribers of `config` against the broker at `address`.
pub fn drive(
    scenario: &Scenario,
    config: &PubsubConfig,
    address: SocketAddr,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<PubsubOutput, EngineError> {
    let mark = run_mark(scenario, config)?;
    let watchdog = Watchdog::start(ctx.stop.clone(), config.open_timeout);
    let mut broker = brokers::client(config.broker);
    let tls = tls_opening(config, broker.as_ref())?;
    let subscriber_address = match &config.subscriber_address {
        Some(written) => crate::harness::sut::resolve(written)?,
        None => address,
    };
    let run = Opening {
        config,
        address,
        subscriber_address,
        mark,
        watchdog: &watchdog,
        tls: tls.as_ref(),
    };
    let opened = open_all(&run, broker.as_mut());
    watchdog.opened();
    // Cut by the watchdog: its reason, not the read it cut short.
    let (subscriptions, publishers) = match watchdog.cut() {
        Some(why) => return Err(opening::broker_error(config, why)),
        None => opened?,
    };
    broker.opened();
    let timeline = Timeline::from_now(&scenario.run);
    let stop = RunStop::new(&ctx.stop);
    let frame = Frame {
        scenario,
        config,
        ctx,
        timeline,
        stop: &stop,
        mark: run.mark,
    };
    let threads = frame.run_threads(broker.protocol(), subscriptions, publishers, sut_cpu_ns)?;
    let (mut gathered, states) = gather(config, threads)?;
    let notes = finish(broker.as_mut(), &run, &states);
    let streams = account_subscriptions(config, &states, &gathered.stats, &timeline);
    let shard_figures = (!config.shard.is_whole())
        .then(|| accounting::shard_figures(config, &states, &gathered.stats));
    let (mut counters, sequence) = run_sums(&streams, &mut gathered.faults);
    // The publishers' sends that waited for the broker (the subscriptions do not know them).
    counters.held_by_window = gathered.recording.counters.held_by_window;
    gathered.recording.counters = counters;
    gathered.recording.sequence = sequence;
    patch_run_intervals(
        &mut gathered.recording.intervals,
        &streams,
        config.shard.is_whole(),
    );
    // The opening's handshakes, counted where the request/response runs count theirs.
    for ns in tls.iter().flat_map(TlsOpening::handshakes) {
        gathered.faults.connections.add_handshake(ns);
    }
    let cpu = (gathered.threads, gathered.faults);
    let out = stop.output(&timeline, gathered.recording, cpu, gathered.sut_cpu_s);
    Ok(PubsubOutput {
        out,
        streams,
        acks: gathered.acks,
        publish_latency: gathered
            .publish_latency
            .filter(|_| config.answers_publishes()),
        notes,
        info: (tls.iter().map(TlsOpening::summary))
            .chain(broker.info(config))
            .collect(),
        shard_figures,
    })
}

/// What the broker must be told at the end, for every subscription of this process.
fn finish(
    broker: &mut dyn BrokerClient,
    run: &Opening<'_>,
    states: &[SubscriptionState],
) -> Vec<String> {
    let ended: Vec<Ended> = states
        .iter()
        .map(|s| Ended {
            name: &s.stats.name,
            topic: &run.config.topics[s.topic as usize],
            consumers: &s.consumers,
        })
        .collect();
    broker.finish(run, &ended)
}

/// This run's mark on every message: another run publishing on the same topics (another
/// process, another host) is not counted as ours. Random; the shards of one run derive theirs
/// from the start they agreed on (`--start-at`), so that each counts the others' messages.
fn run_mark(scenario: &Scenario, config: &PubsubConfig) -> Result<message::RunMark, EngineError> {
    if config.shard.is_whole() {
        return Ok(rand::random());
    }
    let Some(at) = scenario.run.start_unix_ns else {
        return Err(opening::broker_error(
            config,
            format!(
                "shard {} of a publish/subscribe run needs --start-at (one instant for every shard, e.g. --start-at 2026-12-08T09:00:00Z): the shards' messages are marked by the start they agree on, and their latency counts from it",
                config.shard
            ),
        ));
    };
    // SplitMix64 of the agreed start: the same four bytes in every shard of this run.
    let mut z = at.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    Ok((z as u32).to_le_bytes())
}

/// TLS to the broker when the scenario asks (`[pubsub.tls]`): after the broker's plaintext
/// greeting for a broker that greets (NATS's `INFO`), from the first byte for the others.
fn tls_opening(
    config: &PubsubConfig,
    broker: &dyn BrokerClient,
) -> Result<Option<TlsOpening>, EngineError> {
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let connector = TlsConnector::for_broker(tls).map_err(|e| opening::broker_error(config, e))?;
    let after_greeting = broker.protocol().greeting().is_some();
    Ok(Some(TlsOpening::new(connector, after_greeting)))
}

/// The opening: what the broker prepares, every subscription's consumers, every publisher.
fn open_all(
    run: &Opening<'_>,
    broker: &mut dyn BrokerClient,
) -> Result<(Vec<SubscriptionState>, Vec<OpenedPublisher>), EngineError> {
    broker.prepare(run)?;
    let subscriptions = open_subscriptions(run, broker)?;
    let mut publishers = Vec::new();
    let topic_of = run.config.publishers();
    for g in run.config.local_publishers() {
        let topic = &run.config.topics[topic_of[g as usize] as usize];
        publishers.push(broker.open_publisher(run, g, topic)?);
    }
    Ok((subscriptions, publishers))
}

/// Every subscription's consumers, opened and subscribed, in plan order.
fn open_subscriptions(
    run: &Opening<'_>,
    broker: &mut dyn BrokerClient,
) -> Result<Vec<SubscriptionState>, EngineError> {
    let config = run.config;
    let per = u64::from(config.consumers_per_subscription);
    let mut subscriptions = Vec::new();
    for sub in &config.subscriptions() {
        let slots: Vec<client::Slot> = (config.local_consumers(sub).into_iter())
            .map(|k| client::Slot {
                k,
                sid: 1 + u64::from(sub.index) * per + u64::from(k),
            })
            .collect();
        let consumers = broker.open_consumers(run, sub, &slots)?;
        let cost = config.cost_ns(sub);
        let (ordered, retains) = (broker.ordered(config), broker.retains());
        subscriptions.push(SubscriptionState::new(
            sub, config, cost, consumers, run.mark, ordered, retains,
        ));
    }
    Ok(subscriptions)
}

/// What the run's threads share.
struct Frame<'a> {
    scenario: &'a Scenario,
    config: &'a PubsubConfig,
    ctx: &'a RunContext,
    timeline: Timeline,
    stop: &'a RunStop<'a>,
    mark: message::RunMark,
}

/// What the threads returned, and the run's recording.
struct Threads {
    recording: Recording,
    publishers: Vec<std::thread::Result<Result<PublisherOut, EngineError>>>,
    subscribers: Vec<std::thread::Result<Result<SubscriberOut, EngineError>>>,
    sut_cpu_s: Option<f64>,
}

impl Frame<'_> {
    /// Publisher and subscriber threads on the run's timeline, until they end.
    fn run_threads(
        &self,
        protocol: &dyn BrokerProtocol,
        subscriptions: Vec<SubscriptionState>,
        opened: Vec<OpenedPublisher>,
        sut_cpu_ns: &dyn Fn() -> Option<u64>,
    ) -> Result<Threads, EngineError> {
        let (config, timeline) = (self.config, self.timeline);
        let progress = Progress::of_shard(config.publishers().len(), opened.len());
        let groups = subscriber_groups(config, subscriptions);
        let publisher_threads = (config.publisher_threads as usize).min(opened.len());
        let classes = config.class_names().len();
        let recorders = publisher_threads + groups.len();
        let mut collector = timeline.collector(&self.scenario.run, classes, recorders);
        let mut by_thread: Vec<Vec<Publisher>> =
            (0..publisher_threads).map(|_| Vec::new()).collect();
        let topic_of = config.publishers();
        for (i, (opened, g)) in opened
            .into_iter()
            .zip(config.local_publishers())
            .enumerate()
        {
            let topic = &config.topics[topic_of[g as usize] as usize];
            let seed = self.scenario.run.seed;
            let p = Publisher::new(opened, g, topic, config, &timeline, seed, self.mark)
                .map_err(EngineError::Io)?;
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
                protocol,
                timeline,
                stop: self.stop,
                progress: &progress,
            })
            .collect();
        let subscribers: Vec<SubscriberThread> = groups
            .into_iter()
            .map(|(role, subscriptions)| SubscriberThread {
                role,
                subscriptions,
                rec: collector.recorder(true),
                protocol,
                timeline,
                stop: self.stop,
                progress: &progress,
            })
            .collect();
        let collecting = collector.start(self.ctx.live.clone());
        let senders = (publishers.into_iter())
            .map(|t| (format!("publisher-{}", t.index), move |done| t.run(done)))
            .collect();
        let receivers = (subscribers.into_iter())
            .map(|t| (t.role.clone(), move || t.run()))
            .collect();
        let ran = run_threads(&timeline, sut_cpu_ns, senders, receivers);
        let (publishers, subscribers, sut_cpu_s) = (ran.senders, ran.receivers, ran.sut_cpu_s);
        let recording = collecting
            .join()
            .map_err(|_| EngineError::WorkerPanicked("collector"))?;
        Ok(Threads {
            recording,
            publishers,
            subscribers,
            sut_cpu_s,
        })
    }
}

/// The subscriptions dealt to their threads: the fast ones over `subscriber_threads`, the slow
/// ones together on one of their own.
fn subscriber_groups(
    config: &PubsubConfig,
    subscriptions: Vec<SubscriptionState>,
) -> Vec<(String, Vec<SubscriptionState>)> {
    let (fast, slow): (Vec<_>, Vec<_>) =
        subscriptions.into_iter().partition(|s| s.stats.group == 0);
    let fast_threads = (config.subscriber_threads as usize).min(fast.len());
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
    groups
}

/// What the threads measured, gathered.
struct Gathered {
    recording: Recording,
    threads: Vec<ThreadCpu>,
    faults: Faults,
    stats: Vec<PublisherStats>,
    acks: u64,
    publish_latency: Option<hdrhistogram::Histogram<u64>>,
    sut_cpu_s: Option<f64>,
}

/// Gathers the threads' results; the subscriptions back in plan order.
fn gather(
    config: &PubsubConfig,
    threads: Threads,
) -> Result<(Gathered, Vec<SubscriptionState>), EngineError> {
    let mut g = Gathered {
        recording: threads.recording,
        threads: Vec::new(),
        faults: Faults::default(),
        stats: vec![PublisherStats::default(); config.publishers().len()],
        acks: 0,
        publish_latency: None,
        sut_cpu_s: threads.sut_cpu_s,
    };
    for out in threads.publishers {
        let out = out.map_err(|_| EngineError::WorkerPanicked("publisher"))??;
        g.threads.push(out.cpu);
        g.faults += out.faults;
        match g.publish_latency.as_mut() {
            Some(h) => h.add(&out.answer_latency).expect("same bounds"),
            None => g.publish_latency = Some(out.answer_latency),
        }
        for (i, s) in out.stats {
            g.acks += s.acks;
            g.stats[i as usize] = s;
        }
    }
    let mut states = Vec::new();
    for out in threads.subscribers {
        let out = out.map_err(|_| EngineError::WorkerPanicked("subscriber"))??;
        g.threads.push(out.cpu);
        states.extend(out.subscriptions);
    }
    let plan = config.subscriptions();
    states.sort_by_key(|s| plan.iter().position(|p| p.name == s.stats.name));
    Ok((g, states))
}

/// One stream record per subscription, accounted against its topic's publishers.
fn account_subscriptions(
    config: &PubsubConfig,
    states: &[SubscriptionState],
    stats: &[PublisherStats],
    timeline: &Timeline,
) -> Vec<StreamClient> {
    let window = Schedule {
        t0_ns: timeline.t0_ns,
        measure_start_ns: timeline.measure_start_ns,
        end_ns: timeline.end_ns,
    };
    let classes = config.class_names();
    let per_topic = config.publishers_per_topic as usize;
    let shard = config.shard;
    states
        .iter()
        .map(|s| {
            let first = s.topic as usize * per_topic;
            let mut pubs = stats[first..first + per_topic].to_vec();
            if !shard.is_whole() {
                // Another shard's publisher — or any, when other shards hold some of this
                // subscription's consumers — taken to have sent what came from it (its own
                // counts are in its shard's result; `merge` accounts with them).
                let split = s.consumers.len() < config.consumers_per_subscription as usize;
                for (i, p) in pubs.iter_mut().enumerate() {
                    if split || !shard.holds((first + i) as u64) {
                        p.measured = s.delivered[i];
                    }
                }
            }
            let shared = config.consumers_per_subscription > 1;
            let mut stream = stream_of(s, &pubs, &classes, shared, config.broker.name(), &window);
            if !shard.is_whole() {
                // What every shard's publishers generated per second is known to `merge`.
                for i in &mut stream.intervals {
                    (i.generated, i.written, i.backlog) = (i.delivered, i.delivered, 0);
                }
            }
            stream
        })
        .collect()
}
