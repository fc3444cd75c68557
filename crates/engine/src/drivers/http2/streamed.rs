//! A response that is a stream of messages, read over the `h2` crate's client: a gRPC
//! server-streaming call (length-prefixed messages) or Server-Sent Events over HTTP/2
//! (`stream = "sse"`). Each message is timed by the DATA frame that completed it
//! ([`StreamFigures`]); the response is then judged as any other (status, `grpc-status` in the
//! trailers). A stream that fails once its success head has come — reset, connection lost, a
//! gRPC error status after messages — is *cut*: failed, with what it had delivered.
//!
//! Bounded: a gRPC message's length (its 5-byte prefix) within `http.max_response`, an event
//! within [`crate::net::sse::MAX_EVENT`]; nothing else of the body is kept (a stream may run
//! for as long as the server likes; its messages are counted, not stored).
use super::connect::stream_error;
use super::rules::{grpc_status, Judge, Outcome};
use crate::clock::now_ns;
use crate::net::sse::EventParser;
use crate::streamed::StreamFigures;
use std::rc::Rc;

/// How a stream's body is cut into messages.
enum Cutter {
    /// gRPC's framing: a flag byte, a 4-byte big-endian length, the message.
    Grpc {
        head: [u8; 5],
        have: usize,
        left: u64,
    },
    /// Server-Sent Events: each event with data is a message; one whose data is `done` ends
    /// the stream uncounted.
    Sse {
        parser: Box<EventParser>,
        done: Vec<u8>,
    },
}

impl Cutter {
    fn new(grpc: bool, done: &[u8]) -> Cutter {
        if grpc {
            Cutter::Grpc {
                head: [0; 5],
                have: 0,
                left: 0,
            }
        } else {
            Cutter::Sse {
                parser: Box::default(),
                done: done.to_vec(),
            }
        }
    }

    /// The bytes of one DATA frame, arrived at `now`: the messages they complete.
    fn take(
        &mut self,
        mut bytes: &[u8],
        now: u64,
        max: usize,
        s: &mut StreamFigures,
    ) -> Result<(), String> {
        match self {
            Cutter::Grpc { head, have, left } => {
                while !bytes.is_empty() {
                    if *have < 5 {
                        let n = (5 - *have).min(bytes.len());
                        head[*have..*have + n].copy_from_slice(&bytes[..n]);
                        (*have, bytes) = (*have + n, &bytes[n..]);
                        if *have < 5 {
                            break;
                        }
                        *left = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as u64;
                        if *left > max as u64 {
                            return Err(format!(
                                "a gRPC message of {left} bytes, over http.max_response ({max})"
                            ));
                        }
                    }
                    let n = (*left).min(bytes.len() as u64);
                    (*left, bytes) = (*left - n, &bytes[n as usize..]);
                    if *left == 0 {
                        let size = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
                        s.message(now, size as usize);
                        *have = 0;
                    }
                }
                Ok(())
            }
            Cutter::Sse { parser, done } => {
                parser.extend(bytes);
                while parser.advance(None).map_err(|e| e.to_string())? {
                    s.event(now, parser.event().data, done);
                }
                Ok(())
            }
        }
    }

    /// A partial message left at the body's end.
    fn unfinished(&self) -> bool {
        match self {
            Cutter::Grpc { have, .. } => *have > 0,
            Cutter::Sse { parser, .. } => parser.pending() > 0,
        }
    }
}

/// Reads a streamed response of class `class` to its end, timing each message.
pub(super) async fn response(
    judge: Rc<Judge>,
    class: usize,
    response: h2::client::ResponseFuture,
) -> Outcome {
    let response = match response.await {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(stream_error(&e)),
    };
    let status = response.status();
    let stream = judge.streams[class].as_ref().expect("a streamed class");
    // A gRPC error may come as headers alone ("trailers-only"): no stream began.
    let mut code = grpc_status(response.headers());
    if let Some(bad) = not_a_stream(&judge, class, &response, stream.grpc, code) {
        return bad;
    }
    let mut cutter = Cutter::new(stream.grpc, &stream.done);
    let mut s = Box::new(StreamFigures::default());
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => return cut(stream_error(&e), s),
        };
        let now = now_ns();
        let _ = body.flow_control().release_capacity(chunk.len());
        if let Err(why) = cutter.take(&chunk, now, judge.max_response, &mut s) {
            return cut(why, s);
        }
    }
    if cutter.unfinished() && stream.grpc {
        return cut("the gRPC stream ended inside a message".into(), s);
    }
    if judge.grpc[class] && code.is_none() {
        code = match body.trailers().await {
            Ok(trailers) => trailers.as_ref().and_then(grpc_status),
            Err(e) => return cut(stream_error(&e), s),
        };
    }
    match judge.judge(class, status, code, &[]) {
        Outcome::Ok => Outcome::Streamed(s),
        Outcome::Failed(why) => cut(why, s),
        other => other,
    }
}

/// A response that is no stream: a failed status, a gRPC error in its headers, or (for
/// events) a success of another content-type.
fn not_a_stream(
    judge: &Judge,
    class: usize,
    response: &http::Response<h2::RecvStream>,
    grpc: bool,
    code: Option<u32>,
) -> Option<Outcome> {
    let status = response.status();
    if code.is_some_and(|c| c != 0) || !judge.accepts(status.as_u16()) {
        return Some(judge.judge(class, status, code, &[]));
    }
    if grpc {
        return None;
    }
    let kind = (response.headers().get(http::header::CONTENT_TYPE))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
        .unwrap_or_default();
    (!kind.trim_start().starts_with("text/event-stream")).then(|| {
        let kind: String = if kind.is_empty() {
            "none".into()
        } else {
            kind.chars().take(60).collect()
        };
        Outcome::Failed(format!(
            "not an event stream (content-type {kind}): does the request ask for a stream?"
        ))
    })
}

/// The stream failed after its success head: cut, with what it had delivered — or, before
/// its first message, a failed request like any other.
fn cut(why: String, figures: Box<StreamFigures>) -> Outcome {
    if figures.messages == 0 {
        return Outcome::Failed(why);
    }
    Outcome::Cut { why, figures }
}
