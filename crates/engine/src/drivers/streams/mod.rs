//! Stream subscribers: [`tick_client`] (native clients of a WebSocket feed, or of a gRPC server
//! stream through [`grpc_feed`]) and [`browser`] (headless Chromium pages), both measuring into
//! [`stream_stats`] (per-client latency, gaps, duplicates, reordering).
pub mod browser;
pub mod grpc_feed;
pub mod stream_stats;
pub mod tick_client;
