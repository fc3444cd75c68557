//! Hostile peers against the built-in servers: each test reproduces one way a client could
//! crash, hang or exhaust a server (found by probing it), and checks the server survives, stays
//! within its documented memory and still serves a well-behaved client. Memory is the test
//! process's resident set, which holds the in-process server; tests take turns so that one's
//! growth is not read by another. Latency ratios under attack are in `bench/hostile.sh`.
mod common;

use msgbench_engine::net::frame::{self, Header, FLAG_SLEEP, KIND_REQUEST, KIND_RESPONSE};
use msgbench_engine::server::rpc::RpcServer;
use msgbench_model::rpc::RpcServerConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A line of /proc/self/status in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap();
    kb * 1024
}

/// Resident memory of this process now; the peak is reset to it, so that [`peak_growth`]
/// catches a spike between two samples.
fn rss() -> u64 {
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_bytes("VmRSS")
}

/// How far the resident memory peaked above `before` since [`rss`] read it.
fn peak_growth(before: u64) -> u64 {
    status_bytes("VmHWM").saturating_sub(before)
}

fn request(id: u64, service_ns: u64, sleep: bool, reply_bytes: u32) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(
        &Header {
            kind: KIND_REQUEST,
            flags: if sleep { FLAG_SLEEP } else { 0 },
            class: 0,
            id,
            client_ns: 0,
            service_ns,
            reply_bytes,
        },
        0,
        &mut out,
    );
    out
}

/// One request and its response on a fresh connection: the server still serves.
fn serves(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    if s.write_all(&request(7, 0, false, 0)).is_err() {
        return false;
    }
    let mut buf = [0u8; frame::HEADER_BYTES];
    if s.read_exact(&mut buf).is_err() {
        return false;
    }
    matches!(
        frame::decode(&buf, 1 << 20, KIND_RESPONSE),
        Ok(Some((h, _))) if h.id == 7
    )
}

fn server(config: RpcServerConfig) -> RpcServer {
    RpcServer::start(&config, "127.0.0.1:0".parse().unwrap()).unwrap()
}

/// Writes `chunk` again and again for `time` without reading, as far as the socket takes it.
fn flood(addr: SocketAddr, chunk: &[u8], time: Duration) -> TcpStream {
    flood_on(TcpStream::connect(addr).unwrap(), chunk, time)
}

/// [`flood`] on a connection already open (a WebSocket after its upgrade).
fn flood_on(mut s: TcpStream, chunk: &[u8], time: Duration) -> TcpStream {
    s.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let end = Instant::now() + time;
    while Instant::now() < end {
        if s.write_all(chunk).is_err() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    s
}

#[test]
fn rpc_worker_survives_a_client_that_leaves_mid_batch() {
    // A held `sleep` response released in the middle of a busy batch, to a client that has
    // gone: the flush fails, the connection closes, and the batch went on serving it (a panic
    // that left the worker dead while the server kept accepting).
    let _turn = common::turn();
    let srv = server(RpcServerConfig::default());
    let addr = srv.local_addr();
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr).unwrap();
        let mut batch = request(1, 1_000_000, true, 0);
        for id in 2..6 {
            batch.extend(request(id, 2_000_000, false, 0));
        }
        s.write_all(&batch).unwrap();
        drop(s);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(serves(addr), "the worker no longer serves");
    srv.stop();
}

#[test]
fn rpc_service_time_is_clamped_and_stopping_never_waits_on_it() {
    let _turn = common::turn();
    let config = RpcServerConfig {
        max_service_ns: 200_000_000,
        ..RpcServerConfig::default()
    };
    let srv = server(config);
    let addr = srv.local_addr();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&request(1, 1 << 63, false, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; frame::HEADER_BYTES];
    let asked = Instant::now();
    s.read_exact(&mut buf).expect("answered after max_service");
    assert!(asked.elapsed() < Duration::from_secs(2));
    assert_eq!(
        srv.stats.clamped.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // With the default limit (10 s) a busy request holds the worker, but not its stop.
    let srv2 = server(RpcServerConfig::default());
    let mut s2 = TcpStream::connect(srv2.local_addr()).unwrap();
    s2.write_all(&request(1, 1 << 63, false, 0)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let stopping = Instant::now();
    srv2.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(1),
        "stop waited {:?}",
        stopping.elapsed()
    );
    srv.stop();
}

#[test]
fn rpc_sleep_flood_is_bounded_and_others_are_served() {
    // Before: 3.5 GB in 8 s of `sleep 5s` requests from one client, kept after it left.
    let _turn = common::turn();
    let srv = server(RpcServerConfig::default());
    let addr = srv.local_addr();
    let before = rss();
    let floods: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                drop(flood(
                    addr,
                    &chunk_of(5_000_000_000),
                    Duration::from_secs(2),
                ))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert!(serves(addr), "a well-behaved client is locked out");
    for f in floods {
        f.join().unwrap();
    }
    let grown = peak_growth(before);
    println!("rpc sleep flood: peak +{} MiB", grown >> 20);
    assert!(grown < 96 << 20, "grew {} MiB", grown >> 20);
    assert!(serves(addr));
    srv.stop();
}

fn chunk_of(service_ns: u64) -> Vec<u8> {
    (0..1000)
        .flat_map(|id| request(id, service_ns, true, 0))
        .collect()
}

#[test]
fn rpc_clients_that_never_read_big_replies_are_bounded() {
    // Before: 64 MiB per connection of 1 MiB replies nobody reads, and no cap over them.
    let _turn = common::turn();
    let srv = server(RpcServerConfig::default());
    let addr = srv.local_addr();
    // A thousand requests per write: one read of the server takes hundreds of them at once.
    let chunk: Vec<u8> = (0..1000)
        .flat_map(|id| request(id, 0, false, 1 << 20))
        .collect();
    for (connections, cap_mib) in [(1, 16), (16, 96)] {
        let before = rss();
        let readers: Vec<_> = (0..connections)
            .map(|_| {
                let chunk = chunk.clone();
                std::thread::spawn(move || flood(addr, &chunk, Duration::from_secs(2)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(serves(addr), "a well-behaved client is locked out");
        let streams: Vec<TcpStream> = readers.into_iter().map(|t| t.join().unwrap()).collect();
        // The peak: a server that frees a connection's queue when it drops it as a slow
        // reader still held all of it until then.
        let peak = peak_growth(before);
        println!(
            "rpc big replies never read, {connections} connection(s): peak +{} MiB",
            peak >> 20
        );
        // Each connection: 4 MiB queued, its read buffer, one reply beyond, socket buffers.
        assert!(peak < cap_mib << 20, "grew {} MiB", peak >> 20);
        drop(streams);
        std::thread::sleep(Duration::from_millis(200));
    }
    srv.stop();
}

#[test]
fn rpc_a_pipelining_client_that_reads_everything_gets_everything() {
    // Backpressure pauses a connection at 4 MiB of queued responses; when one flush drains
    // them all, no writable event will come, and the requests still buffered must be served
    // without waiting for the client to send more.
    let _turn = common::turn();
    let srv = server(RpcServerConfig::default());
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = s.try_clone().unwrap();
    let requests = 2000u64;
    let reply = 64 << 10;
    let read_all = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let want = requests * (frame::HEADER_BYTES as u64 + reply as u64);
        while total < want {
            match reader.read(&mut buf) {
                Ok(n) if n > 0 => total += n as u64,
                _ => break,
            }
        }
        total == want
    });
    let batch: Vec<u8> = (0..requests)
        .flat_map(|id| request(id, 0, false, reply))
        .collect();
    s.write_all(&batch).unwrap();
    assert!(read_all.join().unwrap(), "responses stopped coming");
    srv.stop();
}

#[test]
fn rpc_idle_connections_are_closed_and_counted() {
    let _turn = common::turn();
    let config = RpcServerConfig {
        idle_timeout_ns: 300_000_000,
        ..RpcServerConfig::default()
    };
    let srv = server(config);
    let mut idle = TcpStream::connect(srv.local_addr()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let opened = Instant::now();
    let mut buf = [0u8; 1];
    assert_eq!(idle.read(&mut buf).unwrap_or(0), 0, "closed by the server");
    assert!(opened.elapsed() >= Duration::from_millis(250));
    assert_eq!(
        srv.stats
            .idle_closed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    srv.stop();
}

#[test]
fn rpc_idle_connections_do_not_lock_real_clients_out() {
    // Before: max_connections idle connections refused everyone else until they left.
    let _turn = common::turn();
    let config = RpcServerConfig {
        max_connections: 50,
        ..RpcServerConfig::default()
    };
    let srv = server(config);
    let addr = srv.local_addr();
    let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Fresh connections are not replaced: a new one is refused.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !serves(addr),
        "a connection over the limit was served at once"
    );
    std::thread::sleep(Duration::from_millis(1100));
    assert!(serves(addr), "idle connections locked a real client out");
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert!(load(&srv.stats.evicted) >= 1);
    assert!(load(&srv.stats.rejected) >= 1);
    drop(idle);
    srv.stop();
}

// ---- WebSocket servers ----

use msgbench_engine::server::ticks::{TickServer, TickServerOptions};
use msgbench_engine::server::ws_rpc::{MethodAnswer, WsRpcServer};
use msgbench_model::rpc::ServiceWork;
use msgbench_model::ticks::{TickFormat, TickServerSpec};
use msgbench_model::ws_rpc::WsRpcServerConfig;

/// A client's masked text frame.
fn ws_text(payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x81];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n => {
            out.push(0x80 | 126);
            out.extend((n as u16).to_be_bytes());
        }
    }
    let mask = [1u8, 2, 3, 4];
    out.extend(mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

const UPGRADE_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn upgrade_head(addr: SocketAddr, target: &str) -> String {
    format!(
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {UPGRADE_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Opens a WebSocket by hand; returns the stream and the status line of the answer.
fn ws_open(addr: SocketAddr, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(upgrade_head(addr, target).as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status = text.lines().next().unwrap_or_default().to_string();
    (s, status)
}

fn ws_rpc_server(service_ns: u64, work: ServiceWork, idle_timeout_ns: u64) -> WsRpcServer {
    let config = WsRpcServerConfig {
        threads: 1,
        pin: vec![],
        max_frame: 1 << 20,
        max_connections: 1024,
        idle_timeout_ns,
    };
    WsRpcServer::start(
        &config,
        vec![MethodAnswer {
            method: "m".into(),
            result_json: "1".into(),
            service_ns,
            work,
            stream: None,
        }],
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap()
}

/// One call on a fresh connection gets its answer.
fn ws_rpc_serves(addr: SocketAddr) -> bool {
    let (mut s, status) = ws_open(addr, "/");
    if !status.contains("101") {
        return false;
    }
    let call = br#"{"jsonrpc":"2.0","id":9,"method":"m"}"#;
    if s.write_all(&ws_text(call)).is_err() {
        return false;
    }
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains(r#""id":9"#) {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    true
}

/// One call on a fresh connection gets its answer; any failure on the way (a refused
/// connection is reset) is `false`.
fn ws_rpc_serves_or_not(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    if s.write_all(upgrade_head(addr, "/").as_bytes()).is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    let call = br#"{"jsonrpc":"2.0","id":9,"method":"m"}"#;
    let mut called = false;
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if text.contains(r#""id":9"#) {
            return true;
        }
        if !called && text.contains("\r\n\r\n") {
            if !text.starts_with("HTTP/1.1 101") || s.write_all(&ws_text(call)).is_err() {
                return false;
            }
            called = true;
        }
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
}

#[test]
fn ws_idle_connections_do_not_lock_real_clients_out() {
    // Before: max_connections connections that never sent a head refused everyone else for the
    // whole handshake timeout (5–7 s); the hostile matrix's client failed to connect.
    let _turn = common::turn();
    let config = WsRpcServerConfig {
        threads: 1,
        pin: vec![],
        max_frame: 1 << 20,
        max_connections: 50,
        idle_timeout_ns: 60_000_000_000,
    };
    let answer = MethodAnswer {
        method: "m".into(),
        result_json: "1".into(),
        service_ns: 0,
        work: ServiceWork::Busy,
        stream: None,
    };
    let srv = WsRpcServer::start(&config, vec![answer], ([127, 0, 0, 1], 0).into()).unwrap();
    let addr = srv.local_addr();
    let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !ws_rpc_serves_or_not(addr),
        "a fresh head was replaced: a real client's slow head could be"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        ws_rpc_serves_or_not(addr),
        "idle connections locked a real client out"
    );
    let report = srv.stop();
    assert!(report.counts.evicted >= 1, "{:?}", report.counts);
    assert!(report.counts.refused >= 1, "{:?}", report.counts);
    drop(idle);
}

#[test]
fn ws_upgrade_heads_tokio_websockets_cannot_take_are_answered_not_panics() {
    // A path with a backtick made tokio-websockets panic (121 lines of backtrace each).
    let _turn = common::turn();
    let srv = ws_rpc_server(0, ServiceWork::Busy, 0);
    let addr = srv.local_addr();
    let (_s, status) = ws_open(addr, "/t`x");
    assert!(status.contains("101"), "{status}");
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let head = upgrade_head(addr, "/").replace(UPGRADE_KEY, "short");
    bad.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = bad.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("Sec-WebSocket-Key"), "{answer}");
    assert!(ws_rpc_serves(addr));
    assert!(srv.report().counts.handshake_failures >= 1);
}

#[test]
fn ws_slowloris_heads_cost_the_server_no_polling() {
    // Before: a partial head was peeked every 1 ms for 5 s: 2000 slow connections held a
    // server thread at 63–97 % CPU.
    let _turn = common::turn();
    let srv = ws_rpc_server(0, ServiceWork::Busy, 0);
    let addr = srv.local_addr();
    let slow: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let cpu_before = srv.cpu_ns();
    std::thread::sleep(Duration::from_secs(1));
    let cpu = srv.cpu_ns() - cpu_before;
    println!("slowloris: {} ms of server CPU in 1 s", cpu / 1_000_000);
    assert!(cpu < 50_000_000, "{} ms of CPU in 1 s", cpu / 1_000_000);
    assert!(ws_rpc_serves(addr));
    drop(slow);
}

#[test]
fn ws_rpc_slow_call_flood_is_bounded_and_idle_connections_close() {
    // Before: calls to a method that sleeps 1 h, sent without reading, grew 1.4 GB.
    let _turn = common::turn();
    let srv = ws_rpc_server(3_600_000_000_000, ServiceWork::Sleep, 0);
    let addr = srv.local_addr();
    let before = rss();
    let call: Vec<u8> = (0..200)
        .flat_map(|i| ws_text(format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"m"}}"#).as_bytes()))
        .collect();
    let floods: Vec<_> = (0..4)
        .map(|_| {
            let call = call.clone();
            std::thread::spawn(move || {
                let (s, _) = ws_open(addr, "/");
                flood_on(s, &call, Duration::from_secs(3))
            })
        })
        .collect();
    let streams: Vec<TcpStream> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    let grown = peak_growth(before);
    println!("ws-rpc slow-call flood: peak +{} MiB", grown >> 20);
    // 4 connections × 65 536 held calls.
    assert!(grown < 96 << 20, "grew {} MiB", grown >> 20);
    drop(streams);
    drop(srv);

    let srv = ws_rpc_server(0, ServiceWork::Busy, 300_000_000);
    let (mut idle, _) = ws_open(srv.local_addr(), "/");
    let mut buf = [0u8; 64];
    let opened = Instant::now();
    while matches!(idle.read(&mut buf), Ok(n) if n > 0) {}
    assert!(opened.elapsed() < Duration::from_secs(2));
    assert_eq!(srv.report().counts.idle_closed, 1);
}

#[test]
fn ticks_ping_flood_without_reading_is_bounded() {
    // Before: JSON pings from a client that never reads grew the pong queue by 2 GB in 8 s.
    let _turn = common::turn();
    let limits = msgbench_model::check::MachineLimits::default();
    let config = TickServerSpec::default()
        .validate(&limits, &|f, p, _| msgbench_model::ScenarioError::Invalid {
            source_name: "test".into(),
            field: f.into(),
            problem: p,
            fix: String::new(),
        })
        .unwrap();
    let srv = TickServer::start(
        TickServerOptions {
            config,
            format: TickFormat::Binary,
            symbols: 10,
            pacing: msgbench_model::pacing::Pacing::Immediate,
            spin_ns: 0,
            seed: 1,
            per_second: false,
        },
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    let addr = srv.local_addr();
    let before = rss();
    let pings: Vec<u8> = (0..500)
        .flat_map(|_| ws_text(br#"{"type":"ping","t":1}"#))
        .collect();
    let floods: Vec<_> = (0..2)
        .map(|_| {
            let pings = pings.clone();
            std::thread::spawn(move || {
                let (s, status) = ws_open(addr, "/ticks?wait=1");
                assert!(status.contains("101"), "{status}");
                flood_on(s, &pings, Duration::from_secs(3))
            })
        })
        .collect();
    let streams: Vec<TcpStream> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    let grown = peak_growth(before);
    println!("ticks ping flood: peak +{} MiB", grown >> 20);
    assert!(grown < 64 << 20, "grew {} MiB", grown >> 20);
    drop(streams);
    srv.stop();
}

#[test]
fn ticks_idle_connections_are_closed_and_subscribed_ones_are_not() {
    // Before: a connection that asked to wait (`?wait=1`) and never subscribed held its slot
    // for ever; 1024 of them locked every other client out.
    let _turn = common::turn();
    let limits = msgbench_model::check::MachineLimits::default();
    let spec = TickServerSpec {
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let config = spec
        .validate(&limits, &|f, p, _| msgbench_model::ScenarioError::Invalid {
            source_name: "test".into(),
            field: f.into(),
            problem: p,
            fix: String::new(),
        })
        .unwrap();
    let srv = TickServer::start(
        TickServerOptions {
            config,
            format: TickFormat::Binary,
            symbols: 10,
            pacing: msgbench_model::pacing::Pacing::Rate {
                per_sec: 1000.0,
                arrivals: msgbench_model::pacing::Arrivals::Uniform,
            },
            spin_ns: 0,
            seed: 1,
            per_second: false,
        },
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    let now = msgbench_engine::clock::now_ns();
    srv.begin(msgbench_engine::net::tick::Schedule {
        t0_ns: now,
        measure_start_ns: now,
        end_ns: u64::MAX,
    });
    let addr = srv.local_addr();
    let (mut idle, status) = ws_open(addr, "/ticks?wait=1");
    assert!(status.contains("101"), "{status}");
    let (mut live, status) = ws_open(addr, "/ticks");
    assert!(status.contains("101"), "{status}");
    std::thread::sleep(Duration::from_millis(900));
    // The idle one was closed: what it reads ends (the window message, then the end of stream).
    idle.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut sink = [0u8; 4096];
    let started = std::time::Instant::now();
    loop {
        match idle.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => assert!(started.elapsed() < Duration::from_secs(3), "never closed"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "closed only by the read timeout"
    );
    // The subscribed one, silent as long, still gets ticks.
    live.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut got = 0;
    while got < 16 * 1024 {
        match live.read(&mut sink) {
            Ok(n) if n > 0 => got += n,
            _ => break,
        }
    }
    assert!(
        got >= 16 * 1024,
        "the subscribed client got only {got} bytes"
    );
    let report = srv.stop();
    assert_eq!(report.counts.idle_closed, 1, "{:?}", report.counts);
}

#[test]
fn a_run_whose_server_computes_for_an_hour_still_ends_and_is_written() {
    // Before: `service = "1h"` (busy) with a 2 s client timeout ran for hours — the in-process
    // server's stop waited on the computation — and Ctrl-C then wrote nothing.
    let toml = r#"system = "rpc"
[run]
duration = "300ms"
warmup = "0"
drain_timeout = "200ms"
[pacing]
mode = "rate"
per_sec = 100
[client]
timeout = "500ms"
[rpc.server]
max_service = "1h"
[rpc.ops.slow]
service = "1h"
"#;
    let started = Instant::now();
    let (outcome, dir) = common::try_run(toml, &[]);
    let results = outcome.unwrap().results;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run took {:?}",
        started.elapsed()
    );
    let r = &results[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.delivered, 0);
    assert!(r.counters.failed + r.counters.in_flight_end > 0);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_some());
}
