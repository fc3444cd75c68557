//! The `pubsub` system on brokers that keep streams — Redis Streams (consumer groups, XACK)
//! and NATS JetStream (durable push consumers, PubAcks, acknowledged deliveries) — started
//! here on free loopback ports: every message of a topic to every subscription, each once
//! across a shared one's consumers, every publish answered; a run after a run starts at the
//! stream's end; a stream's bound that removes what a slow subscription had not read counted
//! as dropped, the fast one unaffected; a broker without JetStream and a key of another type,
//! one clear error each.
mod common;

use common::{assert_subscriptions_accounted, run_one, try_run, BrokerProcess};
use msgbench_model::RunResult;

fn scenario(broker: &str, addr: std::net::SocketAddr, extra: &str) -> String {
    format!(
        "name = \"streams\"\nsystem = \"pubsub\"\n[run]\nduration = \"1s\"\nwarmup = \"200ms\"\ndrain_timeout = \"2s\"\n[pacing]\nmode = \"rate\"\nper_sec = 4000\n[pubsub]\nbroker = \"{broker}\"\naddress = \"{addr}\"\n{extra}"
    )
}

/// 2 publishers, a plain and a shared subscription (3 consumers): each gets every message
/// once, and every publish was answered.
fn assert_fan_out_and_shared(r: &RunResult) {
    assert_subscriptions_accounted(r);
    assert_eq!(r.streams.len(), 2);
    for s in &r.streams {
        let c = s.counters;
        assert!((3800..=4200).contains(&c.sent), "{}: {c:?}", s.name);
        assert_eq!(c.delivered, c.sent, "{}: {c:?}", s.name);
        assert_eq!(s.sequence.duplicates, 0, "{}", s.name);
        assert_eq!(s.gaps_seen, 0, "{}", s.name);
        // Nothing of another run, nothing malformed.
        assert_eq!(s.faults.protocol_errors, 0, "{}: {:?}", s.name, s.faults);
        assert!(s.latency.p50_ns > 0 && s.latency.p50_ns < 50_000_000);
    }
    let answered = r.publish_latency.as_ref().expect("publishes are answered");
    assert!(answered.count >= 3800, "{answered:?}");
}

const FAN_OUT: &str =
    "publishers_per_topic = 2\nsubscriptions_per_topic = 2\nconsumers_per_subscription = 3";

#[test]
fn redis_streams_give_every_subscription_every_message_and_a_group_each_once() {
    let redis = BrokerProcess::redis(&[]);
    let toml = scenario("redis-streams", redis.addr, FAN_OUT);
    let r = run_one(&toml, &[]);
    assert_fan_out_and_shared(&r);
    // Again on the same streams and groups: the groups start at the end, nothing old read.
    let again = run_one(&toml, &[]);
    assert_fan_out_and_shared(&again);
}

#[test]
fn jetstream_gives_every_subscription_every_message_and_a_deliver_group_each_once() {
    let nats = BrokerProcess::jetstream();
    let toml = scenario("jetstream", nats.addr, FAN_OUT);
    let r = run_one(&toml, &[]);
    assert_fan_out_and_shared(&r);
    assert!(
        r.info.iter().any(|i| i.contains("JetStream")),
        "{:?}",
        r.info
    );
    // Again: the stream is there, the durable consumers are made anew at its end; and with
    // another bound, the stream is updated to it.
    let again = run_one(&toml, &["pubsub.stream_max_messages=50000"]);
    assert_fan_out_and_shared(&again);
}

/// A slow subscription (2 ms per message at 4000/s offered) next to a fast one, on a stream
/// kept to 500 messages.
fn slow_next_to_fast_on_a_short_stream(broker: &str, addr: std::net::SocketAddr) -> RunResult {
    let r = run_one(
        &scenario(
            broker,
            addr,
            "subscriptions_per_topic = 2\nslow_subscriptions = 1\nslow_cost = \"2ms\"\nslow_work = \"sleep\"\nstream_max_messages = 500",
        ),
        &[],
    );
    assert_subscriptions_accounted(&r);
    let (slow, fast) = (&r.streams[0], &r.streams[1]);
    assert_eq!(slow.group, "slow-subscriber");
    assert_eq!(
        fast.counters.delivered, fast.counters.sent,
        "{broker}: {:?}",
        fast.counters
    );
    assert!(
        fast.latency.p99_ns < 50_000_000,
        "{broker}: {:?}",
        fast.latency
    );
    r
}

#[test]
fn a_stream_bound_removes_what_a_slow_group_did_not_read_counted_as_dropped() {
    // Redis Streams: a consumer group reads from the stream, so what XADD's MAXLEN removed
    // before the slow group read it is gone: gaps, counted as dropped.
    let redis = BrokerProcess::redis(&[]);
    let r = slow_next_to_fast_on_a_short_stream("redis-streams", redis.addr);
    let slow = &r.streams[0];
    assert!(slow.counters.dropped > 1000, "{:?}", slow.counters);
    assert!(slow.gaps_seen > 0);
    // JetStream: a message its stream removes no longer counts against the consumer's
    // max_ack_pending, so the push consumer sends on; the backlog waits in the connection
    // instead of the stream, and nothing is dropped.
    let nats = BrokerProcess::jetstream();
    let r = slow_next_to_fast_on_a_short_stream("jetstream", nats.addr);
    let slow = &r.streams[0];
    assert_eq!(slow.counters.dropped, 0, "{:?}", slow.counters);
    assert!(slow.counters.in_flight_end > 1000, "{:?}", slow.counters);
}

#[test]
fn a_slow_jetstream_subscription_falls_behind_and_nothing_is_lost() {
    let nats = BrokerProcess::jetstream();
    let r = run_one(
        &scenario(
            "jetstream",
            nats.addr,
            "subscriptions_per_topic = 2\nslow_subscriptions = 1\nslow_cost = \"2ms\"\nslow_work = \"sleep\"",
        ),
        &[],
    );
    assert_subscriptions_accounted(&r);
    let (slow, fast) = (&r.streams[0], &r.streams[1]);
    // The stream keeps everything: what the slow one had not read is undelivered, never
    // dropped, and its backlog climbs.
    assert_eq!(slow.counters.dropped, 0, "{:?}", slow.counters);
    assert!(slow.counters.in_flight_end > 1000, "{:?}", slow.counters);
    let backlog: Vec<i64> = slow.intervals.iter().map(|i| i.backlog).collect();
    assert!(backlog[0] > 1000, "{backlog:?}");
    assert_eq!(fast.counters.delivered, fast.counters.sent);
}

#[test]
fn a_server_without_jetstream_and_a_key_of_another_type_are_one_clear_error_each() {
    let nats = BrokerProcess::nats(&[]);
    let (outcome, _dir) = try_run(&scenario("jetstream", nats.addr, ""), &[]);
    let e = outcome.expect_err("no JetStream").to_string();
    assert!(
        e.contains("JetStream is not enabled") && e.contains("-js"),
        "{e}"
    );

    let redis = BrokerProcess::redis(&[]);
    let mut c = std::net::TcpStream::connect(redis.addr).unwrap();
    use std::io::{Read, Write};
    c.write_all(b"*3\r\n$3\r\nSET\r\n$10\r\nmsgbench.0\r\n$1\r\nx\r\n")
        .unwrap();
    let mut ok = [0u8; 5];
    c.read_exact(&mut ok).unwrap();
    let (outcome, _dir) = try_run(&scenario("redis-streams", redis.addr, ""), &[]);
    let e = outcome.expect_err("a string key").to_string();
    assert!(e.contains("WRONGTYPE") && e.contains("topic_prefix"), "{e}");
}

#[test]
fn a_stream_that_is_not_msgbenchs_is_refused_not_trimmed() {
    use std::io::{Read, Write};
    // Redis: someone's stream (one entry, no group of msgbench's).
    let redis = BrokerProcess::redis(&[]);
    let mut c = std::net::TcpStream::connect(redis.addr).unwrap();
    c.write_all(b"*5\r\n$4\r\nXADD\r\n$8\r\ntheirs.0\r\n$1\r\n*\r\n$1\r\na\r\n$1\r\nb\r\n")
        .unwrap();
    let mut id = [0u8; 8];
    c.read_exact(&mut id).unwrap();
    let (outcome, _dir) = try_run(
        &scenario("redis-streams", redis.addr, "topic_prefix = \"theirs\""),
        &[],
    );
    let e = outcome.expect_err("someone's stream").to_string();
    assert!(
        e.contains("stream theirs.0 exists and is not msgbench's") && e.contains("topic_prefix"),
        "{e}"
    );
    // JetStream: someone's stream on the run's subject, with another bound than the run's.
    let nats = BrokerProcess::jetstream();
    let mut c = std::net::TcpStream::connect(nats.addr).unwrap();
    let body = br#"{"name":"theirs_0","subjects":["theirs.0"],"storage":"memory"}"#;
    c.write_all(
        format!(
            "CONNECT {{\"verbose\":false}}\r\nSUB _R 1\r\nPUB $JS.API.STREAM.CREATE.theirs_0 _R {}\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(body).unwrap();
    c.write_all(b"\r\nPING\r\n").unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("theirs_0") {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&chunk[..n]);
    }
    let (outcome, _dir) = try_run(
        &scenario("jetstream", nats.addr, "topic_prefix = \"theirs\""),
        &[],
    );
    let e = outcome.expect_err("someone's stream").to_string();
    assert!(e.contains("exists and is not msgbench's"), "{e}");
}
