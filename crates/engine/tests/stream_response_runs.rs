//! Requests answered by a stream of messages (`[http.requests.NAME] stream = "sse"`), against
//! an OpenAI-compatible mock with known timing (`examples/llm/mock_openai.py`, Python's
//! standard library): first token after 50 ms, then one every 10 ms, 20 tokens, `[DONE]`.
mod common;

use common::run;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// msgbench's own event-stream server (`serve sse`), in-process: 20 messages, the first 50 ms
/// after the request, then one every 10 ms (a stream ends 240 ms after its request).
fn model_server(stall_at: Option<Duration>) -> msgbench_engine::server::sse::SseServer {
    msgbench_engine::server::sse::SseServer::start(
        msgbench_engine::server::sse::SseOptions {
            rate: 1000.0,
            messages: 20,
            first_ns: 50_000_000,
            every_ns: 10_000_000,
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
    let server = model_server(None);
    let r = &run(&chat(server.local_addr().port(), 20, "3s"), &[])[0];
    common::assert_accounted(r);
    let s = r.streamed.as_ref().expect("streamed figures");
    assert_eq!(s.messages, 20 * s.streams);
    for (what, p, model) in [
        ("first message", &s.first_message, 50e6),
        ("gap", &s.gap, 10e6),
        ("per message", &s.per_message, 10e6),
        ("stream", &r.latency, 240e6),
    ] {
        assert!(near(p.p50_ns, model, 0.05), "{what} p50: {p:?}");
        // A p99 on a shared 2-core host carries its wake-up jitter (a gap is the difference of
        // two arrivals, each late by up to ~1 ms when the suite's other tests run beside it).
        assert!(near(p.p99_ns, model, 0.10), "{what} p99: {p:?}");
    }
}

#[test]
fn a_500_ms_stall_shows_in_the_first_message_of_every_stream_meant_to_start_in_it() {
    // The stall: 1.5 s after the first request (1 s into the window), 500 ms long. At 20
    // streams/s the 10 whose first message fell due in it wait for its end: their first
    // message comes 50 to 550 ms after their intended send; every other stream's at 50 ms.
    let server = model_server(Some(Duration::from_millis(1500)));
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
