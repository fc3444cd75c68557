//! Real runs of the tick stream: the built-in server and msgbench's native client on loopback,
//! and small misbehaving WebSocket servers written here. Accounting at both ends, every
//! slow-client policy, sequence checking, and every fault kind.
mod common;

use common::{dead_address, not_websocket, run, try_run, try_run_stopped, ws_server};
use futures_util::{SinkExt, StreamExt};
use msgbench_engine::net::tick::Tick;
use msgbench_engine::runner::RunError;
use msgbench_model::check::MachineLimits;
use msgbench_model::RunResult;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_websockets::Message;

/// Both invariants for the run and for every client, and every delivery's latency recorded.
fn assert_accounted(r: &RunResult) {
    r.counters
        .check()
        .unwrap_or_else(|e| panic!("{}: {e}", r.run_id));
    assert_eq!(r.latency.count, r.counters.delivered, "{}", r.run_id);
    let mut delivered = 0;
    for c in &r.streams {
        c.counters
            .check()
            .unwrap_or_else(|e| panic!("{} {}: {e}", r.run_id, c.name));
        assert_eq!(
            c.latency.count, c.counters.delivered,
            "{} {}",
            r.run_id, c.name
        );
        delivered += c.counters.delivered;
    }
    assert_eq!(delivered, r.counters.delivered, "{}", r.run_id);
}

fn client<'a>(r: &'a RunResult, name: &str) -> &'a msgbench_model::result::StreamClient {
    r.streams
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{}: no client {name}", r.run_id))
}

const TICKS: &str = "system = \"ticks\"\n[run]\nduration = \"1s\"\nwarmup = \"200ms\"\ndrain_timeout = \"1s\"\n[pacing]\nmode = \"rate\"\nper_sec = 50000\n";

#[test]
fn a_fast_client_gets_every_tick_in_both_formats_and_acknowledges_it() {
    let toml = format!("{TICKS}[sweep]\n\"ticks.format\" = [\"binary\", \"json\"]\n");
    let results = run(&toml, &[]);
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_accounted(r);
        let c = client(r, "client-0");
        let server = c.server.expect("the built-in server reports its side");
        // 50k/s for 1 s: the absolute schedule makes exactly 50 000 measured ticks.
        assert_eq!(server.generated, 50_000, "{}", r.run_id);
        assert_eq!(
            (
                server.queued,
                server.written,
                server.acked,
                c.counters.delivered
            ),
            (50_000, 50_000, 50_000, 50_000),
            "{}: every tick queued, written, acknowledged and delivered",
            r.run_id
        );
        assert_eq!((c.counters.dropped, c.counters.in_flight_end), (0, 0));
        assert_eq!(c.sequence.total() + c.gaps_seen, 0, "{}", r.run_id);
        assert!(c.closed.is_none(), "{}: {:?}", r.run_id, c.closed);
        let per_second: u64 = c.intervals.iter().map(|i| i.generated).sum();
        assert_eq!(per_second, 50_000, "{}: intervals add up", r.run_id);
        assert_eq!(c.intervals.last().unwrap().backlog, 0, "{}", r.run_id);
        assert!(c.latency.p50_ns > 0 && c.latency.p50_ns < 50_000_000);
        assert_eq!(r.target_per_sec, Some(50_000.0));
    }
}

#[test]
fn every_slow_client_policy_is_accounted_for() {
    // The slow client takes 100 µs per tick (10k/s) of 40k/s. (Socket buffers stay at 64 KiB:
    // below loopback's 64 KiB MSS, TCP's window updates stall and a client reads in bursts.)
    let toml = format!(
        r#"{TICKS}
[ticks]
receive_buffer = 65536
[ticks.server]
# 200 ms of ticks: the fast client rides out a host hiccup; the slow one overflows in 0.3 s.
queue = 8192
send_buffer = 65536
[ticks.clients.fast]
connections = 1
[ticks.clients.slow]
connections = 1
cost = "100us"
work = "sleep"
[sweep]
"ticks.server.policy" = ["unbounded", "drop-oldest", "drop-newest", "disconnect"]
"#
    );
    // 8192 queued + the socket buffers take the slow client about a second to drain.
    let results = run(&toml, &["pacing.per_sec=40000", "run.drain_timeout=\"2s\""]);
    let by_policy = |p: &str| {
        results
            .iter()
            .find(|r| r.param("ticks.server.policy") == Some(p))
            .unwrap()
    };
    for r in &results {
        assert_accounted(r);
        let fast = client(r, "fast-0");
        assert_eq!(
            fast.counters.delivered, 40_000,
            "{}: the fast client gets every tick whatever happens to the slow one",
            r.run_id
        );
        assert_eq!(
            r.sequence.total(),
            0,
            "{}: gaps are the server's drops",
            r.run_id
        );
    }
    let unbounded = client(by_policy("unbounded"), "slow-0");
    assert_eq!(unbounded.counters.dropped, 0);
    assert!(
        unbounded.counters.in_flight_end > 10_000,
        "{:?}",
        unbounded.counters
    );
    let backlog: Vec<i64> = unbounded.intervals.iter().map(|i| i.backlog).collect();
    assert!(backlog[0] > 10_000, "{backlog:?}");
    assert!(
        unbounded.server.unwrap().queue_peak > 8192,
        "the queue grew past `queue`"
    );

    let oldest = client(by_policy("drop-oldest"), "slow-0");
    assert!(oldest.counters.dropped > 10_000, "{:?}", oldest.counters);
    assert_eq!(oldest.counters.in_flight_end, 0, "a bounded queue drains");
    assert!(
        oldest.gaps_seen >= oldest.counters.dropped,
        "drops show as gaps"
    );
    assert!(
        oldest.latency.p99_ns < unbounded.latency.p99_ns,
        "dropping bounds latency: {} vs {}",
        oldest.latency.p99_ns,
        unbounded.latency.p99_ns
    );

    let newest = client(by_policy("drop-newest"), "slow-0");
    let server = newest.server.unwrap();
    assert!(newest.counters.dropped > 10_000);
    assert_eq!(
        server.queued + server.dropped,
        server.generated,
        "refused, not queued"
    );

    let disconnect = by_policy("disconnect");
    let slow = client(disconnect, "slow-0");
    let why = slow.closed.as_deref().unwrap_or_default();
    assert!(why.contains("1013") && why.contains("overflowed"), "{why}");
    assert_eq!(slow.faults.disconnects, 1);
    assert!(disconnect
        .warnings
        .iter()
        .any(|w| w.to_string().contains("slow-0 ended early")));
}

/// Sends tick `seq` stamped now, in binary.
async fn send_tick(
    ws: &mut tokio_websockets::WebSocketStream<tokio::net::TcpStream>,
    seq: u64,
) -> bool {
    let mut out = bytes::BytesMut::new();
    Tick::at(seq, msgbench_engine::clock::now_ns(), 10).encode_binary(&mut out);
    ws.send(Message::binary(out.freeze())).await.is_ok()
}

fn external(address: SocketAddr, extra: &str) -> String {
    format!(
        "system = \"ticks\"\n[run]\nduration = \"400ms\"\nwarmup = \"0\"\ndrain_timeout = \"200ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 1000\n[ticks]\naddress = \"ws://{address}/ticks\"\n{extra}"
    )
}

#[test]
fn gaps_duplicates_and_reordering_from_a_broken_server_fail_the_run_and_are_written() {
    // Every 100 ticks: 3 missing, one repeated, two swapped.
    let addr = ws_server(|mut ws| async move {
        let mut i = 0u64;
        loop {
            let seqs: Vec<u64> = match i % 100 {
                10 => vec![],         // a gap of one
                20 => vec![i, i],     // a duplicate
                30 => vec![i + 1, i], // reordered
                31 => vec![],
                _ => vec![i],
            };
            for s in seqs {
                if !send_tick(&mut ws, s).await {
                    return;
                }
            }
            i += 1;
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    let (outcome, dir) = try_run(&external(addr, ""), &[]);
    if let Err(e @ RunError::SequenceBroken { .. }) = &outcome {
        // Issue 44: the message named no setting for a feed that skips ids on purpose.
        assert!(e.to_string().contains("ticks.gaps = \"drops\""), "{e}");
    }
    match outcome {
        Err(RunError::SequenceBroken {
            gaps,
            duplicates,
            reordered,
            ..
        }) => {
            assert!(
                gaps >= 1 && duplicates >= 1 && reordered >= 1,
                "{gaps} {duplicates} {reordered}"
            );
        }
        other => panic!("expected a sequence failure, got {other:?}"),
    }
    let written = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(written, 1, "the failed run is on disk");

    // The same stream read as a lossy feed: gaps are drops, duplicates still errors.
    let (outcome, _dir) = try_run(&external(addr, "gaps = \"drops\"\n"), &[]);
    assert!(matches!(
        outcome,
        Err(RunError::SequenceBroken { gaps: 0, .. })
    ));
}

#[test]
fn a_sequence_number_no_stream_could_reach_is_a_fault_not_billions_of_lost_ticks() {
    // Now and then a tick numbered 2^64 − 1 among ticks numbered in order: each is the
    // server's protocol fault, and the run's counts stay what the stream could have offered.
    let addr = ws_server(|mut ws| async move {
        let mut seq = 0;
        loop {
            if seq % 100 == 50 && !send_tick(&mut ws, u64::MAX).await {
                return;
            }
            if !send_tick(&mut ws, seq).await {
                return;
            }
            seq += 1;
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    });
    // Before, the first one alone made ~2^64 gaps and failed the run as a broken sequence.
    let results = run(&external(addr, ""), &[]);
    let r = &results[0];
    assert_accounted(r);
    let c = client(r, "client-0");
    assert!(c.faults.protocol_errors >= 2, "{:?}", c.faults);
    assert!(c.counters.delivered > 100, "{:?}", c.counters);
    assert!(c.counters.attempted < 1_000_000, "{:?}", c.counters);
    assert_eq!(c.sequence.gaps, 0, "{:?}", c.sequence);
}

#[test]
fn malformed_messages_are_counted_and_the_stream_goes_on() {
    let addr = ws_server(|mut ws| async move {
        let mut seq = 0;
        loop {
            let ok = if seq % 50 == 25 {
                ws.send(Message::binary(vec![1u8; 20])).await.is_ok()
                    && ws.send(Message::text("{\"seq\": \"nope\"}")).await.is_ok()
            } else {
                true
            };
            if !ok || !send_tick(&mut ws, seq).await {
                return;
            }
            seq += 1;
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    });
    let results = run(&external(addr, ""), &[]);
    let r = &results[0];
    assert_accounted(r);
    let c = client(r, "client-0");
    assert!(c.faults.protocol_errors >= 4, "{:?}", c.faults);
    assert!(c.counters.delivered > 100, "{:?}", c.counters);
    assert!(
        c.server.is_none(),
        "not msgbench's server: no server counts"
    );
    assert_eq!(r.target_per_sec, None, "someone else's schedule");
}

#[test]
fn a_server_that_closes_every_client_at_once_stops_the_run_and_one_that_sends_nothing_says_so() {
    let closes = ws_server(|mut ws| async move {
        let _ = ws.close().await;
    });
    let r = &run(
        &external(closes, "[ticks.clients.c]\nconnections = 2\n"),
        &[],
    )[0];
    assert_eq!(r.counters.delivered, 0);
    let first = r.warnings.iter().find(|w| w.is_stopped_early());
    assert!(
        first.is_some_and(|w| w.to_string().contains("every client's connection ended")),
        "{:?}",
        r.warnings
    );
    let notes: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("(close code 1000, normal closure)")),
        "{notes:?}"
    );

    let silent = ws_server(|ws| async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(ws);
    });
    let r = &run(&external(silent, ""), &[])[0];
    assert_accounted(r);
    assert!(
        r.warnings
            .contains(&msgbench_model::warning::Warning::NothingReceived),
        "{:?}",
        r.warnings
    );
    assert!(
        !r.warnings.iter().any(|w| w.is_stopped_early()),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_server_that_closes_mid_run_is_a_counted_disconnect_under_each_on_close() {
    let addr = ws_server(|mut ws| async move {
        for seq in 0..150 {
            if !send_tick(&mut ws, seq).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = ws.close().await;
    });
    let continued = run(&external(addr, ""), &[]);
    let c = client(&continued[0], "client-0");
    assert_eq!(c.faults.disconnects, 1);
    assert!(
        c.closed.as_deref().unwrap_or_default().contains("closed"),
        "{:?}",
        c.closed
    );
    assert!(!continued[0].interrupted);

    let stopped = run(&external(addr, "on_close = \"stop\"\n"), &[]);
    assert!(stopped[0].interrupted);
    assert!(
        stopped[0].warnings[0].is_stopped_early(),
        "{:?}",
        stopped[0].warnings
    );

    let reconnected = run(
        &external(addr, "on_close = \"reconnect\"\n"),
        &["run.duration=\"700ms\""],
    );
    let c = client(&reconnected[0], "client-0");
    assert!(c.faults.disconnects >= 1, "{:?}", c.faults);
    assert!(
        c.counters.delivered > 200,
        "the second connection delivered too: {:?}",
        c.counters
    );
}

#[test]
fn a_peer_that_is_not_a_websocket_server_gets_one_clear_error() {
    let addr = not_websocket(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    let (outcome, _dir) = try_run(&external(addr, ""), &[]);
    let message = outcome.unwrap_err().to_string();
    assert!(
        message.contains("WebSocket") && message.contains(&addr.to_string()),
        "{message}"
    );

    let dead = dead_address();
    let (outcome, _dir) = try_run(&external(dead, ""), &[]);
    let message = outcome.unwrap_err().to_string();
    assert!(
        message.contains("cannot connect") && message.contains("serve ticks"),
        "{message}"
    );
}

#[test]
fn the_server_protects_itself_from_clients_that_never_read_or_send_too_much() {
    use msgbench_engine::net::tick::Schedule;
    use msgbench_engine::server::ticks::{TickServer, TickServerOptions};
    use msgbench_model::ticks::{SlowClientPolicy, TickFormat, TickServerSpec};
    let _turn = common::turn();
    // 100 ms of ticks: the well-behaved reader rides out a hiccup, the idle one (whose kernel
    // buffers hold another ~3500) overflows within ~0.3 s.
    let spec = TickServerSpec {
        queue: 2048,
        policy: SlowClientPolicy::Disconnect,
        send_buffer: 8192,
        max_frame: 4096,
        ..Default::default()
    };
    let limits = MachineLimits::cpus(vec![0, 1]);
    let config = spec
        .validate(&limits, &|f, p, _| msgbench_model::ScenarioError::Invalid {
            source_name: "test".into(),
            field: f.into(),
            problem: p,
            fix: String::new(),
        })
        .unwrap();
    let server = TickServer::start(
        TickServerOptions {
            config,
            format: TickFormat::Binary,
            symbols: 10,
            pacing: msgbench_model::pacing::Pacing::Rate {
                per_sec: 20_000.0,
                arrivals: msgbench_model::pacing::Arrivals::Uniform,
            },
            spin_ns: 50_000,
            seed: 1,
            per_second: true,
        },
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    let url = format!("ws://{}/ticks", server.local_addr());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // One client that never reads, one that sends a 64 KiB message, one that behaves.
    let (mut idle, mut big, mut good) = rt.block_on(async {
        let open = |name: &str| {
            let url = format!("{url}?client={name}");
            async move {
                let stream =
                    tokio::net::TcpStream::connect(msgbench_model::check::ws_authority(&url))
                        .await
                        .unwrap();
                tokio_websockets::ClientBuilder::new()
                    .uri(&url)
                    .unwrap()
                    .connect_on(stream)
                    .await
                    .unwrap()
                    .0
            }
        };
        (open("idle").await, open("big").await, open("good").await)
    });
    let now = msgbench_engine::clock::now_ns();
    server.begin(Schedule {
        t0_ns: now,
        measure_start_ns: now,
        end_ns: now + 800_000_000,
    });
    rt.block_on(async {
        let _ = big.send(Message::text("x".repeat(64 << 10))).await;
        let mut got = 0;
        let read = async {
            while let Some(Ok(m)) = good.next().await {
                if m.is_binary() {
                    got += 1;
                }
                if m.as_text().is_some_and(|t| t.contains("\"end\"")) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(3), read).await;
        assert!(got > 14_000, "the well-behaved client got its ticks: {got}");
        let _ = &mut idle;
    });
    let report = server.stop();
    let by_name = |n: &str| report.connections.iter().find(|c| c.name == n).unwrap();
    let idle = by_name("idle");
    assert!(
        idle.closed
            .as_ref()
            .is_some_and(|(why, _)| why.contains("disconnect")),
        "{:?}",
        idle.closed
    );
    assert!(by_name("big").closed.is_some());
    assert!(report.counts.protocol_errors >= 1, "{:?}", report.counts);
}

/// A WebSocket server that answers the upgrade itself, sends `ticks` ticks (binary), then
/// `prefix` once and `flood` over and over, 64 KiB a write, until the client goes: frames that
/// yield no message (empty pongs; empty continuations of a message never finished).
fn flooding_server(ticks: u64, prefix: &'static [u8], flood: &'static [u8]) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || flood_one(s, ticks, prefix, flood));
        }
    });
    addr
}

fn flood_one(mut s: std::net::TcpStream, ticks: u64, prefix: &[u8], flood: &[u8]) {
    use base64::Engine;
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let key = (text.lines())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    let mut sha1 = sha1_smol::Sha1::new();
    sha1.update(key.as_bytes());
    sha1.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let accept = base64::engine::general_purpose::STANDARD.encode(sha1.digest().bytes());
    let mut out = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
    .into_bytes();
    for seq in 0..ticks {
        let mut tick = bytes::BytesMut::new();
        Tick::at(seq, msgbench_engine::clock::now_ns(), 10).encode_binary(&mut tick);
        out.extend_from_slice(&[0x82, tick.len() as u8]);
        out.extend_from_slice(&tick);
    }
    out.extend_from_slice(prefix);
    if s.write_all(&out).is_err() {
        return;
    }
    let chunk = flood.repeat((64 << 10) / flood.len());
    while s.write_all(&chunk).is_ok() {}
}

/// Empty pongs, and empty continuations of a text message never finished.
const FLOODS: [(&str, &[u8], &[u8]); 2] = [
    ("empty pongs", b"", &[0x8a, 0x00]),
    ("empty continuations", &[0x01, 0x00], &[0x00, 0x00]),
];

#[test]
fn a_flood_of_frames_that_make_no_message_does_not_hold_the_run_past_its_end() {
    // Before (issue 43, finding 3), such a server kept a 2 s run going 18.9 s: the client's
    // read loop looked at its deadline only between messages.
    msgbench_engine::clock::calibrate();
    for (what, prefix, flood) in FLOODS {
        let addr = flooding_server(20, prefix, flood);
        let (outcome, took, _dir) = common::try_run_timed(&external(addr, ""), &[]);
        // 400 ms + 200 ms of drain, and 2 s to spare.
        assert!(took < Duration::from_millis(2600), "{what}: {took:?}");
        let r = &outcome.unwrap().results[0];
        assert_accounted(r);
        // The flood was read to the end of the run: no fault, the connection not given up.
        let c = client(r, "client-0");
        assert_eq!(c.faults.protocol_errors, 0, "{what}: {:?}", c.faults);
        assert!(c.closed.is_none(), "{what}: {:?}", c.closed);
    }
}

#[test]
fn ctrl_c_ends_a_run_within_a_second_while_a_server_floods_frames_that_make_no_message() {
    msgbench_engine::clock::calibrate();
    for (what, prefix, flood) in FLOODS {
        let addr = flooding_server(20, prefix, flood);
        let toml = external(addr, "").replace("duration = \"400ms\"", "duration = \"30s\"");
        let (outcome, after_stop, _dir) = try_run_stopped(&toml, Duration::from_millis(700));
        assert!(
            after_stop < Duration::from_secs(1),
            "{what}: {after_stop:?} after Ctrl-C"
        );
        let r = &outcome.unwrap().results[0];
        assert!(r.interrupted, "{what}");
        assert_accounted(r);
    }
}

#[test]
fn a_feed_message_without_its_sequence_is_named_with_the_path_it_lacked() {
    // Issue 44: a message without the sequence path was only "1 protocol error".
    let addr = ws_server(|mut ws| async move {
        let mut seq = 0u64;
        loop {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis();
            let text = if seq % 25 == 24 {
                format!("{{\"ts\":{ms},\"kind\":\"heartbeat\"}}")
            } else {
                format!("{{\"id\":{seq},\"ts\":{ms}}}")
            };
            if ws.send(Message::text(text)).await.is_err() {
                return;
            }
            seq += 1;
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    });
    let feed = "gaps = \"drops\"\n[ticks.feed]\nsequence = \"id\"\ntimestamp = \"ts\"\nclock = \"unix-ms\"\n";
    let r = &run(&external(addr, feed), &[])[0];
    let notes: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
    let said = notes.join("\n");
    assert!(
        said.contains("no whole sequence number at its path (`id`)")
            && said.contains("\"kind\", \"ts\""),
        "{said}"
    );
}

#[test]
fn a_feed_clock_of_the_wrong_unit_is_told_the_unit_that_fits() {
    // Issue 44: µs stamps read as unix-ms said "18446743158 s ahead" (a u64 at its end) and
    // asked for the unit already set.
    let addr = ws_server(|mut ws| async move {
        for id in 0u64.. {
            let us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros();
            let text = format!("{{\"id\":{id},\"ts\":{us}}}");
            if ws.send(Message::text(text)).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let feed = "[ticks.feed]\nsequence = \"id\"\ntimestamp = \"ts\"\nclock = \"unix-ms\"\n";
    let (outcome, _dir) = try_run(&external(addr, feed), &[]);
    let said = match outcome {
        Ok(o) => (o.results[0].warnings.iter())
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => e.to_string(),
    };
    assert!(
        said.contains("read as unix-ms") && said.contains("clock = \"unix-us\""),
        "{said}"
    );
    assert!(!said.contains("18446743"), "{said}");
}

/// A feed msgbench did not write, broadcasting one sequence to every connection at `per_sec`,
/// each tick stamped with its own due time on this host's monotonic clock (the schedule is
/// absolute: exactly `per_sec` stamps a second), never waiting for a slow reader: a
/// connection's ticks wait in its own unbounded queue, as in a feed that buffers per client.
fn broadcast_feed(per_sec: u64) -> SocketAddr {
    use std::sync::{Arc, Mutex};
    type Queue = tokio::sync::mpsc::UnboundedSender<(u64, u64)>;
    let readers: Arc<Mutex<Vec<Queue>>> = Arc::default();
    let generator = readers.clone();
    std::thread::spawn(move || {
        let step_ns = 1_000_000_000 / per_sec;
        let t0 = msgbench_engine::clock::now_ns();
        let mut seq = 0u64;
        // Bounded: the test's run is over long before.
        while seq < per_sec * 30 {
            std::thread::sleep(Duration::from_millis(1));
            let now = msgbench_engine::clock::now_ns();
            let mut readers = generator.lock().unwrap();
            while t0 + seq * step_ns <= now {
                readers.retain(|q| q.send((seq, t0 + seq * step_ns)).is_ok());
                seq += 1;
            }
        }
    });
    ws_server(move |mut ws| {
        let (queue, mut ticks) = tokio::sync::mpsc::unbounded_channel();
        readers.lock().unwrap().push(queue);
        async move {
            while let Some((seq, stamp)) = ticks.recv().await {
                let mut out = bytes::BytesMut::new();
                Tick::at(seq, stamp, 10).encode_binary(&mut out);
                if ws.send(Message::binary(out.freeze())).await.is_err() {
                    return;
                }
            }
        }
    })
}

#[test]
fn a_client_that_falls_behind_someone_else_s_feed_has_what_it_never_read_counted() {
    // Issue 44: a slow client of a feed msgbench does not run read "generated 10.3k/s,
    // undelivered 0, backlog peak 0" — generated was what its own sequence numbers showed.
    // 20k/s for 2 s: exactly 40 000 ticks stamped in the window. The slow client reads about
    // 10k/s and has half a second of drain: some 15 000 of them are never read.
    let addr = broadcast_feed(20_000);
    let toml = format!(
        r#"system = "ticks"
[run]
duration = "2s"
warmup = "300ms"
drain_timeout = "500ms"
[pacing]
mode = "rate"
per_sec = 20000
[ticks]
address = "ws://{addr}/"
[ticks.clients.fast]
connections = 1
[ticks.clients.slow]
connections = 1
cost = "100us"
work = "sleep"
"#
    );
    let r = &run(&toml, &[])[0];
    assert_accounted(r);
    let (fast, slow) = (client(r, "fast-0"), client(r, "slow-0"));
    // The fast client read the whole window: its span is what the feed stamped in it.
    assert!(
        fast.counters.delivered.abs_diff(40_000) <= 1,
        "{:?}",
        fast.counters
    );
    assert_eq!(fast.counters.in_flight_end, 0, "{:?}", fast.counters);
    let generated = fast.counters.delivered;
    let unread = generated - slow.counters.delivered;
    assert!(
        unread > 5_000,
        "the slow client kept up: {:?}",
        slow.counters
    );
    assert_eq!(slow.counters.sent, generated, "{:?}", slow.counters);
    assert_eq!(slow.counters.in_flight_end, unread, "{:?}", slow.counters);
    // Its seconds: the feed's ticks by stamp, and a backlog that ends at what it never read.
    let made: u64 = slow.intervals.iter().map(|i| i.generated).sum();
    assert_eq!(made, generated, "{:?}", slow.intervals);
    let last = slow.intervals.last().unwrap();
    assert_eq!(last.backlog, unread as i64, "{:?}", slow.intervals);
    assert_eq!(r.intervals.last().unwrap().backlog, unread as i64);
    assert!(r.counters.in_flight_end >= unread, "{:?}", r.counters);
    // How far behind, by the stamps, whatever the run's length (steadiness needs 4 s).
    let behind = slow.behind_ns.expect("it read ticks of the window");
    assert!(behind > 500_000_000, "{behind} ns behind");
    assert!(
        fast.behind_ns.unwrap() < 100_000_000,
        "{:?}",
        fast.behind_ns
    );
    let warnings: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
    let named = warnings
        .iter()
        .find(|w| w.starts_with("client slow-0 was "))
        .unwrap_or_else(|| panic!("no warning names the slow client: {warnings:#?}"));
    assert!(
        named.contains(&format!("{unread} messages of the window were never read")),
        "{named}"
    );
    assert!(!warnings.iter().any(|w| w.contains("client fast-0 was")));
    assert!(!msgbench_model::verdict::judge(r).is_valid());
}
