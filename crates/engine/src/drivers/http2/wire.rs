//! msgbench's own HTTP/2 client connection for unary requests (RFC 9113), without I/O: bytes
//! from the server go in ([`Client::receive`]), bytes for it come out ([`Client::out`]),
//! finished streams are handed to a callback as they end.
//!
//! The default for cleartext unary requests (`http.client = "h2"` selects the `h2` crate's
//! client instead; https and streaming calls always use it); its socket turn is
//! `drivers/http2/own.rs`. Why by hand at all, when `h2` is well kept:
//! a client that measures a server must cost less than the peer a user compares it with. With
//! `h2`, msgbench spent 1.4–1.6× h2load's user-space CPU per request (9–10 µs against 5.7–6.6,
//! `bench/http2-vs-h2load.sh`, nginx, 4 × 64 streams): an `http::Request` and `HeaderMap` per
//! request and per response, HPACK decoding of every response header, a boxed future, a
//! task and several `Bytes` per stream, a stream store behind a mutex. Here a request is a
//! header block encoded once per class and copied into the output with a frame header; a
//! stream is a slot in a ring indexed by its id; a response is two numbers (`:status`,
//! `grpc-status`) and, when it is checked, its body — no allocation per request once warm.
//!
//! What it does: the preface and settings (push disabled, windows as large as `h2`'s path
//! asked for), PING answered, the server's settings honoured (`MAX_CONCURRENT_STREAMS`,
//! `INITIAL_WINDOW_SIZE` on every open stream, `MAX_FRAME_SIZE`), request bodies sent as the
//! server's windows allow (and the time held back counted), receive windows given back as
//! responses are read, HEADERS with CONTINUATION, padding and priority, informational
//! responses skipped, trailers read, RST_STREAM by reason, GOAWAY (NO_ERROR: the streams it
//! did not take are handed back to be sent again; an error: the connection is over). Any
//! breach of the protocol ends the connection with its reason. It does not: server push
//! (disabled), TLS (the `h2` path serves https), streaming calls (the `h2` path too).
use super::hpack::{Decoder, HpackError};
use bytes::Bytes;

/// The client's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Largest frame this client takes (announced in its settings, as the `h2` path does).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest header block (HEADERS and its CONTINUATIONs) taken: a larger one ends the
/// connection rather than taking memory.
const MAX_BLOCK: usize = 1 << 20;
/// The connection's receive window (as the `h2` path's: large enough that a fast server is
/// never held back by this client's updates).
pub const CONNECTION_WINDOW: u32 = 64 << 20;
/// Unwritten output past which the server is taken not to read (a PING or SETTINGS flood
/// whose answers it never reads must not take memory).
const MAX_OUT: usize = 16 << 20;
/// The largest window HTTP/2 allows.
const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The highest stream id.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// HTTP/2 error codes (RFC 9113, 7).
const NO_ERROR: u32 = 0;
const PROTOCOL_ERROR: u32 = 1;
const FLOW_CONTROL_ERROR: u32 = 3;
const FRAME_SIZE_ERROR: u32 = 6;
const CANCEL: u32 = 8;
const COMPRESSION_ERROR: u32 = 9;

/// An error code's name, as the `h2` path counts them (`h2::Reason`'s names).
pub fn reason(code: u32) -> String {
    format!("{:?}", h2::Reason::from(code))
}

/// How a stream ended.
pub enum Finished<'a> {
    /// The server answered: its status, `grpc-status` (headers or trailers), and the body when
    /// it was asked to be kept.
    Answered {
        /// `:status`.
        status: u16,
        /// `grpc-status`, when there was one.
        grpc_status: Option<u32>,
        /// The body, when kept.
        body: &'a [u8],
    },
    /// Failed: what it is counted as.
    Failed(String),
    /// The server retired the connection without taking it (GOAWAY below its id): safe to
    /// send again on another connection.
    Unprocessed,
}

/// One stream in flight.
#[derive(Default)]
struct Stream {
    /// Its id (0: the slot is free).
    id: u32,
    /// The caller's request id and class.
    token: u64,
    class: u32,
    /// `:status` of the final response head (0: none yet).
    status: u16,
    grpc_status: Option<u32>,
    /// Response body bytes so far.
    size: usize,
    /// Keep the body (`body`) for a check.
    keep: bool,
    body: Vec<u8>,
    /// The request body still to send, from `sent`.
    pending: Bytes,
    sent: usize,
    /// The server's window for this stream (what it may still be sent).
    send_window: i64,
    /// Received and not yet given back.
    unreturned: u32,
    /// When the body was last held back by flow control with bytes already sent (ns; 0: not
    /// held), and how long it was held in all.
    held_since: u64,
    held_ns: u64,
    /// It is in [`Client::blocked`].
    blocked: bool,
}

/// The result of [`Client::receive`] beyond finished streams.
#[derive(Debug, PartialEq, Eq)]
pub enum State {
    /// Open.
    Open,
    /// The server retired it (GOAWAY with NO_ERROR): the streams it took finish on it; no new
    /// one starts.
    Retired,
}

/// One HTTP/2 client connection's state.
pub struct Client {
    /// Bytes to write to the server (the caller writes them and drains what went).
    pub out: Vec<u8>,
    hpack: Decoder,
    /// Streams by `(id >> 1) & mask`.
    streams: Vec<Stream>,
    mask: usize,
    next_id: u32,
    open: usize,
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS` (`u32::MAX`: none given).
    pub peer_max_streams: u32,
    peer_initial_window: i64,
    peer_max_frame: usize,
    /// The connection's send window (what the server takes more).
    send_window: i64,
    /// Received on the connection and not yet given back.
    unreturned: u32,
    /// Each stream's receive window, as announced.
    stream_window: u32,
    /// Responses past this size fail (and their stream is cancelled).
    max_response: usize,
    /// A header block being collected across CONTINUATIONs: its stream, END_STREAM.
    continuation: Option<(u32, bool)>,
    block: Vec<u8>,
    /// Streams whose bodies wait for a window, by id.
    blocked: Vec<u32>,
    /// The server's GOAWAY: the last stream it takes.
    goaway: Option<u32>,
    /// The server's first SETTINGS came.
    pub settings_seen: bool,
    /// The PING of the preface was answered.
    pub ping_answered: bool,
    /// Frames read so far (the first must be SETTINGS).
    frames: u64,
    /// How long request bodies were held back by flow control, ns, one entry per body
    /// (drained by the caller).
    pub flow_waits: Vec<u64>,
}

impl Client {
    /// A connection's client side, its preface and settings already in `out`. `streams`: the
    /// most streams it will have open at once (the caller's window); `stream_window`: each
    /// stream's receive window.
    pub fn new(streams: usize, stream_window: u32, max_response: usize) -> Client {
        let slots = (streams.max(1) * 2).next_power_of_two();
        let mut c = Client {
            out: Vec::with_capacity(64 << 10),
            hpack: Decoder::default(),
            streams: (0..slots).map(|_| Stream::default()).collect(),
            mask: slots - 1,
            next_id: 1,
            open: 0,
            peer_max_streams: u32::MAX,
            peer_initial_window: 65_535,
            peer_max_frame: 16_384,
            send_window: 65_535,
            unreturned: 0,
            stream_window,
            max_response,
            continuation: None,
            block: Vec::new(),
            blocked: Vec::new(),
            goaway: None,
            settings_seen: false,
            ping_answered: false,
            frames: 0,
            flow_waits: Vec::new(),
        };
        c.out.extend_from_slice(PREFACE);
        let settings: [(u16, u32); 4] = [
            (0x2, 0),                // ENABLE_PUSH
            (0x4, stream_window),    // INITIAL_WINDOW_SIZE
            (0x5, MAX_FRAME as u32), // MAX_FRAME_SIZE
            (0x6, MAX_BLOCK as u32), // MAX_HEADER_LIST_SIZE
        ];
        c.frame_header(settings.len() * 6, SETTINGS, 0, 0);
        for (id, value) in settings {
            c.out.extend_from_slice(&id.to_be_bytes());
            c.out.extend_from_slice(&value.to_be_bytes());
        }
        c.window_update(0, CONNECTION_WINDOW - 65_535);
        c.frame_header(8, PING, 0, 0);
        c.out.extend_from_slice(b"msgbench");
        c
    }

    /// Streams open.
    pub fn open_streams(&self) -> usize {
        self.open
    }

    /// Whether a new stream may start now: the server takes one more, and the connection is
    /// not retired or out of ids.
    pub fn can_start(&self) -> bool {
        self.goaway.is_none()
            && (self.open as u64) < u64::from(self.peer_max_streams)
            && self.free_id().is_some()
    }

    /// The id the next stream gets: the next one whose slot is free. Ids whose slot a slower
    /// stream still holds are skipped (RFC 9113, 5.1.1: an id never used is closed), so one
    /// slow stream never holds back the others. There is a free slot while fewer streams are
    /// open than there are slots, and there are twice as many as the window allows.
    fn free_id(&self) -> Option<u32> {
        if self.open >= self.streams.len() {
            return None;
        }
        let mut id = self.next_id;
        while self.streams[self.slot(id)].id != 0 {
            id += 2;
        }
        (id < MAX_STREAM_ID).then_some(id)
    }

    /// No new stream will ever start on it (retired, or out of stream ids).
    pub fn spent(&self) -> bool {
        self.goaway.is_some() || self.next_id >= MAX_STREAM_ID
    }

    fn slot(&self, id: u32) -> usize {
        (id >> 1) as usize & self.mask
    }

    /// Starts a request (check [`Client::can_start`] first): `block` is its header block,
    /// `body` its body (sent as the windows allow), `keep` whether its response body is kept.
    pub fn start(&mut self, token: u64, class: u32, block: &[u8], body: &Bytes, keep: bool) {
        let id = self.free_id().expect("can_start said so");
        self.next_id = id + 2;
        self.open += 1;
        let k = self.slot(id);
        let s = &mut self.streams[k];
        s.id = id;
        s.token = token;
        s.class = class;
        s.status = 0;
        s.grpc_status = None;
        s.size = 0;
        s.keep = keep;
        s.body.clear();
        s.pending = body.clone();
        s.sent = 0;
        s.send_window = self.peer_initial_window;
        s.unreturned = 0;
        s.held_since = 0;
        s.held_ns = 0;
        s.blocked = false;
        // HEADERS (and CONTINUATIONs when the block is larger than the server's frames).
        let max = self.peer_max_frame;
        let end_stream = if body.is_empty() { END_STREAM } else { 0 };
        let mut chunks = block.chunks(max).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let last = chunks.peek().is_none();
        let flags = end_stream | if last { END_HEADERS } else { 0 };
        self.frame_header(first.len(), HEADERS, flags, id);
        self.out.extend_from_slice(first);
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            self.frame_header(chunk.len(), CONTINUATION, flags, id);
            self.out.extend_from_slice(chunk);
        }
        if !body.is_empty() {
            self.send_body(k);
        }
    }

    /// Sends what the windows allow of the body of the stream in slot `k`; remembers it as
    /// blocked when they allow less than all of it.
    fn send_body(&mut self, k: usize) {
        let max = self.peer_max_frame as i64;
        loop {
            let s = &self.streams[k];
            let left = s.pending.len() - s.sent;
            if left == 0 {
                return;
            }
            let room = self.send_window.min(s.send_window).min(max);
            if room <= 0 {
                let s = &mut self.streams[k];
                if s.sent > 0 && s.held_since == 0 {
                    s.held_since = crate::clock::now_ns();
                }
                if !s.blocked {
                    s.blocked = true;
                    self.blocked.push(s.id);
                }
                return;
            }
            let n = left.min(room as usize);
            let (id, from) = (s.id, s.sent);
            let end = if n == left { END_STREAM } else { 0 };
            self.frame_header(n, DATA, end, id);
            let s = &mut self.streams[k];
            self.out.extend_from_slice(&s.pending[from..from + n]);
            s.sent += n;
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            if s.held_since != 0 {
                s.held_ns += crate::clock::now_ns() - s.held_since;
                s.held_since = 0;
            }
            if n == left {
                s.pending = Bytes::new();
                s.sent = 0;
                if s.held_ns > 0 {
                    self.flow_waits.push(s.held_ns);
                }
                return;
            }
        }
    }

    /// Sends the bodies that waited for a window, as far as the windows now allow (those
    /// still held back are put back in the list).
    fn unblock(&mut self) {
        if self.blocked.is_empty() || self.send_window <= 0 {
            return;
        }
        for id in std::mem::take(&mut self.blocked) {
            let k = self.slot(id);
            if self.streams[k].id == id {
                self.streams[k].blocked = false;
                self.send_body(k);
            }
        }
    }

    fn frame_header(&mut self, len: usize, kind: u8, flags: u8, id: u32) {
        let len = len as u32;
        self.out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.out.push(kind);
        self.out.push(flags);
        self.out.extend_from_slice(&id.to_be_bytes());
    }

    fn window_update(&mut self, id: u32, increment: u32) {
        self.frame_header(4, WINDOW_UPDATE, 0, id);
        self.out.extend_from_slice(&increment.to_be_bytes());
    }

    fn rst_stream(&mut self, id: u32, code: u32) {
        self.frame_header(4, RST_STREAM, 0, id);
        self.out.extend_from_slice(&code.to_be_bytes());
    }

    /// Takes the server's bytes from `input` (consuming whole frames; a partial frame stays
    /// for the next call) and hands each stream that ends to `done(token, class, how)`. `Err`:
    /// the connection is over, and why (counted as the connection's failure).
    pub fn receive(
        &mut self,
        input: &mut Vec<u8>,
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<State, String> {
        let (used, result) = self.receive_from(input, done);
        input.drain(..used);
        result
    }

    /// [`Client::receive`] from a slice: how much of it was taken (whole frames), and the
    /// outcome.
    pub fn receive_from(
        &mut self,
        input: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> (usize, Result<State, String>) {
        let mut at = 0;
        let result = loop {
            let Some(head) = input.get(at..at + 9) else {
                break Ok(());
            };
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_STREAM_ID;
            if len > MAX_FRAME {
                break Err(format!(
                    "HTTP/2 connection error ({}: a frame of {len} bytes)",
                    reason(FRAME_SIZE_ERROR)
                ));
            }
            if input.len() < at + 9 + len {
                break Ok(());
            }
            let payload = &input[at + 9..at + 9 + len];
            at += 9 + len;
            if let Err(e) = self.frame(kind, flags, id, payload, done) {
                break Err(e);
            }
        };
        let result = result.and_then(|()| {
            if self.out.len() > MAX_OUT {
                return Err(
                    "HTTP/2 connection error (the server does not read what it is sent)".into(),
                );
            }
            Ok(if self.goaway.is_some() {
                State::Retired
            } else {
                State::Open
            })
        });
        (at, result)
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        self.frames += 1;
        if self.frames == 1 && kind != SETTINGS {
            return Err(protocol("the server's first frame is not SETTINGS"));
        }
        if let Some((stream, _)) = self.continuation {
            if kind != CONTINUATION || id != stream {
                return Err(protocol("a header block interrupted"));
            }
        }
        match kind {
            DATA => self.data(flags, id, payload, done),
            HEADERS => self.headers(flags, id, payload, done),
            CONTINUATION => {
                if self.continuation.is_none() {
                    return Err(protocol("CONTINUATION without HEADERS"));
                }
                self.header_block(id, payload, flags, done)
            }
            RST_STREAM => self.reset(id, payload, done),
            SETTINGS => self.settings(flags, id, payload),
            PING => self.ping(flags, id, payload),
            GOAWAY => self.goaway(id, payload, done),
            WINDOW_UPDATE => self.window_updated(id, payload, done),
            PUSH_PROMISE => Err(protocol("PUSH_PROMISE with push disabled")),
            PRIORITY => Ok(()),
            _ => Ok(()), // unknown frame types are ignored (RFC 9113, 4.1)
        }
    }

    /// A HEADERS frame: its padding and priority taken off, its block read.
    fn headers(
        &mut self,
        flags: u8,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        if id == 0 {
            return Err(protocol("HEADERS on stream 0"));
        }
        let mut block = payload;
        if flags & PADDED != 0 {
            let pad = *block
                .first()
                .ok_or_else(|| protocol("a HEADERS frame too short"))?;
            block = block
                .get(1..block.len().saturating_sub(pad as usize))
                .filter(|_| (pad as usize) < payload.len())
                .ok_or_else(|| protocol("padding longer than its frame"))?;
        }
        if flags & PRIORITY_FLAG != 0 {
            block = block
                .get(5..)
                .ok_or_else(|| protocol("a HEADERS frame too short"))?;
        }
        self.header_block(id, block, flags, done)
    }

    /// RST_STREAM: the stream fails with its reason.
    fn reset(
        &mut self,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        let code = code_of(payload)
            .filter(|_| payload.len() == 4)
            .ok_or_else(|| frame_size("RST_STREAM", payload))?;
        if id == 0 {
            return Err(protocol("RST_STREAM on stream 0"));
        }
        let why = format!("HTTP/2 RST_STREAM ({})", reason(code));
        self.finish(id, done, |_| Finished::Failed(why));
        Ok(())
    }

    /// PING: answered, or (an ACK) the proof that the server speaks HTTP/2.
    fn ping(&mut self, flags: u8, id: u32, payload: &[u8]) -> Result<(), String> {
        if payload.len() != 8 || id != 0 {
            return Err(format!(
                "HTTP/2 connection error ({}: a PING of {} bytes)",
                reason(FRAME_SIZE_ERROR),
                payload.len()
            ));
        }
        if flags & ACK != 0 {
            self.ping_answered = true;
        } else {
            self.frame_header(8, PING, ACK, 0);
            self.out.extend_from_slice(payload);
        }
        Ok(())
    }

    /// GOAWAY: with NO_ERROR the connection is retired and the streams above its last id are
    /// handed back unprocessed; with an error it is over.
    fn goaway(
        &mut self,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        let (Some(last), Some(code)) = (code_of(payload), payload.get(4..).and_then(code_of))
        else {
            return Err(frame_size("GOAWAY", payload));
        };
        if id != 0 {
            return Err(protocol("GOAWAY on a stream"));
        }
        let last = last & MAX_STREAM_ID;
        if code != NO_ERROR {
            return Err(format!("HTTP/2 GOAWAY ({})", reason(code)));
        }
        self.goaway = Some(last);
        // Streams above its last id were not taken: they may go again elsewhere.
        let above: Vec<u32> = (self.streams.iter())
            .filter(|s| s.id > last)
            .map(|s| s.id)
            .collect();
        for id in above {
            self.finish(id, done, |_| Finished::Unprocessed);
        }
        Ok(())
    }

    /// WINDOW_UPDATE from the server: the connection's or a stream's send window grows (a bad
    /// one fails the stream, or the connection).
    fn window_updated(
        &mut self,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        let increment = code_of(payload)
            .filter(|_| payload.len() == 4)
            .ok_or_else(|| frame_size("WINDOW_UPDATE", payload))?
            & MAX_STREAM_ID;
        if id == 0 {
            if increment == 0 {
                return Err(protocol("a connection WINDOW_UPDATE of 0"));
            }
            self.send_window += i64::from(increment);
            if self.send_window > MAX_WINDOW {
                return Err(format!(
                    "HTTP/2 connection error ({}: the connection's window past 2^31-1)",
                    reason(FLOW_CONTROL_ERROR)
                ));
            }
        } else {
            let k = self.slot(id);
            if self.streams[k].id == id {
                let s = &mut self.streams[k];
                s.send_window += i64::from(increment);
                if increment == 0 || s.send_window > MAX_WINDOW {
                    self.rst_stream(id, PROTOCOL_ERROR);
                    let why = "HTTP/2 stream error (a bad WINDOW_UPDATE)".to_string();
                    self.finish(id, done, |_| Finished::Failed(why));
                }
            }
        }
        self.unblock();
        Ok(())
    }

    fn settings(&mut self, flags: u8, id: u32, payload: &[u8]) -> Result<(), String> {
        if id != 0 {
            return Err(format!(
                "HTTP/2 connection error ({}: SETTINGS on a stream)",
                reason(PROTOCOL_ERROR)
            ));
        }
        if flags & ACK != 0 {
            if !payload.is_empty() {
                return Err(format!(
                    "HTTP/2 connection error ({}: a SETTINGS ACK with a payload)",
                    reason(FRAME_SIZE_ERROR)
                ));
            }
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(format!(
                "HTTP/2 connection error ({}: SETTINGS of {} bytes)",
                reason(FRAME_SIZE_ERROR),
                payload.len()
            ));
        }
        // The streams' windows move once per frame, by its last INITIAL_WINDOW_SIZE: a frame
        // of thousands of entries must not cost thousands of walks over the open streams. Its
        // entries still count in order: the highest one must not have pushed a window past
        // 2^31-1 on its way (RFC 9113, 6.9.2).
        let mut initial_window: Option<(i64, i64)> = None;
        for entry in payload.chunks(6) {
            let key = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match key {
                0x2 if value != 0 => {
                    return Err(format!(
                        "HTTP/2 connection error ({}: a server enabling push)",
                        reason(PROTOCOL_ERROR)
                    ))
                }
                0x3 => self.peer_max_streams = value,
                0x4 => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(format!(
                            "HTTP/2 connection error ({}: an initial window past 2^31-1)",
                            reason(FLOW_CONTROL_ERROR)
                        ));
                    }
                    let value = i64::from(value);
                    let highest = initial_window.map_or(value, |(_, h)| h.max(value));
                    initial_window = Some((value, highest));
                }
                0x5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(format!(
                            "HTTP/2 connection error ({}: a MAX_FRAME_SIZE of {value})",
                            reason(PROTOCOL_ERROR)
                        ));
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {} // table size (this client's encoder does not index), push, list size
            }
        }
        self.settings_seen = true;
        // Answered like a PING: a flood whose answers the server never reads ends at MAX_OUT.
        self.frame_header(0, SETTINGS, ACK, 0);
        match initial_window {
            Some((last, highest)) => self.initial_window_is(last, highest),
            None => Ok(()),
        }
    }

    /// The server's `SETTINGS_INITIAL_WINDOW_SIZE` is now `window` (and was at most `highest`
    /// within the frame): every open stream's send window moves by the change (RFC 9113,
    /// 6.9.2), one that `highest` would have pushed past 2^31-1 is the server's error, and
    /// streams a larger window frees send.
    fn initial_window_is(&mut self, window: i64, highest: i64) -> Result<(), String> {
        let delta = window - self.peer_initial_window;
        let peak = highest - self.peer_initial_window;
        self.peer_initial_window = window;
        if delta == 0 && peak <= 0 {
            return Ok(());
        }
        for s in self.streams.iter_mut().filter(|s| s.id != 0) {
            let at_peak = s.send_window + peak;
            s.send_window += delta;
            if at_peak > MAX_WINDOW {
                return Err(format!(
                    "HTTP/2 connection error ({}: a stream's window past 2^31-1)",
                    reason(FLOW_CONTROL_ERROR)
                ));
            }
        }
        if delta > 0 {
            self.unblock();
        }
        Ok(())
    }

    fn data(
        &mut self,
        flags: u8,
        id: u32,
        payload: &[u8],
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        if id == 0 {
            return Err(format!(
                "HTTP/2 connection error ({}: DATA on stream 0)",
                reason(PROTOCOL_ERROR)
            ));
        }
        // The whole frame (padding included) counts against the windows.
        self.unreturned += payload.len() as u32;
        if self.unreturned > CONNECTION_WINDOW {
            return Err(format!(
                "HTTP/2 connection error ({}: the server sent past the connection's window)",
                reason(FLOW_CONTROL_ERROR)
            ));
        }
        if self.unreturned >= CONNECTION_WINDOW / 2 {
            let n = std::mem::take(&mut self.unreturned);
            self.window_update(0, n);
        }
        let mut data = payload;
        if flags & PADDED != 0 {
            let pad = payload.first().copied().unwrap_or(0) as usize;
            if payload.is_empty() || pad + 1 > payload.len() {
                return Err(format!(
                    "HTTP/2 connection error ({}: padding longer than its frame)",
                    reason(PROTOCOL_ERROR)
                ));
            }
            data = &payload[1..payload.len() - pad];
        }
        let k = self.slot(id);
        if self.streams[k].id != id {
            return Ok(()); // a stream this client already ended (cancelled, reset)
        }
        let s = &mut self.streams[k];
        if s.status == 0 {
            self.rst_stream(id, PROTOCOL_ERROR);
            let why = "HTTP/2 stream error (DATA before a response head)".to_string();
            self.finish(id, done, |_| Finished::Failed(why));
            return Ok(());
        }
        s.unreturned += payload.len() as u32;
        if s.unreturned > self.stream_window {
            self.rst_stream(id, FLOW_CONTROL_ERROR);
            let why = "HTTP/2 stream error (the server sent past the stream's window)".to_string();
            self.finish(id, done, |_| Finished::Failed(why));
            return Ok(());
        }
        s.size += data.len();
        if s.size > self.max_response {
            let why = format!("response larger than {} bytes", self.max_response);
            self.rst_stream(id, CANCEL);
            self.finish(id, done, |_| Finished::Failed(why));
            return Ok(());
        }
        if s.keep {
            s.body.extend_from_slice(data);
        }
        if flags & END_STREAM != 0 {
            self.finish(id, done, answered);
        } else if s.unreturned >= self.stream_window / 2 {
            let n = std::mem::take(&mut s.unreturned);
            self.window_update(id, n);
        }
        Ok(())
    }

    /// A HEADERS or CONTINUATION fragment: collected until END_HEADERS, then decoded (always:
    /// the table must follow the server's encoder, whatever the stream).
    fn header_block(
        &mut self,
        id: u32,
        fragment: &[u8],
        flags: u8,
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<(), String> {
        let end_stream = match self.continuation {
            Some((_, end)) => end,
            None => flags & END_STREAM != 0,
        };
        if flags & END_HEADERS == 0 || self.continuation.is_some() {
            if self.block.len() + fragment.len() > MAX_BLOCK {
                return Err(format!(
                    "HTTP/2 connection error (a response head past {MAX_BLOCK} bytes)"
                ));
            }
            self.block.extend_from_slice(fragment);
            if flags & END_HEADERS == 0 {
                self.continuation = Some((id, end_stream));
                return Ok(());
            }
            self.continuation = None;
        }
        let (status, grpc) = self.decode_block(fragment)?;
        let k = self.slot(id);
        if self.streams[k].id != id {
            return Ok(());
        }
        let s = &mut self.streams[k];
        if s.status == 0 {
            match status {
                Some(code) if (100..200).contains(&code) && !end_stream => return Ok(()), // informational
                Some(code) if (200..600).contains(&code) => s.status = code as u16,
                _ => {
                    self.rst_stream(id, PROTOCOL_ERROR);
                    let why =
                        "HTTP/2 stream error (a response without a valid :status)".to_string();
                    self.finish(id, done, |_| Finished::Failed(why));
                    return Ok(());
                }
            }
        } else if !end_stream {
            self.rst_stream(id, PROTOCOL_ERROR);
            let why = "HTTP/2 stream error (trailers without END_STREAM)".to_string();
            self.finish(id, done, |_| Finished::Failed(why));
            return Ok(());
        }
        if grpc.is_some() {
            s.grpc_status = grpc;
        }
        if end_stream {
            self.finish(id, done, answered);
        }
        Ok(())
    }

    /// Decodes a whole header block (collected, or `fragment` when it came in one frame) for
    /// its `:status` and `grpc-status`.
    fn decode_block(&mut self, fragment: &[u8]) -> Result<(Option<u32>, Option<u32>), String> {
        let (mut status, mut grpc) = (None, None);
        let block = if self.block.is_empty() {
            fragment
        } else {
            &self.block[..]
        };
        let decoded = self.hpack.decode(
            block,
            |name| name == b":status" || name == b"grpc-status",
            |name, value| {
                let number = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
                if name == b":status" {
                    status = number;
                } else {
                    grpc = number;
                }
            },
        );
        self.block.clear();
        match decoded {
            Ok(_) => Ok((status, grpc)),
            Err(HpackError(what)) => Err(format!(
                "HTTP/2 connection error ({}: {what})",
                reason(COMPRESSION_ERROR)
            )),
        }
    }

    /// Ends stream `id` (if this client still has it) as `how` says.
    fn finish(
        &mut self,
        id: u32,
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
        how: impl FnOnce(&Stream) -> Finished<'_>,
    ) {
        let k = self.slot(id);
        if self.streams[k].id != id {
            return;
        }
        let s = &self.streams[k];
        let how = how(s);
        // Answered before its body was all sent (RFC 9113, 8.1): the rest is not sent, and the
        // server is told, or it would count the stream open until the connection ends.
        let cut_short = matches!(how, Finished::Answered { .. }) && s.sent < s.pending.len();
        done(s.token, s.class, how);
        let s = &mut self.streams[k];
        s.id = 0;
        s.pending = Bytes::new();
        if std::mem::take(&mut s.blocked) {
            self.blocked.retain(|&b| b != id);
        }
        self.open -= 1;
        if cut_short {
            self.rst_stream(id, CANCEL);
        }
    }

    /// Fails every open stream with `why` (the connection ended under them).
    pub fn fail_all(&mut self, why: &str, done: &mut dyn FnMut(u64, u32, Finished<'_>)) {
        let open: Vec<u32> = (self.streams.iter().filter(|s| s.id != 0))
            .map(|s| s.id)
            .collect();
        for id in open {
            self.finish(id, done, |_| Finished::Failed(why.to_string()));
        }
    }
}

fn answered(s: &Stream) -> Finished<'_> {
    Finished::Answered {
        status: s.status,
        grpc_status: s.grpc_status,
        body: &s.body,
    }
}

/// The first four bytes of `payload` as a number, when it has exactly four or more.
fn code_of(payload: &[u8]) -> Option<u32> {
    payload
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A connection error for a breach of the protocol: `what` it was.
fn protocol(what: &str) -> String {
    format!(
        "HTTP/2 connection error ({}: {what})",
        reason(PROTOCOL_ERROR)
    )
}

/// A connection error for a frame of the wrong size: `what` frame, its `payload`.
fn frame_size(what: &str, payload: &[u8]) -> String {
    format!(
        "HTTP/2 connection error ({}: {what} of {} bytes)",
        reason(FRAME_SIZE_ERROR),
        payload.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as a server sends it.
    fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
        let mut p = Vec::new();
        for (k, v) in entries {
            p.extend_from_slice(&k.to_be_bytes());
            p.extend_from_slice(&v.to_be_bytes());
        }
        frame(SETTINGS, 0, 0, &p)
    }

    /// A literal header field without indexing, new name, not Huffman-coded.
    fn literal(name: &str, value: &str) -> Vec<u8> {
        let mut b = vec![0x00, name.len() as u8];
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
        b
    }

    /// What ended, in order: (token, class, outcome as text).
    #[derive(Default)]
    struct Seen(Vec<(u64, u32, String)>);

    impl Seen {
        fn take(&mut self) -> Vec<(u64, u32, String)> {
            std::mem::take(&mut self.0)
        }
    }

    fn feed(c: &mut Client, bytes: &[u8], seen: &mut Seen) -> Result<State, String> {
        let mut input = bytes.to_vec();
        let r = c.receive(&mut input, &mut |token, class, how| {
            let text = match how {
                Finished::Answered {
                    status,
                    grpc_status,
                    body,
                } => format!("{status} {grpc_status:?} {}", String::from_utf8_lossy(body)),
                Finished::Failed(why) => format!("failed: {why}"),
                Finished::Unprocessed => "unprocessed".into(),
            };
            seen.0.push((token, class, text));
        });
        assert!(r.is_err() || input.is_empty(), "whole frames are consumed");
        r
    }

    /// A client past its handshake with `entries` as the server's settings.
    fn ready(entries: &[(u16, u32)]) -> Client {
        let mut c = Client::new(8, 1 << 20, 1 << 20);
        assert!(c.out.starts_with(PREFACE));
        let mut bytes = settings(entries);
        bytes.extend(frame(PING, ACK, 0, b"msgbench"));
        feed(&mut c, &bytes, &mut Seen::default()).unwrap();
        assert!(c.settings_seen && c.ping_answered);
        c.out.clear();
        c
    }

    #[test]
    fn a_response_head_and_body_end_the_stream_they_answer() {
        let mut c = ready(&[]);
        let mut seen = Seen::default();
        c.start(7, 1, &[0x82], &Bytes::new(), true);
        c.start(8, 0, &[0x82], &Bytes::new(), false);
        // Stream 3 first: answers match by stream, not by order.
        let mut bytes = frame(HEADERS, END_HEADERS, 3, &[0x8d]); // :status 404
        bytes.extend(frame(DATA, END_STREAM, 3, b"nope"));
        bytes.extend(frame(HEADERS, END_HEADERS, 1, &[0x88]));
        bytes.extend(frame(DATA, 0, 1, b"hel"));
        bytes.extend(frame(DATA, END_STREAM, 1, b"lo"));
        feed(&mut c, &bytes, &mut seen).unwrap();
        assert_eq!(
            seen.take(),
            [
                (8, 0, "404 None ".to_string()),
                (7, 1, "200 None hello".to_string())
            ]
        );
        assert_eq!(c.open_streams(), 0);
    }

    #[test]
    fn frames_split_anywhere_are_taken_whole() {
        let mut c = ready(&[]);
        let mut seen = Seen::default();
        c.start(1, 0, &[0x82], &Bytes::new(), true);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x88]);
        bytes.extend(frame(DATA, END_STREAM, 1, b"body"));
        let mut input = Vec::new();
        for &b in &bytes {
            input.push(b);
            c.receive(&mut input, &mut |token, _, how| {
                if let Finished::Answered { body, .. } = how {
                    seen.0
                        .push((token, 0, String::from_utf8_lossy(body).into()));
                }
            })
            .unwrap();
        }
        assert_eq!(seen.take(), [(1, 0, "body".to_string())]);
    }

    #[test]
    fn continuation_padding_priority_informational_heads_and_trailers_are_read() {
        let mut c = ready(&[]);
        let mut seen = Seen::default();
        c.start(1, 0, &[0x82], &Bytes::new(), false);
        // 100 Continue first (skipped), then a padded, prioritised head split in two.
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &literal(":status", "100"));
        let mut head = vec![3, 0, 0, 0, 0, 16]; // pad length 3, priority (5 bytes)
        head.push(0x88);
        head.extend_from_slice(&literal("content-type", "application/grpc")[..4]);
        head.extend_from_slice(&[0, 0, 0]);
        bytes.extend(frame(HEADERS, PADDED | PRIORITY_FLAG, 1, &head));
        bytes.extend(frame(
            CONTINUATION,
            END_HEADERS,
            1,
            &literal("content-type", "application/grpc")[4..],
        ));
        bytes.extend(frame(DATA, 0, 1, b"x"));
        // Trailers: grpc-status 5.
        bytes.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &literal("grpc-status", "5"),
        ));
        feed(&mut c, &bytes, &mut seen).unwrap();
        assert_eq!(seen.take(), [(1, 0, "200 Some(5) ".to_string())]);
    }

    #[test]
    fn resets_fail_their_stream_by_reason_and_the_connection_goes_on() {
        let mut c = ready(&[]);
        let mut seen = Seen::default();
        c.start(1, 0, &[0x82], &Bytes::new(), false);
        c.start(2, 0, &[0x82], &Bytes::new(), false);
        let mut bytes = frame(RST_STREAM, 0, 1, &7u32.to_be_bytes());
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]));
        assert_eq!(feed(&mut c, &bytes, &mut seen), Ok(State::Open));
        assert_eq!(
            seen.take(),
            [
                (
                    1,
                    0,
                    "failed: HTTP/2 RST_STREAM (REFUSED_STREAM)".to_string()
                ),
                (2, 0, "200 None ".to_string())
            ]
        );
    }

    #[test]
    fn goaway_without_error_hands_back_what_it_did_not_take_and_lets_the_rest_finish() {
        let mut c = ready(&[]);
        let mut seen = Seen::default();
        for token in 0..3 {
            c.start(token, 0, &[0x82], &Bytes::new(), false); // streams 1, 3, 5
        }
        let mut goaway = 3u32.to_be_bytes().to_vec();
        goaway.extend_from_slice(&0u32.to_be_bytes());
        assert_eq!(
            feed(&mut c, &frame(GOAWAY, 0, 0, &goaway), &mut seen),
            Ok(State::Retired)
        );
        assert_eq!(seen.take(), [(2, 0, "unprocessed".to_string())]);
        assert!(!c.can_start() && c.spent());
        let mut bytes = frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]);
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]));
        feed(&mut c, &bytes, &mut seen).unwrap();
        assert_eq!(seen.take().len(), 2);
        assert_eq!(c.open_streams(), 0);
        // With an error code, the connection is over.
        let mut c = ready(&[]);
        let mut goaway = 0u32.to_be_bytes().to_vec();
        goaway.extend_from_slice(&2u32.to_be_bytes());
        assert_eq!(
            feed(&mut c, &frame(GOAWAY, 0, 0, &goaway), &mut seen),
            Err("HTTP/2 GOAWAY (INTERNAL_ERROR)".to_string())
        );
    }

    #[test]
    fn the_servers_stream_limit_holds_new_streams_back() {
        let mut c = ready(&[(0x3, 2)]);
        let mut seen = Seen::default();
        c.start(1, 0, &[0x82], &Bytes::new(), false);
        c.start(2, 0, &[0x82], &Bytes::new(), false);
        assert!(!c.can_start());
        feed(
            &mut c,
            &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]),
            &mut seen,
        )
        .unwrap();
        assert!(c.can_start());
        assert_eq!(c.peer_max_streams, 2);
    }

    #[test]
    fn a_body_goes_as_the_windows_open_and_its_wait_is_counted() {
        // The server's streams take 10 bytes at first.
        let mut c = ready(&[(0x4, 10)]);
        let mut seen = Seen::default();
        c.start(
            1,
            0,
            &[0x83],
            &Bytes::from_static(b"0123456789abcdefghijklmno"),
            false,
        );
        // HEADERS (9 + 1) and one DATA frame of 10.
        assert_eq!(c.out.len(), 10 + 9 + 10);
        assert_eq!(&c.out[19..], b"0123456789");
        c.out.clear();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut bytes = frame(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes());
        feed(&mut c, &bytes, &mut seen).unwrap();
        assert_eq!(c.out.len(), 9 + 15, "the rest, at once");
        assert_eq!(c.out[4], END_STREAM);
        assert_eq!(c.flow_waits.len(), 1);
        assert!(c.flow_waits[0] >= 2_000_000, "{:?}", c.flow_waits);
        // A window past 2^31-1 is the server's error.
        bytes = frame(WINDOW_UPDATE, 0, 0, &((1u32 << 31) - 1).to_be_bytes());
        assert!(feed(&mut c, &bytes, &mut seen).is_err());
    }

    #[test]
    fn a_response_past_the_limit_is_cancelled_and_counted() {
        let mut c = Client::new(4, 65_535, 10);
        feed(&mut c, &settings(&[]), &mut Seen::default()).unwrap();
        c.out.clear();
        let mut seen = Seen::default();
        c.start(1, 0, &[0x82], &Bytes::new(), false);
        c.out.clear();
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x88]);
        bytes.extend(frame(DATA, 0, 1, &[b'x'; 11]));
        bytes.extend(frame(DATA, END_STREAM, 1, b"late")); // ignored: the stream is over
        feed(&mut c, &bytes, &mut seen).unwrap();
        assert_eq!(
            seen.take(),
            [(1, 0, "failed: response larger than 10 bytes".to_string())]
        );
        assert_eq!(c.out[3], RST_STREAM);
        assert_eq!(&c.out[9..13], &CANCEL.to_be_bytes());
    }

    #[test]
    fn breaches_of_the_protocol_end_the_connection_with_their_reason() {
        let mut seen = Seen::default();
        // An HTTP/1.1 answer to the preface.
        let mut c = Client::new(4, 65_535, 1 << 20);
        let e = feed(&mut c, b"HTTP/1.1 400 Bad Request\r\n\r\n", &mut seen).unwrap_err();
        assert!(e.contains("FRAME_SIZE_ERROR"), "{e}");
        // A first frame that is not SETTINGS.
        let mut c = Client::new(4, 65_535, 1 << 20);
        let e = feed(&mut c, &frame(PING, 0, 0, b"12345678"), &mut seen).unwrap_err();
        assert!(e.contains("not SETTINGS"), "{e}");
        for bad in [
            frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x88]),
            frame(DATA, 0, 0, b"x"),
            frame(HEADERS, END_HEADERS, 0, &[0x88]),
            frame(CONTINUATION, END_HEADERS, 1, &[0x88]),
            frame(HEADERS, END_HEADERS, 1, &[0x80]), // HPACK index 0
            frame(SETTINGS, 0, 0, &[0, 5, 0, 0, 0, 1]), // MAX_FRAME_SIZE 1
            frame(PING, 0, 0, b"1234"),
            frame(RST_STREAM, 0, 1, &[0, 0, 0]),
        ] {
            let mut c = ready(&[]);
            c.start(1, 0, &[0x82], &Bytes::new(), false);
            assert!(feed(&mut c, &bad, &mut seen).is_err(), "{bad:?}");
        }
        // A header block interrupted by another frame.
        let mut c = ready(&[]);
        c.start(1, 0, &[0x82], &Bytes::new(), false);
        let mut bytes = frame(HEADERS, 0, 1, &[0x88]);
        bytes.extend(frame(PING, 0, 0, b"12345678"));
        assert!(feed(&mut c, &bytes, &mut seen).is_err());
    }

    #[test]
    fn a_ping_flood_whose_answers_are_never_read_ends_the_connection() {
        let mut c = ready(&[]);
        let pings: Vec<u8> = (0..10_000)
            .flat_map(|_| frame(PING, 0, 0, b"12345678"))
            .collect();
        let mut outcome = Ok(State::Open);
        for _ in 0..200 {
            outcome = feed(&mut c, &pings, &mut Seen::default());
            if outcome.is_err() {
                break;
            }
        }
        assert!(outcome.unwrap_err().contains("does not read"));
    }

    #[test]
    fn a_settings_frame_of_many_entries_moves_the_windows_once_and_a_flood_is_bounded() {
        // 2 730 INITIAL_WINDOW_SIZE entries (a 16 KiB frame): only the last counts, and the
        // windows of the open streams move once, by the change from before the frame.
        let mut c = ready(&[(0x4, 10)]);
        c.start(
            1,
            0,
            &[0x83],
            &Bytes::from_static(b"0123456789abcdef"),
            false,
        );
        c.out.clear();
        let mut entries: Vec<(u16, u32)> = (0..2_729).map(|k| (0x4, 1_000 + k)).collect();
        entries.push((0x4, 16));
        feed(&mut c, &settings(&entries), &mut Seen::default()).unwrap();
        // The ACK, then the 6 bytes the window grew by (10 → 16).
        assert_eq!(&c.out[..9], &frame(SETTINGS, ACK, 0, b"")[..]);
        assert_eq!(&c.out[9 + 9..], b"abcdef");
        // Entries count in order: one that would push a window past 2^31-1 is the server's
        // error even when a later one brings it back.
        let mut strict = ready(&[(0x4, 10)]);
        strict.start(1, 0, &[0x82], &Bytes::new(), false);
        let grown = frame(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()); // its window: 110
        feed(&mut strict, &grown, &mut Seen::default()).unwrap();
        let past = settings(&[(0x4, (1 << 31) - 1), (0x4, 16)]);
        let refused = feed(&mut strict, &past, &mut Seen::default()).unwrap_err();
        assert!(refused.contains("past 2^31-1"), "{refused}");
        // Empty SETTINGS frames whose ACKs the server never reads end the connection, as a
        // PING flood does.
        let flood: Vec<u8> = (0..10_000).flat_map(|_| settings(&[])).collect();
        let mut outcome = Ok(State::Open);
        for _ in 0..400 {
            outcome = feed(&mut c, &flood, &mut Seen::default());
            if outcome.is_err() {
                break;
            }
        }
        assert!(outcome.unwrap_err().contains("does not read"));
    }

    #[test]
    fn a_request_longer_than_the_servers_frames_goes_in_continuations() {
        let mut c = ready(&[]);
        let block = vec![0x82; 40_000];
        c.start(1, 0, &block, &Bytes::new(), false);
        // HEADERS of 16384, CONTINUATION of 16384, CONTINUATION of 7232 (END_HEADERS).
        assert_eq!(c.out.len(), 3 * 9 + 40_000);
        assert_eq!((c.out[3], c.out[4]), (HEADERS, END_STREAM));
        let second = 9 + 16_384;
        assert_eq!((c.out[second + 3], c.out[second + 4]), (CONTINUATION, 0));
        let third = second + 9 + 16_384;
        assert_eq!(
            (c.out[third + 3], c.out[third + 4]),
            (CONTINUATION, END_HEADERS)
        );
    }

    #[test]
    fn one_slow_stream_never_holds_back_the_others() {
        // A window of 4: 8 slots. Stream 1 stays open while 3, 5, … finish; the ids whose
        // slot it holds are skipped.
        let mut c = Client::new(4, 65_535, 1 << 20);
        feed(&mut c, &settings(&[]), &mut Seen::default()).unwrap();
        let mut seen = Seen::default();
        c.start(0, 0, &[0x82], &Bytes::new(), false);
        for token in 1..40 {
            assert!(c.can_start(), "stream {token}");
            c.start(token, 0, &[0x82], &Bytes::new(), false);
            let id = c.next_id - 2;
            assert_ne!(c.slot(id), c.slot(1), "{id} shares stream 1's slot");
            feed(
                &mut c,
                &frame(HEADERS, END_HEADERS | END_STREAM, id, &[0x88]),
                &mut seen,
            )
            .unwrap();
        }
        assert_eq!(seen.take().len(), 39);
        assert_eq!(c.open_streams(), 1);
    }

    #[test]
    fn a_response_before_the_whole_body_ends_the_stream_and_tells_the_server() {
        // The server's streams take nothing (window 0): the body waits, then the server
        // answers without it.
        let mut c = ready(&[(0x4, 0)]);
        let mut seen = Seen::default();
        c.start(1, 0, &[0x83], &Bytes::from_static(b"body"), false);
        assert_eq!(c.blocked, [1]);
        c.out.clear();
        feed(
            &mut c,
            &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x8d]),
            &mut seen,
        )
        .unwrap();
        assert_eq!(seen.take(), [(1, 0, "404 None ".to_string())]);
        assert!(c.blocked.is_empty(), "no longer waiting for a window");
        assert_eq!(
            (c.out[3], &c.out[9..13]),
            (RST_STREAM, &CANCEL.to_be_bytes()[..])
        );
    }

    #[test]
    fn settings_a_client_cannot_take_end_the_connection() {
        for bad in [
            settings(&[(0x2, 1)]),                        // push enabled by a server
            frame(SETTINGS, ACK, 0, &[0, 0, 0, 0, 0, 0]), // an ACK with a payload
            frame(SETTINGS, 0, 0, &[0, 4, 0]),            // not a multiple of 6
            settings(&[(0x4, 1 << 31)]),                  // a window past 2^31-1
        ] {
            let mut c = ready(&[]);
            assert!(feed(&mut c, &bad, &mut Seen::default()).is_err(), "{bad:?}");
        }
        // A larger initial window that takes an open stream's window past 2^31-1.
        let mut c = ready(&[]);
        c.start(1, 0, &[0x83], &Bytes::from_static(b"x"), false);
        feed(
            &mut c,
            &frame(WINDOW_UPDATE, 0, 1, &((1u32 << 31) - 70_000).to_be_bytes()),
            &mut Seen::default(),
        )
        .unwrap();
        let e = feed(&mut c, &settings(&[(0x4, 1 << 20)]), &mut Seen::default()).unwrap_err();
        assert!(e.contains("FLOW_CONTROL_ERROR"), "{e}");
    }

    #[test]
    fn random_bytes_from_a_server_are_an_error_or_nothing_never_a_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let mut c = ready(&[]);
            for token in 0..4 {
                c.start(token, 0, &[0x83], &Bytes::from_static(b"abc"), true);
            }
            // Frames with valid headers and random kinds, flags, streams and payloads.
            let mut bytes = Vec::new();
            for _ in 0..(next() % 8) {
                let r = next();
                let len = (r % 40) as usize;
                let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                bytes.extend(frame(
                    (r >> 8) as u8 % 11,
                    (r >> 16) as u8,
                    (r >> 24) as u32 % 9,
                    &payload,
                ));
            }
            let _ = feed(&mut c, &bytes, &mut Seen::default());
        }
    }
}
