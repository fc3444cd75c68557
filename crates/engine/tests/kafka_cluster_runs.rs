//! Kafka as its users run it: a cluster of three KRaft brokers started by the test, the run's
//! partitions led by different brokers, and one broker shut down in the middle of the run (a
//! rolling restart's first step) — its partitions' leadership moves, and the publishers and
//! consumers follow it with every message accounted for.
mod common;

use common::{assert_subscriptions_accounted, try_run, KafkaCluster};
use std::time::Duration;

#[test]
fn a_cluster_run_follows_its_partitions_leaders_when_a_broker_shuts_down() {
    let mut cluster = KafkaCluster::start(3);
    // The bootstrap server is the broker that goes away: what follows must ask the others.
    let toml = format!(
        "name = \"kafka-cluster\"\nsystem = \"pubsub\"\n[run]\nduration = \"12s\"\nwarmup = \"1s\"\ndrain_timeout = \"5s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[pubsub]\nbroker = \"kafka\"\naddress = \"{}\"\ntopic_prefix = \"cluster\"\nmessage_bytes = 200\npublishers_per_topic = 2\n[pubsub.kafka]\npartitions = 3\nacks = \"all\"\ncompression = \"lz4\"\n",
        cluster.addrs[0]
    );
    let (outcome, cluster) = std::thread::scope(|s| {
        let run = s.spawn(|| try_run(&toml, &[]));
        // The opening takes a second or two; the run lasts 13 s.
        std::thread::sleep(Duration::from_secs(7));
        cluster.shut_down(0);
        (run.join().unwrap().0, cluster)
    });
    let mut results = outcome.unwrap_or_else(|e| panic!("{e}")).results;
    let r = results.remove(0);
    assert_subscriptions_accounted(&r);
    let info = r.info.join("\n");
    // Three partitions of a new topic of three replicas: led by three brokers.
    let opened = (r.info.iter())
        .find(|l| l.contains("partitions were led by"))
        .unwrap_or_else(|| panic!("{info}"));
    let brokers: std::collections::BTreeSet<&str> = opened
        .split("→ broker ")
        .skip(1)
        .map(|b| b.split(' ').next().unwrap())
        .collect();
    assert!(brokers.len() >= 2, "{opened}");
    assert!(info.contains("partitions were at the end led by"), "{info}");
    let c = r.counters;
    let followed = r.faults.connections;
    // The publishers and the consumer of broker 1's partition(s) all followed.
    assert!(followed.leaders_followed >= 2, "{followed:?}\n{info}");
    assert!(!r.interrupted, "{:?}", r.warnings);
    assert_eq!((c.dropped, c.failed), (0, 0), "{c:?}");
    // A request refused by the old leader is written once; one unanswered when its broker
    // went may be written twice (then counted as a duplicate, never as a delivery).
    assert!(c.delivered + c.in_flight_end == c.sent, "{c:?}");
    assert!(c.in_flight_end * 100 <= c.sent, "{c:?}");
    assert!(
        r.streams.iter().all(|s| s.closed.is_none()),
        "{:?}",
        r.warnings
    );
    drop(cluster);
}
