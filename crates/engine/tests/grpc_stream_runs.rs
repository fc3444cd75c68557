//! gRPC server streams read as feeds (`system = "ticks"` with `[ticks.grpc]`): the built-in
//! gRPC server's `msgbench.Feed/Ticks` (started here in-process) streaming ticks stamped with
//! when they were due, some left out on purpose. Every message of the window measured, the
//! gaps found, a stalled stream measured from the intended send time, a stream ended with an
//! error status counted, bad scenarios refused before any load.
mod common;

use common::{dead_address, not_websocket, run, try_run};
use msgbench_engine::server::grpc::{start, GrpcServerOptions};
use msgbench_model::RunResult;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn proto_path() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos/msgbench.proto");
    p.display().to_string()
}

/// Two clients of `msgbench.Feed/Ticks` (`{message}`: the request), 1 s measured.
fn stream(message: &str) -> String {
    format!(
        "system = \"ticks\"\n[run]\nduration = \"1s\"\nwarmup = \"300ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 20000\n[ticks]\ngaps = \"drops\"\n[ticks.grpc]\nproto = \"{}\"\ncall = \"msgbench.Feed/Ticks\"\nmessage = '{message}'\n[ticks.feed]\nformat = \"protobuf\"\nsequence = \"seq\"\ntimestamp = \"sent_ns\"\nclock = \"monotonic-ns\"\nstamp = \"send\"\n[ticks.clients.fast]\nconnections = 2\n",
        proto_path()
    )
}

fn address(addr: std::net::SocketAddr) -> String {
    format!("ticks.address=\"http://{addr}\"")
}

/// Every message of the window recorded, one in `every` left out and counted as a gap, and
/// nothing else missing, duplicated or reordered.
fn assert_gaps_are_the_skipped(r: &RunResult, every: f64) {
    r.counters.check().unwrap();
    let c = &r.counters;
    assert_eq!(r.latency.count, c.delivered, "every message's latency");
    assert_eq!(c.failed, 0, "{:?}", r.faults);
    assert_eq!(r.faults.total(), 0, "{:?}", r.faults);
    let expected = c.delivered as f64 / (every - 1.0);
    assert!(
        (c.dropped as f64 - expected).abs() <= 2.0 * r.streams.len() as f64,
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
fn a_grpc_stream_has_every_message_measured_and_its_gaps_counted() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let toml = stream(r#"{"rate": "20000", "gapEvery": "100", "size": 32}"#);
    let r = &run(&toml, &[&address(server.local_addr())])[0];
    // Two clients, each 20k/s for 1 s.
    assert!(r.counters.delivered > 36_000, "{:?}", r.counters);
    assert_gaps_are_the_skipped(r, 100.0);
    assert_eq!(r.streams.len(), 2);
    // On one host, with a server whose timer wakes every millisecond at most: a few ms.
    assert!(r.latency.p50_ns < 5_000_000, "{:?}", r.latency);
    let stats = server.stop();
    assert_eq!(stats.streams.load(Ordering::Relaxed), 2);
    let skipped = stats.skipped.load(Ordering::Relaxed);
    assert!(
        skipped >= r.counters.dropped,
        "{skipped} skipped, {:?}",
        r.counters
    );
}

#[test]
fn a_stalled_grpc_stream_is_measured_from_the_intended_send_time() {
    // Stalled 500 ms every 2 s: every 8 s holds four stalls, so a quarter of the messages are
    // due during one and go out at its end: quantile q > 0.75 is 500 ms × (q − 0.75) / 0.25.
    let options = GrpcServerOptions {
        stall_every: Some(Duration::from_secs(2)),
        stall_for: Duration::from_millis(500),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let toml = stream(r#"{"rate": "5000"}"#);
    let r = &run(
        &toml,
        &[
            &address(server.local_addr()),
            "run.duration=\"8s\"",
            "run.warmup=\"1s\"",
        ],
    )[0];
    assert_gaps_are_the_skipped(r, f64::INFINITY);
    assert!(r.counters.delivered > 70_000, "{:?}", r.counters);
    let model = |q: f64| 0.5e9 * (q - 0.75) / 0.25;
    for (q, measured) in [(0.99, r.latency.p99_ns), (0.999, r.latency.p999_ns)] {
        let ratio = measured as f64 / model(q);
        assert!(
            (0.9..=1.1).contains(&ratio),
            "p{}: {:.1} ms measured, {:.1} ms modelled",
            q * 100.0,
            measured as f64 / 1e6,
            model(q) / 1e6
        );
    }
}

#[test]
fn a_stream_ended_with_an_error_status_is_a_fault_and_the_run_goes_on() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let toml = stream(r#"{"rate": "2000"}"#);
    let addr = address(server.local_addr());
    // The server stops 600 ms after both streams started: each ends with UNAVAILABLE.
    let stopper = std::thread::spawn(move || {
        while server.stats.streams.load(Ordering::Relaxed) < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(600));
        server.stop()
    });
    let r = &run(&toml, &[&addr, "run.duration=\"2s\""])[0];
    stopper.join().unwrap();
    r.counters.check().unwrap();
    assert_eq!(r.faults.disconnects, 2, "{:?}", r.faults);
    assert!(r.counters.delivered > 0, "{:?}", r.counters);
    for s in &r.streams {
        let closed = s.closed.as_deref().unwrap_or_default();
        assert!(
            closed.contains("gRPC UNAVAILABLE: the server is stopping"),
            "{closed}"
        );
    }
}

#[test]
fn a_server_that_is_not_there_or_not_grpc_fails_before_any_load() {
    let toml = stream("{}");
    let (outcome, _dir) = try_run(&toml, &[&address(dead_address())]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("serve grpc"), "{e}");
    let http1 = not_websocket(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
    let (outcome, _dir) = try_run(&toml, &[&address(http1)]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("HTTP/2") && e.contains("gRPC server"), "{e}");
    // A request the server refuses (rate over its limit): its status, before any load.
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let toml = stream(r#"{"rate": "99000000"}"#);
    let (outcome, _dir) = try_run(&toml, &[&address(server.local_addr())]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("INVALID_ARGUMENT") && e.contains("rate"), "{e}");
}

/// What the scenario check says of `toml` (bad input: the CLI's exit 2, nothing run).
fn refused(toml: &str) -> String {
    let limits = msgbench_engine::machine_limits();
    let toml = toml.replace(
        "[ticks]\n",
        "[ticks]\naddress = \"http://127.0.0.1:50051\"\n",
    );
    match msgbench_model::Experiment::load(&toml, "test.toml", &[], &limits) {
        Ok(_) => panic!("taken:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn streams_and_fields_the_proto_does_not_have_are_refused_before_any_load() {
    let base = stream("{}");
    let e = refused(&base.replace("msgbench.Feed/Ticks", "msgbench.Echo/Call"));
    assert!(
        e.contains("a unary method") && e.contains("system = \"http\""),
        "{e}"
    );
    let e = refused(&base.replace("sequence = \"seq\"", "sequence = \"sequence\""));
    assert!(
        e.contains("ticks.feed.sequence") && e.contains("seq, sent_ns, payload"),
        "{e}"
    );
    let e = refused(&base.replace("sequence = \"seq\"", "sequence = \"payload\""));
    assert!(e.contains("must be an integer"), "{e}");
    let e = refused(&base.replace("format = \"protobuf\"", "format = \"json\""));
    assert!(e.contains("ticks.feed.format"), "{e}");
    let e = refused(&base.replace("message = '{}'", "message = '{\"rate\": true}'"));
    assert!(
        e.contains("ticks.grpc.message") && e.contains("msgbench.TickRequest"),
        "{e}"
    );
    let e = refused(&base.replace("[ticks.feed]", "[ticks.other]"));
    assert!(e.contains("ticks"), "{e}");
    // A Timestamp is Unix ns; nested and imported messages are followed.
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("quotes.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\";\npackage q;\nimport \"google/protobuf/timestamp.proto\";\nmessage Head { sint64 seq = 3; google.protobuf.Timestamp at = 4; }\nmessage Quote { Head head = 1; repeated uint64 ids = 2; }\nmessage Ask {}\nservice Quotes { rpc Watch(Ask) returns (stream Quote); }\n",
    )
    .unwrap();
    let quotes = base
        .replace(&proto_path(), &proto.display().to_string())
        .replace("msgbench.Feed/Ticks", "q.Quotes/Watch")
        .replace("sequence = \"seq\"", "sequence = \"head.seq\"")
        .replace("timestamp = \"sent_ns\"", "timestamp = \"head.at\"");
    let e = refused(&quotes);
    assert!(
        e.contains("ticks.feed.clock") && e.contains("unix-ns"),
        "{e}"
    );
    let e = refused(&quotes.replace("head.seq", "ids"));
    assert!(e.contains("repeated"), "{e}");
    let limits = msgbench_engine::machine_limits();
    let ok = quotes.replace("monotonic-ns", "unix-ns").replace(
        "[ticks]\n",
        "[ticks]\naddress = \"http://127.0.0.1:50051\"\n",
    );
    msgbench_model::Experiment::load(&ok, "test.toml", &[], &limits).unwrap();
}

#[test]
fn a_wrong_clock_and_a_stream_finished_early_are_said() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = address(server.local_addr());
    let said = |r: &RunResult| format!("{:?}", r.warnings);
    // Monotonic stamps read as Unix ns: decades off, so the first message ends the connection
    // with what to check, instead of every message falling outside the window unsaid.
    // (The whole 3.3 s of the run for the first message to come: on a loaded host a close
    // after the run's end goes unsaid, as it should — 1.3 s once was not enough in CI.)
    let toml = stream(r#"{"rate": "2000"}"#)
        .replace("monotonic-ns", "unix-ns")
        .replace("duration = \"1s\"", "duration = \"3s\"");
    let r = &run(&toml, &[&addr])[0];
    assert_eq!(r.counters.delivered, 0);
    assert!(
        said(r).contains("first timestamp") && said(r).contains("clock"),
        "{}",
        said(r)
    );
    // A stream the server finishes (OK) before the window ends: the run says so.
    let toml = stream(r#"{"rate": "2000", "seconds": 0.8}"#);
    let r = &run(&toml, &[&addr])[0];
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    assert!(said(r).contains("finished the stream"), "{}", said(r));
}

#[test]
fn a_stream_described_by_the_servers_reflection_is_read_like_one_from_a_proto() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let toml = stream(r#"{"rate": "20000", "gapEvery": "100", "size": 32}"#).replace(
        &format!("proto = \"{}\"", proto_path()),
        "reflection = true",
    );
    assert!(toml.contains("reflection = true"));
    let r = &run(&toml, &[&address(server.local_addr())])[0];
    assert!(r.counters.delivered > 36_000, "{:?}", r.counters);
    assert_gaps_are_the_skipped(r, 100.0);
    server.stop();
}
