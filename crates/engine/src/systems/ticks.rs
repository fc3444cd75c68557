//! The `ticks` system: a WebSocket server broadcasts market ticks on a schedule to groups of
//! clients — msgbench's native clients and headless browsers — and every client measures every
//! tick it processes. One run:
//!
//! 1. start the built-in tick server in-process (or an external one through `[sut]`, or use
//!    `ticks.address`);
//! 2. connect the native client threads and launch the browsers; wait until every client has
//!    subscribed (browsers first sync their clock);
//! 3. fix the schedule (warm-up, measured window) and start the generators;
//! 4. wait for the stream to end (the server sends `end` once its schedule ran and a client's
//!    queue is empty), for the drain deadline, or for Ctrl-C (which ends the schedule early);
//! 5. join both ends: per client, what the server generated, dropped, wrote and saw acknowledged,
//!    and what the client processed and when ([`crate::drivers::streams::stream_stats`]).
use crate::cpu::CpuSnapshot;
use crate::drivers::streams::browser;
use crate::drivers::streams::grpc_feed::GrpcPlan;
use crate::drivers::streams::stream_stats::{
    self as stats, patch_run_intervals, run_sums, Join, ServerSide, StreamStats,
};
use crate::drivers::streams::tick_client::{
    self as native, ConnPlan, Shared, ThreadOut, ThreadPlan,
};
use crate::error::EngineError;
use crate::harness::measured::unix_ms_of;
use crate::harness::{BuiltinServer, Measured, RunContext, SpanCpu, SystemUnderTest, Timeline};
use crate::net::feed::FeedDecoder;
use crate::net::tick::Schedule;
use crate::server::ticks::{ConnReport, ServerReport, TickServer, TickServerOptions};
use msgbench_model::result::StreamClient;
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;
use msgbench_model::ticks::{ClientKind, TicksConfig};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration;

/// Longest the clients may take to connect and subscribe (Chromium starts in a few seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How far ahead of a Ctrl-C the schedule ends. A generator thread reads the schedule's end
/// before it makes the ticks due by its clock: had the end been "now", a tick made just after
/// now by a generator that had not yet seen the new end would count as generated for the
/// measured span while its client no longer measured it (one tick "in flight" forever, seen in
/// CI). Every tick made before the generators see an end this far ahead is inside it.
const END_MARGIN_NS: u64 = crate::harness::STOP_CHECK_NS;
/// How often the supervisor looks at the clients and the stop flag.
const SUPERVISE_EVERY: Duration = Duration::from_millis(10);

/// Where to start msgbench's gRPC stream server, for error messages.
const GRPC_HINT: &str = "(start msgbench's own with `msgbench serve grpc --listen HOST:PORT`: its msgbench.Feed/Ticks streams ticks, or let `[sut] command` start one)";
/// Where to start msgbench's own server, for error messages.
const HINT: &str = "(start msgbench's own with `msgbench serve ticks --listen HOST:PORT`, let `[sut] command` start one, or omit `ticks.address` to run the built-in server in-process)";

impl BuiltinServer for TickServer {
    fn cpu_ns(&self) -> u64 {
        TickServer::cpu_ns(self)
    }
    fn local_addr(&self) -> std::net::SocketAddr {
        TickServer::local_addr(self)
    }
}

/// Runs one `ticks` scenario.
pub fn run(
    scenario: &Scenario,
    ticks: &TicksConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let options = TickServerOptions {
        config: ticks.server.clone(),
        format: ticks.format,
        symbols: ticks.symbols,
        pacing: scenario.pacing,
        spin_ns: ticks.spin_ns,
        seed: scenario.run.seed,
        per_second: true,
    };
    let sut = SystemUnderTest::start(ticks.address.as_deref(), sut, &ctx.stop, || {
        TickServer::start(options, ([127, 0, 0, 1], 0).into())
    })?;
    let base = sut.address(ticks.address.as_deref(), |a| format!("ws://{a}/ticks"));
    let mut shared = Shared::new(ticks.ack_every_ns, ticks.on_close, ticks.receive_buffer);
    shared.feed = ticks.feed.clone().map(FeedDecoder::new);
    if ticks.ca_file.is_some() || ticks.insecure {
        let (config, _) =
            crate::drivers::tls::client_config(ticks.ca_file.as_deref(), ticks.insecure).map_err(
                |problem| EngineError::Handshake {
                    address: ticks.address.clone().unwrap_or_default(),
                    problem,
                },
            )?;
        shared.tls = Some(config);
    }
    if let Some(stream) = &ticks.grpc {
        let plan = GrpcPlan::new((**stream).clone(), shared.tls.clone())
            .map_err(|e| e.into_engine(&base, GRPC_HINT))?;
        shared.grpc = Some(Arc::new(plan));
    }
    let shared = Arc::new(shared);
    let mut run = Run {
        scenario,
        ticks,
        ctx,
        shared,
        sut,
    };
    let outcome = run.measure(&base);
    if outcome.is_err() {
        run.shared.abort.store(true, Ordering::SeqCst);
    }
    run.finish(outcome?, process_before)
}

/// What one run's clients measured.
struct Measurement {
    /// What the native threads returned.
    threads: Vec<ThreadOut>,
    /// What the browser pages reported.
    pages: Vec<StreamStats>,
    /// The run's schedule.
    schedule: Schedule,
    /// Length of the measured span, ns.
    span_ns: u64,
    /// The system under test's CPU over it, seconds.
    sut_cpu_s: Option<f64>,
    /// The merged recording.
    recording: crate::recorder::Recording,
}

struct Run<'a> {
    scenario: &'a Scenario,
    ticks: &'a TicksConfig,
    ctx: &'a RunContext,
    shared: Arc<Shared>,
    sut: SystemUnderTest<TickServer>,
}

/// Native client threads, each waiting for its recorder to start.
type Natives = (
    Vec<std::thread::JoinHandle<Option<ThreadOut>>>,
    Vec<Sender<crate::recorder::Recorder>>,
);

/// What the supervisor saw of the measured span.
struct Watched {
    /// Where the span ended (clock ns).
    span_end_ns: u64,
    /// The system under test's CPU over it, seconds.
    sut_cpu_s: Option<f64>,
    /// Each browser's CPU over it, ns.
    browsers_cpu_ns: Vec<u64>,
}

impl Run<'_> {
    fn measure(&mut self, base: &str) -> Result<Measurement, EngineError> {
        let (plans, browser_names) = plans(self.ticks, base);
        let (handles, starts) = self.connect_natives(plans)?;
        let (report_tx, report_rx) = channel();
        let mut browsers = self.launch_browsers(&browser_names, report_tx)?;
        self.wait_subscribed(&mut browsers)?;
        let timeline = Timeline::from_now(&self.scenario.run);
        let schedule = self.fix_schedule(&timeline);
        let mut collector =
            timeline.collector(&self.scenario.run, self.ticks.groups.len(), handles.len());
        if self.sut.builtin.is_some() {
            collector.keep_off(&self.ticks.server.pin);
        }
        for start in &starts {
            let _ = start.send(collector.recorder(true));
        }
        let pages: Vec<browser::PageClient> = browser_names
            .iter()
            .map(|(name, group, _)| browser::PageClient {
                name: name.clone(),
                group: *group,
                recorder: collector.recorder(false),
            })
            .collect();
        let collecting = collector.start(self.ctx.live.clone());
        if let Some(server) = &self.sut.builtin {
            server.begin(schedule);
        }
        let bridge = {
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("msgbench-browser-bridge".into())
                .spawn(move || browser::bridge(report_rx, pages, schedule, &shared))
                .expect("spawning a thread")
        };
        let watched = self.supervise(&timeline, &handles, &bridge, &browsers);
        let (mut threads, panicked) = join_natives(handles);
        let pages = bridge.join().unwrap_or_default();
        threads.extend(browser_threads(&browsers, &watched.browsers_cpu_ns));
        drop(browsers);
        let recording = collecting
            .join()
            .map_err(|_| EngineError::WorkerPanicked("collector"))?;
        if panicked {
            return Err(EngineError::WorkerPanicked("tick client"));
        }
        Ok(Measurement {
            threads,
            pages,
            schedule,
            span_ns: watched
                .span_end_ns
                .saturating_sub(schedule.measure_start_ns),
            sut_cpu_s: watched.sut_cpu_s,
            recording,
        })
    }

    /// Native clients connect first: a refused address or a non-WebSocket peer fails the run
    /// before anything starts, with one clear message.
    fn connect_natives(&self, plans: Vec<ThreadPlan>) -> Result<Natives, EngineError> {
        let (ready_tx, ready_rx) = channel();
        let mut starts = Vec::new();
        let mut handles = Vec::new();
        for plan in plans {
            let (start_tx, start_rx) = channel();
            starts.push(start_tx);
            handles.push(native::spawn(
                plan,
                self.shared.clone(),
                if self.shared.grpc.is_some() {
                    GRPC_HINT
                } else {
                    HINT
                }
                .to_string(),
                ready_tx.clone(),
                start_rx,
            ));
        }
        drop(ready_tx);
        for _ in 0..handles.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(EngineError::WorkerPanicked("tick client")),
            }
        }
        Ok((handles, starts))
    }

    /// Starts a headless Chromium per browser client, reporting to `reports`.
    fn launch_browsers(
        &self,
        names: &[(String, usize, String)],
        reports: Sender<(String, crate::net::tick::PageReport)>,
    ) -> Result<Vec<browser::Browser>, EngineError> {
        let mut browsers = Vec::new();
        if names.is_empty() {
            return Ok(browsers);
        }
        let server = self
            .sut
            .builtin
            .as_ref()
            .expect("validated: browsers need ours");
        server.report_to(reports);
        let binary = browser::chromium()?;
        for (name, _, url) in names {
            let page = format!("http://{}/{url}", server.local_addr());
            browsers.push(browser::Browser::launch(&binary, name, &page)?);
        }
        Ok(browsers)
    }

    /// Waits until every client of the built-in server subscribed (browsers sync their clock
    /// first).
    fn wait_subscribed(&self, browsers: &mut [browser::Browser]) -> Result<(), EngineError> {
        let Some(server) = &self.sut.builtin else {
            return Ok(());
        };
        let names: Vec<String> = self
            .ticks
            .groups
            .iter()
            .flat_map(|g| (0..g.connections).map(|i| g.connection_name(i)))
            .collect();
        let missing = server.wait_ready(&names, READY_TIMEOUT, &self.ctx.stop);
        if self.ctx.stop.load(Ordering::Relaxed) {
            return Err(EngineError::Browser(
                "interrupted while waiting for the clients to subscribe".into(),
            ));
        }
        let Some(name) = missing.first() else {
            return Ok(());
        };
        let tail = browsers
            .iter_mut()
            .find(|b| &b.name == name)
            .map(|b| format!("; Chromium's output: {}", b.output_tail()))
            .unwrap_or_default();
        Err(EngineError::Browser(format!(
            "client `{name}` did not subscribe within {} s{tail}",
            READY_TIMEOUT.as_secs()
        )))
    }

    /// Hands the timeline to the clients (as the tick schedule) and returns it.
    fn fix_schedule(&self, timeline: &Timeline) -> Schedule {
        let schedule = Schedule {
            t0_ns: timeline.t0_ns,
            measure_start_ns: timeline.measure_start_ns,
            end_ns: timeline.end_ns,
        };
        self.shared.schedule.set(schedule).expect("set once");
        self.shared.end_ns.store(schedule.end_ns, Ordering::SeqCst);
        self.shared.deadline_ns.store(
            timeline.drain_deadline(schedule.end_ns, false),
            Ordering::SeqCst,
        );
        schedule
    }

    /// Waits for the clients to finish, ends the schedule early on Ctrl-C, reads the SUT's and
    /// the browsers' CPU at the span's edges.
    fn supervise(
        &self,
        timeline: &Timeline,
        handles: &[std::thread::JoinHandle<Option<ThreadOut>>],
        bridge: &std::thread::JoinHandle<Vec<StreamStats>>,
        browsers: &[browser::Browser],
    ) -> Watched {
        let browser_cpu = || browsers.iter().map(|b| b.cpu_ns()).collect::<Vec<_>>();
        let (mut browsers_start, mut browsers_end) = (Vec::new(), Vec::new());
        let read_sut = || self.sut.cpu_ns();
        let mut sut_cpu = SpanCpu::new(&read_sut);
        let mut span_end_ns = timeline.end_ns;
        let mut stopped = false;
        loop {
            let now = crate::clock::now_ns();
            if !sut_cpu.has_started() && now >= timeline.measure_start_ns {
                sut_cpu.started();
                browsers_start = browser_cpu();
            }
            let end = self.shared.end_ns.load(Ordering::Relaxed);
            if browsers_end.is_empty() && now >= end {
                sut_cpu.ended();
                browsers_end = browser_cpu();
            }
            let stop_asked =
                self.ctx.stop.load(Ordering::Relaxed) || self.shared.stopped_by.get().is_some();
            if stop_asked && !stopped && now < end {
                stopped = true;
                span_end_ns = self.end_early(timeline, now);
                sut_cpu.ended();
                browsers_end = browser_cpu();
            }
            if self.ctx.stop.load(Ordering::Relaxed) {
                // Ctrl-C, also during the drain: the run is written within a second.
                let drain_end = timeline.drain_deadline(end.min(now), true);
                self.shared
                    .deadline_ns
                    .fetch_min(drain_end, Ordering::SeqCst);
            }
            let clients_done = handles.iter().all(|h| h.is_finished())
                && (browsers.is_empty() || bridge.is_finished());
            if clients_done {
                break;
            }
            std::thread::sleep(SUPERVISE_EVERY);
        }
        if browsers_end.is_empty() {
            browsers_end = browser_cpu();
        }
        Watched {
            span_end_ns,
            sut_cpu_s: sut_cpu.seconds(),
            browsers_cpu_ns: browsers_end
                .iter()
                .enumerate()
                .map(|(i, end)| end.saturating_sub(browsers_start.get(i).copied().unwrap_or(*end)))
                .collect(),
        }
    }

    /// Ctrl-C or an error that stops the run at `now`: the schedule ends [`END_MARGIN_NS`]
    /// from now, the drain after that. Returns the span's end.
    fn end_early(&self, timeline: &Timeline, now: u64) -> u64 {
        let span_end_ns = (now + END_MARGIN_NS)
            .min(timeline.end_ns)
            .max(timeline.measure_start_ns);
        self.shared.end_ns.fetch_min(span_end_ns, Ordering::SeqCst);
        self.shared.deadline_ns.fetch_min(
            timeline.drain_deadline(span_end_ns, self.ctx.stop.load(Ordering::Relaxed)),
            Ordering::SeqCst,
        );
        if let Some(s) = &self.sut.builtin {
            s.end_at(span_end_ns);
        }
        span_end_ns
    }

    fn finish(
        mut self,
        m: Measurement,
        process_before: CpuSnapshot,
    ) -> Result<Measured, EngineError> {
        let server_report = self.sut.builtin.take().map(TickServer::stop);
        let mut notes = self.sut.process_notes();
        let mut recording = m.recording;
        let mut clients: Vec<StreamStats> = Vec::new();
        let mut cpus = Vec::new();
        for t in m.threads {
            clients.extend(t.stats);
            cpus.push(t.cpu);
        }
        clients.extend(m.pages);
        clients.sort_by_key(|c| (c.group, natural(&c.name)));
        let deadline_ns = self.shared.deadline_ns.load(Ordering::Relaxed);
        let streams = join_streams(
            &clients,
            server_report.as_ref(),
            self.ticks,
            m.schedule,
            deadline_ns,
        );
        if let Some(report) = &server_report {
            recording_send_lag(&mut recording, report);
            notes.extend(server_notes(report));
        }
        notes.extend(streams.iter().filter_map(|s| {
            let why = s.closed.as_deref()?;
            Some(format!("client {} ended early: {why}", s.name))
        }));
        let mut faults = msgbench_model::result::Faults::default();
        let (counters, sequence) = run_sums(&streams, &mut faults);
        recording.counters = counters;
        recording.sequence = sequence;
        let generated_known = streams.iter().any(|s| s.server.is_some());
        patch_run_intervals(&mut recording.intervals, &streams, generated_known);
        let stopped_by = (self.shared.stopped_by.get().cloned())
            .or_else(|| every_client_gone(&clients, &streams, m.schedule));
        Ok(Measured {
            recording,
            classes: self.ticks.groups.iter().map(|g| g.name.clone()).collect(),
            span_ns: m.span_ns,
            span_start_unix_ms: unix_ms_of(m.schedule.measure_start_ns),
            process_cpu: CpuSnapshot::process().since(&process_before),
            threads: cpus,
            // A Ctrl-C during the drain leaves the span whole.
            interrupted: m.span_ns < self.scenario.run.duration.as_nanos() as u64
                && (self.ctx.stop.load(Ordering::Relaxed) || stopped_by.is_some()),
            config: self.scenario.system.describe(),
            faults,
            sut_cpu_s: m.sut_cpu_s,
            stopped_by,
            notes,
            streams,
            info: self.info(),
            publish_latency: None,
        })
    }
}

impl Run<'_> {
    /// How to read the run's figures: a feed's timestamps, an unverified certificate.
    fn info(&self) -> Vec<String> {
        let mut info = self
            .ticks
            .feed
            .as_ref()
            .map(|f| f.notes())
            .unwrap_or_default();
        if self.ticks.insecure {
            info.push(
                "TLS certificate not verified (ticks.insecure = true): the server was not authenticated"
                    .into(),
            );
        }
        info
    }
}

/// Joins the native client threads; true when one panicked.
fn join_natives(
    handles: Vec<std::thread::JoinHandle<Option<ThreadOut>>>,
) -> (Vec<ThreadOut>, bool) {
    let mut threads = Vec::new();
    let mut panicked = false;
    for h in handles {
        match h.join() {
            Ok(Some(out)) => threads.push(out),
            Ok(None) => {}
            Err(_) => panicked = true,
        }
    }
    (threads, panicked)
}

/// Each browser as a "thread" of the run, with its CPU over the measured span.
fn browser_threads(browsers: &[browser::Browser], cpu_ns: &[u64]) -> Vec<ThreadOut> {
    browsers
        .iter()
        .zip(cpu_ns)
        .map(|(b, cpu_ns)| ThreadOut {
            stats: Vec::new(),
            // /proc gives user + system together; it is reported as user time.
            cpu: msgbench_model::result::ThreadCpu {
                role: format!("{} (Chromium, all its processes)", b.name),
                pinned_cpu: None,
                cpu: msgbench_model::result::CpuTimes {
                    user_s: *cpu_ns as f64 / 1e9,
                    ..Default::default()
                },
            },
        })
        .collect()
}

/// Sorts `fast-2` before `fast-10`.
fn natural(name: &str) -> (String, u64) {
    let (head, tail) = name.rsplit_once('-').unwrap_or((name, ""));
    (head.to_string(), tail.parse().unwrap_or(0))
}

/// Client threads of the native groups (connections dealt round-robin over a group's threads)
/// and `(name, group, page query)` of each browser.
fn plans(ticks: &TicksConfig, base: &str) -> (Vec<ThreadPlan>, Vec<(String, usize, String)>) {
    let mut threads = Vec::new();
    let mut browsers = Vec::new();
    let separator = if base.contains('?') { '&' } else { '?' };
    // Each group's threads, holding this process's clients of the group (a shard's slice).
    let mut group_threads: Vec<Vec<ThreadPlan>> = (ticks.groups.iter())
        .map(|g| {
            (0..g.threads)
                .map(|t| ThreadPlan {
                    role: format!("client-{}-{t}", g.name),
                    pin: g.pin.get(t).copied(),
                    conns: Vec::new(),
                })
                .collect()
        })
        .collect();
    // A shard's clients of a group are every Nth: deal them over the threads by their place
    // among this process's clients of the group, or they would pile onto a few threads.
    let mut dealt = vec![0usize; ticks.groups.len()];
    for (gi, i) in ticks.local_clients() {
        let g = &ticks.groups[gi];
        let ordinal = dealt[gi];
        dealt[gi] += 1;
        let name = g.connection_name(i);
        match g.kind {
            ClientKind::Native => {
                // A feed's URL is the feed's: msgbench's query is for its own servers.
                let url = if ticks.feed.is_some() {
                    base.to_string()
                } else {
                    format!(
                        "{base}{separator}client={name}&format={}",
                        ticks.format.name()
                    )
                };
                group_threads[gi][ordinal % g.threads].conns.push(ConnPlan {
                    url,
                    name,
                    group: gi,
                    cost_ns: g.cost_ns,
                    work: g.work,
                });
            }
            ClientKind::Browser => {
                let query = format!(
                    "?client={name}&format={}&page={}&cost_ns={}&ack_ms={}",
                    ticks.format.name(),
                    g.page.name(),
                    g.cost_ns,
                    (ticks.ack_every_ns as f64 / 1e6).max(1.0)
                );
                browsers.push((name, gi, query));
            }
        }
    }
    // A thread with no client of this shard's is not started.
    threads.extend(
        group_threads
            .into_iter()
            .flatten()
            .filter(|t| !t.conns.is_empty()),
    );
    (threads, browsers)
}

/// Every client's connection ended before the measured window did, none having delivered a
/// message of it: the run measured nothing, as against a server that cannot be reached, and
/// fails as that does. (`clients` and `streams` are the same clients, in the same order.)
fn every_client_gone(
    clients: &[StreamStats],
    streams: &[StreamClient],
    schedule: Schedule,
) -> Option<String> {
    let gone = |(c, s): (&StreamStats, &StreamClient)| {
        c.closed
            .as_ref()
            .is_some_and(|(_, at)| *at < schedule.end_ns)
            && s.counters.delivered == 0
    };
    let first = streams.first()?;
    if clients.len() != streams.len() || !clients.iter().zip(streams).all(gone) {
        return None;
    }
    Some(format!(
        "every client's connection ended before the measured window did, with nothing of it delivered (client {}: {}): nothing was measured",
        first.name,
        first.closed.as_deref().unwrap_or_default()
    ))
}

/// Joins each client's statistics with the server's reports of its connections.
fn join_streams(
    clients: &[StreamStats],
    server: Option<&ServerReport>,
    ticks: &TicksConfig,
    schedule: Schedule,
    deadline_ns: u64,
) -> Vec<StreamClient> {
    clients
        .iter()
        .map(|c| {
            let reports: Vec<&ConnReport> = server
                .map(|r| {
                    r.connections
                        .iter()
                        .filter(|conn| {
                            conn.name == c.name
                                || conn
                                    .name
                                    .strip_prefix(&c.name)
                                    .is_some_and(|rest| rest.starts_with('.'))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let side = server.map(|_| ServerSide::of(&reports));
            let join = Join {
                server: side.as_ref(),
                gaps: ticks.gaps,
                schedule,
            };
            let mut result = c.to_result(&ticks.groups[c.group].name, &join);
            // A browser's connection is the server's to watch: its page clock, and why it
            // ended early if it did.
            if c.kind == "browser" {
                if let Some(r) = reports.last() {
                    result.page_clock = r.page_clock;
                    // Closed at the deadline: the run was over, not the page.
                    match (&result.closed, &r.closed) {
                        (None, Some((why, at))) if *at < deadline_ns => {
                            result.closed = Some(stats::closed_when(why, *at, &schedule));
                        }
                        _ => {}
                    }
                }
            }
            result
        })
        .collect()
}

/// The generators' lateness is the stream's send lag.
fn recording_send_lag(recording: &mut crate::recorder::Recording, report: &ServerReport) {
    report.send_lag.add_to(&mut recording.send_lag);
}

fn server_notes(report: &ServerReport) -> Vec<String> {
    let mut notes = Vec::new();
    let c = &report.counts;
    if c.handshake_failures > 0 {
        notes.push(format!(
            "the tick server refused {} connections that were not WebSocket upgrades",
            c.handshake_failures
        ));
    }
    if c.protocol_errors > 0 {
        notes.push(format!(
            "the tick server closed {} connections for bad messages",
            c.protocol_errors
        ));
    }
    if c.refused > 0 {
        notes.push(format!(
            "the tick server refused {} connections over its max_connections",
            c.refused
        ));
    }
    notes
}
