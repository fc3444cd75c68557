//! The client side of the NATS core protocol (text, one operation per line): what the
//! `pubsub` driver writes (`CONNECT`, `SUB`, `PUB`, `PONG`) and reads (`INFO`, `MSG`, `PING`,
//! `PONG`, `+OK`, `-ERR`). Hand-written rather than taken from `async-nats`: that client owns
//! its connections on a tokio runtime and copies each message into a `Bytes` and a `Message`
//! (subject, headers) handed through a channel, where the driver needs the payload's first 24
//! bytes read in place, in the same mio loop that owns the socket and the clock.
use crate::drivers::pubsub::protocol::Hello;
use crate::net::nkey;
use msgbench_model::broker_auth::Credentials;

/// Longest operation line accepted (`max_control_line` is 4 KiB by default).
const MAX_LINE: usize = 64 * 1024;
/// Largest payload accepted (NATS's `max_payload` can be set to at most 64 MiB).
pub const MAX_PAYLOAD: usize = 64 << 20;

/// One operation from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOp<'a> {
    /// `INFO {…}`: the server's description (first on a connection, again on cluster changes).
    Info(&'a [u8]),
    /// `MSG <subject> <sid> [reply-to] <bytes>` (or `HMSG`, with headers): a message for
    /// subscription `sid`.
    Msg {
        /// The subscription it is for.
        sid: u64,
        /// The subject to answer it on, if any (JetStream: where its acknowledgement goes).
        reply: Option<&'a [u8]>,
        /// Its payload (after the headers, if any).
        payload: &'a [u8],
        /// A status message's code and text (`NATS/1.0 503` headers: no responders,
        /// JetStream's 100 heartbeats, 409 …), for an `HMSG` whose headers carry one.
        status: Option<&'a [u8]>,
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
        return msg(buf, rest, after, false);
    } else if op.eq_ignore_ascii_case(b"HMSG") {
        return msg(buf, rest, after, true);
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

/// `MSG <subject> <sid> [reply-to] <#bytes>` and its payload, or (`headers`)
/// `HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>` and its headers and
/// payload.
fn msg<'a>(
    buf: &'a [u8],
    args: &'a [u8],
    after: usize,
    headers: bool,
) -> Result<Option<(ServerOp<'a>, usize)>, NatsError> {
    // Per message: the fields in place, no allocation.
    let mut fields: [&[u8]; 6] = [b""; 6];
    let mut count = 0;
    for w in args
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty())
    {
        if count == fields.len() {
            return Err(NatsError::BadMsg("wrong number of fields".into()));
        }
        fields[count] = w;
        count += 1;
    }
    let words = &fields[..count];
    let sizes = 1 + usize::from(headers);
    if words.len() < 2 + sizes || words.len() > 3 + sizes {
        return Err(NatsError::BadMsg("wrong number of fields".into()));
    }
    let reply = (words.len() == 3 + sizes).then(|| words[2]);
    let sid = number(words[1]).ok_or_else(|| NatsError::BadMsg("subscription id".into()))?;
    let size_of = |w: &[u8], what: &str| {
        number(w)
            .filter(|&n| n <= MAX_PAYLOAD as u64)
            .map(|n| n as usize)
            .ok_or_else(|| NatsError::BadMsg(what.into()))
    };
    let size = size_of(words[words.len() - 1], "payload size")?;
    let header_size = if headers {
        size_of(words[words.len() - 2], "header size")?
    } else {
        0
    };
    if header_size > size {
        return Err(NatsError::BadMsg("headers longer than the message".into()));
    }
    let total = after + size + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[after + size..total] != b"\r\n" {
        return Err(NatsError::BadMsg("no CRLF after the payload".into()));
    }
    let status = headers
        .then(|| status(&buf[after..after + header_size]))
        .flatten();
    Ok(Some((
        ServerOp::Msg {
            sid,
            reply,
            payload: &buf[after + header_size..after + size],
            status,
        },
        total,
    )))
}

/// The status of a header block whose first line is `NATS/1.0 <code> [text]`.
fn status(headers: &[u8]) -> Option<&[u8]> {
    let line = &headers[..find_crlf(headers).unwrap_or(headers.len())];
    let rest = trim(line.strip_prefix(b"NATS/1.0")?);
    (!rest.is_empty()).then_some(rest)
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
/// says the server took it. With `headers`, the server may send `HMSG` (JetStream's status
/// messages) and answers a request nobody listens to with a 503 status.
/// `auth`: a user and password (`user`, `pass`) or a token (`auth_token`), written as JSON
/// strings (escaped: a secret may hold any character but a line break).
pub fn connect(hello: &Hello<'_>, headers: bool, out: &mut Vec<u8>) -> Result<(), String> {
    let json = |s: &str| serde_json::to_string(s).expect("a string is JSON");
    let login = match hello.auth {
        Some(a) => login(a, hello.greeting, &json)?,
        None => String::new(),
    };
    out.extend_from_slice(
        format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"echo\":false,\"lang\":\"rust\",\"version\":\"{}\",\"name\":\"msgbench-{}\",\"protocol\":1,\"headers\":{headers},\"no_responders\":{headers}{login}}}\r\nPING\r\n",
            env!("CARGO_PKG_VERSION"),
            hello.name
        )
        .as_bytes(),
    );
    Ok(())
}

/// `CONNECT`'s login fields: a user and password, a token, or the signature of the `INFO`'s
/// nonce by an NKey (with its public key, or with the user's JWT from a `.creds` file).
fn login(a: &Credentials, info: &[u8], json: &dyn Fn(&str) -> String) -> Result<String, String> {
    if let (Some(user), Some(pass)) = (&a.user, &a.password) {
        return Ok(format!(
            ",\"user\":{},\"pass\":{}",
            json(user),
            json(pass.expose())
        ));
    }
    if let Some(token) = &a.token {
        return Ok(format!(",\"auth_token\":{}", json(token.expose())));
    }
    let (seed, jwt) = match (&a.nkey_seed, &a.creds) {
        (Some(seed), _) => (seed.expose().to_string(), None),
        (None, Some(creds)) => {
            let c = nkey::parse_creds(creds.expose()).map_err(|e| format!("the creds file {e}"))?;
            (c.seed, Some(c.jwt))
        }
        (None, None) => return Ok(String::new()),
    };
    let key = nkey::NKey::from_seed(&seed).map_err(|e| format!("the NKey seed {e}"))?;
    let nonce = nonce_of(info).ok_or(
        "the server's INFO has no nonce to sign: it does not log users in by NKey or JWT (check its authorization, or give [pubsub.auth] a user and password or a token)",
    )?;
    let sig = key.sign(nonce.as_bytes());
    Ok(match jwt {
        Some(jwt) => format!(",\"jwt\":{},\"sig\":{}", json(&jwt), json(&sig)),
        None => format!(",\"nkey\":{},\"sig\":{}", json(key.public()), json(&sig)),
    })
}

/// The `nonce` of an `INFO` line, if it has one.
fn nonce_of(info: &[u8]) -> Option<String> {
    let line = std::str::from_utf8(info).ok()?;
    let json = line.strip_prefix("INFO")?.trim();
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(value.get("nonce")?.as_str()?.to_string())
}

/// `PUB <subject> [reply] <size>` followed by `payload`.
pub fn publish(subject: &str, reply: Option<&str>, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"PUB ");
    out.extend_from_slice(subject.as_bytes());
    if let Some(r) = reply {
        out.push(b' ');
        out.extend_from_slice(r.as_bytes());
    }
    out.extend_from_slice(format!(" {}\r\n", payload.len()).as_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
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

/// The bytes before a payload of `size` bytes published on `subject` (answered on `reply`):
/// `PUB <subject> [reply] <size>`.
pub fn publish_prefix(subject: &str, reply: Option<&str>, size: usize) -> Vec<u8> {
    match reply {
        Some(r) => format!("PUB {subject} {r} {size}\r\n").into_bytes(),
        None => format!("PUB {subject} {size}\r\n").into_bytes(),
    }
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
        let stream = b"INFO {\"server_id\":\"x\"}\r\nMSG a.b 7 5\r\nhello\r\nMSG a.b 7 _INBOX.1 0\r\n\r\nPING\r\nPONG\r\n+OK\r\n-ERR 'Slow Consumer'\r\nHMSG _INBOX.2 3 16 16\r\nNATS/1.0 503\r\n\r\n\r\nHMSG a 4 $JS.ACK.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n";
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
        assert_eq!(ops.len(), 9);
        let (op, _) = decode(b"MSG a.b 7 _INBOX.1 0\r\n\r\n").unwrap().unwrap();
        assert!(matches!(
            op,
            ServerOp::Msg {
                reply: Some(b"_INBOX.1"),
                payload: b"",
                status: None,
                ..
            }
        ));
        let (op, _) = decode(b"HMSG _INBOX.2 3 16 16\r\nNATS/1.0 503\r\n\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(matches!(
            op,
            ServerOp::Msg {
                sid: 3,
                reply: None,
                payload: b"",
                status: Some(b"503")
            }
        ));
        let (op, _) = decode(b"HMSG a 4 $JS.ACK.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
            .unwrap()
            .unwrap();
        assert!(matches!(
            op,
            ServerOp::Msg {
                sid: 4,
                reply: Some(b"$JS.ACK.x"),
                payload: b"hi",
                status: None
            }
        ));
        assert!(matches!(
            decode(b"HMSG a 1 20 10\r\n"),
            Err(NatsError::BadMsg(_))
        ));
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
        assert_eq!(publish_prefix("t.0", None, 256), b"PUB t.0 256\r\n");
        assert_eq!(
            publish_prefix("t.0", Some("_I.1"), 2),
            b"PUB t.0 _I.1 2\r\n"
        );
        let hello = |auth| Hello {
            name: "p0",
            auth,
            greeting: b"INFO {\"nonce\":\"abc\"}\r\n",
        };
        let mut c = Vec::new();
        connect(&hello(None), false, &mut c).unwrap();
        assert!(c.starts_with(b"CONNECT {\"verbose\":false") && c.ends_with(b"}\r\nPING\r\n"));
        // Credentials are JSON strings, escaped.
        let auth = Credentials {
            user: Some("u".into()),
            password: Some(msgbench_model::broker_auth::Secret::new("p\"w\\".into())),
            ..Credentials::default()
        };
        let mut l = Vec::new();
        connect(&hello(Some(&auth)), false, &mut l).unwrap();
        let text = String::from_utf8(l).unwrap();
        assert!(text.contains(r#","user":"u","pass":"p\"w\\"}"#), "{text}");
        // An NKey signs the INFO's nonce: its public key and the signature, never the seed.
        let seed = nkey::encode_seed(&[3u8; 32]);
        let key = nkey::NKey::from_seed(&seed).unwrap();
        let auth = Credentials {
            nkey_seed: Some(msgbench_model::broker_auth::Secret::new(seed.clone())),
            ..Credentials::default()
        };
        let mut n = Vec::new();
        connect(&hello(Some(&auth)), false, &mut n).unwrap();
        let text = String::from_utf8(n).unwrap();
        let expected = format!(
            r#","nkey":"{}","sig":"{}"}}"#,
            key.public(),
            key.sign(b"abc")
        );
        assert!(text.contains(&expected) && !text.contains(&seed), "{text}");
        // No nonce to sign: said, not sent unsigned.
        let silent = Hello {
            greeting: b"INFO {}\r\n",
            ..hello(Some(&auth))
        };
        let e = connect(&silent, false, &mut Vec::new()).unwrap_err();
        assert!(e.contains("no nonce"), "{e}");
    }
}
