//! One consumer connection of a subscription, as a broker's opening hands it to the
//! subscriber threads: its socket, its read buffer, what it owes the broker, and — for a broker
//! whose consumers ask for their messages (Kafka's fetches, Redis Streams' `XREADGROUP`) — how
//! it asks ([`Pull`], implemented in that broker's file).
use super::stream::{BrokerStream, OpeningStream};
use crate::harness::STOP_CHECK_NS;
use msgbench_model::pubsub::PubsubConfig;
use std::io::{self, Write};

/// Bytes a consumer's read buffer holds at least.
const READ_BYTES: usize = 256 * 1024;
/// Bytes read from one consumer before the loop looks at its clock, its other consumers and
/// the end of the run again (a slow subscription may always have more to read).
pub const READ_BUDGET: usize = 1 << 20;
/// Acknowledgement bytes a consumer may owe the broker.
const MAX_UNSENT_ACKS: usize = 1 << 20;

/// How a consumer that asks for its messages asks, and reads the answers.
pub trait Pull: Send {
    /// Handles the whole answers at the start of `input`: each message's payload to
    /// `on_message`, the next request (and acknowledgements) appended to `out`. Returns the
    /// bytes used and the messages that were not records of this run (Kafka's compressed or
    /// control batches); an error says why the consumer cannot go on, and whether the bytes
    /// broke the protocol (else the broker refused).
    fn on_input(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        on_message: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, u64), (String, bool)>;

    /// Itself, for its broker's end of the run (Kafka commits each member's positions).
    fn as_any(&self) -> &dyn std::any::Any;

    /// It can follow what it reads elsewhere (Kafka in a cluster): when its connection ends,
    /// or it has [`Pull::moved`], the subscriber asks it to [`Pull::reopen`] rather than
    /// closing it.
    fn follows(&self) -> bool {
        false
    }

    /// The broker said it no longer leads what this consumer reads: its connection is to be
    /// replaced (no request was sent after that answer).
    fn moved(&self) -> bool {
        false
    }

    /// A new connection, to where what it reads went, its first request appended to `out`
    /// (blocking, bounded, over as soon as `stop` says the run stops); the error says why it
    /// cannot go on, and then it no longer [`Pull::follows`].
    fn reopen(
        &mut self,
        out: &mut Vec<u8>,
        stop: &dyn Fn() -> bool,
    ) -> Result<OpeningStream, String> {
        let _ = (out, stop);
        Err("it cannot follow its partitions".into())
    }
}

/// One consumer connection of a subscription.
pub struct Consumer {
    pub(super) stream: BrokerStream,
    pub(super) input: Vec<u8>,
    pub(super) len: usize,
    pub(super) closed: bool,
    /// The last error the broker sent on it.
    pub(super) last_error: Option<String>,
    /// Acknowledgements (MQTT QoS 1, JetStream, Redis Streams' XACK) and requests (Kafka's
    /// next fetch, Redis Streams' next XREADGROUP) not written yet.
    pub(super) acks: Vec<u8>,
    /// A consumer that asks for its messages (Kafka, Redis Streams): it asks for more after
    /// each answer.
    pub pull: Option<Box<dyn Pull>>,
    /// Its connection is to be replaced ([`Pull::follows`]): not read until it is.
    pub(super) moving: bool,
}

impl Consumer {
    /// A consumer on an opened, subscribed connection (`leftover`: bytes read past the
    /// subscription's confirmation).
    pub fn new(
        stream: OpeningStream,
        leftover: &[u8],
        message_bytes: usize,
    ) -> io::Result<Consumer> {
        let (stream, held) = stream.into_running()?;
        let leftover = [leftover, &held].concat();
        let size = READ_BYTES.max(4 * (message_bytes + 512));
        let mut input = vec![0u8; size.max(leftover.len() * 2)];
        input[..leftover.len()].copy_from_slice(&leftover);
        Ok(Consumer {
            stream,
            len: leftover.len(),
            input,
            closed: false,
            last_error: None,
            acks: Vec::with_capacity(4096),
            pull: None,
            moving: false,
        })
    }

    /// The same, asking for its messages with `pull`.
    pub fn pulling(
        stream: OpeningStream,
        leftover: &[u8],
        message_bytes: usize,
        pull: Box<dyn Pull>,
    ) -> io::Result<Consumer> {
        let mut consumer = Consumer::new(stream, leftover, message_bytes)?;
        consumer.pull = Some(pull);
        Ok(consumer)
    }

    /// Bytes it owes the broker: acknowledgements or requests not written, or records a TLS
    /// session holds.
    pub(super) fn owes(&self) -> bool {
        !self.acks.is_empty() || self.stream.wants_write()
    }

    /// Writes the acknowledgements owed, once per batch read; what the socket does not take
    /// waits for the next batch (bounded: a broker that stops reading them ends the
    /// connection).
    pub(super) fn write_acks(&mut self) -> Result<(), String> {
        let mut written = 0;
        while written < self.acks.len() {
            match self.stream.write(&self.acks[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(broken(&e, "writing")),
            }
        }
        self.acks.drain(..written);
        self.stream
            .write_held()
            .map_err(|e| broken(&e, "writing"))?;
        if self.acks.len() > MAX_UNSENT_ACKS {
            return Err("the broker stopped reading the acknowledgements of its messages".into());
        }
        Ok(())
    }
}

/// Bytes a subscription reads per turn: all there is for a fast one (to [`READ_BUDGET`]); for
/// one that spends `cost_ns` per message, what it handles in about half a stop check.
pub fn turn_bytes(config: &PubsubConfig, cost_ns: u64) -> usize {
    match cost_ns {
        0 => READ_BUDGET,
        cost => {
            let frame = config.message_bytes as usize + 64;
            let messages = (STOP_CHECK_NS / 2 / cost).max(1) as usize;
            (messages * frame).clamp(frame, READ_BUDGET)
        }
    }
}

/// Why a connection's `reading` or `writing` failed with `e`: a reset or a broken pipe is
/// the broker closing it.
pub fn broken(e: &std::io::Error, doing: &str) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => {
            format!("the broker closed the connection ({doing} failed: {e})")
        }
        _ => format!("{doing} failed ({e})"),
    }
}
