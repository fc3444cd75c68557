//! The `ws-rpc` system: JSON-RPC 2.0 over WebSocket, as a wallet or an indexer calls a node
//! (`eth_chainId`). Each of `client.threads` caller threads owns `client.connections`
//! connections, each with the request/response driver's pacer and window
//! ([`crate::systems::window`]); a socket thread per caller ([`socket`]) owns the WebSockets.
//! The caller hands requests over through an SPSC ring; responses come back through another,
//! and the caller waits for them with `ws_rpc.wait` — `busy-spin`, `yield`, `park` or
//! `backoff` — the hand-off the wait-strategy report compared. A response counts as complete
//! when the caller has taken it: the hand-off is part of the latency, as it is for a real
//! caller.
use super::window::{Budget, Failure, Launcher, Rules, Window};
use crate::affinity::pin_current_thread;
use crate::clock::{lower_timer_slack, Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::recorder::{Collector, Recorder};
use crate::server::ws_rpc::{MethodAnswer, WsRpcServer};
use crate::sut::SutProcess;
use crate::systems::{EngineError, Measured, RunContext};
use crate::wait::Waiter;
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::result::{Faults, ThreadCpu};
use msgbench_model::rpc::SutConfig;
use msgbench_model::scenario::Scenario;
use msgbench_model::ws_rpc::WsRpcConfig;
use socket::{Down, Event, Request, RESET};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub mod socket;

/// Lead time for every thread to be ready before the schedule starts.
const START_LEAD_NS: u64 = 20_000_000;
/// Longest a caller waits without looking at the stop flag.
const STOP_CHECK_NS: u64 = 20_000_000;

/// What a protocol error of `ws-rpc` is.
const NOT_A_RESPONSE: &str = "something that is not a response to a request in flight";

const HINT: &str = "(start msgbench's own with `msgbench serve ws-rpc --listen HOST:PORT`, let `[sut] command` start one, or omit `ws_rpc.address` to run the built-in server in-process)";

/// Runs one `ws-rpc` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    ws_rpc: &WsRpcConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = None;
    let mut external = None;
    let url = match &ws_rpc.address {
        None => {
            let answers = ws_rpc
                .methods
                .iter()
                .map(|m| MethodAnswer {
                    method: m.method.clone(),
                    result_json: m.result_json.clone(),
                    service_ns: m.service_ns,
                    work: m.work,
                })
                .collect();
            let s = WsRpcServer::start(&ws_rpc.server, answers, ([127, 0, 0, 1], 0).into())
                .map_err(EngineError::Server)?;
            let url = format!("ws://{}/", s.local_addr());
            server = Some(s);
            url
        }
        Some(address) => {
            if let Some(cfg) = sut {
                external = Some(SutProcess::start(cfg, &ctx.stop)?);
            }
            address.clone()
        }
    };
    let sut_cpu = || {
        server
            .as_ref()
            .map(|s| s.cpu_ns())
            .or_else(|| external.as_ref().map(|p| p.cpu_ns()))
    };
    let out = drive(scenario, client, ws_rpc, &url, ctx, &sut_cpu)?;
    let mut notes = Vec::new();
    if let Some(p) = external.as_mut() {
        notes.extend(p.exited());
    }
    if let Some(s) = server {
        let report = s.stop();
        if report.errors > 0 {
            notes.push(format!(
                "the built-in server answered {} requests with a JSON-RPC error",
                report.errors
            ));
        }
        if report.counts.protocol_errors > 0 {
            notes.push(format!(
                "the built-in server closed {} connections for bad frames",
                report.counts.protocol_errors
            ));
        }
    }
    Ok(super::client::measured(
        out,
        ws_rpc.methods.iter().map(|m| m.name.clone()).collect(),
        process_before,
        scenario.system.describe(),
        notes,
    ))
}

/// When the measured run happens, sent to every caller once all are connected.
#[derive(Debug, Clone, Copy)]
struct Start {
    t0_ns: u64,
    measure_start_ns: u64,
    end_ns: u64,
}

/// What the callers share.
struct Shared<'a> {
    scenario: &'a Scenario,
    client: &'a ClientConfig,
    ws_rpc: &'a WsRpcConfig,
    url: &'a str,
    shares: Vec<f64>,
    stop: &'a AtomicBool,
    stopped_by: OnceLock<String>,
    window_end_ns: AtomicU64,
}

impl Shared<'_> {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.stopped_by.get().is_some()
    }
}

fn drive(
    scenario: &Scenario,
    client: &ClientConfig,
    ws_rpc: &WsRpcConfig,
    url: &str,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<super::client::DriverOutput, EngineError> {
    let shared = Shared {
        scenario,
        client,
        ws_rpc,
        url,
        shares: ws_rpc.methods.iter().map(|m| m.share).collect(),
        stop: &ctx.stop,
        stopped_by: OnceLock::new(),
        window_end_ns: AtomicU64::new(0),
    };
    let (ready_tx, ready_rx) = channel();
    let (done_tx, done_rx) = channel::<()>();
    std::thread::scope(|s| {
        let mut starts = Vec::new();
        let mut handles = Vec::new();
        for t in 0..client.threads {
            let (start_tx, start_rx) = channel::<(Start, Recorder)>();
            starts.push(start_tx);
            let (shared, ready, done) = (&shared, ready_tx.clone(), done_tx.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("msgbench-caller-{t}"))
                    .spawn_scoped(s, move || caller(shared, t, ready, start_rx, done))
                    .expect("spawning a thread"),
            );
        }
        drop((ready_tx, done_tx));
        let mut failed = None;
        for _ in 0..client.threads {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                Err(_) => {
                    failed = Some(EngineError::WorkerPanicked("ws-rpc caller"));
                    break;
                }
            }
        }
        if let Some(e) = failed {
            drop(starts); // every caller sees a closed channel and stops
            for h in handles {
                let _ = h.join();
            }
            return Err(e);
        }
        let t0 = crate::clock::now_ns() + START_LEAD_NS;
        let measure_start_ns = t0 + scenario.run.warmup.as_nanos() as u64;
        let end_ns = match (scenario.run.duration.is_zero(), scenario.run.operations) {
            (true, Some(_)) => u64::MAX,
            _ => measure_start_ns.saturating_add(scenario.run.duration.as_nanos() as u64),
        };
        let start = Start {
            t0_ns: t0,
            measure_start_ns,
            end_ns,
        };
        let raw_cap = scenario.run.emit_latencies.unwrap_or(0) as usize / client.threads;
        let mut collector = Collector::new(ws_rpc.methods.len(), measure_start_ns, raw_cap);
        for tx in &starts {
            let _ = tx.send((start, collector.recorder(true)));
        }
        let collecting = collector.start(ctx.live.clone());
        // The SUT's CPU at the window's edges: its start, and when every caller stopped sending.
        while crate::clock::now_ns() < measure_start_ns && !handles.iter().all(|h| h.is_finished())
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let start_cpu = sut_cpu_ns();
        let mut done = 0;
        while done < client.threads && done_rx.recv().is_ok() {
            done += 1;
        }
        let end_cpu = sut_cpu_ns();
        let gathered = super::client::gather(
            handles
                .into_iter()
                .map(|h| h.join().map(|r| r.map(Option::unwrap_or_default))),
            "ws-rpc caller",
        );
        let recording = collecting
            .join()
            .map_err(|_| EngineError::WorkerPanicked("collector"))?;
        let (threads, faults) = gathered?;
        let stopped_by = shared.stopped_by.get().cloned();
        Ok(super::client::DriverOutput {
            recording,
            window_ns: shared
                .window_end_ns
                .load(Ordering::Relaxed)
                .saturating_sub(measure_start_ns),
            measure_start_ns,
            threads,
            faults,
            interrupted: ctx.stop.load(Ordering::Relaxed) || stopped_by.is_some(),
            stopped_by,
            sut_cpu_s: match (start_cpu, end_cpu) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9),
                _ => None,
            },
        })
    })
}

/// One connection as its caller sees it.
struct Conn {
    window: Window,
    launcher: Launcher,
    up: bool,
}

type CallerResult = Result<Option<(Vec<ThreadCpu>, Faults)>, EngineError>;

/// A caller thread: starts its socket thread, then paces, hands requests over and takes
/// responses back until its schedule and drain are over.
fn caller(
    shared: &Shared,
    t: usize,
    ready: Sender<Result<(), EngineError>>,
    start: Receiver<(Start, Recorder)>,
    done: Sender<()>,
) -> CallerResult {
    let client = shared.client;
    let pin = client.pin.get(t).copied();
    lower_timer_slack();
    if let Some(cpu) = pin {
        if let Err(source) = pin_current_thread(cpu) {
            let _ = ready.send(Err(EngineError::Pin {
                role: "ws-rpc caller",
                cpu,
                source,
            }));
            return Ok(None);
        }
    }
    let waiter = Waiter::new(shared.ws_rpc.wait);
    // Room for every request in flight, plus a reset and two state changes per connection.
    let capacity = (client.window + 3) * client.connections + 16;
    let (req_tx, req_rx) = crate::ring::channel::<Request>(capacity);
    let (ev_tx, ev_rx) = crate::ring::channel::<Event>(capacity);
    let notify = Arc::new(tokio::sync::Notify::new());
    let socket_stop = Arc::new(AtomicBool::new(false));
    let plan = socket::Plan {
        url: shared.url.to_string(),
        connections: client.connections,
        pin: shared.ws_rpc.socket_pin.get(t).copied(),
        prefixes: shared
            .ws_rpc
            .methods
            .iter()
            .map(|m| {
                format!(
                    r#"{{"jsonrpc":"2.0","method":"{}","params":{},"id":"#,
                    m.method, m.params_json
                )
            })
            .collect(),
        reconnect: client.on_error == OnError::Reconnect,
        hint: HINT.to_string(),
    };
    let socket_cpu = Arc::new(OnceLock::new());
    let ends = socket::Ends {
        cpu_clock: socket_cpu.clone(),
        requests: req_rx,
        events: ev_tx,
        notify: notify.clone(),
        caller: Waiter::may_park(shared.ws_rpc.wait).then(|| waiter.sleeper()),
        stop: socket_stop.clone(),
    };
    let socket = std::thread::Builder::new()
        .name(format!("msgbench-socket-{t}"))
        .spawn(move || socket::run(plan, ends, ready))
        .expect("spawning a thread");
    let stop_socket = || {
        socket_stop.store(true, Ordering::Release);
        notify.notify_one();
    };
    let Ok((when, rec)) = start.recv() else {
        stop_socket();
        let _ = socket.join();
        let _ = done.send(());
        return Ok(None);
    };
    let me = Caller {
        shared,
        index: t,
        conns: (0..client.connections)
            .map(|c| Conn {
                window: Window::new(client.window),
                launcher: Launcher::new(
                    shared.scenario,
                    when.t0_ns,
                    t * client.connections + c,
                    client.total_connections(),
                ),
                up: true,
            })
            .collect(),
        rules: Rules {
            client,
            shares: &shared.shares,
            measure_start_ns: when.measure_start_ns,
            end_ns: when.end_ns,
        },
        rec,
        faults: Faults::default(),
        clock: MonotonicClock::new(client.spin_ns),
        budget: Budget::share(shared.scenario.run.operations, client.threads, t),
        requests: req_tx,
        events: ev_rx,
        notify: notify.clone(),
        waiter,
        socket_cpu,
    };
    let (cpu, socket_cpu_ns, faults) = me.run(when, &done);
    stop_socket();
    let _ = socket.join();
    Ok(Some((
        vec![
            ThreadCpu {
                role: format!("caller-{t}"),
                pinned_cpu: pin,
                cpu,
            },
            // Its CPU clock gives user + system together; reported as user time.
            ThreadCpu {
                role: format!("socket-{t}"),
                pinned_cpu: shared.ws_rpc.socket_pin.get(t).copied(),
                cpu: msgbench_model::result::CpuTimes {
                    user_s: socket_cpu_ns as f64 / 1e9,
                    ..Default::default()
                },
            },
        ],
        faults,
    )))
}

struct Caller<'a> {
    shared: &'a Shared<'a>,
    index: usize,
    conns: Vec<Conn>,
    rules: Rules<'a>,
    rec: Recorder,
    faults: Faults,
    clock: MonotonicClock,
    budget: Budget,
    requests: crate::ring::Producer<Request>,
    events: crate::ring::Consumer<Event>,
    notify: Arc<tokio::sync::Notify>,
    waiter: Waiter,
    socket_cpu: Arc<OnceLock<crate::server::ThreadCpuClock>>,
}

impl Caller<'_> {
    /// The caller's loop; returns its CPU and its socket thread's (ns) over the measured window,
    /// and its faults.
    fn run(
        mut self,
        when: Start,
        done: &Sender<()>,
    ) -> (msgbench_model::result::CpuTimes, u64, Faults) {
        let socket_ns = |c: &OnceLock<crate::server::ThreadCpuClock>| c.get().map(|c| c.read_ns());
        let mut socket_before = None;
        let mut socket_used = 0;
        let drain_ns = self.shared.scenario.run.drain_timeout.as_nanos() as u64;
        self.clock.sleep_until(when.t0_ns);
        let mut cpu_before: Option<CpuSnapshot> = None;
        let mut cpu_used = Default::default();
        let mut sending = true;
        let mut send_end_ns = 0;
        loop {
            let now = self.clock.now_ns();
            self.rec.roll_if_due(now);
            if sending {
                if cpu_before.is_none() && now >= when.measure_start_ns {
                    cpu_before = Some(CpuSnapshot::thread());
                    socket_before = socket_ns(&self.socket_cpu);
                }
                let all_done = self.conns.iter().all(|c| c.launcher.done);
                if self.shared.stopping() || self.budget.spent() || all_done {
                    sending = false;
                    send_end_ns = if all_done { now.max(when.end_ns) } else { now };
                    cpu_used = cpu_before
                        .map(|b| CpuSnapshot::thread().since(&b))
                        .unwrap_or_default();
                    if let (Some(b), Some(a)) = (socket_before, socket_ns(&self.socket_cpu)) {
                        socket_used = a.saturating_sub(b);
                    }
                    self.shared
                        .window_end_ns
                        .fetch_max(send_end_ns.max(when.measure_start_ns), Ordering::Relaxed);
                    let _ = done.send(());
                } else {
                    self.send_due(now);
                }
            }
            let progressed = self.take_events();
            self.check_timeouts(self.clock.now_ns());
            let in_flight: usize = self.conns.iter().map(|c| c.window.in_flight()).sum();
            if !sending && (in_flight == 0 || now > send_end_ns.saturating_add(drain_ns)) {
                break;
            }
            if progressed {
                self.waiter.progressed();
                continue;
            }
            self.wait(
                now,
                sending,
                in_flight,
                send_end_ns.saturating_add(drain_ns),
            );
        }
        let left: u64 = self
            .conns
            .iter()
            .map(|c| c.window.measured_in_flight())
            .sum();
        self.rec.in_flight_at_end(left);
        let now = self.clock.now_ns();
        self.rec.finish(now);
        (cpu_used, socket_used, self.faults)
    }

    fn send_due(&mut self, now: u64) {
        let mut pushed = false;
        for (i, c) in self.conns.iter_mut().enumerate() {
            let requests = &mut self.requests;
            c.launcher.send_due(
                &mut c.window,
                c.up,
                now,
                &self.rules,
                &self.clock,
                &mut self.budget,
                &mut self.rec,
                |l| {
                    // The ring holds every request the windows allow: this cannot fail.
                    let _ = requests.push(Request {
                        conn: i as u32,
                        class: l.class as u32,
                        id: l.id,
                    });
                    pushed = true;
                },
            );
        }
        if pushed {
            self.notify.notify_one();
        }
    }

    /// Takes every response and state change the socket thread handed over.
    fn take_events(&mut self) -> bool {
        let mut any = false;
        while let Some(event) = self.events.pop() {
            any = true;
            match event {
                Event::Reply { conn, id, ok } => {
                    let now = self.clock.now_ns();
                    let c = &mut self.conns[conn as usize];
                    if !c.up {
                        // An answer to a request that already failed with its connection.
                        continue;
                    }
                    let Some(f) = c.window.complete(id) else {
                        self.fail(conn as usize, Failure::Protocol(NOT_A_RESPONSE));
                        self.reset(conn as usize);
                        continue;
                    };
                    if !ok {
                        self.faults.server_errors += 1;
                    }
                    if f.measured {
                        if ok {
                            self.rec
                                .delivered(f.class as usize, f.intended_ns, f.sent_ns, now);
                        } else {
                            self.rec.failed();
                        }
                    }
                }
                Event::Down { conn, why } => {
                    let c = &mut self.conns[conn as usize];
                    c.up = false;
                    match why {
                        Down::Closed => self.fail(conn as usize, Failure::Closed),
                        Down::Protocol => {
                            self.fail(conn as usize, Failure::Protocol(NOT_A_RESPONSE))
                        }
                        Down::Reset => {}
                    }
                }
                Event::Up { conn } => self.conns[conn as usize].up = true,
                Event::ConnectFailed { handshake } => {
                    if handshake {
                        self.faults.handshake_failures += 1;
                    } else {
                        self.faults.connect_failures += 1;
                    }
                }
            }
        }
        any
    }

    fn check_timeouts(&mut self, now: u64) {
        let timeout = self.shared.client.timeout_ns;
        for i in 0..self.conns.len() {
            if self.conns[i]
                .window
                .oldest_deadline(timeout)
                .is_some_and(|d| now > d)
            {
                self.fail(i, Failure::Timeout);
                self.reset(i);
            }
        }
    }

    /// Asks for a fresh connection `i`: answers to failed requests may still come on the old
    /// one, and must not be taken for answers to new ones.
    fn reset(&mut self, i: usize) {
        if !self.conns[i].up {
            return;
        }
        self.conns[i].up = false;
        let _ = self.requests.push(Request {
            conn: i as u32,
            class: RESET,
            id: 0,
        });
        self.notify.notify_one();
    }

    /// Fails every request in flight on connection `i`; stops the run under `on_error = stop`.
    fn fail(&mut self, i: usize, why: Failure) {
        let rec = &mut self.rec;
        self.conns[i].window.fail_all(|f| {
            if f.measured {
                rec.failed();
            }
        });
        let what = why.count(&mut self.faults, self.shared.client.timeout_ns);
        if self.shared.client.on_error == OnError::Stop {
            let _ = self.shared.stopped_by.set(super::window::stop_message(
                &what,
                self.index * self.shared.client.connections + i,
                self.shared.url,
                self.clock.now_ns(),
                self.rules.measure_start_ns,
            ));
        }
    }

    /// Nothing happened: wait for the next send, a response, or the drain's end.
    fn wait(&mut self, now: u64, sending: bool, in_flight: usize, drain_end_ns: u64) {
        let mut wake = if sending { u64::MAX } else { drain_end_ns };
        if sending {
            for c in &mut self.conns {
                if c.up {
                    if let Some(w) = c.launcher.next_wake(&c.window, &self.rules, now) {
                        wake = wake.min(w);
                    }
                }
            }
            if self.rules.measure_start_ns > now {
                wake = wake.min(self.rules.measure_start_ns);
            }
        }
        for c in &mut self.conns {
            if let Some(d) = c.window.oldest_deadline(self.shared.client.timeout_ns) {
                wake = wake.min(d + 1);
            }
        }
        let wake = wake.min(now + STOP_CHECK_NS);
        if wake <= now {
            return;
        }
        if in_flight == 0 {
            // No response to wait for: sleep precisely to the next send, whatever the wait
            // strategy (it is about responses).
            self.clock.sleep_until(wake);
            return;
        }
        let events = &mut self.events;
        self.waiter.idle_at_most(
            || events.has_items(),
            Duration::from_nanos(wake.saturating_sub(now + self.clock.spin_ns).max(1)),
        );
    }
}
