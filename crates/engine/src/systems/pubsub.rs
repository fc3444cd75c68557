//! The `pubsub` system: publishers and subscriptions on a message broker (NATS core, Redis
//! Pub/Sub, MQTT, Kafka) at any address, or one started by `[sut]`. The driver is
//! [`crate::drivers::pubsub`]; this file joins what it measured into the run's record: one
//! stream record per subscription, the run's counters their sum, and what the reader must know.
use crate::cpu::CpuSnapshot;
use crate::drivers::pubsub;
use crate::error::EngineError;
use crate::harness::measured::unix_ms_of;
use crate::harness::sut::resolve;
use crate::harness::{Measured, NoServer, RunContext, SystemUnderTest};
use msgbench_model::pubsub::{Broker, PubsubConfig};
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;

/// Runs one `pubsub` scenario.
pub fn run(
    scenario: &Scenario,
    config: &PubsubConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::<NoServer>::external(sut, &ctx.stop)?;
    let address = resolve(&config.address)?;
    let measured = pubsub::drive(scenario, config, address, ctx, &|| server.cpu_ns())?;
    let mut notes = server.process_notes();
    notes.extend(measured.notes.iter().cloned());
    notes.extend(measured.streams.iter().filter_map(|s| {
        let why = s.closed.as_deref()?;
        Some(format!("subscription {} ended early: {why}", s.name))
    }));
    let lost: u64 = measured.streams.iter().map(|s| s.counters.dropped).sum();
    if lost > 0 {
        notes.push(if config.broker == Broker::RedisStreams {
            format!(
                "{lost} messages were removed from their streams before a subscription read them (each stream keeps about pubsub.stream_max_messages = {}: gaps in a publisher's sequence before a later message that came)",
                config.stream_max_messages
            )
        } else {
            format!(
                "the broker lost {lost} messages on their way to subscriptions (gaps in a publisher's sequence before a later message that came)"
            )
        });
    }
    let out = measured.out;
    let mut info = info(config, measured.acks);
    info.extend(measured.info.iter().cloned());
    if let Some(h) = measured.publish_latency.as_ref().filter(|h| !h.is_empty()) {
        let d = |ns: u64| match ns {
            0..1_000 => format!("{ns} ns"),
            1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
            1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
            _ => format!("{:.2} s", ns as f64 / 1e9),
        };
        // A shard's line says whose: the merged run keeps each shard's.
        let whose = match config.shard.is_whole() {
            true => String::new(),
            false => format!("shard {}: ", config.shard),
        };
        info.push(format!(
            "{whose}publish latency (the broker's answer − the intended publish time, {} measured publishes answered): p50 {}, p99 {}, p99.9 {}, max {}",
            h.len(),
            d(h.value_at_quantile(0.5)),
            d(h.value_at_quantile(0.99)),
            d(h.value_at_quantile(0.999)),
            d(h.max())
        ));
    }
    Ok(Measured {
        recording: out.recording,
        classes: scenario.system.class_names(),
        span_ns: out.span_ns,
        span_start_unix_ms: unix_ms_of(out.measure_start_ns),
        process_cpu: CpuSnapshot::process().since(&process_before),
        threads: out.threads,
        interrupted: out.interrupted,
        config: scenario.system.describe(),
        faults: out.faults,
        sut_cpu_s: out.sut_cpu_s,
        stopped_by: out.stopped_by,
        notes,
        streams: measured.streams,
        pubsub_shard: measured.shard_figures,
        info,
        publish_latency: measured
            .publish_latency
            .as_ref()
            .filter(|h| !h.is_empty())
            .map(msgbench_model::histogram::Percentiles::of),
    })
}

/// How a run logged in, in words (never a secret): `as user bench with a password`.
fn login_words(c: &msgbench_model::broker_auth::Credentials) -> String {
    let user = c
        .user
        .as_deref()
        .map_or(String::new(), |u| format!(" as user {u}"));
    let with = match (&c.mechanism, &c.password, &c.token, &c.nkey_seed, &c.creds) {
        (Some(m), ..) => format!("with SASL {}", m.name()),
        (None, Some(_), ..) => "with a password".into(),
        (None, None, Some(_), ..) => "with a token".into(),
        (None, None, None, Some(_), _) => "with an NKey (the INFO's nonce signed)".into(),
        (None, None, None, None, Some(_)) => {
            "with a .creds file (a user JWT, the nonce signed)".into()
        }
        _ => "without a secret".into(),
    };
    format!("{user} {with}").trim_start().to_string()
}

/// How to read the figures.
fn info(config: &PubsubConfig, acks: u64) -> Vec<String> {
    let mut info = vec![format!(
        "latency is end to end: a subscription's receipt of each message − the time its publisher was scheduled to publish it ({}); per subscription, dropped = messages missing before a later one from the same publisher came",
        if config.shard.is_whole() {
            "publisher and subscriber share this host's clock"
        } else {
            "counted from the start the shards agreed on (--start-at), on each one's wall clock"
        }
    )];
    if !config.shard.is_whole() {
        info.push(format!(
            "shard {} of a publish/subscribe run: its subscriptions count what came from every shard's publishers, each other shard's publisher taken to have sent what came from it; `msgbench merge` accounts every subscription against what every publisher sent",
            config.shard
        ));
    }
    if let Some(login) = config.auth.as_ref().map(login_words) {
        info.push(format!("logged in to the broker {login} ([pubsub.auth])"));
    }
    if let Some(at) = &config.subscriber_address {
        info.push(format!(
            "publishers on {}, subscriptions on {at} (pubsub.subscriber_address): every message crossed from one server to the other, and its latency includes the hop",
            config.address
        ));
    }
    if config.tls.as_ref().is_some_and(|t| t.insecure) {
        info.push("TLS certificate not verified (pubsub.tls.insecure = true): the broker was not authenticated".into());
    }
    if config.consumers_per_subscription > 1 {
        info.push(format!(
            "shared subscriptions: {} consumers read each one, each message to one of them; their order across consumers is not checked",
            config.consumers_per_subscription
        ));
    }
    match (config.broker, config.qos) {
        (Broker::Redis, _) => info.push(format!(
            "Redis answered {acks} PUBLISH commands with the number of subscribers reached"
        )),
        (Broker::Mqtt | Broker::Mqtt5, 1) => info.push(format!(
            "MQTT QoS 1: the broker acknowledged {acks} publishes (PUBACK), and every delivery was acknowledged"
        )),
        (Broker::RedisStreams, _) => info.push(format!(
            "Redis Streams: each publish is an XADD (answered {acks} times with the entry's id) to a stream kept to about {} entries (MAXLEN ~); each subscription is a consumer group set at the stream's end when the run opened, read with XREADGROUP and acknowledged with XACK; what the stream removed before a group read it is dropped, what it still held at the end undelivered",
            config.stream_max_messages
        )),
        (Broker::Jetstream, _) => info.push(format!(
            "NATS JetStream: each topic a stream kept to {} messages (file storage, oldest removed first); the stream answered {acks} publishes (PubAck); each subscription a durable push consumer from the stream's end (a deliver group when shared), at most {} deliveries unacknowledged per consumer, each acknowledged",
            config.stream_max_messages,
            crate::drivers::pubsub::brokers::jetstream::max_ack_pending(config)
        )),
        (Broker::Rabbitmq, _) => info.push(rabbitmq_words(config, acks)),
        (Broker::Kafka, _) => {
            info.push(format!(
                "Kafka, acks={}: {}; each subscription is a consumer group (named <topic>-<subscription>) joined through the broker's group coordinator, its consumers fetching from the end of the partitions assigned to them when the run opened (from each partition's leader, followed when it moves), heartbeating while the run lasts, committing their positions and leaving at the end; Kafka keeps every message, so one that had not come when the run ended is undelivered (lag), never dropped",
                config.acks.name(),
                if config.answers_publishes() {
                    format!("the broker answered {acks} published records, one Produce response per batch")
                } else {
                    "the broker answers no publish".to_string()
                }
            ));
            if config.compression != msgbench_model::pubsub::Compression::None {
                info.push(format!(
                    "each batch's records compressed with {} (as a producer's compression.type), on the publisher's thread: the compression's time is in the latency, as a producer's is",
                    config.compression.name()
                ));
            }
            if config.partitions > 1 {
                info.push(format!(
                    "{} partitions per topic: Kafka orders messages within a partition only, so a subscription's messages are counted (none missing, none twice) rather than checked in sequence; a publisher fills its partitions in turn, one request's batch each (in a cluster, its messages dealt over the brokers that lead them, one connection each)",
                    config.partitions
                ));
            }
        }
        _ => {}
    }
    info
}

/// What a RabbitMQ run did, in a line.
fn rabbitmq_words(config: &PubsubConfig, acks: u64) -> String {
    let r = &config.rabbitmq;
    let whose = match config.shard.is_whole() {
        true => String::new(),
        false => format!(" (shard {}'s publishers)", config.shard),
    };
    let confirms = if r.confirms {
        format!(
            "publisher confirms: the broker confirmed {acks} publishes{whose} once their queues held them"
        )
    } else {
        "no publisher confirms: a publish is done once written".into()
    };
    let prefetch = match r.prefetch {
        0 => "no prefetch bound".to_string(),
        n => format!("a prefetch of {n}"),
    };
    let ack = if r.auto_ack {
        "acknowledged by the broker's sending them (ack = auto)"
    } else {
        "each delivery acknowledged (basic.ack)"
    };
    let lifetime = match config.shard.is_whole() {
        true => "declared empty when the run opened and deleted at its end",
        false => {
            "declared and emptied when the run opened, left at its end (another shard may read it)"
        }
    };
    format!(
        "RabbitMQ: each topic a {} exchange, each subscription a {} queue bound to it (named <topic>.<subscription>), {lifetime}; {confirms}; consumers with {prefetch}, {ack}{}; a queue keeps every message until it is read, so one that had not come when the run ended is undelivered, never dropped",
        r.exchange_type.name(),
        r.queue_type.name(),
        if r.persistent { "; messages persistent (delivery mode 2)" } else { "" }
    )
}
