//! The client side of the NATS core protocol (text, one operation per line): what the
//! `pubsub` driver writes (`CONNECT`, `SUB`, `PUB`, `PONG`) and reads (`INFO`, `MSG`, `PING`,
//! `PONG`, `+OK`, `-ERR`). Hand-written rather than taken from `async-nats`: that client owns
//! its connections on a tokio runtime and copies each message into a `Bytes` and a `Message`
//! (subject, headers) handed through a channel, where the driver needs the payload's first 24
//! bytes read in place, in the same mio loop that owns the socket and the clock.

/// Longest operation line accepted (`max_control_line` is 4 KiB by default).
const MAX_LINE: usize = 64 * 1024;
/// Largest payload accepted (NATS's `max_payload` can be set to at most 64 MiB).
pub const MAX_PAYLOAD: usize = 64 << 20;

/// One operation from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOp<'a> {
    /// `INFO {…}`: the server's description (first on a connection, again on cluster changes).
    Info(&'a [u8]),
    /// `MSG <subject> <sid> [reply-to] <bytes>`: a message for subscription `sid`.
    Msg {
        /// The subscription it is for.
        sid: u64,
        /// Its payload.
        payload: &'a [u8],
    },
    /// `PING`: answer `PONG` or be disconnected.
    Ping,
    /// `PONG`: the answer to our `PING` (everything sent before it was processed).
    Pong,
    /// `+OK` (verbose mode only).
    Ok,
    /// `-ERR '<text>'`: the server refused something; most errors close the connection.
    Err(&'a [u8]),
}

/// Bytes that are not the NATS protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatsError {
    /// An operation msgbench does not know.
    #[error("not a NATS server operation: {0:?}")]
    Unknown(String),
    /// A line longer than any operation could be.
    #[error("a NATS operation line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// A malformed `MSG` line or payload.
    #[error("malformed NATS MSG: {0}")]
    BadMsg(String),
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// The operation at the start of `buf` and the bytes it took; `Ok(None)` when incomplete.
pub fn decode(buf: &[u8]) -> Result<Option<(ServerOp<'_>, usize)>, NatsError> {
    let Some(end) = find_crlf(&buf[..buf.len().min(MAX_LINE + 2)]) else {
        return if buf.len() > MAX_LINE {
            Err(NatsError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    let line = &buf[..end];
    let after = end + 2;
    let word_end = line
        .iter()
        .position(|b| *b == b' ' || *b == b'\t')
        .unwrap_or(line.len());
    let op = &line[..word_end];
    let rest = trim(&line[word_end..]);
    let parsed = if op.eq_ignore_ascii_case(b"MSG") {
        return msg(buf, rest, after);
    } else if op.eq_ignore_ascii_case(b"PING") {
        ServerOp::Ping
    } else if op.eq_ignore_ascii_case(b"PONG") {
        ServerOp::Pong
    } else if op.eq_ignore_ascii_case(b"+OK") {
        ServerOp::Ok
    } else if op.eq_ignore_ascii_case(b"-ERR") {
        ServerOp::Err(trim_quotes(rest))
    } else if op.eq_ignore_ascii_case(b"INFO") {
        ServerOp::Info(rest)
    } else {
        return Err(NatsError::Unknown(
            String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned(),
        ));
    };
    Ok(Some((parsed, after)))
}

/// `MSG <subject> <sid> [reply-to] <#bytes>` and its payload.
fn msg<'a>(
    buf: &'a [u8],
    args: &[u8],
    after: usize,
) -> Result<Option<(ServerOp<'a>, usize)>, NatsError> {
    let mut words = args
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty());
    let (Some(_subject), Some(sid)) = (words.next(), words.next()) else {
        return Err(NatsError::BadMsg("too few fields".into()));
    };
    let (Some(third), fourth, None) = (words.next(), words.next(), words.next()) else {
        return Err(NatsError::BadMsg("wrong number of fields".into()));
    };
    let size = fourth.unwrap_or(third);
    let sid = number(sid).ok_or_else(|| NatsError::BadMsg("subscription id".into()))?;
    let size = number(size)
        .filter(|&n| n <= MAX_PAYLOAD as u64)
        .ok_or_else(|| NatsError::BadMsg("payload size".into()))? as usize;
    let total = after + size + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[after + size..total] != b"\r\n" {
        return Err(NatsError::BadMsg("no CRLF after the payload".into()));
    }
    Ok(Some((
        ServerOp::Msg {
            sid,
            payload: &buf[after..after + size],
        },
        total,
    )))
}

fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
    )
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn trim_quotes(s: &[u8]) -> &[u8] {
    let s = s.strip_prefix(b"'").unwrap_or(s);
    s.strip_suffix(b"'").unwrap_or(s)
}

/// `CONNECT` (no echo of our own messages, no +OK per operation) and a `PING`, whose `PONG`
/// says the server took it.
pub fn connect(name: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(
        format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"echo\":false,\"lang\":\"rust\",\"version\":\"{}\",\"name\":\"msgbench-{}\",\"protocol\":1}}\r\nPING\r\n",
            env!("CARGO_PKG_VERSION"),
            name
        )
        .as_bytes(),
    );
}

/// `SUB <subject> [queue group] <sid>`.
pub fn subscribe(subject: &str, group: Option<&str>, sid: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"SUB ");
    out.extend_from_slice(subject.as_bytes());
    if let Some(g) = group {
        out.push(b' ');
        out.extend_from_slice(g.as_bytes());
    }
    out.extend_from_slice(format!(" {sid}\r\n").as_bytes());
}

/// The bytes before a payload of `size` bytes published on `subject`: `PUB <subject> <size>`.
pub fn publish_prefix(subject: &str, size: usize) -> Vec<u8> {
    format!("PUB {subject} {size}\r\n").into_bytes()
}

/// What follows every published payload.
pub const PUBLISH_SUFFIX: &[u8] = b"\r\n";

/// The answer to a server's `PING`.
pub const PONG: &[u8] = b"PONG\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_operation_is_read_whole_or_waited_for() {
        let stream = b"INFO {\"server_id\":\"x\"}\r\nMSG a.b 7 5\r\nhello\r\nMSG a.b 7 _INBOX.1 0\r\n\r\nPING\r\nPONG\r\n+OK\r\n-ERR 'Slow Consumer'\r\n";
        let mut ops = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            // Every prefix of what is left is incomplete, never an error.
            for cut in at..stream.len() {
                if let Some((_, used)) = decode(&stream[at..cut]).unwrap() {
                    assert!(used <= cut - at);
                }
            }
            let (op, used) = decode(&stream[at..]).unwrap().unwrap();
            ops.push(format!("{op:?}"));
            at += used;
        }
        assert_eq!(ops.len(), 7);
        assert!(ops[1].contains("sid: 7") && ops[1].contains("[104, 101, 108, 108, 111]"));
        assert!(ops[2].contains("payload: []"));
        assert_eq!(ops[3], "Ping");
        assert_eq!(ops[6], format!("{:?}", ServerOp::Err(b"Slow Consumer")));
    }

    #[test]
    fn what_is_not_nats_is_refused() {
        assert!(matches!(
            decode(b"HTTP/1.1 400\r\n"),
            Err(NatsError::Unknown(_))
        ));
        assert!(matches!(
            decode(b"MSG a 1 -5\r\n"),
            Err(NatsError::BadMsg(_))
        ));
        assert!(matches!(
            decode(b"MSG a x 5\r\n"),
            Err(NatsError::BadMsg(_))
        ));
        assert!(matches!(
            decode(b"MSG a 1 1 2 3\r\n"),
            Err(NatsError::BadMsg(_))
        ));
        assert!(matches!(
            decode(b"MSG a 1 99999999999\r\n"),
            Err(NatsError::BadMsg(_))
        ));
        assert!(matches!(
            decode(b"MSG a 1 2\r\nabXY"),
            Err(NatsError::BadMsg(_))
        ));
        assert!(matches!(
            decode(&vec![b'a'; MAX_LINE + 1]),
            Err(NatsError::LineTooLong)
        ));
        assert_eq!(decode(b"MSG a 1 2\r\nab").unwrap(), None);
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..40);
            let mut b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            if rng.gen_bool(0.5) {
                b.splice(0..0, b"MSG s 1 3\r\n".iter().copied());
            }
            let _ = decode(&b);
        }
    }

    #[test]
    fn commands_are_written_as_the_protocol_spells_them() {
        let mut out = Vec::new();
        subscribe("msgbench.0", Some("g"), 3, &mut out);
        subscribe("msgbench.1", None, 4, &mut out);
        assert_eq!(out, b"SUB msgbench.0 g 3\r\nSUB msgbench.1 4\r\n");
        assert_eq!(publish_prefix("t.0", 256), b"PUB t.0 256\r\n");
        let mut c = Vec::new();
        connect("p0", &mut c);
        assert!(c.starts_with(b"CONNECT {\"verbose\":false") && c.ends_with(b"}\r\nPING\r\n"));
    }
}
