//! Live metrics end to end: a real Prometheus (Debian's package, installed by
//! scripts/setup.sh) scrapes `msgbench run --metrics-listen` every second; its HTTP API then
//! holds the run's final delivered count and a p99 series. The Grafana dashboard in docs/ names
//! only series the endpoint serves. Also: a port in use is refused before anything runs, and
//! `--progress json` writes one line per interval.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../engine/tests/common/ports.rs"]
mod ports;
use ports::free_port;

/// Ends the process it holds (by its PID) when dropped.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from 127.0.0.1:`port`: (status line, body).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

fn prometheus(dir: &Path, target_port: u16) -> (Killed, u16) {
    let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("Prometheus is not installed: run `bash scripts/setup.sh` (Debian's prometheus)");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: msgbench\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        ),
    )
    .unwrap();
    let (child, port) = ports::start_listening("prometheus", Duration::from_secs(30), |port| {
        Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    let child = Killed(child);
    let start = Instant::now();
    while get(port, "/-/ready").is_none_or(|(status, _)| !status.contains("200")) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Prometheus did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, port)
}

/// The value of the first sample of an instant query, and how many series it returned.
fn query(port: u16, promql: &str) -> (Option<f64>, usize) {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (_, body) = get(port, &format!("/api/v1/query?query={encoded}")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let result = doc["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let value = result
        .first()
        .and_then(|r| r["value"][1].as_str())
        .and_then(|v| v.parse().ok());
    (value, result.len())
}

/// `msgbench_x_total{...} 5` → `msgbench_x_total`, for every sample line.
fn series_names(page: &str) -> Vec<String> {
    page.lines()
        .filter(|l| l.starts_with("msgbench_"))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect()
}

#[test]
fn prometheus_scrapes_a_run_and_finds_its_final_counts_and_the_dashboard_names_real_series() {
    let tmp = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let (_prometheus, prom_port) = prometheus(tmp.path(), metrics_port);
    let out = tmp.path().join("results");
    let mut run = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args(["run", "--json", "--duration", "10s", "--warmup", "200ms"])
        .args([
            "--set",
            "sweep={}",
            "--set",
            "pacing.mode=rate",
            "--set",
            "pacing.per_sec=2000",
        ])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .args(["--metrics-hold", "4s", "--out", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While it runs: the page msgbench serves, read as a scraper would.
    std::thread::sleep(Duration::from_secs(3));
    let (status, page) =
        get(metrics_port, "/metrics").expect("the endpoint answers during the run");
    assert!(status.contains("200"), "{status}");
    let served = series_names(&page);
    for name in [
        "msgbench_delivered_total",
        "msgbench_interval_latency_seconds",
        "msgbench_in_flight",
        "msgbench_interval_send_lag_p99_seconds",
        "msgbench_class_delivered_total",
        "msgbench_class_interval_latency_p99_seconds",
    ] {
        assert!(served.iter().any(|s| s == name), "{name} not in {page}");
    }
    let (status, _) = get(metrics_port, "/elsewhere").unwrap();
    assert!(status.contains("404"), "{status}");
    let mut stdout = String::new();
    run.stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(run.wait().unwrap().success());
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let delivered = doc["runs"][0]["counters"]["delivered"].as_f64().unwrap();
    assert!(delivered > 15_000.0, "{delivered}");

    // Range functions: once msgbench exits, a failed scrape marks its series stale, and an
    // instant selector no longer sees them.
    let (scraped, series) = query(prom_port, "max_over_time(msgbench_delivered_total[1m])");
    assert_eq!(series, 1, "one run, one series");
    assert_eq!(
        scraped,
        Some(delivered),
        "Prometheus holds the run's final delivered count"
    );
    let (by_class, series) = query(
        prom_port,
        "max_over_time(msgbench_class_delivered_total{class=\"item\"}[1m])",
    );
    assert_eq!(
        (by_class, series),
        (Some(delivered), 1),
        "the queue's one class"
    );
    let (finished, _) = query(prom_port, "max_over_time(msgbench_run_finished[1m])");
    assert_eq!(finished, Some(1.0));
    let (p99, series) = query(
        prom_port,
        "max_over_time(msgbench_interval_latency_seconds{quantile=\"0.99\"}[1m])",
    );
    assert_eq!(series, 1);
    assert!(p99.is_some_and(|v| v > 0.0 && v < 1.0), "{p99:?}");

    // The dashboard is valid JSON and every series its queries name is one msgbench serves.
    let dashboard = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/grafana-dashboard.json"),
    )
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut named = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("msgbench_") {
                    named += 1;
                    assert!(
                        served.iter().any(|s| s == word),
                        "the dashboard queries {word}, which msgbench does not serve"
                    );
                }
            }
        }
    }
    assert!(
        named >= 7,
        "the dashboard plots rate, p99, drops, in-flight and send lag"
    );
}

#[test]
fn a_metrics_port_in_use_is_refused_before_anything_runs_and_progress_is_json_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = tmp.path().join("results");
    let o = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args([
            "run",
            "--duration",
            "1s",
            "--metrics-listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot listen there") && err.contains("pick a free port"),
        "{err}"
    );
    assert!(!out.exists(), "nothing ran");

    let o = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args([
            "run",
            "--quiet",
            "--progress",
            "json",
            "--duration",
            "2s",
            "--warmup",
            "100ms",
        ])
        .args([
            "--set",
            "sweep={}",
            "--set",
            "pacing.mode=rate",
            "--set",
            "pacing.per_sec=1000",
        ])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let live: Vec<_> = lines.iter().filter(|l| l["finished"].is_null()).collect();
    assert!(
        (2..=3).contains(&live.len()),
        "one line per second: {lines:?}"
    );
    assert!(live
        .iter()
        .all(|l| l["run_id"] == "000" && l["eta_s"].is_number()));
    let last = lines.last().unwrap();
    assert_eq!(last["finished"], true, "{last}");
    assert_eq!(last["delivered"], 2000, "{last}");
}

#[test]
fn serve_exposes_its_server_counters_the_same_way() {
    let (port, metrics_port) = (free_port(), free_port());
    let server = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args(["serve", "http", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
            "--for",
            "20s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Killed(server);
    ports::wait_until_listening(&mut server.0, metrics_port, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("serve http: {e}"));
    let start = Instant::now();
    while get(metrics_port, "/metrics").is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve http did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // 20 requests on one keep-alive connection.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    for answered in 0..20 {
        write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        while text.windows(8).filter(|w| w == b"HTTP/1.1").count() <= answered {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            text.extend_from_slice(&buf[..n]);
        }
    }
    std::thread::sleep(Duration::from_millis(150)); // past the page's reuse
    let (_, page) = get(metrics_port, "/metrics").unwrap();
    assert!(
        page.contains("msgbench_server_responses_total{server=\"http\",shard=\"\"} 20")
            && page.contains("msgbench_server_accepted_total{server=\"http\",shard=\"\"} 1"),
        "{page}"
    );
}
