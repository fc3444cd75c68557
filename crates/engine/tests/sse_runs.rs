//! Server-Sent Events feeds (`ticks.address = "http[s]://…"`, `[ticks.sse]`) read from a Node.js
//! server written with Node's own http, https and http2 modules (`feeds/node/sse.js`): events
//! on an absolute schedule stamped with their due time (unix µs), numbered by their `id:`, a
//! `status` event every 100 a filter must skip, a connection cut on request, and
//! `Last-Event-ID` honoured (`--replay yes`) or not.
mod common;

use common::{certificates, run, try_run};
use msgbench_model::result::StreamClient;
use msgbench_model::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The Node event stream on a free loopback port, its request log in a file; stopped (by
/// PID) when dropped.
struct SseFeed {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl SseFeed {
    fn start(args: &[&str]) -> SseFeed {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../feeds/node/sse.js");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.log");
        let (child, port) = common::ports::start_listening(
            "the node event stream",
            Duration::from_secs(20),
            |port| {
                Command::new("node")
                    .arg(&script)
                    .args(["--port", &port.to_string(), "--for", "60"])
                    .args(args)
                    .stdout(std::fs::File::create(&log).unwrap())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("node is not installed")
            },
        );
        SseFeed {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    fn address(&self, scheme: &str) -> String {
        format!(
            "ticks.address=\"{scheme}://127.0.0.1:{}/events\"",
            self.port
        )
    }

    /// The `Last-Event-ID` each request of `client` carried (`-`: none).
    fn last_ids(&self, client: &str) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap();
        log.lines()
            .filter_map(|l| l.strip_prefix(&format!("request {client} last-event-id=")))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for SseFeed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 2000 events/s, a fast group of two and a slow client (1 ms of sleep per event: half the
/// rate); the window is 2.5 s from the first connection, so the cut after 1500 events falls
/// inside it.
const FEED: &str = r#"system = "ticks"
[run]
duration = "2s"
warmup = "500ms"
[pacing]
mode = "rate"
per_sec = 2000
[ticks]
on_close = "reconnect"
gaps = "drops"
[ticks.sse]
event = "tick"
[ticks.feed]
sequence = "@id"
timestamp = "ts"
clock = "unix-us"
[ticks.clients.fast]
connections = 2
"#;

const SLOW: &str = "[ticks.clients.slow]\nconnections = 1\ncost = \"1ms\"\nwork = \"sleep\"\n";

fn client<'a>(r: &'a RunResult, name: &str) -> &'a StreamClient {
    r.streams
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no client {name}: {:?}", r.streams))
}

/// Every client's accounting holds, no event was misread, none duplicated or reordered.
fn assert_clean(r: &RunResult) {
    r.counters.check().unwrap();
    assert_eq!(r.latency.count, r.counters.delivered);
    assert_eq!(r.faults.protocol_errors, 0, "{:?}", r.faults);
    assert_eq!(
        r.sequence.duplicates + r.sequence.reordered,
        0,
        "{:?}",
        r.sequence
    );
}

#[test]
fn a_resumed_reconnection_misses_nothing_and_a_slow_client_falls_behind_the_feed() {
    let feed = SseFeed::start(&["--rate", "2000", "--replay", "yes", "--cut", "fast-0:1500"]);
    let feed_with_slow = format!("{FEED}{SLOW}").replace(
        "warmup = \"500ms\"\n",
        "warmup = \"500ms\"\ndrain_timeout = \"500ms\"\n",
    );
    let r = &run(&feed_with_slow, &[&feed.address("http")])[0];
    assert_clean(r);
    // The cut connection came back asking for what followed its last event, and got it.
    let ids = feed.last_ids("fast-0.1");
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(ids[0].parse::<u64>().is_ok(), "{ids:?}");
    let (cut, steady, slow) = (
        client(r, "fast-0"),
        client(r, "fast-1"),
        client(r, "slow-0"),
    );
    assert_eq!((cut.reconnects, cut.faults.disconnects), (1, 1), "{cut:?}");
    assert_eq!(cut.gaps_seen + steady.gaps_seen, 0);
    assert_eq!(
        cut.counters.delivered, cut.counters.sent,
        "{:?}",
        cut.counters
    );
    assert!(cut.counters.delivered > 3_500, "{:?}", cut.counters);
    // Stamped at their due time, sent within a millisecond: a fast client's latency is the
    // server's timer and the loopback (loose bounds: a shared 2-core machine).
    assert!(steady.latency.p50_ns < 5_000_000, "{:?}", steady.latency);
    assert_eq!(steady.counters.delivered, steady.counters.sent);
    assert!(steady.counters.delivered > 3_500, "{:?}", steady.counters);
    // Half the feed's rate: by the end the slow client is about a second behind, and its
    // latency is that backlog.
    assert!(
        slow.behind_ns.unwrap_or(0) > 500_000_000,
        "{:?}",
        slow.behind_ns
    );
    assert!(slow.latency.p50_ns > 100 * steady.latency.p50_ns.max(100_000));
    // It processed about half of the window's ticks: at 1 000 a second it cannot catch up
    // with a 2 000-a-second feed, even in the drain (bounded at half a second here: a longer
    // one on a slow host let it read up to 80 % before).
    assert!(
        slow.counters.delivered < steady.counters.delivered * 4 / 5,
        "slow {:?}, steady {:?}",
        slow.counters,
        steady.counters
    );
}

#[test]
fn without_replay_a_reconnection_over_http2_leaves_a_gap_counted_as_dropped() {
    let feed = SseFeed::start(&["--rate", "2000", "--cut", "fast-0:1500", "--http2", "yes"]);
    let r = &run(FEED, &[&feed.address("http"), "ticks.sse.version=\"2\""])[0];
    assert_clean(r);
    let (cut, steady) = (client(r, "fast-0"), client(r, "fast-1"));
    assert_eq!(cut.reconnects, 1, "{cut:?}");
    // The server's `retry: 100`: about 100 ms of events (200) fell due while it was away.
    assert!(
        (150..=600).contains(&cut.counters.dropped),
        "{:?}",
        cut.counters
    );
    assert_eq!(steady.counters.dropped, 0, "{:?}", steady.counters);
    assert_eq!(feed.last_ids("fast-0.1").len(), 1);
}

#[test]
fn an_https_event_stream_is_verified_against_its_ca_and_its_skipped_ids_are_gaps() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let tls = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    // HTTP/1.1 and HTTP/2 (by ALPN) on one port.
    let feed = SseFeed::start(
        &[
            &["--rate", "4000", "--skip-every", "1000", "--http2", "yes"][..],
            &tls,
        ]
        .concat(),
    );
    let ca = format!("ticks.ca_file=\"{}\"", dir.path().join("ca.pem").display());
    let sets = [
        feed.address("https"),
        ca.clone(),
        "run.duration=\"1s\"".into(),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let r = &run(FEED, &sets)[0];
    assert_clean(r);
    for c in &r.streams {
        let expected = c.counters.delivered as f64 / 999.0;
        assert!(
            (c.counters.dropped as f64 - expected).abs() <= 2.0,
            "{}: {:?}",
            c.name,
            c.counters
        );
    }
    let h2 = [&sets[..], &["ticks.sse.version=\"2\""]].concat();
    let r = &run(FEED, &h2)[0];
    assert_clean(r);
    assert!(r.counters.delivered > 4_000, "{:?}", r.counters);
    // Without the CA, and in clear text to the TLS port: one message each, with the fix.
    let (outcome, _dir) = try_run(FEED, &[&feed.address("https")]);
    let e = outcome.unwrap_err().to_string();
    assert!(
        e.contains("TLS handshake failed") && e.contains("ticks.ca_file"),
        "{e}"
    );
    let (outcome, _dir) = try_run(FEED, &[&feed.address("http")]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("event stream"), "{e}");
}

#[test]
fn a_url_that_is_no_event_stream_says_what_answered() {
    // A plain HTTP server's page is no stream; a server that wants credentials says 401.
    let page = common::not_websocket(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 5\r\n\r\nhello",
    );
    let (outcome, _dir) = try_run(FEED, &[&format!("ticks.address=\"http://{page}/\"")]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("\"text/html\", not text/event-stream"), "{e}");
    let locked = common::not_websocket(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
    let (outcome, _dir) = try_run(FEED, &[&format!("ticks.address=\"http://{locked}/\"")]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("HTTP 401") && e.contains("Authorization"), "{e}");
}

/// Why `toml` with `sets` is refused before it runs.
fn refused(toml: &str, sets: &[&str]) -> String {
    let overrides: Vec<_> = sets
        .iter()
        .map(|s| msgbench_model::sweep::Override::parse(s).unwrap())
        .collect();
    let limits = msgbench_engine::machine_limits();
    match msgbench_model::Experiment::load(toml, "test.toml", &overrides, &limits) {
        Ok(_) => panic!("{toml} {sets:?} was taken"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_an_event_stream_cannot_take_is_refused_with_the_fix() {
    let http = "ticks.address=\"http://127.0.0.1:9/events\"";
    let accept = FEED.replace(
        "[ticks.sse]\n",
        "[ticks.sse]\nheaders = { Accept = \"*/*\" }\n",
    );
    assert!(refused(&accept, &[http]).contains("writes itself"));
    // `@id` is an event stream's id: a WebSocket feed has none.
    let ws = FEED.replace("[ticks.sse]\nevent = \"tick\"\n", "");
    let e = refused(&ws, &["ticks.address=\"ws://127.0.0.1:9/\""]);
    assert!(e.contains("@id"), "{e}");
    assert!(refused(FEED, &["ticks.address=\"ws://127.0.0.1:9/\""]).contains("ticks.sse"));
    let e = refused(FEED, &[http, "ticks.feed.format=\"binary\""]);
    assert!(e.contains("carry text"), "{e}");
    let e = refused(
        &FEED.replace("[ticks.feed]", "[ticks.feed]\nsubscribe = [\"x\"]"),
        &[http],
    );
    assert!(e.contains("takes no messages"), "{e}");
}

#[test]
fn msgbench_s_own_event_stream_is_read_with_its_true_latency() {
    // `serve sse`'s feed, in-process: stamps on this host's monotonic clock, due times on an
    // absolute schedule, so a client's latency is the server's wake-up and the loopback.
    let server = msgbench_engine::server::sse::SseServer::start(
        msgbench_engine::server::sse::SseOptions {
            rate: 5000.0,
            messages: 1,
            first_ns: 0,
            every_ns: 0,
            stall_every_ns: 0,
            stall_for_ns: 0,
            stall_at_ns: 0,
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let address = format!("ticks.address=\"http://{}/events\"", server.local_addr());
    let r = &run(
        FEED,
        &[
            &address,
            "ticks.feed.clock=\"monotonic-ns\"",
            "ticks.gaps=\"error\"",
            "run.duration=\"1s\"",
        ],
    )[0];
    assert_clean(r);
    assert_eq!(r.sequence.total(), 0, "{:?}", r.sequence);
    for c in &r.streams {
        assert_eq!(c.counters.delivered, c.counters.sent, "{:?}", c.counters);
        assert!(c.counters.delivered > 4_500, "{:?}", c.counters);
        assert!(c.latency.p50_ns < 2_000_000, "{:?}", c.latency);
    }
}

#[test]
fn an_event_stream_whose_data_is_its_stamp_is_read_as_text() {
    let feed = SseFeed::start(&["--rate", "2000", "--text", "yes", "--skip-every", "1000"]);
    let text = FEED.replace("timestamp = \"ts\"\n", "format = \"text\"\n");
    let r = &run(&text, &[&feed.address("http"), "run.duration=\"1s\""])[0];
    assert_clean(r);
    for c in &r.streams {
        assert!(c.counters.delivered > 1_800, "{:?}", c.counters);
        let expected = c.counters.delivered as f64 / 999.0;
        assert!(
            (c.counters.dropped as f64 - expected).abs() <= 2.0,
            "{}: {:?}",
            c.name,
            c.counters
        );
        assert!(c.latency.p50_ns < 5_000_000, "{:?}", c.latency);
    }
}
