//! Wire formats shared by the built-in servers and the drivers.
pub mod endpoint;
pub mod feed;
pub mod frame;
pub mod grpc_frame;
pub mod grpc_reflection;
pub mod http;
pub mod http_fill;
pub mod json_path;
pub mod json_rpc;
pub mod nkey;
pub mod proto_wire;
pub mod resp;
pub mod scram;
pub mod sse;
pub mod sse_response;
pub mod tick;
pub mod ws_client;

/// Appends `n` in decimal (no allocation: the digits go through a stack buffer).
#[inline]
pub(crate) fn push_decimal(mut n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}
