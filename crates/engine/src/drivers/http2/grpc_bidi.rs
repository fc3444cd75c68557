//! A bidirectional gRPC call as the request/response driver carries it (`http` requests with
//! `grpc` naming a bidirectional method and `match`): each connection keeps one stream of the
//! call open per request class; every request is one message on it, and every reply message
//! is paired with its request by the `match` field — as `ws-rpc` pairs JSON-RPC answers by
//! their `id` on one WebSocket. The caller's window is messages in flight on the stream.
//!
//! A request's message is the class's message, encoded once when the scenario was checked,
//! with the match field appended set to the request's id ([`proto_wire::put_field`]: protobuf
//! keeps the last value of a field, so nothing is re-encoded), framed into a buffer the
//! socket thread reuses. A reply's id is read off the wire ([`proto_wire::read`]); the rest of
//! it is not decoded.
use super::connect::stream_error;
use crate::net::grpc_frame::{self, Frames};
use crate::net::proto_wire;
use bytes::{Bytes, BytesMut};
use msgbench_model::grpc::ProtoField;
use std::future::Future;
use std::task::{Context, Poll};

/// Why a call's stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The server ended it with `grpc-status` 0: the requests still in flight on it will not
    /// be answered.
    Finished,
    /// The server refused or ended it with an error, or reset it: what is counted.
    Failed(String),
    /// A reply that is not gRPC, or whose match field holds no request id: what is counted.
    Protocol(String),
}

/// One open stream of a bidirectional call.
pub struct BidiStream {
    send: h2::SendStream<Bytes>,
    /// The response's head, until it comes.
    head: Option<h2::client::ResponseFuture>,
    /// The reply messages, once the head came.
    body: Option<h2::RecvStream>,
    frames: Frames,
}

impl BidiStream {
    /// Starts the call `head` on a connection ready for a new stream.
    pub fn open(
        send: &mut h2::client::SendRequest<Bytes>,
        head: &http::Request<()>,
    ) -> Result<BidiStream, h2::Error> {
        let mut request = http::Request::new(());
        *request.method_mut() = head.method().clone();
        *request.uri_mut() = head.uri().clone();
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = head.headers().clone();
        let (response, stream) = send.send_request(request, false)?;
        Ok(BidiStream {
            send: stream,
            head: Some(response),
            body: None,
            frames: Frames::default(),
        })
    }

    /// Sends one request message: `base` with `field` set to `id`, framed in `arena`. h2 holds
    /// it until the server's flow-control window takes it; the caller's window bounds how many
    /// wait.
    pub fn send(
        &mut self,
        arena: &mut BytesMut,
        base: &[u8],
        field: &ProtoField,
        id: u64,
    ) -> Result<(), h2::Error> {
        let start = arena.len();
        grpc_frame::put_head(arena, 0);
        arena.extend_from_slice(base);
        proto_wire::put_field(arena, field, id);
        let length = (arena.len() - start - 5) as u32;
        arena[start + 1..start + 5].copy_from_slice(&length.to_be_bytes());
        self.send.send_data(arena.split().freeze(), false)
    }

    /// Sends one message already framed (`end`: the last of the call).
    pub fn send_frame(&mut self, frame: Bytes, end: bool) -> Result<(), h2::Error> {
        self.send.send_data(frame, end)
    }

    /// How the call ended, for a call with one response (client streaming): `Ok` when the
    /// server answered `grpc-status` 0, else what is counted. Its reply is read and let go.
    pub fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        let outcome = |end: End| match end {
            End::Finished => Ok(()),
            End::Failed(why) | End::Protocol(why) => Err(why),
        };
        match self.poll_head(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(end)) => return Poll::Ready(outcome(end)),
            Poll::Ready(Ok(())) => {}
        }
        let body = self.body.as_mut().expect("the head came");
        loop {
            match body.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = body.flow_control().release_capacity(data.len());
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(stream_error(&e))),
                Poll::Ready(None) => return poll_trailers(body, cx).map(outcome),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Waits for the response's head and takes its body; `Err` when the head already ends
    /// the call (trailers-only: `Finished` for status 0) or refuses it.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), End>> {
        let Some(head) = self.head.as_mut() else {
            return Poll::Ready(match self.body {
                Some(_) => Ok(()),
                None => Err(End::Failed("the call has no response".into())),
            });
        };
        let response = match std::pin::Pin::new(head).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(End::Failed(stream_error(&e)))),
            Poll::Ready(Ok(r)) => r,
        };
        self.head = None;
        if let Err(end) = accepted(&response) {
            return Poll::Ready(Err(end));
        }
        self.body = Some(response.into_body());
        Poll::Ready(Ok(()))
    }

    /// The id of the next reply (`field` read from it), or how the stream ended.
    pub fn poll_reply(
        &mut self,
        cx: &mut Context<'_>,
        field: &ProtoField,
    ) -> Poll<Result<u64, End>> {
        match self.poll_head(cx) {
            Poll::Pending => return Poll::Pending,
            // Replies were expected: a call ended at once with OK has none.
            Poll::Ready(Err(End::Finished)) => {
                return Poll::Ready(Err(End::Failed("gRPC OK before any reply".into())))
            }
            Poll::Ready(Err(end)) => return Poll::Ready(Err(end)),
            Poll::Ready(Ok(())) => {}
        }
        let body = self.body.as_mut().expect("the head came");
        loop {
            match self.frames.cut() {
                Ok(Some(message)) => {
                    return Poll::Ready(match proto_wire::read(&message, field) {
                        Ok(Some(proto_wire::Value::Int(id))) => Ok(id),
                        // proto3 leaves a zero out: the first request's id is 0.
                        Ok(None) => Ok(0),
                        _ => Err(End::Protocol(format!(
                            "a reply whose {} is not a request id",
                            field.path
                        ))),
                    });
                }
                Ok(None) => {}
                Err(why) => return Poll::Ready(Err(End::Protocol(why))),
            }
            match body.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    self.frames.push(data);
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(End::Failed(stream_error(&e))))
                }
                Poll::Ready(None) => return poll_trailers(body, cx).map(Err),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Whether a response head opens the stream of replies (200, gRPC content, no status yet);
/// else how it ends the call (trailers-only: refused, or ended at once — `Finished` for OK).
fn accepted(response: &http::Response<h2::RecvStream>) -> Result<(), End> {
    if response.status() != http::StatusCode::OK {
        return Err(End::Failed(format!(
            "HTTP {} to a gRPC call",
            response.status().as_u16()
        )));
    }
    if let Some(status) = grpc_frame::status(response.headers()) {
        return Err(status.map_or_else(End::Failed, |()| End::Finished));
    }
    let content = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content.starts_with("application/grpc") {
        return Err(End::Failed(format!(
            "content-type {content:?} to a gRPC call"
        )));
    }
    Ok(())
}

/// How the trailers that follow a call's last DATA frame end it.
fn poll_trailers(body: &mut h2::RecvStream, cx: &mut Context<'_>) -> Poll<End> {
    match body.poll_trailers(cx) {
        Poll::Pending => Poll::Pending,
        Poll::Ready(Err(e)) => Poll::Ready(End::Failed(stream_error(&e))),
        Poll::Ready(Ok(trailers)) => Poll::Ready(ended(trailers.as_ref())),
    }
}

/// How trailers end the stream.
fn ended(trailers: Option<&http::HeaderMap>) -> End {
    match trailers.and_then(grpc_frame::status) {
        Some(Ok(())) => End::Finished,
        Some(Err(why)) => End::Failed(why),
        None => End::Failed("a gRPC stream ended without grpc-status".into()),
    }
}
