//! The stream subscribers' run (`ticks`) on the harness's frame
//! ([`crate::harness::threads::run_around`]):
//!
//! 1. the native client threads connect (a refused address or a non-WebSocket peer fails the
//!    run before anything starts, with one message);
//! 2. the browsers are launched and every client of the built-in server must have subscribed
//!    (browsers first sync their clock) — [`Supervisor::before_start`];
//! 3. the timeline is the tick schedule: handed to the clients and the built-in server, which
//!    starts generating — [`Supervisor::starting`];
//! 4. the stream ends (the server sends `end` once its schedule ran and a client's queue is
//!    empty), or the drain deadline passes, or Ctrl-C ends the schedule early for the server
//!    and every client — [`Supervisor::watch`];
//! 5. both ends are joined: per client, what the server generated, dropped, wrote and saw
//!    acknowledged, and what the client processed and when ([`super::outcome`]).
use super::browser;
use super::outcome::{self, Measurement};
use super::stream_stats::{self as stats, StreamStats};
use super::tick_client::{self as native, Shared, ThreadOut};
use crate::error::EngineError;
use crate::harness::threads::{run_around, Around, ReadyRun, Watch};
use crate::harness::{Measured, RunContext, SystemUnderTest, Timeline};
use crate::net::tick::{PageReport, Schedule};
use crate::recorder::Collector;
use crate::server::ticks::TickServer;
use msgbench_model::scenario::Scenario;
use msgbench_model::ticks::TicksConfig;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
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

/// One `ticks` run: what the system file set up.
pub struct StreamRun<'a> {
    /// The scenario.
    pub scenario: &'a Scenario,
    /// Its `[ticks]` section.
    pub ticks: &'a TicksConfig,
    /// Ctrl-C and live figures.
    pub ctx: &'a RunContext,
    /// What every client thread and the supervisor share.
    pub shared: Arc<Shared>,
    /// The tick server: built in, started by `[sut]`, or an address.
    pub sut: SystemUnderTest<TickServer>,
    /// The stream's URL (`ws://…/ticks`, a feed's, or a gRPC server's).
    pub base: String,
    /// Where to get a server, for error messages.
    pub hint: &'static str,
    /// This process's CPU before the server started.
    pub process_before: crate::cpu::CpuSnapshot,
}

/// Runs the clients against the server and joins what both ends saw.
pub fn drive(run: StreamRun<'_>) -> Result<Measured, EngineError> {
    let outcome = run.measure();
    if outcome.is_err() {
        run.shared.abort.store(true, Ordering::SeqCst);
    }
    run.finish(outcome?)
}

impl StreamRun<'_> {
    fn measure(&self) -> Result<Measurement, EngineError> {
        let (plans, pages) = outcome::plans(self.ticks, &self.base);
        let workers: Vec<_> = plans
            .into_iter()
            .map(|p| {
                (
                    p.role.clone(),
                    native::worker(p, self.shared.clone(), self.hint),
                )
            })
            .collect();
        let mut around = Supervisor {
            run: self,
            pages,
            browsers: Vec::new(),
            reports: None,
            bridge: None,
            schedule: None,
            span_end_ns: 0,
            browsers_cpu_ns: Vec::new(),
        };
        let plan = ReadyRun {
            run: &self.scenario.run,
            classes: self.ticks.groups.len(),
            live: self.ctx.live.clone(),
            role: "tick client",
        };
        let read_sut = || self.sut.cpu_ns();
        let mut recorder_for = |c: &mut Collector, _| c.recorder(true);
        let ran = run_around(plan, &read_sut, workers, &mut recorder_for, &mut around)?;
        let (mut threads, panicked) = join_natives(ran.workers);
        let pages = (around.bridge.take()).map_or_else(Vec::new, |b| b.join().unwrap_or_default());
        threads.extend(outcome::browser_threads(
            &around.browsers,
            &around.browsers_cpu_ns,
        ));
        if panicked {
            return Err(EngineError::WorkerPanicked("tick client"));
        }
        let schedule = around.schedule.expect("set when the timeline started");
        Ok(Measurement {
            threads,
            pages,
            schedule,
            span_ns: around.span_end_ns.saturating_sub(schedule.measure_start_ns),
            sut_cpu_s: ran.sut_cpu_s,
            recording: ran.recording,
        })
    }
}

impl StreamRun<'_> {
    /// Joins both ends of the run into what the system hands the runner.
    fn finish(mut self, m: Measurement) -> Result<Measured, EngineError> {
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
        clients.sort_by_key(|c| (c.group, outcome::natural(&c.name)));
        let deadline_ns = self.shared.deadline_ns.load(Ordering::Relaxed);
        let streams = outcome::join_streams(
            &clients,
            server_report.as_ref(),
            self.ticks,
            m.schedule,
            deadline_ns,
        );
        if let Some(report) = &server_report {
            outcome::recording_send_lag(&mut recording, report);
            notes.extend(outcome::server_notes(report));
        }
        notes.extend(streams.iter().filter_map(|s| {
            let why = s.closed.as_deref()?;
            Some(format!("client {} ended early: {why}", s.name))
        }));
        notes.extend(outcome::first_protocol_error(&clients));
        notes.extend(outcome::behind_notes(&streams, self.ticks.behind_limit_ns));
        let mut faults = msgbench_model::result::Faults::default();
        let (counters, sequence) = stats::run_sums(&streams, &mut faults);
        recording.counters = counters;
        recording.sequence = sequence;
        // Known from the built-in server, or from a feed's sequence numbers (see FeedSide).
        let generated_known = !streams.is_empty();
        stats::patch_run_intervals(&mut recording.intervals, &streams, generated_known);
        let mut info = outcome::info(self.ticks);
        info.extend(outcome::datagram_note(self.ticks, &streams));
        let stopped_by = (self.shared.stopped_by.get().cloned())
            .or_else(|| outcome::every_client_gone(&clients, &streams, m.schedule));
        Ok(Measured {
            recording,
            classes: self.ticks.groups.iter().map(|g| g.name.clone()).collect(),
            span_ns: m.span_ns,
            span_start_unix_ms: crate::harness::measured::unix_ms_of(m.schedule.measure_start_ns),
            process_cpu: crate::cpu::CpuSnapshot::process().since(&self.process_before),
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
            info,
            publish_latency: None,
            pubsub_shard: None,
        })
    }
}

/// What `ticks` starts and watches around its client threads: the browsers, the bridge that
/// records their pages' reports, the built-in server's schedule.
struct Supervisor<'r, 'a> {
    run: &'r StreamRun<'a>,
    /// `(name, group, page query)` of each browser client.
    pages: Vec<(String, usize, String)>,
    browsers: Vec<browser::Browser>,
    /// Where the built-in server forwards the pages' reports, until the bridge takes them.
    reports: Option<Receiver<(String, PageReport)>>,
    bridge: Option<JoinHandle<Vec<StreamStats>>>,
    schedule: Option<Schedule>,
    /// Where the measured span ended (clock ns).
    span_end_ns: u64,
    /// Each browser's CPU over the span, ns.
    browsers_cpu_ns: Vec<u64>,
}

impl Around for Supervisor<'_, '_> {
    fn before_start(&mut self) -> Result<(), EngineError> {
        let (report_tx, report_rx) = channel();
        self.reports = Some(report_rx);
        self.browsers = self.launch_browsers(report_tx)?;
        self.wait_subscribed()
    }

    /// Clients still connecting stop at their next connection.
    fn called_off(&mut self) {
        self.run.shared.abort.store(true, Ordering::SeqCst);
    }

    fn starting(&mut self, timeline: &Timeline, collector: &mut Collector) {
        let schedule = self.fix_schedule(timeline);
        let run = self.run;
        if run.sut.builtin.is_some() {
            collector.keep_off(&run.ticks.server.pin);
        }
        let pages: Vec<browser::PageClient> = (self.pages.iter())
            .map(|(name, group, _)| browser::PageClient {
                name: name.clone(),
                group: *group,
                recorder: collector.recorder(false),
            })
            .collect();
        if let Some(server) = &run.sut.builtin {
            server.begin(schedule);
        }
        let reports = self.reports.take().expect("made before the start");
        let shared = run.shared.clone();
        self.bridge = Some(
            std::thread::Builder::new()
                .name("msgbench-browser-bridge".into())
                .spawn(move || browser::bridge(reports, pages, schedule, &shared))
                .expect("spawning a thread"),
        );
    }

    /// Waits for the clients to finish, ends the schedule early on Ctrl-C or a client's stop,
    /// reads the SUT's and the browsers' CPU at the span's edges.
    fn watch(&mut self, timeline: &Timeline, watch: Watch<'_>) -> Option<f64> {
        let mut cpu = watch.cpu;
        let (mut browsers_start, mut browsers_end) = (Vec::new(), Vec::new());
        self.span_end_ns = timeline.end_ns;
        let mut stopped = false;
        loop {
            let now = crate::clock::now_ns();
            if !cpu.has_started() && now >= timeline.measure_start_ns {
                cpu.started();
                browsers_start = self.browsers_cpu();
            }
            let end = self.run.shared.end_ns.load(Ordering::Relaxed);
            if browsers_end.is_empty() && now >= end {
                cpu.ended();
                browsers_end = self.browsers_cpu();
            }
            if self.stop_asked() && !stopped && now < end {
                stopped = true;
                self.span_end_ns = self.end_early(timeline, now);
                cpu.ended();
                browsers_end = self.browsers_cpu();
            }
            if self.run.ctx.stop.load(Ordering::Relaxed) {
                // Ctrl-C, also during the drain: the run is written within a second.
                let drain_end = timeline.drain_deadline(end.min(now), true);
                (self.run.shared.deadline_ns).fetch_min(drain_end, Ordering::SeqCst);
            }
            if self.clients_done(watch.done) {
                break;
            }
            std::thread::sleep(SUPERVISE_EVERY);
        }
        if browsers_end.is_empty() {
            browsers_end = self.browsers_cpu();
        }
        self.browsers_cpu_ns = (browsers_end.iter().enumerate())
            .map(|(i, end)| end.saturating_sub(browsers_start.get(i).copied().unwrap_or(*end)))
            .collect();
        cpu.seconds()
    }
}

impl Supervisor<'_, '_> {
    /// Starts a headless Chromium per browser client, reporting to `reports`.
    fn launch_browsers(
        &self,
        reports: Sender<(String, PageReport)>,
    ) -> Result<Vec<browser::Browser>, EngineError> {
        let mut browsers = Vec::new();
        if self.pages.is_empty() {
            return Ok(browsers);
        }
        let server = (self.run.sut.builtin.as_ref()).expect("validated: browsers need ours");
        server.report_to(reports);
        let binary = browser::chromium()?;
        for (name, _, url) in &self.pages {
            let page = format!("http://{}/{url}", server.local_addr());
            browsers.push(browser::Browser::launch(&binary, name, &page)?);
        }
        Ok(browsers)
    }

    /// Waits until every client of the built-in server subscribed (browsers sync their clock
    /// first).
    fn wait_subscribed(&mut self) -> Result<(), EngineError> {
        let Some(server) = &self.run.sut.builtin else {
            // Someone else's server: the clients said they are subscribed; Ctrl-C meanwhile
            // ends the run before it starts, as it does with ours.
            return match self.run.ctx.stop.load(Ordering::Relaxed) {
                true => Err(EngineError::Browser(
                    "interrupted while the clients connected".into(),
                )),
                false => Ok(()),
            };
        };
        let names: Vec<String> = (self.run.ticks.groups.iter())
            .flat_map(|g| (0..g.connections).map(|i| g.connection_name(i)))
            .collect();
        let missing = server.wait_ready(&names, READY_TIMEOUT, &self.run.ctx.stop);
        if self.run.ctx.stop.load(Ordering::Relaxed) {
            return Err(EngineError::Browser(
                "interrupted while waiting for the clients to subscribe".into(),
            ));
        }
        let Some(name) = missing.first() else {
            return Ok(());
        };
        let tail = (self.browsers.iter_mut())
            .find(|b| &b.name == name)
            .map(|b| format!("; Chromium's output: {}", b.output_tail()))
            .unwrap_or_default();
        Err(EngineError::Browser(format!(
            "client `{name}` did not subscribe within {} s{tail}",
            READY_TIMEOUT.as_secs()
        )))
    }

    /// Hands the timeline to the clients (as the tick schedule) and returns it.
    fn fix_schedule(&mut self, timeline: &Timeline) -> Schedule {
        let schedule = Schedule {
            t0_ns: timeline.t0_ns,
            measure_start_ns: timeline.measure_start_ns,
            end_ns: timeline.end_ns,
        };
        let shared = &self.run.shared;
        shared.schedule.set(schedule).expect("set once");
        shared.end_ns.store(schedule.end_ns, Ordering::SeqCst);
        let deadline = timeline.drain_deadline(schedule.end_ns, false);
        shared.deadline_ns.store(deadline, Ordering::SeqCst);
        self.schedule = Some(schedule);
        schedule
    }

    /// Ctrl-C, or a client's connection closed under `on_close = stop`.
    fn stop_asked(&self) -> bool {
        self.run.ctx.stop.load(Ordering::Relaxed) || self.run.shared.stopped_by.get().is_some()
    }

    /// Every client thread ended (each held its `done` until then) and the browsers' bridge.
    fn clients_done(&self, done: &Receiver<()>) -> bool {
        let threads_ended = loop {
            match done.try_recv() {
                Ok(()) => continue,
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        threads_ended && self.bridge.as_ref().is_none_or(|b| b.is_finished())
    }

    fn browsers_cpu(&self) -> Vec<u64> {
        self.browsers.iter().map(|b| b.cpu_ns()).collect()
    }

    /// Ctrl-C or an error that stops the run at `now`: the schedule ends [`END_MARGIN_NS`]
    /// from now, the drain after that. Returns the span's end.
    fn end_early(&self, timeline: &Timeline, now: u64) -> u64 {
        let span_end_ns = (now + END_MARGIN_NS)
            .min(timeline.end_ns)
            .max(timeline.measure_start_ns);
        let shared = &self.run.shared;
        shared.end_ns.fetch_min(span_end_ns, Ordering::SeqCst);
        let stop = self.run.ctx.stop.load(Ordering::Relaxed);
        let deadline = timeline.drain_deadline(span_end_ns, stop);
        shared.deadline_ns.fetch_min(deadline, Ordering::SeqCst);
        if let Some(s) = &self.run.sut.builtin {
            s.end_at(span_end_ns);
        }
        span_end_ns
    }
}

/// What the native client threads returned; true when one panicked.
fn join_natives(joined: Vec<std::thread::Result<Option<ThreadOut>>>) -> (Vec<ThreadOut>, bool) {
    let mut threads = Vec::new();
    let mut panicked = false;
    for j in joined {
        match j {
            Ok(Some(out)) => threads.push(out),
            Ok(None) => {}
            Err(_) => panicked = true,
        }
    }
    (threads, panicked)
}
