//! The socket thread of an HTTP/2 caller: a single-threaded tokio runtime that owns the
//! caller's HTTP/2 connections, over the `h2` crate for https, streaming calls and
//! `MSGBENCH_HTTP2_CLIENT=h2` (cleartext unary requests go over msgbench's own client,
//! [`super::h2_wire_socket`], whose socket turn this loop runs the same way). Each request
//! from the caller opens a stream on its connection; the caller's window is how many streams
//! a connection carries at once. When the server allows fewer
//! (`SETTINGS_MAX_CONCURRENT_STREAMS`), the rest wait here in order for a stream to free up —
//! waiting that is latency, since the caller timed the request from its intended send.
//!
//! A response is complete at the end of its stream (the last DATA frame or the trailers); its
//! body is read (and its flow-control window given back) as it comes. What it was worth is
//! judged as HTTP/1.1's is: a status outside `http.accept` fails the request, counted by status
//! line; so does a body without `expect`, a JSON-RPC `error` member, a reset stream (counted as
//! `RST_STREAM` with its reason) or a body past `http.max_response`. A connection the server
//! retires gracefully (GOAWAY with NO_ERROR, as nginx does after `keepalive_requests`) finishes
//! the streams it accepted while a new one opens for the rest, as HTTP/1.1's `Connection: close`
//! is followed (counted as closed by the server, not failed). A connection that ends otherwise
//! (GOAWAY with an error, a connection error, a lost socket) is down: its streams in flight
//! fail with it, and under `on_error = "reconnect"` it is opened again.
use super::caller::{
    Down, Ends, Event, InlineSockets, Next, SocketBody, Sockets, Turns, FLUSH, RESET,
};
use super::grpc_bidi::{BidiStream, End};
use super::grpc_client_stream::PacedCall;
use super::h2_connect::{self, connection_error, stream_error, Failure, Open, Target};
use crate::error::EngineError;
use crate::harness::timer::AsyncTimer;
use crate::harness::worker;
use crate::net::json_rpc;
use bytes::{Bytes, BytesMut};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use msgbench_model::http::HttpConfig;
use msgbench_model::result::ErrorCount;
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Pause between reconnection attempts.
pub(super) const RECONNECT_EVERY: Duration = Duration::from_millis(100);
/// Retired connections per connection still finishing their streams, at most.
pub(super) const RETIRING: usize = 4;
/// Responses handed to the caller before the other work of a turn gets a look.
const RESPONSES_PER_TURN: usize = 1024;
/// Turns of an inline caller and its sockets in one poll before the runtime gets a look (its
/// connections' tasks write what the turns sent, and read what comes).
const INLINE_TURNS: usize = 64;

/// `http` over HTTP/2: every caller's socket thread connects to the same server.
pub struct H2Sockets {
    /// What every thread shares.
    pub shared: Arc<H2Plan>,
    /// CPUs of the socket threads (empty: not pinned).
    pub pins: Vec<usize>,
}

/// How requests are sent and responses judged.
pub struct H2Plan {
    /// The server's address.
    pub address: SocketAddr,
    /// The URL as given (for messages).
    pub url: String,
    /// `Some` for https: the rustls configuration (ALPN `h2`) and the name to verify.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// Per class: the request's head (method, URI with scheme and authority, headers) and body.
    pub requests: Vec<(http::Request<()>, Bytes)>,
    /// How a response is judged.
    pub config: HttpConfig,
    /// Reconnect after a failure (else connections stay down).
    pub reconnect: bool,
    /// Hint for a failed first connection.
    pub hint: String,
    /// The lowest `SETTINGS_MAX_CONCURRENT_STREAMS` any connection was given (`usize::MAX`:
    /// none).
    pub max_streams: AtomicUsize,
    /// `Some`: the requests go over msgbench's own HTTP/2 client ([`super::h2_wire_socket`],
    /// the default where it serves), not `h2`.
    pub wire: Option<super::h2_wire_socket::WirePlan>,
}

impl H2Plan {
    /// The per-class requests of `config`, ready to send.
    pub fn requests(config: &HttpConfig) -> Result<Vec<(http::Request<()>, Bytes)>, String> {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        config
            .requests
            .iter()
            .map(|r| {
                let p = &r.parts;
                let uri = format!("{scheme}://{}{}", config.authority, p.target);
                let mut builder = http::Request::builder()
                    .method(p.method.as_str())
                    .uri(uri.as_str())
                    .version(http::Version::HTTP_2);
                for (k, v) in &p.headers {
                    builder = builder.header(k.as_str(), v.as_str());
                }
                let head = builder
                    .body(())
                    .map_err(|e| format!("request `{}` cannot be sent as HTTP/2: {e}", r.name))?;
                Ok((head, Bytes::from(p.body.clone())))
            })
            .collect()
    }
}

impl Sockets for H2Sockets {
    fn thread(
        &self,
        t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
    ) -> SocketBody {
        let plan = self.shared.clone();
        let pin = self.pins.get(t).copied();
        Box::new(move || run(plan, connections, Some(pin), ends, ready, None))
    }

    fn inline(&self) -> Option<&dyn InlineSockets> {
        Some(self)
    }
}

impl InlineSockets for H2Sockets {
    fn run_here(
        &self,
        _t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
        turns: &mut dyn Turns,
    ) -> Vec<ErrorCount> {
        run(
            self.shared.clone(),
            connections,
            None,
            ends,
            ready,
            Some(turns),
        )
    }
}

/// Opens one connection to the plan's server (TCP, TLS with ALPN, preface, a PING answered).
async fn open(plan: &H2Plan) -> Result<Open, EngineError> {
    let target = Target {
        address: plan.address,
        tls: plan.tls.clone(),
        stream_window: plan.config.max_response.clamp(65_535, 16 << 20) as u32,
        section: "http",
        not_h2: if plan.config.requests.iter().any(|r| r.grpc) {
            "is it a gRPC server?"
        } else {
            "use version = \"1.1\""
        },
    };
    h2_connect::open(&target).await.map_err(|f| match f {
        Failure::Connect(source) => EngineError::Connect {
            address: plan.url.clone(),
            source,
            hint: plan.hint.clone(),
        },
        Failure::Problem(problem) => EngineError::Http2 {
            address: plan.url.clone(),
            problem,
        },
    })
}

/// Runs the sockets: connects, reports on `ready`, serves until `stop` (or, with `turns`, runs
/// the caller's turns until it is done); returns the failed answers it read, by message.
/// `pin`: `Some` on a socket thread of its own (then pinned as given, and its CPU clock
/// published); `None` on the caller's thread, already prepared.
fn run(
    plan: Arc<H2Plan>,
    connections: usize,
    pin: Option<Option<usize>>,
    mut ends: Ends,
    ready: Sender<Result<(), EngineError>>,
    mut turns: Option<&mut dyn Turns>,
) -> Vec<ErrorCount> {
    let prepared = match pin {
        Some(pin) => {
            if let Some(clock) = crate::cpu::ThreadCpuClock::current() {
                let _ = ends.cpu_clock.set(clock);
            }
            worker::prepare("http/2 socket", pin, true)
        }
        None => Ok(()),
    }
    .and_then(|()| worker::runtime().map_err(EngineError::Io));
    let runtime = match prepared {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return Vec::new();
        }
    };
    if plan.wire.is_some() {
        return super::h2_wire_socket::run(runtime, plan, connections, ends, ready, turns);
    }
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let opened = futures_util::future::join_all((0..connections).map(|_| open(&plan))).await;
        let mut conns = Vec::with_capacity(connections);
        for o in opened {
            match o {
                Ok(open) => {
                    if let Some(ns) = open.tls_ns {
                        ends.push(Event::TlsHandshake { ns });
                    }
                    conns.push(Conn::up(open, plan.requests.len()))
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return Vec::new();
                }
            }
        }
        // The caller's wake-ups, when it runs here.
        let mut timer = match turns.as_ref().map(|_| AsyncTimer::new()).transpose() {
            Ok(t) => t,
            Err(e) => {
                let _ = ready.send(Err(EngineError::Io(e)));
                return Vec::new();
            }
        };
        let _ = ready.send(Ok(()));
        let mut io = Io {
            judge: Rc::new(Judge::new(&plan.config)),
            conns,
            streams: FuturesUnordered::new(),
            errors: Vec::new(),
            arena: BytesMut::with_capacity(64 << 10),
            flow_waits: Rc::default(),
            plan,
            ends,
        };
        std::future::poll_fn(|cx| match (turns.as_deref_mut(), timer.as_mut()) {
            (Some(turns), Some(timer)) => poll_inline(&mut io, cx, turns, timer),
            _ => poll_threaded(&mut io, cx),
        })
        .await;
        for c in &mut io.conns {
            if let Some(open) = c.open.take() {
                open.driver.abort();
            }
        }
        io.errors
    })
}

/// One connection as its socket thread sees it.
struct Conn {
    open: Option<Open>,
    /// The caller was told it is down (requests for it are dropped until it is up again).
    down: bool,
    /// Connections the server retired, finishing the streams they accepted.
    retiring: Vec<Open>,
    /// Requests given no stream yet (class, id), oldest first.
    waiting: VecDeque<(u32, u64)>,
    /// Bumped each time the connection goes down: answers of an earlier one are dropped.
    generation: u64,
    /// A reopening in progress.
    reopening: Option<tokio::task::JoinHandle<Result<Open, EngineError>>>,
    /// Reopen after this long (set when it went down).
    retry: Option<Duration>,
    /// Per class: the open stream of a bidirectional call (opened by its first request).
    calls: Vec<Option<BidiStream>>,
    /// Calls on retired connections (class, call), still read until the server ends them.
    old_calls: Vec<(usize, BidiStream)>,
    /// Per class: the open call of a paced client-streaming class, taking messages.
    paced: Vec<Option<PacedCall>>,
    /// Paced calls that have all their messages, waiting for their response (at most a
    /// window's worth of messages in all).
    closing: Vec<PacedCall>,
}

impl Conn {
    fn up(open: Open, classes: usize) -> Conn {
        Conn {
            open: Some(open),
            down: false,
            retiring: Vec::new(),
            waiting: VecDeque::new(),
            generation: 0,
            reopening: None,
            retry: None,
            calls: (0..classes).map(|_| None).collect(),
            old_calls: Vec::new(),
            paced: (0..classes).map(|_| None).collect(),
            closing: Vec::new(),
        }
    }

    /// Ends the open paced calls before they have all their messages (nothing more comes for
    /// them): their responses confirm the messages they carry.
    fn end_paced_calls(&mut self) {
        for slot in self.paced.iter_mut() {
            if let Some(mut call) = slot.take() {
                call.end();
                self.closing.push(call);
            }
        }
    }
}

/// How one stream ended.
pub(super) enum Outcome {
    /// Delivered.
    Ok,
    /// Answered, and failed (the reason is counted).
    Failed(String),
}

/// A stream's end: connection, its generation, request id, outcome.
type Ended = (u32, u64, u64, Outcome);

struct Io {
    plan: Arc<H2Plan>,
    ends: Ends,
    judge: Rc<Judge>,
    conns: Vec<Conn>,
    /// Every stream in flight, until its response ends.
    streams: FuturesUnordered<Pin<Box<dyn Future<Output = Ended>>>>,
    /// Failed answers by message.
    errors: Vec<ErrorCount>,
    /// Where bidirectional calls' messages are framed.
    arena: BytesMut,
    /// How long request bodies waited for flow control, ns (handed to the caller each turn).
    flow_waits: Rc<std::cell::RefCell<Vec<u64>>>,
}

/// How long a connection that went down waits before it is opened again: at once after a
/// reset the caller asked for, else [`RECONNECT_EVERY`].
pub(super) fn retry_after(kind: Down) -> Duration {
    if kind == Down::Reset {
        Duration::ZERO
    } else {
        RECONNECT_EVERY
    }
}

/// What is counted when the server retired a connection and its replacement could not be
/// opened: the OS's words, not the first connection's full advice (messages stay short).
pub(super) fn replacement_failed(e: &EngineError) -> String {
    let what = match e {
        EngineError::Connect { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    format!("the server retired the connection and a new one could not be opened ({what})")
}

/// A socket thread's turn, as the loops below run it.
pub(super) trait SocketTurn {
    fn ends(&mut self) -> &mut Ends;
    /// A poll of the runtime begins (the runtime has looked at its sockets since the last).
    fn begin_poll(&mut self) {}
    /// Takes the caller's requests, serves the connections, hands over what came; says
    /// whether anything was handed over.
    fn turn(&mut self, cx: &mut Context<'_>) -> bool;
    /// The loop has nothing to do: sleep this long before looking at the sockets again,
    /// rather than wait in epoll for their news (see `h2_wire_socket::Linger`).
    fn linger(&mut self) -> Option<Duration> {
        None
    }
}

/// The socket thread's loop: a turn whenever the caller handed requests over or a connection
/// has news, until the caller says stop.
pub(super) fn poll_threaded(io: &mut impl SocketTurn, cx: &mut Context<'_>) -> Poll<()> {
    if !io.ends().begin_turn(cx) {
        return Poll::Ready(());
    }
    io.begin_poll();
    io.turn(cx);
    Poll::Pending
}

/// The caller's loop and the sockets' on one thread ([`InlineSockets`]): the caller's turn,
/// then the sockets', again while either made progress; then asleep until a connection has
/// news or the caller's next wake (a timerfd: tokio's own timers have millisecond
/// granularity, too coarse for pacing).
pub(super) fn poll_inline(
    io: &mut impl SocketTurn,
    cx: &mut Context<'_>,
    turns: &mut dyn Turns,
    timer: &mut AsyncTimer,
) -> Poll<()> {
    io.ends().begin_turn(cx);
    io.begin_poll();
    for _ in 0..INLINE_TURNS {
        let next = turns.turn();
        let handed_over = io.turn(cx);
        match next {
            Next::Done => return Poll::Ready(()),
            Next::At(_) if handed_over => {}
            Next::At(wake) => {
                if timer.poll_by(cx, wake).is_pending() {
                    if let Some(nap) = io.linger() {
                        let left = wake.saturating_sub(crate::clock::now_ns());
                        std::thread::sleep(nap.min(Duration::from_nanos(left)));
                        // What came meanwhile is found by the runtime's look at its sockets
                        // (epoll without waiting) before this task's next poll.
                        let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
                    }
                    return Poll::Pending;
                }
            }
            Next::Again => {}
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

impl SocketTurn for Io {
    fn ends(&mut self) -> &mut Ends {
        &mut self.ends
    }

    fn turn(&mut self, cx: &mut Context<'_>) -> bool {
        Io::turn(self, cx)
    }
}

impl Io {
    /// One turn of the sockets: takes the caller's requests, gives them streams, reads what
    /// came, hands responses and state changes over; says whether anything was handed over.
    fn turn(&mut self, cx: &mut Context<'_>) -> bool {
        self.take_requests();
        for i in 0..self.conns.len() {
            self.watch(i, cx);
            self.start_streams(i, cx);
            self.read_calls(i, cx);
        }
        self.finish_streams(cx);
        for ns in self.flow_waits.borrow_mut().drain(..) {
            self.ends.push(Event::FlowControlWait { ns });
        }
        self.reopen(cx);
        self.ends.end_turn(cx)
    }

    fn take_requests(&mut self) {
        while let Some(r) = self.ends.requests.pop() {
            let i = r.conn as usize;
            if r.class == RESET {
                self.down(i, Down::Reset, None);
            } else if !self.conns[i].down {
                // Sent when a stream is free (or, after the server retired the connection, on
                // the one that replaces it).
                self.conns[i].waiting.push_back((r.class, r.id));
            } // else it went down after the caller sent: the caller learns from `Down`
        }
    }

    /// Whether connection `i` is still there: its driver ends when the server ends it. A
    /// retired connection is let go once it has finished its streams.
    fn watch(&mut self, i: usize, cx: &mut Context<'_>) {
        let c = &mut self.conns[i];
        c.retiring
            .retain_mut(|old| Pin::new(&mut old.driver).poll(cx).is_pending());
        let Some(open) = c.open.as_mut() else {
            return;
        };
        let Poll::Ready(ended) = Pin::new(&mut open.driver).poll(cx) else {
            return;
        };
        // A retired connection whose driver is done has nothing left to finish: it is dropped
        // (a finished task's handle must not be polled again).
        match ended {
            // h2 ends a connection without an error both after the server's GOAWAY and when the
            // socket simply closes (a killed server's kernel does that): only the first is a
            // retirement. Which it was is the connection's error, as a new stream would see it.
            Ok(Ok(())) => {
                let lost = match open.send.poll_ready(cx) {
                    Poll::Ready(Err(e)) if !graceful(&e) => Some(connection_error(&e)),
                    _ => None,
                };
                c.open = None;
                match lost {
                    Some(why) => self.down(i, Down::Closed, Some(why)),
                    None => self.retire(i),
                }
            }
            Ok(Err(e)) if graceful(&e) => {
                c.open = None;
                self.retire(i)
            }
            Ok(Err(e)) => self.down(i, Down::Closed, Some(connection_error(&e))),
            Err(_) => self.down(i, Down::Closed, Some("HTTP/2 connection lost".into())),
        }
    }

    /// The server retired connection `i` gracefully: the streams it accepted finish on it; a
    /// new connection opens at once for the requests still waiting and those to come.
    fn retire(&mut self, i: usize) {
        let c = &mut self.conns[i];
        // A server that retires every connection at once and keeps it open must not make this
        // thread hold them all, nor reopen in a tight loop: at most RETIRING are let finish
        // (the oldest is dropped, its streams failing), and past the first the reopening waits.
        if c.retiring.len() >= RETIRING {
            c.retiring.remove(0).driver.abort();
        }
        if let Some(old) = c.open.take() {
            c.retiring.push(old);
        }
        // Its calls finish on it too; new messages open a call on the new connection.
        let open_calls = c.calls.iter_mut().enumerate();
        c.old_calls
            .extend(open_calls.filter_map(|(class, call)| Some((class, call.take()?))));
        if c.old_calls.len() > RETIRING {
            c.old_calls.remove(0);
        }
        // Paced calls end early on it: their responses confirm the messages they carry.
        c.end_paced_calls();
        c.retry = Some(if c.retiring.len() > 1 {
            RECONNECT_EVERY
        } else {
            Duration::ZERO
        });
        self.ends.push(Event::Retired { conn: i as u32 });
    }

    /// Connection `i` takes no new stream: the server retired it (GOAWAY with NO_ERROR, a
    /// new one opens), or it failed.
    fn no_new_stream(&mut self, i: usize, e: &h2::Error) {
        if graceful(e) {
            self.retire(i)
        } else {
            self.down(i, Down::Closed, Some(connection_error(e)))
        }
    }

    /// Gives waiting requests of connection `i` a stream each, as far as the server allows.
    fn start_streams(&mut self, i: usize, cx: &mut Context<'_>) {
        loop {
            let c = &mut self.conns[i];
            let Some(open) = c.open.as_mut() else {
                return;
            };
            let Some(&(class, id)) = c.waiting.front() else {
                return;
            };
            if class == FLUSH {
                // The caller sends no more: its paced calls end, their responses confirming
                // the messages they carry.
                c.waiting.pop_front();
                c.end_paced_calls();
                continue;
            }
            if let Some(per_call) = self.plan.config.requests[class as usize].paced {
                // A message on the class's open call, opened by the first message after the
                // last call filled up.
                if c.paced[class as usize].is_none() {
                    match open.send.poll_ready(cx) {
                        Poll::Pending => return,
                        Poll::Ready(Err(e)) => return self.no_new_stream(i, &e),
                        Poll::Ready(Ok(())) => {}
                    }
                    let head = &self.plan.requests[class as usize].0;
                    match PacedCall::open(&mut open.send, head, per_call) {
                        Ok(call) => c.paced[class as usize] = Some(call),
                        Err(e) => return self.down(i, Down::Closed, Some(stream_error(&e))),
                    }
                }
                let call = c.paced[class as usize].as_mut().expect("opened above");
                let frame = &self.plan.requests[class as usize].1;
                call.send(frame, id);
                c.waiting.pop_front();
                if call.is_full() {
                    let full = c.paced[class as usize].take().expect("there");
                    c.closing.push(full);
                }
                continue;
            }
            if let Some(pair) = &self.plan.config.requests[class as usize].bidi {
                // A message on the class's open call, opened by its first request.
                if c.calls[class as usize].is_none() {
                    match open.send.poll_ready(cx) {
                        Poll::Pending => return,
                        Poll::Ready(Err(e)) => return self.no_new_stream(i, &e),
                        Poll::Ready(Ok(())) => {}
                    }
                    let head = &self.plan.requests[class as usize].0;
                    match BidiStream::open(&mut open.send, head) {
                        Ok(call) => c.calls[class as usize] = Some(call),
                        Err(e) => return self.down(i, Down::Closed, Some(stream_error(&e))),
                    }
                }
                let call = c.calls[class as usize].as_mut().expect("opened above");
                let base = &self.plan.requests[class as usize].1;
                match call.send(&mut self.arena, base, &pair.request, id) {
                    Ok(()) => {
                        c.waiting.pop_front();
                    }
                    Err(e) => return self.down(i, Down::Closed, Some(stream_error(&e))),
                }
                continue;
            }
            match open.send.poll_ready(cx) {
                Poll::Pending => return,
                Poll::Ready(Err(e)) => return self.no_new_stream(i, &e),
                Poll::Ready(Ok(())) => {}
            }
            c.waiting.pop_front();
            let max = open.send.current_max_send_streams();
            self.plan.max_streams.fetch_min(max, Ordering::Relaxed);
            let (head, body) = &self.plan.requests[class as usize];
            let mut request = http::Request::new(());
            *request.method_mut() = head.method().clone();
            *request.uri_mut() = head.uri().clone();
            *request.version_mut() = http::Version::HTTP_2;
            *request.headers_mut() = head.headers().clone();
            let sent = match open.send.send_request(request, body.is_empty()) {
                Ok((response, stream)) => {
                    if !body.is_empty() {
                        send_body(stream, body.clone(), &self.flow_waits);
                    }
                    Ok(response)
                }
                Err(e) => Err(e),
            };
            match sent {
                Ok(response) => {
                    let judge = self.judge.clone();
                    let generation = c.generation;
                    let conn = i as u32;
                    self.streams.push(Box::pin(async move {
                        let outcome = judge.response(class as usize, response).await;
                        (conn, generation, id, outcome)
                    }));
                }
                Err(e) if e.is_reset() => {
                    self.answered(i, id, Outcome::Failed(stream_error(&e)));
                }
                Err(e) if graceful(&e) => {
                    self.conns[i].waiting.push_front((class, id));
                    return self.retire(i);
                }
                Err(e) => {
                    let why = connection_error(&e);
                    return self.down(i, Down::Closed, Some(why));
                }
            }
        }
    }

    /// Hands the caller the replies on connection `i`'s bidirectional calls (and on those of
    /// connections the server retired). A call the server ends takes the connection down: the
    /// requests in flight on it will not be answered.
    fn read_calls(&mut self, i: usize, cx: &mut Context<'_>) {
        let requests = &self.plan.config.requests;
        let c = &mut self.conns[i];
        let mut ended = None;
        for (class, slot) in c.calls.iter_mut().enumerate() {
            let (Some(call), Some(pair)) = (slot.as_mut(), &requests[class].bidi) else {
                continue;
            };
            match replies(call, cx, &pair.reply, &mut self.ends, i) {
                Ok(()) => {}
                Err(End::Finished) => {
                    let why = "gRPC stream ended by the server (OK) with requests on it";
                    ended = Some((Down::Closed, why.into()))
                }
                Err(End::Failed(why)) => ended = Some((Down::Closed, why)),
                Err(End::Protocol(why)) => ended = Some((Down::Protocol, why)),
            }
            if ended.is_some() {
                break;
            }
        }
        let mut finished = Vec::new();
        for (k, (class, call)) in c.old_calls.iter_mut().enumerate() {
            let pair = requests[*class]
                .bidi
                .as_ref()
                .expect("a call of a bidirectional class");
            if let Err(end) = replies(call, cx, &pair.reply, &mut self.ends, i) {
                if let End::Failed(why) | End::Protocol(why) = end {
                    ErrorCount::add(&mut self.errors, &why, 1);
                }
                finished.push(k);
            }
        }
        for k in finished.into_iter().rev() {
            c.old_calls.remove(k);
        }
        // Paced client-streaming calls: a response confirms (or fails) every message of its
        // call; a server may also end a call before it has all of them.
        let mut k = 0;
        while k < c.closing.len() {
            match c.closing[k].poll_response(cx) {
                Poll::Pending => k += 1,
                Poll::Ready(end) => {
                    let call = c.closing.swap_remove(k);
                    confirm(&call, end, (i, &mut self.ends, &mut self.errors));
                }
            }
        }
        for slot in c.paced.iter_mut() {
            if let Some(Poll::Ready(end)) = slot.as_mut().map(|call| call.poll_response(cx)) {
                let call = slot.take().expect("there");
                confirm(&call, end, (i, &mut self.ends, &mut self.errors));
            }
        }
        if let Some((kind, why)) = ended {
            self.down(i, kind, Some(why));
        }
    }

    /// Hands the caller the responses that ended.
    fn finish_streams(&mut self, cx: &mut Context<'_>) {
        for _ in 0..RESPONSES_PER_TURN {
            match self.streams.poll_next_unpin(cx) {
                Poll::Ready(Some((conn, generation, id, outcome))) => {
                    let i = conn as usize;
                    // Answers of an earlier connection that went down are dropped (the
                    // caller failed its requests); a retired one's still count, also while
                    // its replacement is not open yet.
                    if self.conns[i].generation == generation {
                        self.answered(i, id, outcome);
                    }
                }
                Poll::Ready(None) | Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }

    fn answered(&mut self, i: usize, id: u64, outcome: Outcome) {
        let ok = match outcome {
            Outcome::Ok => true,
            Outcome::Failed(why) => {
                ErrorCount::add(&mut self.errors, &why, 1);
                false
            }
        };
        self.ends.push(Event::Reply {
            conn: i as u32,
            id,
            ok,
        });
    }

    /// Marks connection `i` down (`why` is counted); under `reconnect` it is opened again.
    fn down(&mut self, i: usize, kind: Down, why: Option<String>) {
        let c = &mut self.conns[i];
        if c.down {
            return; // already down, and already being reopened
        }
        c.down = true;
        for old in c.open.take().into_iter().chain(c.retiring.drain(..)) {
            old.driver.abort();
        }
        if let Some(attempt) = c.reopening.take() {
            attempt.abort();
        }
        c.generation += 1;
        c.waiting.clear();
        c.calls.iter_mut().for_each(|call| *call = None);
        c.old_calls.clear();
        c.paced.iter_mut().for_each(|call| *call = None);
        c.closing.clear();
        if let Some(why) = why {
            ErrorCount::add(&mut self.errors, &why, 1);
        }
        if self.plan.reconnect {
            c.retry = Some(retry_after(kind));
        }
        self.ends.push(Event::Down {
            conn: i as u32,
            why: kind,
        });
    }

    /// Starts reopening the connections that went down; takes over those that came back.
    fn reopen(&mut self, cx: &mut Context<'_>) {
        for i in 0..self.conns.len() {
            if let Some(delay) = self.conns[i].retry.take() {
                let plan = self.plan.clone();
                let attempt = tokio::task::spawn_local(async move {
                    tokio::time::sleep(delay).await;
                    open(&plan).await
                });
                self.conns[i].reopening = Some(attempt);
            }
            let Some(attempt) = self.conns[i].reopening.as_mut() else {
                continue;
            };
            let Poll::Ready(done) = Pin::new(attempt).poll(cx) else {
                continue;
            };
            self.conns[i].reopening = None;
            match done {
                Ok(Ok(open)) => {
                    if let Some(ns) = open.tls_ns {
                        self.ends.push(Event::TlsHandshake { ns });
                    }
                    self.conns[i].open = Some(open);
                    if std::mem::take(&mut self.conns[i].down) {
                        self.ends.push(Event::Up { conn: i as u32 });
                    }
                    // Requests that waited for it get their streams on the next turn, now:
                    // nothing else may wake this loop soon (this turn's streams were started).
                    cx.waker().wake_by_ref();
                }
                Ok(Err(e)) if !self.conns[i].down => {
                    // The server retired the connection and its replacement failed: a
                    // connection lost like any other (its waiting requests fail with it, and
                    // under `reconnect` it is tried again).
                    // Counted by message (160 characters at most): the OS's words, not the
                    // first connection's full advice.
                    let why = replacement_failed(&e);
                    self.down(i, Down::Closed, Some(why));
                }
                Ok(Err(e)) => {
                    let handshake = !matches!(e, EngineError::Connect { .. });
                    self.ends.push(Event::ConnectFailed { handshake });
                    self.conns[i].retry = Some(RECONNECT_EVERY);
                    cx.waker().wake_by_ref();
                }
                Err(_) => {} // the runtime is shutting down
            }
        }
    }
}

/// Bodies up to this size are handed to h2 whole (no server's window is smaller in
/// practice: HTTP/2's default is 64 KiB); larger ones are sent as the window allows, and the
/// time they are held back is counted.
const SMALL_BODY: usize = 16 << 10;

/// Sends a request's body. A small one is handed to h2 at once; a larger one by a task that
/// sends what the server's flow-control window takes and waits for its WINDOW_UPDATEs for the
/// rest, noting in `waits` how long it was held back (the waits after its first bytes went:
/// the stream's opening is not flow control) when it was.
fn send_body(
    mut stream: h2::SendStream<Bytes>,
    body: Bytes,
    waits: &Rc<std::cell::RefCell<Vec<u64>>>,
) {
    if body.len() <= SMALL_BODY {
        let _ = stream.send_data(body, true);
        return;
    }
    let waits = waits.clone();
    tokio::task::spawn_local(async move {
        stream.reserve_capacity(body.len());
        let (mut sent, mut held_ns) = (0, 0);
        while sent < body.len() {
            let room = stream.capacity();
            if room == 0 {
                let waited = crate::clock::now_ns();
                match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                    Some(Ok(_)) if sent > 0 => held_ns += crate::clock::now_ns() - waited,
                    Some(Ok(_)) => {}
                    _ => return, // the stream or its connection ended: its response says how
                }
                continue;
            }
            let end = (sent + room).min(body.len());
            if stream
                .send_data(body.slice(sent..end), end == body.len())
                .is_err()
            {
                return;
            }
            sent = end;
        }
        if held_ns > 0 {
            waits.borrow_mut().push(held_ns);
        }
    });
}

/// Hands the caller a paced call's messages as its response says: each delivered, or each
/// failed with the reason counted once per message.
fn confirm(
    call: &PacedCall,
    end: Result<(), String>,
    (conn, ends, errors): (usize, &mut Ends, &mut Vec<ErrorCount>),
) {
    if let Err(why) = &end {
        ErrorCount::add(errors, why, call.ids().len() as u64);
    }
    for &id in call.ids() {
        ends.push(Event::Reply {
            conn: conn as u32,
            id,
            ok: end.is_ok(),
        });
    }
}

/// Pushes the replies a bidirectional call has for the caller (at most a turn's worth); `Err`
/// once the call ended.
fn replies(
    call: &mut BidiStream,
    cx: &mut Context<'_>,
    field: &msgbench_model::grpc::ProtoField,
    ends: &mut Ends,
    conn: usize,
) -> Result<(), End> {
    for _ in 0..RESPONSES_PER_TURN {
        match call.poll_reply(cx, field) {
            Poll::Ready(Ok(id)) => ends.push(Event::Reply {
                conn: conn as u32,
                id,
                ok: true,
            }),
            Poll::Ready(Err(end)) => return Err(end),
            Poll::Pending => return Ok(()),
        }
    }
    cx.waker().wake_by_ref(); // more may be there: the next turn reads on
    Ok(())
}

/// The server retired the connection without an error: GOAWAY with NO_ERROR.
fn graceful(e: &h2::Error) -> bool {
    e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR)
}

/// The `grpc-status` in `headers`, when there is one.
fn grpc_status(headers: &http::HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// How a response is judged (as HTTP/1.1's is).
pub(super) struct Judge {
    accept: Vec<u16>,
    /// Per class: what the body must contain.
    expect: Vec<Option<Vec<u8>>>,
    /// Per class: its name.
    names: Vec<String>,
    /// Per class: a gRPC call (judged by its `grpc-status`).
    grpc: Vec<bool>,
    json_rpc: bool,
    max_response: usize,
}

impl Judge {
    pub(super) fn new(config: &HttpConfig) -> Judge {
        Judge {
            accept: config.accept.clone(),
            expect: config.requests.iter().map(|r| r.expect.clone()).collect(),
            names: config.requests.iter().map(|r| r.name.clone()).collect(),
            grpc: config.requests.iter().map(|r| r.grpc).collect(),
            json_rpc: config.json_rpc,
            max_response: config.max_response,
        }
    }

    fn accepts(&self, status: u16) -> bool {
        if self.accept.is_empty() {
            (200..300).contains(&status)
        } else {
            self.accept.contains(&status)
        }
    }

    /// Waits for the response to a stream and its whole body; what it was worth.
    async fn response(
        self: Rc<Self>,
        class: usize,
        response: h2::client::ResponseFuture,
    ) -> Outcome {
        let response = match response.await {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(stream_error(&e)),
        };
        let status = response.status();
        // A gRPC error may come as headers alone ("trailers-only").
        let mut code = grpc_status(response.headers());
        let keep = self.expect[class].is_some() || (self.json_rpc && !self.grpc[class]);
        let mut body = response.into_body();
        let mut kept = Vec::new();
        let mut size = 0usize;
        while let Some(chunk) = body.data().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return Outcome::Failed(stream_error(&e)),
            };
            size += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
            if size > self.max_response {
                // Dropping the body resets the stream (CANCEL): no more of it is read.
                return Outcome::Failed(format!(
                    "response larger than {} bytes",
                    self.max_response
                ));
            }
            if keep {
                kept.extend_from_slice(&chunk);
            }
        }
        if self.grpc[class] && code.is_none() {
            code = match body.trailers().await {
                Ok(trailers) => trailers.as_ref().and_then(grpc_status),
                Err(e) => return Outcome::Failed(stream_error(&e)),
            };
        }
        self.judge(class, status, code, &kept)
    }

    pub(super) fn judge(
        &self,
        class: usize,
        status: http::StatusCode,
        grpc_status: Option<u32>,
        body: &[u8],
    ) -> Outcome {
        if !self.accepts(status.as_u16()) {
            let reason = status.canonical_reason().unwrap_or("");
            return Outcome::Failed(
                format!("HTTP {} {reason}", status.as_u16())
                    .trim_end()
                    .to_string(),
            );
        }
        if self.grpc[class] {
            match grpc_status {
                Some(0) => {}
                Some(code) => {
                    let name = msgbench_model::grpc::status_name(code);
                    return Outcome::Failed(format!("gRPC {name}"));
                }
                None => return Outcome::Failed("a gRPC response without grpc-status".into()),
            }
        } else if self.json_rpc {
            let mut message = String::new();
            match json_rpc::parse_reply(body) {
                Some((_, true)) => {}
                Some((_, false)) => {
                    json_rpc::error_message(body, &mut message);
                    return Outcome::Failed(message);
                }
                None => return Outcome::Failed("not a JSON-RPC response".into()),
            }
        }
        match &self.expect[class] {
            Some(expect)
                if !expect.is_empty() && !body.windows(expect.len()).any(|w| w == expect) =>
            {
                Outcome::Failed(format!("body check failed ({})", self.names[class]))
            }
            _ => Outcome::Ok,
        }
    }
}
