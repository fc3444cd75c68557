//! Request/response over a byte stream, for any protocol with a [`Wire`] (`rpc`, `redis`) and
//! any [`Transport`] (plain TCP, or TLS: [`crate::drivers::tls`]).
//!
//! `threads` event loops (mio, one per thread, optionally pinned), each owning `connections`
//! connections. Every connection has its own [`Launcher`] (pacing and `when_full`, see
//! [`super::launcher`]) and [`InFlight`] table of at most `client.window` requests. All requests
//! due at one moment go out in one `write` (a pipelined batch), yet each keeps its own intended
//! time, so a batch's requests never share one latency figure.
//!
//! A response is matched to its request by id (protocols that carry one) or by order (Redis).
//! A timeout, a closed connection or a protocol error fails every request in flight on that
//! connection (counted by kind in [`Faults`]) and then stops the run or reconnects
//! (`client.on_error`). The hot path allocates nothing: buffers, flight tables and histograms
//! are sized before the run. The run's timeline and the system under test's CPU come from the
//! [`crate::harness`].
use super::in_flight::{close_recording, fail_all_counted, record_response, InFlight};
use super::launcher::{connection_budget, Budget, Counting, Launch, Launcher, Rules};
use crate::clock::{Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::drivers::failure::{endless_stop_message, stop_message, Failure};
use crate::error::EngineError;
use crate::harness::threads::{run_threads, NoReceivers};
use crate::harness::timer::Timer;
use crate::harness::STOP_CHECK_NS;
use crate::harness::{gather, worker, DriverOutput, RunContext, RunStop, Timeline};
use crate::net::endpoint::{Endpoint, Stream};
use crate::recorder::Recorder;
use crate::streamed::StreamFigures;
use mio::{Events, Interest, Poll, Token};
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::result::{CpuTimes, ErrorCount, Faults, ThreadCpu};
use msgbench_model::scenario::Scenario;
use std::io::{self, Read, Write};
use std::sync::mpsc::Sender;
use std::time::Duration;

const TIMER: Token = Token(usize::MAX - 1);
/// Pause between reconnection attempts.
const RECONNECT_NS: u64 = 100_000_000;
/// Longest the first connection of a run may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest a reconnection may block its thread (loopback refusals return at once; an address
/// that drops packets costs at most this, while the thread's other connections wait).
const RECONNECT_TIMEOUT: Duration = Duration::from_millis(100);

/// One response, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Request id, when the protocol carries one (else responses come in request order).
    pub id: Option<u64>,
    /// Bytes it took.
    pub size: usize,
    /// False for an error reply (the request failed).
    pub ok: bool,
    /// The server closes the connection after it (HTTP's `Connection: close`): the driver
    /// reopens it at once, which is counted but is not a fault.
    pub closes: bool,
}

/// A protocol, as the driver needs it.
pub trait Wire: Send {
    /// A reply with an id of no request in flight fails the connection as a protocol error
    /// (a built-in protocol: a server that does it is broken). False for a described wire,
    /// whose server may answer twice: the reply is counted (`faults.unmatched_replies`) and
    /// skipped.
    const STRAY_REPLIES_FAIL: bool = true;
    /// Appends the request `launch` (its class, id, send and intended send times).
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>);
    /// Decodes the response at the start of `buf` (`Ok(None)`: incomplete).
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String>;
    /// The error replies it decoded, by message (see [`ErrorCount`]); none by default.
    fn take_errors(&mut self) -> Vec<ErrorCount> {
        Vec::new()
    }
    /// The connection failed: forget what was asked on it (a protocol that tracks its requests
    /// starts over on the next connection).
    fn reset(&mut self) {}
    /// What the connection holds of a reply not yet whole (`held`, never empty), in words that
    /// say why it may never end — for the timeout that gives up on it; `None` by default.
    fn unfinished(&self, held: &[u8]) -> Option<String> {
        let _ = held;
        None
    }
    /// The reply just decoded answered no request in flight (only when `STRAY_REPLIES_FAIL` is
    /// false): whatever it said is not a request's outcome.
    fn stray(&mut self) {}
    /// Bytes read at `now` are about to be decoded: a streamed response times its messages by
    /// it.
    fn arrived(&mut self, now: u64) {
        let _ = now;
    }
    /// The response just decoded was a stream of messages: what it showed (`None` otherwise).
    fn streamed(&self) -> Option<&StreamFigures> {
        None
    }
    /// A streamed response is being read: the messages it has shown so far (the connection
    /// fails, and it is cut short).
    fn cut_short(&self) -> Option<u64> {
        None
    }
}

/// A connection's byte stream, as the driver needs it: non-blocking reads and writes, an event
/// source for mio, and a way to connect.
pub trait Transport: Read + Write + mio::event::Source + Send + Sized {
    /// What every connection is opened with (nothing for TCP, a TLS configuration for TLS).
    type Connector: Sync;
    /// Connects to `address` within `timeout`, ready for non-blocking use. An error of kind
    /// `InvalidData` is a handshake that failed (its text says why), not a refused address.
    fn connect(
        connector: &Self::Connector,
        address: &Endpoint,
        timeout: Duration,
    ) -> io::Result<Self>;
    /// A read that filled less than the buffer emptied the socket (true for TCP: epoll raises
    /// a new edge for data arriving later). Not for TLS, whose session may hold records read
    /// from the socket beyond what one read returned.
    const SHORT_READ_DRAINS: bool = false;
    /// How long the connection's handshake took, once (TLS; `None` for TCP).
    fn take_handshake_ns(&mut self) -> Option<u64> {
        None
    }
    /// The transport holds bytes written to it that the socket did not take yet: the driver
    /// keeps asking for writability and flushes it.
    fn wants_write(&self) -> bool {
        false
    }
}

impl Transport for Stream {
    type Connector = ();
    /// Both TCP and Unix stream sockets raise a new edge for data that arrives after a read.
    const SHORT_READ_DRAINS: bool = true;

    fn connect(_: &(), address: &Endpoint, timeout: Duration) -> io::Result<Stream> {
        Stream::connect(address, timeout)
    }
}

/// What to drive: the scenario, where, and the protocol.
pub struct Plan<'a, F, C = ()> {
    /// The scenario (timeline, pacing).
    pub scenario: &'a Scenario,
    /// Threads, connections, window, policies.
    pub client: &'a ClientConfig,
    /// The server.
    pub address: Endpoint,
    /// Share of each operation class in the mix (its length is the number of classes).
    pub shares: Vec<f64>,
    /// Builds the protocol state of connection `index`.
    pub make_wire: F,
    /// How to get a server there, for the error when nothing accepts connections.
    pub hint: &'static str,
    /// What the transport opens connections with (`()` for TCP).
    pub connector: C,
}

/// Everything threads share.
struct Shared<'a, C> {
    connector: C,
    scenario: &'a Scenario,
    client: &'a ClientConfig,
    address: Endpoint,
    shares: Vec<f64>,
    timeline: Timeline,
    stop: RunStop<'a>,
}

impl<C> Shared<'_, C> {
    /// The rules every connection's launcher follows.
    fn rules(&self) -> Rules<'_> {
        Rules {
            client: self.client,
            shares: &self.shares,
            measure_start_ns: self.timeline.measure_start_ns,
            end_ns: self.timeline.end_ns,
        }
    }
}

/// Runs the driver. `sut_cpu_ns` reads the system under test's CPU (at the measured span's
/// edges, from this thread).
pub fn drive<W: Wire, T: Transport>(
    plan: Plan<'_, impl Fn(usize) -> W, T::Connector>,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<DriverOutput, EngineError> {
    let client = plan.client;
    let mut streams = connect_all::<T>(&plan)?.into_iter();
    let timeline = Timeline::from_now(&plan.scenario.run);
    let shared = Shared {
        connector: plan.connector,
        scenario: plan.scenario,
        client,
        address: plan.address,
        shares: plan.shares,
        timeline,
        stop: RunStop::new(&ctx.stop),
    };
    let threads = client.local_threads();
    let mut collector = timeline.collector(&plan.scenario.run, shared.shares.len(), threads);
    let loops: Vec<ThreadLoop<W, T>> = (0..threads)
        .map(|t| {
            let mut faults = Faults::default();
            let mine = client.thread_connections(t);
            let conns = mine
                .clone()
                .map(|index| {
                    let mut stream = streams.next().expect("one stream per connection");
                    count_handshake(&mut stream, &mut faults);
                    Conn::new(stream, (plan.make_wire)(index), &shared, index)
                })
                .collect();
            ThreadLoop {
                shared: &shared,
                index: t,
                conns,
                rec: collector.connections_recorder(mine.start, mine.len()),
                faults,
                clock: MonotonicClock::new(client.spin_ns),
                budget: Budget::of_connections(plan.scenario.run.operations, client, mine),
                due_ns: 0,
                touched: Vec::with_capacity(1024),
            }
        })
        .collect();
    let collecting = collector.start(ctx.live.clone());
    let senders = (loops.into_iter())
        .map(|l| (format!("client-{}", l.index), move |done| l.run(done)))
        .collect();
    let ran = run_threads::<_, (), _, NoReceivers>(&timeline, sut_cpu_ns, senders, Vec::new());
    let sut_cpu_s = ran.sut_cpu_s;
    let gathered = gather(
        (ran.senders.into_iter()).map(|o| o.map(|r| r.map(|(cpu, f)| (vec![cpu], f)))),
        "client",
    );
    // The collector is joined first: it ends once every recorder has, error or not.
    let recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    Ok(shared
        .stop
        .output(&timeline, recording, gathered?, sut_cpu_s))
}

/// Connects everything first, on this thread: a refused address fails the run before it
/// starts, with one clear message.
fn connect_all<T: Transport>(
    plan: &Plan<'_, impl Sized, T::Connector>,
) -> Result<Vec<T>, EngineError> {
    (0..plan.client.local_connections())
        .map(|_| {
            T::connect(&plan.connector, &plan.address, CONNECT_TIMEOUT).map_err(|source| {
                if source.kind() == io::ErrorKind::InvalidData {
                    EngineError::Tls {
                        address: plan.address.to_string(),
                        problem: source.to_string(),
                    }
                } else if source.kind() == io::ErrorKind::PermissionDenied {
                    // A login refused (`login::LoggedIn`): the address is right, the secret not.
                    EngineError::Login {
                        address: plan.address.to_string(),
                        problem: source.to_string(),
                    }
                } else {
                    EngineError::Connect {
                        address: plan.address.to_string(),
                        source,
                        hint: plan.hint.to_string(),
                    }
                }
            })
        })
        .collect()
}

/// Counts a new connection's handshake (TLS), apart from any request's latency.
fn count_handshake<T: Transport>(stream: &mut T, faults: &mut Faults) {
    if let Some(ns) = stream.take_handshake_ns() {
        faults.connections.add_handshake(ns);
    }
}

struct Conn<W, T> {
    stream: Option<T>,
    wire: W,
    wbuf: Vec<u8>,
    wpos: usize,
    want_write: bool,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    in_flight: InFlight,
    launcher: Launcher,
    reconnect_at: u64,
    /// When it went down (0: it is up): a run ended by its budget alone stops once a
    /// connection stays down longer than `client.timeout`.
    down_since: u64,
    /// The server closed the connection as it said it would: reopen it whatever
    /// `client.on_error` says.
    reopen: bool,
}

impl<W: Wire, T: Transport> Conn<W, T> {
    fn new<C>(stream: T, wire: W, shared: &Shared<C>, index: usize) -> Self {
        Conn {
            stream: Some(stream),
            wire,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            want_write: false,
            rbuf: vec![0; 256 * 1024],
            rstart: 0,
            rend: 0,
            in_flight: InFlight::new(shared.client.window),
            launcher: Launcher::new(
                shared.scenario.pacing,
                shared.scenario.run.seed,
                shared.timeline.t0_ns,
                (
                    shared.client.global_index(index),
                    shared.client.total_connections(),
                ),
                connection_budget(shared.scenario.run.operations, shared.client, index),
            ),
            reconnect_at: 0,
            down_since: 0,
            reopen: false,
        }
    }
}

struct ThreadLoop<'a, W, T: Transport> {
    shared: &'a Shared<'a, T::Connector>,
    index: usize,
    conns: Vec<Conn<W, T>>,
    rec: Recorder,
    faults: Faults,
    clock: MonotonicClock,
    budget: Budget,
    /// Until this time only the connections that had events need a look: every other one's
    /// next send, timeout and reconnection is later. (Visiting all connections each turn cost
    /// three scans of 50 connections per 1-4 responses against nginx, ~5 % of the client's
    /// CPU.)
    due_ns: u64,
    /// Connections with events since the last turn (a connection may appear twice).
    touched: Vec<usize>,
}

type ThreadResult = Result<(ThreadCpu, Faults), EngineError>;

/// Where a thread's loop stands.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Sending on the schedule; the thread's CPU from the measured span's start, once there.
    Sending(Option<CpuSnapshot>),
    /// Sending stopped at this time; draining what is in flight.
    Draining(u64),
}

impl<W: Wire, T: Transport> ThreadLoop<'_, W, T> {
    /// The local index of this thread's first connection.
    fn first_connection(&self) -> usize {
        self.shared.client.thread_connections(self.index).start
    }

    fn run(mut self, done: Sender<()>) -> ThreadResult {
        let pin = self.shared.client.pin.get(self.index).copied();
        if let Err(e) = worker::prepare("client", pin, true) {
            let _ = done.send(());
            return Err(e);
        }
        let mut poll = Poll::new().map_err(EngineError::Io)?;
        let mut timer = Timer::new(poll.registry(), TIMER).map_err(EngineError::Io)?;
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(s) = c.stream.as_mut() {
                poll.registry()
                    .register(s, Token(i), Interest::READABLE)
                    .map_err(EngineError::Io)?;
            }
        }
        let mut events = Events::with_capacity(1024);
        self.clock.sleep_until(self.shared.timeline.t0_ns);
        let mut phase = Phase::Sending(None);
        let mut cpu_used = CpuTimes::default();
        loop {
            let now = self.clock.now_ns();
            self.rec.roll_if_due(now);
            // Draining is short and checks every connection's in-flight count anyway.
            let full = now >= self.due_ns || matches!(phase, Phase::Draining(_));
            if let Phase::Sending(cpu_before) = &mut phase {
                if cpu_before.is_none() && now >= self.shared.timeline.measure_start_ns {
                    *cpu_before = Some(CpuSnapshot::thread());
                }
                match self.stop_sending_at(now, full) {
                    Some(send_end_ns) => {
                        cpu_used = cpu_before
                            .map(|b| CpuSnapshot::thread().since(&b))
                            .unwrap_or_default();
                        let _ = done.send(());
                        self.give_up_due(now);
                        phase = Phase::Draining(send_end_ns);
                    }
                    None if full => {
                        (0..self.conns.len()).for_each(|i| self.send_due(i, now, &poll))
                    }
                    None => (0..self.touched.len())
                        .for_each(|t| self.send_due(self.touched[t], now, &poll)),
                }
            }
            if let Phase::Draining(send_end_ns) = phase {
                let in_flight: usize = self.conns.iter().map(|c| c.in_flight.in_flight()).sum();
                if in_flight == 0
                    || now
                        > self
                            .shared
                            .stop
                            .drain_deadline(&self.shared.timeline, send_end_ns)
                {
                    break;
                }
            }
            if full {
                self.check_timeouts(now, &poll);
            }
            self.wait(now, phase, full, &mut poll, &mut events, &mut timer)?;
        }
        let role = format!("client-{}", self.index);
        let faults = self.finish();
        Ok((
            ThreadCpu {
                role,
                pinned_cpu: pin,
                cpu: cpu_used,
            },
            faults,
        ))
    }

    /// `Some(send end)` when this thread stops sending at `now`: Ctrl-C, an error that stops
    /// the run, its budget spent, or every connection's schedule over (looked at on `full`
    /// turns: a schedule ends at a time the wake includes). Marks the span's end.
    fn stop_sending_at(&mut self, now: u64, full: bool) -> Option<u64> {
        let all_done = full && self.conns.iter().all(|c| c.launcher.done);
        if !(self.shared.stop.stopping() || self.budget.spent() || all_done) {
            return None;
        }
        let stop = &self.shared.stop;
        Some(stop.stopped_sending(&self.shared.timeline, now, all_done))
    }

    /// Sleeps until the next thing to do (or an event), then handles the events.
    fn wait(
        &mut self,
        now: u64,
        phase: Phase,
        full: bool,
        poll: &mut Poll,
        events: &mut Events,
        timer: &mut Timer,
    ) -> Result<(), EngineError> {
        let wake = if full {
            self.next_wake(now, phase)
        } else {
            self.next_wake_touched(now)
        };
        self.due_ns = wake;
        self.touched.clear();
        let timeout = if wake <= now.saturating_add(self.clock.spin_ns) {
            Some(Duration::ZERO)
        } else {
            timer.arm_by(wake.min(now + STOP_CHECK_NS) - self.clock.spin_ns, now);
            None
        };
        match poll.poll(events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(EngineError::Io(e)),
        }
        for event in events.iter() {
            match event.token() {
                TIMER => timer.fired(),
                Token(i) => {
                    self.touched.push(i);
                    if event.is_writable() {
                        self.flush(i, poll);
                    }
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        // A close that came with the data raises no later edge: read to it.
                        let to_the_end = event.is_read_closed() || event.is_error();
                        self.receive(i, to_the_end, poll);
                    }
                }
            }
        }
        Ok(())
    }

    /// Counts what is still in flight and closes the recorder; returns the thread's faults.
    fn finish(mut self) -> Faults {
        let now = self.clock.now_ns();
        close_recording(self.rec, self.conns.iter().map(|c| &c.in_flight), now);
        for c in &mut self.conns {
            // Still down when the run ended.
            self.faults.connections.add_down(c.down_since, now);
            self.faults += Faults {
                errors: c.wire.take_errors(),
                ..Faults::default()
            };
        }
        self.faults
    }

    /// When the loop must look again: the next due send that can go, the oldest timeout, a
    /// reconnection, the end of the drain.
    fn next_wake(&mut self, now: u64, phase: Phase) -> u64 {
        let client = self.shared.client;
        let timeline = self.shared.timeline;
        let (sending, mut wake) = match phase {
            Phase::Sending(_) => (true, u64::MAX),
            Phase::Draining(end) => {
                let deadline = self.shared.stop.drain_deadline(&timeline, end);
                (false, deadline.saturating_add(1))
            }
        };
        // Every schedule is over: stop sending now (where the measured span ends), not after
        // the next response or the next stop check.
        if sending && self.conns.iter().all(|c| c.launcher.done) {
            return now;
        }
        let rules = self.shared.rules();
        for c in &mut self.conns {
            wake = wake.min(conn_wake(c, sending, &rules, client.timeout_ns, now));
        }
        if sending && timeline.measure_start_ns > now {
            wake = wake.min(timeline.measure_start_ns);
        }
        wake
    }

    /// [`Self::next_wake`] while sending, between full turns: the connections looked at this
    /// turn may need a look sooner than the rest; one whose schedule ended asks for a full
    /// turn at once (it may have been the last).
    fn next_wake_touched(&mut self, now: u64) -> u64 {
        let rules = self.shared.rules();
        let timeout_ns = self.shared.client.timeout_ns;
        let mut wake = self.due_ns;
        for &i in &self.touched {
            let c = &mut self.conns[i];
            if c.launcher.done {
                return now;
            }
            wake = wake.min(conn_wake(c, true, &rules, timeout_ns, now));
        }
        wake
    }

    /// Sending stopped at `now`: what each schedule had due and unsent is skipped
    /// ([`super::launcher::Launcher::give_up_due`]).
    fn give_up_due(&mut self, now: u64) {
        let rules = self.shared.rules();
        for c in &mut self.conns {
            let mut tally = Counting {
                budget: &mut self.budget,
                rec: &mut self.rec,
            };
            (c.launcher).give_up_due(&rules, (now, &self.clock), &mut tally);
        }
    }

    /// Sends what is due on connection `i` at `now` (nothing if its schedule is over).
    fn send_due(&mut self, i: usize, now: u64, poll: &Poll) {
        if self.conns[i].launcher.done {
            return;
        }
        if self.conns[i].stream.is_none() && now >= self.conns[i].reconnect_at {
            self.reconnect(i, now, poll);
        }
        let rules = self.shared.rules();
        let Conn {
            stream,
            wire,
            wbuf,
            in_flight,
            launcher,
            ..
        } = &mut self.conns[i];
        let mut tally = Counting {
            budget: &mut self.budget,
            rec: &mut self.rec,
        };
        launcher.send_due(
            in_flight,
            stream.is_some(),
            &rules,
            (now, &self.clock),
            &mut tally,
            |l| wire.encode(&l, wbuf),
        );
        if self.conns[i].wbuf.len() > self.conns[i].wpos {
            self.flush(i, poll);
        }
    }

    fn reconnect(&mut self, i: usize, now: u64, poll: &Poll) {
        if self.shared.client.on_error != OnError::Reconnect && !self.conns[i].reopen {
            return;
        }
        let connected = T::connect(
            &self.shared.connector,
            &self.shared.address,
            RECONNECT_TIMEOUT,
        )
        .and_then(|mut s| {
            poll.registry()
                .register(&mut s, Token(i), Interest::READABLE)?;
            Ok(s)
        });
        match connected {
            Ok(mut s) => {
                count_handshake(&mut s, &mut self.faults);
                self.conns[i].stream = Some(s);
                self.conns[i].reopen = false;
                self.conns[i].launcher.reconnected(now);
                let since = std::mem::take(&mut self.conns[i].down_since);
                self.faults.connections.add_down(since, now);
            }
            _ => {
                self.faults.connect_failures += 1;
                self.conns[i].reconnect_at = now + RECONNECT_NS;
                self.give_up_if_endless(i, now);
            }
        }
    }

    /// A run ended by `run.operations` alone has no scheduled end: a connection that cannot
    /// be reopened would hold its share of the budget, and the run, forever. Past
    /// `client.timeout` down, the run stops (what was measured is written).
    fn give_up_if_endless(&mut self, i: usize, now: u64) {
        let down_ns = now.saturating_sub(self.conns[i].down_since);
        let client = self.shared.client;
        if self.shared.timeline.end_ns == u64::MAX && down_ns > client.timeout_ns {
            self.shared.stop.stop_because(endless_stop_message(
                client.global_index(self.first_connection() + i),
                &self.shared.address.to_string(),
                down_ns,
            ));
        }
    }

    fn flush(&mut self, i: usize, poll: &Poll) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        while c.wpos < c.wbuf.len() {
            match stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail(i, Failure::Closed, poll),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.fail(i, Failure::Closed, poll),
            }
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
            match stream.flush() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => {
                    return self.fail(i, Failure::Closed, poll)
                }
                _ => {}
            }
        }
        let pending = c.wpos < c.wbuf.len() || stream.wants_write();
        if pending != c.want_write {
            c.want_write = pending;
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if poll
                .registry()
                .reregister(stream, Token(i), interest)
                .is_err()
            {
                self.fail(i, Failure::Closed, poll);
            }
        }
    }

    /// Reads what arrived on connection `i` and completes the requests it answers;
    /// `to_the_end`: the peer closed (or the socket failed), so read until that shows even
    /// after a short read.
    fn receive(&mut self, i: usize, to_the_end: bool, poll: &Poll) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            if c.rend == c.rbuf.len() {
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
                if c.rend == c.rbuf.len() {
                    // One response larger than the buffer (big payloads): grow, rarely.
                    let grown = c.rbuf.len() * 2;
                    c.rbuf.resize(grown, 0);
                }
            }
            let room = c.rbuf.len() - c.rend;
            let n = match stream.read(&mut c.rbuf[c.rend..]) {
                Ok(0) => return self.fail(i, Failure::Closed, poll),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.fail(i, Failure::Closed, poll),
            };
            // One timestamp per read: every response in it arrived by now.
            let now = crate::clock::now_ns();
            c.rend += n;
            c.wire.arrived(now);
            loop {
                let c = &mut self.conns[i];
                let response = match c.wire.decode(&c.rbuf[c.rstart..c.rend]) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(why) => return self.fail(i, Failure::Malformed(why), poll),
                };
                c.rstart += response.size;
                let flight = match response.id {
                    Some(id) => c.in_flight.complete(id),
                    None => c.in_flight.complete_oldest(),
                };
                let Some(f) = flight else {
                    if response.id.is_some() && !W::STRAY_REPLIES_FAIL {
                        c.wire.stray();
                        self.faults.unmatched_replies += 1;
                        continue;
                    }
                    let what = if response.id.is_some() {
                        "a response to no request in flight"
                    } else {
                        "a reply with no request in flight"
                    };
                    return self.fail(i, Failure::Protocol(what), poll);
                };
                record_response(&mut self.rec, &mut self.faults, i, &f, response.ok, now);
                if let Some(s) = self.conns[i].wire.streamed() {
                    if f.measured && response.ok {
                        self.rec.streamed(f.intended_ns, s);
                    }
                }
                if response.closes {
                    return self.close_as_announced(i, poll);
                }
            }
            let c = &mut self.conns[i];
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
            }
            if T::SHORT_READ_DRAINS && n < room && !to_the_end {
                // The socket is empty: a read now would only say WouldBlock. Skipping it saves a
                // third of the syscalls of a request/response (strace: 2 reads and a write
                // each before); data that comes later raises a new edge.
                return;
            }
        }
    }

    /// The server said it closes connection `i` after the response just read: reopen it at
    /// once. Requests sent after that response cannot be answered on it; they fail as on a
    /// closed connection.
    fn close_as_announced(&mut self, i: usize, poll: &Poll) {
        self.faults.connections.closed_by_server += 1;
        let now = crate::clock::now_ns();
        if self.conns[i].in_flight.in_flight() == 0 {
            let c = &mut self.conns[i];
            c.wire.reset();
            c.rstart = 0;
            c.rend = 0;
            c.want_write = false;
            if let Some(mut s) = c.stream.take() {
                let _ = poll.registry().deregister(&mut s);
            }
        } else {
            self.fail(i, Failure::Closed, poll);
        }
        let c = &mut self.conns[i];
        c.reopen = true;
        c.reconnect_at = now;
        if c.down_since == 0 {
            c.down_since = now.max(1);
        }
    }

    fn check_timeouts(&mut self, now: u64, poll: &Poll) {
        let timeout = self.shared.client.timeout_ns;
        for i in 0..self.conns.len() {
            if self.conns[i].in_flight.timed_out(timeout, now) {
                let c = &self.conns[i];
                let held = &c.rbuf[c.rstart..c.rend];
                let words = (!held.is_empty())
                    .then(|| c.wire.unfinished(held))
                    .flatten();
                self.fail(i, Failure::Timeout(words), poll);
            }
        }
    }

    /// Fails every request in flight on connection `i`, closes it, and stops the run or plans a
    /// reconnection.
    fn fail(&mut self, i: usize, why: Failure, poll: &Poll) {
        let now = crate::clock::now_ns();
        let c = &mut self.conns[i];
        // Cut after its first message; before it, a failed request like any other.
        if let Some(messages) = c.wire.cut_short().filter(|&m| m > 0) {
            if c.in_flight.oldest().is_some_and(|f| f.measured) {
                self.rec.stream_cut(messages);
            }
        }
        fail_all_counted(&mut c.in_flight, &mut self.rec, i, now);
        c.wire.reset();
        c.wbuf.clear();
        c.wpos = 0;
        c.want_write = false;
        c.rstart = 0;
        c.rend = 0;
        if let Some(mut s) = c.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        c.reconnect_at = now + RECONNECT_NS;
        if c.down_since == 0 {
            c.down_since = now.max(1);
        }
        let what = why.count(&mut self.faults, self.shared.client.timeout_ns);
        if self.shared.client.on_error == OnError::Stop {
            self.shared.stop.stop_because(stop_message(
                &what,
                self.shared.client.global_index(self.first_connection() + i),
                &self.shared.address.to_string(),
                now,
                self.shared.timeline.measure_start_ns,
            ));
        }
    }
}

/// When connection `c` needs a look: its oldest request's timeout and, while `sending`, its
/// reconnection or its next send.
fn conn_wake<W, T: Transport>(
    c: &mut Conn<W, T>,
    sending: bool,
    rules: &Rules,
    timeout_ns: u64,
    now: u64,
) -> u64 {
    let mut wake = c.in_flight.oldest_deadline(timeout_ns).unwrap_or(u64::MAX);
    if !sending || c.launcher.done {
        return wake;
    }
    if c.stream.is_none() {
        return wake.min(c.reconnect_at.max(now));
    }
    if let Some(w) = c.launcher.next_wake(&c.in_flight, rules, now) {
        wake = wake.min(w);
    }
    wake
}
