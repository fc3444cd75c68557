//! Kafka's classic consumer group protocol, as a subscription's consumers speak it: the group
//! coordinator found (FindCoordinator v2), every consumer joined (JoinGroup v5, twice: the
//! broker gives a new member its id first), the leader's assignment handed out (SyncGroup v3,
//! partitions dealt in turn over the members, as Kafka's round-robin assignor does for one
//! topic), heartbeats while the run lasts (Heartbeat v3, on the consumer's own connection
//! between its fetches), and at the end the positions committed (OffsetCommit v7) and the
//! group left (LeaveGroup v3). Hand-written beside [`super::kafka`], with its encoding.
use super::kafka::{begin, error_name, finish, put_i16, put_i32, put_i64, put_str, Reader};

const OFFSET_COMMIT: i16 = 8;
const FIND_COORDINATOR: i16 = 10;
const JOIN_GROUP: i16 = 11;
const HEARTBEAT: i16 = 12;
const LEAVE_GROUP: i16 = 13;
const SYNC_GROUP: i16 = 14;

/// How long the coordinator keeps a member without a heartbeat.
pub const SESSION_TIMEOUT_MS: i32 = 30_000;
/// How long a rebalance waits for members to join.
pub const REBALANCE_TIMEOUT_MS: i32 = 10_000;
/// How often a consumer sends a heartbeat (a tenth of the session, as Kafka's consumer).
pub const HEARTBEAT_EVERY_NS: u64 = 3_000_000_000;
/// The correlation id of heartbeats on a consumer's connection (its fetches count up from 1).
pub const HEARTBEAT_CORRELATION: i32 = i32::MIN;

/// Error codes of the group protocol the opening acts on.
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The coordinator is not ready yet (its offsets topic being made).
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// The broker's group coordinator is not serving the group yet (loading, not ready, or not
/// this broker yet): asked again.
pub fn settling(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | 16
    )
}

/// The group's generation is over: its members join again.
pub const ILLEGAL_GENERATION: i16 = 22;
/// The coordinator does not know the member (expired, or of another run).
pub const UNKNOWN_MEMBER_ID: i16 = 25;
/// The group is rebalancing: its members join again.
pub const REBALANCE_IN_PROGRESS: i16 = 27;

/// A new member must join again with the id it was given.
pub const MEMBER_ID_REQUIRED: i16 = 79;

/// One member of a group, once joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The group's id.
    pub group: String,
    /// Its id, given by the coordinator.
    pub id: String,
    /// The group's generation it joined.
    pub generation: i32,
}

/// A member's identity, as SyncGroup, Heartbeat and OffsetCommit begin: group, generation,
/// member id, no static membership.
fn put_member(member: &Member, out: &mut Vec<u8>) {
    put_str(&member.group, out);
    put_i32(member.generation, out);
    put_str(&member.id, out);
    put_i16(-1, out);
}

fn put_bytes(b: &[u8], out: &mut Vec<u8>) {
    put_i32(b.len() as i32, out);
    out.extend_from_slice(b);
}

fn bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], &'static str> {
    let n = r.i32()?;
    if n < 0 {
        return Ok(b"");
    }
    r.take(n as usize)
}

/// FindCoordinator v2 of `group`.
pub fn find_coordinator_request(group: &str, correlation: i32, out: &mut Vec<u8>) {
    let start = begin(FIND_COORDINATOR, 2, correlation, out);
    put_str(group, out);
    out.push(0); // key type: a group
    finish(start, out);
}

/// A FindCoordinator v2 answer: its error code, and (0: found) the coordinator's node id.
pub fn find_coordinator_answer(body: &[u8]) -> Result<(i16, i32), String> {
    let mut r = Reader::new(body);
    r.i32()?;
    let error = r.i16()?;
    if error != 0 {
        return Ok((error, -1));
    }
    r.str()?; // error message
    Ok((0, r.i32()?))
}

/// JoinGroup v5 of `member` (empty for a new one) to `group`, reading `topic`.
pub fn join_request(group: &str, member: &str, topic: &str, correlation: i32, out: &mut Vec<u8>) {
    let start = begin(JOIN_GROUP, 5, correlation, out);
    put_str(group, out);
    put_i32(SESSION_TIMEOUT_MS, out);
    put_i32(REBALANCE_TIMEOUT_MS, out);
    put_str(member, out);
    put_i16(-1, out); // no static membership
    put_str("consumer", out);
    put_i32(1, out);
    put_str("roundrobin", out);
    // ConsumerProtocolSubscription v0: the topics it reads, no user data.
    let mut subscription = Vec::new();
    put_i16(0, &mut subscription);
    put_i32(1, &mut subscription);
    put_str(topic, &mut subscription);
    put_i32(-1, &mut subscription);
    put_bytes(&subscription, out);
    finish(start, out);
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// Its error code (0, or [`MEMBER_ID_REQUIRED`] with the id to join with).
    pub error: i16,
    /// The group's generation.
    pub generation: i32,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member: String,
    /// The leader's answer only: every member's id.
    pub members: Vec<String>,
}

/// Reads a JoinGroup v5 answer.
pub fn join_response(body: &[u8]) -> Result<Joined, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut r = Reader::new(body);
    r.i32()?;
    let error = r.i16()?;
    let generation = r.i32()?;
    r.str()?; // protocol
    let leader = text(r.str()?);
    let member = text(r.str()?);
    let mut members = Vec::new();
    for _ in 0..r.len()? {
        members.push(text(r.str()?));
        r.str()?; // group instance id
        bytes(&mut r)?;
    }
    Ok(Joined {
        error,
        generation,
        leader,
        member,
        members,
    })
}

/// The leader's assignment: `partitions` dealt in turn over `members` (sorted by id), as
/// Kafka's round-robin assignor deals one topic's.
pub fn assign(members: &[String], partitions: u32) -> Vec<(String, Vec<i32>)> {
    let mut sorted: Vec<String> = members.to_vec();
    sorted.sort();
    let n = sorted.len().max(1);
    sorted
        .into_iter()
        .enumerate()
        .map(|(k, m)| {
            let mine = (0..partitions as i32)
                .filter(|p| *p as usize % n == k)
                .collect();
            (m, mine)
        })
        .collect()
}

/// SyncGroup v3 of `member`: the leader sends every member's `assignments` of `topic`, the
/// others none.
pub fn sync_request(
    member: &Member,
    topic: &str,
    assignments: &[(String, Vec<i32>)],
    correlation: i32,
    out: &mut Vec<u8>,
) {
    let start = begin(SYNC_GROUP, 3, correlation, out);
    put_member(member, out);
    put_i32(assignments.len() as i32, out);
    for (id, partitions) in assignments {
        put_str(id, out);
        // ConsumerProtocolAssignment v0.
        let mut a = Vec::new();
        put_i16(0, &mut a);
        put_i32(1, &mut a);
        put_str(topic, &mut a);
        put_i32(partitions.len() as i32, &mut a);
        for &p in partitions {
            put_i32(p, &mut a);
        }
        put_i32(-1, &mut a);
        put_bytes(&a, out);
    }
    finish(start, out);
}

/// A SyncGroup v3 answer: the partitions of `topic` assigned to this member, or the error.
pub fn sync_response(body: &[u8], topic: &str) -> Result<Result<Vec<i32>, i16>, String> {
    let mut r = Reader::new(body);
    r.i32()?;
    let error = r.i16()?;
    if error != 0 {
        return Ok(Err(error));
    }
    let assignment = bytes(&mut r)?;
    let mut a = Reader::new(assignment);
    let mut mine = Vec::new();
    if assignment.is_empty() {
        return Ok(Ok(mine));
    }
    a.i16()?;
    for _ in 0..a.len()? {
        let name = a.str()?;
        for _ in 0..a.len()? {
            let p = a.i32()?;
            if name == topic.as_bytes() {
                mine.push(p);
            }
        }
    }
    Ok(Ok(mine))
}

/// Heartbeat v3 of `member`.
pub fn heartbeat_request(member: &Member, out: &mut Vec<u8>) {
    let start = begin(HEARTBEAT, 3, HEARTBEAT_CORRELATION, out);
    put_member(member, out);
    finish(start, out);
}

/// A group answer that says the broker is not (or no longer) the group's coordinator:
/// `COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE`, `NOT_COORDINATOR`.
pub fn coordinator_moved(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | 16
    )
}

/// A group answer that means "join the group again": it rebalances, or the member's
/// generation or id is past.
pub fn rejoins(code: i16) -> bool {
    matches!(
        code,
        REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID
    )
}

/// A Heartbeat answer's error code.
pub fn heartbeat_error(body: &[u8]) -> Result<i16, String> {
    let mut r = Reader::new(body);
    r.i32()?;
    Ok(r.i16()?)
}

/// OffsetCommit v7 of `member`: `positions` (partition, next offset) of `topic`.
pub fn commit_request(
    member: &Member,
    topic: &str,
    positions: &[(i32, i64)],
    correlation: i32,
    out: &mut Vec<u8>,
) {
    let start = begin(OFFSET_COMMIT, 7, correlation, out);
    put_member(member, out);
    put_i32(1, out);
    put_str(topic, out);
    put_i32(positions.len() as i32, out);
    for &(p, offset) in positions {
        put_i32(p, out);
        put_i64(offset, out);
        put_i32(-1, out); // leader epoch
        put_i16(-1, out); // no metadata
    }
    finish(start, out);
}

/// The first refusal in an OffsetCommit v7 answer, named.
pub fn commit_refusal(body: &[u8]) -> Result<Option<String>, String> {
    let mut r = Reader::new(body);
    r.i32()?;
    for _ in 0..r.len()? {
        r.str()?;
        for _ in 0..r.len()? {
            let p = r.i32()?;
            let error = r.i16()?;
            if error != 0 {
                return Ok(Some(format!("partition {p}: {}", error_name(error))));
            }
        }
    }
    Ok(None)
}

/// LeaveGroup v3 of `members` of `group`.
pub fn leave_request(group: &str, members: &[String], correlation: i32, out: &mut Vec<u8>) {
    let start = begin(LEAVE_GROUP, 3, correlation, out);
    put_str(group, out);
    put_i32(members.len() as i32, out);
    for m in members {
        put_str(m, out);
        put_i16(-1, out);
    }
    finish(start, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_dealt_in_turn_over_members_sorted_by_id() {
        let a = assign(&["m-b".into(), "m-a".into()], 5);
        assert_eq!(
            a,
            [("m-a".into(), vec![0, 2, 4]), ("m-b".into(), vec![1, 3])]
        );
    }

    #[test]
    fn an_assignment_written_by_the_leader_reads_back_for_its_member() {
        let member = Member {
            group: "g".into(),
            id: "m-a".into(),
            generation: 3,
        };
        let mut out = Vec::new();
        sync_request(&member, "t", &[("m-a".into(), vec![0, 2])], 7, &mut out);
        // The assignment bytes are the request's last field; an answer carries them alike.
        let assignment = &out[out.len() - (2 + 4 + 2 + 1 + 4 + 8 + 4)..];
        let mut body = vec![0, 0, 0, 0, 0, 0];
        put_bytes(assignment, &mut body);
        assert_eq!(sync_response(&body, "t").unwrap(), Ok(vec![0, 2]));
        assert_eq!(sync_response(&[0, 0, 0, 0, 0, 27], "t").unwrap(), Err(27));
    }

    #[test]
    fn a_join_answer_names_its_leader_and_members() {
        let mut body = Vec::new();
        put_i32(0, &mut body);
        put_i16(0, &mut body);
        put_i32(4, &mut body);
        put_str("roundrobin", &mut body);
        put_str("m-1", &mut body);
        put_str("m-1", &mut body);
        put_i32(2, &mut body);
        for m in ["m-1", "m-2"] {
            put_str(m, &mut body);
            put_i16(-1, &mut body);
            put_bytes(b"x", &mut body);
        }
        let j = join_response(&body).unwrap();
        assert_eq!((j.generation, j.leader.as_str()), (4, "m-1"));
        assert_eq!(j.members, ["m-1", "m-2"]);
        assert!(join_response(&body[..10]).is_err());
    }
}
