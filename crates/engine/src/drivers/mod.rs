//! How load is offered, one folder per family. A driver knows nothing of a particular system:
//! it takes a wire format (or a stream format) and the run's [`crate::harness`] pieces, and
//! returns what it measured.
//!
//! * [`request_response`]: pacing and `when_full` per connection, the requests in flight, and
//!   the two ways they are carried — one mio event loop per thread generic over a `Wire` and a
//!   `Transport`, or a caller thread handing requests to the sockets of a framed, multiplexed
//!   transport (WebSocket JSON-RPC there, HTTP/2 in [`http2`]).
//! * [`http2`]: HTTP/2 and gRPC calls under a caller, its two clients behind one dispatch.
//! * [`streams`]: stream subscribers — native clients of a WebSocket or of a gRPC server stream,
//!   headless Chromium pages — measuring into one set of stream statistics.
//! * [`pubsub`]: publish/subscribe through a broker, every broker one file of
//!   [`pubsub::brokers`] behind [`pubsub::client::BrokerClient`].
//! * In-process: [`producer_consumer`] (a paced producer and a consumer around a ring).
//!
//! Shared by the families: [`failure`] (what ends a request or an opening early), [`tls`]
//! (rustls for every client), [`cost`] (a stream client's CPU per message).
pub mod cost;
pub mod failure;
pub mod http2;
pub mod producer_consumer;
pub mod pubsub;
pub mod request_response;
pub mod streams;
pub mod tls;
