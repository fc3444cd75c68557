//! Subscribers of the `pubsub` system: one mio loop per subscriber thread, holding whole
//! subscriptions (all the consumer connections of a shared one, so that its sequence numbers
//! are checked across them). Every message read is decoded in place (its 24-byte header),
//! checked against its publisher's sequence, given the subscription's per-message cost, and its
//! latency from the intended publish time recorded — every message, no sampling.
//!
//! A thread ends when every publisher finished and each of its subscriptions has seen every
//! publisher's last message (or a later one), or at the drain deadline; what never came is
//! then lost (a gap before a message that came) or still in flight.
use super::consumer::{broken, turn_bytes, Consumer};
use super::message::{Header, RunMark};
use super::progress::Progress;
use super::protocol::{BrokerProtocol, Incoming};
use crate::clock::now_ns;
use crate::cpu::CpuSnapshot;
use crate::drivers::cost::Cost;
use crate::drivers::streams::stream_stats::StreamStats;
use crate::error::EngineError;
use crate::harness::timer::Timer;
use crate::harness::{worker, RunStop, Timeline, STOP_CHECK_NS};
use crate::net::tick::Schedule;
use crate::recorder::{Recorder, SequenceChecker};
use mio::{Events, Interest, Poll, Token};
use msgbench_model::pubsub::{PubsubConfig, Subscription};
use msgbench_model::result::{CpuTimes, ThreadCpu};
use std::io::{self, Read};
use std::time::Duration;

const TIMER: Token = Token(usize::MAX - 1);

/// One subscription, as its thread measures it.
pub struct SubscriptionState {
    /// Its topic.
    pub topic: u32,
    /// The first publisher of its topic (run-wide index).
    first_publisher: u32,
    /// Per publisher of its topic: its sequence.
    checkers: Vec<SequenceChecker>,
    /// Per publisher: measured messages delivered (first copies).
    pub delivered: Vec<u64>,
    /// Per publisher: the highest measured sequence number delivered.
    pub highest: Vec<Option<u64>>,
    /// Per publisher: one past the highest sequence number seen (any).
    seen_to: Vec<u64>,
    /// Read by more than one consumer (a shared subscription): each consumer's connection
    /// is in order, but together they are not, so sequences are followed per consumer.
    shared: bool,
    /// Shared: per consumer, per publisher, the highest measured sequence number it got.
    consumer_highest: Vec<Vec<Option<u64>>>,
    /// Shared: per publisher, messages received (first copies).
    seen: Vec<u64>,
    /// Shared: per publisher, which sequence numbers came (a bit each, at most
    /// [`MAX_SEEN_WORDS`] words): a message that comes again is a duplicate, not a delivery.
    seen_bits: Vec<Vec<u64>>,
    /// Shared: messages that came again.
    shared_duplicates: u64,
    /// The broker keeps every message until it is read (Kafka's log): one that has not come
    /// is on its way, never lost.
    retains: bool,
    /// This run's mark: messages without it are not this run's.
    mark: RunMark,
    /// Bytes read per turn: a slow subscription's turn reads only what its cost lets it
    /// handle in about half a stop check, so the loop looks at the clock, the deadline and
    /// the other consumers that often.
    turn_bytes: usize,
    /// Per-second figures and the latency histogram.
    pub stats: StreamStats,
    /// Per-message cost.
    cost: Cost,
    /// Its consumer connections.
    pub consumers: Vec<Consumer>,
    /// Messages on its topic that were not msgbench's (or from no publisher of the topic).
    pub foreign: u64,
}

impl SubscriptionState {
    /// Subscription `sub`, spending `cost_ns` per message, read by `consumers`. Its
    /// publishers' messages come in order to one consumer when the broker keeps them
    /// `ordered` (else it is followed like a shared subscription: counted, not sequenced);
    /// the broker `retains` every message until read (Kafka).
    pub fn new(
        sub: &Subscription,
        config: &PubsubConfig,
        cost_ns: u64,
        consumers: Vec<Consumer>,
        mark: RunMark,
        ordered: bool,
        retains: bool,
    ) -> SubscriptionState {
        let p = config.publishers_per_topic as usize;
        let topic = sub.topic;
        // Shared by its consumers, wherever they are (a shard may hold one of them).
        let shared = config.consumers_per_subscription > 1 || !ordered;
        SubscriptionState {
            topic,
            first_publisher: topic * config.publishers_per_topic,
            checkers: vec![SequenceChecker::default(); p],
            delivered: vec![0; p],
            highest: vec![None; p],
            seen_to: vec![0; p],
            shared,
            consumer_highest: vec![vec![None; p]; consumers.len()],
            seen: vec![0; p],
            seen_bits: vec![Vec::new(); p],
            shared_duplicates: 0,
            retains,
            mark,
            turn_bytes: turn_bytes(config, cost_ns),
            stats: StreamStats::new(sub.name.clone(), usize::from(sub.slow), "native"),
            cost: Cost::new(cost_ns, config.slow_work),
            consumers,
            foreign: 0,
        }
    }

    /// Per publisher of its topic, the sequence errors seen.
    pub fn sequence(&self) -> msgbench_model::result::SequenceErrors {
        let mut total = msgbench_model::result::SequenceErrors::default();
        for c in &self.checkers {
            total += c.errors;
        }
        total.duplicates += self.shared_duplicates;
        total
    }

    /// Per publisher, the sequence number below which a measured message that did not come was
    /// lost: the highest that came (one consumer); for a shared subscription the lowest of its
    /// open consumers' highest (each connection is in order, so below it nothing is still on
    /// its way to any of them), `None` while one of them got none.
    pub fn loss_horizon(&self) -> Vec<Option<u64>> {
        if self.retains {
            return vec![None; self.highest.len()];
        }
        if !self.shared {
            return self.highest.clone();
        }
        let open: Vec<usize> = (0..self.consumers.len())
            .filter(|&c| !self.consumers[c].closed)
            .collect();
        (0..self.highest.len())
            .map(|p| {
                let mut tops = open.iter().map(|&c| self.consumer_highest[c][p]);
                if open.is_empty() {
                    return self.highest[p];
                }
                tops.try_fold(u64::MAX, |low, top| top.map(|t| low.min(t)))
            })
            .collect()
    }

    /// Every publisher's last message (or a later one) was seen; for a shared subscription,
    /// as many messages as each publisher sent.
    fn complete(&self, progress: &Progress) -> bool {
        if self.shared {
            return self.seen.iter().enumerate().all(|(i, &seen)| {
                progress
                    .final_count(self.first_publisher + i as u32)
                    .is_some_and(|sent| seen >= sent)
            });
        }
        self.seen_to.iter().enumerate().all(|(i, &seen)| {
            progress
                .final_count(self.first_publisher + i as u32)
                .is_some_and(|sent| seen >= sent)
        })
    }

    /// One message read by consumer `consumer`.
    #[inline]
    fn on_message(
        &mut self,
        consumer: usize,
        payload: &[u8],
        window: &Schedule,
        rec: &mut Recorder,
    ) {
        let Some(mut h) = Header::read(payload, self.mark) else {
            self.foreign += 1;
            return;
        };
        h.intended_ns = h.intended_ns.saturating_add(window.t0_ns);
        let local = h.publisher.wrapping_sub(self.first_publisher) as usize;
        if local >= self.checkers.len() {
            self.foreign += 1;
            return;
        }
        let completed = self.cost.spend();
        if self.shared {
            if !first_copy(&mut self.seen_bits[local], h.seq) {
                self.shared_duplicates += 1;
                return;
            }
            self.seen[local] += 1;
            if window.measures(h.intended_ns) {
                self.delivered[local] += 1;
                let top = &mut self.consumer_highest[consumer][local];
                *top = Some(top.map_or(h.seq, |m| m.max(h.seq)));
                self.highest[local] = Some(self.highest[local].map_or(h.seq, |m| m.max(h.seq)));
            }
            self.stats
                .on_checked(h.intended_ns, completed, 0, window, rec);
            return;
        }
        let checker = &mut self.checkers[local];
        let before = checker.errors;
        checker.check(h.seq);
        if checker.errors.duplicates > before.duplicates {
            return;
        }
        let gaps_added = checker.errors.gaps.saturating_sub(before.gaps);
        self.seen_to[local] = self.seen_to[local].max(h.seq.saturating_add(1));
        if window.measures(h.intended_ns) {
            self.delivered[local] += 1;
            self.highest[local] = Some(self.highest[local].map_or(h.seq, |m| m.max(h.seq)));
        }
        self.stats
            .on_checked(h.intended_ns, completed, gaps_added, window, rec);
    }
}

/// Words of a shared subscription's record of the sequence numbers that came, per publisher:
/// 32 MiB, 268 million messages (past them a message is counted, not checked for a copy).
const MAX_SEEN_WORDS: usize = 1 << 22;

/// Marks sequence number `seq` as come in `bits`: false if it had come before.
#[inline]
fn first_copy(bits: &mut Vec<u64>, seq: u64) -> bool {
    let word = (seq / 64) as usize;
    if word >= MAX_SEEN_WORDS {
        return true;
    }
    if word >= bits.len() {
        // Grown by doubling: a publisher's sequence numbers come roughly in order.
        bits.resize((word + 1).max(bits.len() * 2).min(MAX_SEEN_WORDS), 0);
    }
    let bit = 1u64 << (seq % 64);
    let first = bits[word] & bit == 0;
    bits[word] |= bit;
    first
}

/// One subscriber thread.
pub struct SubscriberThread<'a> {
    /// Its role in the CPU table (`subscriber-0`, `slow-subscriber-0`).
    pub role: String,
    /// Its subscriptions.
    pub subscriptions: Vec<SubscriptionState>,
    /// Its recorder.
    pub rec: Recorder,
    /// What the broker's connections speak.
    pub protocol: &'a dyn BrokerProtocol,
    /// The run's timeline.
    pub timeline: Timeline,
    /// Stop flags.
    pub stop: &'a RunStop<'a>,
    /// What the publishers sent.
    pub progress: &'a Progress,
}

/// What a subscriber thread returns.
pub struct SubscriberOut {
    /// Its subscriptions.
    pub subscriptions: Vec<SubscriptionState>,
    /// Its CPU over the measured span (to the end of publishing).
    pub cpu: ThreadCpu,
}

impl SubscriberThread<'_> {
    /// Reads until every message is accounted for or the drain ends.
    pub fn run(mut self) -> Result<SubscriberOut, EngineError> {
        worker::prepare("subscriber", None, true)?;
        let mut poll = Poll::new().map_err(EngineError::Io)?;
        let mut timer = Timer::new(poll.registry(), TIMER).map_err(EngineError::Io)?;
        let tokens = self.register(&poll)?;
        let window = Schedule {
            t0_ns: self.timeline.t0_ns,
            measure_start_ns: self.timeline.measure_start_ns,
            end_ns: self.timeline.end_ns,
        };
        // Bytes left over from the opening handshakes.
        for &(s, c) in &tokens {
            self.parse(s, c, &window);
        }
        let mut events = Events::with_capacity(1024);
        // Consumers whose socket may hold more than the last turn read (edge-triggered: no
        // new event comes for them until they are read dry).
        let mut unread: Vec<usize> = Vec::with_capacity(tokens.len());
        let mut again: Vec<usize> = Vec::with_capacity(tokens.len());
        // Consumers whose peer closed its side: read to the end, not to the first short read.
        let mut hung_up = vec![false; tokens.len()];
        let mut cpu_before: Option<CpuSnapshot> = None;
        let mut cpu = CpuTimes::default();
        loop {
            let now = now_ns();
            self.rec.roll_if_due(now);
            if cpu_before.is_none() && now >= self.timeline.measure_start_ns {
                cpu_before = Some(CpuSnapshot::thread());
            }
            if let Some(send_end) = self.progress.all_finished() {
                if cpu_before.is_some() && cpu == CpuTimes::default() {
                    cpu = cpu_before
                        .map(|b| CpuSnapshot::thread().since(&b))
                        .unwrap_or_default();
                }
                if self.all_in() || now >= self.stop.drain_deadline(&self.timeline, send_end) {
                    break;
                }
            }
            let timeout = if unread.is_empty() {
                timer.arm_by(now + STOP_CHECK_NS / 2, now);
                None
            } else {
                Some(Duration::ZERO)
            };
            match poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(EngineError::Io(e)),
            }
            std::mem::swap(&mut unread, &mut again);
            unread.clear();
            for event in events.iter() {
                if event.token() == TIMER {
                    timer.fired();
                    continue;
                }
                let t = event.token().0;
                hung_up[t] |= event.is_read_closed();
                if !again.contains(&t) {
                    again.push(t);
                }
            }
            for &t in &again {
                let (s, c) = tokens[t];
                if self.read(s, c, &window, hung_up[t]) {
                    unread.push(t);
                }
                if self.subscriptions[s].consumers[c].moving {
                    hung_up[t] = false;
                    self.follow(s, c, poll.registry(), Token(t));
                }
            }
        }
        Ok(self.finish(cpu))
    }

    /// Every consumer registered with `poll`, its token its index in the list returned
    /// (subscription, consumer).
    fn register(&mut self, poll: &Poll) -> Result<Vec<(usize, usize)>, EngineError> {
        let mut tokens = Vec::new();
        for (s, sub) in self.subscriptions.iter_mut().enumerate() {
            for (c, consumer) in sub.consumers.iter_mut().enumerate() {
                let token = Token(tokens.len());
                poll.registry()
                    // Writable too: acknowledgements, a pulling consumer's next request and
                    // what a TLS session holds wait for it when the socket was full.
                    .register(
                        &mut consumer.stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .map_err(EngineError::Io)?;
                tokens.push((s, c));
            }
        }
        Ok(tokens)
    }

    /// Every subscription has all its publishers sent, or no consumer left.
    fn all_in(&self) -> bool {
        self.subscriptions
            .iter()
            .all(|s| s.complete(self.progress) || s.consumers.iter().all(|c| c.closed))
    }

    /// The thread's end: its subscriptions' figures closed, its recorder's last second.
    fn finish(mut self, cpu: CpuTimes) -> SubscriberOut {
        let end = now_ns();
        for sub in &mut self.subscriptions {
            sub.stats.finish();
        }
        self.rec.finish(end);
        SubscriberOut {
            subscriptions: self.subscriptions,
            cpu: ThreadCpu {
                role: self.role,
                pinned_cpu: None,
                cpu,
            },
        }
    }

    /// Reads consumer `c` of subscription `s` until its socket is empty (false) or its turn's
    /// budget is spent (true: read it again). A read that fills less than the buffer emptied
    /// the socket (epoll raises a new edge for later data), unless the peer `hung_up`: its FIN
    /// may have come with the last data, and only one more read sees it; or unless it is TLS,
    /// whose session may hold records it read past the plaintext it gave.
    fn read(&mut self, s: usize, c: usize, window: &Schedule, hung_up: bool) -> bool {
        let mut budget = self.subscriptions[s].turn_bytes;
        let owed = &mut self.subscriptions[s].consumers[c];
        if !owed.closed && owed.owes() {
            if let Err(why) = owed.write_acks() {
                self.lose(s, c, why);
                return false;
            }
        }
        loop {
            let consumer = &mut self.subscriptions[s].consumers[c];
            if consumer.closed || consumer.moving {
                return false;
            }
            if budget == 0 {
                return true;
            }
            if consumer.len == consumer.input.len() {
                // A message larger than the buffer (validation bounds the size; a foreign one
                // may not be): grow to hold it.
                let grown = consumer.input.len() * 2;
                if grown > 2 * wire_limit() {
                    self.close(s, c, "a message larger than any the run publishes".into());
                    return false;
                }
                consumer.input.resize(grown, 0);
            }
            // At most the turn's budget: a slow subscription must not take more than it can
            // handle before the loop looks at the clock and the drain deadline again.
            let room = (consumer.input.len() - consumer.len).min(budget);
            let end = consumer.len + room;
            match consumer.stream.read(&mut consumer.input[consumer.len..end]) {
                Ok(0) => {
                    self.lose(s, c, "the broker closed the connection".into());
                    return false;
                }
                Ok(n) => {
                    consumer.len += n;
                    budget = budget.saturating_sub(n);
                    self.parse(s, c, window);
                    let drained = self.subscriptions[s].consumers[c]
                        .stream
                        .short_read_drains();
                    if n < room && !hung_up && drained {
                        return false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.lose(s, c, broken(&e, "reading"));
                    return false;
                }
            }
        }
    }

    /// Handles every complete message in consumer `c`'s buffer.
    fn parse(&mut self, s: usize, c: usize, window: &Schedule) {
        if self.subscriptions[s].consumers[c].pull.is_some() {
            return self.parse_pulled(s, c, window);
        }
        let protocol = self.protocol;
        let sub = &mut self.subscriptions[s];
        let mut consumer = std::mem::take(&mut sub.consumers[c].input);
        let len = sub.consumers[c].len;
        let mut at = 0;
        let mut failure = None;
        loop {
            match protocol.decode(&consumer[at..len]) {
                Ok(Some((incoming, used))) => {
                    match incoming {
                        Incoming::Message { payload, ack } => {
                            sub.on_message(c, payload, window, &mut self.rec);
                            if let Some(id) = ack {
                                protocol.ack(id, &mut sub.consumers[c].acks);
                            }
                        }
                        Incoming::Ping => {
                            // Sent with the acknowledgements (whole, bounded).
                            sub.consumers[c].acks.extend_from_slice(protocol.pong());
                        }
                        Incoming::Error(text) => {
                            let text = String::from_utf8_lossy(text).into_owned();
                            sub.stats.faults.server_errors += 1;
                            sub.consumers[c].last_error = Some(text);
                        }
                        Incoming::Ack
                        | Incoming::Confirmed(_)
                        | Incoming::Reply
                        | Incoming::Other => {}
                    }
                    at += used;
                }
                Ok(None) => break,
                Err(e) => {
                    failure = Some(format!(
                        "the broker sent what its protocol does not allow: {e}"
                    ));
                    break;
                }
            }
        }
        consumer.copy_within(at..len, 0);
        let sub = &mut self.subscriptions[s];
        sub.consumers[c].input = consumer;
        sub.consumers[c].len = len - at;
        let failure = failure.or_else(|| sub.consumers[c].write_acks().err());
        if let Some(why) = failure {
            sub.stats.faults.protocol_errors += 1;
            self.close(s, c, why);
        }
    }

    /// Handles every complete answer in the buffer of consumer `c` (one that asks for its
    /// messages), asking for more after each.
    fn parse_pulled(&mut self, s: usize, c: usize, window: &Schedule) {
        let sub = &mut self.subscriptions[s];
        let mut input = std::mem::take(&mut sub.consumers[c].input);
        let mut pull = sub.consumers[c].pull.take().expect("a consumer that asks");
        let mut requests = std::mem::take(&mut sub.consumers[c].acks);
        let len = sub.consumers[c].len;
        let rec = &mut self.rec;
        let answered = pull.on_input(&input[..len], &mut requests, &mut |v| {
            sub.on_message(c, v, window, rec)
        });
        let (used, failure) = match answered {
            Ok((used, foreign)) => {
                sub.foreign += foreign;
                (used, None)
            }
            Err((why, protocol)) => {
                if protocol {
                    sub.stats.faults.protocol_errors += 1;
                } else {
                    sub.stats.faults.server_errors += 1;
                }
                (0, Some(why))
            }
        };
        input.copy_within(used..len, 0);
        let consumer = &mut sub.consumers[c];
        consumer.input = input;
        consumer.len = len - used;
        consumer.moving = pull.moved();
        consumer.pull = Some(pull);
        consumer.acks = requests;
        if let Some(why) = failure {
            return self.close(s, c, why);
        }
        if let Err(why) = consumer.write_acks() {
            self.lose(s, c, why);
        }
    }

    /// Consumer `c` of subscription `s` lost its connection (`why`): one that follows what it
    /// reads elsewhere is given a new connection (the reason kept, should that fail too);
    /// another is closed.
    fn lose(&mut self, s: usize, c: usize, why: String) {
        let consumer = &mut self.subscriptions[s].consumers[c];
        if !consumer.closed && consumer.pull.as_ref().is_some_and(|p| p.follows()) {
            consumer.moving = true;
            consumer.last_error.get_or_insert(why);
            return;
        }
        self.close(s, c, why);
    }

    /// Consumer `c` of subscription `s` follows what it reads to another broker: a new
    /// connection in place of the old (same token); if it cannot, it is closed.
    fn follow(&mut self, s: usize, c: usize, registry: &mio::Registry, token: Token) {
        let consumer = &mut self.subscriptions[s].consumers[c];
        consumer.moving = false;
        let mut out = Vec::new();
        let pull = consumer
            .pull
            .as_mut()
            .expect("a consumer that follows asks");
        let stop = self.stop;
        let opened = pull
            .reopen(&mut out, &|| stop.stopping())
            .and_then(|stream| {
                let (mut stream, held) = stream.into_running().map_err(|e| e.to_string())?;
                registry
                    .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                    .map_err(|e| e.to_string())?;
                Ok((stream, held))
            });
        let (stream, held) = match opened {
            Ok(opened) => opened,
            Err(why) => return self.close(s, c, why),
        };
        let _ = registry.deregister(&mut consumer.stream);
        let _ = consumer.stream.tcp().shutdown(std::net::Shutdown::Both);
        consumer.stream = stream;
        if consumer.input.len() < held.len() {
            consumer.input.resize(held.len(), 0);
        }
        consumer.input[..held.len()].copy_from_slice(&held);
        consumer.len = held.len();
        consumer.acks = out;
        consumer.last_error = None;
        let sub = &mut self.subscriptions[s];
        sub.stats.faults.connections.leaders_followed += 1;
        if let Err(why) = sub.consumers[c].write_acks() {
            self.close(s, c, why);
        }
    }

    /// Consumer `c` of subscription `s` ended: the subscription goes on with its other
    /// consumers (if any); what its topic still publishes for it is counted as failed.
    fn close(&mut self, s: usize, c: usize, why: String) {
        let sub = &mut self.subscriptions[s];
        let consumer = &mut sub.consumers[c];
        if consumer.closed {
            return;
        }
        consumer.closed = true;
        // Closed for real, so the broker stops sending to it (and, for a shared
        // subscription, routes to the others) rather than holding its messages.
        let _ = consumer.stream.tcp().shutdown(std::net::Shutdown::Both);
        let why = match consumer.last_error.take() {
            Some(error) => format!("{why} after the error \"{error}\""),
            None => why,
        };
        sub.stats.faults.disconnects += 1;
        // A shared subscription goes on while one of its consumers does.
        if sub.stats.closed.is_none() && sub.consumers.iter().all(|c| c.closed) {
            sub.stats.closed = Some((why, now_ns()));
        }
    }
}

/// The largest message a consumer accepts: the largest a run publishes, with framing.
fn wire_limit() -> usize {
    msgbench_model::pubsub::MAX_MESSAGE_BYTES as usize + 64 * 1024
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sequence_number_that_comes_again_is_not_a_first_copy() {
        let mut bits = Vec::new();
        assert!(super::first_copy(&mut bits, 5));
        assert!(super::first_copy(&mut bits, 700));
        assert!(!super::first_copy(&mut bits, 5));
        assert!(!super::first_copy(&mut bits, 700));
        assert!(super::first_copy(&mut bits, 6));
        // Past the bound: counted, never remembered.
        let far = (super::MAX_SEEN_WORDS as u64) * 64;
        assert!(super::first_copy(&mut bits, far));
        assert!(super::first_copy(&mut bits, far));
        assert!(bits.len() <= super::MAX_SEEN_WORDS);
    }
}
