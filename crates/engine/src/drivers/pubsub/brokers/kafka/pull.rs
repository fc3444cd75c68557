//! A Kafka consumer as the subscriber threads run it ([`Pull`]): it fetches its partitions
//! from one broker, asks again after each answer, and beats for its group member. In a
//! cluster it follows: when the broker says it no longer leads the partition
//! (`NOT_LEADER_OR_FOLLOWER`, a fenced epoch) or its connection ends, it asks the cluster
//! where the partition is led now and fetches from there, from the same position — nothing
//! is read twice or skipped. Its member's heartbeats, on a connection of their own, follow the
//! group's coordinator the same way.
use super::cluster::{Follow, LEADERLESS_FOR};
use crate::clock::now_ns;
use crate::drivers::pubsub::client::Patience;
use crate::drivers::pubsub::consumer::Pull;
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::{kafka, kafka_group};
use crate::error::EngineError;
use std::io::{Read, Write};
use std::sync::Arc;

/// Times a consumer follows its partition without one fetch answered in between before it
/// gives up (a cluster whose metadata keeps naming a broker that refuses it).
const MAX_REOPENS: u32 = 10;

/// A Kafka consumer: what it fetches (from one broker), and its group membership.
pub struct KafkaPull {
    /// Its fetch positions.
    pub(super) fetcher: kafka::Fetcher,
    /// Its membership of the subscription's consumer group.
    pub(super) member: kafka_group::Member,
    /// The node id of its group's coordinator when it joined.
    pub(super) coordinator: i32,
    /// Where its member's heartbeats go.
    pub(super) beats: Beats,
    /// When its next heartbeat is due (clock ns).
    pub(super) next_heartbeat_ns: u64,
    /// How it follows its partition (a cluster).
    pub(super) follow: Option<Arc<Follow>>,
    /// The broker said it leads its partition no more: the subscriber reopens it.
    moved: bool,
    /// Reopenings since its last fetch answered; past [`MAX_REOPENS`] it gives up.
    reopens: u32,
}

impl KafkaPull {
    /// A consumer of `fetcher`'s partitions for `member` (its coordinator `coordinator`),
    /// beating as `beats` says, following its partitions with `follow` (a cluster).
    pub fn new(
        fetcher: kafka::Fetcher,
        (member, coordinator): (kafka_group::Member, i32),
        beats: Beats,
        follow: Option<Arc<Follow>>,
    ) -> KafkaPull {
        KafkaPull {
            fetcher,
            member,
            coordinator,
            beats,
            next_heartbeat_ns: now_ns() + kafka_group::HEARTBEAT_EVERY_NS,
            follow,
            moved: false,
            reopens: 0,
        }
    }

    /// Its member's heartbeat, when due, and the coordinator's answers.
    fn beat(&mut self) -> Result<(), (String, bool)> {
        // Between two fetches: a fetch waits at most 500 ms for records, so heartbeats keep
        // well inside the session (30 s).
        let now = now_ns();
        if now >= self.next_heartbeat_ns {
            if let Beats::Aside(aside) = &mut self.beats {
                aside.beat(self.follow.as_deref());
            }
            self.next_heartbeat_ns = now + kafka_group::HEARTBEAT_EVERY_NS;
        }
        if let Beats::Aside(aside) = &mut self.beats {
            aside.answers(self.follow.is_some())?;
        }
        Ok(())
    }

    /// [`Pull::reopen`]'s work.
    fn open_where_led(
        &mut self,
        out: &mut Vec<u8>,
        stop: &dyn Fn() -> bool,
    ) -> Result<OpeningStream, String> {
        let follow = self.follow.clone().ok_or("it does not follow")?;
        self.reopens += 1;
        if self.reopens > MAX_REOPENS {
            return Err(format!(
                "its partition's leader moved {MAX_REOPENS} times without one fetch answered"
            ));
        }
        let topic = self.fetcher.topic().to_string();
        // In a cluster a consumer reads one partition (KafkaPull's maker sees to it).
        let &(partition, _) = (self.fetcher.positions().first()).ok_or("it reads no partition")?;
        let patience = Patience {
            deadline: std::time::Instant::now() + LEADERLESS_FOR,
            stop,
        };
        let mut stream = follow.reach(&topic, partition, &patience)?;
        stream
            .set_read_timeout(None)
            .map_err(|e| format!("{topic} partition {partition}'s leader: {e}"))?;
        self.fetcher.request(out);
        let _ = stream.flush();
        Ok(stream)
    }
}

/// Where a group member's heartbeats go: to its coordinator, every
/// [`kafka_group::HEARTBEAT_EVERY_NS`], on a connection of their own (the one the member
/// joined on), written and read without blocking between two fetches of one of the member's
/// consumers. Its other consumers beat `Elsewhere`.
pub enum Beats {
    /// This consumer carries its member's group protocol.
    Aside(Box<Aside>),
    /// Another consumer of the member beats.
    Elsewhere,
}

/// A member's connection to its coordinator: heartbeats, and the group protocol again when
/// the group rebalances during the run.
pub struct Aside {
    /// None: lost, opened again to the group's coordinator at the next beat (in a cluster).
    stream: Option<OpeningStream>,
    input: Vec<u8>,
    /// The member as the coordinator knows it now (a rebalance gives it a new generation).
    pub(super) member: kafka_group::Member,
    /// The topic and its partitions (the leader of a new generation deals them).
    topic: (String, u32),
    /// Where it is in joining again: not, its JoinGroup sent, its SyncGroup sent.
    rejoin: Rejoin,
    /// Rebalances it went through during the run.
    pub(super) rebalances: u32,
    /// The partitions the group assigned it last.
    pub(super) assigned: Vec<i32>,
}

/// Where a member is in joining its group again during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejoin {
    No,
    Joining,
    Syncing,
}

/// Correlation ids of a member's JoinGroup and SyncGroup during the run.
const JOIN: i32 = 2;
const SYNC: i32 = 3;

impl Beats {
    /// Heartbeats of `member` (assigned `assigned` of `topic`'s `partitions`) on `stream`,
    /// the connection it joined on.
    pub fn aside(
        stream: OpeningStream,
        member: kafka_group::Member,
        (topic, partitions, assigned): (&str, u32, Vec<i32>),
    ) -> Result<Beats, EngineError> {
        stream.set_nonblocking(true).map_err(EngineError::Io)?;
        Ok(Beats::Aside(Box::new(Aside {
            stream: Some(stream),
            input: Vec::new(),
            member,
            topic: (topic.to_string(), partitions),
            rejoin: Rejoin::No,
            rebalances: 0,
            assigned,
        })))
    }
}

impl Aside {
    /// Sends the member's heartbeat (a hundred bytes to an idle socket: taken whole, or the
    /// next one goes in its place) — not while it joins again; a connection lost is opened
    /// again to the group's coordinator now, when it can `follow`.
    fn beat(&mut self, follow: Option<&Follow>) {
        if self.stream.is_none() {
            let Some(follow) = follow else { return };
            // A second at most: the subscriber's other consumers wait meanwhile.
            let patience = Patience {
                deadline: std::time::Instant::now() + std::time::Duration::from_secs(1),
                stop: &|| false,
            };
            let opened = (follow.coordinator(&self.member.group, &patience))
                .and_then(|node| follow.open_node(node))
                .and_then(|s| {
                    s.set_nonblocking(true)
                        .map(|()| s)
                        .map_err(|e| e.to_string())
                });
            // Not yet: the next beat tries again (the session lasts 30 s).
            let Ok(stream) = opened else { return };
            self.stream = Some(stream);
            self.input.clear();
            self.rejoin = Rejoin::No;
        }
        if self.rejoin == Rejoin::No {
            let mut out = Vec::new();
            kafka_group::heartbeat_request(&self.member, &mut out);
            self.send(&out);
        }
    }

    fn send(&mut self, out: &[u8]) {
        if let Some(stream) = self.stream.as_mut() {
            let _ = stream.write_all(out);
        }
    }

    /// The coordinator's answers so far. A rebalance (another consumer joined or left the
    /// group, or the member's generation is past) is joined again, as Kafka's consumer does;
    /// another refusal ends the member — unless it `follows` and the coordinator moved (or
    /// its connection ended): then it is found again at the next beat.
    fn answers(&mut self, follows: bool) -> Result<(), (String, bool)> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        if let Err(why) = read_available(stream, &mut self.input) {
            if follows {
                self.stream = None;
                return Ok(());
            }
            return Err((why, false));
        }
        let protocol = |e: String| {
            (
                format!("the broker sent what Kafka's protocol does not allow: {e}"),
                true,
            )
        };
        while let Some((body, correlation, used)) = kafka::frame(&self.input).map_err(protocol)? {
            let body = body.to_vec();
            self.input.drain(..used);
            let code = match correlation {
                JOIN => self.on_joined(&body).map_err(protocol)?,
                SYNC => self.on_synced(&body).map_err(protocol)?,
                _ => kafka_group::heartbeat_error(&body).map_err(protocol)?,
            };
            if code == 0 {
                continue;
            }
            if follows && kafka_group::coordinator_moved(code) {
                self.stream = None;
                return Ok(());
            }
            if !kafka_group::rejoins(code) {
                let why = format!(
                    "the group coordinator refused member {} of group {}: {}",
                    self.member.id,
                    self.member.group,
                    kafka::error_name(code)
                );
                return Err((why, false));
            }
            self.join(code);
        }
        Ok(())
    }

    /// Joins the group again (the coordinator answered `code`).
    fn join(&mut self, code: i16) {
        if code == kafka_group::UNKNOWN_MEMBER_ID {
            self.member.id.clear();
        }
        let mut out = Vec::new();
        let (group, topic) = (&self.member.group, &self.topic.0);
        kafka_group::join_request(group, &self.member.id, topic, JOIN, &mut out);
        self.send(&out);
        self.rejoin = Rejoin::Joining;
    }

    /// Its JoinGroup's answer: joined (its SyncGroup sent, the leader's with every member's
    /// partitions), or the error code.
    fn on_joined(&mut self, body: &[u8]) -> Result<i16, String> {
        let j = kafka_group::join_response(body)?;
        match j.error {
            kafka_group::MEMBER_ID_REQUIRED => {
                self.member.id = j.member;
                self.join(0);
                Ok(0)
            }
            0 => {
                self.member.id = j.member.clone();
                self.member.generation = j.generation;
                let leads = j.member == j.leader;
                let assignments = match leads {
                    true => kafka_group::assign(&j.members, self.topic.1),
                    false => Vec::new(),
                };
                let mut out = Vec::new();
                kafka_group::sync_request(
                    &self.member,
                    &self.topic.0,
                    &assignments,
                    SYNC,
                    &mut out,
                );
                self.send(&out);
                self.rejoin = Rejoin::Syncing;
                Ok(0)
            }
            code => Ok(code),
        }
    }

    /// Its SyncGroup's answer: the member's partitions in the new generation, or the error.
    fn on_synced(&mut self, body: &[u8]) -> Result<i16, String> {
        match kafka_group::sync_response(body, &self.topic.0)? {
            Ok(assigned) => {
                self.assigned = assigned;
                self.rebalances += 1;
                self.rejoin = Rejoin::No;
                Ok(0)
            }
            Err(code) => Ok(code),
        }
    }
}

/// Reads what `stream` (non-blocking) holds into `input`, at most 64 KiB waiting; its end or
/// a failure, in words.
fn read_available(stream: &mut OpeningStream, input: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 512];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return Err("its group coordinator closed the connection".into()),
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading from its group coordinator failed ({e})")),
        }
        if input.len() > 1 << 16 {
            return Err("its group coordinator sent over 64 KiB of heartbeat answers".into());
        }
    }
}

impl Pull for KafkaPull {
    fn on_input(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        on_message: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, u64), (String, bool)> {
        let (mut at, mut foreign) = (0, 0);
        loop {
            let (body, correlation, used) = match kafka::frame(&input[at..]) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok((at, foreign)),
                Err(e) => {
                    let why = format!("the broker sent what Kafka's protocol does not allow: {e}");
                    return Err((why, true));
                }
            };
            at += used;
            foreign += self
                .fetcher
                .on_response(body, correlation, &mut *on_message)
                .map_err(|e| (e, false))?;
            if let Some((p, name)) = self.fetcher.moved().first() {
                if self.follow.is_none() {
                    let topic = self.fetcher.topic();
                    let why =
                        format!("the broker refused a fetch of {topic} partition {p}: {name}");
                    return Err((why, false));
                }
                // No next fetch here: the subscriber opens a connection to where it went.
                self.moved = true;
                return Ok((at, foreign));
            }
            self.reopens = 0;
            self.fetcher.request(out);
            self.beat()?;
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn follows(&self) -> bool {
        self.follow.is_some() && self.reopens <= MAX_REOPENS
    }

    fn moved(&self) -> bool {
        self.moved
    }

    fn reopen(
        &mut self,
        out: &mut Vec<u8>,
        stop: &dyn Fn() -> bool,
    ) -> Result<OpeningStream, String> {
        self.moved = false;
        let opened = self.open_where_led(out, stop);
        if opened.is_err() {
            // It gives up: the subscriber closes it.
            self.reopens = MAX_REOPENS + 1;
        }
        opened
    }
}

/// A member of a group, and the position of every partition its consumers read.
pub type MemberPositions = (kafka_group::Member, Vec<(i32, i64)>);

/// A subscription's members at the end of the run, from its consumers: each member as the
/// coordinator knows it now and the positions of every partition its consumers read; and,
/// when the group rebalanced during the run, what the reader must know of it.
pub fn members(pulls: &[&KafkaPull]) -> (Vec<MemberPositions>, Option<String>) {
    // By the id each member had when the run opened (a rebalance may give it another).
    let mut members: Vec<(String, MemberPositions)> = Vec::new();
    let (mut rebalances, mut assigned, mut read) = (0, Vec::new(), Vec::new());
    for k in pulls {
        let now = match &k.beats {
            Beats::Aside(aside) => {
                rebalances = rebalances.max(aside.rebalances);
                assigned.extend_from_slice(&aside.assigned);
                Some(aside.member.clone())
            }
            Beats::Elsewhere => None,
        };
        let positions = k.fetcher.positions();
        read.extend(positions.iter().map(|&(p, _)| p));
        match members.iter_mut().find(|(id, _)| *id == k.member.id) {
            Some((_, (member, all))) => {
                all.extend_from_slice(positions);
                *member = now.unwrap_or(member.clone());
            }
            None => {
                let member = now.unwrap_or(k.member.clone());
                members.push((k.member.id.clone(), (member, positions.to_vec())));
            }
        }
    }
    let note = (rebalances > 0).then(|| {
        let elsewhere: Vec<String> = (read.iter())
            .filter(|p| !assigned.contains(p))
            .map(|p| p.to_string())
            .collect();
        let outside = match elsewhere.is_empty() {
            true => String::new(),
            false => format!(
                "; partitions {} are now assigned to consumers outside the run, which read them too",
                elsewhere.join(", ")
            ),
        };
        format!(
            "rebalanced during the run ({rebalances} times: another consumer joined or left it, or a member's generation was past): msgbench's consumers joined it again and kept reading the partitions they had when the run opened{outside}"
        )
    });
    let members = members.into_iter().map(|(_, m)| m).collect();
    (members, note)
}
