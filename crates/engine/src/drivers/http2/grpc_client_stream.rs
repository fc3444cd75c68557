//! A client-streaming gRPC call whose messages are paced (`http` requests with `grpc` naming a
//! client-streaming method, `messages = N` and `paced = true`): each request is one message,
//! sent on its schedule on the class's open call of its connection; after N messages the call
//! is ended (END_STREAM) and its one response confirms all N — each message's latency runs from
//! its intended send to that response, so a server that reads a stream slowly, or answers its
//! end late, shows in every message it holds. Messages wait for the server's flow-control
//! window in h2 (the caller's window bounds how many), and that wait is counted like any
//! request body's.
use super::grpc_bidi::BidiStream;
use bytes::Bytes;
use std::task::{Context, Poll};

/// One open call and the requests (messages) it carries.
pub struct PacedCall {
    call: BidiStream,
    /// Request ids of the messages sent on it, in order.
    ids: Vec<u64>,
    /// Messages a call carries.
    per_call: u32,
    /// Its side of the stream is ended: only the response is left.
    ended: bool,
}

impl PacedCall {
    /// Starts the call `head` on a connection ready for a new stream.
    pub fn open(
        send: &mut h2::client::SendRequest<Bytes>,
        head: &http::Request<()>,
        per_call: u32,
    ) -> Result<PacedCall, h2::Error> {
        Ok(PacedCall {
            call: BidiStream::open(send, head)?,
            ids: Vec::with_capacity(per_call as usize),
            per_call,
            ended: false,
        })
    }

    /// Sends request `id`'s message (`frame`, framed once when the scenario was checked); the
    /// call's last one ends the stream. A call the server already ended (it answered early,
    /// with an error, or reset it) takes no more: the message is its call's all the same, and
    /// the call's end — read by [`PacedCall::poll_response`] — is its outcome too.
    pub fn send(&mut self, frame: &Bytes, id: u64) {
        self.ids.push(id);
        let last = self.ids.len() >= self.per_call as usize;
        if self.call.send_frame(frame.clone(), last).is_err() {
            self.ended = true;
            return;
        }
        self.ended = last;
    }

    /// Ends the call before it has all its messages (its connection is retired): the response
    /// confirms those it has.
    pub fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            // A stream the server already ended needs no end: its response says how it went.
            let _ = self.call.send_frame(Bytes::new(), true);
        }
    }

    /// Whether the call has all its messages (a new one takes the next).
    pub fn is_full(&self) -> bool {
        self.ended
    }

    /// The ids of its messages (what its response confirms or fails).
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// How the call ended: `Ok` when the server answered it with `grpc-status` 0, else what is
    /// counted. A call the server ends before its messages are all sent ends here too.
    pub fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        self.call.poll_end(cx)
    }
}
