//! Fuzzing every decoder a peer can reach: the RPC frame, RESP, the tick stream (binary and
//! JSON), the JSON-RPC reply, the tick server's control messages (both ways) and the WebSocket
//! upgrade head. `cargo fuzz` needs a nightly toolchain; this runs on stable: proptest draws a
//! seed and a valid message, and each case feeds the decoder that message mutated 100 ways
//! (bytes flipped, set to edge values, cut, inserted, repeated) plus random bytes. Properties:
//! no panic, and a decoder that reports what it consumed never consumes more than it was given.
//!
//! The suite runs 100 000 inputs per decoder (about a second in all). A long run (10 million per decoder):
//!
//! ```bash
//! MSGBENCH_FUZZ_CASES=10000000 cargo test --release -p msgbench-engine --test fuzz -- --nocapture
//! ```
use bytes::BytesMut;
use msgbench_engine::net::frame::{self, Header, KIND_REQUEST, KIND_RESPONSE};
use msgbench_engine::net::resp;
use msgbench_engine::net::tick::{ClientMessage, ServerMessage, Tick};
mod fuzz_kit;

use fuzz_kit::fuzz;

fn rpc_frames() -> Vec<Vec<u8>> {
    [
        (KIND_REQUEST, 0u32),
        (KIND_RESPONSE, 40),
        (KIND_REQUEST, 200),
    ]
    .into_iter()
    .map(|(kind, payload)| {
        let mut out = Vec::new();
        let h = Header {
            kind,
            flags: 1,
            class: 3,
            id: 42,
            client_ns: 7,
            service_ns: 1000,
            reply_bytes: 16,
        };
        frame::encode(&h, payload as usize, &mut out);
        out
    })
    .collect()
}

#[test]
fn rpc_frames_never_panic_nor_overrun() {
    fuzz("rpc frame", &rpc_frames(), |b| {
        for kind in [KIND_REQUEST, KIND_RESPONSE] {
            if let Ok(Some((_, size))) = frame::decode(b, 1 << 20, kind) {
                assert!(size <= b.len() && size >= frame::HEADER_BYTES);
            }
        }
    });
}

#[test]
fn resp_replies_never_panic_nor_overrun() {
    let seeds: Vec<Vec<u8>> = [
        "+PONG\r\n",
        "+OK\r\n",
        "-ERR unknown command 'FOO'\r\n",
        ":12345\r\n",
        "$5\r\nhello\r\n",
        "$-1\r\n",
        "*2\r\n$3\r\nfoo\r\n$3\r\nbar\r\n",
        "*3\r\n:1\r\n*1\r\n+x\r\n$0\r\n\r\n",
        "_\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("resp", &seeds, |b| {
        if let Ok(Some((_, used))) = resp::decode(b) {
            assert!(used <= b.len());
        }
    });
}

#[test]
fn http_responses_never_panic_nor_overrun() {
    let seeds: Vec<Vec<u8>> = [
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: 1\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        "HTTP/1.0 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("http", &seeds, |b| {
        for head in [false, true] {
            if let Ok(Some(f)) = msgbench_engine::net::http::decode(b, head, 1 << 20) {
                assert!(f.size <= b.len() && f.body.0 <= f.body.1 && f.body.1 <= f.size);
                let mut data = Vec::new();
                msgbench_engine::net::http::dechunk(&b[f.body.0..f.body.1], &mut data);
            }
        }
    });
}

fn ticks(json: bool) -> Vec<Vec<u8>> {
    (0..3u64)
        .map(|i| {
            let mut t = Tick::at(i * 1_000_003, 1_700_000_000 + i, 10);
            t.sent_ns = 1_700_000_500;
            let mut out = BytesMut::new();
            if json {
                t.encode_json(&mut out);
            } else {
                t.encode_binary(&mut out);
            }
            out.to_vec()
        })
        .collect()
}

#[test]
fn binary_ticks_never_panic() {
    fuzz("tick binary", &ticks(false), |b| {
        let _ = Tick::decode(b, false);
        let _ = msgbench_engine::net::tick::is_control(b);
    });
}

#[test]
fn json_ticks_never_panic() {
    fuzz("tick json", &ticks(true), |b| {
        let _ = Tick::decode(b, true);
        let _ = msgbench_engine::net::tick::is_control(b);
    });
}

#[test]
fn json_rpc_replies_never_panic() {
    let seeds: Vec<Vec<u8>> = [
        r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551615,"result":null}"#,
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"a":[1,2,{"b":"\u00e9"}]}}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("json-rpc reply", &seeds, |b| {
        let _ = msgbench_engine::net::json_rpc::parse_reply(b);
    });
}

#[test]
fn control_messages_never_panic() {
    let seeds: Vec<Vec<u8>> = [
        r#"{"type":"ack","processed":12345}"#,
        r#"{"type":"ping","t":1.5}"#,
        r#"{"type":"subscribe"}"#,
        r#"{"type":"clock","resolution_ns":5000.0,"rtt_ns":120000.0}"#,
        r#"{"type":"window","start_ns":1,"end_ns":2}"#,
        r#"{"type":"pong","t":1.5,"now_ns":99}"#,
        r#"{"type":"end","generated":100}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("control messages", &seeds, |b| {
        let _ = serde_json::from_slice::<ClientMessage>(b);
        let _ = serde_json::from_slice::<ServerMessage>(b);
    });
}

#[test]
fn upgrade_heads_never_panic() {
    let seeds: Vec<Vec<u8>> = [
        "GET /ticks?client=a&format=json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /t`x HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("upgrade head", &seeds, |b| {
        let _ = msgbench_engine::server::ws::parse_request_head(b);
    });
}
