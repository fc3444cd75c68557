//! Requests answered by a stream of messages (`[http.requests.NAME] stream = "sse"`), against
//! an OpenAI-compatible mock with known timing (`examples/llm/mock_openai.py`, Python's
//! standard library): first token after 50 ms, then one every 10 ms, 20 tokens, `[DONE]`.
mod common;

use common::run;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The tests of this file run one at a time: each times a server's schedule to the
/// millisecond, and on a shared 2-core host two of them side by side would measure each other's
/// wake-ups (a truth test's p99 gap read 11.1 ms for the model's 10 ms that way, in CI).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The mock on a free loopback port; stopped (by PID) when dropped.
struct Mock {
    child: Child,
    port: u16,
}

impl Mock {
    fn start(args: &[&str]) -> Mock {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/llm/mock_openai.py");
        let (child, port) = common::ports::start_listening(
            "the mock OpenAI server",
            Duration::from_secs(20),
            |port| {
                Command::new("python3")
                    .arg(&script)
                    .args(["--port", &port.to_string(), "--for", "60"])
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("python3 is not installed")
            },
        );
        Mock { child, port }
    }
}

impl Mock {
    /// A Node.js server of `feeds/node/` (`script`, with `args`) on a free loopback port.
    fn node(script: &str, args: &[&str]) -> Mock {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../feeds/node")
            .join(script);
        let (child, port) =
            common::ports::start_listening(script, Duration::from_secs(20), |port| {
                Command::new("node")
                    .arg(&path)
                    .args(["--port", &port.to_string()])
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("node is not installed")
            });
        Mock { child, port }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chat(port: u16, rate: u32, duration: &str) -> String {
    format!(
        r#"system = "http"
[run]
duration = "{duration}"
warmup = "500ms"
[client]
connections = 16
timeout = "10s"
on_error = "reconnect"
[pacing]
mode = "rate"
per_sec = {rate}
[http]
url = "http://127.0.0.1:{port}"
[http.requests.chat]
method = "POST"
path = "/v1/chat/completions"
headers = {{ "Content-Type" = "application/json" }}
body = '{{"model":"mock","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}'
stream = "sse"
"#
    )
}

/// Within `share` of `want`.
fn near(got: u64, want: f64, share: f64) -> bool {
    (got as f64 - want).abs() <= want * share
}

#[test]
fn first_token_gaps_and_time_per_token_follow_the_servers_timing() {
    let _quiet = one_at_a_time();
    let mock = Mock::start(&[]);
    let r = &run(&chat(mock.port, 20, "3s"), &[])[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert_eq!(s.streams, r.counters.delivered);
    assert!(s.streams >= 50, "{s:?}");
    // 20 tokens a stream, [DONE] not among them.
    assert_eq!(s.messages, 20 * s.streams, "{s:?}");
    assert_eq!(s.cut + s.empty, 0);
    // The model: first token at 50 ms, then 10 ms apart; a stream's end at 240 ms.
    let (ttft, gap, per) = (&s.first_message, &s.gap, &s.per_message);
    assert!(near(ttft.p50_ns, 50e6, 0.10), "{ttft:?}");
    assert!(near(gap.p50_ns, 10e6, 0.10), "{gap:?}");
    assert!(near(per.p50_ns, 10e6, 0.05), "{per:?}");
    assert!(near(r.latency.p50_ns, 240e6, 0.10), "{:?}", r.latency);
    assert_eq!(gap.count, 19 * s.streams);
    assert_eq!(per.count, s.streams);
}

#[test]
fn a_stall_delays_the_first_token_of_the_streams_behind_it_and_cut_streams_are_failed() {
    let _quiet = one_at_a_time();
    // 500 ms without a byte, 1.5 s after the first request (1 s into the window); every 10th
    // stream cut after 10 tokens.
    let mock = Mock::start(&[
        "--stall-at",
        "1.5",
        "--stall-ms",
        "500",
        "--cut-every",
        "10",
    ]);
    let r = &run(&chat(mock.port, 20, "3s"), &[])[0];
    r.counters.check().unwrap();
    let s = r.streamed.as_ref().expect("streamed figures");
    // Streams meant to start during the stall waited for it: their first token is late by
    // up to 500 ms, from their intended send.
    assert!(
        s.first_message.max_ns > 400_000_000,
        "{:?}",
        s.first_message
    );
    assert!(
        s.first_message.p50_ns < 100_000_000,
        "{:?}",
        s.first_message
    );
    // And a stream in progress saw one gap of up to 500 ms.
    assert!(s.gap.max_ns > 400_000_000, "{:?}", s.gap);
    // The cut ones failed with what they had delivered (10 tokens each).
    assert!(s.cut > 0, "{s:?}");
    assert_eq!(s.cut_messages, 10 * s.cut, "{s:?}");
    assert!(r.counters.failed >= s.cut, "{:?}", r.counters);
}

/// msgbench's own event-stream server (`serve sse`), in-process: 20 messages, the first
/// `first` after the request, then one every `every` (a stream ends first + 19 × every after
/// its request).
fn model_server(
    first: Duration,
    every: Duration,
    stall_at: Option<Duration>,
) -> msgbench_engine::server::sse::SseServer {
    msgbench_engine::server::sse::SseServer::start(
        msgbench_engine::server::sse::SseOptions {
            rate: 1000.0,
            messages: 20,
            first_ns: first.as_nanos() as u64,
            every_ns: every.as_nanos() as u64,
            stall_every_ns: 0,
            stall_for_ns: 500_000_000,
            stall_at_ns: stall_at.map_or(0, |d| d.as_nanos() as u64),
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap()
}

#[test]
fn against_the_model_server_every_figure_is_within_five_percent_at_p50_and_p99() {
    let _quiet = one_at_a_time();
    // First message at 100 ms, then one every 25 ms: a stream of 575 ms. The model's times are
    // long enough that 5 % (1.25 ms of a gap) is wider than a shared host's wake-up jitter,
    // which a gap, the difference of two arrivals, carries twice. 15 streams a second keep
    // about 9 of the 16 connections busy.
    let (first, every) = (Duration::from_millis(100), Duration::from_millis(25));
    let server = model_server(first, every, None);
    let probe = WakeProbe::start();
    let r = &run(&chat(server.local_addr().port(), 15, "3s"), &[])[0];
    let host_late = probe.most_late_ns() as f64;
    eprintln!("the host's wake-ups were late by up to {host_late} ns");
    common::assert_accounted(r);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert_eq!(s.messages, 20 * s.streams);
    let (first, every) = (first.as_nanos() as f64, every.as_nanos() as f64);
    for (what, p, model) in [
        ("first message", &s.first_message, first),
        ("gap", &s.gap, every),
        ("per message", &s.per_message, every),
        ("stream", &r.latency, first + 19.0 * every),
    ] {
        assert!(near(p.p50_ns, model, 0.05), "{what} p50: {p:?}");
        // A figure is the difference of two wake-ups (the server's send, msgbench's read; or
        // two reads): each may be late by what the host's scheduler adds in the same seconds,
        // which the probe measured (its latest wake-up: a thread that works, as these do, is
        // preempted more than one that only sleeps). On a quiet host that is a fraction of a
        // millisecond; beside a CPU hog, milliseconds.
        let within = model * 0.05 + 2.0 * host_late;
        assert!(
            (p.p99_ns as f64 - model).abs() <= within,
            "{what} p99: {p:?}; the host's wake-ups were late by up to {host_late} ns"
        );
    }
}

/// How late a thread of this host wakes from a sleep, measured beside a run: a sleep to an
/// absolute time every 5 ms, its lateness kept, until dropped.
struct WakeProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<u64>>>,
}

impl WakeProbe {
    fn start() -> WakeProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            let start = std::time::Instant::now();
            let mut due = Duration::ZERO;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                due += Duration::from_millis(5);
                let now = start.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
                late.push(start.elapsed().saturating_sub(due).as_nanos() as u64);
            }
            late
        });
        WakeProbe {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the probe: its latest wake-up's lateness.
    fn most_late_ns(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let late = self.thread.take().unwrap().join().unwrap();
        late.into_iter().max().unwrap_or(0)
    }
}

#[test]
fn a_500_ms_stall_shows_in_the_first_message_of_every_stream_meant_to_start_in_it() {
    // The stall: 1.5 s after the first request (1 s into the window), 500 ms long. At 20
    // streams/s the 10 whose first message fell due in it wait for its end: their first
    // message comes 50 to 550 ms after their intended send; every other stream's at 50 ms.
    let _quiet = one_at_a_time();
    let server = model_server(
        Duration::from_millis(50),
        Duration::from_millis(10),
        Some(Duration::from_millis(1500)),
    );
    let r = &run(&chat(server.local_addr().port(), 20, "3s"), &[])[0];
    r.counters.check().unwrap();
    let s = r.streamed.as_ref().expect("streamed figures");
    let ttft = msgbench_model::histogram::decode(&s.first_message_histogram).unwrap();
    let waited = ttft.count_between(60_000_000, u64::MAX);
    assert!(
        (9..=11).contains(&waited),
        "{waited} streams waited: {:?}",
        s.first_message
    );
    // The latest of them was meant to start at most one interval (50 ms) before the stall:
    // it waited 500 to 550 ms for its first message.
    assert!(
        (495_000_000..=560_000_000).contains(&s.first_message.max_ns),
        "{:?}",
        s.first_message
    );
    assert!(
        near(s.first_message.p50_ns, 50e6, 0.05),
        "{:?}",
        s.first_message
    );
    // The streams in progress when it began each saw one gap of up to 500 ms.
    assert!(s.gap.max_ns > 400_000_000, "{:?}", s.gap);
}

/// A stream per request over HTTP/2 from a server msgbench did not write: Node's http2 module
/// (`feeds/node/sse.js`, `/stream`), 20 events 10 ms apart after 50 ms, then `[DONE]`.
#[test]
fn event_streams_over_http2_are_measured_message_by_message() {
    let _quiet = one_at_a_time();
    let node = Mock::node("sse.js", &["--for", "60", "--http2", "yes"]);
    let toml = chat(node.port, 20, "2s")
        .replace("path = \"/v1/chat/completions\"", "path = \"/stream\"")
        .replace("[http]\n", "[http]\nversion = \"2\"\n");
    let r = &run(&toml, &[])[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert!(s.streams >= 30, "{s:?}");
    assert_eq!(s.messages, 20 * s.streams, "{s:?}");
    assert_eq!(s.cut + s.empty, 0, "{s:?}");
    assert!(near(s.first_message.p50_ns, 50e6, 0.10), "{s:?}");
    assert!(near(s.gap.p50_ns, 10e6, 0.10), "{s:?}");
    assert_eq!(s.gap.count, 19 * s.streams);
}

/// gRPC server-streaming calls, each measured as a stream: `msgbench.Feed/Ticks` on the
/// built-in server, 20 messages 25 ms apart (the first at once) per call; a stall of 300 ms
/// every second shows as one long gap in the streams it falls in.
#[test]
fn grpc_server_streaming_calls_are_measured_as_streams() {
    use msgbench_engine::server::grpc::{start, GrpcServerOptions};
    let _quiet = one_at_a_time();
    let options = GrpcServerOptions {
        sleep: true,
        stall_every: Some(Duration::from_secs(1)),
        stall_for: Duration::from_millis(300),
        ..GrpcServerOptions::default()
    };
    let server = start(options, "127.0.0.1:0".parse().unwrap()).unwrap();
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos/msgbench.proto");
    let toml = format!(
        r#"system = "http"
[run]
duration = "3s"
warmup = "500ms"
[client]
connections = 2
window = 16
timeout = "10s"
[pacing]
mode = "rate"
per_sec = 20
[http]
url = "http://{}"
version = "2"
proto = "{}"
[http.requests.ticks]
grpc = "msgbench.Feed/Ticks"
message = '{{"rate": "40", "seconds": 0.5}}'
"#,
        server.local_addr(),
        proto.display()
    );
    let r = &run(&toml, &[])[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert!(s.streams >= 50, "{s:?}");
    assert_eq!(s.messages, 20 * s.streams, "{s:?}");
    assert_eq!(s.gap.count, 19 * s.streams, "{s:?}");
    // Most gaps are the feed's 25 ms; the streams a stall fell in waited up to 300 ms.
    assert!(near(s.gap.p50_ns, 25e6, 0.10), "{s:?}");
    assert!(s.gap.max_ns > 200_000_000, "{s:?}");
    // A call's first message goes at once, unless a stall holds it.
    assert!(s.first_message.p50_ns < 5_000_000, "{s:?}");
    // Each call's latency runs to its stream's end: 475 ms and more.
    assert!(r.latency.p50_ns >= 470_000_000, "{:?}", r.latency);
}

/// A JSON-RPC call over WebSocket answered by a stream (`stream = true`): the built-in server
/// sends 10 results carrying the call's id, the first 50 ms after the call, then one every
/// 20 ms, then `"[DONE]"`.
#[test]
fn websocket_calls_answered_by_several_messages_are_measured_as_streams() {
    let _quiet = one_at_a_time();
    let toml = r#"system = "ws-rpc"
[run]
duration = "2s"
warmup = "500ms"
[client]
connections = 4
window = 8
[pacing]
mode = "rate"
per_sec = 50
[ws_rpc.methods.generate]
method = "generate"
result = "tok"
stream = true
messages = 10
every = "20ms"
service = "50ms"
"#;
    let r = &run(toml, &[])[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert_eq!(s.streams, r.counters.delivered);
    assert!(s.streams >= 80, "{s:?}");
    assert_eq!(s.messages, 10 * s.streams, "{s:?}");
    assert_eq!(s.gap.count, 9 * s.streams, "{s:?}");
    assert!(near(s.first_message.p50_ns, 50e6, 0.10), "{s:?}");
    assert!(near(s.gap.p50_ns, 20e6, 0.10), "{s:?}");
    // The call ends with its stream: 50 + 9 × 20 ms.
    assert!(near(r.latency.p50_ns, 230e6, 0.10), "{:?}", r.latency);
}

/// Streamed `ws-rpc` answers from a server msgbench did not write (Node's `ws`,
/// `feeds/node/rpc_stream.js`): 5 results 10 ms apart per call, every 10th call broken after 2
/// messages — by a JSON-RPC error (the stream fails, cut with its 2 messages), or by closing
/// the connection (every stream on it cut with what it had).
#[test]
fn a_streamed_websocket_answer_broken_midway_is_cut_with_what_it_delivered() {
    let _quiet = one_at_a_time();
    for how in ["error", "close"] {
        let node = Mock::node("rpc_stream.js", &["--break", how]);
        let port = node.port;
        let toml = format!(
            r#"system = "ws-rpc"
[run]
duration = "2s"
warmup = "300ms"
[client]
connections = 2
window = 8
timeout = "5s"
on_error = "reconnect"
[pacing]
mode = "rate"
per_sec = 50
[ws_rpc]
address = "ws://127.0.0.1:{port}/"
[ws_rpc.methods.generate]
method = "generate"
stream = true
"#
        );
        let r = &run(&toml, &[])[0];
        r.counters.check().unwrap();
        let s = r.streamed.as_ref().expect("streamed figures");
        assert!(s.cut > 0, "{how}: {s:?}");
        assert!(r.counters.failed >= s.cut, "{how}: {:?}", r.counters);
        // Whole streams carried 5 messages each; cut ones what they had by the break.
        assert_eq!(s.messages, 5 * s.streams, "{how}: {s:?}");
        match how {
            "error" => {
                assert_eq!(s.cut_messages, 2 * s.cut, "{s:?}");
                let error = r
                    .faults
                    .errors
                    .iter()
                    .find(|e| e.message.contains("overloaded"));
                // (errors are counted from the warm-up on; cut streams in the window only)
                let errors = error.map_or(0, |e| e.count);
                assert!(errors >= s.cut, "{:?}", r.faults.errors);
            }
            _ => {
                // Streams on a closed connection had 0 to 5 messages: those with any are cut
                // (with them), the others fail with the connection.
                assert!(s.cut_messages >= s.cut, "{s:?}");
                assert!(s.cut_messages <= 5 * s.cut, "{s:?}");
                assert!(r.faults.disconnects > 0, "{:?}", r.faults);
            }
        }
    }
}
