//! Live figures while an experiment runs, for dashboards and wrappers: an OpenMetrics endpoint
//! (`--metrics-listen`, scraped by Prometheus) and one JSON line per second on stderr
//! (`--progress json`). Both are [`Observer`]s of the runner: they read what the collector
//! already reports once a second and never touch the measuring threads.
use msgbench_engine::runner::{LiveStatus, Observer};
use msgbench_model::result::{Counters, RunResult};
use msgbench_model::search::SearchStep;
use msgbench_model::sweep::SweepPoint;
use msgbench_model::Experiment;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Passes every event to each observer in turn (the terminal, the exporter, the JSON lines).
pub struct Fanout(pub Vec<Arc<dyn Observer>>);

impl Observer for Fanout {
    fn experiment_started(&self, experiment: &Experiment, dir: &std::path::Path) {
        (self.0.iter()).for_each(|o| o.experiment_started(experiment, dir));
    }
    fn run_started(&self, run_id: &str, number: usize, total: usize) {
        self.0
            .iter()
            .for_each(|o| o.run_started(run_id, number, total));
    }
    fn live(&self, status: LiveStatus) {
        self.0.iter().for_each(|o| o.live(status.clone()));
    }
    fn run_finished(&self, result: &RunResult) {
        self.0.iter().for_each(|o| o.run_finished(result));
    }
    fn step_judged(&self, number: usize, step: &SearchStep) {
        self.0.iter().for_each(|o| o.step_judged(number, step));
    }
}

/// The labels of every run series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    experiment: String,
    run_id: String,
    /// The sweep point's index (`000`): replicates of one point share it.
    point: String,
    /// `MSGBENCH_SHARD` of the process, else `--shard`'s `I/N`, else empty: which load
    /// generator of a distributed run this is.
    shard: String,
}

/// A run's labels plus the quantile of an interval latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuantileLabels {
    experiment: String,
    run_id: String,
    point: String,
    shard: String,
    quantile: String,
}

/// A run's labels plus an operation class (for `ticks`, a client group).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    experiment: String,
    run_id: String,
    point: String,
    shard: String,
    class: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

struct Families {
    counters: [Family<RunLabels, Counter>; 6],
    in_flight: Family<RunLabels, Gauge>,
    target_rate: Family<RunLabels, FloatGauge>,
    delivered_rate: Family<RunLabels, FloatGauge>,
    latency: Family<QuantileLabels, FloatGauge>,
    send_lag: Family<RunLabels, FloatGauge>,
    finished: Family<RunLabels, Gauge>,
    class_delivered: Family<ClassLabels, Counter>,
    class_p99: Family<ClassLabels, FloatGauge>,
}

struct ExporterState {
    labels: Option<RunLabels>,
    /// The run's class names and what each class's counter was last set to.
    classes: Vec<(ClassLabels, u64)>,
    /// What the six run counters were last set to.
    seen: [u64; 6],
    /// The run's scenario, when its target changes within it (stages).
    staged: Option<msgbench_model::Scenario>,
}

/// Serves the live series over HTTP and keeps them current.
pub struct Exporter {
    experiment: Experiment,
    shard: String,
    families: Families,
    registry: Arc<Registry>,
    state: Mutex<ExporterState>,
}

/// How long an encoded page is reused: a thousand scrapes a second cost one encoding per
/// 100 ms, not one each.
const PAGE_REUSE: Duration = Duration::from_millis(100);
/// Longest a scraper may take to send its request or read the page.
const SCRAPER_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest request head read from a scraper.
const MAX_REQUEST: usize = 8 * 1024;

impl Exporter {
    /// Binds `address` (so a port in use is an error before anything runs) and serves
    /// `/metrics` from a thread of its own until the process ends.
    pub fn start(address: &str, experiment: &Experiment) -> Result<Arc<Exporter>, String> {
        let listener = bind(address)?;
        let mut registry = Registry::default();
        let families = register(&mut registry);
        let exporter = Arc::new(Exporter {
            experiment: experiment.clone(),
            shard: std::env::var("MSGBENCH_SHARD")
                .ok()
                .or_else(|| {
                    let shard = experiment.shard();
                    (!shard.is_whole()).then(|| shard.to_string())
                })
                .unwrap_or_default(),
            families,
            registry: Arc::new(registry),
            state: Mutex::new(ExporterState {
                labels: None,
                classes: Vec::new(),
                seen: [0; 6],
                staged: None,
            }),
        });
        let registry = exporter.registry.clone();
        spawn_server(listener, registry, || {})?;
        Ok(exporter)
    }

    fn set_counters(&self, state: &mut ExporterState, now: &Counters) {
        let Some(labels) = state.labels.clone() else {
            return;
        };
        let values = [
            now.attempted,
            now.sent,
            now.delivered,
            now.dropped,
            now.skipped,
            now.failed,
        ];
        let families = self.families.counters.iter();
        for ((family, seen), value) in families.zip(&mut state.seen).zip(values) {
            add_up_to(family, &labels, seen, value);
        }
    }
}

fn register(registry: &mut Registry) -> Families {
    let counters: [Family<RunLabels, Counter>; 6] = Default::default();
    let help = [
        (
            "msgbench_attempted",
            "Messages the schedule called for in the measured window",
        ),
        ("msgbench_sent", "Messages sent"),
        (
            "msgbench_delivered",
            "Messages delivered (answered, or received by a stream client)",
        ),
        (
            "msgbench_dropped",
            "Messages dropped (by the system's slow-client policy or lost)",
        ),
        (
            "msgbench_skipped",
            "Messages not sent: the schedule could not be kept",
        ),
        (
            "msgbench_failed",
            "Messages that failed (error replies, timeouts, closed connections)",
        ),
    ];
    for (family, (name, text)) in counters.iter().zip(help) {
        registry.register(name, text, family.clone());
    }
    let families = Families {
        counters,
        in_flight: Family::default(),
        target_rate: Family::default(),
        delivered_rate: Family::default(),
        latency: Family::default(),
        send_lag: Family::default(),
        finished: Family::default(),
        class_delivered: Family::default(),
        class_p99: Family::default(),
    };
    register_gauges(registry, &families);
    families
}

/// The gauges and per-class series of `families`, each with its help text.
fn register_gauges(registry: &mut Registry, families: &Families) {
    registry.register(
        "msgbench_class_delivered",
        "Messages delivered, by operation class (for ticks: by client group)",
        families.class_delivered.clone(),
    );
    registry.register(
        "msgbench_class_interval_latency_p99_seconds",
        "p99 latency over the last one-second interval, by operation class (for ticks: by \
         client group)",
        families.class_p99.clone(),
    );
    registry.register(
        "msgbench_in_flight",
        "Sent and neither delivered, dropped nor failed yet",
        families.in_flight.clone(),
    );
    registry.register(
        "msgbench_target_rate",
        "The schedule's rate, messages per second (absent when unpaced)",
        families.target_rate.clone(),
    );
    registry.register(
        "msgbench_delivered_rate",
        "Delivered per second over the last one-second interval",
        families.delivered_rate.clone(),
    );
    registry.register(
        "msgbench_interval_latency_seconds",
        "Latency from the intended send time over the last one-second interval, by quantile \
         (0.5, 0.99, 1 = max); interval quantiles do not add up across runs or shards: merge \
         the runs' histograms (runs/<id>.hlog) for an exact figure",
        families.latency.clone(),
    );
    registry.register(
        "msgbench_interval_send_lag_p99_seconds",
        "Send lag p99 over the last one-second interval: how late the schedule's sends went out \
         (above run.send_lag_limit, 1 ms by default, a run is not valid)",
        families.send_lag.clone(),
    );
    registry.register(
        "msgbench_run_finished",
        "1 once the run is written; its counters are then the run's final figures",
        families.finished.clone(),
    );
}

impl Observer for Exporter {
    fn run_started(&self, run_id: &str, _number: usize, _total: usize) {
        let mut state = self.state.lock().unwrap();
        let labels = RunLabels {
            experiment: self.experiment.name.clone(),
            run_id: run_id.to_string(),
            point: run_id.get(..3).unwrap_or(run_id).to_string(),
            shard: self.shard.clone(),
        };
        let point = point_of(&self.experiment, run_id);
        state.classes = point
            .map(|p| p.scenario.system.class_names())
            .unwrap_or_default()
            .into_iter()
            .map(|class| {
                let l = ClassLabels {
                    experiment: labels.experiment.clone(),
                    run_id: labels.run_id.clone(),
                    point: labels.point.clone(),
                    shard: labels.shard.clone(),
                    class,
                };
                (l, 0)
            })
            .collect();
        if let Some(target) = point.and_then(|p| p.scenario.target_per_sec()) {
            self.families.target_rate.get_or_create(&labels).set(target);
        }
        self.families.finished.get_or_create(&labels).set(0);
        state.staged = point
            .filter(|p| matches!(p.scenario.pacing, msgbench_model::pacing::Pacing::Stages(_)))
            .map(|p| p.scenario.clone());
        state.labels = Some(labels);
        state.seen = [0; 6];
    }

    fn live(&self, s: LiveStatus) {
        let mut state = self.state.lock().unwrap();
        self.set_counters(&mut state, &s.counters);
        let Some(labels) = state.labels.clone() else {
            return;
        };
        let c = &s.counters;
        let in_flight = c.sent.saturating_sub(c.delivered + c.dropped + c.failed);
        self.families
            .in_flight
            .get_or_create(&labels)
            .set(in_flight.min(i64::MAX as u64) as i64);
        self.families
            .delivered_rate
            .get_or_create(&labels)
            .set(s.delivered_per_sec);
        self.families
            .send_lag
            .get_or_create(&labels)
            .set(s.send_lag_p99_ns as f64 / 1e9);
        if let Some(target) =
            (state.staged.as_ref()).and_then(|sc| sc.target_per_sec_at(s.elapsed_s))
        {
            self.families.target_rate.get_or_create(&labels).set(target);
        }
        for ((labels, seen), class) in state.classes.iter_mut().zip(&s.classes) {
            add_up_to(
                &self.families.class_delivered,
                labels,
                seen,
                class.delivered,
            );
            self.families
                .class_p99
                .get_or_create(labels)
                .set(class.p99_ns as f64 / 1e9);
        }
        for (quantile, ns) in [("0.5", s.p50_ns), ("0.99", s.p99_ns), ("1", s.max_ns)] {
            let q = QuantileLabels {
                experiment: labels.experiment.clone(),
                run_id: labels.run_id.clone(),
                point: labels.point.clone(),
                shard: labels.shard.clone(),
                quantile: quantile.into(),
            };
            self.families.latency.get_or_create(&q).set(ns as f64 / 1e9);
        }
    }

    fn run_finished(&self, result: &RunResult) {
        let mut state = self.state.lock().unwrap();
        // The written figures, drain included: the counters end equal to the result file's.
        self.set_counters(&mut state, &result.counters);
        for ((labels, seen), class) in state.classes.iter_mut().zip(&result.classes) {
            add_up_to(
                &self.families.class_delivered,
                labels,
                seen,
                class.latency.count,
            );
        }
        if let Some(labels) = state.labels.clone() {
            self.families
                .in_flight
                .get_or_create(&labels)
                .set(result.counters.in_flight_end.min(i64::MAX as u64) as i64);
            self.families.finished.get_or_create(&labels).set(1);
        }
    }
}

/// Raises `labels`'s counter in `family` to `now` (counters only rise), remembering it in `seen`.
fn add_up_to<L: EncodeLabelSet + Clone + std::hash::Hash + Eq>(
    family: &Family<L, Counter>,
    labels: &L,
    seen: &mut u64,
    now: u64,
) {
    family
        .get_or_create(labels)
        .inc_by(now.saturating_sub(*seen));
    *seen = (*seen).max(now);
}

/// The labels of a server's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    /// `rpc`, `http`, `ticks` or `ws-rpc`.
    server: String,
    shard: String,
}

/// One counter a server keeps: series name (without `_total`), help, value now.
pub type ServerCounter = (&'static str, &'static str, u64);

/// `msgbench serve … --metrics-listen ADDR`: the server's counters, read by `read` (from the
/// server's own atomics) at most once per page, as `msgbench_server_*_total` series labelled
/// with the server's kind. Binds before the server starts: a port in use is an error.
pub fn serve_server_counters(
    address: &str,
    server: &str,
    read: impl Fn() -> Vec<ServerCounter> + Send + 'static,
) -> Result<(), String> {
    let listener = bind(address)?;
    let mut registry = Registry::default();
    let first = read();
    let families: Vec<Family<ServerLabels, Counter>> =
        first.iter().map(|_| Family::default()).collect();
    for ((name, help, _), family) in first.iter().zip(&families) {
        registry.register(*name, *help, family.clone());
    }
    let labels = ServerLabels {
        server: server.to_string(),
        shard: std::env::var("MSGBENCH_SHARD").unwrap_or_default(),
    };
    let registry = Arc::new(registry);
    let mut seen = vec![0u64; families.len()];
    // Counters only rise: each page adds what the server counted since the last one.
    let refresh = move || {
        for ((family, (_, _, value)), last) in families.iter().zip(read()).zip(seen.iter_mut()) {
            add_up_to(family, &labels, last, value);
        }
    };
    spawn_server(listener, registry, refresh)
}

/// Binds `address` (a host name resolves) and says on stderr where the page is.
fn bind(address: &str) -> Result<TcpListener, String> {
    let addr: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(address)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            format!("--metrics-listen {address:?}: give host:port, e.g. 127.0.0.1:9464")
        })?;
    let listener = TcpListener::bind(addr).map_err(|e| {
        format!("--metrics-listen {addr}: cannot listen there ({e}); pick a free port")
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    eprintln!("msgbench: live metrics at http://{bound}/metrics");
    Ok(listener)
}

fn spawn_server(
    listener: TcpListener,
    registry: Arc<Registry>,
    refresh: impl FnMut() + Send + 'static,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("msgbench-metrics".into())
        .spawn(move || serve(listener, &registry, refresh))
        .map(|_| ())
        .map_err(|e| format!("--metrics-listen: cannot start its thread: {e}"))
}

/// The sweep point a run belongs to: run ids start with its index (`003-rate=1000-r2`).
fn point_of<'a>(experiment: &'a Experiment, run_id: &str) -> Option<&'a SweepPoint> {
    let index: usize = run_id.get(..3)?.parse().ok()?;
    experiment.points.get(index)
}

/// Answers scrapers one at a time, each bounded in time and size, at the idle priority;
/// `refresh` brings the registry up to date before a page is encoded.
fn serve(listener: TcpListener, registry: &Registry, mut refresh: impl FnMut()) {
    // SCHED_IDLE: the thread runs when a CPU has nothing else to do, so a scraper waits for
    // the measuring threads, not they for it. bench/metrics-scraper.sh (100 scrapes/s, rpc at
    // 20k/s, 2 CPUs): send lag p99 21.7 µs and p99 203 µs at the normal priority, 1.9 µs and
    // 125 µs at SCHED_IDLE (no scraper: 7.1 µs, 65 µs; the scraper on a stand-in page: 101 µs).
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets the calling thread's policy; the parameter is a valid, initialised struct.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    let mut page = (Instant::now() - PAGE_REUSE * 2, String::new());
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            continue;
        };
        if page.0.elapsed() >= PAGE_REUSE {
            refresh();
            let mut text = String::new();
            if prometheus_client::encoding::text::encode(&mut text, registry).is_ok() {
                page = (Instant::now(), text);
            }
        }
        let _ = answer(stream, &page.1);
    }
}

fn answer(mut stream: TcpStream, page: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(SCRAPER_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPER_TIMEOUT))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_REQUEST {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, kind, body) =
        if line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                page,
            )
        } else {
            (
                "404 Not Found",
                "text/plain",
                "msgbench serves GET /metrics\n",
            )
        };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One JSON line per second on stderr: the run, how far it is, its rate, p99 and losses.
pub struct JsonProgress {
    experiment: Experiment,
    /// Run id, its duration (s), its number, how many runs, the last interval printed (s).
    current: Mutex<(String, f64, usize, usize, f64)>,
}

impl JsonProgress {
    /// Progress lines for `experiment`'s runs.
    pub fn new(experiment: &Experiment) -> JsonProgress {
        JsonProgress {
            experiment: experiment.clone(),
            current: Mutex::new((String::new(), 0.0, 0, 0, -1.0)),
        }
    }
}

impl Observer for JsonProgress {
    fn run_started(&self, run_id: &str, number: usize, total: usize) {
        let duration = point_of(&self.experiment, run_id)
            .map(|p| p.scenario.run.duration.as_secs_f64())
            .unwrap_or(0.0);
        *self.current.lock().unwrap() = (run_id.to_string(), duration, number, total, -1.0);
    }

    fn live(&self, s: LiveStatus) {
        let mut current = self.current.lock().unwrap();
        // Each of a run's recorders reports the interval it closed: one line per interval.
        if s.elapsed_s <= current.4 {
            return;
        }
        current.4 = s.elapsed_s;
        let (run_id, duration, number, total, _) = current.clone();
        drop(current);
        let run_eta = (duration - s.elapsed_s).max(0.0);
        // Later runs assumed as long as this one (warm-up and drain not counted).
        let experiment_eta = run_eta + total.saturating_sub(number) as f64 * duration;
        let line = serde_json::json!({
            "run_id": run_id, "run": number, "runs": total,
            "elapsed_s": round3(s.elapsed_s),
            "eta_s": round3(run_eta),
            "experiment_eta_s": round3(experiment_eta),
            "delivered_per_sec": s.delivered_per_sec.round(),
            "p99_ns": s.p99_ns,
            "send_lag_p99_ns": s.send_lag_p99_ns,
            "sent": s.counters.sent, "delivered": s.counters.delivered,
            "dropped": s.counters.dropped, "skipped": s.counters.skipped,
            "failed": s.counters.failed,
        });
        // A closed stderr must not end the run: the line is dropped, the run goes on.
        let _ = writeln!(std::io::stderr(), "{line}");
    }

    fn run_finished(&self, r: &RunResult) {
        let line = serde_json::json!({
            "run_id": r.run_id, "finished": true, "duration_s": round3(r.duration_s),
            "delivered_per_sec": r.delivered_per_sec().round(), "p99_ns": r.latency.p99_ns,
            "sent": r.counters.sent, "delivered": r.counters.delivered,
            "dropped": r.counters.dropped, "skipped": r.counters.skipped,
            "failed": r.counters.failed, "in_flight_end": r.counters.in_flight_end,
        });
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
