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
//!    and what the client processed and when ([`stats`]).
use crate::cpu::CpuSnapshot;
use crate::net::tick::Schedule;
use crate::recorder::Collector;
use crate::server::ticks::{ConnReport, ServerReport, TickServer, TickServerOptions};
use crate::sut::SutProcess;
use crate::systems::{EngineError, Measured, RunContext};
use msgbench_model::result::{Counters, IntervalSample, SequenceErrors, StreamClient};
use msgbench_model::rpc::SutConfig;
use msgbench_model::scenario::Scenario;
use msgbench_model::ticks::{ClientKind, TicksConfig};
use native::{ConnPlan, Shared, ThreadOut, ThreadPlan};
use stats::{Join, ServerSide, StreamStats};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration;

pub mod browser;
pub mod native;
pub mod stats;

/// Lead time between fixing the schedule and its first tick.
const START_LEAD_NS: u64 = 20_000_000;
/// Longest the clients may take to connect and subscribe (Chromium starts in a few seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the supervisor looks at the clients and the stop flag.
const SUPERVISE_EVERY: Duration = Duration::from_millis(10);

/// Where to start msgbench's own server, for error messages.
const HINT: &str = "(start msgbench's own with `msgbench serve ticks --listen HOST:PORT`, let `[sut] command` start one, or omit `ticks.address` to run the built-in server in-process)";

/// Runs one `ticks` scenario.
pub fn run(
    scenario: &Scenario,
    ticks: &TicksConfig,
    sut: Option<&SutConfig>,
    ctx: &crate::systems::RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut external = None;
    let (server, base) = match &ticks.address {
        None => {
            let options = TickServerOptions {
                config: ticks.server.clone(),
                format: ticks.format,
                symbols: ticks.symbols,
                pacing: scenario.pacing,
                spin_ns: ticks.spin_ns,
                seed: scenario.run.seed,
            };
            let s = TickServer::start(options, ([127, 0, 0, 1], 0).into())
                .map_err(EngineError::Server)?;
            let base = format!("ws://{}/ticks", s.local_addr());
            (Some(s), base)
        }
        Some(address) => {
            if let Some(cfg) = sut {
                external = Some(SutProcess::start(cfg, &ctx.stop)?);
            }
            (None, address.clone())
        }
    };
    let shared = Arc::new(Shared::new(
        ticks.ack_every_ns,
        ticks.on_close,
        ticks.receive_buffer,
    ));
    let mut run = Run {
        scenario,
        ticks,
        ctx,
        shared,
        server,
        external,
    };
    let outcome = run.measure(&base);
    if outcome.is_err() {
        run.shared.abort.store(true, Ordering::SeqCst);
    }
    let (threads, pages, schedule, window_ns, sut_cpu_s, recording) = outcome?;
    run.finish(
        threads,
        pages,
        schedule,
        window_ns,
        sut_cpu_s,
        recording,
        process_before,
    )
}

/// What the native threads and the browser bridge returned, the schedule, the window, the SUT's
/// CPU and the merged recording.
type Measurement = (
    Vec<ThreadOut>,
    Vec<StreamStats>,
    Schedule,
    u64,
    Option<f64>,
    crate::recorder::Recording,
);

struct Run<'a> {
    scenario: &'a Scenario,
    ticks: &'a TicksConfig,
    ctx: &'a RunContext,
    shared: Arc<Shared>,
    server: Option<TickServer>,
    external: Option<SutProcess>,
}

impl Run<'_> {
    fn measure(&mut self, base: &str) -> Result<Measurement, EngineError> {
        let (plans, browser_names) = plans(self.ticks, base);
        // Native clients connect first: a refused address or a non-WebSocket peer fails the
        // run before anything starts, with one clear message.
        let (ready_tx, ready_rx) = channel();
        let mut starts: Vec<Sender<crate::recorder::Recorder>> = Vec::new();
        let mut handles = Vec::new();
        for plan in plans {
            let (start_tx, start_rx) = channel();
            starts.push(start_tx);
            handles.push(native::spawn(
                plan,
                self.shared.clone(),
                HINT.to_string(),
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
        let (report_tx, report_rx) = channel();
        let mut browsers = Vec::new();
        if !browser_names.is_empty() {
            let server = self.server.as_ref().expect("validated: browsers need ours");
            server.report_to(report_tx);
            let binary = browser::chromium()?;
            for (name, _, url) in &browser_names {
                let page = format!("http://{}/{url}", server.local_addr());
                browsers.push(browser::Browser::launch(&binary, name, &page)?);
            }
        }
        if let Some(server) = &self.server {
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
            if let Some(name) = missing.first() {
                let tail = browsers
                    .iter_mut()
                    .find(|b| &b.name == name)
                    .map(|b| format!("; Chromium's output: {}", b.output_tail()))
                    .unwrap_or_default();
                return Err(EngineError::Browser(format!(
                    "client `{name}` did not subscribe within {} s{tail}",
                    READY_TIMEOUT.as_secs()
                )));
            }
        }
        let t0 = crate::clock::now_ns() + START_LEAD_NS;
        let measure_start_ns = t0 + self.scenario.run.warmup.as_nanos() as u64;
        let end_ns = measure_start_ns + self.scenario.run.duration.as_nanos() as u64;
        let schedule = Schedule {
            t0_ns: t0,
            measure_start_ns,
            end_ns,
        };
        let drain_ns = self.scenario.run.drain_timeout.as_nanos() as u64;
        self.shared.schedule.set(schedule).expect("set once");
        self.shared.end_ns.store(end_ns, Ordering::SeqCst);
        self.shared
            .deadline_ns
            .store(end_ns + drain_ns, Ordering::SeqCst);
        let raw_cap = self.scenario.run.emit_latencies.unwrap_or(0) as usize / handles.len().max(1);
        let mut collector = Collector::new(self.ticks.groups.len(), measure_start_ns, raw_cap);
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
        if let Some(server) = &self.server {
            server.begin(schedule);
        }
        let bridge = {
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("msgbench-browser-bridge".into())
                .spawn(move || browser::bridge(report_rx, pages, schedule, &shared))
                .expect("spawning a thread")
        };
        let (window_end_ns, sut_cpu_s, browser_cpu_ns) =
            self.supervise(schedule, drain_ns, &handles, &bridge, &browsers);
        let mut threads = Vec::new();
        let mut panicked = false;
        for h in handles {
            match h.join() {
                Ok(Some(out)) => threads.push(out),
                Ok(None) => {}
                Err(_) => panicked = true,
            }
        }
        let pages = bridge.join().unwrap_or_default();
        for (b, cpu_ns) in browsers.iter().zip(browser_cpu_ns) {
            // /proc gives user + system together; it is reported as user time.
            threads.push(ThreadOut {
                stats: Vec::new(),
                cpu: msgbench_model::result::ThreadCpu {
                    role: format!("{} (Chromium, all its processes)", b.name),
                    pinned_cpu: None,
                    cpu: msgbench_model::result::CpuTimes {
                        user_s: cpu_ns as f64 / 1e9,
                        ..Default::default()
                    },
                },
            });
        }
        drop(browsers);
        let recording = collecting
            .join()
            .map_err(|_| EngineError::WorkerPanicked("collector"))?;
        if panicked {
            return Err(EngineError::WorkerPanicked("tick client"));
        }
        Ok((
            threads,
            pages,
            schedule,
            window_end_ns.saturating_sub(measure_start_ns),
            sut_cpu_s,
            recording,
        ))
    }

    /// Waits for the clients to finish, ends the schedule early on Ctrl-C, reads the SUT's and
    /// the browsers' CPU at the window's edges. Returns the window's end, the SUT's CPU seconds
    /// and each browser's CPU ns over it.
    fn supervise(
        &self,
        schedule: Schedule,
        drain_ns: u64,
        handles: &[std::thread::JoinHandle<Option<ThreadOut>>],
        bridge: &std::thread::JoinHandle<Vec<StreamStats>>,
        browsers: &[browser::Browser],
    ) -> (u64, Option<f64>, Vec<u64>) {
        let browser_cpu = || browsers.iter().map(|b| b.cpu_ns()).collect::<Vec<_>>();
        let mut browsers_start = Vec::new();
        let mut browsers_end = Vec::new();
        let sut_cpu = || {
            self.server
                .as_ref()
                .map(|s| s.cpu_ns())
                .or_else(|| self.external.as_ref().map(|p| p.cpu_ns()))
        };
        let mut cpu_start = None;
        let mut cpu_end = None;
        let mut window_end = schedule.end_ns;
        let mut stopped = false;
        loop {
            let now = crate::clock::now_ns();
            if cpu_start.is_none() && now >= schedule.measure_start_ns {
                cpu_start = sut_cpu();
                browsers_start = browser_cpu();
            }
            let end = self.shared.end_ns.load(Ordering::Relaxed);
            if cpu_end.is_none() && now >= end {
                cpu_end = sut_cpu();
                browsers_end = browser_cpu();
            }
            let stop_asked =
                self.ctx.stop.load(Ordering::Relaxed) || self.shared.stopped_by.get().is_some();
            if stop_asked && !stopped && now < end {
                stopped = true;
                window_end = now.max(schedule.measure_start_ns);
                self.shared.end_ns.fetch_min(window_end, Ordering::SeqCst);
                self.shared
                    .deadline_ns
                    .fetch_min(now + drain_ns, Ordering::SeqCst);
                if let Some(s) = &self.server {
                    s.end_at(window_end);
                }
                cpu_end = sut_cpu();
                browsers_end = browser_cpu();
            }
            let clients_done = handles.iter().all(|h| h.is_finished())
                && (browsers.is_empty() || bridge.is_finished());
            if clients_done {
                break;
            }
            std::thread::sleep(SUPERVISE_EVERY);
        }
        let cpu_end = cpu_end.or_else(sut_cpu);
        let sut_cpu_s = match (cpu_start, cpu_end) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9),
            _ => None,
        };
        if browsers_end.is_empty() {
            browsers_end = browser_cpu();
        }
        let browsers_cpu = browsers_end
            .iter()
            .enumerate()
            .map(|(i, end)| end.saturating_sub(browsers_start.get(i).copied().unwrap_or(*end)))
            .collect();
        (window_end, sut_cpu_s, browsers_cpu)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        mut self,
        threads: Vec<ThreadOut>,
        pages: Vec<StreamStats>,
        schedule: Schedule,
        window_ns: u64,
        sut_cpu_s: Option<f64>,
        mut recording: crate::recorder::Recording,
        process_before: CpuSnapshot,
    ) -> Result<Measured, EngineError> {
        let server_report = self.server.take().map(TickServer::stop);
        let mut notes = Vec::new();
        if let Some(p) = self.external.as_mut() {
            notes.extend(p.exited());
        }
        let mut clients: Vec<StreamStats> = Vec::new();
        let mut cpus = Vec::new();
        for t in threads {
            clients.extend(t.stats);
            cpus.push(t.cpu);
        }
        clients.extend(pages);
        clients.sort_by_key(|c| (c.group, natural(&c.name)));
        let deadline_ns = self.shared.deadline_ns.load(Ordering::Relaxed);
        let streams = join_streams(
            &clients,
            server_report.as_ref(),
            self.ticks,
            schedule,
            deadline_ns,
        );
        if let Some(report) = &server_report {
            recording_send_lag(&mut recording, report);
            notes.extend(server_notes(report));
        }
        for s in streams.iter().filter(|s| s.closed.is_some()) {
            notes.push(format!(
                "client {} ended early: {}",
                s.name,
                s.closed.as_deref().unwrap_or_default()
            ));
        }
        let (counters, sequence) = totals(&streams);
        recording.counters = counters;
        recording.sequence = sequence;
        patch_intervals(&mut recording.intervals, &streams);
        let mut faults = msgbench_model::result::Faults::default();
        for s in &streams {
            faults.add(&s.faults);
        }
        let stopped_by = self.shared.stopped_by.get().cloned();
        if let Some(why) = &stopped_by {
            notes.insert(0, format!("stopped early: {why}"));
        }
        let now_ns = crate::clock::now_ns();
        Ok(Measured {
            recording,
            classes: self.ticks.groups.iter().map(|g| g.name.clone()).collect(),
            window_ns,
            window_start_unix_ms: crate::environment::unix_ms()
                - now_ns.saturating_sub(schedule.measure_start_ns) / 1_000_000,
            process_cpu: CpuSnapshot::process().since(&process_before),
            threads: cpus,
            // A Ctrl-C during the drain leaves the window whole.
            interrupted: window_ns < self.scenario.run.duration.as_nanos() as u64
                && (self.ctx.stop.load(Ordering::Relaxed) || stopped_by.is_some()),
            config: self.scenario.system.describe(),
            faults,
            sut_cpu_s,
            notes,
            streams,
        })
    }
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
    for (gi, g) in ticks.groups.iter().enumerate() {
        match g.kind {
            ClientKind::Native => {
                let mut group_threads: Vec<ThreadPlan> = (0..g.threads)
                    .map(|t| ThreadPlan {
                        role: format!("client-{}-{t}", g.name),
                        pin: g.pin.get(t).copied(),
                        conns: Vec::new(),
                    })
                    .collect();
                for i in 0..g.connections {
                    let name = g.connection_name(i);
                    group_threads[i % g.threads].conns.push(ConnPlan {
                        url: format!(
                            "{base}{separator}client={name}&format={}",
                            ticks.format.name()
                        ),
                        name,
                        group: gi,
                        cost_ns: g.cost_ns,
                        work: g.work,
                    });
                }
                threads.extend(group_threads);
            }
            ClientKind::Browser => {
                for i in 0..g.connections {
                    let name = g.connection_name(i);
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
    }
    (threads, browsers)
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

/// The run's accounting: the sum of its clients'.
fn totals(streams: &[StreamClient]) -> (Counters, SequenceErrors) {
    let mut c = Counters::default();
    let mut s = SequenceErrors::default();
    for client in streams {
        let x = client.counters;
        c.attempted += x.attempted;
        c.sent += x.sent;
        c.skipped += x.skipped;
        c.delivered += x.delivered;
        c.dropped += x.dropped;
        c.failed += x.failed;
        c.in_flight_end += x.in_flight_end;
        s.gaps += client.sequence.gaps;
        s.duplicates += client.sequence.duplicates;
        s.reordered += client.sequence.reordered;
    }
    (c, s)
}

/// The run's seconds get the server's side of the flow: sent = generated for all clients,
/// dropped, and the backlog (generated − delivered − dropped, cumulative).
fn patch_intervals(intervals: &mut [IntervalSample], streams: &[StreamClient]) {
    let mut backlog = 0i64;
    for (k, sample) in intervals.iter_mut().enumerate() {
        let (generated, dropped) = streams
            .iter()
            .filter_map(|s| s.intervals.get(k))
            .fold((0, 0), |(g, d), i| (g + i.generated, d + i.dropped));
        if streams.iter().any(|s| s.server.is_some()) {
            sample.sent = generated;
            sample.dropped = dropped;
            backlog += generated as i64 - sample.delivered as i64 - dropped as i64;
            sample.backlog = backlog;
        } else {
            sample.sent = sample.delivered;
            sample.backlog = 0;
        }
    }
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
