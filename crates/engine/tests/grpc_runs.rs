//! Real runs of gRPC unary calls (`http` requests with `grpc = "package.Service/Method"`, a
//! `.proto` compiled at check time) against the built-in gRPC server (`msgbench serve grpc`,
//! started here in-process): every call answered and accounted, statuses counted by name, a
//! stalled server measured from the intended send time, bad calls refused before any load.
mod common;

use common::{assert_accounted, run};
use msgbench_engine::server::grpc::{start, GrpcServerOptions};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn proto() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos/msgbench.proto");
    format!("http.proto=\"{}\"", p.display())
}

/// GRPC against `server`, described by the project's `.proto`, with `sets` over it.
fn run_against(
    server: &msgbench_engine::server::grpc::GrpcServer,
    sets: &[&str],
) -> msgbench_model::RunResult {
    let (url, proto) = (url(server.local_addr()), proto());
    let mut all = vec![url.as_str(), proto.as_str()];
    all.extend_from_slice(sets);
    run(GRPC, &all).remove(0)
}

/// `msgbench.Echo/Call` at 2000 calls/s on 4 connections of 8 streams.
const GRPC: &str = "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 4\nwindow = 8\n[http.requests.echo]\ngrpc = \"msgbench.Echo/Call\"\nmessage = '{\"payload\":\"aGVsbG8=\",\"seq\":\"7\",\"note\":\"hi\"}'\n";

fn url(addr: std::net::SocketAddr) -> String {
    format!("http.url=\"http://{addr}\"")
}

#[test]
fn unary_calls_to_serve_grpc_are_each_answered_and_accounted() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(GRPC, &[&url(server.local_addr()), &proto()])[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    assert_eq!(r.faults.total(), 0, "{:?}", r.faults);
    let stats = server.stop();
    // The server answered every call sent, warm-up included.
    assert!(stats.answered.load(Ordering::Relaxed) >= r.counters.delivered);
    assert_eq!(stats.refused.load(Ordering::Relaxed), 0);
}

#[test]
fn grpc_statuses_are_counted_by_name() {
    // A server that takes messages of 4 bytes at most: every call is RESOURCE_EXHAUSTED.
    let options = GrpcServerOptions {
        max_message: 4,
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(GRPC, &[&url(server.local_addr()), &proto()])[0];
    assert_accounted(r);
    assert_eq!(r.counters.delivered, 0);
    assert!(r.counters.failed > 800, "{:?}", r.counters);
    assert_eq!(r.faults.errors.len(), 1, "{:?}", r.faults.errors);
    assert_eq!(r.faults.errors[0].message, "gRPC RESOURCE_EXHAUSTED");
    assert_eq!(r.faults.disconnects, 0, "{:?}", r.faults);
}

#[test]
fn a_stalled_grpc_server_is_measured_from_the_intended_send_time() {
    // Stalled 500 ms every 2 s from its start; the run's measured 8 s (after a 1 s warm-up)
    // hold four stalls, so a quarter of the calls are due during one and wait for its end:
    // quantile q > 0.75 is 500 ms × (q − 0.75) / 0.25.
    let options = GrpcServerOptions {
        stall_every: Some(Duration::from_secs(2)),
        stall_for: Duration::from_millis(500),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(
        GRPC,
        &[
            &url(server.local_addr()),
            &proto(),
            "run.duration=\"8s\"",
            "run.warmup=\"1s\"",
            "client.connections=10",
            "client.window=256",
        ],
    )[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    let model = |q: f64| 0.5e9 * (q - 0.75) / 0.25;
    for (q, measured) in [(0.99, r.latency.p99_ns), (0.999, r.latency.p999_ns)] {
        let ratio = measured as f64 / model(q);
        assert!(
            (0.9..=1.1).contains(&ratio),
            "p{}: {measured} ns against the model's {} ns",
            q * 100.0,
            model(q)
        );
    }
}

#[test]
fn calls_due_while_a_stalled_server_held_the_window_are_skipped_when_the_run_stops() {
    // Stalled from its start for 5 s: the 4 × 8 calls in flight fill the windows, the calls
    // due after wait for room (`block`), and the first timeout (100 ms) stops the run
    // (on_error = "stop"). The calls due by then (~170) were never sent: skipped as the run
    // ended, their waits kept as lower bounds.
    let options = GrpcServerOptions {
        stall_every: Some(Duration::from_secs(10)),
        stall_for: Duration::from_secs(5),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let sets = ["run.warmup=\"0\"", "client.timeout=\"100ms\""];
    let r = run_against(&server, &sets);
    assert_accounted(&r);
    common::assert_stopped_with_its_backlog_given_up(&r, 2000.0, 32, 100, 5.0);
    server.stop();
}

#[test]
fn a_closed_loop_keeps_a_server_that_serves_one_call_at_a_time_busy() {
    // 20 µs of computing per call, one at a time: the server is the bottleneck. A closed loop
    // of 2 × 64 calls on msgbench's own client sleeps while answers come, each sleep bringing
    // about 1/32 of the 128 calls awaited; the server must never run out of calls, so the run
    // gets what the server can do — as much as the h2 crate's client, which never sleeps,
    // gets from it.
    let options = GrpcServerOptions {
        service: Duration::from_micros(20),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let closed_loop = |server: &msgbench_engine::server::grpc::GrpcServer| {
        let sets = [
            "pacing.mode=\"closed-loop\"",
            "run.duration=\"1s\"",
            "run.warmup=\"200ms\"",
            "client.connections=2",
            "client.window=64",
        ];
        let r = run_against(server, &sets);
        assert_accounted(&r);
        assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
        r
    };
    let own = closed_loop(&server);
    assert!(
        own.info
            .iter()
            .any(|i| i.starts_with("unpaced HTTP/2: while answers come")),
        "{:?}",
        own.info
    );
    let mut h2 = None;
    common::on_h2_crate(|| h2 = Some(closed_loop(&server)));
    let per_sec = |r: &msgbench_model::RunResult| r.counters.delivered as f64 / r.duration_s;
    let (own, h2) = (per_sec(&own), per_sec(&h2.unwrap()));
    assert!(
        own > 0.85 * h2,
        "{own:.0} calls/s, the h2 crate's client {h2:.0}"
    );
    server.stop();
}

/// What the scenario check says of `sets` (bad input: the CLI's exit 2, nothing run).
fn refused(sets: &[&str]) -> String {
    let overrides: Vec<_> = (sets.iter())
        .map(|s| msgbench_model::sweep::Override::parse(s).unwrap())
        .collect();
    let limits = msgbench_engine::machine_limits();
    match msgbench_model::Experiment::load(GRPC, "test.toml", &overrides, &limits) {
        Ok(_) => panic!("{sets:?} was taken"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn calls_the_proto_does_not_have_are_refused_before_any_load() {
    let url = "http.url=\"http://127.0.0.1:50051\"";
    let e = refused(&[
        url,
        &proto(),
        "http.requests.echo.grpc=\"msgbench.Echo/Cal\"",
    ]);
    assert!(e.contains("\"Cal\"") && e.contains("it has: Call"), "{e}");
    let e = refused(&[
        url,
        &proto(),
        "http.requests.echo.grpc=\"shop.Orders/Place\"",
    ]);
    assert!(
        e.contains("shop.Orders") && e.contains("msgbench.Echo"),
        "{e}"
    );
    let e = refused(&[url, &proto(), "http.requests.echo.message='{\"size\":3}'"]);
    assert!(
        e.contains("size") && e.contains("msgbench.Message") && e.contains("payload"),
        "{e}"
    );
    let e = refused(&[url]);
    assert!(e.contains("http.proto") && e.contains("is missing"), "{e}");
    let e = refused(&[url, "http.proto=\"no/such.proto\""]);
    assert!(e.contains("no/such.proto"), "{e}");
    // gRPC is HTTP/2 and a POST to its method: saying otherwise is refused, not ignored.
    let e = refused(&[url, &proto(), "http.version=\"1.1\""]);
    assert!(e.contains("gRPC is HTTP/2"), "{e}");
    let e = refused(&[url, &proto(), "http.requests.echo.path=\"/x\""]);
    assert!(e.contains("method or path"), "{e}");
    // A .proto that does not compile: where.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.proto");
    std::fs::write(
        &bad,
        "syntax = \"proto3\";\nmessage M {\n  string a = 1\n}\n",
    )
    .unwrap();
    let e = refused(&[url, &format!("http.proto=\"{}\"", bad.display())]);
    assert!(
        e.contains("bad.proto:4:1") || e.contains("bad.proto:3:"),
        "{e}"
    );
}

/// `msgbench.Echo/Chat` (bidirectional) at 2000 messages/s on 4 connections, 8 in flight each:
/// one stream per connection, each reply paired with its request by `seq`.
const CHAT: &str = "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 4\nwindow = 8\n[http.requests.chat]\ngrpc = \"msgbench.Echo/Chat\"\nmatch = \"seq\"\nmessage = '{\"payload\":\"aGVsbG8=\",\"seq\":\"7\",\"note\":\"hi\"}'\n";

#[test]
fn bidirectional_messages_are_paired_with_their_replies_by_the_match_field() {
    // Exponential service times on timers: replies pass one another on the stream, so only
    // the match field can pair them.
    let options = GrpcServerOptions {
        service: Duration::from_micros(500),
        exponential: true,
        sleep: true,
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(CHAT, &[&url(server.local_addr()), &proto()])[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert_eq!(r.faults.total(), 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    // Each latency is its own message's: a mean service time of 500 µs on the server's
    // millisecond timer (~1–2 ms on a loaded host), not the queue's.
    assert!(r.latency.p50_ns < 5_000_000, "{:?}", r.latency);
    let stats = server.stop();
    assert!(stats.answered.load(Ordering::Relaxed) >= r.counters.delivered);
    // A string field pairs too (the id written as text, after the message's own "hi").
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(
        CHAT,
        &[
            &url(server.local_addr()),
            &proto(),
            "http.requests.chat.match=\"note\"",
        ],
    )[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert_eq!(r.faults.total(), 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
}

#[test]
fn a_bidirectional_stream_the_server_ends_is_counted_by_its_status() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = url(server.local_addr());
    // The server stops 300 ms after the streams opened: each ends with UNAVAILABLE.
    let stopper = std::thread::spawn(move || {
        while server.stats.answered.load(Ordering::Relaxed) < 100 {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
        server.stop()
    });
    let r = &run(CHAT, &[&addr, &proto(), "run.duration=\"2s\""])[0];
    stopper.join().unwrap();
    assert_accounted(r);
    assert!(r.counters.delivered > 0, "{:?}", r.counters);
    let unavailable = (r.faults.errors.iter())
        .find(|e| e.message == "gRPC UNAVAILABLE: the server is stopping")
        .map_or(0, |e| e.count);
    assert!(unavailable >= 1, "{:?}", r.faults);
}

/// What the scenario check says of CHAT with `sets`.
fn chat_refused(sets: &[&str]) -> String {
    let overrides: Vec<_> = (sets.iter())
        .map(|s| msgbench_model::sweep::Override::parse(s).unwrap())
        .collect();
    let limits = msgbench_engine::machine_limits();
    match msgbench_model::Experiment::load(CHAT, "test.toml", &overrides, &limits) {
        Ok(_) => panic!("{sets:?} was taken"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bidirectional_calls_without_a_usable_match_field_are_refused() {
    let url = "http.url=\"http://127.0.0.1:50051\"";
    let e = chat_refused(&[url, &proto(), "http.requests.chat.match="]);
    assert!(e.contains("bidirectional") && e.contains("match = "), "{e}");
    let e = chat_refused(&[
        url,
        &proto(),
        "http.requests.chat.grpc=\"msgbench.Echo/Call\"",
    ]);
    assert!(
        e.contains("unary") && e.contains("leave `match` out"),
        "{e}"
    );
    let e = chat_refused(&[url, &proto(), "http.requests.chat.match=\"payload\""]);
    assert!(e.contains("64-bit integer") && e.contains("string"), "{e}");
    let e = chat_refused(&[url, &proto(), "http.requests.chat.match=\"id\""]);
    assert!(e.contains("seq") && e.contains("note"), "{e}");
    let e = chat_refused(&[url, "http.requests.chat.grpc=", "http.proto="]);
    assert!(e.contains("without a gRPC call"), "{e}");
}

#[test]
fn client_streaming_calls_send_their_messages_and_are_timed_to_the_one_response() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let upload = [
        "http.requests.echo.grpc=\"msgbench.Echo/Upload\"",
        // 50 messages of ~3 KiB: 150 KiB a call, over HTTP/2's default 64 KiB window.
        "http.requests.echo.messages=50",
        &format!(
            "http.requests.echo.message='{{\"payload\":\"{}\"}}'",
            "QUJD".repeat(768)
        ),
    ];
    let r = &run_against(&server, &upload);
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    let stats = server.stop();
    assert!(stats.answered.load(Ordering::Relaxed) >= r.counters.delivered);
    // What does not fit is refused before any load.
    let url = "http.url=\"http://127.0.0.1:50051\"";
    let e = refused(&[
        url,
        &proto(),
        "http.requests.echo.grpc=\"msgbench.Echo/Upload\"",
    ]);
    assert!(
        e.contains("client-streaming") && e.contains("messages = "),
        "{e}"
    );
    let e = refused(&[url, &proto(), "http.requests.echo.messages=3"]);
    assert!(e.contains("leave `messages` out"), "{e}");
    let e = refused(&[
        url,
        &proto(),
        "http.requests.echo.grpc=\"msgbench.Echo/Upload\"",
        "http.requests.echo.messages=0",
    ]);
    assert!(e.contains("http.requests.echo.messages"), "{e}");
}

#[test]
fn without_a_proto_the_calls_are_described_by_the_servers_reflection() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = url(server.local_addr());
    let r = &run(GRPC, &[&addr, "http.reflection=true"])[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    // What reflection offers is checked like a .proto: methods and fields by name.
    let e = refused(&[
        &addr,
        "http.reflection=true",
        "http.requests.echo.grpc=\"msgbench.Echo/Cal\"",
    ]);
    assert!(e.contains("it has: Call, Chat, Upload"), "{e}");
    let e = refused(&[
        &addr,
        "http.reflection=true",
        "http.requests.echo.message='{\"size\":3}'",
    ]);
    assert!(e.contains("size") && e.contains("payload"), "{e}");
    let e = refused(&[&addr, "http.reflection=true", &proto()]);
    assert!(
        e.contains("http.reflection") && e.contains("give one"),
        "{e}"
    );
    server.stop();
    // A server without reflection, and no server: said before any load.
    let options = GrpcServerOptions {
        reflection: false,
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let e = refused(&[&url(server.local_addr()), "http.reflection=true"]);
    assert!(
        e.contains("does not offer server reflection") && e.contains("UNIMPLEMENTED"),
        "{e}"
    );
    let gone = server.local_addr();
    server.stop();
    let e = refused(&[&url(gone), "http.reflection=true"]);
    assert!(e.contains("cannot connect"), "{e}");
}

#[test]
fn reflection_carries_the_calls_metadata_to_a_server_that_wants_it() {
    let options = GrpcServerOptions {
        require: Some(("authorization".into(), "Bearer t0ken".into())),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = url(server.local_addr());
    // Without the token the server refuses reflection, and the check says what it answered.
    let e = refused(&[&addr, "http.reflection=true"]);
    assert!(
        e.contains("http.reflection") && e.contains("UNAUTHENTICATED"),
        "{e}"
    );
    let token = "http.requests.echo.headers={ authorization = \"Bearer t0ken\" }";
    let r = &run(GRPC, &[&addr, "http.reflection=true", token])[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    server.stop();
}

#[test]
fn a_protoset_of_compiled_descriptors_describes_the_calls_like_a_proto() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos/msgbench.proto"),
    )
    .unwrap();
    let files = msgbench_model::grpc::compile_source("msgbench.proto", &source).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("msgbench.protoset");
    std::fs::write(
        &set,
        msgbench_engine::net::grpc_reflection::descriptor_set(&files),
    )
    .unwrap();
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run(
        GRPC,
        &[
            &url(server.local_addr()),
            &format!("http.proto=\"{}\"", set.display()),
        ],
    )[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 800, "{:?}", r.counters);
    let broken = dir.path().join("broken.pb");
    std::fs::write(&broken, b"\x0a\x05abc").unwrap();
    let e = refused(&[
        "http.url=\"http://127.0.0.1:50051\"",
        &format!("http.proto=\"{}\"", broken.display()),
    ]);
    assert!(e.contains("FileDescriptorSet"), "{e}");
}

#[test]
fn paced_client_stream_messages_are_each_confirmed_by_their_calls_response() {
    let server = start(GrpcServerOptions::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let paced = [
        "http.requests.echo.grpc=\"msgbench.Echo/Upload\"",
        "http.requests.echo.messages=20",
        "http.requests.echo.paced=true",
        "client.connections=2",
        "client.window=64",
        "run.duration=\"1s\"",
    ];
    let r = &run_against(&server, &paced);
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    // 2000 messages/s for 1 s; the calls open when sending stops are ended then, their
    // responses confirming what they carry.
    assert!(r.counters.delivered > 1900, "{:?}", r.counters);
    assert_eq!(r.counters.in_flight_end, 0, "{:?}", r.counters);
    // Each connection sends 1000 messages/s, 20 to a call: a call spans ~20 ms, and a
    // message waits from its intended send to its call's response — ~10 ms on the median.
    assert!(
        r.latency.p50_ns > 3_000_000 && r.latency.p50_ns < 20_000_000,
        "{:?}",
        r.latency
    );
    assert!(r.latency.p99_ns < 60_000_000, "{:?}", r.latency);
    let stats = server.stop();
    let calls = stats.answered.load(Ordering::Relaxed);
    assert!(
        calls * 20 >= r.counters.delivered && calls * 20 < r.counters.delivered + 1000,
        "{calls} calls for {} messages",
        r.counters.delivered
    );
    // What cannot work is refused before any load.
    let url = "http.url=\"http://127.0.0.1:50051\"";
    let e = refused(&[url, &proto(), paced[0], paced[2], paced[4]]);
    assert!(e.contains("messages = 10"), "{e}");
    let e = refused(&[
        url,
        &proto(),
        paced[0],
        paced[1],
        paced[2],
        "client.window=8",
    ]);
    assert!(
        e.contains("client.window") && e.contains("20 paced messages"),
        "{e}"
    );
    let e = refused(&[url, "http.proto=", "http.requests.echo.grpc=", paced[2]]);
    assert!(e.contains("without a gRPC call"), "{e}");
    // 10 messages a second on each connection: a call of 20 takes 2 s, over a 1 s timeout.
    let slow = ["pacing.per_sec=20", "client.timeout=\"1s\""];
    let e = refused(&[
        url,
        &proto(),
        paced[0],
        paced[1],
        paced[2],
        paced[4],
        slow[0],
        slow[1],
    ]);
    assert!(
        e.contains("client.timeout") && e.contains("time out"),
        "{e}"
    );
}

#[test]
fn a_paced_call_the_server_ends_early_fails_each_of_its_messages_and_the_next_opens() {
    // Messages over 4 bytes are refused: the server ends each call at its first message.
    let options = GrpcServerOptions {
        max_message: 4,
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let r = &run_against(
        &server,
        &[
            "http.requests.echo.grpc=\"msgbench.Echo/Upload\"",
            "http.requests.echo.messages=100",
            "http.requests.echo.paced=true",
            "client.connections=2",
            "client.window=100",
            "run.duration=\"1s\"",
        ],
    );
    assert_accounted(r);
    assert_eq!(r.counters.delivered, 0, "{:?}", r.counters);
    assert!(r.counters.failed > 1900, "{:?}", r.counters);
    assert_eq!(r.counters.in_flight_end, 0, "{:?}", r.counters);
    assert_eq!(r.faults.disconnects, 0, "{:?}", r.faults);
    assert!(
        (r.faults.errors.iter()).all(|e| e.message.starts_with("gRPC RESOURCE_EXHAUSTED")),
        "{:?}",
        r.faults.errors
    );
    server.stop();
}
