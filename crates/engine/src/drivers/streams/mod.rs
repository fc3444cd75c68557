//! Stream subscribers: [`tick_client`] (native clients of a WebSocket feed, or of a gRPC server
//! stream through [`grpc_feed`]) and [`browser`] (headless Chromium pages), both measuring into
//! [`stream_stats`] (per-client latency, gaps, duplicates, reordering). [`run`] is the family's
//! run on the harness's frame; [`outcome`] joins what the clients and the server saw.
pub mod browser;
pub mod grpc_feed;
pub mod outcome;
pub mod run;
pub mod stream_stats;
pub mod tick_client;
