//! Redis Streams for the `pubsub` system: a message is an entry `XADD`ed to its topic's
//! stream (field `d`, the stream trimmed to about `stream_max_messages` entries), answered
//! with the entry's id; a subscription is a consumer group, created at the stream's end before
//! the run publishes; each of its consumers asks with `XREADGROUP … BLOCK 0 … >` and
//! acknowledges what it got with one `XACK` per reply, written together with its next
//! `XREADGROUP`. RESP framing comes from [`super::resp`]; the reply is walked in place (no
//! copy of an entry), for the same reason as the rest of the project's RESP: the driver owns
//! the socket and the clock.
use crate::net::resp;

/// The RESP array of `args`.
pub fn command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The consumer group `group` of `topic` starts at the stream's end: created (with the stream
/// when missing), or — left by an earlier run — moved there. Two replies: `XGROUP CREATE`'s
/// (`+OK`, or `-BUSYGROUP` when it exists) and `XGROUP SETID`'s (`+OK`).
pub fn reset_group(topic: &str, group: &str, out: &mut Vec<u8>) {
    let (t, g) = (topic.as_bytes(), group.as_bytes());
    command(&[b"XGROUP", b"CREATE", t, g, b"$", b"MKSTREAM"], out);
    command(&[b"XGROUP", b"SETID", t, g, b"$"], out);
}

/// The bytes before a `size`-byte payload added to `topic`, the stream kept to about
/// `max_len` entries (`~`: Redis trims whole nodes, cheaply).
pub fn publish_prefix(topic: &str, size: usize, max_len: u64) -> Vec<u8> {
    let max_len = max_len.to_string();
    let mut out = Vec::new();
    command(
        &[
            b"XADD",
            topic.as_bytes(),
            b"MAXLEN",
            b"~",
            max_len.as_bytes(),
            b"*",
            b"d",
        ],
        &mut out,
    );
    // One more argument, the payload: the array holds 8.
    out[1] = b'8';
    out.extend_from_slice(format!("${size}\r\n").as_bytes());
    out
}

/// One consumer of a consumer group: its `XREADGROUP` (encoded once) and what it owes.
#[derive(Debug, Clone)]
pub struct Reader {
    topic: Vec<u8>,
    group: Vec<u8>,
    read: Vec<u8>,
    /// Ids of the entries of the reply being handled (`XACK`'s arguments).
    ids: Vec<u8>,
    id_count: usize,
}

/// Longest entry id (`<ms>-<seq>`, two 64-bit numbers).
const MAX_ID: usize = 41;

impl Reader {
    /// Consumer `consumer` of `group` on `topic`, asking for up to `count` entries at a time.
    pub fn new(topic: &str, group: &str, consumer: &str, count: u32) -> Reader {
        let mut read = Vec::new();
        let count = count.to_string();
        command(
            &[
                b"XREADGROUP",
                b"GROUP",
                group.as_bytes(),
                consumer.as_bytes(),
                b"COUNT",
                count.as_bytes(),
                b"BLOCK",
                b"0",
                b"STREAMS",
                topic.as_bytes(),
                b">",
            ],
            &mut read,
        );
        Reader {
            topic: topic.as_bytes().to_vec(),
            group: group.as_bytes().to_vec(),
            read,
            ids: Vec::with_capacity(4096),
            id_count: 0,
        }
    }

    /// Appends its next `XREADGROUP`.
    pub fn request(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.read);
    }

    /// Handles the whole replies at the start of `buf`: each entry's payload to `on_entry`;
    /// after a read's reply, its `XACK` and the next `XREADGROUP` appended to `out`. Returns
    /// the bytes used; an error for a refusal (its text) or a reply that is not `XREADGROUP`'s.
    pub fn on_replies(
        &mut self,
        buf: &[u8],
        out: &mut Vec<u8>,
        mut on_entry: impl FnMut(&[u8]),
    ) -> Result<usize, String> {
        let mut at = 0;
        while let Some((reply, used)) = resp::decode(&buf[at..]).map_err(|e| e.to_string())? {
            let element = &buf[at..at + used];
            if reply == resp::Reply::Error {
                return Err(format!(
                    "the broker refused a read: {}",
                    String::from_utf8_lossy(resp::error_text(element, used))
                ));
            }
            match element[0] {
                // XACK's answer: how many it acknowledged.
                b':' => {}
                b'*' | b'_' => {
                    self.entries(element, &mut on_entry)?;
                    self.acknowledge(out);
                    self.request(out);
                }
                other => {
                    return Err(format!(
                        "a reply that is not XREADGROUP's (it began with {:?})",
                        other as char
                    ))
                }
            }
            at += used;
        }
        Ok(at)
    }

    /// Walks one `XREADGROUP` reply (whole): `[[topic, [[id, [field, value, …]], …]]]`, or
    /// nil when it timed out.
    fn entries(&mut self, reply: &[u8], on_entry: &mut impl FnMut(&[u8])) -> Result<(), String> {
        let mut c = Cursor { buf: reply, at: 0 };
        let Some(streams) = c.array()? else {
            return Ok(()); // nil: nothing new
        };
        for _ in 0..streams {
            if c.array()? != Some(2) {
                return Err("an XREADGROUP stream that is not [name, entries]".into());
            }
            c.bulk()?;
            let entries = c.array()?.unwrap_or(0);
            for _ in 0..entries {
                if c.array()? != Some(2) {
                    return Err("an XREADGROUP entry that is not [id, fields]".into());
                }
                let id = c.bulk()?.ok_or("an XREADGROUP entry without its id")?;
                if id.len() > MAX_ID {
                    return Err("an XREADGROUP entry id longer than any Redis writes".into());
                }
                self.ids
                    .extend_from_slice(format!("${}\r\n", id.len()).as_bytes());
                self.ids.extend_from_slice(id);
                self.ids.extend_from_slice(b"\r\n");
                self.id_count += 1;
                // A deleted entry still pending has nil fields.
                let fields = c.array()?.unwrap_or(0);
                if fields % 2 != 0 {
                    return Err("an XREADGROUP entry with an odd number of fields".into());
                }
                for f in 0..fields {
                    let value = c.bulk()?;
                    if f == 1 {
                        on_entry(value.unwrap_or_default());
                    }
                }
            }
        }
        Ok(())
    }

    /// Appends the `XACK` of the ids gathered, if any.
    fn acknowledge(&mut self, out: &mut Vec<u8>) {
        if self.id_count == 0 {
            return;
        }
        out.extend_from_slice(format!("*{}\r\n", 3 + self.id_count).as_bytes());
        for a in [&b"XACK"[..], &self.topic, &self.group] {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(&self.ids);
        self.ids.clear();
        self.id_count = 0;
    }
}

/// `XINFO GROUPS <topic>`: the stream's consumer groups (answered with an error when there
/// is no such stream).
pub fn groups_request(topic: &str, out: &mut Vec<u8>) {
    command(&[b"XINFO", b"GROUPS", topic.as_bytes()], out);
}

/// The names of the groups in an `XINFO GROUPS` reply (whole): an array of flat maps.
pub fn group_names(reply: &[u8]) -> Result<Vec<String>, String> {
    let mut c = Cursor { buf: reply, at: 0 };
    let mut names = Vec::new();
    for _ in 0..c.array()?.unwrap_or(0) {
        let fields = c.array()?.unwrap_or(0);
        for _ in 0..fields / 2 {
            let key = c.value()?;
            let value = c.value()?;
            if key == Some(&b"name"[..]) {
                names.push(String::from_utf8_lossy(value.unwrap_or_default()).into_owned());
            }
        }
    }
    Ok(names)
}

/// Reads RESP elements of a reply already known whole (by [`resp::decode`]).
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn line(&mut self) -> Result<(u8, &'a [u8]), String> {
        let rest = &self.buf[self.at..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a reply cut short")?;
        self.at += end + 2;
        Ok((rest[0], &rest[1..end]))
    }

    fn number(text: &[u8]) -> Result<i64, String> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("a length {:?}", String::from_utf8_lossy(text)))
    }

    /// An array's length; `None` for nil (`*-1` or RESP3's `_`).
    fn array(&mut self) -> Result<Option<u64>, String> {
        match self.line()? {
            (b'*', n) => {
                let n = Self::number(n)?;
                Ok((n >= 0).then_some(n as u64))
            }
            (b'_', _) => Ok(None),
            (kind, _) => Err(format!("an array expected, {:?} found", kind as char)),
        }
    }

    /// A scalar (a bulk string, a simple string or an integer, as its text); `None` for nil.
    fn value(&mut self) -> Result<Option<&'a [u8]>, String> {
        match self.buf.get(self.at) {
            Some(b':' | b'+') => self.line().map(|(_, text)| Some(text)),
            _ => self.bulk(),
        }
    }

    /// A bulk string; `None` for nil.
    fn bulk(&mut self) -> Result<Option<&'a [u8]>, String> {
        match self.line()? {
            (b'$', n) => {
                let n = Self::number(n)?;
                if n < 0 {
                    return Ok(None);
                }
                let start = self.at;
                let end = start + n as usize;
                let data = self.buf.get(start..end).ok_or("a reply cut short")?;
                self.at = end + 2;
                Ok(Some(data))
            }
            (b'_', _) => Ok(None),
            (kind, _) => Err(format!("a string expected, {:?} found", kind as char)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xadd_is_one_resp_array_with_the_payload_last() {
        let mut out = publish_prefix("t.0", 5, 1000);
        out.extend_from_slice(b"hello\r\n");
        assert_eq!(
            out,
            b"*8\r\n$4\r\nXADD\r\n$3\r\nt.0\r\n$6\r\nMAXLEN\r\n$1\r\n~\r\n$4\r\n1000\r\n$1\r\n*\r\n$1\r\nd\r\n$5\r\nhello\r\n"
        );
    }

    fn reply(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut r = format!("*1\r\n*2\r\n$3\r\nt.0\r\n*{}\r\n", entries.len()).into_bytes();
        for (id, payload) in entries {
            r.extend_from_slice(
                format!(
                    "*2\r\n${}\r\n{id}\r\n*2\r\n$1\r\nd\r\n${}\r\n",
                    id.len(),
                    payload.len()
                )
                .as_bytes(),
            );
            r.extend_from_slice(payload);
            r.extend_from_slice(b"\r\n");
        }
        r
    }

    #[test]
    fn a_read_reply_gives_its_payloads_then_one_xack_and_the_next_read() {
        let mut r = Reader::new("t.0", "g", "c0", 100);
        let mut stream = reply(&[("1-0", b"ab"), ("1-1", b"cd")]);
        stream.extend_from_slice(b":2\r\n*-1\r\n");
        let mut got = Vec::new();
        let mut out = Vec::new();
        // Cut anywhere, nothing is handled twice and what is whole is handled.
        let used = r
            .on_replies(&stream[..stream.len() - 3], &mut out, |p| {
                got.push(p.to_vec())
            })
            .unwrap();
        let used2 = r
            .on_replies(&stream[used..], &mut out, |p| got.push(p.to_vec()))
            .unwrap();
        assert_eq!(used + used2, stream.len());
        assert_eq!(got, [b"ab".to_vec(), b"cd".to_vec()]);
        let mut read = Vec::new();
        r.request(&mut read);
        let mut expected =
            b"*5\r\n$4\r\nXACK\r\n$3\r\nt.0\r\n$1\r\ng\r\n$3\r\n1-0\r\n$3\r\n1-1\r\n".to_vec();
        expected.extend_from_slice(&read);
        // The nil reply (a timeout) asks again, with nothing to acknowledge.
        expected.extend_from_slice(&read);
        assert_eq!(out, expected);
    }

    #[test]
    fn group_names_are_read_from_xinfo_groups() {
        let reply = b"*2\r\n*8\r\n$4\r\nname\r\n$10\r\nmsgbench-a\r\n$9\r\nconsumers\r\n:1\r\n$7\r\npending\r\n:0\r\n$3\r\nlag\r\n$-1\r\n*2\r\n$4\r\nname\r\n$5\r\ntheir\r\n";
        assert_eq!(group_names(reply).unwrap(), ["msgbench-a", "their"]);
        assert!(group_names(b"*0\r\n").unwrap().is_empty());
    }

    #[test]
    fn refusals_and_foreign_replies_are_errors() {
        let mut r = Reader::new("t.0", "g", "c0", 10);
        let err = r
            .on_replies(b"-NOGROUP No such key\r\n", &mut Vec::new(), |_| {})
            .unwrap_err();
        assert!(err.contains("NOGROUP"), "{err}");
        assert!(r.on_replies(b"+OK\r\n", &mut Vec::new(), |_| {}).is_err());
        assert!(r
            .on_replies(b"*1\r\n*1\r\n$1\r\nx\r\n", &mut Vec::new(), |_| {})
            .is_err());
    }
}
