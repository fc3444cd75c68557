//! The opening of brokers that keep streams, before the run's schedule starts: Redis Streams'
//! consumer groups set at each stream's end, JetStream's streams and durable consumers made
//! through its API, Kafka's consumer groups joined (and left at the end). Blocking I/O, bounded by the opening's timeout, like the rest of the
//! opening in [`super::pubsub`].
use super::pubsub::{broker_error, connect_for_opening, open, OPEN_TIMEOUT};
use crate::error::EngineError;
use crate::net::{jetstream, kafka, kafka_group, nats, redis_streams, resp};
use msgbench_model::pubsub::PubsubConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// Redis Streams: every `(topic, group)` starts at its stream's end (the stream made when
/// missing; a group left by an earlier run moved to the end, so it reads nothing old).
pub fn reset_redis_groups(
    config: &PubsubConfig,
    address: SocketAddr,
    groups: &[(String, String)],
) -> Result<(), EngineError> {
    let fail = |problem: String| broker_error(config, problem);
    let mut stream = connect_for_opening(config, address, 0)?;
    refuse_streams_of_others(config, &mut stream, groups)?;
    let mut out = Vec::new();
    for (topic, group) in groups {
        redis_streams::reset_group(topic, group, &mut out);
    }
    stream
        .write_all(&out)
        .map_err(|e| fail(format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut at = 0;
    for (topic, group) in groups {
        for step in ["create", "move"] {
            let (reply, used) = read_reply(config, &mut stream, &mut input, at)?;
            let text = &input[at..at + used];
            if reply == resp::Reply::Error {
                let error = resp::error_text(text, used);
                if !(step == "create" && error.starts_with(b"BUSYGROUP")) {
                    return Err(fail(format!(
                        "it refused to {step} consumer group {group} of stream {topic}: {}{}",
                        String::from_utf8_lossy(error),
                        if error.starts_with(b"WRONGTYPE") {
                            " (the key exists and is not a stream: use another pubsub.topic_prefix)"
                        } else if error.starts_with(b"ERR unknown command") {
                            " (Redis Streams need Redis 5 or later)"
                        } else {
                            ""
                        }
                    )));
                }
            }
            at += used;
        }
    }
    Ok(())
}

/// Every publish trims its stream to `stream_max_messages`: a stream that exists and is not
/// msgbench's (it has no consumer group, or one msgbench did not make) is refused, not trimmed.
fn refuse_streams_of_others(
    config: &PubsubConfig,
    stream: &mut TcpStream,
    groups: &[(String, String)],
) -> Result<(), EngineError> {
    let mut topics: Vec<&str> = groups.iter().map(|(t, _)| t.as_str()).collect();
    topics.dedup();
    let mut out = Vec::new();
    for t in &topics {
        redis_streams::groups_request(t, &mut out);
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(config, format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut at = 0;
    for t in topics {
        let (reply, used) = read_reply(config, stream, &mut input, at)?;
        let text = &input[at..at + used];
        at += used;
        if reply == resp::Reply::Error {
            // No such key: the run makes the stream. A key of another type is named when its
            // group is made.
            continue;
        }
        let names = redis_streams::group_names(text).map_err(|e| broker_error(config, e))?;
        let others: Vec<&String> = names
            .iter()
            .filter(|n| !n.starts_with("msgbench-"))
            .collect();
        if names.is_empty() || !others.is_empty() {
            return Err(broker_error(
                config,
                format!(
                    "stream {t} exists and is not msgbench's ({}): every publish would trim it to pubsub.stream_max_messages = {}; use another pubsub.topic_prefix",
                    if names.is_empty() {
                        "it has no consumer group".to_string()
                    } else {
                        format!("its consumer groups include {}", others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
                    },
                    config.stream_max_messages
                ),
            ));
        }
    }
    Ok(())
}

/// The next whole RESP reply in `input` from `at`, reading more from `stream` as needed.
fn read_reply(
    config: &PubsubConfig,
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
    at: usize,
) -> Result<(resp::Reply, usize), EngineError> {
    loop {
        match resp::decode(&input[at..]) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => read_more(config, stream, input)?,
            Err(e) => {
                return Err(broker_error(
                    config,
                    format!(
                        "this is not a Redis server ({e}); check pubsub.broker and pubsub.address"
                    ),
                ))
            }
        }
    }
}

/// Reads what the broker sent next into `input`; its silence past the opening's timeout, or
/// its hanging up, is the opening's failure.
fn read_more(
    config: &PubsubConfig,
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) => Err(broker_error(
            config,
            "it closed the connection during the opening".into(),
        )),
        Ok(n) => {
            input.extend_from_slice(&chunk[..n]);
            if input.len() > 1 << 20 {
                return Err(broker_error(
                    config,
                    "it sent over 1 MiB during the opening without one whole answer".into(),
                ));
            }
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(broker_error(
                config,
                format!(
                    "no answer to the opening within {} s; is this a {} server? check pubsub.broker and pubsub.address",
                    OPEN_TIMEOUT.as_secs(),
                    config.broker.name()
                ),
            ))
        }
        Err(e) => Err(broker_error(
            config,
            format!("reading during the opening failed ({e})"),
        )),
    }
}

/// A connection to JetStream's API: requests published with a reply subject under its inbox,
/// answered one at a time.
pub struct JetstreamApi<'a> {
    config: &'a PubsubConfig,
    stream: TcpStream,
    input: Vec<u8>,
    inbox: String,
}

impl<'a> JetstreamApi<'a> {
    /// Opens it: connected, its inbox subscribed.
    pub fn open(
        config: &'a PubsubConfig,
        address: SocketAddr,
        mark: [u8; 4],
    ) -> Result<JetstreamApi<'a>, EngineError> {
        let inbox = format!("{}.api", jetstream::publisher_inbox(mark, 0));
        let (stream, input) = open(config, address, "api", Some((&inbox, None, 1)))?;
        stream
            .set_read_timeout(Some(OPEN_TIMEOUT))
            .map_err(EngineError::Io)?;
        Ok(JetstreamApi {
            config,
            stream,
            input,
            inbox,
        })
    }

    /// Sends one API request and returns its answer's JSON.
    fn request(&mut self, subject: &str, body: &[u8]) -> Result<Vec<u8>, EngineError> {
        let mut out = Vec::new();
        nats::publish(subject, Some(&self.inbox), body, &mut out);
        self.stream.write_all(&out).map_err(|e| {
            broker_error(
                self.config,
                format!("writing to JetStream's API failed ({e})"),
            )
        })?;
        loop {
            match nats::decode(&self.input) {
                Ok(Some((op, used))) => {
                    let answer = match op {
                        nats::ServerOp::Msg {
                            status: Some(s), ..
                        } if s.starts_with(b"503") => Err(broker_error(
                            self.config,
                            "JetStream is not enabled on this server (its API has no responders): start nats-server with -js (and -sd DIR for where it stores)".into(),
                        )),
                        nats::ServerOp::Msg { payload, .. } => Ok(Some(payload.to_vec())),
                        nats::ServerOp::Err(text) => Err(broker_error(
                            self.config,
                            format!("it refused a JetStream request: {}", String::from_utf8_lossy(text)),
                        )),
                        nats::ServerOp::Ping => {
                            let _ = self.stream.write_all(nats::PONG);
                            Ok(None)
                        }
                        _ => Ok(None),
                    };
                    self.input.drain(..used);
                    if let Some(payload) = answer? {
                        return Ok(payload);
                    }
                }
                Ok(None) => read_more(self.config, &mut self.stream, &mut self.input)?,
                Err(e) => {
                    return Err(broker_error(
                        self.config,
                        format!("this is not a nats server ({e})"),
                    ))
                }
            }
        }
    }

    /// `topic`'s stream exists, keeping the run's number of messages: created, or updated
    /// when an earlier run made it with another bound.
    pub fn ensure_stream(&mut self, topic: &str) -> Result<(), EngineError> {
        let max = self.config.stream_max_messages;
        let (subject, body) = jetstream::stream_request(topic, max, false);
        let answer = self.request(&subject, &body)?;
        let error = match jetstream::api_error(&answer) {
            Some(e) if e.code == jetstream::STREAM_NAME_IN_USE => {
                // Another bound: updated only if msgbench made it.
                let info = self.request(&jetstream::stream_info_subject(topic), b"")?;
                if !jetstream::made_by_msgbench(&info) {
                    return Err(broker_error(
                        self.config,
                        format!(
                            "JetStream stream {} (subject {topic}) exists and is not msgbench's: msgbench would change its bound to pubsub.stream_max_messages = {max}; use another pubsub.topic_prefix",
                            jetstream::stream_name(topic)
                        ),
                    ));
                }
                let (subject, body) = jetstream::stream_request(topic, max, true);
                let answer = self.request(&subject, &body)?;
                jetstream::api_error(&answer)
            }
            other => other,
        };
        match error {
            None => Ok(()),
            Some(e) => Err(broker_error(
                self.config,
                format!(
                    "JetStream refused stream {} for subject {topic}: {} (error {}){}",
                    jetstream::stream_name(topic),
                    e.description,
                    e.code,
                    if e.description.contains("overlap") {
                        "; another stream takes these subjects: use another pubsub.topic_prefix"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }

    /// The durable consumer `durable` of `topic`'s stream, from its end, delivering to
    /// `deliver` (in `group`, when shared): an earlier run's of that name deleted first.
    pub fn create_consumer(
        &mut self,
        topic: &str,
        durable: &str,
        deliver: &str,
        group: Option<&str>,
    ) -> Result<(), EngineError> {
        let answer = self.request(&jetstream::delete_consumer_subject(topic, durable), b"")?;
        if let Some(e) = jetstream::api_error(&answer) {
            if e.code != jetstream::CONSUMER_NOT_FOUND {
                return Err(broker_error(
                    self.config,
                    format!("JetStream refused to delete an earlier run's consumer {durable}: {} (error {})", e.description, e.code),
                ));
            }
        }
        let (subject, body) = jetstream::consumer_request(
            topic,
            durable,
            deliver,
            group,
            max_ack_pending(self.config),
        );
        let answer = self.request(&subject, &body)?;
        match jetstream::api_error(&answer) {
            None => Ok(()),
            Some(e) => Err(broker_error(
                self.config,
                format!(
                    "JetStream refused consumer {durable} of stream {}: {} (error {})",
                    jetstream::stream_name(topic),
                    e.description,
                    e.code
                ),
            )),
        }
    }
}

/// Deliveries a JetStream consumer may leave unacknowledged: JetStream's default (1000), so a
/// slow subscription's backlog waits in the stream, where its bound applies, as it does for a
/// consumer made with the defaults; fewer for big messages (at most 32 MiB of them on their
/// way, under NATS's slow-consumer limit of a connection).
pub fn max_ack_pending(config: &PubsubConfig) -> u32 {
    ((32 << 20) / config.message_bytes.max(1)).clamp(1, 1000)
}

/// One consumer of a Kafka consumer group, joined: its connection (to the coordinator, the
/// run's one broker), its membership and the partitions it was given.
pub struct GroupConsumer {
    /// Its connection, opening timeouts set.
    pub stream: TcpStream,
    /// Its membership.
    pub member: kafka_group::Member,
    /// The partitions of the topic it reads.
    pub partitions: Vec<i32>,
}

/// Kafka: `consumers` connections join `group` reading `topic` through the group coordinator,
/// and the leader deals the partitions. Each member goes through the protocol as Kafka's own
/// consumer does — join, sync, heartbeat, and join again whenever the coordinator says the
/// group is rebalancing (a member that joined later, one of an earlier run that had not left)
/// — all of them in one loop over non-blocking connections, since the coordinator answers a
/// join only once every member has joined. The group is ready when every member holds the
/// same generation's assignment and a heartbeat of each was answered after it.
pub fn join_kafka_group(
    config: &PubsubConfig,
    address: SocketAddr,
    topic: &str,
    group: &str,
    consumers: u32,
) -> Result<Vec<GroupConsumer>, EngineError> {
    let fail = |problem: String| broker_error(config, problem);
    let mut joining = Vec::new();
    for _ in 0..consumers {
        let s = connect_for_opening(config, address, config.receive_buffer)?;
        joining.push(Joining::new(s));
    }
    // The coordinator, once its offsets topic is ready (the first group on a new broker).
    let deadline = std::time::Instant::now() + OPEN_TIMEOUT * 3;
    loop {
        let mut out = Vec::new();
        kafka_group::find_coordinator_request(group, 1, &mut out);
        let body = kafka::call(&mut joining[0].stream, &out, 1).map_err(fail)?;
        match kafka_group::find_coordinator_error(&body).map_err(fail)? {
            0 => break,
            code if kafka_group::settling(code) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            code => {
                return Err(fail(format!(
                    "it found no coordinator for consumer group {group}: {}",
                    kafka::error_name(code)
                )))
            }
        }
    }
    for j in &mut joining {
        j.stream.set_nonblocking(true).map_err(EngineError::Io)?;
    }
    // Long enough for a rebalance that waits out an earlier run's members that never left
    // (the rebalance timeout) and the broker's group.initial.rebalance.delay.ms.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(3 * kafka_group::REBALANCE_TIMEOUT_MS as u64);
    let mut assignments: Vec<(String, Vec<i32>)> = Vec::new();
    loop {
        let mut progressed = false;
        for member in &mut joining {
            progressed |= member
                .step(group, topic, &mut assignments, config.partitions)
                .map_err(fail)?;
        }
        let generation = joining[0].member.generation;
        if joining
            .iter()
            .all(|j| j.state == JoinState::Ready && j.member.generation == generation)
        {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(fail(format!(
                "consumer group {group} did not settle within {} s (its members: {})",
                3 * kafka_group::REBALANCE_TIMEOUT_MS / 1000,
                joining
                    .iter()
                    .map(|j| format!("{:?}", j.state))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if !progressed {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    let mut out = Vec::new();
    for j in joining {
        j.stream.set_nonblocking(false).map_err(EngineError::Io)?;
        out.push(GroupConsumer {
            stream: j.stream,
            member: j.member,
            partitions: j.partitions,
        });
    }
    Ok(out)
}

/// Where one member is in the group protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinState {
    /// It must (re)join.
    Join,
    /// Its JoinGroup waits for the answer.
    Joining,
    /// Its SyncGroup waits for the answer.
    Syncing,
    /// It holds an assignment; its heartbeat waits for the answer.
    Beating,
    /// Its heartbeat after the assignment was answered: it is in the group (it beats again
    /// every [`READY_BEAT`] while the others settle, to learn of a rebalance they start).
    Ready,
}

/// How often a member already in the group beats while the others are still joining: a member
/// that joined alone first must learn that the group rebalances for the next one (else the
/// coordinator waits for it, then forms a generation without it).
const READY_BEAT: std::time::Duration = std::time::Duration::from_millis(200);

/// One member on its way into the group.
struct Joining {
    stream: TcpStream,
    input: Vec<u8>,
    state: JoinState,
    member: kafka_group::Member,
    partitions: Vec<i32>,
    /// When it last became Ready.
    ready_at: std::time::Instant,
}

impl Joining {
    fn new(stream: TcpStream) -> Joining {
        Joining {
            stream,
            input: Vec::new(),
            state: JoinState::Join,
            member: kafka_group::Member {
                group: String::new(),
                id: String::new(),
                generation: -1,
            },
            partitions: Vec::new(),
            ready_at: std::time::Instant::now(),
        }
    }

    fn send(&mut self, out: &[u8]) -> Result<(), String> {
        // A few hundred bytes on a fresh connection: the socket takes them whole.
        self.stream
            .write_all(out)
            .map_err(|e| format!("writing a group request failed ({e})"))
    }

    /// The next whole answer, if one came.
    fn answer(&mut self) -> Result<Option<Vec<u8>>, String> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(
                        "it closed a consumer's connection while it joined its group".into(),
                    )
                }
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading failed ({e})")),
            }
        }
        let Some((body, _, used)) = kafka::frame(&self.input)? else {
            return Ok(None);
        };
        let body = body.to_vec();
        self.input.drain(..used);
        Ok(Some(body))
    }

    /// One step of the protocol; true if it moved.
    fn step(
        &mut self,
        group: &str,
        topic: &str,
        assignments: &mut Vec<(String, Vec<i32>)>,
        partitions: u32,
    ) -> Result<bool, String> {
        let mut out = Vec::new();
        match self.state {
            JoinState::Join => {
                kafka_group::join_request(group, &self.member.id, topic, 2, &mut out);
                self.send(&out)?;
                self.state = JoinState::Joining;
                return Ok(true);
            }
            JoinState::Ready if self.ready_at.elapsed() >= READY_BEAT => {
                kafka_group::heartbeat_request(&self.member, &mut out);
                self.send(&out)?;
                self.state = JoinState::Beating;
                return Ok(true);
            }
            JoinState::Ready => return Ok(false),
            _ => {}
        }
        let Some(body) = self.answer()? else {
            return Ok(false);
        };
        match self.state {
            JoinState::Joining => {
                let j = kafka_group::join_response(&body)?;
                match j.error {
                    kafka_group::MEMBER_ID_REQUIRED => {
                        self.member.id = j.member;
                        self.state = JoinState::Join;
                    }
                    0 => {
                        self.member = kafka_group::Member {
                            group: group.to_string(),
                            id: j.member.clone(),
                            generation: j.generation,
                        };
                        // Only the leader's sync carries the assignment; the others send none.
                        if j.member == j.leader {
                            *assignments = kafka_group::assign(&j.members, partitions);
                        }
                        let mine = if j.member == j.leader {
                            &assignments[..]
                        } else {
                            &[]
                        };
                        kafka_group::sync_request(&self.member, topic, mine, 3, &mut out);
                        self.send(&out)?;
                        self.state = JoinState::Syncing;
                    }
                    code if rejoin(code) => self.restart(code),
                    code => {
                        return Err(format!(
                            "it refused a consumer's join of group {group}: {}",
                            kafka::error_name(code)
                        ))
                    }
                }
            }
            JoinState::Syncing => match kafka_group::sync_response(&body, topic)? {
                Ok(mine) => {
                    self.partitions = mine;
                    self.state = JoinState::Beating;
                    kafka_group::heartbeat_request(&self.member, &mut out);
                    self.send(&out)?;
                }
                Err(code) if rejoin(code) => self.restart(code),
                Err(code) => {
                    return Err(format!(
                        "it refused the assignment of group {group}: {}",
                        kafka::error_name(code)
                    ))
                }
            },
            JoinState::Beating => {
                let error = kafka_group::heartbeat_error(&body)?;
                match error {
                    0 => {
                        self.state = JoinState::Ready;
                        self.ready_at = std::time::Instant::now();
                    }
                    code if rejoin(code) => self.restart(code),
                    code => {
                        return Err(format!(
                            "it refused a heartbeat of group {group}: {}",
                            kafka::error_name(code)
                        ))
                    }
                }
            }
            JoinState::Join | JoinState::Ready => {}
        }
        Ok(true)
    }

    /// The group rebalances (or forgot this member): join again, with a new id if it forgot.
    fn restart(&mut self, code: i16) {
        if code == kafka_group::UNKNOWN_MEMBER_ID {
            self.member.id.clear();
        }
        self.state = JoinState::Join;
    }
}

/// A group answer that means "join again" (after a moment, while the coordinator settles).
fn rejoin(code: i16) -> bool {
    if kafka_group::settling(code) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        return true;
    }
    matches!(
        code,
        kafka_group::REBALANCE_IN_PROGRESS
            | kafka_group::ILLEGAL_GENERATION
            | kafka_group::UNKNOWN_MEMBER_ID
    )
}

/// At the end of a run: each consumer's positions committed for its group, and the group
/// left (so the next run's consumers join at once). Best effort, on a connection of its own:
/// what fails is returned, for a note.
pub fn leave_kafka_group(
    config: &PubsubConfig,
    address: SocketAddr,
    topic: &str,
    members: &[(kafka_group::Member, Vec<(i32, i64)>)],
) -> Result<(), String> {
    let Some((first, _)) = members.first() else {
        return Ok(());
    };
    let mut stream = connect_for_opening(config, address, 0).map_err(|e| e.to_string())?;
    for (k, (member, positions)) in members.iter().enumerate() {
        let mut out = Vec::new();
        let correlation = 10 + k as i32;
        kafka_group::commit_request(member, topic, positions, correlation, &mut out);
        let body = kafka::call(&mut stream, &out, correlation)?;
        if let Some(why) = kafka_group::commit_refusal(&body)? {
            return Err(format!(
                "committing group {}'s offsets failed: {why}",
                member.group
            ));
        }
    }
    let mut out = Vec::new();
    let ids: Vec<String> = members.iter().map(|(m, _)| m.id.clone()).collect();
    kafka_group::leave_request(&first.group, &ids, 9, &mut out);
    kafka::call(&mut stream, &out, 9)?;
    Ok(())
}
