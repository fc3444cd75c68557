//! Kafka's consumer groups, as Kafka's own consumer goes through them: every consumer of a
//! subscription joins its group through the group's coordinator (the broker FindCoordinator
//! names) before the run, and at the end the group's positions are committed and the group
//! left ([`wire::kafka_group`]).
use super::cluster::Cluster;
use crate::drivers::pubsub::opening::Opening;
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::{kafka as kafka_wire, kafka_group as group_wire};
use crate::error::EngineError;
use std::io::{Read, Write};

/// One consumer of a Kafka consumer group, joined: its connection to the group's coordinator,
/// its membership and the partitions it was given.
pub struct GroupConsumer {
    /// Its connection to the coordinator, opening timeouts set.
    pub stream: OpeningStream,
    /// The coordinator's node id.
    pub coordinator: i32,
    /// Its membership.
    pub member: group_wire::Member,
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
pub fn join(
    run: &Opening<'_>,
    cluster: &Cluster,
    topic: &str,
    group: &str,
    consumers: u32,
) -> Result<Vec<GroupConsumer>, EngineError> {
    let config = run.config;
    let fail = |problem: String| run.error(problem);
    let coordinator = find_coordinator(run, &mut super::connect(run, None, 0)?, group)?;
    let mut joining = Vec::new();
    for _ in 0..consumers {
        let s = cluster.connect(run, coordinator, config.receive_buffer)?;
        joining.push(Joining::new(s));
    }
    for j in &mut joining {
        j.stream.set_nonblocking(true).map_err(EngineError::Io)?;
    }
    // Long enough for a rebalance that waits out an earlier run's members that never left
    // (the rebalance timeout) and the broker's group.initial.rebalance.delay.ms.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(3 * group_wire::REBALANCE_TIMEOUT_MS as u64);
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
                3 * group_wire::REBALANCE_TIMEOUT_MS / 1000,
                joining
                    .iter()
                    .map(|j| format!("{:?}", j.state))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if progressed {
            run.progress();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    let mut out = Vec::new();
    for j in joining {
        j.stream.set_nonblocking(false).map_err(EngineError::Io)?;
        out.push(GroupConsumer {
            stream: j.stream,
            coordinator,
            member: j.member,
            partitions: j.partitions,
        });
    }
    Ok(out)
}

/// Waits for the coordinator of `group`, once its offsets topic is ready (the first group on a
/// new broker): up to three opening timeouts. Returns its node id.
fn find_coordinator(
    run: &Opening<'_>,
    stream: &mut OpeningStream,
    group: &str,
) -> Result<i32, EngineError> {
    let ask = || {
        let mut out = Vec::new();
        group_wire::find_coordinator_request(group, 1, &mut out);
        let body = kafka_wire::call(stream, &out, 1)?;
        Ok(match group_wire::find_coordinator_answer(&body)? {
            (0, node) => Ok(node),
            (code, _) => Err(code),
        })
    };
    let refused = format!("it found no coordinator for consumer group {group}");
    super::once_settled(run, ask, &refused)
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
    stream: OpeningStream,
    input: Vec<u8>,
    state: JoinState,
    member: group_wire::Member,
    partitions: Vec<i32>,
    /// When it last became Ready.
    ready_at: std::time::Instant,
}

impl Joining {
    fn new(stream: OpeningStream) -> Joining {
        Joining {
            stream,
            input: Vec::new(),
            state: JoinState::Join,
            member: group_wire::Member {
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
        let Some((body, _, used)) = kafka_wire::frame(&self.input)? else {
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
                group_wire::join_request(group, &self.member.id, topic, 2, &mut out);
                self.send(&out)?;
                self.state = JoinState::Joining;
                return Ok(true);
            }
            JoinState::Ready if self.ready_at.elapsed() >= READY_BEAT => {
                group_wire::heartbeat_request(&self.member, &mut out);
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
            JoinState::Joining => self.on_joined(&body, group, topic, assignments, partitions)?,
            JoinState::Syncing => match group_wire::sync_response(&body, topic)? {
                Ok(mine) if mine.iter().any(|&p| p < 0 || p as u32 >= partitions) => {
                    return Err(format!(
                        "its group {group} assigned partitions {mine:?} of {topic}, which has {partitions}"
                    ))
                }
                Ok(mine) => {
                    self.partitions = mine;
                    self.state = JoinState::Beating;
                    group_wire::heartbeat_request(&self.member, &mut out);
                    self.send(&out)?;
                }
                Err(code) if rejoin(code) => self.restart(code),
                Err(code) => {
                    return Err(format!(
                        "it refused the assignment of group {group}: {}",
                        kafka_wire::error_name(code)
                    ))
                }
            },
            JoinState::Beating => {
                let error = group_wire::heartbeat_error(&body)?;
                match error {
                    0 => {
                        self.state = JoinState::Ready;
                        self.ready_at = std::time::Instant::now();
                    }
                    code if rejoin(code) => self.restart(code),
                    code => {
                        return Err(format!(
                            "it refused a heartbeat of group {group}: {}",
                            kafka_wire::error_name(code)
                        ))
                    }
                }
            }
            JoinState::Join | JoinState::Ready => {}
        }
        Ok(true)
    }

    /// The answer to its JoinGroup: its id to join again with, or the generation it joined
    /// (the leader deals the partitions) and its SyncGroup sent.
    fn on_joined(
        &mut self,
        body: &[u8],
        group: &str,
        topic: &str,
        assignments: &mut Vec<(String, Vec<i32>)>,
        partitions: u32,
    ) -> Result<(), String> {
        let j = group_wire::join_response(body)?;
        match j.error {
            group_wire::MEMBER_ID_REQUIRED => {
                self.member.id = j.member;
                self.state = JoinState::Join;
            }
            0 => {
                self.member = group_wire::Member {
                    group: group.to_string(),
                    id: j.member.clone(),
                    generation: j.generation,
                };
                // Only the leader's sync carries the assignment; the others send none.
                let leads = j.member == j.leader;
                if leads {
                    *assignments = group_wire::assign(&j.members, partitions);
                }
                let mine = if leads { &assignments[..] } else { &[] };
                let mut out = Vec::new();
                group_wire::sync_request(&self.member, topic, mine, 3, &mut out);
                self.send(&out)?;
                self.state = JoinState::Syncing;
            }
            code if rejoin(code) => self.restart(code),
            code => {
                return Err(format!(
                    "it refused a consumer's join of group {group}: {}",
                    kafka_wire::error_name(code)
                ))
            }
        }
        Ok(())
    }

    /// The group rebalances (or forgot this member): join again, with a new id if it forgot.
    fn restart(&mut self, code: i16) {
        if code == group_wire::UNKNOWN_MEMBER_ID {
            self.member.id.clear();
        }
        self.state = JoinState::Join;
    }
}

/// A group answer that means "join again" (after a moment, while the coordinator settles).
fn rejoin(code: i16) -> bool {
    if group_wire::settling(code) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        return true;
    }
    matches!(
        code,
        group_wire::REBALANCE_IN_PROGRESS
            | group_wire::ILLEGAL_GENERATION
            | group_wire::UNKNOWN_MEMBER_ID
    )
}

/// At the end of a run: each consumer's positions committed for its group, and the group
/// left (so the next run's consumers join at once). Best effort, on a connection of its own to
/// the group's `coordinator`: what fails is returned, for a note.
pub fn leave(
    run: &Opening<'_>,
    cluster: &Cluster,
    coordinator: i32,
    topic: &str,
    members: &[(group_wire::Member, Vec<(i32, i64)>)],
) -> Result<(), String> {
    let Some((first, _)) = members.first() else {
        return Ok(());
    };
    let connected = cluster.connect(run, coordinator, 0);
    let mut stream = connected.map_err(|e| e.to_string())?;
    for (k, (member, positions)) in members.iter().enumerate() {
        let mut out = Vec::new();
        let correlation = 10 + k as i32;
        group_wire::commit_request(member, topic, positions, correlation, &mut out);
        let body = kafka_wire::call(&mut stream, &out, correlation)?;
        if let Some(why) = group_wire::commit_refusal(&body)? {
            return Err(format!(
                "committing group {}'s offsets failed: {why}",
                member.group
            ));
        }
    }
    let mut out = Vec::new();
    let ids: Vec<String> = members.iter().map(|(m, _)| m.id.clone()).collect();
    group_wire::leave_request(&first.group, &ids, 9, &mut out);
    kafka_wire::call(&mut stream, &out, 9)?;
    Ok(())
}
