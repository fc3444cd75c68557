//! A Server-Sent Events feed read by a tick client (`ticks.address = "http[s]://…"` without
//! `[ticks.grpc]`; `[ticks.sse]`): one request per client connection — `GET` with `Accept:
//! text/event-stream`, the scenario's headers and, on a reconnection that resumes, the last
//! event id as `Last-Event-ID` — over HTTP/1.1 (its own TCP connection, TLS for https) or
//! HTTP/2 ([`crate::drivers::http2::connect`]); the response body cut into events by
//! [`crate::net::sse`], each event's data handed to the reader as a feed message
//! (`[ticks.feed]`, JSON; its sequence number may be the event's `id`).
//!
//! Bounded: an HTTP/1.1 connection reads through one buffer of [`READ_CHUNK`] bytes; the parser
//! holds at most one event ([`crate::net::sse::MAX_EVENT`]); an HTTP/2 stream's window
//! ([`STREAM_WINDOW`]) bounds what the server may send ahead of the reader.
//!
//! An event stream has no end that means "done": a body that ends (the last chunk, the length
//! reached, the connection closed, HTTP/2's END_STREAM) ends the stream as lost, and the run's
//! `ticks.on_close` decides (browsers' EventSource reconnects).
use super::source::{resolve, tls_target, TlsTarget};
use super::source::{FeedMessage, FeedSource, StreamEnd};
use crate::drivers::failure::OpenError;
use crate::drivers::http2::connect::{self, Failure, Open, Target};
use crate::net::http::MAX_HEAD;
use crate::net::sse::{Chunked, EventParser};
use msgbench_model::sse::{SseStream, SseVersion};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_websockets::MaybeTlsStream;

/// One read of an HTTP/1.1 body, at most.
const READ_CHUNK: usize = 64 * 1024;
/// Each HTTP/2 stream's receive window: what the server may send ahead of the reader.
const STREAM_WINDOW: u32 = 16 << 20;
/// How long opening a stream (connection, TLS, request, response head) may take.
const OPEN_TIMEOUT: std::time::Duration = connect::OPEN_TIMEOUT;

/// Where every connection of a run asks for its stream.
#[derive(Debug)]
pub struct SsePlan {
    /// The request.
    pub stream: SseStream,
    /// The server's address, resolved once.
    pub address: SocketAddr,
    /// `Some` for https: the rustls configuration (ALPN as the version says) and the name to
    /// verify.
    pub tls: Option<TlsTarget>,
    /// The event type that counts.
    kind: Option<Vec<u8>>,
}

impl SsePlan {
    /// Resolves the server and prepares TLS (`tls`: the run's client configuration).
    pub fn new(
        stream: SseStream,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<SsePlan, OpenError> {
        let address = resolve(&stream.address)?;
        let alpn: &[u8] = match stream.version {
            SseVersion::Http1 => b"http/1.1",
            SseVersion::Http2 => b"h2",
        };
        let tls = tls_target(stream.server_name.as_deref(), tls, alpn)?;
        Ok(SsePlan {
            kind: stream.event.as_ref().map(|e| e.as_bytes().to_vec()),
            stream,
            address,
            tls,
        })
    }
}

/// How an HTTP/1.1 response's body ends.
enum Framing {
    /// Chunked transfer coding: the last chunk.
    Chunked(Chunked),
    /// `Content-Length`: bytes left.
    Length(u64),
    /// Neither: the connection's close.
    Close,
}

/// Where the body's bytes come from.
// One per connection, made once: boxing the TLS stream would put a pointer between every read
// and its reader for no saving.
#[allow(clippy::large_enum_variant)]
enum Body {
    /// An HTTP/1.1 response on its own connection; `held` bytes of `raw` wait for more (a
    /// chunk-size line cut by a read).
    Http1 {
        io: MaybeTlsStream<TcpStream>,
        raw: Box<[u8]>,
        held: usize,
        framing: Framing,
    },
    /// An HTTP/2 stream.
    Http2 {
        connection: Open,
        body: h2::RecvStream,
    },
}

/// One client's event stream.
pub struct SseFeed {
    body: Body,
    parser: EventParser,
    plan: Arc<SsePlan>,
    /// Why the body ended, once it has (its last events are still handed out).
    ended: Option<String>,
}

impl FeedSource for SseFeed {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<FeedMessage<'_>, StreamEnd>> {
        loop {
            match self.parser.advance(self.plan.kind.as_deref()) {
                Ok(true) => {
                    let event = self.parser.event();
                    return Poll::Ready(Ok(FeedMessage::Event {
                        data: event.data,
                        id: event.id,
                    }));
                }
                Ok(false) => {}
                Err(e) => return Poll::Ready(Err(StreamEnd::Protocol(e.to_string()))),
            }
            if let Some(why) = self.ended.take() {
                return Poll::Ready(Err(StreamEnd::Lost(why)));
            }
            match self.poll_body(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(end)) => return Poll::Ready(Err(end)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl SseFeed {
    /// Opens the stream: connects, sends the request (`client` as a `msgbench-client`
    /// header; `last_id` as `Last-Event-ID`), and checks the answer is an event stream.
    pub async fn open(
        plan: &Arc<SsePlan>,
        client: &str,
        last_id: Option<&[u8]>,
        receive_buffer: u32,
    ) -> Result<SseFeed, OpenError> {
        let mut parser = EventParser::resuming(last_id);
        let (body, ended) = match plan.stream.version {
            SseVersion::Http1 => {
                let opening = open_http1(plan, client, last_id, receive_buffer, &mut parser);
                match tokio::time::timeout(OPEN_TIMEOUT, opening).await {
                    Ok(opened) => opened?,
                    Err(_) => return Err(no_answer()),
                }
            }
            SseVersion::Http2 => (open_http2(plan, client, last_id).await?, None),
        };
        if ended.is_some() {
            parser.end();
        }
        Ok(SseFeed {
            body,
            parser,
            plan: plan.clone(),
            ended,
        })
    }

    /// The last event id the stream gave (or the one it resumed from).
    pub fn last_id(&self) -> Option<Vec<u8>> {
        self.parser.last_id().map(<[u8]>::to_vec)
    }

    /// The reconnection time the server asked for (`retry:`), ms.
    pub fn retry_ms(&self) -> Option<u64> {
        self.parser.retry_ms()
    }

    /// Ends the stream: an HTTP/1.1 connection is closed, an HTTP/2 one let go gracefully.
    pub fn close(self) {
        if let Body::Http2 { connection, body } = self.body {
            drop(body);
            connect::close_gracefully(connection);
        }
    }

    /// Reads more of the body into the parser; `Ok` when something changed.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamEnd>> {
        let over = match &mut self.body {
            Body::Http1 {
                io,
                raw,
                held,
                framing,
            } => {
                let mut read = ReadBuf::new(&mut raw[*held..]);
                match Pin::new(io).poll_read(cx, &mut read) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(StreamEnd::Lost(format!(
                            "the connection failed ({e})"
                        ))))
                    }
                    Poll::Ready(Ok(())) => {}
                }
                let got = read.filled().len();
                let total = *held + got;
                let over = take_body(framing, &raw[..total], &mut self.parser)
                    .map_err(StreamEnd::Protocol)?;
                let kept = over.held;
                raw.copy_within(total - kept..total, 0);
                *held = kept;
                match (over.ended, got) {
                    (Some(why), _) => Some(why),
                    (None, 0) => Some("the server closed the event stream".to_string()),
                    (None, _) => None,
                }
            }
            Body::Http2 { body, .. } => match body.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    self.parser.extend(&data);
                    None
                }
                Poll::Ready(Some(Err(e))) => Some(connect::stream_error(&e)),
                Poll::Ready(None) => Some("the server ended the event stream (END_STREAM)".into()),
            },
        };
        if let Some(why) = over {
            self.parser.end();
            self.ended = Some(why);
        }
        Poll::Ready(Ok(()))
    }
}

/// What one read of an HTTP/1.1 body gave.
struct Taken {
    /// Bytes to keep for the next read (a cut chunk-size line).
    held: usize,
    /// The body ended: why.
    ended: Option<String>,
}

/// Moves the body's bytes in `raw` into the parser as the framing says.
fn take_body(framing: &mut Framing, raw: &[u8], parser: &mut EventParser) -> Result<Taken, String> {
    Ok(match framing {
        Framing::Chunked(chunks) => {
            let used = parser.fill(|out| chunks.decode(raw, out))?;
            Taken {
                held: raw.len() - used,
                ended: chunks
                    .done()
                    .then(|| "the server ended the event stream (its last chunk)".into()),
            }
        }
        Framing::Length(left) => {
            let take = raw.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            parser.extend(&raw[..take]);
            *left -= take as u64;
            Taken {
                held: 0,
                ended: (*left == 0)
                    .then(|| "the server ended the event stream (its Content-Length)".into()),
            }
        }
        Framing::Close => {
            parser.extend(raw);
            Taken {
                held: 0,
                ended: None,
            }
        }
    })
}

fn no_answer() -> OpenError {
    OpenError::Stream(format!(
        "no event-stream answer within {} s (is it an HTTP server, and the right scheme?)",
        OPEN_TIMEOUT.as_secs()
    ))
}

/// The request head (HTTP/1.1).
fn request_head(s: &SseStream, client: &str, last_id: Option<&[u8]>) -> Vec<u8> {
    let mut head = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\nUser-Agent: msgbench/{}\r\nmsgbench-client: {client}\r\n",
        s.target,
        s.authority,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes();
    for (k, v) in &s.headers {
        head.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    // An empty id is sent as none (the standard's rule).
    if let Some(id) = last_id.filter(|id| s.resume && !id.is_empty()) {
        head.extend_from_slice(b"Last-Event-ID: ");
        head.extend_from_slice(id);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Opens an HTTP/1.1 stream: its connection, the request, the response's head; what of the
/// body came with the head goes to `parser` (and if that was all of it, why it ended).
async fn open_http1(
    plan: &SsePlan,
    client: &str,
    last_id: Option<&[u8]>,
    receive_buffer: u32,
    parser: &mut EventParser,
) -> Result<(Body, Option<String>), OpenError> {
    let tcp = TcpStream::connect(plan.address)
        .await
        .map_err(OpenError::Connect)?;
    let _ = tcp.set_nodelay(true);
    {
        use std::os::fd::AsRawFd;
        crate::server::ws::set_socket_buffer(tcp.as_raw_fd(), libc::SO_RCVBUF, receive_buffer);
    }
    let mut io = match &plan.tls {
        None => MaybeTlsStream::Plain(tcp),
        Some((config, name)) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            let tls = connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| OpenError::Stream(tls_problem(&e.to_string())))?;
            MaybeTlsStream::Rustls(tls)
        }
    };
    let head = request_head(&plan.stream, client, last_id);
    let failed =
        |e: std::io::Error| OpenError::Stream(format!("the request could not be sent ({e})"));
    io.write_all(&head).await.map_err(failed)?;
    io.flush().await.map_err(failed)?;
    let mut raw = vec![0u8; READ_CHUNK].into_boxed_slice();
    let mut filled = 0;
    let (size, framing) = loop {
        let got = tokio::io::AsyncReadExt::read(&mut io, &mut raw[filled..])
            .await
            .map_err(|e| OpenError::Stream(format!("the response could not be read ({e})")))?;
        if got == 0 {
            return Err(OpenError::Stream(
                "the server closed the connection without answering the request".into(),
            ));
        }
        filled += got;
        if let Some(head) = response_head(&raw[..filled])? {
            break head;
        }
        if filled >= MAX_HEAD.min(READ_CHUNK) {
            return Err(OpenError::Stream(format!(
                "a response head larger than {} bytes",
                MAX_HEAD.min(READ_CHUNK)
            )));
        }
    };
    let mut framing = framing;
    let taken = take_body(&mut framing, &raw[size..filled], parser).map_err(OpenError::Stream)?;
    raw.copy_within(filled - taken.held..filled, 0);
    let body = Body::Http1 {
        io,
        raw,
        held: taken.held,
        framing,
    };
    Ok((body, taken.ended))
}

/// The response head at the start of `bytes` (`None`: not all there yet): its size and the
/// body's framing, once its status and type say it is an event stream.
fn response_head(bytes: &[u8]) -> Result<Option<(usize, Framing)>, OpenError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let size = match response.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(OpenError::Stream(format!(
                "the answer is no HTTP/1.1 response ({e}){}",
                if bytes.starts_with(&[0, 0]) {
                    ": it speaks HTTP/2 only, set [ticks.sse] version = \"2\""
                } else {
                    ""
                }
            )))
        }
    };
    let status = response.code.unwrap_or(0);
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    if (100..200).contains(&status) {
        return Err(OpenError::Stream(format!(
            "the server answered {status} before the response, which an event stream does not take"
        )));
    }
    check_answer(status, header("content-type"), header("location"))?;
    let framing = if header("transfer-encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
    {
        Framing::Chunked(Chunked::default())
    } else if let Some(n) = header("content-length") {
        Framing::Length(
            n.trim().parse().map_err(|_| {
                OpenError::Stream(format!("the response's Content-Length is {n:?}"))
            })?,
        )
    } else {
        Framing::Close
    };
    Ok(Some((size, framing)))
}

/// An answer that is not an event stream, in words.
fn check_answer(
    status: u16,
    content_type: Option<String>,
    location: Option<String>,
) -> Result<(), OpenError> {
    let refused = |why: String| Err(OpenError::Stream(why));
    match status {
        200 => {}
        204 => {
            return refused(
                "the server answered 204 No Content: it asks clients not to (re)connect".into(),
            )
        }
        300..=399 => {
            return refused(format!(
                "the server answered {status}, a redirect to {}: msgbench does not follow redirects, use that URL as ticks.address",
                location.as_deref().unwrap_or("(no Location)")
            ))
        }
        _ => {
            return refused(format!(
                "the server answered HTTP {status}; is the path right, and does it need headers ([ticks.sse] headers, e.g. Authorization)?"
            ))
        }
    }
    match content_type {
        Some(t) if t.trim().to_ascii_lowercase().starts_with("text/event-stream") => Ok(()),
        other => refused(format!(
            "the server answered with content-type {}, not text/event-stream: is this an event stream's URL?",
            other.map_or("(none)".to_string(), |t| format!("{t:?}"))
        )),
    }
}

/// A TLS handshake's failure in words, with the fix.
fn tls_problem(text: &str) -> String {
    if text.contains("InvalidContentType") || text.contains("corrupt message") {
        return format!(
            "the server does not speak TLS there ({text}); for a cleartext port, use http://"
        );
    }
    format!(
        "the TLS handshake failed ({text}); a private CA's certificate needs `ticks.ca_file = \"ca.pem\"`, or skip the check with `ticks.insecure = true`"
    )
}

/// Opens an HTTP/2 stream: the connection (proven by a PING), the request, the response head.
async fn open_http2(
    plan: &SsePlan,
    client: &str,
    last_id: Option<&[u8]>,
) -> Result<Body, OpenError> {
    let target = Target {
        address: plan.address,
        tls: plan.tls.clone(),
        stream_window: STREAM_WINDOW,
        section: "ticks",
        not_h2: "set [ticks.sse] version = \"1.1\"",
    };
    let connection = connect::open(&target).await.map_err(|f| match f {
        Failure::Connect(e) => OpenError::Connect(e),
        Failure::Problem(p) => OpenError::Handshake(p),
    })?;
    let asked = tokio::time::timeout(OPEN_TIMEOUT, ask_http2(&connection, plan, client, last_id));
    match asked.await {
        Ok(Ok(body)) => Ok(Body::Http2 { connection, body }),
        Ok(Err(e)) => {
            connection.driver.abort();
            Err(e)
        }
        Err(_) => {
            connection.driver.abort();
            Err(no_answer())
        }
    }
}

/// Sends the request on a new stream and waits for the response's head.
async fn ask_http2(
    connection: &Open,
    plan: &SsePlan,
    client: &str,
    last_id: Option<&[u8]>,
) -> Result<h2::RecvStream, OpenError> {
    let s = &plan.stream;
    let scheme = if plan.tls.is_some() { "https" } else { "http" };
    let mut head = http::Request::builder()
        .method("GET")
        .uri(format!("{scheme}://{}{}", s.authority, s.target))
        .header("accept", "text/event-stream")
        .header("cache-control", "no-cache")
        .header(
            "user-agent",
            concat!("msgbench/", env!("CARGO_PKG_VERSION")),
        )
        .header("msgbench-client", client);
    for (k, v) in &s.headers {
        head = head.header(k.as_str(), v.as_str());
    }
    if let Some(id) = last_id.filter(|id| s.resume && !id.is_empty()) {
        head = head.header("last-event-id", id);
    }
    let failed = |e: String| OpenError::Stream(format!("the request failed ({e})"));
    let head = head.body(()).map_err(|e| failed(e.to_string()))?;
    let mut send = connection
        .send
        .clone()
        .ready()
        .await
        .map_err(|e| failed(connect::stream_error(&e)))?;
    let (response, _) = send
        .send_request(head, true)
        .map_err(|e| failed(connect::stream_error(&e)))?;
    let response = response
        .await
        .map_err(|e| failed(connect::stream_error(&e)))?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    check_answer(
        response.status().as_u16(),
        header("content-type"),
        header("location"),
    )?;
    Ok(response.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_that_are_no_event_stream_say_what_they_were() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
        let (size, framing) = response_head(ok).unwrap().unwrap();
        assert_eq!(&ok[size..], b"5\r\n");
        assert!(matches!(framing, Framing::Chunked(_)));
        assert!(response_head(&ok[..20]).unwrap().is_none());
        let said = |bytes: &[u8]| match response_head(bytes) {
            Err(OpenError::Stream(why)) => why,
            other => panic!("{:?}", other.map(|o| o.map(|(n, _)| n))),
        };
        assert!(
            said(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                .contains("\"application/json\", not text/event-stream")
        );
        assert!(said(b"HTTP/1.1 401 Unauthorized\r\n\r\n").contains("HTTP 401"));
        assert!(said(b"HTTP/1.1 301 Moved\r\nLocation: /v2\r\n\r\n").contains("redirect to /v2"));
        assert!(said(b"HTTP/1.1 204 No Content\r\n\r\n").contains("not to (re)connect"));
        assert!(said(b"\0\0\x12\x04\0\0\0\0\0").contains("version = \"2\""));
    }

    #[test]
    fn a_resumed_request_carries_the_last_event_id() {
        let mut s = msgbench_model::sse::SseStream {
            address: "127.0.0.1:80".into(),
            authority: "127.0.0.1".into(),
            target: "/events".into(),
            server_name: None,
            version: SseVersion::Http1,
            headers: vec![("authorization".into(), "Bearer t".into())],
            event: None,
            resume: true,
        };
        let head = String::from_utf8(request_head(&s, "fast-0", Some(b"41"))).unwrap();
        assert!(
            head.starts_with("GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("authorization: Bearer t\r\nLast-Event-ID: 41\r\n\r\n"),
            "{head}"
        );
        s.resume = false;
        let head = String::from_utf8(request_head(&s, "fast-0", Some(b"41"))).unwrap();
        assert!(!head.contains("Last-Event-ID"), "{head}");
    }
}
