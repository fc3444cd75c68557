//! Fuzzing the decoders of the wires msgbench's clients speak to servers it did not write —
//! HTTP/2 frames and HPACK (msgbench's own client), WebSocket frames, gRPC message framing,
//! protobuf fields, a feed's JSON, binary and protobuf messages, NATS, MQTT 3.1.1 and 5,
//! Kafka's responses (frames, produce, fetch, the consumer group's), JetStream's API answers,
//! RabbitMQ's AMQP 0-9-1 frames (deliveries, confirms, closes, the opening's methods) —
//! and the files `merge` reads from other hosts (`.hlog` interval logs, the histograms in them,
//! a run's JSON). The same mutator as `fuzz.rs` ([`fuzz_kit`]); the seeds of the file readers
//! are the checked-in corpus under `tests/fuzz_corpus/`. Properties: no panic, no allocation
//! past what the input could justify (a hostile length is refused, not allocated), and a decoder
//! that reports what it consumed never consumes more than it was given.
//!
//! The suite runs 100 000 inputs per decoder (20 000 for the file readers); a long run:
//!
//! ```bash
//! MSGBENCH_FUZZ_CASES=10000000 cargo test --release -p msgbench-engine --test fuzz_wires -- --nocapture
//! ```
mod fuzz_kit;

use bytes::Bytes;
use fuzz_kit::{fuzz, fuzz_n, inputs};
use msgbench_engine::drivers::http2::hpack::Decoder;
use msgbench_engine::drivers::http2::wire::Client;
use msgbench_engine::drivers::pubsub::wire::{amqp, jetstream, kafka, kafka_group, mqtt, nats};
use msgbench_engine::net::feed::FeedDecoder;
use msgbench_engine::net::grpc_frame::Frames;
use msgbench_engine::net::proto_wire;
use msgbench_engine::net::ws_client::RawWs;
use msgbench_model::feed::{BinaryField, BinaryType, FeedClock, FeedConfig, FeedFormat};
use msgbench_model::feed::{FeedStamp, FieldAt};
use msgbench_model::grpc::{ProtoField, ProtoKind};

/// An HTTP/2 frame: 9-byte head and payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What a server answers three requests with: SETTINGS, its ACK, HEADERS (`:status 200`,
/// indexed), DATA ending the stream, a PING, a WINDOW_UPDATE, an RST_STREAM, a GOAWAY, and a
/// HEADERS split into a CONTINUATION.
fn h2_answers() -> Vec<Vec<u8>> {
    let settings = h2_frame(0x4, 0, 0, &[0, 4, 0, 1, 0, 0, 0, 3, 0, 0, 0, 100]);
    let ack = h2_frame(0x4, 0x1, 0, &[]);
    let headers = h2_frame(0x1, 0x4, 1, &[0x88]);
    let data = h2_frame(0x0, 0x1, 1, b"hello");
    let ping = h2_frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let window = h2_frame(0x8, 0, 0, &[0, 0, 0x10, 0]);
    let rst = h2_frame(0x3, 0, 3, &[0, 0, 0, 8]);
    let goaway = h2_frame(0x7, 0, 0, &[0, 0, 0, 3, 0, 0, 0, 0]);
    let split = [
        h2_frame(0x1, 0x1, 5, &[0x40, 0x03, b'a', b'b']),
        h2_frame(0x9, 0x4, 5, &[b'c', 0x01, b'x', 0x88]),
    ]
    .concat();
    vec![
        [settings.clone(), ack.clone(), headers.clone(), data.clone()].concat(),
        [settings, headers.clone(), ping, window, data].concat(),
        [ack, headers, rst, goaway].concat(),
        split,
    ]
}

#[test]
fn http2_frames_never_panic_nor_overrun() {
    let body = Bytes::new();
    let mut client = Client::new(4, 65_535, 1 << 16);
    client.start(0, 0, &[0x82, 0x86, 0x84], &body, true);
    let mut ended = 0;
    let (used, outcome) = client.receive_from(&h2_answers()[0], &mut |_, _, _| ended += 1);
    assert!(outcome.is_ok() && ended == 1, "the seed answers a request");
    assert_eq!(used, h2_answers()[0].len());
    fuzz("http2 frames", &h2_answers(), |b| {
        let mut client = Client::new(4, 65_535, 1 << 16);
        for token in 0..3 {
            client.start(token, 0, &[0x82, 0x86, 0x84], &body, true);
        }
        let (used, _) = client.receive_from(b, &mut |_, _, _| {});
        assert!(used <= b.len());
    });
}

#[test]
fn hpack_blocks_never_panic() {
    // RFC 7541 C.3 and C.4 (requests, Huffman and not) and C.5.1 (a response with literals).
    let seeds: Vec<Vec<u8>> = vec![
        vec![
            0x82, 0x86, 0x84, 0x41, 0x0f, b'w', b'w', b'w', b'.', b'e', b'x', b'a', b'm', b'p',
            b'l', b'e', b'.', b'c', b'o', b'm',
        ],
        vec![
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ],
        vec![
            0x48, 0x03, b'3', b'0', b'2', 0x58, 0x07, b'p', b'r', b'i', b'v', b'a', b't', b'e',
            0x61, 0x03, b'M', b'o', b'n', 0x6e, 0x02, b'/', b'x',
        ],
        vec![
            0x3f, 0xe1, 0x1f, 0x88, 0x00, 0x01, b'a', 0x01, b'b', 0x10, 0x01, b'c', 0x00,
        ],
    ];
    fuzz("hpack", &seeds, |b| {
        let mut decoder = Decoder::default();
        let _ = decoder.decode(b, |_| true, |_, _| {});
        let _ = decoder.decode(b, |_| true, |_, _| {});
    });
}

#[test]
fn websocket_frames_never_panic() {
    let seeds: Vec<Vec<u8>> = vec![
        [&[0x81, 0x05][..], b"hello"].concat(),
        [
            &[0x82, 0x7e, 0x00, 0x04][..],
            &[1, 2, 3, 4],
            &[0x89, 0x00],
            &[0x8a, 0x01, 7],
        ]
        .concat(),
        [
            &[0x01, 0x02][..],
            b"he",
            &[0x80, 0x03],
            b"llo",
            &[0x88, 0x02, 0x03, 0xe8],
        ]
        .concat(),
        vec![0x82, 0x7f, 0, 0, 0, 0, 0, 0, 0, 3, 9, 9, 9],
    ];
    for seed in &seeds {
        let mut ws = RawWs::new(tokio::io::duplex(64).0, seed, 1 << 16);
        assert!(matches!(ws.next_message(), Ok(Some(_))), "{seed:?}");
    }
    fuzz("websocket frames", &seeds, |b| {
        let mut ws = RawWs::new(tokio::io::duplex(64).0, b, 1 << 16);
        for _ in 0..64 {
            match ws.next_message() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    });
}

#[test]
fn grpc_messages_never_panic() {
    let seeds: Vec<Vec<u8>> = vec![
        [&[0, 0, 0, 0, 5][..], b"hello", &[0, 0, 0, 0, 0]].concat(),
        [&[0, 0, 0, 0, 2][..], &[0x08, 0x01], &[1, 0, 0, 0, 1], &[0]].concat(),
    ];
    fuzz("grpc messages", &seeds, |b| {
        let mut frames = Frames::default();
        // The bytes in two DATA frames, cut anywhere.
        let half = b.len() / 2;
        frames.push(Bytes::copy_from_slice(&b[..half]));
        frames.push(Bytes::copy_from_slice(&b[half..]));
        for _ in 0..64 {
            match frames.cut() {
                Ok(Some(m)) => assert!(m.len() <= b.len()),
                _ => break,
            }
        }
    });
}

/// `header.sent_at` (field 1 of field 3) and `seq` (field 2), each of a wire type.
fn proto_fields() -> Vec<ProtoField> {
    [
        (vec![2], ProtoKind::Varint),
        (vec![3, 1], ProtoKind::Fixed64),
        (vec![3, 1], ProtoKind::Double),
        (vec![4], ProtoKind::Zigzag),
        (vec![5], ProtoKind::Fixed32),
    ]
    .into_iter()
    .map(|(numbers, kind)| ProtoField {
        path: "f".into(),
        numbers,
        kind,
    })
    .collect()
}

fn proto_messages() -> Vec<Vec<u8>> {
    vec![
        vec![
            0x10, 0x96, 0x01, 0x1a, 0x09, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x20, 0x03, 0x2d, 1, 0, 0,
            0,
        ],
        vec![
            0x0a, 0x03, b'a', b'b', b'c', 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ],
    ]
}

#[test]
fn protobuf_fields_never_panic() {
    let fields = proto_fields();
    fuzz("protobuf fields", &proto_messages(), |b| {
        for f in &fields {
            let _ = proto_wire::read(b, f);
        }
    });
}

fn feed(format: FeedFormat, sequence: FieldAt, timestamp: FieldAt) -> FeedDecoder {
    FeedDecoder::new(FeedConfig {
        format,
        subscribe: Vec::new(),
        sequence: Some(sequence),
        timestamp,
        clock: FeedClock::UnixNs,
        stamp: FeedStamp::Send,
        filter: None,
    })
}

#[test]
fn feed_messages_never_panic() {
    let path = |p: &str| FieldAt::Json(p.split('.').map(String::from).collect());
    let json = feed(FeedFormat::Json, path("seq"), path("meta.ts"));
    let field = |offset, kind| FieldAt::Binary(BinaryField { offset, kind });
    let binary = feed(
        FeedFormat::Binary,
        field(0, BinaryType::U32be),
        field(4, BinaryType::U64le),
    );
    let [seq, ts, ..] = <[ProtoField; 5]>::try_from(proto_fields()).unwrap();
    let protobuf = feed(
        FeedFormat::Protobuf,
        FieldAt::Proto(seq),
        FieldAt::Proto(ts),
    );
    let mut seeds: Vec<Vec<u8>> = vec![
        br#"{"seq":1,"meta":{"ts":1700000000000000000},"px":[1,2,{"q":"\u00e9"}]}"#.to_vec(),
        br#"{"meta":{"ts":1.5e18},"seq":18446744073709551615}"#.to_vec(),
        [
            &7u32.to_be_bytes()[..],
            &1_700_000_000_000_000_000u64.to_le_bytes(),
        ]
        .concat(),
    ];
    assert!(matches!(json.decode(&seeds[0], true, &mut 0), Ok(Some(_))));
    assert!(matches!(
        binary.decode(&seeds[2], false, &mut 0),
        Ok(Some(_))
    ));
    seeds.extend(proto_messages());
    fuzz("feed messages", &seeds, |b| {
        let mut counter = 0;
        let _ = json.decode(b, true, &mut counter);
        let _ = binary.decode(b, false, &mut counter);
        let _ = protobuf.decode(b, false, &mut counter);
    });
}

#[test]
fn nats_ops_never_panic_nor_overrun() {
    let seeds: Vec<Vec<u8>> = [
        "INFO {\"server_id\":\"x\",\"max_payload\":1048576,\"headers\":true}\r\n",
        "MSG topic 1 5\r\nhello\r\nPING\r\n+OK\r\n",
        "MSG topic 7 _INBOX.x 0\r\n\r\nPONG\r\n",
        "HMSG topic 2 12 17\r\nNATS/1.0\r\n\r\nhello\r\n",
        "-ERR 'Authorization Violation'\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    assert!(seeds.iter().all(|s| matches!(nats::decode(s), Ok(Some(_)))));
    fuzz("nats", &seeds, |b| {
        let mut at = 0;
        while let Ok(Some((_, used))) = nats::decode(&b[at..]) {
            assert!(used > 0 && at + used <= b.len());
            at += used;
        }
    });
}

#[test]
fn mqtt_packets_never_panic_nor_overrun() {
    let seeds: Vec<Vec<u8>> = vec![
        vec![0x20, 0x02, 0x00, 0x00, 0x90, 0x03, 0x00, 0x01, 0x00],
        [
            &[0x30, 0x0a, 0x00, 0x03][..],
            b"a/b",
            b"hello",
            &[0xd0, 0x00],
        ]
        .concat(),
        [
            &[0x32, 0x0c, 0x00, 0x03][..],
            b"a/b",
            &[0x00, 0x07],
            b"hello",
            &[0x40, 0x02, 0, 7],
        ]
        .concat(),
        vec![
            0x20, 0x03, 0x00, 0x00, 0x00, 0x30, 0x06, 0x00, 0x01, b't', 0x00, b'h', b'i',
        ],
    ];
    let v5 = |s: &Vec<u8>| s == seeds.last().unwrap(); // the last seed is MQTT 5's
    assert!(seeds
        .iter()
        .all(|s| matches!(mqtt::decode(s, v5(s)), Ok(Some(_)))));
    fuzz("mqtt", &seeds, |b| {
        for v5 in [false, true] {
            let mut at = 0;
            while let Ok(Some((_, used))) = mqtt::decode(&b[at..], v5) {
                assert!(used > 0 && at + used <= b.len());
                at += used;
            }
        }
    });
}

#[test]
fn amqp_frames_never_panic_nor_overrun() {
    use amq_protocol::protocol::{basic, AMQPClass};
    let deliver = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
        consumer_tag: "t0-s0-c0".into(),
        delivery_tag: 3,
        redelivered: false,
        exchange: "msgbench.0".into(),
        routing_key: "msgbench.0".into(),
    }));
    let confirm = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
        delivery_tag: 9,
        multiple: true,
    }));
    // A delivery: its method, then the content header and body a publish is framed with.
    let mut delivery = amqp::method(amqp::CHANNEL, deliver);
    let prefix = amqp::publish_prefix("x", "k", 5, false);
    // Its last 29 bytes: the content header frame (22, no properties) and the body's head (7).
    delivery.extend_from_slice(&prefix[prefix.len() - 29..]);
    delivery.extend_from_slice(b"hello");
    delivery.push(amqp::FRAME_END);
    let seeds = vec![
        delivery,
        amqp::method(amqp::CHANNEL, confirm),
        amqp::close(),
        amqp::HEARTBEAT_FRAME.to_vec(),
    ];
    assert!(
        seeds
            .iter()
            .all(|s| matches!(amqp::receive(s), Ok(Some(_)))),
        "seeds"
    );
    fuzz("amqp", &seeds, |b| {
        let mut at = 0;
        while let Ok(Some((_, used))) = amqp::receive(&b[at..]) {
            assert!(used > 0 && at + used <= b.len());
            at += used;
        }
        // The opening's methods, read by the codec.
        if let Ok(Some((frame, _))) = amqp::frame(b) {
            let _ = amqp::parse_method(frame.payload);
        }
    });
}

/// A Kafka response: size, correlation id, body.
fn kafka_response(correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&correlation.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A Fetch v10 body: one topic, one partition, one record batch of two records.
fn kafka_fetch_body() -> Vec<u8> {
    let record = |delta: u8, value: &[u8]| {
        let mut r = vec![0u8, 0, delta * 2, 0x01];
        r.push((value.len() * 2) as u8);
        r.extend_from_slice(value);
        r.push(0);
        [vec![(r.len() * 2) as u8], r].concat()
    };
    let records = [record(0, b"hello"), record(1, b"world")].concat();
    let mut batch = 0i64.to_be_bytes().to_vec(); // base offset
    let mut rest = vec![0, 0, 0, 0, 2]; // leader epoch, magic 2
    rest.extend_from_slice(&[0; 4]); // crc
    rest.extend_from_slice(&[0, 0]); // attributes
    rest.extend_from_slice(&1i32.to_be_bytes()); // last offset delta
    rest.extend_from_slice(&[0; 16]); // timestamps
    rest.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    rest.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]); // epoch, sequence
    rest.extend_from_slice(&2i32.to_be_bytes());
    rest.extend_from_slice(&records);
    batch.extend_from_slice(&(rest.len() as i32).to_be_bytes());
    batch.extend_from_slice(&rest);
    let mut body = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // throttle, error, session
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&[0, 1, b't']);
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&0i32.to_be_bytes()); // partition
    body.extend_from_slice(&[0, 0]); // error
    body.extend_from_slice(&[0; 24]); // high watermark, last stable, log start
    body.extend_from_slice(&(-1i32).to_be_bytes()); // aborted
    body.extend_from_slice(&(batch.len() as i32).to_be_bytes());
    body.extend_from_slice(&batch);
    body
}

#[test]
fn kafka_responses_never_panic_nor_overrun() {
    let fetch = kafka_fetch_body();
    let produce = [
        &1i32.to_be_bytes()[..],
        &[0, 1, b't'],
        &1i32.to_be_bytes(),
        &[0; 6],
    ]
    .concat();
    let mut fetcher = kafka::Fetcher::new("t", vec![(0, 0)], 1 << 20);
    fetcher.request(&mut Vec::new());
    let mut values = Vec::new();
    let skipped = fetcher.on_response(&fetch, 1, |v| values.push(v.to_vec()));
    assert_eq!(
        (skipped, values.len()),
        (Ok(0), 2),
        "the seed is a fetch answer"
    );
    let seeds = vec![
        kafka_response(7, &fetch),
        kafka_response(7, &produce),
        kafka_response(7, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]),
    ];
    fuzz("kafka responses", &seeds, |b| {
        if let Ok(Some((body, correlation, used))) = kafka::frame(b) {
            assert!(used <= b.len() && body.len() <= used);
            let mut fetcher = kafka::Fetcher::new("t", vec![(0, 0), (1, i64::MAX - 1)], 1 << 20);
            let mut request = Vec::new();
            fetcher.request(&mut request);
            let _ = fetcher.on_response(body, correlation, |v| assert!(v.len() <= b.len()));
            let _ = kafka::produce_error(body);
            if let Ok(m) = kafka::read_metadata(body) {
                assert!(m.nodes.len() <= kafka::MAX_NODES);
            }
            let _ = kafka_group::find_coordinator_answer(body);
            let _ = kafka_group::join_response(body);
            let _ = kafka_group::sync_response(body, "t");
            let _ = kafka_group::heartbeat_error(body);
            let _ = kafka_group::commit_refusal(body);
        }
    });
}

#[test]
fn jetstream_answers_never_panic() {
    let seeds: Vec<Vec<u8>> = [
        r#"{"type":"io.nats.jetstream.api.v1.stream_create_response","config":{"name":"x","description":"made by msgbench"}}"#,
        r#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
        r#"{"stream":"x","seq":12}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("jetstream answers", &seeds, |b| {
        let _ = jetstream::api_error(b);
        let _ = jetstream::pub_ack_refusal(b);
        let _ = jetstream::made_by_msgbench(b);
    });
}

/// The checked-in corpus of a reader: every file in `tests/fuzz_corpus/<name>/`.
fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn hlog_interval_logs_never_panic_nor_blow_up() {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    fuzz_n("hlog", inputs() / 5, &corpus("hlog"), |b| {
        for entry in IntervalLogIterator::new(b).take(1000) {
            match entry {
                Ok(LogEntry::Interval(i)) => {
                    let _ = msgbench_model::histogram::decode(i.encoded_histogram());
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
}

#[test]
fn run_results_never_panic() {
    fuzz_n("run result", inputs() / 5, &corpus("result"), |b| {
        let Ok(text) = std::str::from_utf8(b) else {
            return;
        };
        if let Ok(r) = serde_json::from_str::<msgbench_model::result::RunResult>(text) {
            let _ = msgbench_engine::merge::merge_runs(&[&r, &r], &Default::default());
        }
    });
}

/// Sets one number of `value` (the `pick`-th, walking the tree) to `to`; how many it walked.
fn set_number(
    value: &mut serde_json::Value,
    pick: usize,
    to: &serde_json::Value,
    seen: &mut usize,
) {
    match value {
        serde_json::Value::Number(_) => {
            if *seen == pick {
                *value = to.clone();
            }
            *seen += 1;
        }
        serde_json::Value::Array(items) => {
            for v in items {
                set_number(v, pick, to, seen);
            }
        }
        serde_json::Value::Object(fields) => {
            for v in fields.values_mut() {
                set_number(v, pick, to, seen);
            }
        }
        _ => {}
    }
}

#[test]
fn run_results_with_edge_numbers_merge_or_are_refused() {
    // Mutated bytes rarely stay JSON: here the result stays a result, with one to three of
    // its numbers set to an edge (0, −1, 2^53, 2^63, 2^64 − 1, 1e308, 1e−300) — counters a
    // shard could carry to make a merge wrap, divide by zero or print a 300-digit rate.
    let edges: Vec<serde_json::Value> = serde_json::from_str(
        "[0, -1, 9007199254740993, 9223372036854775808, 18446744073709551615, 1e308, 1e-300, 0.5]",
    )
    .unwrap();
    let seed: serde_json::Value = serde_json::from_slice(&corpus("result")[0]).unwrap();
    let mut numbers = 0;
    set_number(&mut seed.clone(), usize::MAX, &edges[0], &mut numbers);
    let cases = inputs() / 50;
    let mut rng = fuzz_kit::Rng(0x5eed);
    let mut merged = 0;
    for _ in 0..cases {
        let mut v = seed.clone();
        for _ in 0..1 + rng.below(3) {
            let to = &edges[rng.below(edges.len())];
            set_number(&mut v, rng.below(numbers), to, &mut 0);
        }
        if let Ok(r) = serde_json::from_value::<msgbench_model::result::RunResult>(v) {
            if let Ok(m) = msgbench_engine::merge::merge_runs(&[&r, &r], &Default::default()) {
                // What a merge sums holds the accounting whenever each part did.
                if r.counters.check().is_ok() {
                    assert!(
                        m.counters.check().is_ok(),
                        "{:?} → {:?}",
                        r.counters,
                        m.counters
                    );
                }
                merged += 1;
            }
        }
    }
    println!(
        "fuzz run result numbers: {cases} results of {numbers} numbers, {merged} merged, no panic"
    );
}
