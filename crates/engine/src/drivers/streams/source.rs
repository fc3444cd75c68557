//! The seam of the stream family's feeds that are not WebSockets: a [`FeedSource`] hands the
//! tick client's reader one message at a time, and says how its stream ended. A new kind of
//! stream is one file implementing it ([`super::grpc_feed`], [`super::sse_feed`]) and one
//! variant of the client's `Socket` (and [`super::udp_feed`], datagrams).
use std::task::{Context, Poll};

/// One message of a feed, borrowed from its source until the next poll.
#[derive(Debug, Clone, Copy)]
pub enum FeedMessage<'a> {
    /// A message read whole: a gRPC stream's protobuf message, a UDP datagram.
    Bytes {
        /// The message.
        payload: &'a [u8],
        /// It is text (JSON), not binary.
        text: bool,
    },
    /// A Server-Sent Event: its data, and the stream's last event id at it.
    Event {
        /// The data lines, joined.
        data: &'a [u8],
        /// The last `id:` the stream gave.
        id: Option<&'a [u8]>,
    },
}

/// Why a stream ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// The server ended it as finished (gRPC status 0).
    Finished,
    /// The connection went, or the server ended the stream with an error: why.
    Lost(String),
    /// The server broke the stream's framing: why.
    Protocol(String),
}

/// A feed read message by message.
pub trait FeedSource {
    /// The next message, or how the stream ended.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<FeedMessage<'_>, StreamEnd>>;
}
