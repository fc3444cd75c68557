//! Stream subscribers: [`tick_client`] (native clients of a WebSocket feed, or of a
//! [`source::FeedSource`]: a gRPC server stream through [`grpc_feed`], Server-Sent Events
//! through [`sse_feed`]; a UDP feed through [`udp_feed`]) and [`browser`] (headless Chromium pages), both measuring into
//! [`stream_stats`] (per-client latency, gaps, duplicates, reordering). [`run`] is the family's
//! run on the harness's frame; [`outcome`] joins what the clients and the server saw.
pub mod browser;
pub mod grpc_feed;
pub mod outcome;
pub mod run;
pub mod source;
pub mod sse_feed;
pub mod stream_stats;
pub mod tick_client;
pub mod udp_feed;
