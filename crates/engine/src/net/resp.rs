//! The part of RESP (the Redis protocol) the `redis` driver needs: encoding PING, GET and SET
//! as arrays of bulk strings, and parsing one reply. Hand-written rather than taken from a Redis
//! client crate because the driver must own the socket, the pipelining and the clock (a client
//! library would hide exactly what is being measured); the grammar it needs is four lines long.
use msgbench_model::redis::RedisCommand;

/// Longest simple-string / error / integer line accepted before giving up on the peer.
const MAX_LINE: usize = 64 * 1024;
/// Largest bulk string accepted (Redis's own limit).
const MAX_BULK: i64 = 512 << 20;

/// What one reply was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `+...`, `:...`, `$...` or nil: the command worked.
    Ok,
    /// `-ERR ...`: the server refused the command.
    Error,
}

/// Bytes that are not a RESP reply msgbench expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    /// A first byte that starts no reply type.
    #[error("unexpected byte 0x{0:02x} where a RESP reply should start")]
    Garbage(u8),
    /// A reply type this driver never asks for.
    #[error("unexpected RESP array reply to PING/GET/SET")]
    Unexpected,
    /// A line longer than any reply could be.
    #[error("RESP line longer than {MAX_LINE} bytes without CRLF")]
    LineTooLong,
    /// A malformed length.
    #[error("malformed RESP length {0:?}")]
    BadLength(String),
}

/// Encodes commands with a key space; keys are `key:` + 12 digits, like `redis-benchmark -r`.
#[derive(Debug, Clone)]
pub struct CommandEncoder {
    value: Vec<u8>,
    /// `key:__rand_int__` when there is no key space.
    fixed_key: bool,
}

impl CommandEncoder {
    /// An encoder whose SET values have `value_bytes` bytes; `keys == 0` means one fixed key.
    pub fn new(value_bytes: usize, keys: u64) -> Self {
        CommandEncoder {
            value: vec![b'x'; value_bytes],
            fixed_key: keys == 0,
        }
    }

    /// Appends `command` on key number `key` to `out`.
    #[inline]
    pub fn encode(&self, command: RedisCommand, key: u64, out: &mut Vec<u8>) {
        match command {
            RedisCommand::Ping => out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
            RedisCommand::Get => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$16\r\n");
                self.key(key, out);
                out.extend_from_slice(b"\r\n");
            }
            RedisCommand::Set => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$16\r\n");
                self.key(key, out);
                out.extend_from_slice(b"\r\n$");
                push_decimal(self.value.len() as u64, out);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    #[inline]
    fn key(&self, key: u64, out: &mut Vec<u8>) {
        if self.fixed_key {
            out.extend_from_slice(b"key:__rand_int__");
            return;
        }
        out.extend_from_slice(b"key:");
        let mut digits = [b'0'; 12];
        let mut k = key % 1_000_000_000_000;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (k % 10) as u8;
            k /= 10;
        }
        out.extend_from_slice(&digits);
    }
}

fn push_decimal(mut n: u64, out: &mut Vec<u8>) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Parses the reply at the start of `buf`: `Ok(None)` when incomplete, else the reply and the
/// bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf) else {
        return if buf.len() > MAX_LINE {
            Err(RespError::LineTooLong)
        } else if matches!(first, b'+' | b'-' | b':' | b'$' | b'*') {
            Ok(None)
        } else {
            Err(RespError::Garbage(first))
        };
    };
    let after_line = line_end + 2;
    match first {
        b'+' | b':' => Ok(Some((Reply::Ok, after_line))),
        b'-' => Ok(Some((Reply::Error, after_line))),
        b'$' => {
            let text = &buf[1..line_end];
            let len: i64 = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .filter(|&l| (-1..=MAX_BULK).contains(&l))
                .ok_or_else(|| RespError::BadLength(String::from_utf8_lossy(text).into()))?;
            if len < 0 {
                return Ok(Some((Reply::Ok, after_line)));
            }
            let total = after_line + len as usize + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err(RespError::BadLength(format!(
                    "{len} (no CRLF after the data)"
                )));
            }
            Ok(Some((Reply::Ok, total)))
        }
        b'*' => Err(RespError::Unexpected),
        other => Err(RespError::Garbage(other)),
    }
}

#[inline]
fn find_crlf(buf: &[u8]) -> Option<usize> {
    let limit = buf.len().min(MAX_LINE + 2);
    buf[..limit].windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commands_are_encoded_as_redis_benchmark_sends_them() {
        let e = CommandEncoder::new(3, 100);
        let mut out = Vec::new();
        e.encode(RedisCommand::Set, 42, &mut out);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$3\r\nxxx\r\n"
        );
        out.clear();
        CommandEncoder::new(3, 0).encode(RedisCommand::Get, 42, &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n");
    }

    #[test]
    fn replies_parse_and_errors_are_told_apart() {
        assert_eq!(decode(b"+PONG\r\n"), Ok(Some((Reply::Ok, 7))));
        assert_eq!(decode(b"-ERR wrong\r\n+OK"), Ok(Some((Reply::Error, 12))));
        assert_eq!(decode(b"$3\r\nabc\r\n"), Ok(Some((Reply::Ok, 9))));
        assert_eq!(decode(b"$-1\r\n"), Ok(Some((Reply::Ok, 5))));
        assert_eq!(decode(b"$3\r\nab"), Ok(None));
        assert_eq!(decode(b"+PON"), Ok(None));
        assert_eq!(decode(b"hello\r\n"), Err(RespError::Garbage(b'h')));
        assert!(decode(b"$x\r\n").is_err());
        assert!(decode(b"$3\r\nabcde").is_err());
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_or_overrun(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some((_, n))) = decode(&bytes) {
                prop_assert!(n <= bytes.len());
            }
        }

        #[test]
        fn every_prefix_of_a_reply_is_incomplete(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut reply = format!("${}\r\n", data.len()).into_bytes();
            reply.extend_from_slice(&data);
            reply.extend_from_slice(b"\r\n");
            prop_assert_eq!(decode(&reply), Ok(Some((Reply::Ok, reply.len()))));
            for cut in 0..reply.len() {
                prop_assert_eq!(decode(&reply[..cut]), Ok(None));
            }
        }
    }
}
