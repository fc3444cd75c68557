//! RabbitMQ (Debian's `rabbitmq-server`, installed by `scripts/setup.sh`), one node for this
//! test binary started by `scripts/rabbitmq-server.sh` on free loopback ports: every queue type
//! and exchange type, publisher confirms counted against what was published, manual and
//! automatic acknowledgement, a shared subscription, a slow consumer beside fast ones, TLS, a
//! wrong password and a server that is not RabbitMQ — every message accounted for.
mod common;

use common::{assert_subscriptions_accounted, rabbitmq, try_run, BrokerProcess, RABBITMQ_SECRET};
use msgbench_model::RunResult;

/// A run of `extra` (`[pubsub]` keys, then sections) on topics named `prefix` (each test its
/// own exchanges and queues on the shared node), logged in as the node's user.
fn scenario(prefix: &str, address: std::net::SocketAddr, extra: &str) -> String {
    let password = rabbitmq().password_file.display().to_string();
    format!(
        "name = \"rabbitmq\"\nsystem = \"pubsub\"\n[run]\nduration = \"1s\"\nwarmup = \"300ms\"\ndrain_timeout = \"3s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[pubsub]\nbroker = \"rabbitmq\"\naddress = \"{address}\"\ntopic_prefix = \"{prefix}\"\n{extra}\n[pubsub.auth]\nuser = \"bench\"\npassword_file = \"{password}\"\n"
    )
}

/// Runs `toml`: measured, and the password in no file it wrote.
fn run_ok(toml: &str) -> RunResult {
    let (outcome, dir) = try_run(toml, &[]);
    let outcome = outcome.unwrap_or_else(|e| panic!("{e}"));
    common::assert_not_written(dir.path(), RABBITMQ_SECRET);
    outcome.results.into_iter().next().unwrap()
}

/// Every subscription got every message of the window, once, in order, none left behind.
fn every_message_once(r: &RunResult) {
    assert_subscriptions_accounted(r);
    for s in &r.streams {
        let c = s.counters;
        assert!(c.sent >= 900, "{}: {c:?}", s.name);
        assert_eq!(c.delivered, c.sent, "{}: {c:?}", s.name);
        assert_eq!(c.dropped + c.in_flight_end, 0, "{}: {c:?}", s.name);
        assert_eq!(s.sequence.duplicates, 0, "{}", s.name);
        assert_eq!(s.gaps_seen, 0, "{}", s.name);
    }
}

fn info_with<'a>(r: &'a RunResult, words: &str) -> &'a str {
    r.info
        .iter()
        .find(|i| i.contains(words))
        .unwrap_or_else(|| panic!("no info line with {words:?}: {:?}", r.info))
}

#[test]
fn confirms_answer_every_publish_and_each_queue_type_delivers_every_message() {
    let node = rabbitmq();
    for queue_type in ["classic", "quorum", "stream"] {
        let r = run_ok(&scenario(
            &format!("confirms-{queue_type}"),
            node.addr,
            &format!("subscriptions_per_topic = 2\n[pubsub.rabbitmq]\nconfirms = true\nqueue_type = \"{queue_type}\""),
        ));
        every_message_once(&r);
        // Every publish confirmed: the run's published messages (warm-up included) each have
        // their answer, and its latency was measured for those of the window.
        let line = info_with(&r, "publisher confirms");
        assert!(line.contains(&format!("a {queue_type} queue")), "{line}");
        let latency = info_with(&r, "publish latency");
        let answered: u64 = latency
            .split("publish time, ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{latency}"));
        assert_eq!(answered, r.streams[0].counters.sent, "{latency}");
    }
}

#[test]
fn each_exchange_type_routes_to_every_bound_queue_with_either_acknowledgement() {
    let node = rabbitmq();
    for (exchange, ack) in [
        ("direct", "manual"),
        ("fanout", "auto"),
        ("topic", "manual"),
    ] {
        let r = run_ok(&scenario(
            &format!("x-{exchange}"),
            node.addr,
            &format!("topics = 2\nsubscriptions_per_topic = 2\n[pubsub.rabbitmq]\nexchange_type = \"{exchange}\"\nack = \"{ack}\"\npersistent = true"),
        ));
        every_message_once(&r);
        assert_eq!(r.streams.len(), 4);
        let line = info_with(&r, "RabbitMQ: each topic");
        assert!(line.contains(&format!("a {exchange} exchange")), "{line}");
        assert!(
            line.contains("no publisher confirms") && line.contains("persistent"),
            "{line}"
        );
    }
}

#[test]
fn a_shared_queue_gives_each_message_to_one_consumer_and_a_slow_one_falls_behind() {
    let node = rabbitmq();
    let r = run_ok(&scenario(
        "shared",
        node.addr,
        "subscriptions_per_topic = 2\nconsumers_per_subscription = 3",
    ));
    every_message_once(&r);
    // As fast as the publisher goes, without confirms: the publisher's goodbye
    // (connection.close, awaited) lets RabbitMQ route all it had read — a bare hang-up
    // dropped the last publishes a channel held, which this run would count as missing.
    let toml = scenario("immediate", node.addr, "message_bytes = 64")
        .replace("mode = \"rate\"\nper_sec = 2000", "mode = \"immediate\"")
        .replace("drain_timeout = \"3s\"", "drain_timeout = \"20s\"");
    let r = run_ok(&toml);
    every_message_once(&r);
    assert!(r.counters.sent > 20_000, "{:?}", r.counters);
    // A slow consumer (5 ms a message, 200/s) next to a fast one, 2000/s offered, at most
    // 100 deliveries unacknowledged each: the slow queue's backlog waits in the broker, the
    // fast subscription keeps up, and what the slow one had not read is undelivered (the
    // queue keeps it), never lost.
    let r = run_ok(&scenario(
        "slow",
        node.addr,
        "subscriptions_per_topic = 2\nslow_subscriptions = 1\nslow_cost = \"5ms\"\nslow_work = \"sleep\"\n[pubsub.rabbitmq]\nprefetch = 100",
    ));
    assert_subscriptions_accounted(&r);
    let (slow, fast) = (&r.streams[0], &r.streams[1]);
    assert_eq!(slow.group, "slow-subscriber");
    assert_eq!(
        fast.counters.delivered, fast.counters.sent,
        "{:?}",
        fast.counters
    );
    assert!(slow.counters.in_flight_end > 500, "{:?}", slow.counters);
    assert_eq!(slow.counters.dropped, 0, "{:?}", slow.counters);
    assert!(slow.latency.p50_ns > 100_000_000, "{:?}", slow.latency);
    assert!(info_with(&r, "prefetch of 100").contains("basic.ack"));
}

#[test]
fn tls_a_wrong_password_and_a_server_that_is_not_rabbitmq_each_say_so() {
    let node = rabbitmq();
    let ca = node.tls_dir.join("ca.pem").display().to_string();
    let tls = format!("[pubsub.tls]\nca_file = \"{ca}\"\nserver_name = \"localhost\"");
    let r = run_ok(&scenario("tls", node.tls, &tls));
    every_message_once(&r);
    assert!(r.config.contains(" tls auth=password"), "{}", r.config);
    // The wrong CA: the system's roots do not know the test CA.
    let refused = |toml: &str| {
        let (outcome, dir) = try_run(toml, &[]);
        (outcome.map(|_| ()).expect_err("refused").to_string(), dir)
    };
    let (e, _) = refused(&scenario("tls", node.tls, "[pubsub.tls]"));
    assert!(e.contains("certificate"), "{e}");
    // A wrong password, and none (RabbitMQ's guest, which this node has not): RabbitMQ's
    // words, the fix named.
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("secret-wrong");
    std::fs::write(&wrong, "not-it\n").unwrap();
    let toml = scenario("auth", node.addr, "");
    let password = node.password_file.display().to_string();
    let (e, _) = refused(&toml.replace(&password, &wrong.display().to_string()));
    assert!(
        e.contains("ACCESS_REFUSED") && e.contains("check [pubsub.auth]"),
        "{e}"
    );
    let bare = toml.split("[pubsub.auth]").next().unwrap();
    let (e, _) = refused(bare);
    assert!(
        e.contains("ACCESS_REFUSED") && e.contains("give [pubsub.auth]"),
        "{e}"
    );
    // NATS where RabbitMQ was named: not AMQP, said so.
    let nats = BrokerProcess::nats(&[]);
    let (e, _) = refused(&scenario("other", nats.addr, ""));
    assert!(e.contains("not an AMQP 0-9-1 server"), "{e}");
}
