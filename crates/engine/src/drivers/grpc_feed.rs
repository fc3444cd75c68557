//! A gRPC server stream read by a tick client (`[ticks.grpc]`): one HTTP/2 connection per
//! client connection ([`super::h2_connect`]), one call on it — the request message framed
//! once when the scenario was checked — and its response stream cut into gRPC messages, each
//! handed to the tick client's reader as a feed message (`[ticks.feed]`, `format =
//! "protobuf"`: sequence number and timestamp read by [`crate::net::proto_wire`]).
//!
//! A message is handed out as a slice of the DATA frame it came in (`Bytes::slice`: a reference
//! count, no copy); only a message split across frames is put together in a buffer the
//! connection keeps. Flow-control capacity is given back as each frame is taken, so what the
//! server may send ahead of the reader is bounded by the stream's window (16 MiB).
//!
//! The stream ends with the server's trailers: `grpc-status` 0 ends it for this client like
//! msgbench's `end` message; any other status ends it as a fault named by its status.
use super::h2_connect::{self, Failure, Open, Target};
use super::tick_client::OpenError;
use bytes::{Buf, Bytes, BytesMut};
use msgbench_model::grpc::GrpcStream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Largest gRPC message a feed accepts (gRPC's own default limit).
const MAX_MESSAGE: usize = 4 << 20;
/// How long a closing connection may take to say goodbye.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_millis(200);
/// Each stream's receive window: what the server may send ahead of the reader.
const STREAM_WINDOW: u32 = 16 << 20;

/// Where every connection of a run calls.
#[derive(Debug)]
pub struct GrpcPlan {
    /// The call, its request frame and metadata.
    pub stream: GrpcStream,
    /// The server's address, resolved once.
    pub address: SocketAddr,
    /// `Some` for https: the rustls configuration (ALPN `h2`) and the name to verify.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
}

impl GrpcPlan {
    /// Resolves the server and prepares TLS (`tls`: the run's client configuration).
    pub fn new(
        stream: GrpcStream,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<GrpcPlan, OpenError> {
        use std::net::ToSocketAddrs;
        let address = stream
            .address
            .to_socket_addrs()
            .map_err(OpenError::Connect)?
            .next()
            .ok_or_else(|| {
                OpenError::Connect(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("`{}` does not resolve", stream.address),
                ))
            })?;
        let tls = match &stream.server_name {
            None => None,
            Some(host) => {
                let base = match tls {
                    Some(c) => c,
                    None => {
                        super::tls::client_config(None, false)
                            .map_err(OpenError::Handshake)?
                            .0
                    }
                };
                let mut config = (*base).clone();
                config.alpn_protocols = vec![b"h2".to_vec()];
                let name = rustls_pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    OpenError::Handshake(format!("`{host}` is not a name TLS can verify ({e})"))
                })?;
                Some((Arc::new(config), name))
            }
        };
        Ok(GrpcPlan {
            stream,
            address,
            tls,
        })
    }
}

/// One client's call and its stream of messages.
pub struct GrpcFeed {
    connection: Open,
    body: h2::RecvStream,
    frames: Frames,
}

/// The stream's DATA frames, being cut into messages.
#[derive(Default)]
struct Frames {
    /// What is left of the DATA frame being cut.
    chunk: Bytes,
    /// A message that spans frames, as far as it came.
    partial: BytesMut,
}

/// Why a stream ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// The server ended it with `grpc-status` 0.
    Finished,
    /// The connection went, or the server ended the stream with an error: why.
    Lost(String),
    /// The server broke gRPC's framing: why.
    Protocol(String),
}

impl GrpcFeed {
    /// Connects and makes the call; `client` goes with it as `msgbench-client` metadata.
    /// Fails like opening a WebSocket: the server is not there, or is no gRPC server that takes
    /// this call (its status says why).
    pub async fn open(plan: &GrpcPlan, client: &str) -> Result<GrpcFeed, OpenError> {
        let target = Target {
            address: plan.address,
            tls: plan.tls.clone(),
            stream_window: STREAM_WINDOW,
            section: "ticks",
            not_h2: "is it a gRPC server?",
        };
        let connection = h2_connect::open(&target).await.map_err(|f| match f {
            Failure::Connect(e) => OpenError::Connect(e),
            Failure::Problem(p) => OpenError::Handshake(p),
        })?;
        let called =
            tokio::time::timeout(h2_connect::OPEN_TIMEOUT, call(&connection, plan, client));
        match called.await {
            Ok(Ok(body)) => Ok(GrpcFeed {
                connection,
                body,
                frames: Frames::default(),
            }),
            Ok(Err(problem)) => {
                connection.driver.abort();
                Err(OpenError::Handshake(problem))
            }
            Err(_) => {
                connection.driver.abort();
                Err(OpenError::Handshake(format!(
                    "the server did not answer the call {} within {} s",
                    plan.stream.call,
                    h2_connect::OPEN_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// The next message of the stream (a slice of the frame it came in).
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, StreamEnd>> {
        loop {
            if let Some(message) = self.frames.cut()? {
                return Poll::Ready(Ok(message));
            }
            match self.body.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = self.body.flow_control().release_capacity(data.len());
                    self.frames.chunk = data;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(lost(&e))),
                Poll::Ready(None) => return self.poll_end(cx).map(Err),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Ends the call (RST_STREAM CANCEL) and the connection: with no stream and no handle
    /// left, `h2` closes it cleanly (GOAWAY), given a moment; a server that does not let go
    /// is dropped.
    pub fn close(self) {
        drop(self.body);
        let Open { send, driver, .. } = self.connection;
        drop(send);
        let abort = driver.abort_handle();
        tokio::task::spawn_local(async move {
            let _ = tokio::time::timeout(CLOSE_GRACE, driver).await;
            abort.abort();
        });
    }

    /// The body is over: the trailers say how the stream ended.
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<StreamEnd> {
        if !self.frames.partial.is_empty() || !self.frames.chunk.is_empty() {
            return Poll::Ready(StreamEnd::Protocol(
                "the stream ended inside a gRPC message".into(),
            ));
        }
        match self.body.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(status_end(&trailers)),
            Poll::Ready(Ok(None)) => Poll::Ready(StreamEnd::Protocol(
                "the stream ended without gRPC trailers (no grpc-status)".into(),
            )),
            Poll::Ready(Err(e)) => Poll::Ready(lost(&e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Frames {
    /// The next whole message in what has come, if one is there.
    fn cut(&mut self) -> Result<Option<Bytes>, StreamEnd> {
        if self.partial.is_empty() {
            if self.chunk.is_empty() {
                return Ok(None);
            }
            if let Some(length) = whole(&self.chunk)? {
                let message = self.chunk.slice(5..5 + length);
                self.chunk.advance(5 + length);
                return Ok(Some(message));
            }
        }
        // A message across frames: gather it (its head first, to know its length).
        let wanted = |partial: &BytesMut| match partial.len() {
            n if n < 5 => 5,
            _ => 5 + u32::from_be_bytes(partial[1..5].try_into().expect("4")) as usize,
        };
        loop {
            let missing = wanted(&self.partial) - self.partial.len();
            let take = missing.min(self.chunk.len());
            let before = self.partial.len();
            self.partial.extend_from_slice(&self.chunk[..take]);
            self.chunk.advance(take);
            if before < 5 && self.partial.len() == 5 {
                check_head(&self.partial)?; // its length is known now: is it allowed?
            }
            if self.partial.len() < wanted(&self.partial) {
                if self.chunk.is_empty() {
                    return Ok(None);
                }
                continue;
            }
            let mut message = self.partial.split().freeze();
            message.advance(5);
            return Ok(Some(message));
        }
    }
}

/// The length of the message at the start of `chunk` when all of it is there.
fn whole(chunk: &[u8]) -> Result<Option<usize>, StreamEnd> {
    if chunk.len() < 5 {
        return Ok(None);
    }
    let length = check_head(chunk)?;
    Ok((chunk.len() >= 5 + length).then_some(length))
}

/// A message head's length, or why it cannot be read.
fn check_head(head: &[u8]) -> Result<usize, StreamEnd> {
    let length = u32::from_be_bytes(head[1..5].try_into().expect("4")) as usize;
    match head[0] {
        0 if length <= MAX_MESSAGE => Ok(length),
        0 => Err(StreamEnd::Protocol(format!(
            "the server sent a gRPC message of {length} bytes, over the {} MiB limit",
            MAX_MESSAGE >> 20
        ))),
        1 => Err(StreamEnd::Protocol(
            "the server sent a compressed message (msgbench asked for none)".into(),
        )),
        flag => Err(StreamEnd::Protocol(format!(
            "a gRPC message head with the flag {flag} (0 or 1 expected)"
        ))),
    }
}

/// Sends the call and waits for the response's head; the body is the stream.
async fn call(connection: &Open, plan: &GrpcPlan, client: &str) -> Result<h2::RecvStream, String> {
    let s = &plan.stream;
    let scheme = if plan.tls.is_some() { "https" } else { "http" };
    let mut head = http::Request::builder()
        .method("POST")
        .uri(format!("{scheme}://{}{}", s.authority, s.path))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(
            "user-agent",
            concat!("msgbench/", env!("CARGO_PKG_VERSION")),
        )
        .header("msgbench-client", client);
    for (k, v) in &s.metadata {
        head = head.header(k.as_str(), v.as_str());
    }
    let head = head
        .body(())
        .map_err(|e| format!("the call cannot be sent ({e})"))?;
    let failed = |e: h2::Error| format!("the call {} failed ({e})", s.call);
    let mut send = connection.send.clone().ready().await.map_err(failed)?;
    let (response, mut stream) = send.send_request(head, false).map_err(failed)?;
    stream
        .send_data(Bytes::from(s.frame.clone()), true)
        .map_err(failed)?;
    let response = response.await.map_err(failed)?;
    let status = response.status();
    if status != http::StatusCode::OK {
        return Err(format!(
            "the server answered the call {} with HTTP {status}; is it a gRPC server, and is the call's path right?",
            s.call
        ));
    }
    if let StreamEnd::Lost(why) = status_end(response.headers()) {
        return Err(format!("the server refused the call: {why}"));
    }
    let content = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content.starts_with("application/grpc") {
        return Err(format!(
            "the server answered the call {} with content-type {content:?}, not application/grpc",
            s.call
        ));
    }
    Ok(response.into_body())
}

/// How `grpc-status` (in trailers, or in the head of a trailers-only answer) ends the stream.
fn status_end(headers: &http::HeaderMap) -> StreamEnd {
    let Some(code) = headers.get("grpc-status") else {
        return StreamEnd::Protocol("the trailers carry no grpc-status".into());
    };
    match code.to_str().ok().and_then(|c| c.parse::<u32>().ok()) {
        Some(0) => StreamEnd::Finished,
        Some(code) => {
            let message = headers
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            StreamEnd::Lost(format!(
                "gRPC {}{message}",
                msgbench_model::grpc::status_name(code)
            ))
        }
        None => StreamEnd::Protocol(format!("grpc-status {code:?} is not a number")),
    }
}

/// A stream or connection error as the reason the stream ended.
fn lost(e: &h2::Error) -> StreamEnd {
    let why = match e.reason() {
        Some(reason) if e.is_go_away() => format!("the server sent HTTP/2 GOAWAY ({reason:?})"),
        Some(reason) if e.is_reset() => format!("the server reset the stream ({reason:?})"),
        Some(reason) => format!("HTTP/2 error ({reason:?})"),
        None if e.is_io() => "the connection was lost".to_string(),
        None => format!("HTTP/2 error ({e})"),
    };
    StreamEnd::Lost(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            out.push(0);
            out.extend_from_slice(&(m.len() as u32).to_be_bytes());
            out.extend_from_slice(m);
        }
        out
    }

    /// Cuts `wire` delivered in frames of `size` bytes, as `poll_message` does.
    fn cut_all(wire: &[u8], size: usize) -> Result<Vec<Vec<u8>>, StreamEnd> {
        let mut frames = Frames::default();
        let mut out = Vec::new();
        for piece in wire.chunks(size) {
            assert!(
                frames.chunk.is_empty(),
                "a frame is used up before the next is taken"
            );
            frames.chunk = Bytes::copy_from_slice(piece);
            while let Some(m) = frames.cut()? {
                out.push(m.to_vec());
            }
        }
        assert!(
            frames.partial.is_empty() && frames.chunk.is_empty(),
            "nothing left over"
        );
        Ok(out)
    }

    #[test]
    fn messages_are_cut_however_the_frames_split_them() {
        let messages: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; (i as usize * 7) % 50]).collect();
        let refs: Vec<&[u8]> = messages.iter().map(|m| m.as_slice()).collect();
        let wire = framed(&refs);
        for size in [1, 2, 3, 4, 5, 6, 7, 11, 64, 1000, wire.len()] {
            assert_eq!(
                cut_all(&wire, size).unwrap(),
                messages,
                "frames of {size} bytes"
            );
        }
    }

    #[test]
    fn compressed_oversized_and_odd_heads_are_refused() {
        let mut compressed = framed(&[b"abc"]);
        compressed[0] = 1;
        let mut huge = vec![0u8];
        huge.extend_from_slice(&(64u32 << 20).to_be_bytes());
        let mut odd = framed(&[b"x"]);
        odd[0] = 7;
        for (wire, says) in [
            (compressed, "compressed"),
            (huge, "over the 4 MiB limit"),
            (odd, "flag 7"),
        ] {
            for size in [1, 3, wire.len()] {
                match cut_all(&wire, size) {
                    Err(StreamEnd::Protocol(why)) => assert!(why.contains(says), "{why}"),
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_status_in_the_trailers_says_how_the_stream_ended() {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        assert!(matches!(status_end(&t), StreamEnd::Finished));
        t.insert("grpc-status", "14".parse().unwrap());
        t.insert("grpc-message", "going away".parse().unwrap());
        match status_end(&t) {
            StreamEnd::Lost(why) => assert_eq!(why, "gRPC UNAVAILABLE: going away"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            status_end(&http::HeaderMap::new()),
            StreamEnd::Protocol(_)
        ));
    }
}
