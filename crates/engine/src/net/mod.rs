//! Wire formats shared by the built-in servers and the drivers.
pub mod feed;
pub mod frame;
pub mod grpc_frame;
pub mod grpc_reflection;
pub mod http;
pub mod http_fill;
pub mod json_rpc;
pub mod proto_wire;
pub mod resp;
pub mod tick;
pub mod ws_client;
