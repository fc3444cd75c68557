//! Built-in servers: systems under test msgbench ships, started in-process by a scenario or
//! standalone with `msgbench serve`.
pub mod rpc;
pub mod ticks;
pub mod ws;
pub mod ws_rpc;
