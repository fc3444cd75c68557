//! An HTTP/1.1 response whose body is a stream of Server-Sent Events, followed as its bytes
//! arrive (`[http.requests.NAME] stream = "sse"`): each event with data is a message, timed by
//! the read that brought it ([`crate::streamed::StreamFigures`]). The response's end is still
//! found by [`super::http`]'s framing; this only reads its body's events on the way, once each
//! (the chunks it has decoded are not walked again).
use super::sse::{Chunked, EventParser};
use crate::streamed::StreamFigures;

/// How the body ends.
#[derive(Debug)]
enum Body {
    /// Chunked coding.
    Chunked(Chunked),
    /// `Content-Length`: bytes left.
    Length(u64),
    /// The connection's close.
    Close,
}

/// One streamed response being read.
#[derive(Debug, Default)]
pub struct SseResponse {
    /// Where the body starts in the response's bytes, once the head is whole; and whether its
    /// status is a success (only then are its events messages).
    head: Option<(usize, bool)>,
    body: Option<Body>,
    /// Body bytes (as sent) taken so far.
    taken: usize,
    /// A success whose content-type is not `text/event-stream`: that type.
    not_a_stream: Option<String>,
    parser: EventParser,
    /// What it showed so far.
    pub figures: StreamFigures,
}

impl SseResponse {
    /// Ready for the next response.
    pub fn start(&mut self) {
        self.head = None;
        self.body = None;
        self.taken = 0;
        self.not_a_stream = None;
        self.parser.clear();
        self.figures.clear();
    }

    /// A success that is no event stream: its content-type (the request fails).
    pub fn not_a_stream(&self) -> Option<&str> {
        self.not_a_stream.as_deref()
    }

    /// A stream is being read (a success's head, at least, has come).
    pub fn in_progress(&self) -> bool {
        matches!(self.head, Some((_, true)))
    }

    /// Reads what arrived of the response at the start of `bytes` by `now`: new events with
    /// data are messages (one whose data is `done` ends the stream uncounted).
    pub fn advance(&mut self, bytes: &[u8], now: u64, done: &[u8]) -> Result<(), String> {
        let Some((at, ok)) = self.head.or_else(|| self.read_head(bytes)) else {
            return Ok(());
        };
        if !ok {
            return Ok(());
        }
        let raw = &bytes[(at + self.taken).min(bytes.len())..];
        self.taken += match self.body.get_or_insert(Body::Close) {
            Body::Chunked(chunks) => self.parser.fill(|out| chunks.decode(raw, out))?,
            Body::Length(left) => {
                let take = raw.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                self.parser.extend(&raw[..take]);
                take
            }
            Body::Close => {
                self.parser.extend(raw);
                raw.len()
            }
        };
        while self.parser.advance(None).map_err(|e| e.to_string())? {
            self.figures.event(now, self.parser.event().data, done);
        }
        Ok(())
    }

    /// The final response head at the start of `bytes` (1xx interim ones skipped), once whole.
    fn read_head(&mut self, bytes: &[u8]) -> Option<(usize, bool)> {
        let mut at = 0;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 100];
            let mut response = httparse::Response::new(&mut headers);
            let size = match response.parse(&bytes[at..]) {
                Ok(httparse::Status::Complete(n)) => n,
                // Incomplete, or not HTTP: the framing says which, and fails it.
                _ => return None,
            };
            let status = response.code.unwrap_or(0);
            at += size;
            // Interim answers come before the final one (101 is final: the connection
            // becomes something else, and no event stream).
            if (100..200).contains(&status) && status != 101 {
                continue;
            }
            let header = |name: &str| {
                (response.headers.iter())
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
            };
            self.body = Some(
                if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
                    Body::Chunked(Chunked::default())
                } else if let Some(n) = header("content-length").and_then(|n| n.trim().parse().ok())
                {
                    Body::Length(n)
                } else {
                    Body::Close
                },
            );
            // Only a success with a body holds events (a 204 has none).
            let success = (200..300).contains(&status) && status != 204;
            let kind = header("content-type").unwrap_or_default();
            if success && !kind.trim_start().starts_with("text/event-stream") {
                self.not_a_stream = Some(if kind.is_empty() { "none".into() } else { kind });
            }
            self.head = Some((at, success && self.not_a_stream.is_none()));
            return self.head;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunked event stream of these chunks, and where each chunk ends in it.
    fn chunked(parts: &[&str]) -> (Vec<u8>, Vec<usize>) {
        let mut r = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        let mut ends = Vec::new();
        for p in parts {
            r.extend(format!("{:x}\r\n{p}\r\n", p.len()).bytes());
            ends.push(r.len());
        }
        r.extend(b"0\r\n\r\nHTTP/1.1 200 OK\r\n");
        (r, ends)
    }

    #[test]
    fn events_are_messages_timed_by_the_read_that_brought_them() {
        let (bytes, ends) = chunked(&[
            "data: {\"t\":\"Hel\"}\n\ndata: ",
            "{\"t\":\"lo\"}\n\n",
            "data: [DONE]\n\n",
        ]);
        // Read in pieces, each at its own time: the messages take the time of their piece.
        let mut r = SseResponse::default();
        let cuts = [ends[0] - 20, ends[0], ends[1], bytes.len()];
        for (i, &cut) in cuts.iter().enumerate() {
            r.advance(&bytes[..cut], 1000 * (i as u64 + 1), b"[DONE]")
                .unwrap();
        }
        let f = &r.figures;
        assert_eq!((f.messages, f.bytes), (2, 21), "{f:?}");
        assert_eq!(f.first_ns, 2000);
        assert_eq!(f.gaps_ns, [1000]);
        r.start();
        assert!(!r.in_progress());
        // An error answer's body holds no messages.
        r.advance(
            b"HTTP/1.1 500 Oops\r\ncontent-length: 12\r\n\r\ndata: x\n\n\n\n",
            5,
            b"",
        )
        .unwrap();
        assert_eq!(r.figures.messages, 0);
    }

    #[test]
    fn a_length_bounded_body_stops_at_its_length() {
        let mut r = SseResponse::default();
        let both = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 9\r\n\r\ndata: a\n\ndata: b\n\n";
        r.advance(both, 7, b"").unwrap();
        assert_eq!(r.figures.messages, 1);
        // A success that is no event stream holds no messages, and says what it was.
        r.start();
        r.advance(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\ndata: a\n\n", 7, b"")
            .unwrap();
        assert_eq!(r.figures.messages, 0);
        assert_eq!(r.not_a_stream(), Some("application/json"));
        assert!(!r.in_progress());
    }
}
