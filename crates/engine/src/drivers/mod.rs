//! How load is offered, one file per transport pattern. A driver knows nothing of a particular
//! system: it takes a wire format (or a stream format) and the run's [`crate::harness`] pieces,
//! and returns what it measured.
//!
//! * Request/response: [`launcher`] (pacing and `when_full` per connection), [`in_flight`] (the
//!   requests in flight), [`failure`] (what ends them early); carried by [`byte_stream`] (one
//!   mio event loop per thread, generic over the [`byte_stream::Wire`] and the
//!   [`byte_stream::Transport`]) or by [`caller`] + a socket thread (a caller thread handing
//!   requests through SPSC rings to [`ws_socket`]'s WebSockets or the [`http2`] family's
//!   streams (gRPC calls included; [`http2::connect`] opens an HTTP/2 connection for the gRPC
//!   stream clients too).
//! * Stream subscribers: [`tick_client`] (native clients of a WebSocket, or of a gRPC server
//!   stream through [`grpc_feed`]), [`browser`] (headless Chromium pages), both measuring into
//!   [`stream_stats`].
//! * Publish/subscribe through a broker: the [`pubsub`] family (the run, its publisher and
//!   subscriber threads, each subscription's accounting), every broker one file of
//!   [`pubsub::brokers`] behind [`pubsub::client::BrokerClient`].
//! * In-process: [`producer_consumer`] (a paced producer and a consumer around a ring).
pub mod browser;
pub mod byte_stream;
pub mod caller;
pub mod cost;
pub mod failure;
pub mod grpc_feed;
pub mod http2;
pub mod in_flight;
pub mod launcher;
pub mod producer_consumer;
pub mod pubsub;
pub mod stream_stats;
pub mod tick_client;
pub mod tls;
pub mod ws_socket;
