//! `msgbench import omb`: OpenMessaging Benchmark workloads (written in OMB's format, under
//! tests/omb/) become `pubsub` scenarios that check, name what they map differently, and run
//! against a real nats-server.
mod common;

use common::{msgbench, stderr};
use std::path::Path;
use std::process::Command;

fn workload(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/omb")
        .join(name)
        .display()
        .to_string()
}

fn import(args: &[&str]) -> (String, std::process::Output) {
    let mut all = vec!["import", "omb"];
    all.extend_from_slice(args);
    let o = msgbench(&all);
    (String::from_utf8_lossy(&o.stdout).into_owned(), o)
}

#[test]
fn every_workload_becomes_a_scenario_that_checks() {
    let dir = tempfile::tempdir().unwrap();
    for (file, expect) in [
        (
            "1-topic-1-partition-1kb.yaml",
            vec![
                "per_sec = 50000",
                "message_bytes = 1024",
                "duration = \"15m\"",
                "warmup = \"1m\"",
            ],
        ),
        (
            "10-topics-3-partitions-100b-shared.yaml",
            vec![
                "topics = 10",
                "consumers_per_subscription = 2",
                "partitionsPerTopic 3",
                "keyDistributor KEY_ROUND_ROBIN",
                "useRandomizedPayloads",
            ],
        ),
        (
            "max-rate.yaml",
            vec![
                "msgbench search",
                "per_sec = 20000",
                "subscriptions_per_topic = 2",
            ],
        ),
    ] {
        let (text, o) = import(&[&workload(file)]);
        assert!(o.status.success(), "{file}: {}", stderr(&o));
        for e in expect {
            assert!(text.contains(e), "{file}: no {e:?} in\n{text}");
        }
        let path = dir.path().join(file.replace(".yaml", ".toml"));
        std::fs::write(&path, &text).unwrap();
        let c = msgbench(&["check", path.to_str().unwrap()]);
        assert!(c.status.success(), "{file}: {}", stderr(&c));
    }
}

#[test]
fn the_duration_placeholder_takes_the_environment_and_redis_gets_its_address() {
    let o = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args([
            "import",
            "omb",
            &workload("10-topics-3-partitions-100b-shared.yaml"),
            "--broker",
            "redis",
        ])
        .env("ombTestDuration", "2")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("duration = \"2m\""), "{text}");
    assert!(text.contains("address = \"127.0.0.1:6379\""), "{text}");
    // Redis Pub/Sub cannot share a subscription: one consumer, and the comment says why.
    assert!(text.contains("consumers_per_subscription = 1"), "{text}");
    assert!(text.contains("no shared subscription"), "{text}");
}

#[test]
fn kafka_keeps_the_workloads_partitions_and_its_consumer_group() {
    let (text, o) = import(&[
        &workload("10-topics-3-partitions-100b-shared.yaml"),
        "--broker",
        "kafka",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("broker = \"kafka\""), "{text}");
    assert!(text.contains("address = \"127.0.0.1:9092\""), "{text}");
    assert!(text.contains("partitions = 3"), "{text}");
    assert!(text.contains("consumers_per_subscription = 2"), "{text}");
    // Partitions have a counterpart here: no note says they are dropped.
    assert!(!text.contains("has no partitions"), "{text}");
}

#[test]
fn every_broker_of_the_registry_is_a_target_at_its_usual_port() {
    use msgbench_model::pubsub::Broker;
    let dir = tempfile::tempdir().unwrap();
    for broker in Broker::ALL {
        let file = workload("1-topic-1-partition-1kb.yaml");
        let (text, o) = import(&[&file, "--broker", broker.name()]);
        assert!(o.status.success(), "{}: {}", broker.name(), stderr(&o));
        assert!(
            text.contains(&format!("broker = \"{}\"", broker.name())),
            "{text}"
        );
        let address = format!("address = \"{}\"", broker.default_address());
        assert!(
            text.contains(&address),
            "{}: no {address} in\n{text}",
            broker.name()
        );
        assert!(text.contains(broker.title()), "{}: {text}", broker.name());
        let path = dir.path().join(format!("{}.toml", broker.name()));
        std::fs::write(&path, &text).unwrap();
        let c = msgbench(&["check", path.to_str().unwrap()]);
        assert!(c.status.success(), "{}: {}", broker.name(), stderr(&c));
    }
    let (_, o) = import(&[&workload("max-rate.yaml"), "--broker", "rabbit"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("redis-streams"), "{}", stderr(&o));
}

#[test]
fn bad_workloads_are_one_message_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("not-yaml.yaml", "topics: [1, 2\n", "is not an OpenMessaging Benchmark workload"),
        ("list.yaml", "- 1\n- 2\n", "is not an OpenMessaging Benchmark workload"),
        ("no-topics.yaml", "name: x\nmessageSize: 100\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 1\nproducersPerTopic: 1\nproducerRate: 10\ntestDurationMinutes: 1\n", "`topics` is missing or 0"),
        ("huge.yaml", "name: x\ntopics: 1\nmessageSize: 99999999\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 1\nproducersPerTopic: 1\nproducerRate: 10\ntestDurationMinutes: 1\n", "at most 1048576 bytes"),
        ("too-many.yaml", "name: x\ntopics: 20000\nmessageSize: 100\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 1\nproducersPerTopic: 1\nproducerRate: 10\ntestDurationMinutes: 1\n", "at most 10000 connections"),
    ];
    for (name, text, expect) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (_, o) = import(&[path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(expect), "{name}: {}", stderr(&o));
    }
    let (_, o) = import(&[dir.path().join("absent.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read"), "{}", stderr(&o));
    // --out never overwrites.
    let out = dir.path().join("exists.toml");
    std::fs::write(&out, "keep").unwrap();
    let (_, o) = import(&[&workload("max-rate.yaml"), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("never overwrites"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
}

#[test]
fn an_imported_workload_runs_against_nats() {
    let program = ["/usr/sbin/nats-server", "nats-server"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("nats-server");
    let (mut broker, port) =
        common::ports::start_listening(program, std::time::Duration::from_secs(20), |port| {
            Command::new(program)
                .args(["-a", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("nats-server (run `bash scripts/setup.sh`)")
        });
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("omb.toml");
    let address = format!("127.0.0.1:{port}");
    let (_, o) = import(&[
        &workload("10-topics-3-partitions-100b-shared.yaml"),
        "--address",
        &address,
        "--out",
        scenario.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = dir.path().join("results");
    let o = msgbench(&[
        "run",
        scenario.to_str().unwrap(),
        "--duration",
        "500ms",
        "--warmup",
        "200ms",
        "--set",
        "pacing.per_sec=5000",
        "--json",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let _ = broker.kill();
    let _ = broker.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &json["runs"][0];
    // 10 topics, one shared subscription each (2 consumers): every message delivered once.
    assert_eq!(r["streams"].as_array().unwrap().len(), 10);
    let c = &r["counters"];
    assert!(c["sent"].as_u64().unwrap() > 2000, "{c}");
    assert_eq!(c["delivered"], c["sent"], "{c}");
}
