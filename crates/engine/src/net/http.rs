//! HTTP/1.1 responses in a byte stream: where one ends (`Content-Length`, chunked, or no body),
//! its status, and where its body is. Heads are parsed by `httparse`; this file adds only the
//! framing httparse leaves to its caller. `1xx` interim responses (100 Continue, 103 Early
//! Hints) are skipped as part of the response that follows. Nothing here allocates: a response
//! is found in the connection's read buffer and described by offsets into it.

use std::mem::MaybeUninit;

/// Longest response head accepted; also the most bytes of interim (`1xx`) responses before the
/// final one.
pub const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line (its extensions included) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;
/// Headers a response head may have.
const MAX_HEADERS: usize = 100;

/// One response found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Bytes it took (its interim responses included).
    pub size: usize,
    /// Its status code.
    pub status: u16,
    /// Where its body is (for chunked bodies, the chunks with their size lines).
    pub body: (usize, usize),
    /// The body is chunked ([`dechunk`] gives its bytes).
    pub chunked: bool,
    /// The server closes the connection after it (`Connection: close`, or an HTTP/1.0
    /// response without `Connection: keep-alive`).
    pub closes: bool,
}

/// Bytes that cannot be measured as an HTTP/1.1 response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Not a response head (`httparse`'s reason).
    #[error("malformed response head: {0}")]
    Malformed(String),
    /// A head or body beyond the limits.
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    /// A bad `Content-Length` or chunk size.
    #[error("bad length: {0}")]
    BadLength(String),
    /// Interim (`1xx`) responses past [`MAX_HEAD`] bytes without the final one.
    #[error("interim (1xx) responses of more than {MAX_HEAD} bytes without a final response")]
    EndlessInterim,
    /// HTTP/2 frames (SETTINGS, GOAWAY) where a response head should be: a server that speaks
    /// HTTP/2 only, as an h2c port does, answering an HTTP/1.1 request.
    #[error(
        "the server answered with HTTP/2 frames: it speaks HTTP/2 only (an h2c port); set http.version = \"2\""
    )]
    Http2Frames,
    /// Neither `Content-Length` nor chunked: the body ends when the server closes, which no
    /// pipelined or kept-alive request can be measured by.
    #[error(
        "a response without Content-Length or chunked encoding (its end is the connection's close)"
    )]
    Unframed,
}

/// Whether `bytes` start with an HTTP/2 SETTINGS or GOAWAY frame on stream 0 (what an
/// HTTP/2-only server sends first, whatever it was asked).
fn http2_frame(bytes: &[u8]) -> bool {
    bytes.len() >= 9 && matches!(bytes[3], 4 | 7) && bytes[5..9] == [0, 0, 0, 0]
}

/// Finds the response at the start of `buf`: `Ok(None)` when incomplete. `head` is whether it
/// answers a HEAD request (no body, whatever the headers say); `max` bounds head and body.
pub fn decode(buf: &[u8], head: bool, max: usize) -> Result<Option<Found>, HttpError> {
    decode_from(buf, head, max, &mut Resume::default())
}

/// How far the scan of an incomplete chunked body got, kept between reads so that its chunks
/// are not walked again from the first: a body of many small chunks arriving over many reads
/// costs one pass. One per connection, for the response at the start of its buffer; reset
/// once that response is found, and when the connection's bytes start again.
#[derive(Debug, Default, Clone, Copy)]
pub struct Resume {
    /// The first chunk not yet walked (0: none walked).
    chunk_at: usize,
}

/// [`decode`], going on from where `resume` says the previous call over the same bytes
/// stopped.
pub fn decode_from(
    buf: &[u8],
    head: bool,
    max: usize,
    resume: &mut Resume,
) -> Result<Option<Found>, HttpError> {
    let mut start = 0;
    loop {
        // Uninitialised: zeroing 100 headers (3.2 KB) per response was a fifth of the client's
        // user time against nginx (perf, bench/http-vs-wrk.sh); httparse writes the ones it fills.
        let mut headers = [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            &buf[start..],
            &mut headers,
        );
        let head_len = match parsed {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() - start > MAX_HEAD => {
                return Err(HttpError::TooLarge(MAX_HEAD))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) if http2_frame(&buf[start..]) => return Err(HttpError::Http2Frames),
            Err(e) => return Err(HttpError::Malformed(e.to_string())),
        };
        let status = response.code.unwrap_or(0);
        let body_start = start + head_len;
        if (100..200).contains(&status) && status != 101 {
            start = body_start; // an interim response: the real one follows
            if start > MAX_HEAD {
                return Err(HttpError::EndlessInterim);
            }
            continue;
        }
        let no_body = head || status == 204 || status == 304 || (100..200).contains(&status);
        let framing = Framing::of(response.headers);
        let mut chunked = false;
        let end = if no_body {
            Some(body_start)
        } else if let Some(te) = framing.transfer_encoding {
            if !te.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked")) {
                return Err(HttpError::Unframed);
            }
            chunked = true;
            chunked_end(buf, body_start, max, &mut resume.chunk_at)?
        } else if let Some(cl) = framing.content_length {
            let len = parse_length(cl)
                .ok_or_else(|| HttpError::BadLength(String::from_utf8_lossy(cl).into()))?;
            if head_len as u64 + len > max as u64 {
                return Err(HttpError::TooLarge(max));
            }
            let end = body_start + len as usize;
            (buf.len() >= end).then_some(end)
        } else {
            return Err(HttpError::Unframed);
        };
        let closes = closes(response.version, framing.connection);
        if end.is_some() {
            *resume = Resume::default();
        }
        return Ok(end.map(|end| Found {
            size: end,
            status,
            body: (body_start, end),
            chunked,
            closes,
        }));
    }
}

/// Whether the server closes the connection after this response: HTTP/1.1 keeps it unless
/// `Connection` has the `close` option, HTTP/1.0 closes it unless it has `keep-alive`.
fn closes(version: Option<u8>, connection: Option<&[u8]>) -> bool {
    let has = |option: &[u8]| {
        connection.is_some_and(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(option))
        })
    };
    if version == Some(0) {
        !has(b"keep-alive")
    } else {
        has(b"close")
    }
}

/// The headers that frame a response (the first of each), found in one pass over the head.
#[derive(Default)]
struct Framing<'a> {
    transfer_encoding: Option<&'a [u8]>,
    content_length: Option<&'a [u8]>,
    connection: Option<&'a [u8]>,
}

impl<'a> Framing<'a> {
    fn of(headers: &[httparse::Header<'a>]) -> Framing<'a> {
        let mut f = Framing::default();
        for h in headers {
            // The length first: most headers are none of the three and cost one compare.
            let slot = match h.name.len() {
                17 if h.name.eq_ignore_ascii_case("transfer-encoding") => &mut f.transfer_encoding,
                14 if h.name.eq_ignore_ascii_case("content-length") => &mut f.content_length,
                10 if h.name.eq_ignore_ascii_case("connection") => &mut f.connection,
                _ => continue,
            };
            slot.get_or_insert(h.value);
        }
        f
    }
}

/// A `Content-Length` value: decimal digits, optional surrounding whitespace, below 2^64.
/// A `Content-Length` value: decimal digits only (no sign, no space inside), without
/// overflow. (Shared with `serve http`.)
pub(crate) fn parse_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// Where a chunked body that starts at `start` ends (trailers included); `None` when
/// incomplete. `walked` is the first chunk not walked yet (0: none), moved on as chunks are.
fn chunked_end(
    buf: &[u8],
    start: usize,
    max: usize,
    walked: &mut usize,
) -> Result<Option<usize>, HttpError> {
    let mut pos = (*walked).max(start);
    loop {
        if pos - start > max {
            return Err(HttpError::TooLarge(max));
        }
        *walked = pos;
        let (used, size) = match httparse::parse_chunk_size(&buf[pos..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) if buf.len() - pos > MAX_CHUNK_LINE => {
                return Err(HttpError::BadLength(format!(
                    "a chunk-size line of more than {MAX_CHUNK_LINE} bytes"
                )))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(HttpError::BadLength("chunk size".into())),
        };
        pos += used;
        if size == 0 {
            // The last chunk: then an empty line, or trailer fields and an empty line.
            let rest = &buf[pos..];
            if rest.starts_with(b"\r\n") {
                return Ok(Some(pos + 2));
            }
            return match rest.windows(4).position(|w| w == b"\r\n\r\n") {
                Some(i) => Ok(Some(pos + i + 4)),
                None if rest.len() > MAX_HEAD => Err(HttpError::TooLarge(MAX_HEAD)),
                None => Ok(None),
            };
        }
        if size > max as u64 {
            return Err(HttpError::TooLarge(max));
        }
        let data_end = pos + size as usize;
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(HttpError::BadLength(
                "chunk without CRLF after its data".into(),
            ));
        }
        pos = data_end + 2;
    }
}

/// The data of a complete chunked body (as [`decode`] found it) into `out` (cleared first).
pub fn dechunk(mut body: &[u8], out: &mut Vec<u8>) {
    out.clear();
    while let Ok(httparse::Status::Complete((used, size))) = httparse::parse_chunk_size(body) {
        let (start, end) = (used, used + size as usize);
        if size == 0 || end > body.len() {
            return;
        }
        out.extend_from_slice(&body[start..end]);
        body = &body[(end + 2).min(body.len())..];
    }
}

/// The status line's words for a failed request: `HTTP 404 Not Found`.
pub fn status_text(buf: &[u8], found: &Found, out: &mut String) {
    use std::fmt::Write;
    out.clear();
    let _ = write!(out, "HTTP {}", found.status);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    // The final response's head is the last one in `buf[..size]`; its reason is enough to
    // read from the first head when there was no interim one, which is the common case.
    let _ = response.parse(buf); // the status line is filled in even from a partial head
    if response.code == Some(found.status) {
        if let Some(reason) = response.reason.filter(|r| !r.is_empty()) {
            let _ = write!(out, " {reason}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn content_length_chunked_and_bodiless_responses_end_where_they_end() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
        let f = decode(r, false, MAX).unwrap().unwrap();
        assert_eq!(
            (f.size, f.status, &r[f.body.0..f.body.1]),
            (43, 200, b"hello".as_slice())
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n";
        let f = decode(chunked, false, MAX).unwrap().unwrap();
        assert_eq!((f.size, f.chunked), (chunked.len(), true));
        let mut data = Vec::new();
        dechunk(&chunked[f.body.0..f.body.1], &mut data);
        assert_eq!(data, b"helloabc");
        let trailers =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(
            decode(trailers, false, MAX).unwrap().unwrap().size,
            trailers.len()
        );
        let none = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(decode(none, false, MAX).unwrap().unwrap().size, none.len());
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n";
        assert_eq!(decode(head, true, MAX).unwrap().unwrap().size, head.len());
        let interim =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let f = decode(interim, false, MAX).unwrap().unwrap();
        assert_eq!((f.size, f.status), (interim.len(), 404));
        let mut text = String::new();
        status_text(
            b"HTTP/1.1 503 Service Unavailable\r\n",
            &Found {
                size: 0,
                status: 503,
                body: (0, 0),
                chunked: false,
                closes: false,
            },
            &mut text,
        );
        assert_eq!(text, "HTTP 503 Service Unavailable");
    }

    #[test]
    fn endless_interim_responses_and_chunk_lines_are_bounded() {
        // 100 Continue without end (was: 1 GB in 10 s held as one response).
        let interims = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(5000);
        assert_eq!(
            decode(&interims, false, MAX),
            Err(HttpError::EndlessInterim)
        );
        let few = [
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n".repeat(3),
            b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        ]
        .concat();
        assert_eq!(decode(&few, false, MAX).unwrap().unwrap().size, few.len());
        // A chunk extension without end.
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=";
        let endless = [&head[..], &b"x".repeat(MAX_CHUNK_LINE + 1)].concat();
        assert!(matches!(
            decode(&endless, false, MAX),
            Err(HttpError::BadLength(_))
        ));
        let long_but_fine = [&head[..], &b"x".repeat(100), b"\r\nhello\r\n0\r\n\r\n"].concat();
        assert!(decode(&long_but_fine, false, MAX).unwrap().is_some());
    }

    #[test]
    fn a_chunked_body_is_walked_once_over_many_reads() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let whole = [head, b"1\r\nx\r\n".repeat(1000), b"0\r\n\r\nHTTP".to_vec()].concat();
        let end = whole.len() - 4;
        let mut resume = Resume::default();
        let mut walked_before = 0;
        for cut in (0..end).step_by(7) {
            assert_eq!(
                decode_from(&whole[..cut], false, MAX, &mut resume),
                Ok(None)
            );
            assert!(
                resume.chunk_at >= walked_before,
                "{cut}: it never walks back"
            );
            walked_before = resume.chunk_at;
        }
        assert!(walked_before > end - 20, "{walked_before} of {end}");
        let found = decode_from(&whole, false, MAX, &mut resume)
            .unwrap()
            .unwrap();
        assert_eq!(found.size, end);
        assert_eq!(resume.chunk_at, 0, "found: the next response starts afresh");
    }

    #[test]
    fn a_response_says_whether_the_connection_closes_after_it() {
        for (head, closes) in [
            ("HTTP/1.1 200 OK\r\n", false),
            ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n", false),
            ("HTTP/1.1 200 OK\r\nConnection: close\r\n", true),
            ("HTTP/1.1 200 OK\r\nconnection: Upgrade, CLOSE\r\n", true),
            ("HTTP/1.0 200 OK\r\n", true),
            ("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n", false),
        ] {
            let whole = format!("{head}Content-Length: 2\r\n\r\nok");
            let f = decode(whole.as_bytes(), false, MAX).unwrap().unwrap();
            assert_eq!((f.closes, f.size), (closes, whole.len()), "{head}");
        }
    }

    #[test]
    fn every_prefix_is_incomplete_and_bad_responses_are_errors() {
        for whole in [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".as_slice(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ] {
            for cut in 0..whole.len() {
                assert_eq!(decode(&whole[..cut], false, MAX), Ok(None), "{cut}");
            }
        }
        assert!(matches!(
            decode(b"SSH-2.0-OpenSSH\r\n\r\n", false, MAX),
            Err(HttpError::Malformed(_))
        ));
        assert_eq!(
            decode(
                b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n",
                false,
                MAX
            ),
            Err(HttpError::TooLarge(MAX))
        );
        assert_eq!(
            decode(b"HTTP/1.1 200 OK\r\n\r\nbody until close", false, MAX),
            Err(HttpError::Unframed)
        );
        assert!(decode(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, MAX).is_err());
        // Content-Length is 1*DIGIT: a sign, an empty value or a number past 2^64 is refused.
        for bad in ["+5", "-1", "", "1 2", "99999999999999999999"] {
            let r = format!("HTTP/1.1 200 OK\r\nContent-Length: {bad}\r\n\r\n");
            assert!(
                matches!(
                    decode(r.as_bytes(), false, MAX),
                    Err(HttpError::BadLength(_))
                ),
                "{bad:?}"
            );
        }
        // The first of a repeated header frames the response; names match in any case.
        let r = b"HTTP/1.1 200 OK\r\ncontent-LENGTH: 2\r\nContent-Length: 9\r\n\r\nok";
        assert_eq!(decode(r, false, MAX).unwrap().unwrap().size, r.len());
        assert_eq!(
            decode(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffff\r\n",
                false,
                MAX
            ),
            Err(HttpError::TooLarge(MAX))
        );
        let endless_head = vec![b'X'; MAX_HEAD + 10];
        let mut r = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        r.extend_from_slice(&endless_head);
        assert_eq!(decode(&r, false, MAX), Err(HttpError::TooLarge(MAX_HEAD)));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_or_overrun(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(Some(f)) = decode(&bytes, false, MAX) {
                prop_assert!(f.size <= bytes.len() && f.body.0 <= f.body.1 && f.body.1 <= f.size);
            }
        }

        #[test]
        fn mutated_responses_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..64),
            flip in any::<usize>(),
            byte in any::<u8>(),
        ) {
            let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            r.extend_from_slice(&body);
            let i = flip % r.len();
            r[i] = byte;
            let _ = decode(&r, false, MAX);
        }
    }
}
