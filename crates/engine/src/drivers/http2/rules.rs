//! What both HTTP/2 clients do the same way, written once: how a response is judged
//! ([`Judge`], [`Outcome`], [`answer`]), what a connection slot does when the server retires
//! it, when it goes down and when it is opened again ([`Slot`]), and the two loops a socket
//! turn runs in ([`poll_threaded`], [`poll_inline`]). Neither client imports the other; each
//! imports this.
use crate::drivers::request_response::caller::{Down, Ends, Event, Next, Turns};
use crate::error::EngineError;
use crate::harness::timer::AsyncTimer;
use crate::net::json_rpc;
use crate::streamed::StreamFigures;
use msgbench_model::http::{HttpConfig, StreamedResponse};
use msgbench_model::result::ErrorCount;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::Sender;
use std::task::{Context, Poll};
use std::time::Duration;

/// Pause between reconnection attempts.
pub(super) const RECONNECT_EVERY: Duration = Duration::from_millis(100);
/// Retired connections per connection still finishing their streams, at most.
pub(super) const RETIRING: usize = 4;
/// Turns of an inline caller and its sockets in one poll before the runtime gets a look (its
/// connections' tasks write what the turns sent, and read what comes).
const INLINE_TURNS: usize = 64;

/// How one stream ended.
pub(super) enum Outcome {
    /// Delivered.
    Ok,
    /// Answered, and failed (the reason is counted).
    Failed(String),
    /// A streamed response delivered: what its messages showed.
    Streamed(Box<StreamFigures>),
    /// A streamed response that failed after its success head (the reason is counted): what
    /// it had delivered.
    Cut {
        why: String,
        figures: Box<StreamFigures>,
    },
}

/// Hands a stream's end to the caller: a failed one's reason counted in `errors`.
pub(super) fn answer(
    errors: &mut Vec<ErrorCount>,
    ends: &mut Ends,
    conn: u32,
    id: u64,
    outcome: Outcome,
) {
    let (ok, figures) = match outcome {
        Outcome::Ok => (true, None),
        Outcome::Failed(why) => {
            ErrorCount::add(errors, &why, 1);
            (false, None)
        }
        Outcome::Streamed(figures) => (true, Some(figures)),
        Outcome::Cut { why, figures } => {
            ErrorCount::add(errors, &why, 1);
            (false, Some(figures))
        }
    };
    match figures {
        None => ends.push(Event::Reply { conn, id, ok }),
        Some(figures) => ends.push_stream(conn, id, ok, figures),
    }
}

/// One of a caller's connections as either client keeps it (`C`: the client's connection):
/// the open one, those the server retired that still finish their streams, the requests
/// given no stream yet, and its reopening.
pub(super) struct Slot<C> {
    pub open: Option<C>,
    /// The caller was told it is down (requests for it are dropped until it is up again).
    pub down: bool,
    /// Connections the server retired, finishing the streams they accepted.
    pub retiring: Vec<C>,
    /// Requests given no stream yet (class, id), oldest first.
    pub waiting: VecDeque<(u32, u64)>,
    /// A reopening in progress.
    reopening: Option<tokio::task::JoinHandle<Result<C, EngineError>>>,
    /// Reopen after this long (set when it went down or was retired).
    retry: Option<Duration>,
}

/// What a reopening came to ([`Slot::reopen`]).
pub(super) enum Reopened {
    /// The new connection is the slot's open one; `was_down`: the caller was told it was down
    /// (tell it it is up).
    Up { was_down: bool },
    /// The server retired the connection and its replacement could not be opened: the slot
    /// is to go down with this reason (its waiting requests fail with it).
    ReplacementFailed(String),
    /// A connection that was down still cannot be opened: tried again after
    /// [`RECONNECT_EVERY`].
    ConnectFailed { handshake: bool },
}

impl<C: 'static> Slot<C> {
    pub fn up(open: C) -> Slot<C> {
        Slot {
            open: Some(open),
            down: false,
            retiring: Vec::new(),
            waiting: VecDeque::new(),
            reopening: None,
            retry: None,
        }
    }

    /// The caller's request `(class, id)` waits for a stream — unless the connection went down
    /// after the caller sent it (the caller learns that from `Down`).
    pub fn wait(&mut self, class: u32, id: u64) {
        if !self.down {
            self.waiting.push_back((class, id));
        }
    }

    /// The server retired the open connection gracefully (GOAWAY, NO_ERROR): the streams it
    /// accepted finish on it while a new one opens at once. A server that retires every
    /// connection at once must not make a thread hold them all, nor reopen in a tight loop: at
    /// most [`RETIRING`] finish (returned: the oldest, dropped to make room — its streams are
    /// the client's to fail), and past the first the reopening waits [`RECONNECT_EVERY`].
    pub fn retire(&mut self) -> Option<C> {
        let dropped = (self.retiring.len() >= RETIRING).then(|| self.retiring.remove(0));
        if let Some(old) = self.open.take() {
            self.retiring.push(old);
        }
        self.retry = Some(if self.retiring.len() > 1 {
            RECONNECT_EVERY
        } else {
            Duration::ZERO
        });
        dropped
    }

    /// The connection went down: everything it held is let go (returned, for the client to
    /// end), its waiting requests dropped (the caller fails them on `Down`), and under
    /// `reconnect` it is opened again — at once after a reset the caller asked for, else after
    /// [`RECONNECT_EVERY`]. `None`: it was down already.
    pub fn down(&mut self, kind: Down, reconnect: bool) -> Option<Vec<C>> {
        if self.down {
            return None;
        }
        self.down = true;
        if let Some(attempt) = self.reopening.take() {
            attempt.abort();
        }
        self.waiting.clear();
        if reconnect {
            self.retry = Some(if kind == Down::Reset {
                Duration::ZERO
            } else {
                RECONNECT_EVERY
            });
        }
        let mut gone: Vec<C> = self.open.take().into_iter().collect();
        gone.append(&mut self.retiring);
        Some(gone)
    }

    /// Starts a reopening that is due (`open` makes the connection, after the delay); takes
    /// over a connection that came back.
    pub fn reopen<F>(&mut self, cx: &mut Context<'_>, open: impl FnOnce() -> F) -> Option<Reopened>
    where
        F: Future<Output = Result<C, EngineError>> + 'static,
    {
        if let Some(delay) = self.retry.take() {
            let opening = open();
            self.reopening = Some(tokio::task::spawn_local(async move {
                tokio::time::sleep(delay).await;
                opening.await
            }));
        }
        let attempt = self.reopening.as_mut()?;
        let Poll::Ready(done) = Pin::new(attempt).poll(cx) else {
            return None;
        };
        self.reopening = None;
        // Requests that waited get their streams on the next turn, now: nothing else may wake
        // the loop soon.
        cx.waker().wake_by_ref();
        match done {
            Ok(Ok(open)) => {
                self.open = Some(open);
                Some(Reopened::Up {
                    was_down: std::mem::take(&mut self.down),
                })
            }
            Ok(Err(e)) if !self.down => Some(Reopened::ReplacementFailed(replacement_failed(&e))),
            Ok(Err(e)) => {
                self.retry = Some(RECONNECT_EVERY);
                let handshake = !matches!(e, EngineError::Connect { .. });
                Some(Reopened::ConnectFailed { handshake })
            }
            Err(_) => None, // the runtime is shutting down
        }
    }
}

/// What is counted when the server retired a connection and its replacement could not be
/// opened: the OS's words, not the first connection's full advice (messages stay short).
fn replacement_failed(e: &EngineError) -> String {
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
    /// rather than wait in epoll for their news (see `own::Linger`).
    fn linger(&mut self) -> Option<Duration> {
        None
    }
}

/// Opens a caller's `count` connections with `open`, all at once; on the first that fails,
/// or on Ctrl-C (`stop`: a server that trickles its opening holds it up to `OPEN_TIMEOUT`),
/// tells `ready` why and returns `None`.
pub(super) async fn open_all<C, F>(
    count: usize,
    open: impl Fn() -> F,
    ready: &Sender<Result<(), EngineError>>,
    plan: &super::H2Plan,
) -> Option<Vec<C>>
where
    F: Future<Output = Result<C, EngineError>>,
{
    let all = futures_util::future::join_all((0..count).map(|_| open()));
    let opened = tokio::select! {
        opened = all => opened,
        () = raised(&plan.stop) => {
            let _ = ready.send(Err(EngineError::Http2 {
                address: plan.url.clone(),
                problem: "interrupted (Ctrl-C) while the connections opened".into(),
            }));
            return None;
        }
    };
    let mut all = Vec::with_capacity(count);
    for o in opened {
        match o {
            Ok(c) => all.push(c),
            Err(e) => {
                let _ = ready.send(Err(e));
                return None;
            }
        }
    }
    Some(all)
}

/// Returns once `stop` is raised (looked at every 20 ms).
async fn raised(stop: &std::sync::atomic::AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tells `ready` the connections are up, and returns the caller's wake-up timer when it runs on
/// this thread (`inline`): a timerfd, since tokio's timers have millisecond granularity.
/// `None` when the timer could not be made (`ready` is told why).
pub(super) fn ready_to_serve(
    inline: bool,
    ready: &Sender<Result<(), EngineError>>,
) -> Option<Option<AsyncTimer>> {
    match inline.then(AsyncTimer::new).transpose() {
        Ok(timer) => {
            let _ = ready.send(Ok(()));
            Some(timer)
        }
        Err(e) => {
            let _ = ready.send(Err(EngineError::Io(e)));
            None
        }
    }
}

/// Runs `io`'s turns until the caller is done ([`poll_inline`], with `turns` and the timer of
/// [`ready_to_serve`]) or says stop ([`poll_threaded`]).
pub(super) async fn serve(
    io: &mut impl SocketTurn,
    mut turns: Option<&mut dyn Turns>,
    mut timer: Option<AsyncTimer>,
) {
    std::future::poll_fn(|cx| match (turns.as_deref_mut(), timer.as_mut()) {
        (Some(turns), Some(timer)) => poll_inline(io, cx, turns, timer),
        _ => poll_threaded(io, cx),
    })
    .await
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

/// The caller's loop and the sockets' on one thread (`InlineSockets`): the caller's turn,
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

/// The `grpc-status` in `headers`, when there is one.
pub(super) fn grpc_status(headers: &http::HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// How a response is judged (as HTTP/1.1's is).
pub(super) struct Judge {
    accept: Vec<u16>,
    /// Per class: what the body must contain.
    pub expect: Vec<Option<Vec<u8>>>,
    /// Per class: its name.
    names: Vec<String>,
    /// Per class: a gRPC call (judged by its `grpc-status`).
    pub grpc: Vec<bool>,
    /// Per class: its response is a stream of messages, read as they come.
    pub streams: Vec<Option<StreamedResponse>>,
    pub json_rpc: bool,
    pub max_response: usize,
}

impl Judge {
    pub(super) fn new(config: &HttpConfig) -> Judge {
        Judge {
            accept: config.accept.clone(),
            expect: config.requests.iter().map(|r| r.expect.clone()).collect(),
            names: config.requests.iter().map(|r| r.name.clone()).collect(),
            grpc: config.requests.iter().map(|r| r.grpc).collect(),
            streams: config.requests.iter().map(|r| r.stream.clone()).collect(),
            json_rpc: config.json_rpc,
            max_response: config.max_response,
        }
    }

    pub(super) fn accepts(&self, status: u16) -> bool {
        if self.accept.is_empty() {
            (200..300).contains(&status)
        } else {
            self.accept.contains(&status)
        }
    }

    /// Whether class `class`'s response body is read for its judgement (kept until the end).
    pub(super) fn keeps(&self, class: usize) -> bool {
        self.expect[class].is_some() || (self.json_rpc && !self.grpc[class])
    }

    /// What a response of class `class` was worth: its status, its `grpc-status` (a gRPC
    /// call), its body (when [`Judge::keeps`]).
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
