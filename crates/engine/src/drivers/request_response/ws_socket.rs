//! The socket thread of one `ws-rpc` caller: a single-threaded tokio runtime that owns the
//! caller's WebSocket connections. Requests come from the caller through an SPSC ring (and a
//! `Notify` when the thread may be asleep in epoll); each is encoded as JSON-RPC from a
//! pre-built prefix (`{"jsonrpc":"2.0","method":…,"params":…,"id":`) and the id, fed, and
//! flushed once per batch. Responses are parsed for their id and outcome and handed back
//! through a second ring; the caller waits for them with its wait strategy, and this thread
//! wakes it when that strategy may park.
use super::caller::{Down, Ends, Event, SocketBody, Sockets, FLUSH, RESET};
use super::ws_streams::{Read, WsStreams};
use crate::drivers::failure::OpenError;
use crate::drivers::streams::tick_client::{open, ClientWs};
use crate::error::EngineError;
use crate::harness::worker;
use crate::net::json_rpc::{error_message, parse_reply};
use bytes::{BufMut, BytesMut};
use futures_util::{Sink, Stream};
use msgbench_model::result::ErrorCount;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::Sender;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_websockets::Message;

/// Pause between reconnection attempts.
const RECONNECT_EVERY: Duration = Duration::from_millis(100);
/// Responses read from one connection before the others get a turn.
const READS_PER_TURN: usize = 256;
/// Everything a socket thread needs.
pub struct Plan {
    /// `ws://…` of the server.
    pub url: String,
    /// Connections it owns.
    pub connections: usize,
    /// CPU to pin it to.
    pub pin: Option<usize>,
    /// Per class: the request text before the id.
    pub prefixes: Vec<String>,
    /// Per class: the `result` that ends its streamed answer (`None`: one response).
    pub streams: Vec<Option<String>>,
    /// Reconnect after a failure (else connections stay down).
    pub reconnect: bool,
    /// Hint for a failed first connection.
    pub hint: String,
}

/// `ws-rpc`'s socket threads: every caller's connects to the same URL.
pub struct WsRpcSockets {
    /// `ws://…` of the server.
    pub url: String,
    /// Per class: the request text before the id.
    pub prefixes: Vec<String>,
    /// Per class: the `result` that ends its streamed answer (`None`: one response).
    pub streams: Vec<Option<String>>,
    /// Reconnect after a failure.
    pub reconnect: bool,
    /// Hint for a failed first connection.
    pub hint: String,
    /// CPUs of the socket threads (empty: not pinned).
    pub pins: Vec<usize>,
}

impl Sockets for WsRpcSockets {
    fn thread(
        &self,
        t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
    ) -> SocketBody {
        let plan = Plan {
            url: self.url.clone(),
            connections,
            pin: self.pins.get(t).copied(),
            prefixes: self.prefixes.clone(),
            streams: self.streams.clone(),
            reconnect: self.reconnect,
            hint: self.hint.clone(),
        };
        Box::new(move || run(plan, ends, ready))
    }
}

/// Runs the socket thread: connects, reports on `ready`, serves until `stop`; returns the error
/// replies it read, by message.
pub fn run(plan: Plan, ends: Ends, ready: Sender<Result<(), EngineError>>) -> Vec<ErrorCount> {
    if let Some(clock) = crate::cpu::ThreadCpuClock::current() {
        let _ = ends.cpu_clock.set(clock);
    }
    let prepared = worker::prepare("ws-rpc socket", plan.pin, true)
        .and_then(|()| worker::runtime().map_err(EngineError::Io));
    let runtime = match prepared {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return Vec::new();
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let mut conns = Vec::with_capacity(plan.connections);
        for _ in 0..plan.connections {
            match open(&plan.url, 0, &None).await {
                Ok(ws) => conns.push(Some(ws)),
                Err(e) => {
                    let _ = ready.send(Err(e.into_engine(&plan.url, &plan.hint)));
                    return Vec::new();
                }
            }
        }
        let _ = ready.send(Ok(()));
        let mut io = Io {
            conns,
            dirty: vec![false; plan.connections],
            reconnecting: (0..plan.connections).map(|_| None).collect(),
            retry: Vec::new(),
            arena: BytesMut::with_capacity(64 << 10),
            errors: Vec::new(),
            scratch: String::with_capacity(256),
            streams: WsStreams::new(plan.streams.clone(), plan.connections),
            plan,
            ends,
        };
        std::future::poll_fn(|cx| io.poll(cx)).await;
        for ws in io.conns.iter_mut().flatten() {
            let _ =
                tokio::time::timeout(Duration::from_millis(100), futures_util::SinkExt::close(ws))
                    .await;
        }
        io.errors
    })
}

struct Io {
    plan: Plan,
    ends: Ends,
    conns: Vec<Option<ClientWs>>,
    dirty: Vec<bool>,
    /// Connections being opened again.
    reconnecting: Vec<Option<tokio::task::JoinHandle<Result<ClientWs, OpenError>>>>,
    /// Connections to open again, and after how long.
    retry: Vec<(usize, Duration)>,
    arena: BytesMut,
    /// Error replies by message.
    errors: Vec<ErrorCount>,
    /// Where an error reply's message is written (reused: no allocation per error reply).
    scratch: String,
    /// Calls answered by streams, in flight.
    streams: WsStreams,
}

impl Io {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.ends.begin_turn(cx) {
            return Poll::Ready(());
        }
        self.send_requests();
        for i in 0..self.conns.len() {
            self.flush(i, cx);
            self.read(i, cx);
        }
        for (i, delay) in std::mem::take(&mut self.retry) {
            self.try_again(i, delay, cx);
        }
        self.reconnect(cx);
        self.ends.end_turn(cx);
        Poll::Pending
    }

    fn send_requests(&mut self) {
        while let Some(r) = self.ends.requests.pop() {
            let i = r.conn as usize;
            if r.class == RESET {
                self.down(i, Down::Reset);
                continue;
            }
            if r.class == FLUSH {
                continue; // nothing here waits for more requests
            }
            let Some(ws) = self.conns[i].as_mut() else {
                continue; // it went down after the caller sent: the caller learns from `Down`
            };
            if self.arena.capacity() - self.arena.len() < 512 {
                self.arena.reserve(64 << 10);
            }
            self.arena
                .put_slice(self.plan.prefixes[r.class as usize].as_bytes());
            let mut digits = itoa_buffer();
            self.arena.put_slice(format_u64(r.id, &mut digits));
            self.arena.put_u8(b'}');
            let message = Message::text(self.arena.split().freeze());
            if Pin::new(ws).start_send(message).is_err() {
                self.down(i, Down::Closed);
                continue;
            }
            self.streams.sent(i, r.class as usize, r.id);
            self.dirty[i] = true;
        }
    }

    fn flush(&mut self, i: usize, cx: &mut Context<'_>) {
        if !self.dirty[i] {
            return;
        }
        let Some(ws) = self.conns[i].as_mut() else {
            self.dirty[i] = false;
            return;
        };
        match Pin::new(ws).poll_flush(cx) {
            Poll::Ready(Ok(())) => self.dirty[i] = false,
            Poll::Ready(Err(_)) => self.down(i, Down::Closed),
            Poll::Pending => {}
        }
    }

    /// Reads the responses that arrived on connection `i`.
    fn read(&mut self, i: usize, cx: &mut Context<'_>) {
        for _ in 0..READS_PER_TURN {
            let Some(ws) = self.conns[i].as_mut() else {
                return;
            };
            match Pin::new(ws).poll_next(cx) {
                Poll::Ready(Some(Ok(m))) if m.is_text() || m.is_binary() => {
                    if self.streams.any() {
                        let now = crate::clock::now_ns();
                        let to = (&mut self.ends, &mut self.errors, &mut self.scratch);
                        if let Read::Taken = self.streams.read(i, m.as_payload(), now, to) {
                            continue;
                        }
                    }
                    match parse_reply(m.as_payload()) {
                        Some((id, ok)) => {
                            if !ok {
                                error_message(m.as_payload(), &mut self.scratch);
                                ErrorCount::add(&mut self.errors, &self.scratch, 1);
                            }
                            self.ends.push(Event::Reply {
                                conn: i as u32,
                                id,
                                ok,
                            })
                        }
                        None => return self.down(i, Down::Protocol),
                    }
                }
                Poll::Ready(Some(Ok(_))) => {} // ping, pong
                Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                    return self.down(i, Down::Closed);
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }

    /// Marks connection `i` down; under `reconnect` it is opened again.
    fn down(&mut self, i: usize, why: Down) {
        if self.conns[i].is_none() {
            return; // already down, and already being reopened
        }
        self.conns[i] = None;
        self.dirty[i] = false;
        let reset = why == Down::Reset;
        self.streams
            .lost(i, reset, &mut self.ends, &mut self.errors);
        self.ends.push(Event::Down {
            conn: i as u32,
            why,
        });
        if self.plan.reconnect {
            self.retry.push((
                i,
                if why == Down::Reset {
                    Duration::ZERO
                } else {
                    RECONNECT_EVERY
                },
            ));
        }
    }

    /// Takes over the connections that came back, and tries again those that did not.
    fn reconnect(&mut self, cx: &mut Context<'_>) {
        for i in 0..self.conns.len() {
            let Some(attempt) = self.reconnecting[i].as_mut() else {
                continue;
            };
            let Poll::Ready(done) = Pin::new(attempt).poll(cx) else {
                continue;
            };
            self.reconnecting[i] = None;
            match done {
                Ok(Ok(ws)) => {
                    self.conns[i] = Some(ws);
                    self.ends.push(Event::Up { conn: i as u32 });
                }
                Ok(Err(e)) => {
                    self.ends.push(Event::ConnectFailed {
                        handshake: matches!(e, OpenError::Handshake(_)),
                    });
                    self.try_again(i, RECONNECT_EVERY, cx);
                }
                Err(_) => {} // the runtime is shutting down
            }
        }
    }

    /// Opens connection `i` again after `delay`, in a task of this thread.
    fn try_again(&mut self, i: usize, delay: Duration, cx: &mut Context<'_>) {
        let url = self.plan.url.clone();
        let mut attempt = tokio::task::spawn_local(async move {
            tokio::time::sleep(delay).await;
            open(&url, 0, &None).await
        });
        // Register interest now: its completion must wake this poll.
        if let Poll::Ready(done) = Pin::new(&mut attempt).poll(cx) {
            drop(done);
        }
        self.reconnecting[i] = Some(attempt);
    }
}

/// A stack buffer for [`format_u64`].
fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// The decimal digits of `v` (no allocation).
fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_written_in_decimal() {
        let mut b = itoa_buffer();
        assert_eq!(format_u64(0, &mut b), b"0");
        assert_eq!(format_u64(u64::MAX, &mut b), b"18446744073709551615");
        assert_eq!(format_u64(4_294_967_297, &mut b), b"4294967297");
    }
}
