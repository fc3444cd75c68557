//! Publishers of the `pubsub` system: one mio loop per publisher thread, each publisher a
//! connection with its own [`Pacer`]. Every message due is encoded straight into the
//! connection's output buffer (broker framing, then the 24-byte [`Header`] and padding), and
//! the buffer is written once per turn: the messages due together leave in one `write`, each
//! with its own intended time.
//!
//! A broker that reads slower than the schedule fills the socket and then the buffer (bounded
//! by `max_unsent_bytes`); a publisher whose buffer is full takes no more slots until it drains
//! (`block`): what is due meanwhile goes late, counted from its intended time, and the lag
//! shows as send lag. Nothing is skipped.
mod follow;

use super::client::{Framing, OpenedPublisher, Reroute};
use super::consumer::broken;
use super::message::{Header, RunMark};
use super::progress::{Progress, PublisherStats};
use super::protocol::{BrokerProtocol, Incoming, PublishFrame};
use super::stream::BrokerStream;
use super::wire::kafka;
use crate::clock::{Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::error::EngineError;
use crate::harness::timer::Timer;
use crate::harness::{worker, RunStop, Timeline, STOP_CHECK_NS};
use crate::pacer::Pacer;
use crate::recorder::Recorder;
use mio::{Events, Interest, Poll, Token};
use msgbench_model::pacing::Pacing;
use msgbench_model::pubsub::PubsubConfig;
use msgbench_model::result::{CpuTimes, Faults, ThreadCpu};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

const TIMER: Token = Token(usize::MAX - 1);
/// Most messages one publisher encodes per turn before the others get theirs (and the socket
/// a write).
const BATCH: usize = 256;
/// Most publishes a publisher leaves unanswered (Redis, MQTT QoS 1) before it waits.
const MAX_UNANSWERED: usize = 1 << 20;
/// Most bytes a publisher holds of what the broker sent that is not one whole answer yet
/// (acknowledgements, pings and errors are a few bytes each).
const READ_BYTES: usize = 1 << 20;

/// One publisher: its schedule, its sequence, and its connections ([`Leg`]) — one, or (Kafka
/// in a cluster) one per broker leading a partition it fills.
pub struct Publisher {
    /// Its run-wide index (carried in every message).
    pub index: u32,
    topic: String,
    pacer: Pacer,
    frame: PublishFrame,
    mark: RunMark,
    /// Acknowledgements expected (MQTT QoS 1): publishes in flight are capped at 65 535, the
    /// packet ids there are.
    acked: bool,
    /// Publish latency: answer − intended publish time, measured messages.
    pub answer_latency: hdrhistogram::Histogram<u64>,
    /// Its connections; message `seq` goes on `legs[seq % legs.len()]`.
    legs: Vec<Leg>,
    /// Wall-clock ms of this turn (Kafka's record timestamps).
    wall_ms: i64,
    /// Kafka: bytes of one record at most (framing and value).
    record_bytes: usize,
    /// Clock ns at which it last had no room: a message due by then waited for the broker
    /// (its socket, its acknowledgements), not for the pacer.
    held_until_ns: u64,
    /// The connections that fill partitions (Kafka: not those whose broker leads none of its
    /// partitions any more), in turn.
    active: Vec<usize>,
    /// Kafka in a cluster: how it follows a partition whose leader moved.
    reroute: Option<Arc<dyn Reroute>>,
    /// A connection lost its leader (or its broker): to follow before the next turn.
    to_follow: bool,
    /// Partitions followed to a new leader, and requests sent again there.
    followed: (u64, u64),
    /// What it measured.
    pub stats: PublisherStats,
}

/// One connection of a publisher: what it has to write, what it read, what it waits for.
struct Leg {
    stream: BrokerStream,
    /// The broker answers every publish (Redis, MQTT QoS 1): the intended times of those not
    /// answered yet, in order (0 for one outside the measured window).
    unanswered: Option<std::collections::VecDeque<u64>>,
    out: Vec<u8>,
    written: usize,
    input: Vec<u8>,
    /// Kafka: its Produce requests (records batched per request, one partition each).
    kafka: Option<kafka::Producer>,
    /// Kafka: the requests not answered yet, in order.
    requests: VecDeque<Request>,
    /// Where `out[0]` is in the connection's byte stream (bytes written before it).
    base: u64,
    /// Kafka in a cluster: its broker's node id, and each request's bytes are kept until
    /// answered (to send again to a partition's new leader).
    node: Option<i32>,
    /// Kafka: requests whose partition's leader moved, with their records' intended times,
    /// to send again where it went.
    refused: Vec<(Request, Vec<u64>)>,
    /// Its broker went away: it is no longer written or read.
    gone: bool,
    /// The broker refused a publish (not because its leader moved) or broke the protocol:
    /// the publisher ends, it does not follow.
    refused_for_good: bool,
    /// An idempotent producer's partition moved: the connection is given up whole.
    leader_lost: bool,
    /// Kafka: the end of the requests sealed (what follows is the open batch, not written).
    sealed: usize,
    /// Where its goodbye is ([`BrokerProtocol::goodbye`]).
    goodbye: Goodbye,
}

/// A Kafka Produce request not answered yet.
struct Request {
    /// Its records.
    records: u32,
    /// Their partition.
    partition: i32,
    /// Its bytes, kept when it may have to be sent again (a cluster, acks 1 or all).
    bytes: Vec<u8>,
    /// Times it was sent again.
    resent: u32,
    /// Where it ends in its connection's byte stream: written whole once the connection
    /// wrote that far.
    end: u64,
}

/// What a publisher counts of its brokers' answers, whichever connection they come on.
struct Answers<'a> {
    stats: &'a mut PublisherStats,
    latency: &'a mut hdrhistogram::Histogram<u64>,
}

/// A publisher's goodbye to its broker, at the end of the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goodbye {
    NotSaid,
    /// Sent, its answer awaited: the publisher still owes.
    Said,
    /// Answered: the broker may close the connection.
    Answered,
}

impl Publisher {
    /// Publisher `index` on `topic`, on its opened connection.
    pub fn new(
        opened: OpenedPublisher,
        index: u32,
        topic: &str,
        config: &PubsubConfig,
        timeline: &Timeline,
        seed: u64,
        mark: RunMark,
    ) -> io::Result<Publisher> {
        let OpenedPublisher {
            stream,
            leftover,
            framing,
        } = opened;
        let size = config.message_bytes as usize;
        let (frame, legs, reroute) = match framing {
            Framing::Each(frame) => (frame, vec![(stream, leftover, None)], None),
            Framing::Batches(b) => {
                let mut legs = vec![(stream, leftover, Some((b.node, b.producer)))];
                let more = b.more.into_iter();
                legs.extend(more.map(|(node, s, p)| (s, Vec::new(), Some((node, p)))));
                (PublishFrame::none(), legs, b.reroute)
            }
        };
        let capacity = config.max_unsent_bytes as usize + frame.prefix.len() + size + 2;
        let legs = legs
            .into_iter()
            .map(|(stream, leftover, kafka)| {
                let (stream, held) = stream.into_running()?;
                let mut leg = Leg::new(stream, [leftover, held].concat(), kafka, config, capacity);
                leg.node = leg.node.filter(|_| reroute.is_some());
                Ok(leg)
            })
            .collect::<io::Result<Vec<Leg>>>()?;
        // Packet ids per publish (MQTT QoS 1): as many in flight as there are ids.
        let acked = frame.id_at.is_some();
        Ok(Publisher {
            index,
            topic: topic.to_string(),
            pacer: Pacer::new(
                config.publisher_pacing,
                timeline.t0_ns,
                seed ^ (u64::from(index) << 32),
            ),
            frame,
            mark,
            acked,
            answer_latency: hdrhistogram::Histogram::new_with_bounds(
                1,
                msgbench_model::histogram::HIGHEST_TRACKABLE_NS,
                3,
            )
            .expect("constant bounds are valid"),
            active: (0..legs.len()).collect(),
            legs,
            reroute,
            to_follow: false,
            followed: (0, 0),
            held_until_ns: 0,
            wall_ms: 0,
            record_bytes: size + 32,
            stats: PublisherStats::default(),
        })
    }

    /// The connection its next message goes on.
    fn next_leg(&self) -> usize {
        match self.active.len() {
            // One connection (every broker but a Kafka cluster's): no division per message.
            1 => self.active[0],
            n => self.active[(self.stats.sent_all % n as u64) as usize],
        }
    }

    /// It still holds bytes to write, or publishes a broker has not answered (or requests to
    /// send again where their partition went).
    fn owes(&self) -> bool {
        self.to_follow || self.legs.iter().any(Leg::owes)
    }

    /// Room for one more message: its next connection's buffer under `bound`, and (MQTT QoS
    /// 1) fewer publishes unacknowledged than there are packet ids.
    fn room(&self, bound: usize) -> bool {
        // None while it has a leader to follow (or no connection left that fills a partition).
        !self.to_follow
            && !self.active.is_empty()
            && self.legs[self.next_leg()].room(bound, self.record_bytes)
            && (!self.acked || self.stats.sent_all - self.stats.acks < 65_535)
    }

    /// Encodes the message of `slot`, counted as sent.
    #[inline]
    fn encode(&mut self, intended_ns: u64, size: usize, timeline: &Timeline) {
        let seq = self.stats.sent_all;
        let leg = self.next_leg();
        let leg = &mut self.legs[leg];
        if let Some(k) = leg.kafka.as_ref() {
            if k.open_bytes(&leg.out) + self.record_bytes > kafka::MAX_BATCH_BYTES {
                leg.seal();
            }
            let k = leg.kafka.as_mut().expect("a Kafka publisher");
            k.put_record_prefix(size, self.wall_ms, &mut leg.out);
        } else {
            self.frame.put_prefix(seq, &mut leg.out);
        }
        Header {
            intended_ns: intended_ns.saturating_sub(timeline.t0_ns),
            seq,
            publisher: self.index,
        }
        .write(size, self.mark, &mut leg.out);
        if leg.kafka.is_some() {
            kafka::Producer::put_record_suffix(&mut leg.out);
        } else {
            leg.out.extend_from_slice(self.frame.suffix);
        }
        self.stats.sent_all += 1;
        let measured = intended_ns >= timeline.measure_start_ns && intended_ns < timeline.end_ns;
        if measured {
            self.stats.count_measured(seq, intended_ns, timeline);
        }
        if let Some(q) = leg.unanswered.as_mut() {
            q.push_back(if measured { intended_ns } else { 0 });
        }
    }

    /// Writes what the sockets take, on every connection.
    fn flush(&mut self) -> Result<(), String> {
        for l in 0..self.legs.len() {
            if !self.legs[l].gone {
                let flushed = self.legs[l].flush();
                self.on_leg(l, flushed)?;
            }
        }
        Ok(())
    }

    /// Reads what connection `leg`'s broker sent.
    fn read(
        &mut self,
        leg: usize,
        protocol: &dyn BrokerProtocol,
        hung_up: bool,
    ) -> Result<(), String> {
        if self.legs[leg].gone {
            return Ok(());
        }
        let mut answers = Answers {
            stats: &mut self.stats,
            latency: &mut self.answer_latency,
        };
        let read = self.legs[leg].read(protocol, hung_up, &mut answers);
        self.on_leg(leg, read)
    }

    /// What connection `l` did: a failure ends the publisher — unless the connection was
    /// lost and the publisher follows its partitions elsewhere (Kafka in a cluster): then the
    /// connection is given up and its requests not answered go where their partitions went.
    fn on_leg(&mut self, l: usize, done: Result<(), String>) -> Result<(), String> {
        let leg = &mut self.legs[l];
        match done {
            Err(why) if leg.node.is_none() || leg.refused_for_good => Err(why),
            Err(_) => {
                leg.give_up();
                self.to_follow = true;
                Ok(())
            }
            Ok(()) => {
                if leg.leader_lost {
                    leg.give_up();
                }
                self.to_follow |= !leg.refused.is_empty();
                Ok(())
            }
        }
    }
}

impl Leg {
    /// A connection on `stream` (`leftover`: bytes read past its opening); Kafka: producing
    /// with `kafka`'s producer to its broker (node id).
    fn new(
        stream: BrokerStream,
        leftover: Vec<u8>,
        kafka: Option<(i32, kafka::Producer)>,
        config: &PubsubConfig,
        capacity: usize,
    ) -> Leg {
        Leg {
            stream,
            unanswered: config
                .answers_publishes()
                .then(|| VecDeque::with_capacity(1024)),
            out: Vec::with_capacity(capacity),
            written: 0,
            input: leftover,
            node: kafka.as_ref().map(|(node, _)| *node),
            kafka: kafka.map(|(_, p)| p),
            requests: VecDeque::new(),
            base: 0,
            refused: Vec::new(),
            gone: false,
            refused_for_good: false,
            leader_lost: false,
            sealed: 0,
            goodbye: Goodbye::NotSaid,
        }
    }

    fn unsent(&self) -> usize {
        self.out.len() - self.written
    }

    /// It still holds bytes to write, or publishes the broker has not answered: closing its
    /// connection now with answers unread would reset it, and a broker may drop what it had
    /// not read yet (Kafka does).
    fn owes(&self) -> bool {
        !self.gone
            && (self.unsent() > 0
                || self.unanswered.as_ref().is_some_and(|q| !q.is_empty())
                || self.stream.wants_write()
                || self.goodbye == Goodbye::Said)
    }

    /// Says `goodbye` once it owes nothing else (a broker that has one to hear).
    fn say_goodbye(&mut self, goodbye: &[u8]) {
        if !goodbye.is_empty() && self.goodbye == Goodbye::NotSaid && !self.owes() {
            self.out.extend_from_slice(goodbye);
            self.goodbye = Goodbye::Said;
        }
    }

    /// Room for one more message of `record_bytes`: its buffer under `bound`.
    fn room(&self, bound: usize, record_bytes: usize) -> bool {
        // A Kafka batch still open is bounded apart (MAX_BATCH_BYTES): the bound is on what
        // waits for the socket.
        self.writable_end() - self.written < bound
            && self.kafka.as_ref().is_none_or(|k| {
                // A full batch that cannot leave yet: what is due waits.
                k.open_bytes(&self.out) + record_bytes <= kafka::MAX_BATCH_BYTES || self.may_seal()
            })
            && self
                .unanswered
                .as_ref()
                .is_none_or(|q| q.len() < MAX_UNANSWERED)
    }

    /// Kafka: the batch being filled may close and leave: fewer requests unanswered than a
    /// Java producer allows (`max.in.flight.requests.per.connection`, 5). Until then, and
    /// while the socket has not taken what was sealed before, messages due join the open
    /// batch: the busier the broker, the bigger the batches (as a Java producer's
    /// accumulator), never a request per message queued behind others.
    ///
    /// At acks 0 nothing is answered: requests count as in flight while the broker's TCP has
    /// not taken their bytes (over [`KAFKA_ACKS0_QUEUE`] of them in this socket's send
    /// queue). Kafka reads one request of a connection at a time, so without this a request
    /// per message would queue by the thousand in the socket buffers, seconds deep, where a
    /// Java producer batches.
    fn may_seal(&self) -> bool {
        if self.unanswered.is_none() {
            let queued = unacknowledged_bytes(self.stream.tcp());
            let open = self.kafka.as_ref().map_or(0, |k| k.open_bytes(&self.out));
            return queued == 0 || (open >= KAFKA_ACKS0_BATCH && queued < KAFKA_ACKS0_QUEUE);
        }
        self.requests.len() < KAFKA_IN_FLIGHT
    }

    /// Kafka: closes the request being filled; its bytes may be written from now on.
    fn seal(&mut self) {
        let sealed = self.kafka.as_mut().and_then(|k| k.seal(&mut self.out));
        if let Some(s) = sealed.filter(|_| self.unanswered.is_some()) {
            // In a cluster its bytes are kept until it is answered: it may have to go to
            // another broker (a copy per request, not per message).
            let keep = self.node.is_some();
            self.requests.push_back(Request {
                records: s.records,
                partition: s.partition,
                bytes: if keep {
                    self.out[s.start..].to_vec()
                } else {
                    Vec::new()
                },
                resent: 0,
                end: self.base + self.out.len() as u64,
            });
        }
        self.sealed = self.out.len();
    }

    /// Bytes that may be written: all but a Kafka batch still open.
    fn writable_end(&self) -> usize {
        if self.kafka.is_some() {
            self.sealed
        } else {
            self.out.len()
        }
    }

    /// Writes what the socket takes; an error ends the publisher. Kafka: once everything
    /// sealed is written, the open batch is sealed and written too when it may leave.
    fn flush(&mut self) -> Result<(), String> {
        loop {
            self.write_out()?;
            let open = self.kafka.as_ref().is_some_and(|k| k.open_records() > 0);
            if !(open && self.written == self.sealed && self.may_seal()) {
                return Ok(());
            }
            self.seal();
        }
    }

    /// Writes what the socket takes of the bytes that may be written.
    fn write_out(&mut self) -> Result<(), String> {
        let end = self.writable_end();
        while self.written < end {
            match self.stream.write(&self.out[self.written..end]) {
                Ok(0) => return Err("the broker stopped reading (write returned 0)".into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(broken(&e, "writing")),
            }
        }
        // TLS: what the session encrypted and the socket did not take goes with writability.
        self.stream
            .write_held()
            .map_err(|e| broken(&e, "writing"))?;
        if self.written == self.out.len() {
            self.base += self.out.len() as u64;
            self.out.clear();
            self.written = 0;
            self.sealed = 0;
        } else if self.written > self.out.capacity() / 2 {
            self.base += self.written as u64;
            self.out.drain(..self.written);
            if let Some(k) = self.kafka.as_mut() {
                k.shift(self.written);
            }
            self.sealed -= self.written.min(self.sealed);
            self.written = 0;
        }
        Ok(())
    }

    /// Reads what the broker sent: acknowledgements are counted, pings answered, an error or
    /// the end of the connection ends the publisher.
    /// Reads to the socket's end when the peer `hung_up` (its FIN may have come with the last
    /// data); else a short read emptied it.
    fn read(
        &mut self,
        protocol: &dyn BrokerProtocol,
        hung_up: bool,
        answers: &mut Answers<'_>,
    ) -> Result<(), String> {
        let mut chunk = [0u8; 4096];
        loop {
            // Read until the socket is empty (edge-triggered: no new event comes for what is
            // left), handling what came as it comes, so the input stays small.
            let closed = match self.stream.read(&mut chunk) {
                Ok(0) => true,
                Ok(n) => {
                    self.input.extend_from_slice(&chunk[..n]);
                    self.handle(protocol, answers)?;
                    if n < chunk.len() && !hung_up && self.stream.short_read_drains() {
                        return Ok(());
                    }
                    false
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(e) => return Err(broken(&e, "reading")),
            };
            if closed {
                // What it said before closing (its error) is the reason.
                self.handle(protocol, answers)?;
                if self.goodbye == Goodbye::Answered {
                    return Ok(());
                }
                return Err("the broker closed the connection".into());
            }
            if self.input.len() > READ_BYTES {
                return Err(format!(
                    "the broker sent over {READ_BYTES} bytes that are not one whole answer"
                ));
            }
        }
    }

    /// The broker answered the oldest publish not answered yet, at `now`. Answers come in
    /// publish order (Redis replies, PUBACKs and PubAcks on one connection).
    fn on_answer(&mut self, now: u64, answers: &mut Answers<'_>) {
        answers.stats.acks += 1;
        let intended = self.unanswered.as_mut().and_then(|q| q.pop_front());
        if let Some(intended) = intended.filter(|&t| t != 0) {
            answers
                .latency
                .saturating_record(now.saturating_sub(intended));
        }
    }

    /// Handles every complete answer in the input: acknowledgements counted, pings answered,
    /// an error ends the publisher.
    fn handle(
        &mut self,
        protocol: &dyn BrokerProtocol,
        answers: &mut Answers<'_>,
    ) -> Result<(), String> {
        if self.kafka.is_some() {
            return self.handle_produced(answers);
        }
        let mut at = 0;
        let now = crate::clock::now_ns();
        while let Some((incoming, used)) = protocol.decode(&self.input[at..])? {
            match incoming {
                Incoming::Ack => self.on_answer(now, answers),
                Incoming::Confirmed(up_to) => {
                    if up_to > answers.stats.sent_all {
                        return Err(format!(
                            "the broker confirmed publish {up_to}, which was not sent"
                        ));
                    }
                    while answers.stats.acks < up_to {
                        self.on_answer(now, answers);
                    }
                }
                // Once its goodbye is said, the connection is closing: nothing more is written.
                Incoming::Ping if self.goodbye != Goodbye::NotSaid => {}
                Incoming::Ping => self.out.extend_from_slice(protocol.pong()),
                Incoming::Error(text) => {
                    return Err(format!(
                        "the broker refused a publish: {}",
                        String::from_utf8_lossy(text)
                    ))
                }
                // An answer that comes as a message (JetStream's PubAck on the inbox).
                Incoming::Message { payload, .. } => {
                    let answer = protocol.publish_answer(payload);
                    if answer.map_err(|why| format!("the broker refused a publish: {why}"))? {
                        self.on_answer(now, answers);
                    }
                }
                Incoming::Reply if self.goodbye == Goodbye::Said => {
                    self.goodbye = Goodbye::Answered;
                }
                Incoming::Reply | Incoming::Other => {}
            }
            at += used;
        }
        self.input.drain(..at);
        Ok(())
    }
}

impl Leg {
    /// Kafka: every whole Produce response in the input — a refusal ends the publisher,
    /// unless its partition's leader moved and the publisher follows it (the request is put
    /// aside, to send where the partition went); else each record of its request is answered.
    fn handle_produced(&mut self, answers: &mut Answers<'_>) -> Result<(), String> {
        let handled = self.answer_produced(answers);
        // Not a lost connection: the broker's own refusal, or bytes that are not Kafka's.
        self.refused_for_good |= handled.is_err();
        handled
    }

    /// [`Leg::handle_produced`]'s work.
    fn answer_produced(&mut self, answers: &mut Answers<'_>) -> Result<(), String> {
        let mut at = 0;
        let now = crate::clock::now_ns();
        while let Some((body, _, used)) = kafka::frame(&self.input[at..])? {
            let refusal = kafka::produce_error(body)?;
            let request = self
                .requests
                .pop_front()
                .ok_or("the broker answered a request that was not sent")?;
            let queue = self.unanswered.as_mut().expect("answers are expected");
            if let Some(refusal) = refusal {
                if !(refusal.leader_moved() && self.node.is_some()) {
                    return Err(format!("the broker refused a publish: {}", refusal.text));
                }
                let n = (request.records as usize).min(queue.len());
                let times = queue.drain(..n).collect();
                self.refused.push((request, times));
                at += used;
                // Idempotent: every request after it goes again too, in order (a partition's
                // sequence numbers must reach the new leader without a gap).
                self.leader_lost |= self.kafka.as_ref().is_some_and(|k| k.is_idempotent());
                continue;
            }
            let records = request.records;
            answers.stats.acks += u64::from(records);
            for _ in 0..records {
                if let Some(intended) = queue.pop_front().filter(|&t| t != 0) {
                    answers
                        .latency
                        .saturating_record(now.saturating_sub(intended));
                }
            }
            at += used;
        }
        self.input.drain(..at);
        Ok(())
    }
}

/// Kafka requests one publisher leaves unanswered at most (the Java producer's default
/// `max.in.flight.requests.per.connection`).
const KAFKA_IN_FLIGHT: usize = 5;

/// Kafka at acks 0: a batch leaves when the broker's TCP took every byte before it, or, once
/// it holds this many bytes, while under [`KAFKA_ACKS0_QUEUE`] bytes wait for the broker.
const KAFKA_ACKS0_BATCH: usize = 64 * 1024;
/// See [`KAFKA_ACKS0_BATCH`].
const KAFKA_ACKS0_QUEUE: u32 = 1 << 20;

/// How often the drain looks at what publishers still hold.
const DRAIN_CHECK_NS: u64 = 1_000_000;

/// One publisher thread.
pub struct PublisherThread<'a> {
    /// Its index (`publisher-0`).
    pub index: usize,
    /// Its publishers.
    pub publishers: Vec<Publisher>,
    /// Its recorder (attempted, sent, send lag).
    pub rec: Recorder,
    /// The run's settings.
    pub config: &'a PubsubConfig,
    /// What the broker's connections speak.
    pub protocol: &'a dyn BrokerProtocol,
    /// The run's timeline.
    pub timeline: Timeline,
    /// Stop flags and the span's end.
    pub stop: &'a RunStop<'a>,
    /// What subscribers learn of the publishers.
    pub progress: &'a Progress,
}

/// What a publisher thread returns.
pub struct PublisherOut {
    /// Its publishers' statistics.
    pub stats: Vec<(u32, PublisherStats)>,
    /// Its CPU over the measured span.
    pub cpu: ThreadCpu,
    /// Its faults.
    pub faults: Faults,
    /// Publish latency of its publishers (answer − intended publish time).
    pub answer_latency: hdrhistogram::Histogram<u64>,
}

impl PublisherThread<'_> {
    /// Publishes on the schedule until its end (or a stop), then writes out what is buffered.
    pub fn run(mut self, done: Sender<()>) -> Result<PublisherOut, EngineError> {
        let mut done = Some(done);
        let result = self.publish(&mut done);
        // The span's end is read once per thread, error or not; subscribers wait for every
        // publisher's final count.
        if let Some(d) = done {
            self.progress.stopped_sending(crate::clock::now_ns());
            let _ = d.send(());
        }
        for p in &self.publishers {
            self.progress.finished(p.index, p.stats.sent_all);
        }
        let cpu = result?;
        self.rec.finish(crate::clock::now_ns());
        let mut faults = Faults::default();
        faults.disconnects += self.publishers.iter().filter(|p| p.stats.broken).count() as u64;
        for p in &self.publishers {
            faults.connections.leaders_followed += p.followed.0;
            faults.connections.produce_resent += p.followed.1;
        }
        let mut answer_latency = self.publishers[0].answer_latency.clone();
        answer_latency.reset();
        for p in &self.publishers {
            answer_latency.add(&p.answer_latency).expect("same bounds");
        }
        Ok(PublisherOut {
            answer_latency,
            stats: self
                .publishers
                .into_iter()
                .map(|p| (p.index, p.stats))
                .collect(),
            cpu: ThreadCpu {
                role: format!("publisher-{}", self.index),
                pinned_cpu: None,
                cpu,
            },
            faults,
        })
    }

    fn publish(&mut self, done: &mut Option<Sender<()>>) -> Result<CpuTimes, EngineError> {
        let exact = !matches!(self.config.publisher_pacing, Pacing::Relative { .. });
        worker::prepare("publisher", None, exact)?;
        let mut poll = Poll::new().map_err(EngineError::Io)?;
        let mut timer = Timer::new(poll.registry(), TIMER).map_err(EngineError::Io)?;
        // Each connection's token is its index in `tokens`: (publisher, connection).
        let mut tokens = Vec::new();
        for (i, p) in self.publishers.iter_mut().enumerate() {
            for (l, leg) in p.legs.iter_mut().enumerate() {
                poll.registry()
                    .register(
                        &mut leg.stream,
                        Token(tokens.len()),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .map_err(EngineError::Io)?;
                tokens.push((i, l));
            }
        }
        let mut events = Events::with_capacity(256);
        let clock = MonotonicClock::new(0);
        clock.sleep_until(self.timeline.t0_ns);
        let mut cpu_before = None;
        let mut ran_its_course = true;
        loop {
            let now = clock.now_ns();
            self.rec.roll_if_due(now);
            if cpu_before.is_none() && now >= self.timeline.measure_start_ns {
                cpu_before = Some(CpuSnapshot::thread());
            }
            if self.stop.stopping() {
                ran_its_course = false;
                break;
            }
            if now >= self.timeline.end_ns {
                break;
            }
            let mut next_due = now + STOP_CHECK_NS;
            let more_now = self.publish_due(&clock, now, &mut next_due);
            let timeout = if more_now {
                Some(Duration::ZERO)
            } else {
                timer.arm_by(next_due, now);
                None
            };
            self.wait(&mut poll, &mut events, &mut timer, (timeout, &mut tokens))?;
        }
        let now = clock.now_ns();
        let send_end_ns = self
            .stop
            .stopped_sending(&self.timeline, now, ran_its_course);
        let cpu = cpu_before
            .map(|b| CpuSnapshot::thread().since(&b))
            .unwrap_or_default();
        self.progress.stopped_sending(send_end_ns);
        if let Some(d) = done.take() {
            let _ = d.send(());
        }
        self.drain(
            &mut poll,
            &mut events,
            &mut timer,
            (send_end_ns, &mut tokens),
        )?;
        Ok(cpu)
    }

    /// Encodes every message due by `now` (up to [`BATCH`] per publisher) and writes what the
    /// sockets take; the next slot due later lowers `next_due`. True when a publisher may
    /// have more due at once (its batch was full, or immediate pacing).
    fn publish_due(&mut self, clock: &MonotonicClock, now: u64, next_due: &mut u64) -> bool {
        let size = self.config.message_bytes as usize;
        let bound = self.config.max_unsent_bytes as usize;
        let immediate = matches!(self.config.publisher_pacing, Pacing::Immediate);
        let mut more_now = false;
        let wall_ms = wall_clock_ms();
        for i in 0..self.publishers.len() {
            let p = &mut self.publishers[i];
            if p.stats.broken {
                continue;
            }
            p.wall_ms = wall_ms;
            let mut n = 0;
            while p.room(bound) && n < BATCH {
                if let Some(t) = p.pacer.upcoming_ns() {
                    if t > now {
                        *next_due = (*next_due).min(t);
                        break;
                    }
                    if t >= self.timeline.end_ns {
                        break;
                    }
                }
                let slot = p.pacer.next(clock);
                self.rec.attempted();
                self.rec.sent(slot.scheduled_ns, slot.actual_ns);
                if slot.scheduled_ns <= p.held_until_ns {
                    self.rec.held_by_window();
                }
                p.encode(slot.intended_ns, size, &self.timeline);
                n += 1;
            }
            more_now |= p.room(bound) && (n == BATCH || immediate);
            if let Err(why) = p.flush() {
                self.fail(i, why);
            }
            // Still no room once the socket took what it would: the broker holds what is due.
            let p = &mut self.publishers[i];
            if !p.room(bound) {
                p.held_until_ns = now;
            }
        }
        more_now
    }

    /// Waits for the timer or a socket; reads and writes what became ready.
    fn wait(
        &mut self,
        poll: &mut Poll,
        events: &mut Events,
        timer: &mut Timer,
        (timeout, tokens): (Option<Duration>, &mut Vec<(usize, usize)>),
    ) -> Result<(), EngineError> {
        match poll.poll(events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(EngineError::Io(e)),
        }
        let protocol = self.protocol;
        for event in events.iter() {
            if event.token() == TIMER {
                timer.fired();
                continue;
            }
            let (i, leg) = tokens[event.token().0];
            if self.publishers[i].stats.broken {
                continue;
            }
            let result = if event.is_readable() || event.is_read_closed() {
                self.publishers[i].read(leg, protocol, event.is_read_closed())
            } else {
                Ok(())
            };
            let result = result.and_then(|()| self.publishers[i].flush());
            if let Err(why) = result {
                self.fail(i, why);
            }
        }
        // Kafka: partitions whose leader moved, followed before the next turn.
        for i in 0..self.publishers.len() {
            let p = &mut self.publishers[i];
            if p.to_follow && !p.stats.broken {
                let stop = self.stop;
                let stopping = || stop.stopping();
                let followed = p.follow(poll.registry(), tokens, (i, self.config), &stopping);
                if let Err(why) = followed.and_then(|()| self.publishers[i].flush()) {
                    self.fail(i, why);
                }
            }
        }
        Ok(())
    }

    /// Writes out what the publishers still hold and reads the answers to it, until the
    /// drain's deadline.
    fn drain(
        &mut self,
        poll: &mut Poll,
        events: &mut Events,
        timer: &mut Timer,
        (send_end_ns, tokens): (u64, &mut Vec<(usize, usize)>),
    ) -> Result<(), EngineError> {
        let deadline = self.stop.drain_deadline(&self.timeline, send_end_ns);
        loop {
            // A Kafka batch waits for the broker's TCP (acks 0), which raises no event here.
            for i in 0..self.publishers.len() {
                if !self.publishers[i].stats.broken {
                    for leg in &mut self.publishers[i].legs {
                        leg.say_goodbye(self.protocol.goodbye());
                    }
                    if let Err(why) = self.publishers[i].flush() {
                        self.fail(i, why);
                    }
                }
            }
            let now = crate::clock::now_ns();
            let pending = self.publishers.iter().any(|p| !p.stats.broken && p.owes());
            if !pending || now >= deadline {
                return Ok(());
            }
            timer.arm_by(deadline.min(now + DRAIN_CHECK_NS), now);
            self.wait(poll, events, timer, (None, tokens))?;
        }
    }

    /// Publisher `i` failed: the run stops (a publisher that cannot publish leaves every
    /// subscription of its topic short), with why.
    fn fail(&mut self, i: usize, why: String) {
        let p = &mut self.publishers[i];
        p.stats.broken = true;
        self.stop
            .stop_because(format!("publisher {} on {}: {why}", p.index, p.topic));
    }
}

/// Milliseconds since the Unix epoch (Kafka's record timestamps).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Bytes written to `stream` that its peer's TCP has not acknowledged yet (`SIOCOUTQ`); 0 when
/// it cannot be told.
fn unacknowledged_bytes(stream: &mio::net::TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer, which outlives the call.
    let r = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if r == 0 {
        n.max(0) as u32
    } else {
        0
    }
}
