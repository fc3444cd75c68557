//! Request/response through a socket thread: each of `client.threads` caller threads owns
//! `client.connections` connections, each with a [`Launcher`] (pacing and `when_full`) and an
//! [`InFlight`] table; a socket thread per caller owns the connections themselves — WebSockets
//! carrying JSON-RPC ([`super::ws_socket`], `ws-rpc`) or HTTP/2 streams
//! ([`crate::drivers::http2`], `http` with `version = "2"`). The caller hands requests over through
//! an SPSC ring; responses come back through another, and the caller waits for them with its
//! wait strategy — `busy-spin`, `yield`, `park` or `backoff` — the hand-off the wait-strategy
//! report compared. A response counts as complete when the caller has taken it: the hand-off
//! is part of the latency, as it is for a real caller. The run's timeline and the system under
//! test's CPU come from the [`crate::harness`]. This file defines what crosses the rings
//! ([`Request`], [`Event`]) and what a socket thread is given ([`Ends`], [`Sockets`]).
use super::in_flight::{close_recording, fail_all_counted, record_response, InFlight};
use super::launcher::{connection_budget, Budget, Counting, Launcher, Rules};
use crate::clock::{Clock, MonotonicClock};
use crate::cpu::{CpuSnapshot, ThreadCpuClock};
use crate::drivers::failure::{endless_stop_message, stop_message, Failure};
use crate::error::EngineError;
use crate::harness::threads::{run_after_ready, Handshake, ReadyRun, Start};
use crate::harness::STOP_CHECK_NS;
use crate::harness::{gather, worker, DriverOutput, RunContext, RunStop, Timeline};
use crate::recorder::{Collector, Recorder};
use crate::ring::{Consumer, Producer};
use crate::streamed::StreamFigures;
use crate::wait::{Sleeper, Waiter};
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::queue::WaitStrategy;
use msgbench_model::result::{CpuTimes, ErrorCount, Faults, ThreadCpu};
use msgbench_model::scenario::Scenario;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::task::Context;
use std::time::Duration;

/// `Request::class` of a request to drop the connection and open a new one.
pub const RESET: u32 = u32::MAX;
/// `Request::class` that says the caller sends no more on the connection: what waits for more
/// requests ends now (a paced client-streaming call ends, and its response confirms what it
/// carries). Socket threads with nothing of the kind let it pass.
pub const FLUSH: u32 = u32::MAX - 1;

/// A request from the caller.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Connection index (within the caller).
    pub conn: u32,
    /// Method class, or [`RESET`].
    pub class: u32,
    /// Request id.
    pub id: u64,
}

/// Why a connection went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// The server closed it or the socket failed.
    Closed,
    /// The server sent something that is not a JSON-RPC response.
    Protocol,
    /// The caller asked for a fresh connection (after a timeout).
    Reset,
}

/// What the socket thread tells the caller.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// A response: its id, and whether it carries a `result` (not an `error`).
    Reply {
        /// Connection index.
        conn: u32,
        /// The id it answers.
        id: u64,
        /// `result` rather than `error`.
        ok: bool,
    },
    /// A streamed response's end: as [`Event::Reply`], with what its messages showed — all
    /// of them, or (not `ok`) those it had delivered when it was cut — handed over beside the
    /// ring ([`Ends::push_stream`]: the ring carries plain values only).
    Stream {
        /// Connection index.
        conn: u32,
        /// The id it answers.
        id: u64,
        /// Delivered whole.
        ok: bool,
    },
    /// The connection is down; requests in flight on it will not be answered.
    Down {
        /// Connection index.
        conn: u32,
        /// Why.
        why: Down,
    },
    /// The server retired the connection gracefully (HTTP/2 GOAWAY with NO_ERROR): requests
    /// in flight on it are still answered, and a new one takes the rest.
    Retired {
        /// Connection index.
        conn: u32,
    },
    /// A connection's TLS handshake took this long (counted apart from any request).
    TlsHandshake {
        /// Its length, ns.
        ns: u64,
    },
    /// An HTTP/2 request body waited this long for the server's flow-control window.
    FlowControlWait {
        /// Time waiting for WINDOW_UPDATEs once its first bytes went, ns.
        ns: u64,
    },
    /// A reconnection succeeded.
    Up {
        /// Connection index.
        conn: u32,
    },
    /// A reconnection attempt failed (it is retried).
    ConnectFailed {
        /// Handshake (not TCP) failure.
        handshake: bool,
    },
}

/// A socket thread's ends of the rings and its signals, and the turn every socket thread takes
/// with them: [`Ends::begin_turn`], take [`Ends::requests`], [`Ends::push`] events,
/// [`Ends::end_turn`].
pub struct Ends {
    /// Requests from the caller.
    pub requests: Consumer<Request>,
    /// Events to the caller.
    events: Producer<Event>,
    /// Each [`Event::Stream`]'s figures, sent just before it (in the same order).
    figures: std::sync::mpsc::Sender<Box<StreamFigures>>,
    /// Events the ring had no room for (it is sized so that this stays empty).
    pending: VecDeque<Event>,
    /// Events were handed over since the caller was last woken.
    told: bool,
    /// Raised by the caller after it pushes requests.
    notify: Arc<tokio::sync::Notify>,
    /// The wake-up for the next requests.
    notified: Pin<Box<tokio::sync::futures::OwnedNotified>>,
    /// The caller, when its wait strategy may park.
    caller: Option<Arc<Sleeper>>,
    /// Raised by the caller when it is done.
    stop: Arc<AtomicBool>,
    /// Where the thread publishes its CPU clock (read by the caller at the window's edges).
    pub cpu_clock: Arc<std::sync::OnceLock<crate::cpu::ThreadCpuClock>>,
}

impl Ends {
    /// The start of a turn: `false` once the caller said stop; else the wake-up for new
    /// requests is re-armed (before they are taken, so none is missed).
    pub fn begin_turn(&mut self, cx: &mut Context<'_>) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        while self.notified.as_mut().poll(cx).is_ready() {
            self.notified = Box::pin(self.notify.clone().notified_owned());
        }
        true
    }

    /// Hands a streamed response's end to the caller: its figures, then its event.
    pub fn push_stream(&mut self, conn: u32, id: u64, ok: bool, figures: Box<StreamFigures>) {
        // The caller lives until its sockets stop: a send cannot fail while one reads.
        let _ = self.figures.send(figures);
        self.push(Event::Stream { conn, id, ok });
    }

    /// Hands an event to the caller, in order behind any that did not fit yet.
    pub fn push(&mut self, event: Event) {
        self.told = true;
        if !self.pending.is_empty() {
            self.pending.push_back(event);
        } else if let Err(e) = self.events.push(event) {
            self.pending.push_back(e);
        }
    }

    /// The end of a turn: hands over what waited for room (looking again soon if some still
    /// waits: the caller frees room as it takes events), and wakes the caller once if events
    /// were handed over; says whether they were.
    pub fn end_turn(&mut self, cx: &mut Context<'_>) -> bool {
        while let Some(&e) = self.pending.front() {
            if self.events.push(e).is_err() {
                break;
            }
            self.pending.pop_front();
        }
        if !self.pending.is_empty() {
            cx.waker().wake_by_ref();
        }
        let told = std::mem::take(&mut self.told);
        if told {
            if let Some(caller) = &self.caller {
                caller.wake();
            }
        }
        told
    }
}

/// A socket thread's body, ready to run on a thread of its own; it returns the failed answers
/// it read, by message.
pub type SocketBody = Box<dyn FnOnce() -> Vec<ErrorCount> + Send + 'static>;

/// What carries a system's requests: one socket thread per caller.
pub trait Sockets: Sync {
    /// `Some` when the caller's work runs on its socket thread's own event loop rather than on
    /// a thread of its own (see [`InlineSockets`]).
    fn inline(&self) -> Option<&dyn InlineSockets> {
        None
    }

    /// The body of caller `t`'s socket thread, owning `connections` connections: it connects
    /// them, reports on `ready`, and serves `ends` until told to stop.
    fn thread(
        &self,
        t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
    ) -> SocketBody;
}

/// Sockets whose event loop also runs the caller: one thread per caller instead of two.
///
/// Why: over HTTP/2 every response crossed from the socket thread to the caller and every new
/// request back, each crossing a wake-up of a sleeping thread (a futex one way, an eventfd the
/// other). Against nginx (4 connections x 64 streams, 95k requests/s) the caller slept and woke
/// 66k times in 3 s and its wake-ups, with the socket thread's side of them, were ~12 % of the
/// client's CPU. On one thread the hand-off rings stay (they cost no wake-up there) and the
/// loop sleeps in one place, its sockets' `epoll`, with a `timerfd` for the next send.
/// A system whose wait strategies are compared (`ws-rpc`) keeps the two threads.
pub trait InlineSockets: Sync {
    /// Runs caller `t`'s sockets on this thread, owning `connections` connections: it
    /// connects them, reports on `ready`, then calls `turns` whenever something happened or
    /// the time it asked for came, until it says [`Next::Done`]; returns the failed answers it
    /// read, by message. The thread's CPU is the caller's (no socket CPU clock is published).
    fn run_here(
        &self,
        t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
        turns: &mut dyn Turns,
    ) -> Vec<ErrorCount>;
}

/// The caller's loop cut into turns, for an event loop that runs it ([`InlineSockets`]).
pub trait Turns {
    /// Takes what the sockets handed over and hands over what is due; says when to call again.
    fn turn(&mut self) -> Next;
}

/// When a caller wants its next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// At once: it made progress.
    Again,
    /// At this time (ns) or when a response comes, whichever is first.
    At(u64),
    /// Never: it is done (its recording is closed).
    Done,
}

/// How the callers of a system work.
pub struct Callers<'a> {
    /// The system's name, for thread names and messages (`ws-rpc`, `http/2`).
    pub name: &'static str,
    /// Share of each operation class in the mix.
    pub shares: Vec<f64>,
    /// How a caller waits for the responses its socket thread hands over.
    pub wait: WaitStrategy,
    /// CPUs of the socket threads, one per caller (empty: not pinned).
    pub socket_pin: &'a [usize],
    /// The socket threads.
    pub sockets: &'a dyn Sockets,
}

/// What a protocol error of a socket thread is.
const NOT_A_RESPONSE: &str = "something that is not a response to a request in flight";

/// What the callers share.
struct Shared<'a> {
    scenario: &'a Scenario,
    client: &'a ClientConfig,
    callers: Callers<'a>,
    url: &'a str,
    stop: RunStop<'a>,
}

/// Runs the callers against `url` (the address the socket threads connect to, as messages name
/// it). `sut_cpu_ns` reads the system under test's CPU (at the measured span's edges, from
/// this thread). Every caller connects first; the run starts once all have
/// ([`run_after_ready`]).
pub fn drive(
    scenario: &Scenario,
    client: &ClientConfig,
    callers: Callers,
    url: &str,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<DriverOutput, EngineError> {
    let shared = Shared {
        scenario,
        client,
        callers,
        url,
        stop: RunStop::new(&ctx.stop),
    };
    let role = shared.callers.name;
    let plan = ReadyRun {
        run: &scenario.run,
        classes: shared.callers.shares.len(),
        live: ctx.live.clone(),
        role,
    };
    let workers = (0..client.local_threads())
        .map(|t| {
            let shared = &shared;
            (format!("caller-{t}"), move |hs| caller(shared, t, hs))
        })
        .collect();
    let mut recorder_for = |collector: &mut Collector, t: usize| {
        let mine = client.thread_connections(t);
        collector.connections_recorder(mine.start, mine.len())
    };
    let ran = run_after_ready(plan, sut_cpu_ns, workers, &mut recorder_for)?;
    let outs = (ran.workers.into_iter()).map(|h| h.map(|r| r.map(Option::unwrap_or_default)));
    let gathered = gather(outs, role)?;
    Ok(shared
        .stop
        .output(&ran.timeline, ran.recording, gathered, ran.sut_cpu_s))
}

/// One connection as its caller sees it.
struct Conn {
    in_flight: InFlight,
    launcher: Launcher,
    up: bool,
    /// When it went down (0: up), for a run only its budget ends (see `give_up_if_endless`).
    down_since: u64,
}

type CallerResult = Result<Option<(Vec<ThreadCpu>, Faults)>, EngineError>;

/// The caller's ends of the rings to its sockets.
type Handover = (
    crate::ring::Producer<Request>,
    crate::ring::Consumer<Event>,
    std::sync::mpsc::Receiver<Box<StreamFigures>>,
);

/// The caller's signals to its sockets, and where a socket thread publishes its CPU clock.
struct CallerEnds {
    notify: Arc<tokio::sync::Notify>,
    stop: Arc<AtomicBool>,
    cpu: Arc<OnceLock<ThreadCpuClock>>,
}

/// The rings between caller `t` and its sockets: the sockets' ends and the caller's. `caller`:
/// the caller to wake when events are handed over (`None`: it need not be woken).
fn rings(shared: &Shared, t: usize, caller: Option<Arc<Sleeper>>) -> (Ends, Handover, CallerEnds) {
    let client = shared.client;
    // Room for every request in flight, plus a reset and two state changes per connection.
    let connections = client.thread_connections(t).len();
    let capacity = (client.window + 3) * connections + 16;
    let (req_tx, req_rx) = crate::ring::channel::<Request>(capacity);
    let (ev_tx, ev_rx) = crate::ring::channel::<Event>(capacity);
    let (figures_tx, figures_rx) = std::sync::mpsc::channel();
    let notify = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = Arc::new(OnceLock::new());
    let ends = Ends {
        cpu_clock: cpu.clone(),
        requests: req_rx,
        events: ev_tx,
        figures: figures_tx,
        pending: VecDeque::new(),
        told: false,
        notified: Box::pin(notify.clone().notified_owned()),
        notify: notify.clone(),
        caller,
        stop: stop.clone(),
    };
    let mine = CallerEnds { notify, stop, cpu };
    (ends, (req_tx, ev_rx, figures_rx), mine)
}

/// Tells a socket thread to close its connections and waits for it; returns the error replies
/// it read, by message.
fn stop_socket_thread(
    mine: &CallerEnds,
    handle: std::thread::JoinHandle<Vec<ErrorCount>>,
) -> Vec<ErrorCount> {
    mine.stop.store(true, Ordering::Release);
    mine.notify.notify_one();
    handle.join().unwrap_or_default()
}

/// A caller thread: runs its sockets on this thread when they can ([`InlineSockets`]), else
/// starts its socket thread, then paces, hands requests over and takes responses back until
/// its schedule and drain are over.
fn caller(shared: &Shared, t: usize, hs: Handshake) -> CallerResult {
    let Handshake { ready, start, done } = hs;
    let pin = shared.client.pin.get(t).copied();
    if let Err(e) = worker::prepare(shared.callers.name, pin, true) {
        let _ = ready.send(Err(e));
        return Ok(None);
    }
    let waiter = Waiter::new(shared.callers.wait);
    if let Some(inline) = shared.callers.sockets.inline() {
        return inline_caller(inline, shared, t, ready, (start, done), waiter);
    }
    let (ends, handover, mine) = rings(
        shared,
        t,
        Waiter::may_park(shared.callers.wait).then(|| waiter.sleeper()),
    );
    let connections = shared.client.thread_connections(t).len();
    let body = shared.callers.sockets.thread(t, connections, ends, ready);
    let handle = std::thread::Builder::new()
        .name(format!("msgbench-socket-{t}"))
        .spawn(body)
        .expect("spawning a thread");
    let Ok((timeline, rec)) = start.recv() else {
        stop_socket_thread(&mine, handle);
        let _ = done.send(());
        return Ok(None);
    };
    let me = Caller::new(shared, t, (timeline, rec), handover, &mine, waiter, true);
    let (cpu, socket_cpu_ns, mut faults) = me.run(&done);
    faults += Faults {
        errors: stop_socket_thread(&mine, handle),
        ..Faults::default()
    };
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
                pinned_cpu: shared.callers.socket_pin.get(t).copied(),
                cpu: CpuTimes {
                    user_s: socket_cpu_ns as f64 / 1e9,
                    ..Default::default()
                },
            },
        ],
        faults,
    )))
}

/// A caller whose sockets run on its own thread: the sockets' event loop calls its turns.
fn inline_caller(
    inline: &dyn InlineSockets,
    shared: &Shared,
    t: usize,
    ready: Sender<Result<(), EngineError>>,
    (start, done): (Receiver<Start>, Sender<()>),
    waiter: Waiter,
) -> CallerResult {
    let (ends, handover, mine) = rings(shared, t, None);
    let mut turns = InlineCaller {
        shared,
        t,
        start,
        done,
        mine,
        waiting: Some((handover, waiter)),
        running: None,
        finished: None,
    };
    let connections = shared.client.thread_connections(t).len();
    let errors = inline.run_here(t, connections, ends, ready, &mut turns);
    let Some((cpu, _, mut faults)) = turns.finished else {
        let _ = turns.done.send(()); // the run never started (or was abandoned): not counted
        return Ok(None);
    };
    faults += Faults {
        errors,
        ..Faults::default()
    };
    Ok(Some((
        vec![ThreadCpu {
            role: format!("caller-{t}"),
            pinned_cpu: shared.client.pin.get(t).copied(),
            cpu,
        }],
        faults,
    )))
}

/// A caller run by its sockets' event loop, turn by turn.
struct InlineCaller<'a> {
    shared: &'a Shared<'a>,
    t: usize,
    start: Receiver<Start>,
    done: Sender<()>,
    mine: CallerEnds,
    /// Until the run starts: what its caller is made of.
    waiting: Option<(Handover, Waiter)>,
    /// Once the run started.
    running: Option<Caller<'a>>,
    /// Once it is done: its CPU, its socket CPU (none here) and faults.
    finished: Option<(CpuTimes, u64, Faults)>,
}

impl Turns for InlineCaller<'_> {
    fn turn(&mut self) -> Next {
        if self.running.is_none() {
            let Some((handover, waiter)) = self.waiting.take() else {
                return Next::Done; // done, or never started
            };
            // Every caller is connected once this thread is asked for its first turn; the
            // start comes when the others are too.
            let Ok(start) = self.start.recv() else {
                return Next::Done;
            };
            let me = Caller::new(
                self.shared,
                self.t,
                start,
                handover,
                &self.mine,
                waiter,
                false,
            );
            me.clock.sleep_until(me.timeline.t0_ns);
            self.running = Some(me);
        }
        let me = self.running.as_mut().expect("set above");
        match me.turn(&self.done) {
            Next::Done => {
                let me = self.running.take().expect("set above");
                let used = me.progress.used;
                self.finished = Some((used.0, used.1, me.finish()));
                Next::Done
            }
            // The last `spin_ns` before a send are spun (turn after turn), as the threaded
            // caller's sleep spins them: waking from the kernel is not that exact.
            Next::At(wake) => match wake.checked_sub(self.shared.client.spin_ns) {
                Some(sleep_to) if sleep_to > me.clock.now_ns() => Next::At(sleep_to),
                _ => Next::Again,
            },
            Next::Again => Next::Again,
        }
    }
}

/// Where a caller's loop stands between turns.
#[derive(Debug, Default)]
struct Progress {
    /// CPU at the measured span's start.
    before: SpanCpuUse,
    /// CPU over the measured span (once sending stopped).
    used: (CpuTimes, u64),
    /// When sending stopped.
    send_end_ns: Option<u64>,
}

struct Caller<'a> {
    shared: &'a Shared<'a>,
    index: usize,
    conns: Vec<Conn>,
    timeline: Timeline,
    rules: Rules<'a>,
    rec: Recorder,
    faults: Faults,
    clock: MonotonicClock,
    budget: Budget,
    requests: crate::ring::Producer<Request>,
    events: crate::ring::Consumer<Event>,
    /// The figures of each [`Event::Stream`], in its order.
    figures: std::sync::mpsc::Receiver<Box<StreamFigures>>,
    /// `Some` when the sockets run on another thread: raised after handing requests over.
    notify: Option<Arc<tokio::sync::Notify>>,
    waiter: Waiter,
    socket_cpu: Arc<OnceLock<ThreadCpuClock>>,
    progress: Progress,
}

/// The caller's and its socket thread's CPU over the measured span.
#[derive(Debug, Default)]
struct SpanCpuUse {
    caller: Option<CpuSnapshot>,
    socket_ns: Option<u64>,
}

impl<'a> Caller<'a> {
    /// A caller of `shared`'s thread `t` for a run that `start`s: its connections' launchers
    /// and in-flight tables, the rings to its sockets. `threaded`: its sockets run on another
    /// thread (it raises their notification after handing requests over).
    fn new(
        shared: &'a Shared<'a>,
        t: usize,
        (timeline, rec): Start,
        (requests, events, figures): Handover,
        mine: &CallerEnds,
        waiter: Waiter,
        threaded: bool,
    ) -> Caller<'a> {
        let client = shared.client;
        Caller {
            shared,
            index: t,
            conns: client
                .thread_connections(t)
                .map(|local| Conn {
                    in_flight: InFlight::new(client.window),
                    launcher: Launcher::new(
                        shared.scenario.pacing,
                        shared.scenario.run.seed,
                        timeline.t0_ns,
                        (client.global_index(local), client.total_connections()),
                        connection_budget(shared.scenario.run.operations, client, local),
                    ),
                    up: true,
                    down_since: 0,
                })
                .collect(),
            timeline,
            rules: Rules {
                client,
                shares: &shared.callers.shares,
                measure_start_ns: timeline.measure_start_ns,
                end_ns: timeline.end_ns,
            },
            rec,
            faults: Faults::default(),
            clock: MonotonicClock::new(client.spin_ns),
            budget: Budget::of_connections(
                shared.scenario.run.operations,
                client,
                client.thread_connections(t),
            ),
            requests,
            events,
            figures,
            notify: threaded.then(|| mine.notify.clone()),
            waiter,
            socket_cpu: mine.cpu.clone(),
            progress: Progress::default(),
        }
    }

    /// The caller's loop on a thread of its own; returns its CPU and its socket thread's (ns)
    /// over the measured span, and its faults.
    fn run(mut self, done: &Sender<()>) -> (CpuTimes, u64, Faults) {
        self.clock.sleep_until(self.timeline.t0_ns);
        loop {
            match self.turn(done) {
                Next::Done => break,
                Next::Again => self.waiter.progressed(),
                Next::At(wake) => self.idle_until(wake),
            }
        }
        let used = self.progress.used;
        (used.0, used.1, self.finish())
    }

    /// One turn: sends what is due (or stops sending), takes the responses and state changes
    /// handed over, fails what timed out; says when the next turn is due.
    fn turn(&mut self, done: &Sender<()>) -> Next {
        let now = self.clock.now_ns();
        self.rec.roll_if_due(now);
        if self.progress.send_end_ns.is_none() {
            if self.progress.before.caller.is_none() && now >= self.timeline.measure_start_ns {
                self.progress.before = SpanCpuUse {
                    caller: Some(CpuSnapshot::thread()),
                    socket_ns: self.socket_cpu_ns(),
                };
            }
            self.progress.send_end_ns = self.stop_sending_at(now);
            match self.progress.send_end_ns {
                Some(_) => {
                    self.progress.used = self.cpu_since(&self.progress.before);
                    let _ = done.send(());
                    self.give_up_due(now);
                    self.flush();
                }
                None => self.send_due(now),
            }
        }
        let progressed = self.take_events();
        self.check_timeouts(self.clock.now_ns());
        let in_flight: usize = self.conns.iter().map(|c| c.in_flight.in_flight()).sum();
        let drain_end =
            (self.progress.send_end_ns).map(|e| self.shared.stop.drain_deadline(&self.timeline, e));
        if drain_end.is_some_and(|d| in_flight == 0 || now > d) {
            return Next::Done;
        }
        if progressed {
            return Next::Again;
        }
        // Nothing due later: look again at once (not progress: a backoff keeps its count).
        Next::At(self.wake_at(now, drain_end).unwrap_or(now))
    }

    /// `Some(send end)` when this caller stops sending at `now`: Ctrl-C, an error that stops
    /// the run, its budget spent, or every connection's schedule over. Marks the span's end.
    fn stop_sending_at(&mut self, now: u64) -> Option<u64> {
        let all_done = self.conns.iter().all(|c| c.launcher.done);
        if !(self.shared.stop.stopping() || self.budget.spent() || all_done) {
            return None;
        }
        Some(
            self.shared
                .stop
                .stopped_sending(&self.timeline, now, all_done),
        )
    }

    fn socket_cpu_ns(&self) -> Option<u64> {
        self.socket_cpu.get().map(|c| c.read_ns())
    }

    /// The caller's CPU and its socket thread's (ns) since `before`.
    fn cpu_since(&self, before: &SpanCpuUse) -> (CpuTimes, u64) {
        let caller = before
            .caller
            .map(|b| CpuSnapshot::thread().since(&b))
            .unwrap_or_default();
        let socket = match (before.socket_ns, self.socket_cpu_ns()) {
            (Some(b), Some(a)) => a.saturating_sub(b),
            _ => 0,
        };
        (caller, socket)
    }

    /// Counts what is still in flight and closes the recorder; returns the caller's faults.
    fn finish(mut self) -> Faults {
        let now = self.clock.now_ns();
        close_recording(self.rec, self.conns.iter().map(|c| &c.in_flight), now);
        for c in &self.conns {
            // Still down when the run ended.
            self.faults.connections.add_down(c.down_since, now);
        }
        self.faults
    }

    /// Sending stopped at `now`: what each schedule had due and unsent is skipped
    /// ([`super::launcher::Launcher::give_up_due`]).
    fn give_up_due(&mut self, now: u64) {
        for c in &mut self.conns {
            let mut tally = Counting {
                budget: &mut self.budget,
                rec: &mut self.rec,
            };
            (c.launcher).give_up_due(&self.rules, (now, &self.clock), &mut tally);
        }
    }

    fn send_due(&mut self, now: u64) {
        let mut pushed = false;
        for (i, c) in self.conns.iter_mut().enumerate() {
            let requests = &mut self.requests;
            let mut tally = Counting {
                budget: &mut self.budget,
                rec: &mut self.rec,
            };
            c.launcher.send_due(
                &mut c.in_flight,
                c.up,
                &self.rules,
                (now, &self.clock),
                &mut tally,
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
            self.tell_sockets();
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
                    let Some(f) = c.in_flight.complete(id) else {
                        self.fail(conn as usize, Failure::Protocol(NOT_A_RESPONSE));
                        self.reset(conn as usize);
                        continue;
                    };
                    record_response(&mut self.rec, &mut self.faults, conn as usize, &f, ok, now);
                }
                Event::Stream { conn, id, ok } => {
                    let figures = self.figures.try_recv().expect("sent before its event");
                    self.stream_ended(conn as usize, id, ok, &figures);
                }
                Event::Down { conn, why } => {
                    let now = self.clock.now_ns();
                    let c = &mut self.conns[conn as usize];
                    c.up = false;
                    if c.down_since == 0 {
                        c.down_since = now.max(1);
                    }
                    match why {
                        Down::Closed => self.fail(conn as usize, Failure::Closed),
                        Down::Protocol => {
                            self.fail(conn as usize, Failure::Protocol(NOT_A_RESPONSE))
                        }
                        Down::Reset => {}
                    }
                }
                Event::Retired { .. } => self.faults.connections.closed_by_server += 1,
                Event::TlsHandshake { ns } => self.faults.connections.add_handshake(ns),
                Event::FlowControlWait { ns } => self.faults.connections.add_flow_control_wait(ns),
                Event::Up { conn } => {
                    let now = self.clock.now_ns();
                    let c = &mut self.conns[conn as usize];
                    c.up = true;
                    let since = std::mem::take(&mut c.down_since);
                    self.faults.connections.add_down(since, now);
                }
                Event::ConnectFailed { handshake } => {
                    if handshake {
                        self.faults.handshake_failures += 1;
                    } else {
                        self.faults.connect_failures += 1;
                    }
                    self.give_up_if_endless();
                }
            }
        }
        any
    }

    /// A run ended by `run.operations` alone has no scheduled end: a connection that cannot
    /// be reopened would hold its share of the budget, and the run, forever. Past
    /// `client.timeout` down, the run stops (what was measured is written).
    /// A streamed response ended on connection `i`: recorded as a reply, and its messages'
    /// figures as the stream's (a cut one counted with what it had delivered).
    fn stream_ended(&mut self, i: usize, id: u64, ok: bool, figures: &StreamFigures) {
        let now = self.clock.now_ns();
        let c = &mut self.conns[i];
        if !c.up {
            return;
        }
        let Some(f) = c.in_flight.complete(id) else {
            self.fail(i, Failure::Protocol(NOT_A_RESPONSE));
            self.reset(i);
            return;
        };
        record_response(&mut self.rec, &mut self.faults, i, &f, ok, now);
        match (f.measured, ok) {
            (true, true) => self.rec.streamed(f.intended_ns, figures),
            (true, false) => self.rec.stream_cut(figures.messages),
            (false, _) => {}
        }
    }

    fn give_up_if_endless(&mut self) {
        let now = self.clock.now_ns();
        let timeout = self.shared.client.timeout_ns;
        if self.timeline.end_ns != u64::MAX {
            return;
        }
        let first = self.shared.client.thread_connections(self.index).start;
        let down = (self.conns.iter().enumerate())
            .find(|(_, c)| c.down_since != 0 && now.saturating_sub(c.down_since) > timeout);
        if let Some((i, c)) = down {
            self.shared.stop.stop_because(endless_stop_message(
                self.shared.client.global_index(first + i),
                self.shared.url,
                now.saturating_sub(c.down_since),
            ));
        }
    }

    fn check_timeouts(&mut self, now: u64) {
        let timeout = self.shared.client.timeout_ns;
        for i in 0..self.conns.len() {
            if self.conns[i].in_flight.timed_out(timeout, now) {
                self.fail(i, Failure::Timeout(None));
                self.reset(i);
            }
        }
    }

    /// Wakes a socket thread for the requests just handed over (sockets on this thread take
    /// them on their next turn).
    fn tell_sockets(&self) {
        if let Some(notify) = &self.notify {
            notify.notify_one();
        }
    }

    /// Tells the socket thread that nothing more will be sent on any connection.
    fn flush(&mut self) {
        for i in 0..self.conns.len() {
            let _ = self.requests.push(Request {
                conn: i as u32,
                class: FLUSH,
                id: 0,
            });
        }
        self.tell_sockets();
    }

    /// Asks for a fresh connection `i`: answers to failed requests may still come on the old
    /// one, and must not be taken for answers to new ones.
    fn reset(&mut self, i: usize) {
        if !self.conns[i].up {
            return;
        }
        self.conns[i].up = false;
        if self.conns[i].down_since == 0 {
            self.conns[i].down_since = self.clock.now_ns().max(1);
        }
        let _ = self.requests.push(Request {
            conn: i as u32,
            class: RESET,
            id: 0,
        });
        self.tell_sockets();
    }

    /// Fails every request in flight on connection `i`; stops the run under `on_error = stop`.
    fn fail(&mut self, i: usize, why: Failure) {
        let now = self.clock.now_ns();
        fail_all_counted(&mut self.conns[i].in_flight, &mut self.rec, i, now);
        let what = why.count(&mut self.faults, self.shared.client.timeout_ns);
        if self.shared.client.on_error == OnError::Stop {
            self.shared.stop.stop_because(stop_message(
                &what,
                self.shared
                    .client
                    .global_index(self.shared.client.thread_connections(self.index).start + i),
                self.shared.url,
                now,
                self.rules.measure_start_ns,
            ));
        }
    }

    /// Nothing happened: when the next send, timeout, stop check or the drain's end is due
    /// (`None`: now). `drain_end`: `None` while sending, the drain's deadline after.
    fn wake_at(&mut self, now: u64, drain_end: Option<u64>) -> Option<u64> {
        let sending = drain_end.is_none();
        // Every schedule is over: stop sending now (where the measured span ends), not after
        // the next response or the next stop check.
        if sending && self.conns.iter().all(|c| c.launcher.done) {
            return None;
        }
        let mut wake = drain_end.unwrap_or(u64::MAX);
        if sending {
            for c in &mut self.conns {
                if c.up {
                    if let Some(w) = c.launcher.next_wake(&c.in_flight, &self.rules, now) {
                        wake = wake.min(w);
                    }
                }
            }
            if self.rules.measure_start_ns > now {
                wake = wake.min(self.rules.measure_start_ns);
            }
        }
        for c in &mut self.conns {
            if let Some(d) = c.in_flight.oldest_deadline(self.shared.client.timeout_ns) {
                wake = wake.min(d + 1);
            }
        }
        let wake = wake.min(now + STOP_CHECK_NS);
        (wake > now).then_some(wake)
    }

    /// Waits on this thread until `wake` or a response, whichever is first.
    fn idle_until(&mut self, wake: u64) {
        let now = self.clock.now_ns();
        if wake <= now {
            return;
        }
        let in_flight = self.conns.iter().any(|c| c.in_flight.in_flight() > 0);
        if !in_flight {
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
