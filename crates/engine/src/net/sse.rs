//! Server-Sent Events (`text/event-stream`, the WHATWG HTML standard's § 9.2 "Server-sent
//! events") cut from a response body as it arrives: [`EventParser`] takes the body's bytes and
//! hands out each event's data, type and id; [`Chunked`] first undoes HTTP/1.1's chunked
//! transfer coding, which is how almost every server sends an endless body.
//!
//! Written by hand rather than taken from a crate (`eventsource-stream`, `sse-codec`) because
//! this is a feed's per-message path: those allocate a `String` per field of every event; here
//! an event's data is a slice of the parser's buffer (one `data:` line, the common case) or of
//! one reused buffer (several lines joined), and nothing is allocated once the buffers have
//! grown to the largest event. Every buffer is bounded: an event may hold at most
//! [`MAX_EVENT`] bytes, an id [`MAX_ID`], a chunk-size line [`super::http::MAX_CHUNK_LINE`].

use super::http::MAX_CHUNK_LINE;

/// Most bytes one event may take in the stream (its fields and line ends included).
pub const MAX_EVENT: usize = 1 << 20;
/// Longest event id kept (the `Last-Event-ID` a reconnection sends back).
pub const MAX_ID: usize = 1024;

/// One event, borrowed from the parser until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// Its data lines, joined by `\n`.
    pub data: &'a [u8],
    /// Its type (`event:`), `message` when it gave none.
    pub kind: &'a [u8],
    /// The stream's last event id at this event (ids persist until the next `id:`).
    pub id: Option<&'a [u8]>,
}

/// Bytes that are not an event stream within the bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event longer than [`MAX_EVENT`].
    #[error("an event of more than {MAX_EVENT} bytes (no blank line ends it)")]
    TooLarge,
}

/// Where a field's value lies, relative to the start of the event being read.
type Span = (usize, usize);

/// Reads events from a body, incrementally: [`EventParser::extend`] adds what arrived,
/// [`EventParser::next_event`] hands out the events complete so far.
#[derive(Debug, Default)]
pub struct EventParser {
    /// Body bytes; `buf[start..]` is not yet consumed (the event being read begins there).
    buf: Vec<u8>,
    start: usize,
    /// Bytes of the current event already read (relative to `start`).
    scanned: usize,
    /// The event's first `data:` line.
    first_data: Option<Span>,
    /// Several `data:` lines, joined (reused from event to event).
    joined: Vec<u8>,
    /// The event has more than one `data:` line: its data is `joined`.
    multi: bool,
    /// The event's `event:` value.
    kind: Option<Span>,
    /// The last event id (persists across events and reconnections).
    id: Vec<u8>,
    has_id: bool,
    /// The server's `retry:` (reconnection time, ms), if it said one.
    retry_ms: Option<u64>,
    /// The stream's first bytes have been looked at (a byte-order mark is skipped).
    begun: bool,
    /// The body is over: a `\r` at its very end ends a line.
    ended: bool,
    /// The event found, until the next call.
    ready: Option<Ready>,
    /// The `id:` of the event being read (its length in `pending`), the stream's last event
    /// id once a blank line ends the event.
    pending: Vec<u8>,
    pending_id: Option<usize>,
    /// The last line ended with a `\r` at the end of the bytes: a `\n` first in the next ones
    /// belongs to it.
    skip_lf: bool,
}

/// Where a complete event's fields are in the buffer (absolute).
#[derive(Debug, Clone, Copy)]
struct Ready {
    /// Its one data line (`None`: several, joined).
    data: Option<Span>,
    kind: Option<Span>,
}

impl EventParser {
    /// A parser whose last event id is `id` (a reconnection's).
    pub fn resuming(id: Option<&[u8]>) -> EventParser {
        let mut p = EventParser::default();
        if let Some(id) = id {
            p.id.extend_from_slice(id);
            p.has_id = true;
        }
        p
    }

    /// Ready for a new stream (no last id), its buffers kept: nothing is allocated again.
    pub fn clear(&mut self) {
        let (mut buf, mut joined, mut id, mut pending) = (
            std::mem::take(&mut self.buf),
            std::mem::take(&mut self.joined),
            std::mem::take(&mut self.id),
            std::mem::take(&mut self.pending),
        );
        buf.clear();
        joined.clear();
        id.clear();
        pending.clear();
        *self = EventParser {
            buf,
            joined,
            id,
            pending,
            ..EventParser::default()
        };
    }

    /// Adds body bytes (the events handed out before are gone).
    pub fn extend(&mut self, bytes: &[u8]) {
        self.fill(|buf| buf.extend_from_slice(bytes));
    }

    /// Lets `write` append body bytes to the buffer (the events handed out before are gone).
    pub fn fill<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.ready = None;
        self.compact();
        write(&mut self.buf)
    }

    /// The body is over: what ends at its last byte is read as a line.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// The last event id the stream gave.
    pub fn last_id(&self) -> Option<&[u8]> {
        self.has_id.then_some(&self.id[..])
    }

    /// The reconnection time the server asked for (`retry:`), ms.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Bytes held for the event not yet complete.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Drops what was consumed, keeping the event being read (its spans are relative to it).
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 0 && self.start >= self.buf.capacity() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Reads up to the next complete event whose type is `kind` (any, for `None`): true when
    /// there is one, then [`EventParser::event`] is it.
    pub fn advance(&mut self, kind: Option<&[u8]>) -> Result<bool, SseError> {
        while self.next_event()? {
            let matches = match (kind, self.ready.as_ref().and_then(|r| r.kind)) {
                (None, _) => true,
                (Some(k), Some((a, b))) => k == &self.buf[a..b],
                (Some(k), None) => k == b"message",
            };
            if matches {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The event [`EventParser::advance`] found.
    pub fn event(&self) -> Event<'_> {
        let ready = self.ready.as_ref().expect("an event was found");
        Event {
            data: match ready.data {
                Some((a, b)) => &self.buf[a..b],
                None => &self.joined[..],
            },
            kind: ready.kind.map_or(&b"message"[..], |(a, b)| &self.buf[a..b]),
            id: self.has_id.then_some(&self.id[..]),
        }
    }

    /// Reads up to the next complete event of any type.
    fn next_event(&mut self) -> Result<bool, SseError> {
        self.ready = None;
        if !self.begun {
            if self.buf.len() < 3 && !self.ended && b"\xEF\xBB\xBF".starts_with(&self.buf) {
                return Ok(false);
            }
            if self.buf[self.start..].starts_with(b"\xEF\xBB\xBF") {
                self.start += 3;
            }
            self.begun = true;
        }
        loop {
            if self.skip_lf {
                match self.buf.get(self.start + self.scanned) {
                    None => break,
                    Some(b'\n') => self.scanned += 1,
                    Some(_) => {}
                }
                self.skip_lf = false;
            }
            let Some((line, next)) = self.line() else {
                break;
            };
            let line = (self.scanned, self.scanned + line);
            // A `\r` that ended the bytes so far ends its line now (an event is not held back
            // for the next read); a `\n` that follows it then is the same line end.
            self.skip_lf =
                next == self.buf.len() - self.start && self.buf[self.start + next - 1] == b'\r';
            self.scanned = next;
            if line.0 == line.1 {
                // The id read so far is the stream's last event id from here on, whether or not
                // the event had data (the standard's "dispatch", step 1).
                self.commit_id();
                if self.first_data.is_some() {
                    self.dispatch();
                    return Ok(true);
                }
                // No data: the event is dropped (its type too), as the standard says.
                self.reset();
                continue;
            }
            self.field(line);
        }
        if self.pending() > MAX_EVENT {
            return Err(SseError::TooLarge);
        }
        Ok(false)
    }

    /// The next line's length and where the line after it starts, relative to `start`.
    fn line(&self) -> Option<(usize, usize)> {
        let rest = &self.buf[self.start + self.scanned..];
        let at = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
        if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
            return Some((at, self.scanned + at + 2));
        }
        Some((at, self.scanned + at + 1))
    }

    /// The id the event read so far gave becomes the stream's last event id.
    fn commit_id(&mut self) {
        if let Some(id) = self.pending_id.take() {
            self.id.clear();
            self.id.extend_from_slice(&self.pending[..id]);
            self.has_id = true;
        }
    }

    /// One `name: value` line of the current event.
    fn field(&mut self, (from, to): Span) {
        let line = &self.buf[self.start + from..self.start + to];
        if line[0] == b':' {
            return; // a comment (a heartbeat)
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let skip = usize::from(line.get(colon + 1) == Some(&b' '));
                (&line[..colon], (from + colon + 1 + skip, to))
            }
            None => (line, (to, to)),
        };
        match name {
            b"data" => self.data(value),
            // An empty type is the default one, `message`.
            b"event" => self.kind = (value.0 < value.1).then_some(value),
            b"id" => {
                let id = &self.buf[self.start + value.0..self.start + value.1];
                if !id.contains(&0) && id.len() <= MAX_ID {
                    self.pending.clear();
                    self.pending.extend_from_slice(id);
                    self.pending_id = Some(id.len());
                }
            }
            b"retry" => {
                let v = &self.buf[self.start + value.0..self.start + value.1];
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    if let Some(ms) = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()) {
                        self.retry_ms = Some(ms);
                    }
                }
            }
            _ => {} // unknown fields are ignored
        }
    }

    fn data(&mut self, value: Span) {
        let Some(first) = self.first_data else {
            self.first_data = Some(value);
            return;
        };
        if !self.multi {
            self.joined.clear();
            self.joined
                .extend_from_slice(&self.buf[self.start + first.0..self.start + first.1]);
            self.multi = true;
        }
        self.joined.push(b'\n');
        self.joined
            .extend_from_slice(&self.buf[self.start + value.0..self.start + value.1]);
    }

    /// Hands out the event read so far and starts the next one after it.
    fn dispatch(&mut self) {
        let base = self.start;
        let at = |(a, b): Span| (base + a, base + b);
        let first = self.first_data.take().expect("dispatched with data");
        let multi = std::mem::replace(&mut self.multi, false);
        self.ready = Some(Ready {
            data: (!multi).then(|| at(first)),
            kind: self.kind.take().map(at),
        });
        self.start += self.scanned;
        self.scanned = 0;
    }

    fn reset(&mut self) {
        self.start += self.scanned;
        self.scanned = 0;
        self.first_data = None;
        self.kind = None;
        self.multi = false;
    }
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk: bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines up to a blank one.
    Trailer,
    /// The body is over.
    Done,
}

/// Undoes chunked transfer coding incrementally.
#[derive(Debug)]
pub struct Chunked {
    state: ChunkState,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: ChunkState::Size,
        }
    }
}

impl Chunked {
    /// Moves the body's bytes in `input` to `out`; returns how many input bytes were used
    /// (the rest wait for more), or why the coding is broken.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                ChunkState::Done => return Ok(used),
                ChunkState::Data(left) => {
                    let take = rest.len().min(left.min(usize::MAX as u64) as usize);
                    if take == 0 {
                        return Ok(used);
                    }
                    out.extend_from_slice(&rest[..take]);
                    used += take;
                    self.state = match left - take as u64 {
                        0 => ChunkState::DataEnd,
                        n => ChunkState::Data(n),
                    };
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        return Ok(used);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err("a chunk's data is not followed by CRLF".into());
                    }
                    used += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Size | ChunkState::Trailer => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() > MAX_CHUNK_LINE {
                            return Err(format!(
                                "a chunk-size line longer than {MAX_CHUNK_LINE} bytes"
                            ));
                        }
                        return Ok(used);
                    };
                    let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
                    used += end + 1;
                    self.state = self.after_line(line)?;
                }
            }
        }
    }

    /// The body ended with its last chunk.
    pub fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    fn after_line(&self, line: &[u8]) -> Result<ChunkState, String> {
        if self.state == ChunkState::Trailer {
            return Ok(if line.is_empty() {
                ChunkState::Done
            } else {
                ChunkState::Trailer
            });
        }
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size).unwrap_or("").trim();
        match u64::from_str_radix(size, 16) {
            Ok(0) => Ok(ChunkState::Trailer),
            Ok(n) => Ok(ChunkState::Data(n)),
            Err(_) => Err(format!(
                "a chunk size that is not hexadecimal: {:?}",
                String::from_utf8_lossy(&line[..line.len().min(40)])
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(parser: &mut EventParser) -> Vec<(String, String, Option<String>)> {
        let mut out = Vec::new();
        while parser.advance(None).unwrap() {
            let e = parser.event();
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            out.push((s(e.data), s(e.kind), e.id.map(s)));
        }
        out
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBF: hello\r\nretry: 2500\r\n\r\nid: 7\nevent: tick\ndata: {\"seq\":7}\n\ndata:a\rdata: b\r\rdata\n\nevent: lost\n\nid\ndata: x\n\n";

    fn expected() -> Vec<(String, String, Option<String>)> {
        let e = |d: &str, k: &str, i: Option<&str>| (d.into(), k.into(), i.map(str::to_string));
        vec![
            e("{\"seq\":7}", "tick", Some("7")),
            e("a\nb", "message", Some("7")),
            e("", "message", Some("7")),
            e("x", "message", Some("")),
        ]
    }

    #[test]
    fn the_standards_fields_line_ends_and_comments_are_read() {
        let mut p = EventParser::default();
        p.extend(STREAM);
        assert_eq!(events(&mut p), expected());
        assert_eq!(p.retry_ms(), Some(2500));
        assert_eq!(p.last_id(), Some(&b""[..]));
    }

    #[test]
    fn events_come_out_the_same_whatever_the_reads_cut() {
        for cut in 1..STREAM.len() {
            let mut p = EventParser::default();
            let mut got = Vec::new();
            for piece in STREAM.chunks(cut) {
                p.extend(piece);
                got.extend(events(&mut p));
            }
            p.end();
            got.extend(events(&mut p));
            assert_eq!(got, expected(), "reads of {cut} bytes");
        }
    }

    #[test]
    fn an_event_without_end_is_bounded() {
        let mut p = EventParser::default();
        let line = format!("data: {}\n", "x".repeat(1000));
        for _ in 0..(MAX_EVENT / 1000 + 2) {
            p.extend(line.as_bytes());
            if p.advance(None).is_err() {
                return;
            }
        }
        panic!("an endless event was not refused");
    }

    #[test]
    fn only_events_of_the_type_asked_for_are_handed_out() {
        let mut p = EventParser::default();
        p.extend(b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\ndata: 3\n\nevent: a\ndata: 4\n\n");
        let mut got = Vec::new();
        while p.advance(Some(b"a")).unwrap() {
            got.push(p.event().data.to_vec());
        }
        assert_eq!(got, [b"1".to_vec(), b"4".to_vec()]);
        p.extend(b"data: 5\n\n");
        assert!(p.advance(Some(b"message")).unwrap());
        assert_eq!(p.event().data, b"5");
    }

    #[test]
    fn an_id_counts_once_its_event_ends_and_a_lone_cr_ends_a_line_at_once() {
        let mut p = EventParser::default();
        p.extend(b"id: 1\rdata: a\r\rid: 2\rdata: b\r");
        // The first event is whole; the second's id is not the stream's yet.
        assert!(p.advance(None).unwrap());
        assert_eq!((p.event().data, p.event().id), (&b"a"[..], Some(&b"1"[..])));
        assert!(!p.advance(None).unwrap());
        assert_eq!(p.last_id(), Some(&b"1"[..]));
        // The blank line ends it at once; a `\n` after the last `\r` is the same line end.
        p.extend(b"\r");
        assert!(p.advance(None).unwrap());
        assert_eq!(p.event().id, Some(&b"2"[..]));
        p.extend(b"\nevent:\ndata: c\n\nretry: 99999999999999999999999\n\n");
        assert!(p.advance(Some(b"message")).unwrap());
        assert_eq!(p.event().data, b"c");
        assert_eq!(p.retry_ms(), None);
    }

    #[test]
    fn a_resumed_stream_keeps_its_last_id() {
        let mut p = EventParser::resuming(Some(b"41"));
        p.extend(b"data: y\n\n");
        assert_eq!(events(&mut p)[0].2.as_deref(), Some("41"));
    }

    #[test]
    fn chunked_coding_is_undone_whatever_the_reads_cut() {
        let body = b"7\r\ndata: a\r\n2;ext=1\r\n\n\n\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for cut in 1..body.len() {
            let (mut c, mut out, mut held) = (Chunked::default(), Vec::new(), Vec::new());
            for piece in body.chunks(cut) {
                held.extend_from_slice(piece);
                let used = c.decode(&held, &mut out).unwrap();
                held.drain(..used);
            }
            assert!(c.done(), "reads of {cut}");
            assert_eq!(out, b"data: a\n\n");
        }
        let mut c = Chunked::default();
        assert!(c.decode(b"zz\r\n", &mut Vec::new()).is_err());
        let mut c = Chunked::default();
        assert!(c.decode(b"1\r\nabc", &mut Vec::new()).is_err());
    }
}
