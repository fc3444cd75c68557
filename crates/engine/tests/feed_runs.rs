//! Someone else's WebSocket feed read with `[ticks.feed]`: a Node.js server written with the
//! `ws` package (`feeds/node/feed.js`, its package installed by `scripts/setup.sh`), streaming
//! exchange-style trades with millisecond wall-clock stamps (JSON) or microsecond ones
//! (binary), and skipping every 1000th trade id on request.
mod common;

use common::{certificates, run, try_run};
use msgbench_model::RunResult;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The Node feed on a free loopback port; stopped (by PID) when dropped.
struct NodeFeed {
    child: Child,
    port: u16,
}

impl NodeFeed {
    fn start(args: &[&str]) -> NodeFeed {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../feeds/node");
        assert!(
            root.join("node_modules/ws").exists(),
            "the feed's `ws` package is missing: run `bash scripts/setup.sh`"
        );
        // node starts slowly on a loaded 2-CPU machine: up to 20 s, on a port of its own,
        // ready once node itself holds the listening socket.
        let (child, port) =
            common::ports::start_listening("the node feed", Duration::from_secs(20), |port| {
                Command::new("node")
                    .arg(root.join("feed.js"))
                    .args(["--port", &port.to_string(), "--for", "60"])
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("node is not installed")
            });
        NodeFeed { child, port }
    }

    fn address(&self) -> String {
        format!("ticks.address=\"ws://127.0.0.1:{}/\"", self.port)
    }
}

impl Drop for NodeFeed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const JSON_FEED: &str = r#"system = "ticks"
[run]
duration = "2s"
warmup = "500ms"
[pacing]
mode = "rate"
per_sec = 50000
[ticks]
gaps = "drops"
[ticks.feed]
subscribe = ['{"method":"SUBSCRIBE","params":["btcusdt@trade"],"id":1}']
sequence = "t"
timestamp = "E"
clock = "unix-ms"
filter = { path = "e", equals = "trade" }
"#;

/// Every message of the window recorded, the skipped ids (one in 1000) counted as gaps, and
/// nothing else missing, duplicated or reordered.
fn assert_gaps_are_the_skipped_ids(r: &RunResult) {
    r.counters.check().unwrap();
    let c = &r.counters;
    assert_eq!(r.latency.count, c.delivered, "every message's latency");
    assert_eq!(c.failed, 0, "{:?}", r.faults);
    assert_eq!(
        r.faults.protocol_errors + r.faults.disconnects,
        0,
        "{:?}",
        r.faults
    );
    let expected = c.delivered as f64 / 999.0;
    assert!(
        (c.dropped as f64 - expected).abs() <= 2.0,
        "{} gaps for {} delivered (expected {expected:.0})",
        c.dropped,
        c.delivered
    );
    assert_eq!(
        r.sequence.duplicates + r.sequence.reordered,
        0,
        "{:?}",
        r.sequence
    );
}

#[test]
fn a_node_feed_at_50k_per_second_has_every_message_measured_and_its_gaps_counted() {
    let feed = NodeFeed::start(&["--rate", "50000", "--skip-every", "1000"]);
    let r = &run(JSON_FEED, &[&feed.address()])[0];
    assert!(r.counters.delivered > 95_000, "{:?}", r.counters);
    assert_gaps_are_the_skipped_ids(r);
    // Millisecond wall-clock stamps on one host: a latency is a few ms at most.
    assert!(r.latency.p50_ns < 5_000_000, "{:?}", r.latency);
    let info = r.info.join("\n");
    assert!(
        info.contains("1 ms resolution") && info.contains("wall-clock"),
        "{info}"
    );
}

#[test]
fn a_feed_whose_clock_runs_ahead_is_warned_about_not_taken_for_zero_latency() {
    let feed = NodeFeed::start(&["--rate", "10000", "--clock-ahead", "50"]);
    let r = &run(JSON_FEED, &[&feed.address()])[0];
    let c = &r.counters;
    assert!(c.delivered > 10_000, "{c:?}");
    // Every stamp is ~50 ms in this host's future: each latency would be about -50 ms.
    assert!(
        r.early.count * 100 >= c.delivered * 99,
        "{:?} of {c:?}",
        r.early
    );
    assert!(
        (45_000_000..60_000_000).contains(&r.early.most_ns),
        "{:?}",
        r.early
    );
    assert_eq!(r.latency.p50_ns, 0);
    assert!(
        r.warnings.iter().any(|w| matches!(
            w,
            msgbench_model::warning::Warning::Early { deliveries, .. } if *deliveries == r.early.count
        )),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_binary_feed_is_read_at_its_offsets() {
    let feed = NodeFeed::start(&[
        "--rate",
        "20000",
        "--format",
        "binary",
        "--skip-every",
        "1000",
    ]);
    let toml = "system = \"ticks\"\n[run]\nduration = \"1s\"\nwarmup = \"300ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 20000\n[ticks]\ngaps = \"drops\"\n[ticks.feed]\nformat = \"binary\"\nsubscribe = [\"go\"]\nsequence_at = { offset = 0, type = \"u64le\" }\ntimestamp_at = { offset = 8, type = \"u64le\" }\nclock = \"unix-us\"\n[ticks.clients.fast]\nconnections = 2\n";
    let r = &run(toml, &[&feed.address()])[0];
    assert!(r.counters.delivered > 30_000, "{:?}", r.counters);
    assert_gaps_are_the_skipped_ids(r);
    assert_eq!(r.streams.len(), 2);
}

#[test]
fn a_schema_that_fits_no_message_says_what_the_messages_hold() {
    let feed = NodeFeed::start(&["--rate", "5000"]);
    let (outcome, _dir) = try_run(
        &JSON_FEED.replace("timestamp = \"E\"", "timestamp = \"T\""),
        &[&feed.address(), "run.duration=\"500ms\""],
    );
    let r = &outcome.unwrap().results[0];
    let said = format!("{:?}", r.warnings);
    assert!(
        said.contains("fits none") && said.contains("\\\"E\\\"") && said.contains("\\\"t\\\""),
        "{said}"
    );
    assert_eq!(r.counters.delivered, 0);
}

#[test]
fn a_wss_feed_is_read_over_tls_verified_against_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let feed = NodeFeed::start(&[
        "--rate",
        "20000",
        "--skip-every",
        "1000",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    let address = format!("ticks.address=\"wss://127.0.0.1:{}/\"", feed.port);
    let ca = format!("ticks.ca_file=\"{}\"", dir.path().join("ca.pem").display());
    let r = &run(JSON_FEED, &[&address, &ca, "run.duration=\"1s\""])[0];
    assert!(r.counters.delivered > 15_000, "{:?}", r.counters);
    assert_gaps_are_the_skipped_ids(r);
    // Without the CA: one message that says how to pass it.
    let (outcome, _dir) = try_run(JSON_FEED, &[&address]);
    let e = outcome.unwrap_err().to_string();
    assert!(
        e.contains("TLS handshake failed") && e.contains("ticks.ca_file"),
        "{e}"
    );
}
