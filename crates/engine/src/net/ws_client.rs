//! A client WebSocket whose frames msgbench reads in place: a message is a slice of one read
//! buffer.
//!
//! Why by hand: the tick client reads every message of a feed, millions a second on one thread.
//! Through tokio-websockets each message was a `BytesMut` split off its read buffer, frozen into
//! a payload and dropped again (reference counts each way): at 1000 connections × 10k ticks/s a
//! `perf` of the client thread (2-vCPU Xeon) put half its CPU there, and the client, not the
//! server, bounded the fan-out. The opening handshake stays with tokio-websockets (key, accept
//! check, headers); the bytes it read past the server's answer are taken back from a tap under
//! it ([`connect`]).
//!
//! What it checks, as RFC 6455 asks of a client: no reserved bits (no extension is agreed), no
//! masked frame from a server, control frames whole and at most 125 bytes, continuation frames
//! only inside a fragmented message, text messages in UTF-8, messages at most `max_message`
//! bytes. Pings are answered, a close is answered; what it writes is masked.
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// What the read buffer starts at (it grows to hold one message of `max_message` bytes).
const READ_BUFFER: usize = 64 * 1024;
/// Most bytes of answers (pongs) waiting to be written: a server that pings without reading
/// the answers is cut off here rather than grow this client's memory.
const MAX_UNWRITTEN: usize = 1 << 20;
/// Most bytes the opening handshake may read (its answer's head, and what came with it): a
/// server whose head never ends is refused here rather than grow this client's memory.
pub const MAX_HANDSHAKE_READ: usize = 64 * 1024;
/// A close frame without a status code reads as 1005 ("no status received").
pub const NO_STATUS: u16 = 1005;

/// Frame opcodes (RFC 6455 5.2).
pub const OP_CONTINUATION: u8 = 0x0;
/// A text message (UTF-8).
pub const OP_TEXT: u8 = 0x1;
/// A binary message.
pub const OP_BINARY: u8 = 0x2;
/// A close.
pub const OP_CLOSE: u8 = 0x8;
/// A ping (answered with a pong of the same payload).
pub const OP_PING: u8 = 0x9;
/// A pong.
pub const OP_PONG: u8 = 0xA;

/// A message read.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg<'a> {
    /// A text message (checked UTF-8).
    Text(&'a [u8]),
    /// A binary message.
    Binary(&'a [u8]),
    /// The server closed: its status code and reason (already answered).
    Close(u16, &'a str),
}

/// Why a connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The stream ended (without a close frame).
    #[error("the server closed the connection")]
    Eof,
    /// The server broke the protocol: what it did.
    #[error("{0}")]
    Protocol(String),
}

/// Where a message parsed from the buffer lies (no borrow held while parsing).
enum Parsed {
    InBuffer { text: bool, from: usize, to: usize },
    Assembled { text: bool },
    Close { code: u16, from: usize, to: usize },
}

/// A client WebSocket over `S` (after its opening handshake).
pub struct RawWs<S> {
    io: S,
    buf: Vec<u8>,
    /// First byte not parsed yet.
    start: usize,
    /// End of what was read.
    end: usize,
    /// A fragmented message being assembled (its opcode), and where.
    partial: Option<u8>,
    assembled: Vec<u8>,
    max_message: usize,
    /// Frames to write (masked), and how much of them is written.
    out: Vec<u8>,
    written: usize,
    /// Written, but the stream's own flush (a TLS session's) is not done.
    flush_pending: bool,
    mask_state: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawWs<S> {
    /// Takes over `io` after the handshake; `already_read` is what was read past its answer.
    pub fn new(io: S, already_read: &[u8], max_message: usize) -> RawWs<S> {
        let mut buf = vec![0; READ_BUFFER.max(already_read.len())];
        buf[..already_read.len()].copy_from_slice(already_read);
        RawWs {
            io,
            buf,
            start: 0,
            end: already_read.len(),
            partial: None,
            assembled: Vec::new(),
            max_message,
            out: Vec::new(),
            written: 0,
            flush_pending: false,
            // Masks need not be secret from this client's own user, only vary (RFC 6455 10.3
            // guards proxies against scripted clients).
            mask_state: crate::clock::now_ns() | 1,
        }
    }

    /// The next whole message already read (`None`: read more with [`RawWs::poll_fill`]).
    /// Pings and pongs are handled here and not returned.
    #[inline]
    pub fn next_message(&mut self) -> Result<Option<Msg<'_>>, WsError> {
        Ok(match self.parse()? {
            None => None,
            Some(Parsed::InBuffer { text, from, to }) => Some(message(text, &self.buf[from..to])?),
            Some(Parsed::Assembled { text }) => Some(message(text, &self.assembled)?),
            Some(Parsed::Close { code, from, to }) => {
                let reason = std::str::from_utf8(&self.buf[from..to])
                    .map_err(|_| protocol("a close reason that is not UTF-8"))?;
                Some(Msg::Close(code, reason))
            }
        })
    }

    fn parse(&mut self) -> Result<Option<Parsed>, WsError> {
        if self.partial.is_none() {
            self.assembled.clear();
        }
        loop {
            let data = &self.buf[self.start..self.end];
            if data.len() < 2 {
                return Ok(None);
            }
            let (b0, b1) = (data[0], data[1]);
            let fin = b0 & 0x80 != 0;
            let opcode = b0 & 0x0f;
            if b0 & 0x70 != 0 {
                return Err(protocol(
                    "a frame with reserved bits set (no extension was agreed)",
                ));
            }
            if b1 & 0x80 != 0 {
                return Err(protocol(
                    "a masked frame (a server's frames are never masked)",
                ));
            }
            let (len, header) = match b1 & 0x7f {
                126 if data.len() >= 4 => (u64::from(u16::from_be_bytes([data[2], data[3]])), 4),
                127 if data.len() >= 10 => (
                    u64::from_be_bytes(data[2..10].try_into().expect("8 bytes")),
                    10,
                ),
                126 | 127 => return Ok(None),
                n => (u64::from(n), 2),
            };
            if opcode >= OP_CLOSE && (!fin || len > 125) {
                return Err(protocol(
                    "a control frame fragmented or longer than 125 bytes",
                ));
            }
            // Control frames (at most 125 bytes) do not count towards a message they interrupt.
            let room = self.max_message - self.assembled_len();
            if opcode < OP_CLOSE && len > room as u64 {
                return Err(protocol(&format!(
                    "a message of more than {} bytes, the most accepted",
                    self.max_message
                )));
            }
            let frame = header + len as usize;
            if data.len() < frame {
                self.make_room(frame);
                return Ok(None);
            }
            let (from, to) = (self.start + header, self.start + frame);
            self.start = to;
            match opcode {
                OP_TEXT | OP_BINARY if self.partial.is_some() => {
                    return Err(protocol("a new message inside a fragmented one"))
                }
                OP_TEXT | OP_BINARY if fin => {
                    let text = opcode == OP_TEXT;
                    return Ok(Some(Parsed::InBuffer { text, from, to }));
                }
                OP_TEXT | OP_BINARY => {
                    self.partial = Some(opcode);
                    self.assembled.extend_from_slice(&self.buf[from..to]);
                }
                OP_CONTINUATION => {
                    let Some(first) = self.partial else {
                        return Err(protocol("a continuation frame with no message begun"));
                    };
                    self.assembled.extend_from_slice(&self.buf[from..to]);
                    if fin {
                        self.partial = None;
                        return Ok(Some(Parsed::Assembled {
                            text: first == OP_TEXT,
                        }));
                    }
                }
                OP_CLOSE => {
                    let code = match to - from {
                        0 => NO_STATUS,
                        1 => return Err(protocol("a close frame of one byte")),
                        _ => u16::from_be_bytes([self.buf[from], self.buf[from + 1]]),
                    };
                    // Answered with its code (none for none), as RFC 6455 5.5.1 asks; a code
                    // that may not be sent (7.4) with 1002, protocol error.
                    let answer = match code {
                        NO_STATUS => Vec::new(),
                        1000..=1003 | 1007..=1014 | 3000..=4999 => code.to_be_bytes().to_vec(),
                        _ => 1002u16.to_be_bytes().to_vec(),
                    };
                    self.queue(OP_CLOSE, &answer);
                    let from = (from + 2).min(to);
                    return Ok(Some(Parsed::Close { code, from, to }));
                }
                OP_PING => {
                    if self.out.len() > MAX_UNWRITTEN {
                        return Err(protocol(
                            "the server sent over 1 MiB of pings without reading their answers",
                        ));
                    }
                    let payload = self.buf[from..to].to_vec();
                    self.queue(OP_PONG, &payload);
                }
                OP_PONG => {}
                other => return Err(protocol(&format!("a frame of unknown opcode {other}"))),
            }
        }
    }

    fn assembled_len(&self) -> usize {
        if self.partial.is_some() {
            self.assembled.len()
        } else {
            0
        }
    }

    /// Makes room in the buffer for a frame of `frame` bytes from `start`.
    fn make_room(&mut self, frame: usize) {
        if self.buf.len() - self.start < frame {
            self.compact();
            if self.buf.len() < frame {
                self.buf.resize(frame, 0);
            }
        }
    }

    fn compact(&mut self) {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
    }

    /// Reads what the socket has into the buffer: `Ok(0)` at the end of the stream.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, WsError>> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() || self.start > self.buf.len() / 2 {
            self.compact();
        }
        if self.end == self.buf.len() {
            // A frame's header says how long it is before it is all here: `make_room` grew the
            // buffer then. Still full: a frame header cut short, whose room comes next.
            self.buf.resize(self.buf.len() + READ_BUFFER, 0);
        }
        let mut read = ReadBuf::new(&mut self.buf[self.end..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        self.end += n;
        Poll::Ready(if n == 0 { Err(WsError::Eof) } else { Ok(n) })
    }

    /// Queues a message (masked) for [`RawWs::poll_flush`].
    pub fn queue(&mut self, opcode: u8, payload: &[u8]) {
        self.out.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => self.out.push(0x80 | n as u8),
            n if n <= usize::from(u16::MAX) => {
                self.out.push(0x80 | 126);
                self.out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                self.out.push(0x80 | 127);
                self.out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        // xorshift64: a different key per frame.
        let mut x = self.mask_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.mask_state = x;
        let key = (x as u32).to_ne_bytes();
        self.out.extend_from_slice(&key);
        self.out
            .extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    }

    /// True while queued frames are not all written.
    pub fn unflushed(&self) -> bool {
        self.written < self.out.len() || self.flush_pending
    }

    /// Writes the queued frames.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        while self.written < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(WsError::Io(io::ErrorKind::WriteZero.into())));
            }
            self.written += n;
            self.flush_pending = true;
        }
        self.out.clear();
        self.written = 0;
        if self.flush_pending {
            ready!(Pin::new(&mut self.io).poll_flush(cx))?;
            self.flush_pending = false;
        }
        Poll::Ready(Ok(()))
    }

    /// Sends `text` (if any) and a normal close, and shuts the write side.
    pub async fn close(&mut self, text: Option<&str>) -> Result<(), WsError> {
        if let Some(t) = text {
            self.queue(OP_TEXT, t.as_bytes());
        }
        self.queue(OP_CLOSE, &1000u16.to_be_bytes());
        std::future::poll_fn(|cx| self.poll_flush(cx)).await?;
        self.io.shutdown().await?;
        Ok(())
    }

    /// Sends one text message.
    pub async fn send_text(&mut self, text: &str) -> Result<(), WsError> {
        self.queue(OP_TEXT, text.as_bytes());
        std::future::poll_fn(|cx| self.poll_flush(cx)).await
    }
}

#[inline]
fn message(text: bool, payload: &[u8]) -> Result<Msg<'_>, WsError> {
    if !text {
        return Ok(Msg::Binary(payload));
    }
    std::str::from_utf8(payload).map_err(|_| protocol("a text message that is not UTF-8"))?;
    Ok(Msg::Text(payload))
}

fn protocol(what: &str) -> WsError {
    WsError::Protocol(what.to_string())
}

/// Records what is read through it: the bytes a handshake read past its answer are in there.
pub struct Tap<S> {
    inner: S,
    seen: Vec<u8>,
}

impl<S> Tap<S> {
    /// Taps `inner`.
    pub fn new(inner: S) -> Tap<S> {
        Tap {
            inner,
            seen: Vec::new(),
        }
    }

    /// The stream and what was read past the HTTP answer's head (`None`: no whole head read).
    /// The head ends where httparse says, as for tokio-websockets' handshake, which parsed it
    /// with httparse too (blank lines before it, bare `\n` line ends).
    pub fn into_parts(self) -> (S, Option<Vec<u8>>) {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let past = match httparse::Response::new(&mut headers).parse(&self.seen) {
            Ok(httparse::Status::Complete(head)) => Some(self.seen[head..].to_vec()),
            _ => None,
        };
        (self.inner, past)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.seen.len() >= MAX_HANDSHAKE_READ {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the server's answer to the upgrade ran past {} KiB without ending",
                    MAX_HANDSHAKE_READ / 1024
                ),
            )));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = &mut *self;
        this.seen.extend_from_slice(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Opens the WebSocket on `io` (the handshake by tokio-websockets' client, `builder`), then
/// reads it by hand.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    builder: &tokio_websockets::ClientBuilder<'_>,
    io: S,
    max_message: usize,
) -> Result<RawWs<S>, tokio_websockets::Error> {
    let (ws, _) = builder.connect_on(Tap::new(io)).await?;
    let (io, past) = ws.into_inner().into_parts();
    let past = past.ok_or(tokio_websockets::Error::Io(
        io::ErrorKind::InvalidData.into(),
    ))?;
    Ok(RawWs::new(io, &past, max_message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server frame (unmasked).
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            n if n < 126 => f.push(n as u8),
            n if n <= 65535 => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        f
    }

    /// Reads every message of `bytes`, fed `chunk` bytes at a time.
    async fn read_all(bytes: &[u8], chunk: usize) -> (Vec<(bool, Vec<u8>)>, Option<String>) {
        let (client, mut server) = tokio::io::duplex(1 << 22);
        let mut ws = RawWs::new(client, &[], 1 << 20);
        for c in bytes.chunks(chunk) {
            server.write_all(c).await.unwrap();
        }
        drop(server);
        let mut got = Vec::new();
        loop {
            match ws.next_message() {
                Ok(Some(Msg::Text(p))) => got.push((true, p.to_vec())),
                Ok(Some(Msg::Binary(p))) => got.push((false, p.to_vec())),
                Ok(Some(Msg::Close(code, reason))) => {
                    got.push((true, format!("close {code} {reason}").into_bytes()))
                }
                Ok(None) => match std::future::poll_fn(|cx| ws.poll_fill(cx)).await {
                    Ok(_) => {}
                    Err(WsError::Eof) => return (got, None),
                    Err(e) => return (got, Some(e.to_string())),
                },
                Err(e) => return (got, Some(e.to_string())),
            }
        }
    }

    #[tokio::test]
    async fn messages_of_every_length_form_read_back_whole_however_the_bytes_arrive() {
        let big = vec![7u8; 70_000];
        let mid = vec![9u8; 300];
        let mut bytes = frame(true, OP_BINARY, b"tick");
        bytes.extend(frame(true, OP_TEXT, br#"{"a":1}"#));
        bytes.extend(frame(true, OP_BINARY, &mid));
        bytes.extend(frame(true, OP_BINARY, &big));
        bytes.extend(frame(true, OP_BINARY, b""));
        for chunk in [1, 3, 7, 4096, 1 << 20] {
            let (got, err) = read_all(&bytes, chunk).await;
            assert_eq!(err, None, "chunk {chunk}");
            assert_eq!(
                got,
                vec![
                    (false, b"tick".to_vec()),
                    (true, br#"{"a":1}"#.to_vec()),
                    (false, mid.clone()),
                    (false, big.clone()),
                    (false, Vec::new()),
                ],
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test]
    async fn a_fragmented_message_is_assembled_around_a_ping() {
        let mut bytes = frame(false, OP_TEXT, b"hel");
        bytes.extend(frame(true, OP_PING, b"p"));
        bytes.extend(frame(false, OP_CONTINUATION, b"lo "));
        bytes.extend(frame(true, OP_CONTINUATION, b"world"));
        bytes.extend(frame(true, OP_BINARY, b"next"));
        for chunk in [1, 2, 1024] {
            let (got, err) = read_all(&bytes, chunk).await;
            assert_eq!(err, None);
            assert_eq!(
                got,
                vec![(true, b"hello world".to_vec()), (false, b"next".to_vec())]
            );
        }
    }

    #[tokio::test]
    async fn pings_and_closes_are_answered_masked() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut ws = RawWs::new(client, &frame(true, OP_PING, b"abc"), 1 << 20);
        server
            .write_all(&frame(true, OP_CLOSE, &[0x03, 0xe8, b'b', b'y', b'e']))
            .await
            .unwrap();
        std::future::poll_fn(|cx| ws.poll_fill(cx)).await.unwrap();
        assert_eq!(ws.next_message().unwrap(), Some(Msg::Close(1000, "bye")));
        assert!(ws.unflushed());
        std::future::poll_fn(|cx| ws.poll_flush(cx)).await.unwrap();
        let mut got = vec![0u8; 64];
        let n = server.read(&mut got).await.unwrap();
        let got = &got[..n];
        // Pong: FIN|PONG, MASK|3, key, masked "abc"; then FIN|CLOSE, MASK|2, key, masked 1000.
        assert_eq!(got[0], 0x80 | OP_PONG);
        assert_eq!(got[1], 0x80 | 3);
        let unmask = |key: &[u8], p: &[u8]| -> Vec<u8> {
            p.iter().enumerate().map(|(i, b)| b ^ key[i % 4]).collect()
        };
        assert_eq!(unmask(&got[2..6], &got[6..9]), b"abc");
        assert_eq!(got[9], 0x80 | OP_CLOSE);
        assert_eq!(got[10], 0x80 | 2);
        assert_eq!(unmask(&got[11..15], &got[15..17]), 1000u16.to_be_bytes());
        assert_eq!(n, 17);
    }

    #[tokio::test]
    async fn broken_frames_are_refused_by_name() {
        let masked = vec![0x82, 0x81, 1, 2, 3, 4, 5];
        let mut reserved = frame(true, OP_BINARY, b"x");
        reserved[0] |= 0x40;
        let long_ping = frame(true, OP_PING, &[0; 126]);
        let mut cut_ping = frame(true, OP_PING, b"x");
        cut_ping[0] &= 0x7f;
        let lone = frame(true, OP_CONTINUATION, b"x");
        let mut nested = frame(false, OP_TEXT, b"a");
        nested.extend(frame(true, OP_TEXT, b"b"));
        let too_big = frame(true, OP_BINARY, &vec![0; (1 << 20) + 1]);
        let bad_text = frame(true, OP_TEXT, &[0xff, 0xfe]);
        // A 64-bit length with its top bit set; one that would wrap a fragment's total.
        let mut huge = vec![0x82, 127];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        let mut wrapping = frame(false, OP_BINARY, b"abc");
        wrapping.extend_from_slice(&[0x80, 127]);
        wrapping.extend_from_slice(&(u64::MAX - 1).to_be_bytes());
        let unknown = frame(true, 0x3, b"x");
        let one_byte_close = frame(true, OP_CLOSE, &[3]);
        for (bytes, says) in [
            (masked, "masked"),
            (reserved, "reserved bits"),
            (long_ping, "control frame"),
            (cut_ping, "control frame"),
            (lone, "continuation"),
            (nested, "inside a fragmented"),
            (too_big, "more than 1048576 bytes"),
            (huge, "more than 1048576 bytes"),
            (wrapping, "more than 1048576 bytes"),
            (bad_text, "not UTF-8"),
            (unknown, "unknown opcode 3"),
            (one_byte_close, "one byte"),
        ] {
            let (_, err) = read_all(&bytes, 4096).await;
            let err = err.unwrap_or_default();
            assert!(err.contains(says), "{says}: {err}");
        }
    }

    #[tokio::test]
    async fn a_ping_flood_that_reads_nothing_is_cut_off() {
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            bytes.extend(frame(true, OP_PING, &[0; 125]));
        }
        let (_, err) = read_all(&bytes, 1 << 16).await;
        assert!(err.unwrap_or_default().contains("pings"));
    }

    #[tokio::test]
    async fn a_handshake_answer_that_never_ends_is_refused_at_its_bound() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut tap = Tap::new(client);
        let writer = tokio::spawn(async move {
            let _ = server
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\n")
                .await;
            let junk = vec![b'a'; 4096];
            while server.write_all(&junk).await.is_ok() {}
        });
        let mut buf = [0u8; 8192];
        let err = loop {
            match tap.read(&mut buf).await {
                Ok(n) => assert!(n > 0),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("64 KiB"), "{err}");
        assert!(tap.seen.len() < MAX_HANDSHAKE_READ + buf.len());
        drop(tap);
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn the_bytes_read_past_the_handshake_answer_are_kept() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut tap = Tap::new(client);
        let answer = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
        let mut sent = answer.to_vec();
        sent.extend(frame(true, OP_BINARY, b"first"));
        server.write_all(&sent).await.unwrap();
        let mut buf = [0u8; 4096];
        let n = tap.read(&mut buf).await.unwrap();
        assert_eq!(n, sent.len());
        let (io, past) = tap.into_parts();
        let mut ws = RawWs::new(io, &past.unwrap(), 1 << 20);
        assert_eq!(ws.next_message().unwrap(), Some(Msg::Binary(b"first")));
        // A head after a blank line, with bare `\n` line ends; a frame holding "\r\n\r\n".
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut tap = Tap::new(client);
        let mut sent = b"\r\nHTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\n".to_vec();
        sent.extend(frame(true, OP_BINARY, b"\r\n\r\nx"));
        server.write_all(&sent).await.unwrap();
        let n = tap.read(&mut buf).await.unwrap();
        assert_eq!(n, sent.len());
        let (io, past) = tap.into_parts();
        let mut ws = RawWs::new(io, &past.unwrap(), 1 << 20);
        assert_eq!(
            ws.next_message().unwrap(),
            Some(Msg::Binary(&b"\r\n\r\nx"[..]))
        );
    }
}
