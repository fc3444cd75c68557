//! Real runs of the `http` system over HTTP/2 (`http.version = "2"`) against nginx (installed
//! by `scripts/setup.sh`, started here on free loopback ports with a generated configuration):
//! cleartext with prior knowledge, TLS with ALPN, a server that allows fewer streams than the
//! window, connections the server retires with GOAWAY, and servers that do not speak HTTP/2.
mod common;

use common::{assert_accounted, run, try_run, Nginx};

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
    assert!(r.info.is_empty(), "{:?}", r.info);
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
