//! A Kafka consumer as the subscriber threads run it ([`Pull`]): it fetches its partitions
//! from one broker, asks again after each answer, and beats for its group member. In a
//! cluster it follows: when the broker says it no longer leads the partition
//! (`NOT_LEADER_OR_FOLLOWER`, a fenced epoch) or its connection ends, it asks the cluster
//! where the partition is led now and fetches from there, from the same position — nothing
//! is read twice or skipped. Its member's heartbeats, on a connection of their own, follow the
//! group's coordinator the same way.
use super::cluster::Follow;
use crate::clock::now_ns;
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

    /// Its member's heartbeat, when due; the coordinator's answers read when they are aside.
    fn beat(&mut self, out: &mut Vec<u8>) -> Result<(), (String, bool)> {
        // Between two fetches: a fetch waits at most 500 ms for records, so heartbeats keep
        // well inside the session (30 s).
        let now = now_ns();
        if now >= self.next_heartbeat_ns {
            match &mut self.beats {
                Beats::Inline => kafka_group::heartbeat_request(&self.member, out),
                Beats::Aside(aside) => aside.beat(&self.member, self.follow.as_deref()),
                Beats::Elsewhere => {}
            }
            self.next_heartbeat_ns = now + kafka_group::HEARTBEAT_EVERY_NS;
        }
        if let Beats::Aside(aside) = &mut self.beats {
            aside.answers(&self.member, self.follow.is_some())?;
        }
        Ok(())
    }

    /// [`Pull::reopen`]'s work.
    fn open_where_led(&mut self, out: &mut Vec<u8>) -> Result<OpeningStream, String> {
        let follow = self.follow.clone().ok_or("it does not follow")?;
        self.reopens += 1;
        if self.reopens > MAX_REOPENS {
            return Err(format!(
                "its partition's leader moved {MAX_REOPENS} times without one fetch answered"
            ));
        }
        let topic = self.fetcher.topic().to_string();
        let leaders = follow.leaders_of(&topic)?;
        // In a cluster a consumer reads one partition (KafkaPull's maker sees to it).
        let &(partition, _) = (self.fetcher.positions().first()).ok_or("it reads no partition")?;
        let node = leaders[partition as usize];
        let mut stream = follow.open_node(node)?;
        stream
            .set_read_timeout(None)
            .map_err(|e| format!("broker {node}: {e}"))?;
        self.fetcher.request(out);
        let _ = stream.flush();
        Ok(stream)
    }
}

/// Where a group member's heartbeats go: to its coordinator, every
/// [`kafka_group::HEARTBEAT_EVERY_NS`], sent between two fetches of one of its connections.
pub enum Beats {
    /// On this connection: it is to the coordinator.
    Inline,
    /// On a connection of their own (in a cluster, or when the coordinator leads none of the
    /// member's partitions), written and read without blocking between two fetches.
    Aside(Box<Aside>),
    /// Another connection of the member beats.
    Elsewhere,
}

/// A member's connection to its coordinator, for heartbeats only.
pub struct Aside {
    /// None: lost, opened again to the group's coordinator at the next beat (in a cluster).
    stream: Option<OpeningStream>,
    input: Vec<u8>,
}

impl Beats {
    /// Heartbeats on `stream`, a connection of their own.
    pub fn aside(stream: OpeningStream) -> Result<Beats, EngineError> {
        stream.set_nonblocking(true).map_err(EngineError::Io)?;
        Ok(Beats::Aside(Box::new(Aside {
            stream: Some(stream),
            input: Vec::new(),
        })))
    }
}

impl Aside {
    /// Sends `member`'s heartbeat (a hundred bytes to an idle socket: taken whole, or the
    /// next one goes in its place); a connection lost is opened again to the group's
    /// coordinator now, when it can `follow`.
    fn beat(&mut self, member: &kafka_group::Member, follow: Option<&Follow>) {
        if self.stream.is_none() {
            let Some(follow) = follow else { return };
            let opened = (follow.coordinator(&member.group))
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
        }
        let mut out = Vec::new();
        kafka_group::heartbeat_request(member, &mut out);
        if let Some(stream) = self.stream.as_mut() {
            let _ = stream.write(&out);
        }
    }

    /// The coordinator's answers so far: a refusal ends the member — unless it `follows`
    /// and the coordinator moved (or its connection ended): then it is found again at the
    /// next beat.
    fn answers(
        &mut self,
        member: &kafka_group::Member,
        follows: bool,
    ) -> Result<(), (String, bool)> {
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
        while let Some((body, _, used)) = kafka::frame(&self.input).map_err(protocol)? {
            let code = kafka_group::heartbeat_error(body).map_err(protocol)?;
            if follows && kafka_group::coordinator_moved(code) {
                self.stream = None;
                return Ok(());
            }
            if let Some(why) = kafka_group::heartbeat_refusal(body, member).map_err(protocol)? {
                return Err((why, false));
            }
            self.input.drain(..used);
        }
        Ok(())
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
            if correlation == kafka_group::HEARTBEAT_CORRELATION {
                let refusal =
                    kafka_group::heartbeat_refusal(body, &self.member).map_err(|e| (e, true))?;
                if let Some(why) = refusal {
                    return Err((why, false));
                }
                continue;
            }
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
            self.beat(out)?;
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

    fn reopen(&mut self, out: &mut Vec<u8>) -> Result<OpeningStream, String> {
        self.moved = false;
        let opened = self.open_where_led(out);
        if opened.is_err() {
            // It gives up: the subscriber closes it.
            self.reopens = MAX_REOPENS + 1;
        }
        opened
    }
}
