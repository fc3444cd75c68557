//! Real runs of the `http` system over HTTP/2 (`http.version = "2"`) against nginx (installed
//! by `scripts/setup.sh`, started here on free loopback ports with a generated configuration):
//! cleartext with prior knowledge, TLS with ALPN, a server that allows fewer streams than the
//! window, connections the server retires with GOAWAY, and servers that do not speak HTTP/2;
//! and against nghttpd, nghttp2's own server, on both clients.
//! Cleartext runs use msgbench's own client (the default); the `on_the_h2_crate_…` tests run
//! the same checks on the `h2` crate's (`http.client = "h2"`), which https runs use.
mod common;

use common::{assert_accounted, on_h2_crate, run, try_run, Nginx};
use std::net::SocketAddr;

/// 4000 requests/s for 0.5 s on 4 connections of 16 streams each.
const H2: &str = "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 4000\n[client]\nconnections = 4\nwindow = 16\n[http]\nversion = \"2\"\n[http.requests.small]\npath = \"/small.txt\"\nweight = 8\nexpect = \"nginx\"\n[http.requests.large]\npath = \"/large.bin\"\n[http.requests.missing]\npath = \"/missing\"\n[http.requests.post]\nmethod = \"POST\"\npath = \"/small.txt\"\nbody = \"x\"\n";

fn plain(nginx: &Nginx) -> String {
    format!("http.url=\"http://{}\"", nginx.addr)
}

#[test]
fn nginx_over_http2_answers_every_stream_with_its_statuses_counted() {
    let nginx = Nginx::http2("");
    let r = &run(H2, &[&plain(&nginx)])[0];
    assert_accounted(r);
    let class = |name: &str| r.classes.iter().find(|c| c.name == name).unwrap();
    for name in ["small", "large"] {
        assert!(class(name).latency.count > 0, "{name}: {:?}", r.faults);
    }
    // A 256 KiB body is four times HTTP/2's default stream window: read whole, windows given
    // back as it comes.
    assert_eq!(class("missing").latency.count, 0);
    assert_eq!(class("post").latency.count, 0);
    let messages: Vec<&str> = r.faults.errors.iter().map(|e| e.message.as_str()).collect();
    assert!(messages.contains(&"HTTP 404 Not Found"), "{messages:?}");
    assert!(
        messages.contains(&"HTTP 405 Not Allowed")
            || messages.contains(&"HTTP 405 Method Not Allowed"),
        "{messages:?}"
    );
    assert_eq!(
        r.faults.disconnects + r.faults.protocol_errors,
        0,
        "{:?}",
        r.faults
    );
    assert!(r.counters.delivered > 1000, "{:?}", r.counters);
    // Nothing to say about the (paced) run but which client measured.
    let about_the_client = |i: &String| i.starts_with("HTTP/2 through");
    assert!(r.info.iter().all(about_the_client), "{:?}", r.info);
}

#[test]
fn http2_over_tls_is_negotiated_by_alpn_and_verified() {
    let nginx = Nginx::http2("");
    let (addr, ca) = nginx.tls.clone().unwrap();
    let url = format!("http.url=\"https://{addr}\"");
    let r = &run(H2, &[&url, &format!("http.ca_file=\"{}\"", ca.display())])[0];
    assert_accounted(r);
    let small = r.classes.iter().find(|c| c.name == "small").unwrap();
    assert!(small.latency.count > 500, "{:?}", r.faults);
    let c = &r.faults.connections;
    assert_eq!(c.tls_handshakes, 4, "one per connection: {c:?}");
    assert!(c.tls_handshake_ns_max > 0 && c.tls_handshake_ns_total >= c.tls_handshake_ns_max);
    // A certificate that does not verify: one message with the fix, nothing sent.
    let (outcome, _dir) = try_run(H2, &[&url]);
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("HTTP/2") && e.contains("http.ca_file"), "{e}");
}

#[test]
fn a_closed_loop_of_64_streams_is_accounted_whole_while_nginx_retires_its_connections() {
    // Unpaced on msgbench's own client: while answers come the client sleeps between looks at
    // its sockets (answers awaited on retired connections count too); nginx retires each
    // connection after 2000 requests (GOAWAY, NO_ERROR). Everything stays accounted, nothing
    // but GOAWAY's unprocessed streams fails.
    let nginx = Nginx::http2("  keepalive_requests 2000;\n");
    let r = &run(
        H2,
        &[
            &plain(&nginx),
            "pacing.mode=\"closed-loop\"",
            "http.requests={ small = { path = \"/small.txt\", expect = \"nginx\" } }",
            "client.connections=4",
            "client.window=64",
        ],
    )[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 8000, "{:?}", r.counters);
    assert!(r.faults.connections.closed_by_server >= 4, "{:?}", r.faults);
    assert_eq!(
        r.faults.disconnects + r.faults.timeouts,
        0,
        "{:?}",
        r.faults
    );
    let unexpected: Vec<_> = (r.faults.errors.iter())
        .filter(|e| !e.message.contains("GOAWAY"))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    let says = |what: &str| r.info.iter().any(|i| i.starts_with(what));
    assert!(says("HTTP/2 through msgbench's own client"), "{:?}", r.info);
    assert!(says(
        "unpaced HTTP/2: while answers come steadily the client sleeps"
    ));
}

#[test]
fn a_server_that_does_not_speak_http2_is_refused_before_any_load() {
    // nginx without `http2`: its plain port answers HTTP/1.1, its TLS port offers no h2.
    let nginx = Nginx::start_with("", true);
    let (outcome, dir) = try_run(H2, &[&plain(&nginx)]);
    let e = outcome.unwrap_err().to_string();
    assert!(
        e.contains("does not speak HTTP/2") && e.contains("version = \"1.1\""),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
    let (tls, _) = nginx.tls.clone().unwrap();
    let (outcome, _dir) = try_run(
        H2,
        &[&format!("http.url=\"https://{tls}\""), "http.insecure=true"],
    );
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("ALPN"), "{e}");
}

#[test]
fn a_server_allowing_fewer_streams_than_the_window_is_honoured_and_reported() {
    // 8 streams per connection, a window of 64: as fast as the server answers.
    let nginx = Nginx::http2("  http2_max_concurrent_streams 8;\n");
    let r = &run(
        H2,
        &[
            &plain(&nginx),
            "pacing.mode=\"closed-loop\"",
            "client.connections=2",
            "client.window=64",
        ],
    )[0];
    assert_accounted(r);
    assert_eq!(
        r.faults.disconnects + r.faults.timeouts,
        0,
        "{:?}",
        r.faults
    );
    assert!(r.counters.delivered > 1000, "{:?}", r.counters);
    assert!(
        r.info
            .iter()
            .any(|i| i.contains("allows 8 concurrent streams")),
        "{:?}",
        r.info
    );
    // How the server is, not a flaw of the run: info, not a warning (the only warning is the
    // share of 404s and 405s the mix asks for).
    let about_streams = |w: &msgbench_model::warning::Warning| format!("{w:?}").contains("streams");
    assert!(!r.warnings.iter().any(about_streams), "{:?}", r.warnings);
}

#[test]
fn connections_the_server_retires_with_goaway_are_replaced_and_counted() {
    // nginx retires an HTTP/2 connection (GOAWAY, NO_ERROR) after 50 requests.
    let nginx = Nginx::http2("  keepalive_requests 50;\n");
    let r = &run(H2, &[&plain(&nginx), "client.window=4"])[0];
    assert_accounted(r);
    let retired = r.faults.connections.closed_by_server;
    assert!(
        retired >= r.counters.delivered / 60,
        "{retired} of {:?}",
        r.counters
    );
    assert_eq!(r.faults.disconnects, 0, "{:?}", r.faults);
    // Streams above GOAWAY's last stream id were refused unprocessed; any other failure is a bug.
    let unexpected: Vec<_> = (r.faults.errors.iter())
        .filter(|e| {
            !e.message.starts_with("HTTP 40")
                && !e.message.contains("GOAWAY")
                && !e.message.contains("REFUSED")
        })
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
}

// ---- hostile HTTP/2 servers (test doubles on the h2 crate) ----

/// How the test double treats the `n`th stream (from 0) of a connection.
#[derive(Clone, Copy)]
enum Treat {
    /// Answer 200 with a small body.
    Answer,
    /// Read the request's body as it comes (the server's default 64 KiB window, given back as
    /// it is read), then answer 200.
    ReadBody,
    /// Reset the stream with this reason.
    Reset(h2::Reason),
    /// End the connection with GOAWAY and this reason (the stream is not answered).
    GoAway(h2::Reason),
    /// Close the socket without a word, as a killed server's kernel does (streams in flight
    /// are not answered).
    Vanish,
    /// Vanish, and stop listening: the server is gone.
    Die,
}

/// An HTTP/2 server (cleartext, prior knowledge) on its own thread that treats each stream
/// as `treat(n)` says.
fn h2_double(treat: fn(u64) -> Treat) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let died = std::rc::Rc::new(tokio::sync::Notify::new());
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = died.notified() => return, // the listener closes with this thread
                };
                let Ok((tcp, _)) = accepted else { return };
                let died = died.clone();
                tokio::task::spawn_local(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    let mut n = 0u64;
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        match treat(n) {
                            Treat::ReadBody => {
                                tokio::spawn(async move {
                                    let mut body = request.into_body();
                                    while let Some(Ok(chunk)) = body.data().await {
                                        let _ = body.flow_control().release_capacity(chunk.len());
                                    }
                                    let head =
                                        http::Response::builder().status(200).body(()).unwrap();
                                    if let Ok(mut body) = respond.send_response(head, false) {
                                        let _ =
                                            body.send_data(bytes::Bytes::from_static(b"ok"), true);
                                    }
                                });
                            }
                            Treat::Answer => {
                                let head = http::Response::builder().status(200).body(()).unwrap();
                                if let Ok(mut body) = respond.send_response(head, false) {
                                    let _ = body.send_data(bytes::Bytes::from_static(b"ok"), true);
                                }
                            }
                            Treat::Reset(reason) => respond.send_reset(reason),
                            Treat::GoAway(reason) => {
                                conn.abrupt_shutdown(reason);
                                let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                                return;
                            }
                            Treat::Vanish => return,
                            Treat::Die => {
                                died.notify_one();
                                return;
                            }
                        }
                        n += 1;
                    }
                });
            }
        });
    });
    addr
}

/// 2000 requests/s for 0.5 s on 2 connections of 8 streams; the double's answers need no
/// `expect`.
const DOUBLE: &str = "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 2\nwindow = 8\n[http]\nversion = \"2\"\n";

#[test]
fn streams_the_server_resets_fail_with_their_reason_and_the_run_goes_on() {
    let addr = h2_double(|n| {
        if n % 2 == 1 {
            Treat::Reset(h2::Reason::REFUSED_STREAM)
        } else {
            Treat::Answer
        }
    });
    let r = &run(DOUBLE, &[&format!("http.url=\"http://{addr}\"")])[0];
    assert_accounted(r);
    assert_eq!(r.faults.disconnects, 0, "{:?}", r.faults);
    let resets = (r.faults.errors.iter())
        .find(|e| e.message == "HTTP/2 RST_STREAM (REFUSED_STREAM)")
        .map_or(0, |e| e.count);
    assert!(resets > 400, "{:?}", r.faults);
    assert!(
        r.counters.delivered > 300 && r.counters.failed > 300,
        "{:?}",
        r.counters
    );
}

#[test]
fn a_goaway_with_an_error_takes_the_connection_down_and_a_new_one_goes_on() {
    // Every connection is ended with GOAWAY (INTERNAL_ERROR) at its 100th stream.
    let addr = h2_double(|n| {
        if n == 99 {
            Treat::GoAway(h2::Reason::INTERNAL_ERROR)
        } else {
            Treat::Answer
        }
    });
    let url = format!("http.url=\"http://{addr}\"");
    // By default (`on_error = "stop"`) the first one ends the run, which says why.
    let r = &run(DOUBLE, &[&url])[0];
    assert_accounted(r);
    assert!(
        (r.warnings.iter()).any(|w| matches!(w, msgbench_model::warning::Warning::StoppedEarly(_))),
        "{:?}",
        r.warnings
    );
    let r = &run(DOUBLE, &[&url, "client.on_error=\"reconnect\""])[0];
    assert_accounted(r);
    let goaways = (r.faults.errors.iter())
        .filter(|e| e.message.contains("GOAWAY (INTERNAL_ERROR)"))
        .map(|e| e.count)
        .sum::<u64>();
    assert!(goaways >= 4, "{:?}", r.faults);
    assert!(r.faults.disconnects >= 4, "{:?}", r.faults);
    // Reopened each time (100 ms later: what falls due meanwhile is skipped, as documented
    // for `on_error = "reconnect"`), and served again.
    assert!(r.counters.skipped > 0, "{:?}", r.counters);
    assert!(
        r.counters.delivered > 250,
        "{:?} {:?}",
        r.counters,
        r.faults
    );
}

#[test]
fn a_server_that_closes_without_goaway_has_lost_the_connection() {
    // Every connection is closed without a word at its 100th stream, as a killed server's is.
    let addr = h2_double(|n| {
        if n == 99 {
            Treat::Vanish
        } else {
            Treat::Answer
        }
    });
    let url = format!("http.url=\"http://{addr}\"");
    // Not a graceful retirement: by default the run stops, and says why.
    let r = &run(DOUBLE, &[&url])[0];
    assert_accounted(r);
    assert!(
        (r.warnings.iter()).any(|w| matches!(w, msgbench_model::warning::Warning::StoppedEarly(_))),
        "{:?}",
        r.warnings
    );
    assert!(r.faults.disconnects >= 1, "{:?}", r.faults);
    assert_eq!(r.faults.connections.closed_by_server, 0, "{:?}", r.faults);
    let r = &run(DOUBLE, &[&url, "client.on_error=\"reconnect\""])[0];
    assert_accounted(r);
    let lost = (r.faults.errors.iter())
        .filter(|e| e.message == "HTTP/2 connection lost")
        .map(|e| e.count)
        .sum::<u64>();
    assert!(lost >= 4, "{:?}", r.faults);
    assert!(r.faults.disconnects >= 4, "{:?}", r.faults);
    assert!(r.counters.delivered > 250, "{:?}", r.counters);
}

#[test]
fn a_server_that_dies_leaves_nothing_in_flight_while_reconnection_is_tried() {
    // The server answers 600 streams (300 ms at 2000/s), then closes its connection and port.
    let addr = h2_double(|n| if n == 600 { Treat::Die } else { Treat::Answer });
    let url = format!("http.url=\"http://{addr}\"");
    let r = &run(
        DOUBLE,
        &[
            &url,
            "client.on_error=\"reconnect\"",
            "client.connections=1",
        ],
    )[0];
    assert_accounted(r);
    assert!(r.faults.disconnects >= 1, "{:?}", r.faults);
    assert!(r.counters.delivered >= 200, "{:?}", r.counters);
    // What fell due while it was gone was skipped (no connection to send on), and what was on
    // the lost connection failed with it: nothing is left waiting for a server that is gone.
    assert!(r.counters.skipped > 200, "{:?}", r.counters);
    assert_eq!(r.counters.in_flight_end, 0, "{:?}", r.counters);
    // Its one connection was down from then to the end (~300 ms of the 600).
    let down_ms = r.faults.connections.down_ns_total / 1_000_000;
    assert!(
        (100..2000).contains(&down_ms),
        "{down_ms} ms: {:?}",
        r.faults
    );
}

#[test]
fn request_bodies_larger_than_the_server_s_window_are_sent_as_it_opens_and_their_wait_counted() {
    let addr = h2_double(|_| Treat::ReadBody);
    // 256 KiB: four times the server's 64 KiB stream window.
    let body = format!("http.requests.post.body=\"{}\"", "x".repeat(256 << 10));
    let small = "http.requests.post.method=\"POST\"";
    let r = &run(
        DOUBLE,
        &[
            &format!("http.url=\"http://{addr}\""),
            small,
            &body,
            "pacing.per_sec=200",
        ],
    )[0];
    assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 80, "{:?}", r.counters);
    let c = &r.faults.connections;
    // Every body waited for the window, warm-up included.
    assert!(c.flow_control_waits >= r.counters.delivered, "{c:?}");
    assert!(c.flow_control_wait_ns_max >= c.flow_control_wait_ns_total / c.flow_control_waits);
    // A body that fits the window goes at once: nothing counted.
    let r = &run(
        DOUBLE,
        &[
            &format!("http.url=\"http://{addr}\""),
            small,
            "http.requests.post.body=\"x\"",
        ],
    )[0];
    assert_eq!(r.faults.connections.flow_control_waits, 0);
}

#[test]
fn each_caller_runs_its_connections_on_its_own_thread() {
    // Over HTTP/2 a caller and its sockets share one thread (no hand-off between threads):
    // two client threads are two threads, each accounted for.
    let nginx = Nginx::http2("");
    let r = &run(H2, &[&plain(&nginx), "client.threads=2"])[0];
    assert_accounted(r);
    assert!(r.counters.delivered > 1000, "{:?}", r.counters);
    let roles: Vec<&str> = r.cpu.threads.iter().map(|t| t.role.as_str()).collect();
    assert_eq!(roles, ["caller-0", "caller-1"]);
    assert!(r
        .cpu
        .threads
        .iter()
        .all(|t| t.cpu.user_s + t.cpu.sys_s > 0.0));
}

// ---- the same checks on the h2 crate's client (http.client = "h2") ----

#[test]
fn on_the_h2_crate_nginx_answers_every_stream_with_its_statuses_counted() {
    on_h2_crate(nginx_over_http2_answers_every_stream_with_its_statuses_counted);
    // The result says which client measured.
    let nginx = Nginx::http2("");
    let says = |r: &msgbench_model::RunResult, client: &str| {
        r.info
            .iter()
            .any(|i| i.starts_with(&format!("HTTP/2 through {client}")))
    };
    on_h2_crate(|| {
        assert!(says(
            &run(H2, &[&plain(&nginx)])[0],
            "the h2 crate's client"
        ))
    });
    assert!(says(
        &run(H2, &[&plain(&nginx)])[0],
        "msgbench's own client"
    ));
}

#[test]
fn on_the_h2_crate_a_server_allowing_fewer_streams_than_the_window_is_honoured() {
    on_h2_crate(a_server_allowing_fewer_streams_than_the_window_is_honoured_and_reported);
}

#[test]
fn on_the_h2_crate_connections_retired_with_goaway_are_replaced() {
    on_h2_crate(connections_the_server_retires_with_goaway_are_replaced_and_counted);
}

#[test]
fn on_the_h2_crate_servers_that_do_not_speak_http2_are_refused() {
    on_h2_crate(a_server_that_does_not_speak_http2_is_refused_before_any_load);
}

#[test]
fn on_the_h2_crate_hostile_servers_are_counted_as_they_were() {
    on_h2_crate(streams_the_server_resets_fail_with_their_reason_and_the_run_goes_on);
    on_h2_crate(a_goaway_with_an_error_takes_the_connection_down_and_a_new_one_goes_on);
    on_h2_crate(a_server_that_closes_without_goaway_has_lost_the_connection);
    on_h2_crate(a_server_that_dies_leaves_nothing_in_flight_while_reconnection_is_tried);
    on_h2_crate(
        request_bodies_larger_than_the_server_s_window_are_sent_as_it_opens_and_their_wait_counted,
    );
    on_h2_crate(each_caller_runs_its_connections_on_its_own_thread);
}

/// An HTTP/2 server msgbench did not write: nghttpd, nghttp2's own (installed by
/// `scripts/setup.sh`), cleartext with prior knowledge, serving a folder — measured on both
/// clients, every stream answered and accounted, a missing file a 404 and nothing else.
#[test]
fn nghttpd_answers_every_stream_on_both_clients() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.txt"), "hello from nghttpd\n").unwrap();
    let wait = std::time::Duration::from_secs(5);
    let (mut server, port) = common::ports::start_listening("nghttpd", wait, |port| {
        // Debian puts it in /usr/sbin, which a user's PATH may not have.
        let sbin = std::path::Path::new("/usr/sbin/nghttpd");
        Command::new(if sbin.exists() {
            sbin
        } else {
            std::path::Path::new("nghttpd")
        })
        .args(["--no-tls", "-a", "127.0.0.1", "-d"])
        .arg(dir.path())
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nghttpd (bash scripts/setup.sh installs nghttp2-server)")
    });
    let scenario = "system = \"http\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[client]\nconnections = 2\nwindow = 8\n[http]\nversion = \"2\"\n[http.requests.small]\npath = \"/small.txt\"\nweight = 9\nexpect = \"nghttpd\"\n[http.requests.missing]\npath = \"/missing\"\n";
    let url = format!("http.url=\"http://127.0.0.1:{port}\"");
    for (client, named) in [
        ("msgbench", "msgbench's own client"),
        ("h2", "the h2 crate's client"),
    ] {
        let choice = format!("http.client=\"{client}\"");
        let r = &run(scenario, &[&url, &choice])[0];
        assert_accounted(r);
        let small = r.classes.iter().find(|c| c.name == "small").unwrap();
        assert!(small.latency.count > 300, "{client}: {:?}", r.faults);
        let messages: Vec<&str> = r.faults.errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["HTTP 404 Not Found"], "{client}");
        let f = &r.faults;
        assert_eq!(f.disconnects + f.protocol_errors, 0, "{client}: {f:?}");
        let said = msgbench_model::http::http2_client(&r.info);
        assert_eq!(said, Some(named), "{client}: {:?}", r.info);
    }
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn a_server_that_breaks_http2_s_rules_in_its_opening_is_told_so_not_that_it_does_not_speak_it() {
    // It reads the preface and answers a SETTINGS frame with MAX_FRAME_SIZE = 1 (below HTTP/2's
    // 16 384): HTTP/2, against its rules. Before (issue 43, finding 11) the `h2` crate's client
    // said "does not speak HTTP/2".
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in listener.incoming().flatten() {
            let mut preface = [0u8; 24];
            if s.read_exact(&mut preface).is_err() {
                continue;
            }
            let settings = [0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1];
            let _ = s.write_all(&settings);
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    });
    on_h2_crate(|| {
        let (outcome, _dir) = try_run(H2, &[&format!("http.url=\"http://{addr}\"")]);
        let e = outcome.unwrap_err().to_string();
        assert!(e.contains("broke HTTP/2's rules"), "{e}");
        assert!(!e.contains("does not speak HTTP/2"), "{e}");
    });
}

// ---- hostile peers: the run's deadline and Ctrl-C hold whatever the server sends ----

/// What a [`h2_hostile`] server sends after it has read the client's preface.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// A SETTINGS frame announcing 100 entries, a byte every 100 ms: an opening that never
    /// ends but never goes quiet.
    TrickledOpening,
    /// Its SETTINGS and the ACK, then PING frames a byte every 100 ms: bytes keep coming, no
    /// stream is ever answered.
    Trickle,
    /// Its SETTINGS and the ACK, then frames no client turns into an answer — 16 KiB frames of
    /// an unknown type (which HTTP/2 says to ignore) and PINGs — as fast as the socket takes
    /// them.
    Flood,
}

/// An HTTP/2 server (cleartext, prior knowledge) that reads all a client sends, so no bound
/// on unread output ends the connection, answers the PING of its opening (the proof a client
/// may ask for that it speaks HTTP/2), and never answers a request: it does `hostile`.
fn h2_hostile(hostile: Hostile) -> SocketAddr {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let (pings_tx, pings) = std::sync::mpsc::channel();
            let reader = s.try_clone().unwrap();
            std::thread::spawn(move || read_frames(reader, pings_tx));
            std::thread::spawn(move || {
                let mut s = s;
                let trickle = |s: &mut std::net::TcpStream, bytes: &[u8]| {
                    for b in bytes.iter().cycle().take(3000) {
                        if s.write_all(&[*b]).is_err() {
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                };
                let ping = [0u8, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
                if let Hostile::TrickledOpening = hostile {
                    let mut frame = vec![0u8, 2, 88, 4, 0, 0, 0, 0, 0]; // 600 bytes
                    frame.extend(std::iter::repeat_n([0u8, 3, 0, 0, 0, 100], 100).flatten());
                    return trickle(&mut s, &frame);
                }
                // SETTINGS, the ACK of the client's, and the answer to its opening PING.
                let _ = s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0]);
                if let Ok(payload) = pings.recv_timeout(std::time::Duration::from_millis(500)) {
                    let mut ack = vec![0u8, 0, 8, 6, 1, 0, 0, 0, 0];
                    ack.extend_from_slice(&payload);
                    let _ = s.write_all(&ack);
                }
                if let Hostile::Trickle = hostile {
                    return trickle(&mut s, &ping);
                }
                let mut unknown = vec![0u8, 64, 0, 0xfa, 0, 0, 0, 0, 0];
                unknown.resize(9 + 16384, 0);
                let started = std::time::Instant::now();
                while started.elapsed() < std::time::Duration::from_secs(60) {
                    if s.write_all(&unknown)
                        .and_then(|_| s.write_all(&ping))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Reads a client's preface and frames until the connection ends; hands over the payload of
/// each PING that asks for an answer.
fn read_frames(mut s: std::net::TcpStream, pings: std::sync::mpsc::Sender<[u8; 8]>) {
    use std::io::Read;
    let mut preface = [0u8; 24];
    if s.read_exact(&mut preface).is_err() {
        return;
    }
    let mut head = [0u8; 9];
    let mut payload = vec![0u8; 1 << 24];
    while s.read_exact(&mut head).is_ok() {
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        if s.read_exact(&mut payload[..len]).is_err() {
            return;
        }
        if head[3] == 6 && head[4] & 1 == 0 && len == 8 {
            let _ = pings.send(payload[..8].try_into().unwrap());
        }
    }
}

/// 200 requests/s for 1 s on one connection of 4 streams, a drain of 1 s.
fn hostile_scenario(addr: SocketAddr, client: &str) -> String {
    format!(
        "system = \"http\"\n[run]\nduration = \"1s\"\nwarmup = \"0s\"\ndrain_timeout = \"1s\"\n\
         [pacing]\nmode = \"rate\"\nper_sec = 200\n[client]\nconnections = 1\nwindow = 4\n\
         [http]\nversion = \"2\"\nurl = \"http://{addr}\"\nclient = \"{client}\"\n"
    )
}

#[test]
fn a_server_that_trickles_or_floods_holds_neither_client_past_the_run_s_end_nor_ctrl_c() {
    // Issue 43: each case ends within the run's duration + drain + 2 s (an opening within its
    // 5 s bound + 2 s), and Ctrl-C ends it within 1 s, on both HTTP/2 clients.
    for client in ["msgbench", "h2"] {
        for hostile in [Hostile::TrickledOpening, Hostile::Trickle, Hostile::Flood] {
            let toml = hostile_scenario(h2_hostile(hostile), client);
            let (outcome, took, _dir) = common::try_run_timed(&toml, &[]);
            let bound = match hostile {
                Hostile::TrickledOpening => 5 + 2,
                _ => 1 + 1 + 2,
            };
            assert!(
                took < std::time::Duration::from_secs(bound),
                "{client}, {hostile:?}: {took:?} (bound {bound} s)"
            );
            match (hostile, outcome) {
                (Hostile::TrickledOpening, outcome) => {
                    let e = outcome.map(|_| ()).expect_err("no opening").to_string();
                    assert!(e.contains("5 s"), "{client}: {e}");
                }
                (_, Ok(o)) => {
                    let r = &o.results[0];
                    common::assert_accounted(r);
                    assert_eq!(r.counters.delivered, 0, "{client}, {hostile:?}");
                }
                (_, Err(e)) => panic!("{client}, {hostile:?}: {e}"),
            }
            let toml = hostile_scenario(h2_hostile(hostile), client);
            let (outcome, after_stop, _dir) =
                common::try_run_stopped(&toml, std::time::Duration::from_millis(500));
            assert!(
                after_stop < std::time::Duration::from_secs(1),
                "{client}, {hostile:?}: {after_stop:?} after Ctrl-C"
            );
            if let Ok(o) = outcome {
                common::assert_accounted(&o.results[0]);
            }
        }
    }
}
