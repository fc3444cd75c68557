//! A new request/response protocol needs only its wire format: a line protocol written here
//! (`PING <id>` → `PONG <id>`; a ping whose id ends in 0 is answered after the next one) runs on the byte-stream driver
//! with every pacing and window rule, and its accounting holds. This is step 3 of "How to add
//! a system" in docs/architecture.md, kept true by a test.
mod common;

use msgbench_engine::drivers::request_response::byte_stream::{drive, Plan, Response, Wire};
use msgbench_engine::drivers::request_response::launcher::Launch;
use msgbench_engine::harness::RunContext;
use msgbench_model::scenario::System;
use msgbench_model::Experiment;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `PING <id>\n` out, `PONG <id>\n` back.
struct LineWire;

impl Wire for LineWire {
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("PING {}\n", launch.id).as_bytes());
    }

    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        let Some(end) = buf.iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&buf[..end]).map_err(|e| e.to_string())?;
        let id = line
            .strip_prefix("PONG ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("not a pong: {line:?}"))?;
        Ok(Some(Response {
            id: Some(id),
            size: end + 1,
            ok: true,
            closes: false,
        }))
    }
}

/// Answers every two pings of a connection in reverse order (the second first).
fn line_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                stream.set_nodelay(true).unwrap();
                let mut out = stream.try_clone().unwrap();
                let mut held: Option<String> = None;
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    let pong = line.replacen("PING", "PONG", 1);
                    let reply = match held.take() {
                        Some(first) => format!("{pong}\n{first}\n"),
                        // An odd one waits for its pair, or goes alone when the pings pause.
                        None if line.ends_with('0') => {
                            held = Some(pong);
                            continue;
                        }
                        None => format!("{pong}\n"),
                    };
                    if out.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_new_protocol_needs_only_its_wire_format() {
    let _turn = common::turn();
    let toml = "system = \"rpc\"\n[run]\nduration = \"300ms\"\nwarmup = \"50ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 4000\n[client]\nconnections = 2\nwindow = 8\n";
    let limits = msgbench_engine::machine_limits();
    let experiment = Experiment::load(toml, "t.toml", &[], &limits).unwrap();
    let scenario = &experiment.points[0].scenario;
    let System::Rpc { client, .. } = &scenario.system else {
        panic!("an rpc scenario gives the client settings")
    };
    msgbench_engine::clock::calibrate();
    let plan = Plan {
        scenario,
        client,
        address: line_server().into(),
        shares: vec![1.0],
        make_wire: |_| LineWire,
        hint: "(the test's line server)",
        connector: (),
    };
    let ctx = RunContext {
        stop: Arc::new(AtomicBool::new(false)),
        live: None,
    };
    let out = drive::<_, msgbench_engine::net::endpoint::Stream>(plan, &ctx, &|| None).unwrap();
    let c = out.recording.counters;
    c.check().unwrap();
    assert_eq!(c.attempted, 1200, "4000/s for 300 ms: {c:?}");
    assert_eq!(c.delivered + c.in_flight_end, c.sent, "{c:?}");
    assert!(c.delivered >= 1190, "{c:?}");
    assert_eq!(out.faults.total(), 0, "{:?}", out.faults);
    assert!(out.stopped_by.is_none() && !out.interrupted);
    // The span is the schedule's 300 ms even though the last pong is held back: the loop
    // sees every schedule over at once, not at its next response or stop check (20 ms).
    let span_ms = out.span_ns as f64 / 1e6;
    assert!((span_ms - 300.0).abs() < 5.0, "{span_ms} ms");
}
