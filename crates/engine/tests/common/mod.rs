//! What the engine's integration tests share: one run at a time, an experiment from TOML and
//! `--set` overrides run into a temporary directory, and small WebSocket servers to misbehave.
#![allow(dead_code)] // each test binary uses its own part

pub mod ports;
#[allow(unused_imports)] // not every test binary starts a server
pub use ports::free_port;

use msgbench_engine::environment::Environment;
use msgbench_engine::runner::{run_experiment, Outcome, RunError, Silent};
use msgbench_model::sweep::Override;
use msgbench_model::warning::Warning;
use msgbench_model::{Experiment, RunResult};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// One run at a time: a run keeps two or more threads busy, and CI has two cores.
pub static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes this test binary's turn to measure.
pub fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the experiment `toml` with `sets` overrides; returns the outcome and its directory.
pub fn try_run(toml: &str, sets: &[&str]) -> (Result<Outcome, RunError>, tempfile::TempDir) {
    let (outcome, _, dir) = try_run_timed(toml, sets);
    (outcome, dir)
}

/// [`try_run`], and how long the run took once it had its turn (the wait for another test's
/// run not counted).
pub fn try_run_timed(
    toml: &str,
    sets: &[&str],
) -> (Result<Outcome, RunError>, Duration, tempfile::TempDir) {
    let _turn = turn();
    let started = std::time::Instant::now();
    let mut overrides: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
    if ON_H2_CRATE.with(|on| on.get()) {
        overrides.push(Override::parse("http.client=\"h2\"").unwrap());
    }
    let limits = msgbench_engine::machine_limits();
    let experiment = Experiment::load(toml, "test.toml", &overrides, &limits).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let outcome = run_experiment(
        &experiment,
        dir.path(),
        Environment::capture(vec![]),
        Arc::new(AtomicBool::new(false)),
        Arc::new(Silent),
    );
    (outcome, started.elapsed(), dir)
}

/// Runs `toml` as Ctrl-C would stop it: the stop flag is raised `after` the start. Returns the
/// outcome, how long the run went on after the stop, and its directory.
pub fn try_run_stopped(
    toml: &str,
    after: Duration,
) -> (Result<Outcome, RunError>, Duration, tempfile::TempDir) {
    let _turn = turn();
    let limits = msgbench_engine::machine_limits();
    let experiment = Experiment::load(toml, "test.toml", &[], &limits).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let raised = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            std::time::Instant::now()
        })
    };
    let outcome = run_experiment(
        &experiment,
        dir.path(),
        Environment::capture(vec![]),
        stop,
        Arc::new(Silent),
    );
    let ended = std::time::Instant::now();
    let raised = raised.join().unwrap();
    (outcome, ended.saturating_duration_since(raised), dir)
}

thread_local! {
    static ON_H2_CRATE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `test` with its cleartext HTTP/2 runs on the `h2` crate's client
/// (`http.client = "h2"`), not msgbench's own (the default): the same checks, for both
/// clients.
pub fn on_h2_crate(test: impl FnOnce()) {
    ON_H2_CRATE.with(|on| on.set(true));
    test();
    ON_H2_CRATE.with(|on| on.set(false));
}

/// Runs an experiment that must succeed; returns its results.
pub fn run(toml: &str, sets: &[&str]) -> Vec<RunResult> {
    let (outcome, _dir) = try_run(toml, sets);
    outcome.unwrap().results
}

/// A WebSocket server on its own thread (one current-thread runtime); each accepted
/// connection goes to `serve`.
pub fn ws_server<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(tokio_websockets::WebSocketStream<tokio::net::TcpStream>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                if let Ok((_, ws)) = tokio_websockets::ServerBuilder::new().accept(stream).await {
                    tokio::task::spawn_local(serve(ws));
                }
            }
        });
    });
    addr
}

/// A TCP server that answers every connection with `answer` and closes: not WebSocket.
pub fn not_websocket(answer: &'static [u8]) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(answer);
        }
    });
    addr
}

/// An address nothing listens on (a port reserved for this test binary: no other server is
/// handed it).
pub fn dead_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// What every request/response run must show: both accounting equations, every delivery's
/// latency and every send's lag recorded, and the classes adding up to the whole.
pub fn assert_accounted(r: &RunResult) {
    r.counters
        .check()
        .unwrap_or_else(|e| panic!("{}: {e}", r.run_id));
    // Every skip has its cause (check() accepts none at all, for older files).
    assert_eq!(
        r.counters.skipped_by.total(),
        r.counters.skipped,
        "{}: {:?}",
        r.run_id,
        r.counters
    );
    assert_eq!(r.latency.count, r.counters.delivered, "{}", r.run_id);
    assert_eq!(r.send_lag.count, r.counters.sent, "{}", r.run_id);
    let per_class: u64 = r.classes.iter().map(|c| c.latency.count).sum();
    assert_eq!(per_class, r.counters.delivered, "{}", r.run_id);
}

/// A run stopped early at `per_sec` with `sent` requests out and none answered (a hung
/// server held the window): every other slot of its measured span (which ends where sending
/// stopped) was given up as the run ended — at least `least` — to within `slack` slots
/// (one per connection's schedule), each wait kept as a lower bound.
pub fn assert_stopped_with_its_backlog_given_up(
    r: &RunResult,
    per_sec: f64,
    sent: u64,
    least: u64,
    slack: f64,
) {
    assert!(r.interrupted);
    assert_eq!(r.counters.delivered, 0, "{:?}", r.counters);
    assert_eq!(r.counters.sent, sent, "{:?}", r.counters);
    let given_up = r.counters.skipped_by.run_ended;
    let due = per_sec * r.duration_s;
    assert!(given_up >= least, "{:?}", r.counters);
    assert!(
        ((given_up + sent) as f64 - due).abs() <= slack,
        "{given_up} given up + {sent} sent of {due:.0} due in {} s",
        r.duration_s
    );
    assert!(r.unanswered.count >= given_up, "{:?}", r.unanswered);
}

/// The run's `unequal service` warning, as written, if it has one.
pub fn unequal_service(r: &RunResult) -> Option<String> {
    (r.warnings.iter())
        .find(|w| matches!(w, Warning::Unequal(_)))
        .map(|w| w.to_string())
}

/// What a server that serves `connections` flooding connections in turn must show: no
/// connection waited for the others' whole backlog (max under 250 ms), each got its share
/// (Jain's index above 0.95, per-connection p99s within 3× of the median's), no warning.
pub fn assert_served_in_turn(r: &RunResult, connections: u64) {
    assert!(
        r.latency.max_ns < 250_000_000,
        "max {} ms: a connection waited for the others' backlog",
        r.latency.max_ns / 1_000_000
    );
    let f = &r.fairness[0];
    assert_eq!(f.connections, connections);
    assert!(f.jain_index > 0.95 && f.p99_max_over_median < 3.0, "{f:?}");
    assert_eq!(unequal_service(r), None, "{:?}", r.warnings);
}

/// A test CA and a certificate it signed for `localhost` and 127.0.0.1, written to `dir` as
/// `ca.pem`, `cert.pem` and `key.pem`.
pub fn certificates(dir: &std::path::Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "msgbench test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}

// ---- nginx ----

/// nginx on a free loopback port serving a static file, a large file and a 404, with a
/// configuration written here; stopped (by PID) when dropped.
pub struct Nginx {
    child: std::process::Child,
    /// The plain port's address.
    pub addr: SocketAddr,
    /// The TLS port's address and the CA file that signed its certificate, when asked for.
    pub tls: Option<(SocketAddr, std::path::PathBuf)>,
    /// Its configuration, files and logs.
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// nginx with plain HTTP/1.1 only.
    pub fn start() -> Nginx {
        Nginx::start_with("", false)
    }

    /// nginx with `extra` in its server blocks, and a TLS port too when `tls`.
    pub fn start_with(extra: &str, tls: bool) -> Nginx {
        Nginx::configured(extra, tls, "")
    }

    /// nginx speaking HTTP/2 on both ports (cleartext with prior knowledge, and TLS with
    /// ALPN), with `extra` in its server blocks.
    pub fn http2(extra: &str) -> Nginx {
        Nginx::configured(extra, true, " http2")
    }

    fn configured(extra: &str, tls: bool, listen: &str) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("small.txt"), "hello from nginx\n").unwrap();
        std::fs::write(root.join("large.bin"), vec![b'x'; 256 * 1024]).unwrap();
        let conf_of = |port: u16, tls_port: u16| {
            let tls_server = if tls {
                certificates(dir.path());
                format!(
                    " server {{\n  listen 127.0.0.1:{tls_port} ssl{listen};\n  ssl_certificate {d}/cert.pem;\n  ssl_certificate_key {d}/key.pem;\n  root {root};\n{extra} }}\n",
                    d = dir.path().display(),
                    root = root.display()
                )
            } else {
                String::new()
            };
            let conf = dir.path().join("nginx.conf");
            std::fs::write(
                &conf,
                format!(
                    "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\nevents {{ worker_connections 1024; }}\nhttp {{\n access_log off;\n client_body_temp_path {d};\n proxy_temp_path {d};\n fastcgi_temp_path {d};\n uwsgi_temp_path {d};\n scgi_temp_path {d};\n keepalive_requests 1000000;\n server {{\n  listen 127.0.0.1:{port}{listen};\n  root {root};\n{extra} }}\n{tls_server}}}\n",
                    d = dir.path().display(),
                    root = root.display()
                ),
            )
            .unwrap();
            conf
        };
        let nginx = ["/usr/sbin/nginx", "nginx"]
            .into_iter()
            .find(|p| std::process::Command::new(p).arg("-v").output().is_ok())
            .expect("nginx is not installed: run `bash scripts/setup.sh`");
        // Both ports reserved for this binary; ready once nginx itself holds both.
        let tls_port = free_port();
        let (mut child, port) = ports::start_listening("nginx", Duration::from_secs(20), |port| {
            std::process::Command::new(nginx)
                .args(["-e", "stderr", "-c"])
                .arg(conf_of(port, tls_port))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        });
        if tls {
            ports::wait_until_listening(&mut child, tls_port, Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("nginx's TLS port: {e}"));
        }
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let tls_addr: SocketAddr = format!("127.0.0.1:{tls_port}").parse().unwrap();
        Nginx {
            child,
            addr,
            tls: tls.then(|| (tls_addr, dir.path().join("ca.pem"))),
            dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- brokers ----

/// A broker process (nats-server, redis-server) on a free loopback port, started here and
/// stopped (by PID) when dropped.
pub struct BrokerProcess {
    child: std::process::Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its configuration file's folder, if it has one.
    _dir: Option<tempfile::TempDir>,
}

impl BrokerProcess {
    /// `nats-server` with `extra` arguments.
    pub fn nats(extra: &[&str]) -> BrokerProcess {
        let args = |port: u16| {
            let mut args = vec![
                "-a".to_string(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            args
        };
        BrokerProcess::spawn(&["/usr/sbin/nats-server", "nats-server"], &args)
    }

    /// `nats-server` with JetStream on, storing in a folder of its own (removed when dropped).
    pub fn jetstream() -> BrokerProcess {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().display().to_string();
        let mut broker = BrokerProcess::nats(&["-js", "-sd", &store]);
        broker._dir = Some(dir);
        broker
    }

    /// `redis-server` without persistence, with `extra` arguments.
    pub fn redis(extra: &[&str]) -> BrokerProcess {
        let args = |port: u16| {
            let mut args = vec![
                "--port".to_string(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                String::new(),
                "--appendonly".into(),
                "no".into(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            args
        };
        BrokerProcess::spawn(&["/usr/bin/redis-server", "redis-server"], &args)
    }

    /// `redis-server` without persistence listening for TLS only, with the certificate and key
    /// [`certificates`] wrote to `dir`, clients' certificates asked for when `client_certs`.
    pub fn redis_tls(dir: &std::path::Path, client_certs: bool, extra: &[&str]) -> BrokerProcess {
        let file = |name: &str| dir.join(name).display().to_string();
        let args = |port: u16| {
            let mut args: Vec<String> = [
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--tls-cert-file",
                &file("cert.pem"),
                "--tls-key-file",
                &file("key.pem"),
                "--tls-ca-cert-file",
                &file("ca.pem"),
                "--tls-auth-clients",
                if client_certs { "yes" } else { "no" },
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(extra.iter().map(|s| s.to_string()));
            args
        };
        BrokerProcess::spawn(&["/usr/bin/redis-server", "redis-server"], &args)
    }

    /// `mosquitto` listening on loopback, anonymous clients allowed, `extra` lines added to its
    /// configuration.
    pub fn mosquitto(extra: &str) -> BrokerProcess {
        BrokerProcess::mosquitto_with(&format!("allow_anonymous true\n{extra}"))
    }

    /// `mosquitto` listening on loopback, with `conf_lines` as the rest of its configuration.
    pub fn mosquitto_with(conf_lines: &str) -> BrokerProcess {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("mosquitto.conf");
        let args = |port: u16| {
            std::fs::write(&conf, format!("listener {port} 127.0.0.1\n{conf_lines}\n")).unwrap();
            vec!["-c".to_string(), conf.display().to_string()]
        };
        let mut broker = BrokerProcess::spawn(&["/usr/sbin/mosquitto", "mosquitto"], &args);
        broker._dir = Some(dir);
        broker
    }

    /// Starts the first of `programs` that exists with `args(port)` on a port of its own,
    /// and waits until that process holds the listening socket (see `ports`).
    fn spawn(programs: &[&str], args: &dyn Fn(u16) -> Vec<String>) -> BrokerProcess {
        let program = programs
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .copied()
            .unwrap_or(programs[programs.len() - 1]);
        let (child, port) = ports::start_listening(program, Duration::from_secs(20), |port| {
            std::process::Command::new(program)
                .args(args(port))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {program}: {e} (run `bash scripts/setup.sh`)")
                })
        });
        BrokerProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _dir: None,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the one Kafka broker of this test binary listens: started on first use (a JVM takes
/// seconds to start, so the Kafka tests share it, each on topics of its own) by
/// `scripts/kafka-broker.sh`, and killed when the test binary exits (it dies with the thread
/// that started it, which lives as long as the process).
#[allow(dead_code)]
pub fn kafka() -> SocketAddr {
    static KAFKA: std::sync::OnceLock<SocketAddr> = std::sync::OnceLock::new();
    *KAFKA.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let port = free_port();
            let dir = tempfile::tempdir().unwrap();
            let mut child = kafka_broker(port, dir.path(), free_port())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start Kafka: {e} (run `bash scripts/setup.sh`)")
                });
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            // Ready once the broker (a JVM below the script) holds the listening socket.
            ports::wait_until_listening(&mut child, port, Duration::from_secs(90)).unwrap_or_else(
                |e| panic!("Kafka: {e}; run `bash scripts/kafka-broker.sh {port}` to see why"),
            );
            tx.send(addr).unwrap();
            // Lives (and keeps the broker and its folder) until the process ends.
            let _keep = (child, dir);
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("Kafka started")
    })
}

/// A pubsub run's accounting: every subscription's own counters hold, every delivery's
/// latency is recorded once, and the run's counters are the subscriptions' sum.
#[allow(dead_code)]
pub fn assert_subscriptions_accounted(r: &RunResult) {
    r.counters.check().unwrap_or_else(|e| panic!("run: {e}"));
    let mut sum = msgbench_model::result::Counters::default();
    for s in &r.streams {
        s.counters
            .check()
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(s.latency.count, s.counters.delivered, "{}", s.name);
        sum += s.counters;
    }
    assert_eq!(sum, r.counters);
    assert_eq!(r.latency.count, r.counters.delivered);
}

/// Runs an experiment of one run that must succeed; returns that run.
#[allow(dead_code)]
pub fn run_one(toml: &str, sets: &[&str]) -> RunResult {
    let (outcome, _dir) = try_run(toml, sets);
    let mut results = outcome.unwrap_or_else(|e| panic!("{e}")).results;
    assert_eq!(results.len(), 1);
    results.remove(0)
}

/// The run stopped on the server's protocol error, and its words say `why`.
pub fn stopped_by_protocol_error(r: &RunResult, why: &str) {
    assert!(r.faults.protocol_errors >= 1, "{why}: {:?}", r.faults);
    assert!(r.interrupted, "{why}");
    assert!(
        (r.warnings.iter()).any(|w| w.is_stopped_early() && w.to_string().contains(why)),
        "{why}: {:?}",
        r.warnings
    );
}

/// `scripts/kafka-broker.sh PORT DIR CONTROLLER` (the controller on port `controller`), its
/// output dropped, killed with the test process (its parent-death signal).
fn kafka_broker(port: u16, dir: &std::path::Path, controller: u16) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kafka-broker.sh");
    let mut command = std::process::Command::new("bash");
    command
        .arg(script)
        .arg(port.to_string())
        .arg(dir)
        .arg(controller.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: prctl is async-signal-safe; the child only sets its own parent-death signal
    // before exec.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// A Kafka cluster of its own: `nodes` KRaft brokers (each broker and controller), every
/// topic with three replicas (two in sync for a write), started by `scripts/kafka-broker.sh`
/// and stopped (by PID) when dropped.
#[allow(dead_code)]
pub struct KafkaCluster {
    children: Vec<Option<std::process::Child>>,
    /// Each broker's address, node `k + 1` at `addrs[k]`.
    pub addrs: Vec<SocketAddr>,
    _dirs: Vec<tempfile::TempDir>,
}

#[allow(dead_code)]
impl KafkaCluster {
    /// Starts `nodes` brokers and waits until each listens (JVMs: seconds each).
    pub fn start(nodes: usize) -> KafkaCluster {
        let ports: Vec<(u16, u16)> = (0..nodes).map(|_| (free_port(), free_port())).collect();
        let voters: Vec<String> = (ports.iter().enumerate())
            .map(|(k, (_, c))| format!("{}@127.0.0.1:{c}", k + 1))
            .collect();
        let mut cluster = KafkaCluster {
            children: Vec::new(),
            addrs: Vec::new(),
            _dirs: Vec::new(),
        };
        for (k, &(port, controller)) in ports.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let child = kafka_broker(port, dir.path(), controller)
                .env("KAFKA_NODE_ID", (k + 1).to_string())
                .env("KAFKA_VOTERS", voters.join(","))
                .env("KAFKA_REPLICAS", nodes.min(3).to_string())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start Kafka: {e} (run `bash scripts/setup.sh`)")
                });
            cluster.children.push(Some(child));
            cluster.addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
            cluster._dirs.push(dir);
        }
        for (child, &(port, _)) in cluster.children.iter_mut().zip(&ports) {
            let child = child.as_mut().expect("started");
            ports::wait_until_listening(child, port, Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("Kafka cluster node on {port}: {e}"));
        }
        cluster
    }

    /// Shuts node `k + 1` down as an operator does (SIGTERM: a controlled shutdown, its
    /// partitions' leadership handed to the others first) and waits for it to exit.
    pub fn shut_down(&mut self, k: usize) {
        if let Some(mut child) = self.children[k].take() {
            // SAFETY: a plain kill(2) of a child this test started, by its PID.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Kafka broker of its own with a SASL_SSL listener (`scripts/kafka-broker.sh` with
/// `SASL_SSL_PORT`): the certificate and key of `tls_dir` (see [`certificates`]), one user
/// `bench` whose password is the first line of `password_file`; stopped (by PID) when dropped.
#[allow(dead_code)]
pub struct SecureKafka {
    child: std::process::Child,
    /// The SASL_SSL listener.
    pub addr: SocketAddr,
    /// The PLAINTEXT listener (the broker's own; a plain client's address).
    pub plain: SocketAddr,
    /// The SASL_PLAINTEXT listener (the same logins, without TLS).
    pub sasl_plain: SocketAddr,
    _dir: tempfile::TempDir,
}

#[allow(dead_code)]
impl SecureKafka {
    /// Starts it and waits until its SASL_SSL listener is up (a JVM: seconds).
    pub fn start(tls_dir: &std::path::Path, password_file: &std::path::Path) -> SecureKafka {
        let (port, secure, sasl_plain) = (free_port(), free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let mut child = kafka_broker(port, dir.path(), free_port())
            .env("SASL_SSL_PORT", secure.to_string())
            .env("SASL_PLAINTEXT_PORT", sasl_plain.to_string())
            .env("TLS_DIR", tls_dir)
            .env("SASL_USER", "bench")
            .env("SASL_PASSWORD_FILE", password_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start Kafka: {e} (run `bash scripts/setup.sh`)"));
        ports::wait_until_listening(&mut child, secure, Duration::from_secs(90))
            .unwrap_or_else(|e| panic!("Kafka with SASL_SSL: {e}"));
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        SecureKafka {
            child,
            addr: at(secure),
            plain: at(port),
            sasl_plain: at(sasl_plain),
            _dir: dir,
        }
    }
}

impl Drop for SecureKafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file a run wrote under `dir` (but the tests' own `secret-*` files), read: none holds
/// `secret`, and there was at least one to look in.
#[allow(dead_code)]
pub fn assert_not_written(dir: &std::path::Path, secret: &str) {
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if !path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("secret-")
            {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{} holds the secret",
                    path.display()
                );
                files += 1;
            }
        }
    }
    assert!(files > 0, "the run wrote nothing to look in");
}

/// The one RabbitMQ node of this test binary (an Erlang VM takes seconds to start, so the
/// RabbitMQ tests share it, each on exchanges and queues of its own): started on first use by
/// `scripts/rabbitmq-server.sh` with a TLS listener too, killed when the test process exits
/// (its parent-death signal). Its one user is `bench`, whose password is
/// [`RABBITMQ_SECRET`] (in the file `password_file`); `guest` is not there.
#[allow(dead_code)]
pub struct Rabbitmq {
    /// AMQP's plain listener.
    pub addr: SocketAddr,
    /// The TLS listener.
    pub tls: SocketAddr,
    /// The folder of its CA (`ca.pem`), certificate and key (see [`certificates`]).
    pub tls_dir: std::path::PathBuf,
    /// The file holding its user's password.
    pub password_file: std::path::PathBuf,
}

/// The password of the test node's user: searched for in every file a run writes.
#[allow(dead_code)]
pub const RABBITMQ_SECRET: &str = "Rb8-never-in-results";

#[allow(dead_code)]
pub fn rabbitmq() -> &'static Rabbitmq {
    static RABBITMQ: std::sync::OnceLock<Rabbitmq> = std::sync::OnceLock::new();
    RABBITMQ.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let (port, tls) = (free_port(), free_port());
            let dir = tempfile::tempdir().unwrap();
            let tls_dir = dir.path().join("tls");
            std::fs::create_dir(&tls_dir).unwrap();
            certificates(&tls_dir);
            let password_file = dir.path().join("secret-password");
            std::fs::write(&password_file, format!("{RABBITMQ_SECRET}\n")).unwrap();
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/rabbitmq-server.sh");
            let mut command = std::process::Command::new("bash");
            command
                .arg(script)
                .arg(port.to_string())
                .arg(dir.path().join("node"))
                .arg(free_port().to_string())
                .arg(free_port().to_string())
                .env("TLS_PORT", tls.to_string())
                .env("TLS_DIR", &tls_dir)
                .env("RABBITMQ_USER", "bench")
                .env("RABBITMQ_PASSWORD_FILE", &password_file)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            // SAFETY: prctl is async-signal-safe; the child only sets its own parent-death
            // signal before exec.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = command.spawn().unwrap_or_else(|e| {
                panic!("cannot start RabbitMQ: {e} (run `bash scripts/setup.sh`)")
            });
            for p in [port, tls] {
                ports::wait_until_listening(&mut child, p, Duration::from_secs(60)).unwrap_or_else(
                    |e| panic!("RabbitMQ: {e}; run `bash scripts/rabbitmq-server.sh {port}` to see why"),
                );
            }
            let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
            tx.send(Rabbitmq {
                addr: at(port),
                tls: at(tls),
                tls_dir: tls_dir.clone(),
                password_file: password_file.clone(),
            })
            .unwrap();
            // Lives (and keeps the node and its folder) until the process ends.
            let _keep = (child, dir);
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("RabbitMQ started")
    })
}
