//! The `h2` crate's HTTP/2 client: https, streaming calls (client, server and bidirectional
//! gRPC), streamed responses ([`super::streamed`]), and any run with `http.client = "h2"`. Each request from the caller opens a stream
//! on its connection; the caller's window is how many streams a connection carries at once.
//! When the server allows fewer (`SETTINGS_MAX_CONCURRENT_STREAMS`), the rest wait here in
//! order for a stream to free up — waiting that is latency, since the caller timed the request
//! from its intended send.
//!
//! A response is complete at the end of its stream (the last DATA frame or the trailers); its
//! body is read (and its flow-control window given back) as it comes, and judged by
//! [`Judge`]; a reset stream fails as `RST_STREAM` with its reason. What a connection does when
//! the server retires it, when it goes down and when it opens again is [`Slot`]'s, as on
//! msgbench's own client.
use super::connect::{self, connection_error, stream_error, Failure, Open, Target};
use super::grpc_bidi::{BidiStream, End};
use super::grpc_client_stream::PacedCall;
use super::rules::{
    answer, grpc_status, open_all, ready_to_serve, serve, Judge, Outcome, Reopened, Slot,
    SocketTurn,
};
use super::H2Plan;
use crate::drivers::request_response::caller::{Down, Ends, Event, Turns, FLUSH, RESET};
use crate::error::EngineError;
use bytes::{Bytes, BytesMut};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use msgbench_model::result::ErrorCount;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Responses handed to the caller before the other work of a turn gets a look.
const RESPONSES_PER_TURN: usize = 1024;

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
    connect::open(&target).await.map_err(|f| match f {
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

/// Runs the sockets on an already prepared runtime (see `super::run`): connects, reports on
/// `ready`, serves until `stop` (or, with `turns`, runs the caller's turns until it is done);
/// returns the failed answers it read, by message.
pub(super) fn run(
    runtime: tokio::runtime::Runtime,
    plan: Arc<H2Plan>,
    connections: usize,
    mut ends: Ends,
    ready: Sender<Result<(), EngineError>>,
    turns: Option<&mut dyn Turns>,
) -> Vec<ErrorCount> {
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let Some(opened) = open_all(connections, || open(&plan), &ready, &plan).await else {
            return Vec::new();
        };
        let classes = plan.requests.len();
        let mut conns = Vec::with_capacity(connections);
        for open in opened {
            if let Some(ns) = open.tls_ns {
                ends.push(Event::TlsHandshake { ns });
            }
            conns.push(Conn::up(open, classes));
        }
        let Some(timer) = ready_to_serve(turns.is_some(), &ready) else {
            return Vec::new();
        };
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
        serve(&mut io, turns, timer).await;
        for c in &mut io.conns {
            if let Some(open) = c.slot.open.take() {
                open.driver.abort();
            }
        }
        io.errors
    })
}

/// One connection as its socket thread sees it.
struct Conn {
    /// The connection, those the server retired, the requests waiting for a stream.
    slot: Slot<Open>,
    /// Bumped each time the connection goes down: answers of an earlier one are dropped.
    generation: u64,
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
            slot: Slot::up(open),
            generation: 0,
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
            } else {
                // Sent when a stream is free (or, after the server retired the connection, on
                // the one that replaces it).
                self.conns[i].slot.wait(r.class, r.id);
            }
        }
    }

    /// Whether connection `i` is still there: its driver ends when the server ends it. A
    /// retired connection is let go once it has finished its streams.
    fn watch(&mut self, i: usize, cx: &mut Context<'_>) {
        let c = &mut self.conns[i];
        (c.slot.retiring).retain_mut(|old| Pin::new(&mut old.driver).poll(cx).is_pending());
        let Some(open) = c.slot.open.as_mut() else {
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
                c.slot.open = None;
                match lost {
                    Some(why) => self.down(i, Down::Closed, Some(why)),
                    None => self.retire(i),
                }
            }
            Ok(Err(e)) if graceful(&e) => {
                c.slot.open = None;
                self.retire(i)
            }
            Ok(Err(e)) => self.down(i, Down::Closed, Some(connection_error(&e))),
            Err(_) => self.down(i, Down::Closed, Some("HTTP/2 connection lost".into())),
        }
    }

    /// The server retired connection `i` gracefully: the streams it accepted finish on it
    /// ([`Slot::retire`]), and so do its calls; new messages open a call on the new connection.
    fn retire(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if let Some(dropped) = c.slot.retire() {
            dropped.driver.abort(); // its streams fail with it
        }
        let open_calls = c.calls.iter_mut().enumerate();
        c.old_calls
            .extend(open_calls.filter_map(|(class, call)| Some((class, call.take()?))));
        if c.old_calls.len() > super::rules::RETIRING {
            c.old_calls.remove(0);
        }
        // Paced calls end early on it: their responses confirm the messages they carry.
        c.end_paced_calls();
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

    /// Gives waiting requests of connection `i` a stream each (or a message on their class's
    /// open call), as far as the server allows.
    fn start_streams(&mut self, i: usize, cx: &mut Context<'_>) {
        loop {
            let c = &mut self.conns[i];
            let Some(&(class, id)) = c.slot.waiting.front() else {
                return;
            };
            if c.slot.open.is_none() {
                return;
            }
            if class == FLUSH {
                // The caller sends no more: its paced calls end, their responses confirming
                // the messages they carry.
                c.slot.waiting.pop_front();
                c.end_paced_calls();
                continue;
            }
            let request = &self.plan.config.requests[class as usize];
            let started = if let Some(per_call) = request.paced {
                self.start_paced(i, class as usize, per_call, id, cx)
            } else if request.bidi.is_some() {
                self.start_bidi(i, class as usize, id, cx)
            } else {
                self.start_unary(i, class, id, cx)
            };
            if !started {
                return;
            }
        }
    }

    /// Whether connection `i` takes a new stream now (`false`: not yet, or it is gone — then
    /// retired or down).
    fn stream_ready(&mut self, i: usize, cx: &mut Context<'_>) -> bool {
        let open = self.conns[i].slot.open.as_mut().expect("checked open");
        match open.send.poll_ready(cx) {
            Poll::Pending => false,
            Poll::Ready(Err(e)) => {
                self.no_new_stream(i, &e);
                false
            }
            Poll::Ready(Ok(())) => true,
        }
    }

    /// A message of paced client-streaming class `class` on its open call, opened by the first
    /// message after the last call filled up; says whether it went.
    fn start_paced(
        &mut self,
        i: usize,
        class: usize,
        per_call: u32,
        id: u64,
        cx: &mut Context<'_>,
    ) -> bool {
        if self.conns[i].paced[class].is_none() {
            if !self.stream_ready(i, cx) {
                return false;
            }
            let c = &mut self.conns[i];
            let open = c.slot.open.as_mut().expect("checked open");
            let head = &self.plan.requests[class].0;
            match PacedCall::open(&mut open.send, head, per_call) {
                Ok(call) => c.paced[class] = Some(call),
                Err(e) => {
                    self.down(i, Down::Closed, Some(stream_error(&e)));
                    return false;
                }
            }
        }
        let c = &mut self.conns[i];
        let call = c.paced[class].as_mut().expect("opened above");
        call.send(&self.plan.requests[class].1, id);
        c.slot.waiting.pop_front();
        if call.is_full() {
            let full = c.paced[class].take().expect("there");
            c.closing.push(full);
        }
        true
    }

    /// A message of bidirectional class `class` on its open call, opened by its first
    /// request; says whether it went.
    fn start_bidi(&mut self, i: usize, class: usize, id: u64, cx: &mut Context<'_>) -> bool {
        if self.conns[i].calls[class].is_none() {
            if !self.stream_ready(i, cx) {
                return false;
            }
            let c = &mut self.conns[i];
            let open = c.slot.open.as_mut().expect("checked open");
            match BidiStream::open(&mut open.send, &self.plan.requests[class].0) {
                Ok(call) => c.calls[class] = Some(call),
                Err(e) => {
                    self.down(i, Down::Closed, Some(stream_error(&e)));
                    return false;
                }
            }
        }
        let pair = self.plan.config.requests[class]
            .bidi
            .as_ref()
            .expect("bidi");
        let c = &mut self.conns[i];
        let call = c.calls[class].as_mut().expect("opened above");
        let base = &self.plan.requests[class].1;
        match call.send(&mut self.arena, base, &pair.request, id) {
            Ok(()) => {
                c.slot.waiting.pop_front();
                true
            }
            Err(e) => {
                self.down(i, Down::Closed, Some(stream_error(&e)));
                false
            }
        }
    }

    /// A unary request of class `class` on a stream of its own; says whether the next may go.
    fn start_unary(&mut self, i: usize, class: u32, id: u64, cx: &mut Context<'_>) -> bool {
        if !self.stream_ready(i, cx) {
            return false;
        }
        let c = &mut self.conns[i];
        let open = c.slot.open.as_mut().expect("checked open");
        c.slot.waiting.pop_front();
        let max = open.send.current_max_send_streams();
        self.plan.max_streams.fetch_min(max, Ordering::Relaxed);
        let (head, body) = &self.plan.requests[class as usize];
        let mut request = http::Request::new(());
        *request.method_mut() = head.method().clone();
        *request.uri_mut() = head.uri().clone();
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = head.headers().clone();
        match open.send.send_request(request, body.is_empty()) {
            Ok((response_future, stream)) => {
                if !body.is_empty() {
                    send_body(stream, body.clone(), &self.flow_waits);
                }
                let judge = self.judge.clone();
                let generation = c.generation;
                let conn = i as u32;
                let streamed = judge.streams[class as usize].is_some();
                self.streams.push(Box::pin(async move {
                    let outcome = if streamed {
                        super::streamed::response(judge, class as usize, response_future).await
                    } else {
                        response(judge, class as usize, response_future).await
                    };
                    (conn, generation, id, outcome)
                }));
                true
            }
            Err(e) if e.is_reset() => {
                self.answered(i, id, Outcome::Failed(stream_error(&e)));
                true
            }
            Err(e) if graceful(&e) => {
                self.conns[i].slot.waiting.push_front((class, id));
                self.retire(i);
                false
            }
            Err(e) => {
                let why = connection_error(&e);
                self.down(i, Down::Closed, Some(why));
                false
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
        answer(&mut self.errors, &mut self.ends, i as u32, id, outcome);
    }

    /// Marks connection `i` down (`why` is counted); under `reconnect` it is opened again.
    fn down(&mut self, i: usize, kind: Down, why: Option<String>) {
        let c = &mut self.conns[i];
        let Some(gone) = c.slot.down(kind, self.plan.reconnect) else {
            return; // already down, and already being reopened
        };
        for old in gone {
            old.driver.abort();
        }
        c.generation += 1;
        c.calls.iter_mut().for_each(|call| *call = None);
        c.old_calls.clear();
        c.paced.iter_mut().for_each(|call| *call = None);
        c.closing.clear();
        if let Some(why) = why {
            ErrorCount::add(&mut self.errors, &why, 1);
        }
        self.ends.push(Event::Down {
            conn: i as u32,
            why: kind,
        });
    }

    /// Starts reopening the connections that went down; takes over those that came back.
    fn reopen(&mut self, cx: &mut Context<'_>) {
        for i in 0..self.conns.len() {
            let plan = &self.plan;
            let reopened = self.conns[i].slot.reopen(cx, || {
                let plan = plan.clone();
                async move { open(&plan).await }
            });
            match reopened {
                None => {}
                Some(Reopened::Up { was_down }) => {
                    let open = self.conns[i].slot.open.as_ref().expect("just opened");
                    if let Some(ns) = open.tls_ns {
                        self.ends.push(Event::TlsHandshake { ns });
                    }
                    if was_down {
                        self.ends.push(Event::Up { conn: i as u32 });
                    }
                }
                // A connection lost like any other (its waiting requests fail with it, and
                // under `reconnect` it is tried again).
                Some(Reopened::ReplacementFailed(why)) => self.down(i, Down::Closed, Some(why)),
                Some(Reopened::ConnectFailed { handshake }) => {
                    self.ends.push(Event::ConnectFailed { handshake })
                }
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

/// Waits for the response to a stream and its whole body; what it was worth.
async fn response(judge: Rc<Judge>, class: usize, response: h2::client::ResponseFuture) -> Outcome {
    let response = match response.await {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(stream_error(&e)),
    };
    let status = response.status();
    // A gRPC error may come as headers alone ("trailers-only").
    let mut code = grpc_status(response.headers());
    let keep = judge.keeps(class);
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
        if size > judge.max_response {
            // Dropping the body resets the stream (CANCEL): no more of it is read.
            return Outcome::Failed(format!("response larger than {} bytes", judge.max_response));
        }
        if keep {
            kept.extend_from_slice(&chunk);
        }
    }
    if judge.grpc[class] && code.is_none() {
        code = match body.trailers().await {
            Ok(trailers) => trailers.as_ref().and_then(grpc_status),
            Err(e) => return Outcome::Failed(stream_error(&e)),
        };
    }
    judge.judge(class, status, code, &kept)
}
