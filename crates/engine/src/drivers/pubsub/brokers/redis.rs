//! Redis Pub/Sub: `PUBLISH` (answered with the number of subscribers reached) and `SUBSCRIBE`,
//! messages as RESP `message` arrays ([`crate::net::resp`]); at most once, no shared
//! subscriptions.
use crate::drivers::pubsub::client::BrokerClient;
use crate::drivers::pubsub::protocol::{BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::net::resp;
use msgbench_model::broker_auth::Credentials;
use msgbench_model::pubsub::PubsubConfig;

/// Redis Pub/Sub.
pub struct Redis;

/// `PING`: what a Redis connection sends first (answered `+PONG`).
pub const HELLO: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// A Redis connection's opening: `AUTH [user] password` when the scenario gives one (its
/// `+OK` read on the way; a refusal, `-WRONGPASS …`, fails the opening in Redis's words),
/// then `PING`, answered by `+PONG`.
pub fn hello(auth: Option<&Credentials>, out: &mut Vec<u8>) {
    login(auth, out);
    out.extend_from_slice(HELLO);
}

/// `AUTH [user] password`, when the scenario gives a password (answered `+OK`).
pub fn login(auth: Option<&Credentials>, out: &mut Vec<u8>) {
    if let Some(password) = auth.and_then(|a| a.password.as_ref()) {
        let user = auth.and_then(|a| a.user.as_deref());
        crate::net::resp::auth_command(user, password.expose(), out);
    }
}

impl BrokerProtocol for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn hello(&self, h: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        hello(h.auth, out);
        Ok(())
    }

    fn subscribe(&self, topic: &str, _group: Option<&str>, _sid: u64, _qos: u8, out: &mut Vec<u8>) {
        out.extend_from_slice(
            format!("*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{topic}\r\n", topic.len()).as_bytes(),
        );
    }

    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        decode(buf)
    }
}

impl BrokerClient for Redis {
    fn publish_frame(&self, config: &PubsubConfig, topic: &str, _: Option<&str>) -> PublishFrame {
        PublishFrame {
            prefix: format!(
                "*3\r\n$7\r\nPUBLISH\r\n${}\r\n{topic}\r\n${}\r\n",
                topic.len(),
                config.message_bytes
            )
            .into_bytes(),
            id_at: None,
            suffix: b"\r\n",
        }
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}

/// A RESP reply: a `message` push, an integer (a PUBLISH's reply), an error, or other.
fn decode(buf: &[u8]) -> Result<Option<(Incoming<'_>, usize)>, String> {
    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n";
    let Some((reply, used)) = resp::decode(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let element = &buf[..used];
    let incoming = if reply == resp::Reply::Error {
        Incoming::Error(resp::error_text(buf, used))
    } else if element[0] == b':' {
        Incoming::Ack
    } else if let Some(rest) = element.strip_prefix(MESSAGE) {
        let (_channel, rest) = bulk(rest).ok_or("a Redis message without its channel")?;
        let (payload, _) = bulk(rest).ok_or("a Redis message without its payload")?;
        Incoming::Message { payload, ack: None }
    } else if element.starts_with(b"+PONG") || element.starts_with(b"*3\r\n$9\r\nsubscribe\r\n") {
        Incoming::Reply
    } else {
        Incoming::Other
    };
    Ok(Some((incoming, used)))
}

/// The bulk string at the start of `buf` (already known complete) and what follows it.
fn bulk(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = buf.strip_prefix(b"$")?;
    let line = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..line]).ok()?.parse().ok()?;
    let data = rest.get(line + 2..line + 2 + len)?;
    Some((data, rest.get(line + 4 + len..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_messages_acks_and_errors_are_told_apart() {
        let stream = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nt.00\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$4\r\nt.00\r\n$5\r\nhello\r\n:2\r\n-ERR wrong\r\n+PONG\r\n";
        let mut seen = Vec::new();
        let mut at = 0;
        while let Some((inc, used)) = Redis.decode(&stream[at..]).unwrap() {
            seen.push(inc);
            for cut in at..at + used {
                assert_eq!(Redis.decode(&stream[at..cut]).unwrap(), None);
            }
            at += used;
        }
        assert_eq!(
            seen,
            [
                Incoming::Reply,
                Incoming::Message {
                    payload: b"hello",
                    ack: None
                },
                Incoming::Ack,
                Incoming::Error(b"ERR wrong"),
                Incoming::Reply
            ]
        );
        assert!(Redis.decode(b"GARBAGE\r\n").is_err());
    }
}
