//! The client side of Kafka's protocol that the `pubsub` driver needs: Metadata and
//! CreateTopics (the run's topics, with their partitions), ListOffsets (a consumer starts at
//! the end of each partition), Produce (one record batch per request) and Fetch (record batches
//! read in place).
//!
//! Hand-written rather than taken from a client crate: `rdkafka` is librdkafka (C, its own
//! threads and queues between the application and the socket, a delivery callback per
//! message), `rskafka` is async with owned records and has no `acks` 0 or 1; the driver
//! encodes each message's 24-byte header straight into the request it sends and reads it in
//! place from the fetch response, as it does for every other broker. Every request uses a
//! version with the classic (non-flexible) encoding that Kafka 3 and 4 both accept: Produce
//! v7, Fetch v10, ListOffsets v4, Metadata v7, CreateTopics v4; record batches are format v2
//! (magic 2), compressed as the scenario says and read whatever their codec
//! ([`super::kafka_codec`]).
use super::kafka_codec;
use msgbench_model::pubsub::Compression;
use std::io::{Read, Write};

/// Largest response accepted (a fetch asks for at most [`FETCH_MAX_BYTES`]; Kafka may exceed
/// it by one batch).
pub const MAX_FRAME: usize = 8 << 20;
/// Bytes one fetch asks for, over all its partitions.
pub const FETCH_MAX_BYTES: i32 = 1 << 20;
/// Longest a fetch waits at the broker for a first byte (it answers as soon as one record is
/// there).
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Bytes of a record batch before its records.
const BATCH_HEADER: usize = 61;
/// Bytes a batch may reach: under the broker's default `max.message.bytes` (1 048 588).
pub const MAX_BATCH_BYTES: usize = 1_000_000;
const CLIENT_ID: &str = "msgbench";

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const LIST_OFFSETS: i16 = 2;
const METADATA: i16 = 3;
const CREATE_TOPICS: i16 = 19;
const INIT_PRODUCER_ID: i16 = 22;

/// Kafka's name for an error code (those a run may meet), for messages.
pub fn error_name(code: i16) -> String {
    let name = match code {
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        41 => "NOT_CONTROLLER",
        42 => "INVALID_REQUEST",
        87 => "INVALID_RECORD",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        58 => "SASL_AUTHENTICATION_FAILED",
        22 => "ILLEGAL_GENERATION",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        30 => "GROUP_AUTHORIZATION_FAILED",
        79 => "MEMBER_ID_REQUIRED",
        _ => return format!("error code {code}"),
    };
    format!("{name} ({code})")
}

// ---- encoding ----

pub(crate) fn put_i16(v: i16, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(crate) fn put_i32(v: i32, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(crate) fn put_i64(v: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(crate) fn put_str(s: &str, out: &mut Vec<u8>) {
    put_i16(s.len() as i16, out);
    out.extend_from_slice(s.as_bytes());
}
/// Zig-zag varint (records' fields).
fn put_varint(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Bytes of `v` as a zig-zag varint.
fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - z.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Starts a request (size placeholder and header v1); returns where its size goes.
pub(crate) fn begin(api: i16, version: i16, correlation: i32, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    put_i32(0, out);
    put_i16(api, out);
    put_i16(version, out);
    put_i32(correlation, out);
    put_str(CLIENT_ID, out);
    start
}

/// Writes the size of the request begun at `start`.
pub(crate) fn finish(start: usize, out: &mut [u8]) {
    let size = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

// ---- decoding ----

/// A bounds-checked reader of a response body.
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

/// A response that does not parse.
pub const SHORT: &str = "a Kafka response shorter than its fields";

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, at: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end = self.at.checked_add(n).ok_or(SHORT)?;
        let s = self.buf.get(self.at..end).ok_or(SHORT)?;
        self.at = end;
        Ok(s)
    }
    fn i8(&mut self) -> Result<i8, &'static str> {
        Ok(self.take(1)?[0] as i8)
    }
    pub(crate) fn i16(&mut self) -> Result<i16, &'static str> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, &'static str> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, &'static str> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A string (or a null one: empty).
    pub(crate) fn str(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(b"");
        }
        self.take(n as usize)
    }
    /// An array's length (a null array: 0).
    pub(crate) fn len(&mut self) -> Result<usize, &'static str> {
        let n = self.i32()?;
        if n > 1 << 24 {
            return Err("a Kafka array longer than any response holds");
        }
        Ok(n.max(0) as usize)
    }
    fn varint(&mut self) -> Result<i64, &'static str> {
        let mut z = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.take(1)?[0];
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err("a Kafka varint longer than 10 bytes")
    }
    fn skip_i32_array(&mut self) -> Result<(), &'static str> {
        let n = self.len()?;
        self.take(4 * n).map(|_| ())
    }
}

/// A response's body (after its correlation id), its correlation id, and its bytes in all.
pub type Frame<'a> = (&'a [u8], i32, usize);

/// The response at the start of `buf` — its body after the correlation id, the correlation
/// id, and the bytes it took; `Ok(None)` when incomplete.
pub fn frame(buf: &[u8]) -> Result<Option<Frame<'_>>, String> {
    let Some(size) = buf.get(..4) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes(size.try_into().expect("4"));
    if !(4..=MAX_FRAME as i32).contains(&size) {
        return Err(format!(
            "a Kafka response of {size} bytes (bytes {:?} are not Kafka's)",
            String::from_utf8_lossy(&buf[..buf.len().min(16)])
        ));
    }
    let total = 4 + size as usize;
    let Some(whole) = buf.get(..total) else {
        return Ok(None);
    };
    let correlation = i32::from_be_bytes(whole[4..8].try_into().expect("4"));
    Ok(Some((&whole[8..], correlation, total)))
}

// ---- blocking calls of a connection's opening ----

/// Sends `request` (one whole request) and returns the body of its response.
pub fn call(
    stream: &mut (impl Read + Write),
    request: &[u8],
    correlation: i32,
) -> Result<Vec<u8>, String> {
    stream
        .write_all(request)
        .map_err(|e| format!("writing a request failed ({e})"))?;
    read_response(stream, correlation)
}

/// Reads the response to the request of `correlation` (sent before) and returns its body.
pub fn read_response(
    stream: &mut (impl Read + Write),
    correlation: i32,
) -> Result<Vec<u8>, String> {
    let mut size = [0u8; 4];
    read_exact(stream, &mut size)?;
    let n = i32::from_be_bytes(size);
    // A TLS record (an alert, 0x15, or a handshake, 0x16, of TLS 1.x): a TLS listener.
    if matches!(size, [0x15 | 0x16, 3, 0..=4, _]) {
        return Err(
            "it answered in TLS: this is a TLS listener (SSL or SASL_SSL); give [pubsub.tls]"
                .into(),
        );
    }
    if !(4..=MAX_FRAME as i32).contains(&n) {
        return Err(format!(
            "this is not a kafka server (its answer began with {:?}); check pubsub.broker and pubsub.address",
            String::from_utf8_lossy(&size)
        ));
    }
    let mut body = vec![0u8; n as usize];
    read_exact(stream, &mut body)?;
    if body[..4] != correlation.to_be_bytes() {
        return Err("an answer to another request (correlation ids differ)".into());
    }
    body.drain(..4);
    Ok(body)
}

fn read_exact(stream: &mut (impl Read + Write), buf: &mut [u8]) -> Result<(), String> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "it closed the connection; is this a kafka server? check pubsub.broker and pubsub.address (a SASL listener closes a connection that has not logged in: then give [pubsub.auth])".to_string()
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "no answer within 3 s; is this a kafka server? check pubsub.broker and pubsub.address".to_string()
        }
        _ => format!("reading failed ({e})"),
    })
}

/// Per topic: its error code and its partitions, each with its leader (`-1`: none yet).
pub type TopicsMetadata = Vec<(String, i16, Vec<(i32, i32)>)>;

/// One broker of the cluster as Metadata names it: its node id and where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its node id (`node.id`).
    pub id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: u16,
}

/// Most brokers a cluster's metadata may name (an untrusted answer bounds what is kept).
pub const MAX_NODES: usize = 1024;

/// A Metadata answer: the cluster's brokers and the topics asked for.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// Its brokers, by node id.
    pub nodes: Vec<Node>,
    /// The topics asked for.
    pub topics: TopicsMetadata,
}

/// Metadata v7 of `topics`, without creating them.
pub fn metadata(stream: &mut (impl Read + Write), topics: &[String]) -> Result<Metadata, String> {
    let mut out = Vec::new();
    let start = begin(METADATA, 7, 1, &mut out);
    put_i32(topics.len() as i32, &mut out);
    for t in topics {
        put_str(t, &mut out);
    }
    out.push(0); // allow_auto_topic_creation: no, the run creates its topics
    finish(start, &mut out);
    let body = call(stream, &out, 1)?;
    read_metadata(&body)
}

/// The body of a Metadata v7 answer.
pub fn read_metadata(body: &[u8]) -> Result<Metadata, String> {
    let mut r = Reader::new(body);
    r.i32()?; // throttle
    let mut nodes = Vec::new();
    for _ in 0..r.len()? {
        let id = r.i32()?;
        let host = String::from_utf8_lossy(r.str()?).into_owned();
        let port = r.i32()?;
        r.str()?; // rack
        let port = u16::try_from(port)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("it named broker {id} at port {port}"))?;
        if nodes.len() == MAX_NODES {
            return Err(format!("it named over {MAX_NODES} brokers"));
        }
        nodes.push(Node { id, host, port });
    }
    nodes.sort_unstable_by_key(|n| n.id);
    r.str()?; // cluster id
    r.i32()?; // controller
    let mut found = Vec::new();
    for _ in 0..r.len()? {
        let error = r.i16()?;
        let name = String::from_utf8_lossy(r.str()?).into_owned();
        r.i8()?; // internal
        let mut partitions = Vec::new();
        for _ in 0..r.len()? {
            r.i16()?;
            let index = r.i32()?;
            let leader = r.i32()?;
            r.i32()?; // leader epoch
            r.skip_i32_array()?;
            r.skip_i32_array()?;
            r.skip_i32_array()?;
            partitions.push((index, leader));
        }
        partitions.sort_unstable();
        found.push((name, error, partitions));
    }
    Ok(Metadata {
        nodes,
        topics: found,
    })
}

/// CreateTopics v4: `topics` with `partitions` each, as many replicas as the cluster's
/// `default.replication.factor`; per topic its error code and message (36: it already exists).
pub fn create_topics(
    stream: &mut (impl Read + Write),
    topics: &[&str],
    partitions: u32,
) -> Result<Vec<(String, i16, String)>, String> {
    let mut out = Vec::new();
    let start = begin(CREATE_TOPICS, 4, 2, &mut out);
    put_i32(topics.len() as i32, &mut out);
    for t in topics {
        put_str(t, &mut out);
        put_i32(partitions as i32, &mut out);
        put_i16(-1, &mut out); // replication factor: the broker's default
        put_i32(0, &mut out); // assignments
        put_i32(0, &mut out); // configs
    }
    put_i32(10_000, &mut out); // timeout ms
    out.push(0); // validate only: no
    finish(start, &mut out);
    let body = call(stream, &out, 2)?;
    let mut r = Reader::new(&body);
    r.i32()?;
    let mut results = Vec::new();
    for _ in 0..r.len()? {
        let name = String::from_utf8_lossy(r.str()?).into_owned();
        let error = r.i16()?;
        let message = String::from_utf8_lossy(r.str()?).into_owned();
        results.push((name, error, message));
    }
    Ok(results)
}

/// InitProducerId v1 (no transaction): an idempotent producer's id and epoch, or the error
/// code of a refusal.
pub fn init_producer_id(
    stream: &mut (impl Read + Write),
) -> Result<Result<(i64, i16), i16>, String> {
    let mut out = Vec::new();
    let start = begin(INIT_PRODUCER_ID, 1, 4, &mut out);
    put_i16(-1, &mut out); // transactional id: none
    put_i32(60_000, &mut out); // transaction timeout ms (none is used)
    finish(start, &mut out);
    let body = call(stream, &out, 4)?;
    let mut r = Reader::new(&body);
    r.i32()?; // throttle
    let error = r.i16()?;
    let (id, epoch) = (r.i64()?, r.i16()?);
    Ok(if error == 0 {
        Ok((id, epoch))
    } else {
        Err(error)
    })
}

/// Per partition its end offset, or the first partition refused and the error code.
pub type EndOffsets = Result<Vec<(i32, i64)>, (i32, i16)>;

/// ListOffsets v4: the end offset (the next record's) of each of `partitions` of `topic`, or
/// the first partition's refusal (its error code).
pub fn end_offsets(
    stream: &mut (impl Read + Write),
    topic: &str,
    partitions: &[i32],
) -> Result<EndOffsets, String> {
    let mut out = Vec::new();
    let start = begin(LIST_OFFSETS, 4, 3, &mut out);
    put_i32(-1, &mut out); // replica: a consumer
    out.push(0); // read uncommitted
    put_i32(1, &mut out);
    put_str(topic, &mut out);
    put_i32(partitions.len() as i32, &mut out);
    for &p in partitions {
        put_i32(p, &mut out);
        put_i32(-1, &mut out); // current leader epoch: unknown
        put_i64(-1, &mut out); // timestamp -1: the latest offset
    }
    finish(start, &mut out);
    let body = call(stream, &out, 3)?;
    let mut r = Reader::new(&body);
    r.i32()?;
    let mut offsets = Vec::new();
    for _ in 0..r.len()? {
        r.str()?;
        for _ in 0..r.len()? {
            let p = r.i32()?;
            let error = r.i16()?;
            r.i64()?;
            let offset = r.i64()?;
            r.i32()?;
            if error != 0 {
                return Ok(Err((p, error)));
            }
            offsets.push((p, offset));
        }
    }
    if offsets.len() != partitions.len() {
        return Err(format!(
            "it gave {} end offsets for {} partitions of {topic}",
            offsets.len(),
            partitions.len()
        ));
    }
    Ok(Ok(offsets))
}

/// A refusal that passes once the broker has settled (a new topic's leadership).
pub fn retriable(code: i16) -> bool {
    matches!(code, 3 | 5 | 6 | 7)
}

// ---- producing ----

/// One publisher's Produce requests: the batch being filled (one per request, one partition
/// each) and where its length fields go once it is sealed.
#[derive(Debug, Clone)]
pub struct Producer {
    topic: String,
    acks: i16,
    /// The partitions it fills, in turn.
    partitions: Vec<i32>,
    turn: usize,
    correlation: i32,
    open: Option<OpenBatch>,
    /// How each batch's records are compressed when sealed.
    compression: Compression,
    /// The records of the batch being compressed (kept: one allocation per publisher).
    scratch: Vec<u8>,
    /// An idempotent producer's id and epoch (InitProducerId): each batch carries them and
    /// its partition's next sequence number, so a broker writes a batch sent again once.
    idempotent: Option<(i64, i16)>,
    /// Idempotent: per partition it filled, the sequence number of its next record.
    sequences: Vec<(i32, i32)>,
}

#[derive(Debug, Clone, Copy)]
struct OpenBatch {
    /// The partition it goes to.
    partition: i32,
    /// Where the request starts (its size field).
    request: usize,
    /// Where the record batch starts (its base offset).
    batch: usize,
    records: i32,
}

impl Producer {
    /// Produces to `partitions` of `topic` with `acks` (0, 1 or -1), each batch compressed
    /// with `compression`.
    pub fn new(topic: &str, acks: i16, partitions: Vec<i32>, compression: Compression) -> Producer {
        assert!(!partitions.is_empty());
        Producer {
            topic: topic.to_string(),
            acks,
            partitions,
            turn: 0,
            correlation: 0,
            open: None,
            compression,
            scratch: Vec::new(),
            idempotent: None,
            sequences: Vec::new(),
        }
    }

    /// Produces idempotently as producer `id` of `epoch` (InitProducerId's answer).
    pub fn make_idempotent(&mut self, id: i64, epoch: i16) {
        self.idempotent = Some((id, epoch));
    }

    /// It produces idempotently.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent.is_some()
    }

    /// Idempotent: per partition it filled, the sequence number of its next record.
    pub fn sequences(&self) -> &[(i32, i32)] {
        &self.sequences
    }

    /// The sequence number of `partition`'s next record.
    fn sequence_of(&mut self, partition: i32) -> &mut i32 {
        let at = match self.sequences.iter().position(|&(p, _)| p == partition) {
            Some(at) => at,
            None => {
                self.sequences.push((partition, 0));
                self.sequences.len() - 1
            }
        };
        &mut self.sequences[at].1
    }

    /// The same producer for other partitions (none: it must be given some before it
    /// produces), its requests counted from 0 again (for another connection).
    pub fn for_partitions(&self, partitions: Vec<i32>) -> Producer {
        Producer {
            partitions,
            turn: 0,
            correlation: 0,
            open: None,
            scratch: Vec::new(),
            sequences: Vec::new(),
            ..self.clone()
        }
    }

    /// The partitions it fills.
    pub fn partitions(&self) -> &[i32] {
        &self.partitions
    }

    /// Fills `partitions` from its next batch on (a partition's leader moved), each
    /// continuing from its sequence number in `sequences` (another producer's, idempotent).
    pub fn set_partitions(&mut self, partitions: Vec<i32>, sequences: &[(i32, i32)]) {
        self.sequences = (sequences.iter().copied())
            .filter(|(p, _)| partitions.contains(p))
            .collect();
        self.partitions = partitions;
    }

    /// Records in the batch being filled.
    pub fn open_records(&self) -> u32 {
        self.open.map_or(0, |b| b.records as u32)
    }

    /// Bytes of the batch being filled, as of `out`.
    pub fn open_bytes(&self, out: &[u8]) -> usize {
        self.open.map_or(0, |b| out.len() - b.batch)
    }

    /// Appends the framing of one record whose value is `size` bytes, opening a request and
    /// its batch first if none is open; the caller appends the value next.
    #[inline]
    pub fn put_record_prefix(&mut self, size: usize, now_ms: i64, out: &mut Vec<u8>) {
        let open = match self.open {
            Some(b) => b,
            None => self.open_batch(now_ms, out),
        };
        // attributes, timestamp delta 0, offset delta, key null (-1), value length, (value),
        // header count 0.
        let delta = i64::from(open.records);
        let length = 1 + 1 + varint_len(delta) + 1 + varint_len(size as i64) + size + 1;
        put_varint(length as i64, out);
        out.extend_from_slice(&[0, 0]);
        put_varint(delta, out);
        put_varint(-1, out);
        put_varint(size as i64, out);
        self.open = Some(OpenBatch {
            records: open.records + 1,
            ..open
        });
    }

    /// Appends what follows a record's value.
    #[inline]
    pub fn put_record_suffix(out: &mut Vec<u8>) {
        out.push(0); // no headers
    }

    fn open_batch(&mut self, now_ms: i64, out: &mut Vec<u8>) -> OpenBatch {
        self.correlation = self.correlation.wrapping_add(1);
        let partition = self.partitions[self.turn % self.partitions.len()];
        self.turn += 1;
        let request = begin(PRODUCE, 7, self.correlation, out);
        put_i16(-1, out); // no transactional id
        put_i16(self.acks, out);
        put_i32(30_000, out); // timeout ms
        put_i32(1, out);
        put_str(&self.topic, out);
        put_i32(1, out);
        put_i32(partition, out);
        put_i32(0, out); // the records' size, once sealed
        let batch = out.len();
        put_i64(0, out); // base offset
        put_i32(0, out); // batch length, once sealed
        put_i32(-1, out); // partition leader epoch
        out.push(2); // magic
        put_i32(0, out); // crc, once sealed
        put_i16(0, out); // attributes: no compression, create time
        put_i32(0, out); // last offset delta, once sealed
        put_i64(now_ms, out); // base timestamp
        put_i64(now_ms, out); // max timestamp
        match self.idempotent {
            Some((id, epoch)) => {
                put_i64(id, out);
                put_i16(epoch, out);
                let base = *self.sequence_of(partition);
                put_i32(base, out);
            }
            None => {
                put_i64(-1, out); // producer id: none (not idempotent)
                put_i16(-1, out);
                put_i32(-1, out); // base sequence
            }
        }
        put_i32(0, out); // records, once sealed
        debug_assert_eq!(out.len() - batch, BATCH_HEADER);
        OpenBatch {
            partition,
            request,
            batch,
            records: 0,
        }
    }

    /// The buffer the open request is in lost its first `n` bytes (written).
    pub fn shift(&mut self, n: usize) {
        if let Some(b) = self.open.as_mut() {
            b.request -= n;
            b.batch -= n;
        }
    }

    /// Closes the open request (its records compressed, its sizes, record count and CRC
    /// written); returns it (none: none was open).
    pub fn seal(&mut self, out: &mut Vec<u8>) -> Option<Sealed> {
        let b = self.open.take()?;
        if self.compression != Compression::None {
            let records = b.batch + BATCH_HEADER;
            self.scratch.clear();
            self.scratch.extend_from_slice(&out[records..]);
            out.truncate(records);
            kafka_codec::compress(self.compression, &self.scratch, out);
            let attributes = self.compression.attribute();
            out[b.batch + 21..b.batch + 23].copy_from_slice(&attributes.to_be_bytes());
        }
        let batch_bytes = out.len() - b.batch;
        out[b.batch - 4..b.batch].copy_from_slice(&(batch_bytes as i32).to_be_bytes());
        out[b.batch + 8..b.batch + 12].copy_from_slice(&((batch_bytes - 12) as i32).to_be_bytes());
        out[b.batch + 23..b.batch + 27].copy_from_slice(&(b.records - 1).to_be_bytes());
        out[b.batch + 57..b.batch + 61].copy_from_slice(&b.records.to_be_bytes());
        // CRC-32C of everything after the CRC field.
        let crc = crc32c::crc32c(&out[b.batch + 21..]);
        out[b.batch + 17..b.batch + 21].copy_from_slice(&crc.to_be_bytes());
        finish(b.request, out);
        if self.idempotent.is_some() {
            // Kafka's sequence numbers wrap to 0 past i32::MAX.
            let next = self.sequence_of(b.partition);
            *next = ((i64::from(*next) + i64::from(b.records)) % (i64::from(i32::MAX) + 1)) as i32;
        }
        Some(Sealed {
            records: b.records as u32,
            partition: b.partition,
            start: b.request,
        })
    }
}

/// A Produce request, sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// Its records.
    pub records: u32,
    /// The partition they go to.
    pub partition: i32,
    /// Where it starts in the buffer it was sealed in (it ends at the buffer's end).
    pub start: usize,
}

/// A partition's refusal of a produced batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Kafka's error code.
    pub code: i16,
    /// In words: the error's name, the topic and partition.
    pub text: String,
}

impl Refusal {
    /// The broker does not lead the partition (any more, or yet): its client asks the
    /// cluster where it is and sends there.
    pub fn leader_moved(&self) -> bool {
        leader_moved(self.code)
    }
}

/// An error code that means the partition's leader is elsewhere now (or being elected):
/// `UNKNOWN_TOPIC_OR_PARTITION`, `LEADER_NOT_AVAILABLE`, `NOT_LEADER_OR_FOLLOWER`,
/// `FENCED_LEADER_EPOCH`, `UNKNOWN_LEADER_EPOCH`.
pub fn leader_moved(code: i16) -> bool {
    matches!(code, 3 | 5 | 6 | 74 | 75)
}

/// The body of a Produce v7 response: its first error, if a partition refused the batch.
pub fn produce_error(body: &[u8]) -> Result<Option<Refusal>, &'static str> {
    let mut r = Reader::new(body);
    for _ in 0..r.len()? {
        let topic = r.str()?;
        for _ in 0..r.len()? {
            let p = r.i32()?;
            let error = r.i16()?;
            r.i64()?;
            r.i64()?;
            r.i64()?;
            // DUPLICATE_SEQUENCE_NUMBER: an idempotent batch sent again was written before.
            if error != 0 && error != 46 {
                return Ok(Some(Refusal {
                    code: error,
                    text: format!(
                        "{} on {} partition {p}",
                        error_name(error),
                        String::from_utf8_lossy(topic)
                    ),
                }));
            }
        }
    }
    Ok(None)
}

// ---- fetching ----

/// One consumer's fetch position: the partitions it reads and the next offset of each.
#[derive(Debug, Clone)]
pub struct Fetcher {
    topic: String,
    /// (partition, next offset), by partition.
    positions: Vec<(i32, i64)>,
    max_bytes: i32,
    correlation: i32,
    /// Partitions the last answer said this broker does not lead (their leader moved), with
    /// the error's name.
    moved: Vec<(i32, String)>,
}

impl Fetcher {
    /// Reads `positions` of `topic`, at most `max_bytes` per fetch.
    pub fn new(topic: &str, positions: Vec<(i32, i64)>, max_bytes: i32) -> Fetcher {
        Fetcher {
            topic: topic.to_string(),
            positions,
            max_bytes,
            correlation: 0,
            moved: Vec::new(),
        }
    }

    /// Partitions the last answer said this broker does not lead, each with the error's name
    /// (the caller follows them, or ends).
    pub fn moved(&self) -> &[(i32, String)] {
        &self.moved
    }

    /// The topic it reads.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partitions it reads and the next offset of each.
    pub fn positions(&self) -> &[(i32, i64)] {
        &self.positions
    }

    /// Appends a Fetch v10 request for everything past the current positions.
    pub fn request(&mut self, out: &mut Vec<u8>) {
        self.correlation = self.correlation.wrapping_add(1);
        let start = begin(FETCH, 10, self.correlation, out);
        put_i32(-1, out); // replica: a consumer
        put_i32(FETCH_MAX_WAIT_MS, out);
        put_i32(1, out); // min bytes: answer at the first record
        put_i32(self.max_bytes, out);
        out.push(0); // read uncommitted
        put_i32(0, out); // no fetch session
        put_i32(-1, out);
        put_i32(1, out);
        put_str(&self.topic, out);
        put_i32(self.positions.len() as i32, out);
        for &(p, offset) in &self.positions {
            put_i32(p, out);
            put_i32(-1, out); // current leader epoch
            put_i64(offset, out);
            put_i64(-1, out); // log start offset
            put_i32(self.max_bytes, out);
        }
        put_i32(0, out); // forgotten topics
        finish(start, out);
    }

    /// Reads a Fetch v10 response body: every record past the positions is handed to
    /// `on_value` (its value), and the positions move past every whole batch. Returns the
    /// records of batches it could not read (compressed, or control batches).
    pub fn on_response(
        &mut self,
        body: &[u8],
        correlation: i32,
        mut on_value: impl FnMut(&[u8]),
    ) -> Result<u64, String> {
        if correlation != self.correlation {
            return Err("an answer to another fetch (correlation ids differ)".into());
        }
        let mut r = Reader::new(body);
        r.i32()?;
        let error = r.i16()?;
        if error != 0 {
            return Err(format!("the broker refused a fetch: {}", error_name(error)));
        }
        r.i32()?;
        let mut unread = 0;
        self.moved.clear();
        for _ in 0..r.len()? {
            r.str()?;
            for _ in 0..r.len()? {
                let p = r.i32()?;
                let error = r.i16()?;
                r.i64()?;
                r.i64()?;
                r.i64()?;
                for _ in 0..r.len()? {
                    r.i64()?;
                    r.i64()?;
                }
                let size = r.i32()?;
                let records = if size > 0 {
                    r.take(size as usize)?
                } else {
                    &[]
                };
                if leader_moved(error) {
                    self.moved.push((p, error_name(error)));
                    continue;
                }
                if error != 0 {
                    return Err(format!(
                        "the broker refused a fetch of {} partition {p}: {}",
                        self.topic,
                        error_name(error)
                    ));
                }
                let Some(position) = self.positions.iter_mut().find(|(q, _)| *q == p) else {
                    return Err(format!(
                        "the broker sent partition {p}, which was not fetched"
                    ));
                };
                unread += read_batches(records, &mut position.1, &mut on_value)?;
            }
        }
        Ok(unread)
    }
}

/// A batch whose offsets no partition can hold.
const OFFSETS_OVERFLOW: &str = "a Kafka record batch whose offsets are negative or past 2^63";

/// Reads the record batches of one partition from `next` on, moving `next` past each whole
/// one (a fetch may end in a partial batch: it comes again whole in the next fetch).
fn read_batches(
    mut records: &[u8],
    next: &mut i64,
    on_value: &mut impl FnMut(&[u8]),
) -> Result<u64, &'static str> {
    let mut unread = 0;
    while records.len() >= 12 {
        let base = i64::from_be_bytes(records[..8].try_into().expect("8"));
        let length = i32::from_be_bytes(records[8..12].try_into().expect("4"));
        if length < (BATCH_HEADER - 12) as i32 {
            return Err("a Kafka record batch shorter than its header");
        }
        let Some(batch) = records.get(..12 + length as usize) else {
            break; // partial
        };
        records = &records[batch.len()..];
        if batch[16] != 2 {
            return Err("a record batch of an old format (magic 0 or 1): msgbench reads format 2, Kafka 0.11 and later");
        }
        let attributes = i16::from_be_bytes([batch[21], batch[22]]);
        let last_delta = i32::from_be_bytes(batch[23..27].try_into().expect("4"));
        let count = i32::from_be_bytes(batch[57..61].try_into().expect("4"));
        // A broker's offsets are untrusted: near 2^63 a sum would wrap (or panic).
        let end = (base.checked_add(i64::from(last_delta)))
            .and_then(|o| o.checked_add(1))
            .filter(|_| base >= 0 && last_delta >= 0)
            .ok_or(OFFSETS_OVERFLOW)?;
        if end <= *next {
            continue;
        }
        let codec = Compression::of_attributes(attributes);
        if attributes & 0x20 != 0 || codec.is_none() {
            // A transaction marker, or a codec Kafka does not define.
            unread += u64::try_from(count).unwrap_or(0);
            *next = end;
            continue;
        }
        let inflated;
        let records = match codec {
            Some(Compression::None) | None => &batch[BATCH_HEADER..],
            Some(codec) => {
                inflated = kafka_codec::decompress(codec, &batch[BATCH_HEADER..])?;
                &inflated[..]
            }
        };
        read_records(records, (base, count), *next, on_value)?;
        *next = end;
    }
    Ok(unread)
}

/// Hands each of the `count` records of a batch at offset `base` (uncompressed) whose offset is
/// `next` or later to `on_value`.
fn read_records(
    records: &[u8],
    (base, count): (i64, i32),
    next: i64,
    on_value: &mut impl FnMut(&[u8]),
) -> Result<(), &'static str> {
    let mut r = Reader::new(records);
    for _ in 0..count.max(0) {
        let len = r.varint()?;
        let record = r.take(usize::try_from(len).map_err(|_| "a negative record length")?)?;
        let mut f = Reader::new(record);
        f.i8()?;
        f.varint()?; // timestamp delta
        let offset = base.checked_add(f.varint()?).ok_or(OFFSETS_OVERFLOW)?;
        let key = f.varint()?;
        if key > 0 {
            f.take(key as usize)?;
        }
        let value = f.varint()?;
        let value = if value > 0 {
            f.take(value as usize)?
        } else {
            &[]
        };
        if offset >= next {
            on_value(value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch response (v10) holding `batch` for partition 0 of `t`.
    fn fetch_response(batch: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        put_i32(0, &mut b);
        put_i16(0, &mut b);
        put_i32(0, &mut b);
        put_i32(1, &mut b);
        put_str("t", &mut b);
        put_i32(1, &mut b);
        put_i32(0, &mut b);
        put_i16(0, &mut b);
        put_i64(10, &mut b);
        put_i64(10, &mut b);
        put_i64(0, &mut b);
        put_i32(-1, &mut b);
        put_i32(batch.len() as i32, &mut b);
        b.extend_from_slice(batch);
        b
    }

    /// The record batch of a sealed produce request (what the broker stores and serves).
    fn produced(values: &[&[u8]]) -> Vec<u8> {
        produced_with(values, Compression::None)
    }

    #[test]
    fn an_idempotent_producer_numbers_each_partitions_records_and_hands_them_on() {
        let mut p = Producer::new("t", -1, vec![0, 1], Compression::None);
        p.make_idempotent(7, 2);
        let mut out = Vec::new();
        // Two batches of 3 records on partition 0, then one of 2 on partition 1, in turn.
        let mut batches = Vec::new();
        for records in [3, 2, 3] {
            let start = out.len();
            for _ in 0..records {
                p.put_record_prefix(4, 1_700_000_000_000, &mut out);
                out.extend_from_slice(b"abcd");
                Producer::put_record_suffix(&mut out);
            }
            let sealed = p.seal(&mut out).unwrap();
            assert_eq!(sealed.start, start);
            batches.push((sealed.partition, out[start..].to_vec()));
        }
        // The record batch starts after the request's header: its size, then the batch's.
        let field = |request: &[u8], at: usize, n: usize| {
            let b = find_batch(request);
            request[b + at..b + at + n].to_vec()
        };
        let sequence = |r: &[u8]| i32::from_be_bytes(field(r, 53, 4).try_into().unwrap());
        assert_eq!(batches[0].0, 0);
        assert_eq!(field(&batches[0].1, 43, 8), 7i64.to_be_bytes());
        assert_eq!(field(&batches[0].1, 51, 2), 2i16.to_be_bytes());
        assert_eq!(sequence(&batches[0].1), 0);
        assert_eq!((batches[1].0, sequence(&batches[1].1)), (1, 0));
        assert_eq!((batches[2].0, sequence(&batches[2].1)), (0, 3));
        // Partition 0 handed to another producer goes on from 6.
        let mut q = p.for_partitions(Vec::new());
        q.set_partitions(vec![0], p.sequences());
        assert_eq!(q.sequences(), &[(0, 6)]);
    }

    /// Where the record batch of one Produce request starts: after its 4-byte records size,
    /// which is followed by the batch's base offset 0.
    fn find_batch(request: &[u8]) -> usize {
        let total = request.len();
        (0..total - 61)
            .find(|&at| {
                let size = i32::from_be_bytes(request[at..at + 4].try_into().unwrap()) as usize;
                size == total - at - 4 && request[at + 4..at + 12] == [0; 8]
            })
            .map(|at| at + 4)
            .expect("a record batch")
    }

    /// [`produced`], its records compressed with `codec`.
    fn produced_with(values: &[&[u8]], codec: Compression) -> Vec<u8> {
        let mut p = Producer::new("t", 1, vec![0], codec);
        let mut out = Vec::new();
        for v in values {
            p.put_record_prefix(v.len(), 1_700_000_000_000, &mut out);
            out.extend_from_slice(v);
            Producer::put_record_suffix(&mut out);
        }
        assert_eq!(
            p.seal(&mut out).map(|s| s.records),
            Some(values.len() as u32)
        );
        let size = i32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(size + 4, out.len());
        // api key, version, correlation id, client id, transactional id, acks, timeout, one
        // topic ("t"), one partition, the records' size.
        let skip = 4 + 2 + 2 + 4 + 2 + CLIENT_ID.len() + 2 + 2 + 4 + 4 + 2 + 1 + 4 + 4 + 4;
        let body = &out;
        body[skip..].to_vec()
    }

    #[test]
    fn a_produced_batch_is_well_formed_and_reads_back() {
        let batch = produced(&[b"hello", b"", &[7u8; 300]]);
        assert_eq!(batch[16], 2);
        let crc = u32::from_be_bytes(batch[17..21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&batch[21..]));
        let length = i32::from_be_bytes(batch[8..12].try_into().unwrap());
        assert_eq!(length as usize, batch.len() - 12);
        let mut f = Fetcher::new("t", vec![(0, 0)], FETCH_MAX_BYTES);
        let mut req = Vec::new();
        f.request(&mut req);
        let mut seen = Vec::new();
        let unread = f
            .on_response(&fetch_response(&batch), 1, |v| seen.push(v.to_vec()))
            .unwrap();
        assert_eq!(unread, 0);
        assert_eq!(seen, [b"hello".to_vec(), vec![], vec![7u8; 300]]);
        assert_eq!(f.positions, [(0, 3)]);
    }

    #[test]
    fn a_compressed_batch_of_each_codec_is_well_formed_and_reads_back() {
        let values: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 200]).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        let plain = produced(&refs);
        for codec in &Compression::ALL[1..] {
            let batch = produced_with(&refs, *codec);
            assert!(batch.len() < plain.len() / 2, "{codec:?}");
            let attributes = i16::from_be_bytes([batch[21], batch[22]]);
            assert_eq!(attributes, codec.attribute());
            let crc = u32::from_be_bytes(batch[17..21].try_into().unwrap());
            assert_eq!(crc, crc32c::crc32c(&batch[21..]), "{codec:?}");
            let length = i32::from_be_bytes(batch[8..12].try_into().unwrap());
            assert_eq!(length as usize, batch.len() - 12);
            let mut f = Fetcher::new("t", vec![(0, 10)], FETCH_MAX_BYTES);
            f.request(&mut Vec::new());
            let mut seen = Vec::new();
            let unread = f
                .on_response(&fetch_response(&batch), 1, |v| seen.push(v.to_vec()))
                .unwrap();
            assert_eq!(unread, 0, "{codec:?}");
            assert_eq!(seen, values[10..], "{codec:?}");
            assert_eq!(f.positions, [(0, 50)]);
        }
    }

    #[test]
    fn a_partial_batch_waits_and_records_before_the_position_are_skipped() {
        let batch = produced(&[b"a", b"b", b"c"]);
        let mut f = Fetcher::new("t", vec![(0, 1)], FETCH_MAX_BYTES);
        f.request(&mut Vec::new());
        let mut seen = Vec::new();
        // Cut short: nothing read, the position stays.
        f.on_response(&fetch_response(&batch[..batch.len() - 1]), 1, |v| {
            seen.push(v.to_vec())
        })
        .unwrap();
        assert!(seen.is_empty());
        assert_eq!(f.positions, [(0, 1)]);
        f.request(&mut Vec::new());
        f.on_response(&fetch_response(&batch), 2, |v| seen.push(v.to_vec()))
            .unwrap();
        assert_eq!(seen, [b"b".to_vec(), b"c".to_vec()]);
        assert!(f.on_response(&fetch_response(&batch), 1, |_| {}).is_err());
    }

    #[test]
    fn offsets_near_two_to_the_63_are_refused_not_wrapped() {
        let mut batch = produced(&[b"a", b"b"]);
        for (base, delta) in [(i64::MAX - 1, 1i32), (i64::MAX, 0), (-5, 1), (0, -3)] {
            batch[..8].copy_from_slice(&base.to_be_bytes());
            batch[23..27].copy_from_slice(&delta.to_be_bytes());
            let mut next = 0;
            let read = read_batches(&batch, &mut next, &mut |_| {});
            assert_eq!(
                read,
                Err(OFFSETS_OVERFLOW),
                "base {base}, last delta {delta}"
            );
            assert_eq!(next, 0);
        }
    }

    #[test]
    fn varints_round_trip_and_bad_frames_are_refused() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i64::from(i32::MAX),
            i64::MIN,
        ] {
            let mut out = Vec::new();
            put_varint(v, &mut out);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(Reader::new(&out).varint().unwrap(), v);
        }
        assert!(frame(b"-ERR unknown command\r\n").is_err());
        assert_eq!(frame(&[0, 0, 0, 8, 0, 0]).unwrap(), None);
        assert!(produce_error(&[0, 0]).is_err());
    }
}
