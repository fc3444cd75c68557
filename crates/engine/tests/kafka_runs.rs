//! The `pubsub` system on a real Kafka broker (KRaft mode, one node, from the jars
//! `scripts/setup.sh` fetches; one broker for this file, each test on topics of its own):
//! partitions and shared subscriptions accounted message by message, acks 0, 1 and all, a slow
//! subscription whose lag grows while a fast one keeps up, a rebalance during the run (Kafka's
//! console consumer joining the run's group and leaving it), and a broker that is not Kafka.
mod common;

use common::{
    assert_subscriptions_accounted, dead_address, kafka, run_one, try_run, BrokerProcess,
};
use std::time::Duration;

fn scenario(prefix: &str, addr: std::net::SocketAddr, extra: &str) -> String {
    format!(
        "name = \"kafka\"\nsystem = \"pubsub\"\n[run]\nduration = \"1s\"\nwarmup = \"300ms\"\ndrain_timeout = \"3s\"\n[pacing]\nmode = \"rate\"\nper_sec = 4000\n[pubsub]\nbroker = \"kafka\"\naddress = \"{addr}\"\ntopic_prefix = \"{prefix}\"\n{extra}"
    )
}

#[test]
fn partitions_and_shared_subscriptions_deliver_every_message_once() {
    let addr = kafka();
    // 2 topics × 4 partitions, 2 publishers per topic, 2 subscriptions per topic each read by
    // 2 consumers (2 partitions each).
    let r = run_one(
        &scenario(
            "shared",
            addr,
            "topics = 2\npartitions = 4\npublishers_per_topic = 2\nsubscriptions_per_topic = 2\nconsumers_per_subscription = 2",
        ),
        &[],
    );
    assert_subscriptions_accounted(&r);
    assert_eq!(r.streams.len(), 4);
    for s in &r.streams {
        let c = s.counters;
        // 4000/s over 2 topics, 1 s measured.
        assert!((1900..=2100).contains(&c.sent), "{}: {c:?}", s.name);
        assert_eq!(c.delivered, c.sent, "{}: {c:?}", s.name);
        assert_eq!((c.dropped, c.failed), (0, 0), "{}", s.name);
        assert_eq!(s.sequence.duplicates, 0, "{}", s.name);
        assert_eq!(s.kind, "kafka");
        assert!(s.latency.p50_ns > 0 && s.latency.p50_ns < 200_000_000);
    }
    let text = r.info.join("\n");
    assert!(text.contains("4 partitions per topic"), "{text}");
    assert!(text.contains("publish latency"), "{text}");
    // Each request answered: every record published, warm-up included, acknowledged.
    assert!(text.contains("acks=1"), "{text}");
    // Each subscription was a consumer group of the broker's: its positions committed at the
    // end (nothing left to read: lag 0 on every partition), and its members gone.
    let described = describe_group("shared.1-t1-s0");
    assert!(described.contains("has no active members"), "{described}");
    let rows: Vec<&str> = described
        .lines()
        .filter(|l| l.starts_with("shared.1-t1-s0 "))
        .collect();
    assert_eq!(rows.len(), 4, "{described}");
    for row in rows {
        let lag = row.split_whitespace().nth(5);
        assert_eq!(lag, Some("0"), "{row}");
    }
}

/// Kafka's own `kafka-consumer-groups --describe` of `group` (the tools' jars fetched by
/// scripts/setup-kafka.sh).
fn describe_group(group: &str) -> String {
    let libs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/kafka/libs/*");
    let o = std::process::Command::new("java")
        .args([
            "-cp",
            libs,
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            &kafka().to_string(),
            "--describe",
            "--group",
            group,
        ])
        .output()
        .expect("java (scripts/setup.sh installs it)");
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn every_acks_setting_delivers_in_order_on_one_partition() {
    let addr = kafka();
    for acks in ["0", "1", "all"] {
        let r = run_one(
            &scenario(
                &format!("acks-{}", acks.replace("all", "a")),
                addr,
                "subscriptions_per_topic = 2",
            ),
            &[&format!("pubsub.acks=\"{acks}\"")],
        );
        assert_subscriptions_accounted(&r);
        for s in &r.streams {
            let c = s.counters;
            assert_eq!(c.delivered, c.sent, "acks={acks} {}: {c:?}", s.name);
            // One partition: Kafka keeps each publisher's order, checked message by message.
            assert_eq!(s.sequence.total() + s.gaps_seen, 0, "acks={acks}");
        }
        let answered = r.info.iter().any(|i| i.contains("publish latency"));
        assert_eq!(answered, acks != "0", "acks={acks}: {:?}", r.info);
        // Every measured publish answered (one topic: what its subscription was sent), in the
        // result's publish latency.
        match r.publish_latency {
            Some(p) => assert_eq!(p.count, r.streams[0].counters.sent, "acks={acks}"),
            None => assert_eq!(acks, "0"),
        }
    }
}

#[test]
fn a_slow_subscriber_lags_behind_while_the_fast_one_keeps_up() {
    let addr = kafka();
    let r = run_one(
        &scenario(
            "slow",
            addr,
            "subscriptions_per_topic = 2\nslow_subscriptions = 1\nslow_cost = \"1ms\"\nslow_work = \"sleep\"",
        ),
        &["run.drain_timeout=\"1s\""],
    );
    assert_subscriptions_accounted(&r);
    let (slow, fast) = (&r.streams[0], &r.streams[1]);
    assert_eq!(slow.group, "slow-subscriber");
    // 4000/s offered, 1000/s handled: Kafka keeps the rest in its log, so what has not come
    // is lag (in flight), never lost; the backlog line climbs.
    assert_eq!(slow.counters.dropped, 0, "{:?}", slow.counters);
    assert!(slow.counters.in_flight_end > 1000, "{:?}", slow.counters);
    let backlog: Vec<i64> = slow.intervals.iter().map(|i| i.backlog).collect();
    assert!(backlog.last().copied().unwrap_or(0) > 1000, "{backlog:?}");
    assert!(slow.latency.p50_ns > 100_000_000, "{:?}", slow.latency);
    assert_eq!(fast.counters.delivered, fast.counters.sent);
    assert!(fast.latency.p99_ns < 200_000_000, "{:?}", fast.latency);
}

#[test]
fn a_broker_that_is_not_kafka_or_not_there_is_one_clear_error() {
    let (outcome, dir) = try_run(&scenario("dead", dead_address(), ""), &[]);
    let e = outcome.map(|_| ()).expect_err("refused").to_string();
    assert!(
        e.contains("cannot connect") && e.contains("kafka-broker.sh"),
        "{e}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    let redis = BrokerProcess::redis(&[]);
    let (outcome, _dir) = try_run(&scenario("notkafka", redis.addr, ""), &[]);
    let e = outcome.map(|_| ()).expect_err("refused").to_string();
    // Redis waits for the end of a line that Kafka's binary request never sends.
    assert!(
        e.contains("a kafka server") && e.contains("pubsub.broker"),
        "{e}"
    );
    // A topic that exists with other partitions than the scenario's.
    let addr = kafka();
    run_one(
        &scenario("fixed", addr, "partitions = 2"),
        &["run.duration=\"300ms\""],
    );
    let (outcome, _dir) = try_run(&scenario("fixed", addr, "partitions = 3"), &[]);
    let e = outcome.map(|_| ()).expect_err("refused").to_string();
    assert!(
        e.contains("exists with 2 partitions") && e.contains("pubsub.partitions = 2"),
        "{e}"
    );
}

/// Batches compressed with each of Kafka's codecs are taken by the broker (it validates every
/// compressed batch it is sent) and read back by the consumer groups, every message accounted
/// for; the info says which codec.
#[test]
fn batches_compressed_with_each_codec_are_written_and_read() {
    let addr = kafka();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let r = run_one(
            &scenario(
                &format!("codec-{codec}"),
                addr,
                &format!(
                    "partitions = 2\nsubscriptions_per_topic = 2\nmessage_bytes = 512\n[pubsub.kafka]\ncompression = \"{codec}\""
                ),
            ),
            &[],
        );
        assert_subscriptions_accounted(&r);
        for s in &r.streams {
            let c = s.counters;
            assert!(c.sent > 3_000, "{codec} {}: {c:?}", s.name);
            assert_eq!(c.delivered, c.sent, "{codec} {}: {c:?}", s.name);
        }
        let text = r.info.join("\n");
        assert!(text.contains(&format!("compressed with {codec}")), "{text}");
    }
}

/// Batches the broker itself compressed (a topic whose `compression.type` is a codec: Kafka's
/// Java code recompresses every batch it is sent) are read by the consumers, every message
/// accounted for.
#[test]
fn batches_compressed_by_the_broker_are_read() {
    let addr = kafka();
    let libs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/kafka/libs/*");
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let prefix = format!("broker-{codec}");
        let made = std::process::Command::new("java")
            .args([
                "-cp",
                libs,
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                &addr.to_string(),
                "--create",
                "--topic",
                &format!("{prefix}.0"),
                "--partitions",
                "1",
                "--config",
                &format!("compression.type={codec}"),
            ])
            .output()
            .expect("java (scripts/setup.sh installs it)");
        assert!(made.status.success(), "{made:?}");
        let r = run_one(&scenario(&prefix, addr, "message_bytes = 512"), &[]);
        assert_subscriptions_accounted(&r);
        for s in &r.streams {
            let c = s.counters;
            assert!(c.sent > 3_000, "{codec} {}: {c:?}", s.name);
            assert_eq!(c.delivered, c.sent, "{codec} {}: {c:?}", s.name);
        }
    }
}

#[test]
fn a_rebalance_during_the_run_is_joined_again_and_every_message_still_counted() {
    let addr = kafka();
    let toml = scenario(
        "rebalance",
        addr,
        "partitions = 2\nconsumers_per_subscription = 2",
    )
    .replace("duration = \"1s\"", "duration = \"14s\"")
    .replace("per_sec = 4000", "per_sec = 1000");
    let (outcome, _dir) = std::thread::scope(|s| {
        let run = s.spawn(|| try_run(&toml, &[]));
        // Kafka's own console consumer joins the run's group (a rebalance: msgbench's two
        // consumers must join again within the rebalance timeout), then leaves it (another).
        std::thread::sleep(Duration::from_secs(3));
        let libs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/kafka/libs/*");
        let mut outsider = std::process::Command::new("java")
            .args(["-cp", libs, "org.apache.kafka.tools.consumer.ConsoleConsumer"])
            .args(["--bootstrap-server", &addr.to_string()])
            .args(["--topic", "rebalance.0", "--group", "rebalance.0-t0-s0"])
            // The assignor msgbench's members speak (a group needs one all its members do).
            .args(["--consumer-property", "partition.assignment.strategy=org.apache.kafka.clients.consumer.RoundRobinAssignor"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java (scripts/setup.sh installs it)");
        std::thread::sleep(Duration::from_secs(7));
        // SAFETY: a plain kill(2) of a child this test started, by its PID.
        unsafe { libc::kill(outsider.id() as i32, libc::SIGTERM) };
        let _ = outsider.wait();
        run.join().unwrap()
    });
    let mut results = outcome.unwrap_or_else(|e| panic!("{e}")).results;
    let r = results.remove(0);
    assert_subscriptions_accounted(&r);
    let warnings: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
    let said = warnings.join("\n");
    assert!(!r.interrupted, "{said}");
    assert!(
        said.contains("rebalance.0-t0-s0 rebalanced during the run"),
        "{said}"
    );
    assert!(said.contains("joined it again"), "{said}");
    let c = r.counters;
    assert_eq!(
        (c.dropped, c.failed, c.in_flight_end),
        (0, 0, 0),
        "{c:?}\n{said}"
    );
    assert_eq!(c.delivered, c.sent, "{c:?}");
    assert!(r.streams.iter().all(|s| s.closed.is_none()), "{said}");
}
