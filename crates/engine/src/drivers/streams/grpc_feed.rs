//! A gRPC server stream read by a tick client (`[ticks.grpc]`): one HTTP/2 connection per
//! client connection ([`crate::drivers::http2::connect`]), one call on it — the request message framed
//! once when the scenario was checked — and its response stream cut into gRPC messages, each
//! handed to the tick client's reader as a feed message (`[ticks.feed]`, `format =
//! "protobuf"`: sequence number and timestamp read by [`crate::net::proto_wire`]).
//!
//! Messages are cut from the DATA frames by [`crate::net::grpc_frame::Frames`], without copying
//! unless one spans frames. Flow-control capacity is given back as each frame is taken, so what the
//! server may send ahead of the reader is bounded by the stream's window (16 MiB).
//!
//! The stream ends with the server's trailers: `grpc-status` 0 ends it for this client like
//! msgbench's `end` message; any other status ends it as a fault named by its status.
use super::source::{resolve, tls_target, TlsTarget};
use super::source::{FeedMessage, FeedSource, StreamEnd};
use crate::drivers::failure::OpenError;
use crate::drivers::http2::connect::{self, Failure, Open, Target};
use crate::net::grpc_frame::Frames;
use bytes::Bytes;
use msgbench_model::grpc::GrpcStream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

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
    pub tls: Option<TlsTarget>,
}

impl GrpcPlan {
    /// Resolves the server and prepares TLS (`tls`: the run's client configuration).
    pub fn new(
        stream: GrpcStream,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<GrpcPlan, OpenError> {
        let address = resolve(&stream.address)?;
        let tls = tls_target(stream.server_name.as_deref(), tls, b"h2")?;
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
    /// The message handed out last.
    current: Bytes,
}

impl FeedSource for GrpcFeed {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<FeedMessage<'_>, StreamEnd>> {
        match GrpcFeed::poll_message(self, cx) {
            Poll::Ready(Ok(message)) => {
                self.current = message;
                Poll::Ready(Ok(FeedMessage::Bytes {
                    payload: &self.current,
                    text: false,
                }))
            }
            Poll::Ready(Err(end)) => Poll::Ready(Err(end)),
            Poll::Pending => Poll::Pending,
        }
    }
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
        let connection = connect::open(&target).await.map_err(|f| match f {
            Failure::Connect(e) => OpenError::Connect(e),
            Failure::Problem(p) => OpenError::Handshake(p),
        })?;
        let called = tokio::time::timeout(connect::OPEN_TIMEOUT, call(&connection, plan, client));
        match called.await {
            Ok(Ok(body)) => Ok(GrpcFeed {
                connection,
                body,
                frames: Frames::default(),
                current: Bytes::new(),
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
                    connect::OPEN_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// The next message of the stream (a slice of the frame it came in).
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, StreamEnd>> {
        loop {
            if let Some(message) = self.frames.cut().map_err(StreamEnd::Protocol)? {
                return Poll::Ready(Ok(message));
            }
            match self.body.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = self.body.flow_control().release_capacity(data.len());
                    self.frames.push(data);
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
        connect::close_gracefully(self.connection);
    }

    /// The body is over: the trailers say how the stream ended.
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<StreamEnd> {
        if !self.frames.is_empty() {
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
    match crate::net::grpc_frame::status(headers) {
        Some(Ok(())) => StreamEnd::Finished,
        Some(Err(why)) => StreamEnd::Lost(why),
        None => StreamEnd::Protocol("the trailers carry no grpc-status".into()),
    }
}

/// A stream or connection error as the reason the stream ended (counted as the HTTP/2
/// callers count it).
fn lost(e: &h2::Error) -> StreamEnd {
    StreamEnd::Lost(connect::stream_error(e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
