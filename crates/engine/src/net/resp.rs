//! The part of RESP (the Redis protocol) the `redis` driver needs: encoding any command as an
//! array of bulk strings from a template (`["HSET", "user:{key}", "name", "{data}"]`), and
//! finding where one reply ends. Hand-written rather than taken from a Redis client crate
//! because the driver must own the socket, the pipelining and the clock (a client library would
//! hide exactly what is being measured), and because a request must cost one copy: the template
//! is encoded once and each request copies it and writes its key's 12 digits in place.
use super::push_decimal;

/// Longest simple-string / error / integer line accepted before giving up on the peer.
const MAX_LINE: usize = 64 * 1024;
/// Largest bulk string accepted (Redis's own limit).
const MAX_BULK: i64 = 512 << 20;
/// Most elements one reply may announce (nested ones included): a peer announcing more is not
/// a Redis reply worth waiting for.
const MAX_ELEMENTS: u64 = 1 << 32;
/// Deepest nesting of aggregates in one reply, the reply itself counted (Redis's own replies
/// nest a few levels: XREAD's five). Past it the reply is refused, not followed down.
pub const MAX_DEPTH: usize = 64;
/// Width of a key number in a key, as `redis-benchmark -r` writes it; `__rand_int__` (the one
/// key without a key space) has the same width.
const KEY_DIGITS: usize = 12;

/// What one reply was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Anything but a top-level error: the command worked.
    Ok,
    /// `-ERR ...` (or RESP3 `!`): the server refused the command.
    Error,
}

/// Bytes that are not a RESP reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    /// A first byte that starts no reply type.
    #[error("unexpected byte 0x{0:02x} where a RESP reply should start")]
    Garbage(u8),
    /// A line longer than any reply could be.
    #[error("RESP line longer than {MAX_LINE} bytes without CRLF")]
    LineTooLong,
    /// A malformed length.
    #[error("malformed RESP length {0:?}")]
    BadLength(String),
    /// More bytes than the bound without a whole reply (the pushes before it included).
    #[error("a RESP reply of more than {0} bytes (redis.max_reply)")]
    TooLarge(usize),
    /// Aggregates nested deeper than [`MAX_DEPTH`].
    #[error("a RESP reply nested more than {MAX_DEPTH} deep")]
    TooDeep,
}

/// One command, encoded once: its bytes and where its keys' digits go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTemplate {
    bytes: Vec<u8>,
    key_at: Vec<usize>,
}

impl CommandTemplate {
    /// The RESP array of `args`, `{data}` replaced by `value_bytes` bytes of `x` and `{key}` by
    /// a 12-character slot (`__rand_int__` when `fixed_key`: one key, as redis-benchmark
    /// without `-r`).
    pub fn new(args: &[String], value_bytes: usize, fixed_key: bool) -> CommandTemplate {
        let mut bytes = vec![b'*'];
        push_decimal(args.len() as u64, &mut bytes);
        bytes.extend_from_slice(b"\r\n");
        let mut key_at = Vec::new();
        for arg in args {
            let (content, keys) = expand(arg, value_bytes, fixed_key);
            bytes.push(b'$');
            push_decimal(content.len() as u64, &mut bytes);
            bytes.extend_from_slice(b"\r\n");
            let base = bytes.len();
            bytes.extend_from_slice(&content);
            if !fixed_key {
                key_at.extend(keys.iter().map(|k| base + k));
            }
            bytes.extend_from_slice(b"\r\n");
        }
        CommandTemplate { bytes, key_at }
    }

    /// Appends the command on key number `key` to `out`.
    #[inline]
    pub fn encode(&self, key: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        if self.key_at.is_empty() {
            return;
        }
        let mut digits = [b'0'; KEY_DIGITS];
        let mut k = key % 1_000_000_000_000;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (k % 10) as u8;
            k /= 10;
        }
        for &at in &self.key_at {
            out[start + at..start + at + KEY_DIGITS].copy_from_slice(&digits);
        }
    }
}

/// One argument with its placeholders filled: the bytes, and where each `{key}` slot starts.
fn expand(arg: &str, value_bytes: usize, fixed_key: bool) -> (Vec<u8>, Vec<usize>) {
    let (mut out, mut keys) = (Vec::new(), Vec::new());
    let mut rest = arg;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("{key}") {
            keys.push(out.len());
            out.extend_from_slice(if fixed_key {
                b"__rand_int__"
            } else {
                b"000000000000"
            });
            rest = after;
        } else if let Some(after) = rest.strip_prefix("{data}") {
            out.resize(out.len() + value_bytes, b'x');
            rest = after;
        } else {
            let c = rest.chars().next().expect("not empty");
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            rest = &rest[c.len_utf8()..];
        }
    }
    (out, keys)
}

/// Finds the reply at the start of `buf` without a scan kept between calls (and without a
/// bound on its bytes): [`Scanner::decode`] with a fresh scanner. For callers that hold a
/// whole answer, or bound their buffer themselves (Redis Streams' consumers).
pub fn decode(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    Scanner::default().decode(buf, usize::MAX)
}

/// Where the scan of an incomplete reply stopped, kept between reads so that what was
/// scanned is not scanned again: a reply of a million small elements arriving a few at a time
/// costs one pass, not one per read. One per connection; [`Scanner::reset`] when its bytes
/// start again.
#[derive(Debug, Default, Clone)]
pub struct Scanner {
    /// Where the element being scanned starts (after the pushes before it).
    start: usize,
    /// The first byte not scanned yet.
    pos: usize,
    /// Elements still due at each level of nesting, the innermost last; empty between
    /// elements.
    due: Vec<u64>,
    /// Elements the reply announced so far (nested ones included).
    announced: u64,
}

impl Scanner {
    /// Forgets the scan: the bytes start again (a new connection).
    pub fn reset(&mut self) {
        self.start = 0;
        self.pos = 0;
        self.due.clear();
        self.announced = 0;
    }

    /// Finds the reply at the start of `buf` — the same bytes as at the previous call, and
    /// maybe more after them: `Ok(None)` while incomplete, else whether it is an error and the
    /// bytes it took (the pushes before it included). RESP2 and RESP3: simple lines
    /// (`+ - : _ , # (`), bulk strings (`$ = !`), aggregates (`* ~` of n elements, `%` of n
    /// pairs) nested up to [`MAX_DEPTH`] (counted, not recursed). RESP3 out-of-band data is
    /// not a reply: an attribute (`|`) belongs to the element after it, and a push (`>`, e.g.
    /// a client-tracking invalidation) is skipped, so replies stay matched to their requests.
    /// More than `max` bytes without a whole reply is an error: a peer that announces 2^32
    /// elements and sends them forever, or pushes without end, holds no more than that.
    pub fn decode(&mut self, buf: &[u8], max: usize) -> Result<Option<(Reply, usize)>, RespError> {
        loop {
            if self.due.is_empty() {
                self.start = self.pos;
                if self.pos >= buf.len() {
                    return incomplete(buf, max);
                }
                self.due.push(1);
                self.announced = 1;
            }
            if !self.scan(buf, max)? {
                return incomplete(buf, max);
            }
            let first = buf[self.start];
            if first == b'>' {
                continue; // a push between replies: the reply comes after it
            }
            let reply = if matches!(first, b'-' | b'!') {
                Reply::Error
            } else {
                Reply::Ok
            };
            let used = self.pos;
            self.reset();
            return Ok(Some((reply, used)));
        }
    }

    /// Scans elements from `pos` until the element begun at `start` is whole (true) or the
    /// bytes run out (false).
    fn scan(&mut self, buf: &[u8], max: usize) -> Result<bool, RespError> {
        while let Some(due) = self.due.last_mut() {
            if *due == 0 {
                self.due.pop();
                continue;
            }
            let rest = &buf[self.pos..];
            let Some((used, nested)) = element_head(rest, max)? else {
                return Ok(false);
            };
            *due -= 1;
            self.pos += used;
            if nested > 0 {
                if self.due.len() >= MAX_DEPTH {
                    return Err(RespError::TooDeep);
                }
                self.announced += nested;
                if self.announced > MAX_ELEMENTS {
                    return Err(RespError::BadLength(format!("{} elements", self.announced)));
                }
                self.due.push(nested);
            }
        }
        Ok(true)
    }
}

/// The element at the start of `rest` without what it nests: its bytes and how many elements
/// it nests; `None` when incomplete.
fn element_head(rest: &[u8], max: usize) -> Result<Option<(usize, u64)>, RespError> {
    let Some(&first) = rest.first() else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(rest) else {
        return if rest.len() > MAX_LINE {
            Err(RespError::LineTooLong)
        } else if b"+-:_,#($=!*~>%|".contains(&first) {
            Ok(None)
        } else {
            Err(RespError::Garbage(first))
        };
    };
    let after_line = line_end + 2;
    match first {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some((after_line, 0))),
        b'$' | b'=' | b'!' => {
            let len = length(&rest[1..line_end], MAX_BULK)?;
            if len < 0 {
                return Ok(Some((after_line, 0)));
            }
            if len as u64 > max as u64 {
                return Err(RespError::TooLarge(max));
            }
            let total = after_line + len as usize + 2;
            if rest.len() < total {
                return Ok(None);
            }
            if &rest[total - 2..total] != b"\r\n" {
                return Err(RespError::BadLength(format!(
                    "{len} (no CRLF after the data)"
                )));
            }
            Ok(Some((total, 0)))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = length(&rest[1..line_end], i64::from(u32::MAX))?.max(0) as u64;
            let nested = match first {
                b'%' => 2 * n,
                b'|' => 2 * n + 1, // its pairs, then the element it describes
                _ => n,
            };
            Ok(Some((after_line, nested)))
        }
        other => Err(RespError::Garbage(other)),
    }
}

/// Not a whole reply yet: waiting is fine up to `max` bytes.
fn incomplete(buf: &[u8], max: usize) -> Result<Option<(Reply, usize)>, RespError> {
    if buf.len() > max {
        Err(RespError::TooLarge(max))
    } else {
        Ok(None)
    }
}

/// The text of the error reply at the start of `buf` (`size` bytes): `-ERR …` or RESP3's
/// `!<len>` blob error, without its framing.
pub fn error_text(buf: &[u8], size: usize) -> &[u8] {
    let body = &buf[1..size.saturating_sub(2).max(1)];
    if buf[0] == b'!' {
        match find_crlf(body) {
            Some(i) => &body[i + 2..],
            None => body,
        }
    } else {
        body
    }
}

/// `AUTH [user] password` as an array of bulk strings (a password may hold any byte).
pub fn auth_command(user: Option<&str>, password: &str, out: &mut Vec<u8>) {
    let mut parts: Vec<&[u8]> = vec![b"AUTH"];
    if let Some(u) = user {
        parts.push(u.as_bytes());
    }
    parts.push(password.as_bytes());
    out.push(b'*');
    push_decimal(parts.len() as u64, out);
    out.extend_from_slice(b"\r\n");
    for p in parts {
        out.push(b'$');
        push_decimal(p.len() as u64, out);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// The answer to a login at the start of `buf`: `None` while incomplete; `Ok` for any reply
/// but an error; the error's words otherwise (or why the bytes are no reply).
pub fn login_answer(buf: &[u8]) -> Option<Result<(), String>> {
    match decode(buf) {
        Ok(None) => None,
        Ok(Some((Reply::Error, used))) => Some(Err(
            String::from_utf8_lossy(error_text(buf, used)).into_owned()
        )),
        Ok(Some(_)) => Some(Ok(())),
        Err(e) => Some(Err(format!("not a Redis reply ({e})"))),
    }
}

/// A length field: -1 (nil) up to `max`.
fn length(text: &[u8], max: i64) -> Result<i64, RespError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .filter(|&l| (-1..=max).contains(&l))
        .ok_or_else(|| RespError::BadLength(String::from_utf8_lossy(text).into()))
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
    fn a_login_is_an_auth_command_and_its_answer_ok_or_the_servers_words() {
        let mut out = Vec::new();
        auth_command(Some("u"), "p w", &mut out);
        assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$3\r\np w\r\n");
        out.clear();
        auth_command(None, "pw", &mut out);
        assert_eq!(out, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n");
        assert_eq!(login_answer(b"+OK\r\n"), Some(Ok(())));
        assert_eq!(login_answer(b"+O"), None);
        assert_eq!(
            login_answer(b"-WRONGPASS bad\r\n"),
            Some(Err("WRONGPASS bad".into()))
        );
        assert!(matches!(login_answer(b"HTTP/1.1 200 OK\r\n"), Some(Err(_))));
    }

    use msgbench_model::redis::RedisCommand;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn commands_are_encoded_as_redis_benchmark_sends_them() {
        let set = CommandTemplate::new(&RedisCommand::Set.args(), 3, false);
        let mut out = Vec::new();
        set.encode(42, &mut out);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$3\r\nxxx\r\n"
        );
        out.clear();
        CommandTemplate::new(&RedisCommand::Get.args(), 3, true).encode(42, &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n");
        out.clear();
        CommandTemplate::new(&RedisCommand::Ping.args(), 3, false).encode(7, &mut out);
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn any_command_fills_every_key_slot_and_its_data() {
        let t = CommandTemplate::new(
            &args(&["HSET", "user:{key}", "f{key}", "{data}", "é"]),
            2,
            false,
        );
        let mut out = b"before".to_vec();
        t.encode(1_000_000_000_007, &mut out);
        assert_eq!(
            out,
            "before*5\r\n$4\r\nHSET\r\n$17\r\nuser:000000000007\r\n$13\r\nf000000000007\r\n$2\r\nxx\r\n$2\r\né\r\n"
                .as_bytes()
        );
    }

    #[test]
    fn aggregates_and_resp3_replies_are_read_whole() {
        let hgetall = b"*4\r\n$4\r\nname\r\n$3\r\nbob\r\n$3\r\nage\r\n:3\r\n+next";
        assert_eq!(decode(hgetall), Ok(Some((Reply::Ok, hgetall.len() - 5))));
        assert_eq!(decode(b"*-1\r\n"), Ok(Some((Reply::Ok, 5))));
        assert_eq!(decode(b"*0\r\n"), Ok(Some((Reply::Ok, 4))));
        let nested = b"*2\r\n*1\r\n-ERR inner\r\n:1\r\n";
        assert_eq!(
            decode(nested),
            Ok(Some((Reply::Ok, nested.len()))),
            "an inner error is data"
        );
        let map = b"%1\r\n+k\r\n_\r\n";
        assert_eq!(decode(map), Ok(Some((Reply::Ok, map.len()))));
        assert_eq!(decode(b"!3\r\nbad\r\n"), Ok(Some((Reply::Error, 9))));
        assert_eq!(error_text(b"!3\r\nbad\r\n", 9), b"bad");
        assert_eq!(error_text(b"-ERR no\r\n", 9), b"ERR no");
        // An attribute belongs to the reply after it; a push is not a reply.
        let attr = b"|1\r\n+ttl\r\n:3\r\n+OK\r\n";
        assert_eq!(decode(attr), Ok(Some((Reply::Ok, attr.len()))));
        let push = b">2\r\n+invalidate\r\n*0\r\n-ERR x\r\n";
        assert_eq!(decode(push), Ok(Some((Reply::Error, push.len()))));
        assert_eq!(decode(&push[..push.len() - 3]), Ok(None));
        for cut in 0..hgetall.len() - 5 {
            assert_eq!(decode(&hgetall[..cut]), Ok(None), "{cut}");
        }
        assert!(decode(b"*99999999999\r\n").is_err());
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

    #[test]
    fn a_scan_goes_on_where_it_stopped_and_finds_what_a_fresh_one_finds() {
        let hgetall = b"*4\r\n$4\r\nname\r\n$3\r\nbob\r\n$3\r\nage\r\n:3\r\n";
        let push = b">2\r\n+invalidate\r\n*0\r\n";
        let whole = [&push[..], hgetall, b"+OK\r\n"].concat();
        let mut scan = Scanner::default();
        let first = push.len() + hgetall.len();
        for end in 0..first {
            assert_eq!(scan.decode(&whole[..end], 1 << 20), Ok(None), "{end}");
        }
        assert_eq!(
            scan.decode(&whole[..first], 1 << 20),
            Ok(Some((Reply::Ok, first)))
        );
        // The next reply starts a fresh scan.
        assert_eq!(
            scan.decode(&whole[first..], 1 << 20),
            Ok(Some((Reply::Ok, 5)))
        );
    }

    #[test]
    fn a_reply_without_end_pushes_without_a_reply_and_deep_nesting_are_bounded() {
        // 2^32 − 1 elements announced, then elements for ever: refused past the bound.
        let mut endless = b"*4294967295\r\n".to_vec();
        let mut scan = Scanner::default();
        let mut refused = None;
        for _ in 0..10_000 {
            endless.extend_from_slice(b"+element\r\n");
            match scan.decode(&endless, 64 << 10) {
                Ok(None) => {}
                other => {
                    refused = Some(other);
                    break;
                }
            }
        }
        assert_eq!(refused, Some(Err(RespError::TooLarge(64 << 10))));
        assert!(endless.len() <= (64 << 10) + 11, "{}", endless.len());
        // Pushes and no reply: the same bound.
        let pushes = b">1\r\n+x\r\n".repeat(10_000);
        assert_eq!(
            Scanner::default().decode(&pushes, 64 << 10),
            Err(RespError::TooLarge(64 << 10))
        );
        // A bulk larger than the bound is refused when announced, not when it has come.
        assert_eq!(
            Scanner::default().decode(b"$500000000\r\nxx", 64 << 20),
            Err(RespError::TooLarge(64 << 20))
        );
        let deep = b"*1\r\n".repeat(1_000_000);
        assert_eq!(decode(&deep), Err(RespError::TooDeep));
        let fits = [b"*1\r\n".repeat(MAX_DEPTH - 1), b":1\r\n".to_vec()].concat();
        assert_eq!(decode(&fits), Ok(Some((Reply::Ok, fits.len()))));
    }

    proptest! {
        #[test]
        fn a_scan_fed_in_pieces_agrees_with_one_over_the_whole(
            cuts in proptest::collection::vec(0usize..60, 0..8),
        ) {
            let whole = b">1\r\n+x\r\n|1\r\n+ttl\r\n:3\r\n%2\r\n+a\r\n*2\r\n$1\r\nb\r\n_\r\n+c\r\n-ERR d\r\n";
            let expected = decode(whole);
            let mut scan = Scanner::default();
            let mut ends: Vec<usize> = cuts.into_iter().map(|c| c.min(whole.len())).collect();
            ends.sort();
            for end in ends {
                let found = scan.decode(&whole[..end], 1 << 20);
                prop_assert!(found == Ok(None) || found == expected, "{:?} at {}", found, end);
                if found.is_ok_and(|f| f.is_some()) {
                    return Ok(());
                }
            }
            prop_assert_eq!(scan.decode(whole, 1 << 20), expected);
        }

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
