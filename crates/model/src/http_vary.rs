//! HTTP requests that vary from one send to the next: a request's path, header values and body
//! with per-request fields ([`Template`]), and a file of requests read once, each sent as
//! written, cycled or drawn at random ([`RequestFile`]). The bytes are laid out here, when the
//! scenario is checked; the driver only copies or fills them in (no allocation per request).
//!
//! Fields: `{seq}` (the request's number in the run, from 0, over every connection), `{key}`
//! (a key number of `http.keys`, picked by `http.key_pattern`), `{random}` (16 hex digits, a
//! fresh random 64-bit number), `{intended_ns}` (the request's intended send time, Unix ns:
//! what a server compares its arrival with, coordinated omission included). Any other brace is
//! text (a JSON body keeps its `{"a": 1}`), except `{word}` of letters and `_`, which is
//! refused as a misspelt field, and `{{`, a `{` of the text (`{{id}` sends `{id}`).
use crate::check::{Invalid, ScenarioError};
use crate::url::parse_url;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most bytes a request file may hold (its requests laid out are about as large).
pub const MAX_FILE_BYTES: u64 = 256 << 20;
/// Most requests a request file may hold.
pub const MAX_FILE_REQUESTS: usize = 10_000_000;
/// Most bytes a request file's requests may take laid out (a body file named by many requests
/// is copied into each).
pub const MAX_LAID_OUT_BYTES: usize = 512 << 20;

/// A per-request field of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The request's number in the run, over every connection, from 0.
    Seq,
    /// A key number drawn from `http.keys`.
    Key,
    /// 16 hex digits of a random 64-bit number.
    Random,
    /// The intended send time, Unix ns.
    IntendedNs,
}

/// The fields by the name a template writes them with.
pub const FIELDS: [(&str, Field); 4] = [
    ("seq", Field::Seq),
    ("key", Field::Key),
    ("random", Field::Random),
    ("intended_ns", Field::IntendedNs),
];

/// A piece of a template: text as it goes, or a field filled in per request.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Bytes sent as they are.
    Text(Vec<u8>),
    /// A field, written in decimal (`{random}`: hex).
    Field(Field),
}

/// Text with fields in it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    /// Its pieces, in order.
    pub pieces: Vec<Piece>,
}

impl Template {
    /// Reads `text`: every `{field}` of [`FIELDS`] is a field, `{{` is a `{`, any other brace
    /// is text, and a `{word}` of letters and `_` that names no field is refused (`Err` names
    /// it; `{{word}` sends it as text).
    pub fn parse(text: &[u8]) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        cut_fields(text, |piece| {
            match piece {
                Cut::Text(t) => literal.extend_from_slice(t),
                Cut::Field(word) => {
                    let Some((_, field)) = FIELDS.iter().find(|(name, _)| *name == word) else {
                        return Err(format!("{{{word}}}"));
                    };
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(*field));
                }
            }
            Ok(())
        })?;
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// Whether it has any field.
    pub fn varies(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Field(_)))
    }

    /// Whether it has `field`.
    pub fn uses(&self, field: Field) -> bool {
        self.pieces.contains(&Piece::Field(field))
    }
}

/// A piece of a text with `{field}`s in it.
pub(crate) enum Cut<'a> {
    /// Bytes of the text.
    Text(&'a [u8]),
    /// A `{word}`'s word.
    Field(&'a str),
}

/// Cuts `text` at its `{word}`s (a word of letters and `_`): `{{` is a `{` of the text, and
/// any other brace is text too (a JSON body keeps its `{"a": 1}`). Shared by HTTP's templates
/// and a described wire's text requests; `each` says what a word means.
pub(crate) fn cut_fields(
    text: &[u8],
    mut each: impl FnMut(Cut<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut rest = text;
    while let Some(open) = rest.iter().position(|&b| b == b'{') {
        each(Cut::Text(&rest[..open]))?;
        let after = &rest[open + 1..];
        if after.first() == Some(&b'{') {
            each(Cut::Text(b"{"))?;
            rest = &after[1..];
            continue;
        }
        let end = after
            .iter()
            .position(|b| !(b.is_ascii_alphabetic() || *b == b'_'))
            .unwrap_or(after.len());
        if end > 0 && after.get(end) == Some(&b'}') {
            each(Cut::Field(
                std::str::from_utf8(&after[..end]).unwrap_or_default(),
            ))?;
            rest = &after[end + 1..];
        } else {
            each(Cut::Text(b"{"))?;
            rest = after;
        }
    }
    each(Cut::Text(rest))
}

/// A request rendered per send: `head`, then `Content-Length` of the body as filled in (when
/// `length`), the blank line, then `body`.
#[derive(Debug, Clone, PartialEq)]
pub struct Varying {
    /// Request line and header lines, each with its CRLF; not the blank line.
    pub head: Template,
    /// The body.
    pub body: Template,
    /// Whether a `Content-Length` line is written (the body's length as filled in).
    pub length: bool,
}

impl Varying {
    /// Whether it has `field` anywhere.
    pub fn uses(&self, field: Field) -> bool {
        self.head.uses(field) || self.body.uses(field)
    }
}

/// In what order a request file's requests go.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum FileOrder {
    /// First to last, then again, over every connection together (`vegeta attack`'s order).
    #[default]
    Cycle,
    /// Each request drawn at random, every line equally likely.
    Random,
}

/// A file of requests, read once: every request's bytes laid end to end.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFile {
    /// Where it was read from.
    pub path: String,
    /// Every request's bytes, one after the other.
    pub bytes: Vec<u8>,
    /// Where each request ends in `bytes`.
    pub ends: Vec<usize>,
    /// The order they go in.
    pub order: FileOrder,
}

impl RequestFile {
    /// How many requests it holds (at least one).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds none (never, once checked).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Request `i`'s bytes.
    #[inline]
    pub fn request(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// How a request's bytes vary.
#[derive(Debug, Clone, PartialEq)]
pub enum Vary {
    /// Filled in per request.
    Template(Varying),
    /// Taken from a file of requests.
    File(RequestFile),
}

/// One request of a request file, as read.
struct FileRequest {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads the request file at `path` (vegeta's targets, or JSON lines) for the server at
/// `(authority, tls)`; `headers` are added to every request that does not set them itself.
pub(crate) fn read_request_file(
    path: &str,
    server: (&str, bool),
    headers: &BTreeMap<String, String>,
    order: FileOrder,
    field: &str,
    invalid: &Invalid,
) -> Result<RequestFile, ScenarioError> {
    let text = read_bounded(path).map_err(|why| {
        invalid(
            field,
            format!("is \"{path}\", which {why}"),
            "give a file of requests (relative paths start where msgbench runs)",
        )
    })?;
    let parsed = if text.trim_start().starts_with('{') {
        json_lines(&text)
    } else {
        targets(&text)
    };
    let at = |(line, why): (usize, String), fix: &str| {
        invalid(
            field,
            format!("is \"{path}\", whose line {line} {why}"),
            fix,
        )
    };
    let requests = parsed.map_err(|e| at(e, FORMAT))?;
    if requests.is_empty() {
        return Err(invalid(
            field,
            format!("is \"{path}\", which holds no request"),
            FORMAT,
        ));
    }
    let mut file = RequestFile {
        path: path.to_string(),
        bytes: Vec::with_capacity(text.len() + requests.len() * 64),
        ends: Vec::with_capacity(requests.len()),
        order,
    };
    for (line, mut r) in requests {
        r.target = aimed_at(&r.target, server).map_err(|why| at((line, why), SERVER))?;
        check_request(&r).map_err(|why| at((line, why), FORMAT))?;
        for (k, v) in headers {
            if !r.headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k)) {
                r.headers.push((k.clone(), v.clone()));
            }
        }
        write_request(&r, server.0, &mut file.bytes);
        file.ends.push(file.bytes.len());
        if file.bytes.len() > MAX_LAID_OUT_BYTES {
            let why = format!("takes it past {} MiB laid out, the most a file's requests may take (a body file named by many requests is copied into each)", MAX_LAID_OUT_BYTES >> 20);
            return Err(at((line, why), "send fewer or smaller requests"));
        }
    }
    Ok(file)
}

/// How a request file is written.
const FORMAT: &str = "write one request per target as vegeta does: `GET http://host:port/path`, then header lines `Name: value`, then `@body-file` if it has a body, then a blank line; or one JSON object per line: {\"method\": \"POST\", \"url\": \"/items\", \"header\": {\"Name\": [\"value\"]}, \"body\": \"<base64>\"}";

/// Where a request file's requests must go.
const SERVER: &str =
    "a run measures one server, http.url's: write its URLs with that host and port, or write paths alone (`GET /items/7`)";

/// The file's text, refused past [`MAX_FILE_BYTES`] (read no further than that).
fn read_bounded(path: &str) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read ({e})"))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read as text ({e})"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "is larger than {} MiB, the most a request file may be",
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(text)
}

/// A body file, refused past [`MAX_FILE_BYTES`].
fn read_body(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read ({e})"))?;
    let mut body = Vec::new();
    (file.take(MAX_FILE_BYTES + 1).read_to_end(&mut body))
        .map_err(|e| format!("cannot be read ({e})"))?;
    if body.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("is larger than {} MiB", MAX_FILE_BYTES >> 20));
    }
    Ok(body)
}

/// The target a request's URL (or path) asks for, refused when it names another server.
fn aimed_at(url: &str, (authority, tls): (&str, bool)) -> Result<String, String> {
    if url.starts_with('/') || url == "*" {
        return Ok(url.to_string());
    }
    let parsed =
        parse_url(url).map_err(|(why, _)| format!("has the URL \"{url}\", which {why}"))?;
    if !parsed.authority.eq_ignore_ascii_case(authority) || parsed.tls != tls {
        let scheme = if tls { "https" } else { "http" };
        return Err(format!(
            "asks {url}, and the run's server is {scheme}://{authority}"
        ));
    }
    Ok(parsed.target)
}

/// A method that is a token, a target without spaces, headers on one line each.
fn check_request(r: &FileRequest) -> Result<(), String> {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(&r.method) {
        return Err(format!("has the method {:?}", r.method));
    }
    if r.method.eq_ignore_ascii_case("HEAD") {
        // Its response has no body whatever its headers say: the reader must know it is one.
        return Err("is a HEAD request, which a file cannot hold (give it a request of its own in http.requests)".into());
    }
    if r.target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("has the target {:?}, with a space", r.target));
    }
    for (k, v) in &r.headers {
        if !token(k) || v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("has the header {k:?}: {v:?}"));
        }
        // The body goes whole, framed by its length: a chunked one or a wrong length would
        // break every request pipelined after it.
        if k.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!("has {k}: {v}, and a file's bodies are sent whole with their Content-Length (leave it out)"));
        }
        let length = v.trim().parse::<usize>();
        if k.eq_ignore_ascii_case("content-length") && length != Ok(r.body.len()) {
            let size = r.body.len();
            return Err(format!(
                "has {k}: {v}, and its body is {size} bytes (leave it out: it is written for you)"
            ));
        }
    }
    Ok(())
}

/// `r` as HTTP/1.1 bytes, `Host` and `Content-Length` written unless it has them.
fn write_request(r: &FileRequest, host: &str, out: &mut Vec<u8>) {
    let has = |h: &str| r.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(h));
    out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", r.method, r.target).as_bytes());
    if !has("host") {
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    for (k, v) in &r.headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    let sends_body = !r.body.is_empty() || ["POST", "PUT", "PATCH"].contains(&r.method.as_str());
    if sends_body && !has("content-length") {
        out.extend_from_slice(format!("Content-Length: {}\r\n", r.body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&r.body);
}

/// Vegeta's text targets: `METHOD URL`, header lines, an optional `@body-file`, a blank line
/// between targets; `#` starts a comment line. Each request with the line it starts on.
fn targets(text: &str) -> Result<Vec<(usize, FileRequest)>, (usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, FileRequest)> = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        too_many(out.len(), n)?;
        let line = line.trim_end_matches('\r');
        if line.trim_start().starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            out.extend(current.take());
            continue;
        }
        if let Some((method, url)) = target_line(line) {
            out.extend(current.take());
            current = Some((
                n,
                FileRequest {
                    method: method.to_string(),
                    target: url.to_string(),
                    headers: Vec::new(),
                    body: Vec::new(),
                },
            ));
            continue;
        }
        let Some((_, r)) = current.as_mut() else {
            return Err((n, format!("is {line:?}, not `METHOD URL`")));
        };
        match line.strip_prefix('@') {
            Some(body) => {
                r.body = read_body(body.trim())
                    .map_err(|e| (n, format!("names the body file {body:?}, which {e}")))?;
            }
            None => {
                let (k, v) = line
                    .split_once(':')
                    .ok_or((n, format!("is {line:?}, neither a header nor `@body-file`")))?;
                r.headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
    }
    out.extend(current);
    too_many(out.len(), text.lines().count())?;
    Ok(out)
}

/// A file of more than [`MAX_FILE_REQUESTS`] requests, refused at line `n`.
fn too_many(requests: usize, n: usize) -> Result<(), (usize, String)> {
    if requests > MAX_FILE_REQUESTS {
        let why = format!("is past {MAX_FILE_REQUESTS} requests, the most a file may hold");
        return Err((n, why));
    }
    Ok(())
}

/// `METHOD URL` (a method of capitals, a URL from `/` or `http[s]://`): a target's first line.
fn target_line(line: &str) -> Option<(&str, &str)> {
    let (method, url) = line.trim().split_once(' ')?;
    let url = url.trim();
    let is_url = url.starts_with('/') || url.starts_with("http://") || url.starts_with("https://");
    (!method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()) && is_url)
        .then_some((method, url))
}

/// One request of a JSON-lines file (vegeta's `-format=json`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    header: BTreeMap<String, HeaderValues>,
    /// Base64, as vegeta writes it.
    #[serde(default)]
    body: String,
}

fn get() -> String {
    "GET".into()
}

/// A header's value: one, or several (each its own line).
#[derive(Deserialize)]
#[serde(untagged)]
enum HeaderValues {
    One(String),
    Many(Vec<String>),
}

/// One JSON object per line (blank lines skipped).
fn json_lines(text: &str) -> Result<Vec<(usize, FileRequest)>, (usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let r: JsonRequest =
            serde_json::from_str(line).map_err(|e| (n, format!("is not a request ({e})")))?;
        let body = base64::engine::general_purpose::STANDARD
            .decode(r.body.trim())
            .map_err(|e| (n, format!("has a body that is not base64 ({e})")))?;
        let mut headers = Vec::new();
        for (k, v) in r.header {
            match v {
                HeaderValues::One(v) => headers.push((k, v)),
                HeaderValues::Many(vs) => headers.extend(vs.into_iter().map(|v| (k.clone(), v))),
            }
        }
        out.push((
            n,
            FileRequest {
                method: r.method,
                target: r.url,
                headers,
                body,
            },
        ));
        too_many(out.len(), n)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_and_other_braces_are_text() {
        let t = Template::parse(br#"{"id": {seq}, "k": "{key}"}"#).unwrap();
        assert_eq!(
            t.pieces,
            vec![
                Piece::Text(br#"{"id": "#.to_vec()),
                Piece::Field(Field::Seq),
                Piece::Text(br#", "k": ""#.to_vec()),
                Piece::Field(Field::Key),
                Piece::Text(br#""}"#.to_vec()),
            ]
        );
        assert!(t.varies() && t.uses(Field::Key) && !t.uses(Field::Random));
        assert_eq!(
            Template::parse(b"/items/{sequence}"),
            Err("{sequence}".into())
        );
        let graphql = Template::parse(br#"{"query": "{me{{id}}"}"#).unwrap();
        assert_eq!(
            graphql.pieces,
            vec![Piece::Text(br#"{"query": "{me{id}}"}"#.to_vec())]
        );
        assert!(!Template::parse(b"{} {{ }").unwrap().varies());
    }

    #[test]
    fn vegeta_targets_and_json_lines_are_read() {
        let text =
            "# comment\nGET http://h:1/a\nX-A: 1\n\nPOST /b\nContent-Type: text/plain\nGET /c\n";
        let rs = targets(text).unwrap();
        let shape: Vec<_> = rs
            .iter()
            .map(|(n, r)| (*n, r.method.as_str(), r.target.as_str(), r.headers.len()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (2, "GET", "http://h:1/a", 1),
                (5, "POST", "/b", 1),
                (7, "GET", "/c", 0)
            ]
        );
        let json = "{\"method\":\"PUT\",\"url\":\"/x\",\"header\":{\"A\":[\"1\",\"2\"]},\"body\":\"aGk=\"}\n\n{\"url\":\"/y\"}";
        let rs = json_lines(json).unwrap();
        assert_eq!(rs[0].1.body, b"hi");
        assert_eq!(rs[0].1.headers.len(), 2);
        assert_eq!((rs[1].0, rs[1].1.method.as_str()), (3, "GET"));
        assert!(json_lines("{\"url\":\"/y\", \"bogus\": 1}").is_err());
    }

    #[test]
    fn a_request_for_another_server_is_refused() {
        assert_eq!(aimed_at("http://h:1/a?b", ("h:1", false)).unwrap(), "/a?b");
        assert!(aimed_at("http://other:1/a", ("h:1", false))
            .unwrap_err()
            .contains("the run's server is http://h:1"));
        assert!(aimed_at("https://h:1/a", ("h:1", false)).is_err());
    }
}
