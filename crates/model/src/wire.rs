//! The `[wire]` section: a request/response protocol described in the scenario, no code — how
//! replies are framed (a length field, a delimiter, or a fixed size), what each request is
//! (`[wire.requests.NAME]`, see [`crate::wire_template`]), how a reply is matched to its request
//! (in order, by an id at an offset, or by an id at a JSON path), and what marks a reply failed.
//! Everything is checked and laid out here; the engine's `systems/wire.rs` only copies bytes,
//! writes fields and cuts frames.
use crate::check::{check_endpoint, shares, Invalid, ScenarioError};
use crate::redis::KeyPattern;
use crate::wire_template::{parse_hex, parse_text, Int, RequestLayout, WireField};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `[wire]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WireSpec {
    /// The server: `host:port` or `unix:///path`.
    pub address: String,
    /// How replies (and length-framed requests) are cut from the byte stream.
    pub framing: FramingSpec,
    /// The requests of the mix by name, each its own operation class.
    pub requests: BTreeMap<String, WireRequestSpec>,
    /// How a reply finds its request.
    #[serde(rename = "match")]
    pub matching: MatchSpec,
    /// What marks a reply failed (none: every reply is delivered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusSpec>,
    /// Keys of `{key}`: 0 … keys−1 (0: `{key}` is refused).
    pub keys: u64,
    /// How `{key}` is picked: `uniform`, `sequential` or `zipf`.
    pub key_pattern: KeyPattern,
    /// The exponent of `zipf` (> 0).
    pub zipf_exponent: f64,
    /// Largest reply, bytes (a length field past it, or no delimiter within it, is a protocol
    /// error: the connection is closed, never memory spent). 1 MiB by default, 16 B to 1 GiB.
    pub max_reply: u64,
}

impl Default for WireSpec {
    fn default() -> Self {
        WireSpec {
            address: String::new(),
            framing: FramingSpec::default(),
            requests: BTreeMap::new(),
            matching: MatchSpec::default(),
            status: None,
            keys: 0,
            key_pattern: KeyPattern::Uniform,
            zipf_exponent: 0.99,
            max_reply: 1 << 20,
        }
    }
}

/// `[wire.framing]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FramingSpec {
    /// `length` (a length field), `delimiter` (replies end with it) or `fixed` (every reply
    /// `size` bytes).
    pub kind: String,
    /// length: bytes before the length field (a fixed header).
    pub offset: u32,
    /// length: the field's width, 1, 2, 4 or 8 bytes.
    pub bytes: u8,
    /// length: `big` (network order) or `little`.
    pub endian: String,
    /// length: what the length counts — `after` (the bytes after the field), `itself` (the
    /// field and what follows) or `frame` (the whole frame, header included).
    pub counts: String,
    /// length: added to the frame's length as counted (Netty's `lengthAdjustment`).
    pub adjust: i64,
    /// delimiter: the bytes that end a reply, as text (`"\n"`, `"\r\n"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<String>,
    /// delimiter: the same in hex (`"00"`), for bytes a TOML string cannot hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delimiter_hex: Option<String>,
    /// fixed: every reply's size, bytes.
    pub size: u32,
}

impl Default for FramingSpec {
    fn default() -> Self {
        FramingSpec {
            kind: String::new(),
            offset: 0,
            bytes: 4,
            endian: "big".into(),
            counts: "after".into(),
            adjust: 0,
            delimiter: None,
            delimiter_hex: None,
            size: 0,
        }
    }
}

/// One request of the mix: `text` or `hex`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WireRequestSpec {
    /// Relative weight in the mix.
    pub weight: f64,
    /// The request as text, fields in decimal: `{id}`, `{seq}`, `{key}`, `{random}`,
    /// `{intended_ns}`, `{pad}`; `{{` is a `{`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The request as hex bytes, fields binary: `{id:u32be}`, `{seq:u64le}`, `{key:u16be}`,
    /// `{intended_ns:u64be}`, `{random:u64le}`, `{len}`, `{pad}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
    /// Pad the request to this many bytes at `{pad}` (hex: at the end when there is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
}

impl Default for WireRequestSpec {
    fn default() -> Self {
        WireRequestSpec {
            weight: 1.0,
            text: None,
            hex: None,
            size: None,
        }
    }
}

/// `[wire.match]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MatchSpec {
    /// `order` (replies come in request order), `id` (an id at `offset` in the reply frame)
    /// or `json` (an id at `path` in a JSON reply).
    pub by: String,
    /// id: the id's offset in the reply frame.
    pub offset: u32,
    /// id: its width, 1, 2, 4 or 8 bytes (below 8 the ids wrap; the window must stay below).
    pub bytes: u8,
    /// id: `big` or `little`.
    pub endian: String,
    /// json: the id's path, dotted (`id`, `meta.request`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Default for MatchSpec {
    fn default() -> Self {
        MatchSpec {
            by: "order".into(),
            offset: 0,
            bytes: 8,
            endian: "big".into(),
            path: None,
        }
    }
}

/// `[wire.status]`: a binary field at `offset`, or a JSON member at `path`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StatusSpec {
    /// binary: the status's offset in the reply frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    /// binary: its width, 1, 2, 4 or 8 bytes.
    pub bytes: u8,
    /// binary: `big` or `little`.
    pub endian: String,
    /// json: the member's path, dotted (`error`, `status.code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The values of a delivered reply (numbers, or JSON strings). JSON without `ok`: a
    /// reply fails when the member is there and not null (JSON-RPC's `error`).
    pub ok: Vec<StatusValue>,
    /// text (delimited replies): a reply that starts with one of these failed (`["ERR",
    /// "-"]`), counted by its first line.
    pub fails_with: Vec<String>,
}

impl Default for StatusSpec {
    fn default() -> Self {
        StatusSpec {
            offset: None,
            bytes: 1,
            endian: "big".into(),
            path: None,
            ok: Vec::new(),
            fails_with: Vec::new(),
        }
    }
}

/// A status value: a number or a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum StatusValue {
    /// A number.
    Int(u64),
    /// A string (JSON only).
    Text(String),
}

/// How replies are cut.
#[derive(Debug, Clone, PartialEq)]
pub enum Framing {
    /// A length field.
    Length(LengthField),
    /// Replies end with these bytes.
    Delimiter(Vec<u8>),
    /// Every reply this many bytes.
    Fixed(usize),
}

/// A length field: where, how wide, what it counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthField {
    /// Bytes before it.
    pub offset: usize,
    /// Its width and order.
    pub int: Int,
    /// Added to the field's value to get the whole frame's length: `offset + bytes`
    /// (`after`), `offset` (`itself`) or 0 (`frame`), plus `adjust`.
    pub add: i64,
}

impl LengthField {
    /// The whole frame's length for the field's `value` (`None`: negative or overflowing).
    #[inline]
    pub fn frame_len(&self, value: u64) -> Option<usize> {
        let total = i128::from(value) + i128::from(self.add);
        usize::try_from(total).ok()
    }

    /// The field's value for a frame of `len` bytes.
    #[inline]
    pub fn value_for(&self, len: usize) -> u64 {
        (len as i64 - self.add).max(0) as u64
    }
}

/// How a reply finds its request.
#[derive(Debug, Clone, PartialEq)]
pub enum Matching {
    /// In request order.
    Order,
    /// An id at an offset of the reply frame.
    Id {
        /// Its offset.
        offset: usize,
        /// Its width and order.
        int: Int,
    },
    /// An id at a JSON path (its members).
    Json(Vec<String>),
}

/// What marks a reply failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// A binary field: delivered when its value is one of `ok`.
    Binary {
        /// Its offset.
        offset: usize,
        /// Width and order.
        int: Int,
        /// Values of delivered replies.
        ok: Vec<u64>,
    },
    /// A JSON member: delivered when it is one of `ok` (or, without `ok`, absent or null).
    Json {
        /// Its path.
        path: Vec<String>,
        /// Values of delivered replies.
        ok: Vec<StatusValue>,
    },
    /// A text reply failed when it starts with one of these.
    Prefix(Vec<Vec<u8>>),
}

/// One request of the mix, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct WireRequest {
    /// Its class name.
    pub name: String,
    /// Its share of the mix.
    pub share: f64,
    /// Its bytes and fields.
    pub layout: RequestLayout,
}

/// Validated `[wire]`.
#[derive(Debug, Clone, PartialEq)]
pub struct WireConfig {
    /// `host:port` or `unix:///path`.
    pub address: String,
    /// How replies are cut.
    pub framing: Framing,
    /// The mix.
    pub requests: Vec<WireRequest>,
    /// How replies find their requests.
    pub matching: Matching,
    /// What marks a reply failed.
    pub status: Option<Status>,
    /// `{key}`'s key space, pattern and exponent.
    pub keys: (u64, KeyPattern, f64),
    /// Largest reply, bytes.
    pub max_reply: usize,
}

/// Longest request, bytes.
const MAX_REQUEST: usize = 1 << 20;

fn endian(field: &str, text: &str, invalid: &Invalid) -> Result<bool, ScenarioError> {
    match text {
        "big" => Ok(true),
        "little" => Ok(false),
        other => Err(invalid(
            field,
            format!("is \"{other}\""),
            "give \"big\" or \"little\"",
        )),
    }
}

fn int(prefix: &str, bytes: u8, order: &str, invalid: &Invalid) -> Result<Int, ScenarioError> {
    if ![1, 2, 4, 8].contains(&bytes) {
        return Err(invalid(
            &format!("{prefix}.bytes"),
            format!("is {bytes}"),
            "give 1, 2, 4 or 8",
        ));
    }
    let big = endian(&format!("{prefix}.endian"), order, invalid)?;
    Ok(Int { bytes, big })
}

fn json_path(field: &str, path: &str, invalid: &Invalid) -> Result<Vec<String>, ScenarioError> {
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(invalid(
            field,
            format!("is \"{path}\""),
            "give the member's path, dotted: \"id\" or \"meta.request\"",
        ));
    }
    Ok(parts)
}

impl FramingSpec {
    fn validate(&self, invalid: &Invalid) -> Result<Framing, ScenarioError> {
        match self.kind.as_str() {
            "length" => {
                let int = int("wire.framing", self.bytes, &self.endian, invalid)?;
                let offset = self.offset as usize;
                if offset > 65536 {
                    return Err(invalid("wire.framing.offset", format!("is {offset}"), "give at most 65536 bytes of header"));
                }
                let base = match self.counts.as_str() {
                    "after" => offset + int.bytes as usize,
                    "itself" => offset,
                    "frame" => 0,
                    other => return Err(invalid(
                        "wire.framing.counts",
                        format!("is \"{other}\""),
                        "give \"after\" (the bytes after the field), \"itself\" (the field and after) or \"frame\" (the whole frame)",
                    )),
                };
                if self.adjust.unsigned_abs() > 1 << 30 {
                    return Err(invalid("wire.framing.adjust", format!("is {}", self.adjust), "give at most ±1 GiB"));
                }
                Ok(Framing::Length(LengthField { offset, int, add: base as i64 + self.adjust }))
            }
            "delimiter" => self.delimiter(invalid).map(Framing::Delimiter),
            "fixed" if self.size == 0 => Err(invalid(
                "wire.framing.size",
                "is 0".into(),
                "give every reply's size in bytes, e.g. size = 64",
            )),
            "fixed" => Ok(Framing::Fixed(self.size as usize)),
            other => Err(invalid(
                "wire.framing.kind",
                if other.is_empty() { "is missing".into() } else { format!("is \"{other}\"") },
                "give \"length\" (a length field), \"delimiter\" (e.g. delimiter = \"\\n\") or \"fixed\" (size = BYTES)",
            )),
        }
    }

    fn delimiter(&self, invalid: &Invalid) -> Result<Vec<u8>, ScenarioError> {
        let bytes = match (&self.delimiter, &self.delimiter_hex) {
            (Some(d), None) => d.as_bytes().to_vec(),
            (None, Some(h)) => crate::wire_template::parse_hex(h, None, None, None)
                .ok()
                .filter(|b| b.fields.is_empty())
                .map(|b| b.bytes)
                .ok_or_else(|| {
                    invalid(
                        "wire.framing.delimiter_hex",
                        format!("is \"{h}\""),
                        "give hex bytes, e.g. \"0d0a\"",
                    )
                })?,
            _ => {
                return Err(invalid(
                    "wire.framing.delimiter",
                    "is not given once".into(),
                    "give delimiter = \"\\n\" (text) or delimiter_hex = \"00\", one of them",
                ))
            }
        };
        if bytes.is_empty() || bytes.len() > 16 {
            return Err(invalid(
                "wire.framing.delimiter",
                format!("is {} bytes", bytes.len()),
                "give 1 to 16 bytes, e.g. \"\\n\" or \"\\r\\n\"",
            ));
        }
        Ok(bytes)
    }
}

impl MatchSpec {
    fn validate(&self, framing: &Framing, invalid: &Invalid) -> Result<Matching, ScenarioError> {
        match self.by.as_str() {
            "order" => Ok(Matching::Order),
            "id" if matches!(framing, Framing::Delimiter(_)) => Err(invalid(
                "wire.match.by",
                "is \"id\" (a binary id), and replies are delimited: the id's bytes may be the delimiter's".into(),
                "match a delimited reply by \"json\" (path) or \"order\", or frame the wire by length",
            )),
            "id" => Ok(Matching::Id {
                offset: self.offset as usize,
                int: int("wire.match", self.bytes, &self.endian, invalid)?,
            }),
            "json" => {
                let Some(path) = &self.path else {
                    return Err(invalid("wire.match.path", "is missing".into(), "give the reply's id member, e.g. path = \"id\""));
                };
                require_lines("wire.match", framing, invalid)?;
                Ok(Matching::Json(json_path("wire.match.path", path, invalid)?))
            }
            other => Err(invalid(
                "wire.match.by",
                format!("is \"{other}\""),
                "give \"order\" (replies in request order), \"id\" (offset, bytes, endian) or \"json\" (path)",
            )),
        }
    }
}

/// JSON replies are lines: they need a delimiter.
fn require_lines(field: &str, framing: &Framing, invalid: &Invalid) -> Result<(), ScenarioError> {
    match framing {
        Framing::Delimiter(_) => Ok(()),
        _ => Err(invalid(
            field,
            "reads JSON or text, and the replies are not delimited".into(),
            "JSON and text replies are lines here: give [wire.framing] kind = \"delimiter\", delimiter = \"\\n\"",
        )),
    }
}

impl StatusSpec {
    fn validate(&self, framing: &Framing, invalid: &Invalid) -> Result<Status, ScenarioError> {
        let text = !self.fails_with.is_empty();
        match (self.offset, &self.path) {
            (None, None) if text => {
                require_lines("wire.status", framing, invalid)?;
                if self.fails_with.iter().any(String::is_empty) {
                    return Err(invalid("wire.status.fails_with", "has an empty prefix".into(), "give the start of a failed reply, e.g. fails_with = [\"ERR\"]"));
                }
                Ok(Status::Prefix(self.fails_with.iter().map(|p| p.as_bytes().to_vec()).collect()))
            }
            _ if text => Err(invalid(
                "wire.status.fails_with",
                "is given with offset or path".into(),
                "give one kind of status: fails_with (text), offset (binary) or path (JSON)",
            )),
            (Some(_), None) if matches!(framing, Framing::Delimiter(_)) => Err(invalid(
                "wire.status.offset",
                "is given, and replies are delimited: a binary status may be the delimiter's byte".into(),
                "give a JSON status (path) for delimited replies, or frame the wire by length",
            )),
            (Some(offset), None) => {
                let ok = self.ok.iter().map(|v| match v {
                    StatusValue::Int(n) => Ok(*n),
                    StatusValue::Text(t) => Err(invalid("wire.status.ok", format!("has \"{t}\" for a binary status"), "give numbers, e.g. ok = [0]")),
                });
                let ok = ok.collect::<Result<Vec<_>, _>>()?;
                if ok.is_empty() {
                    return Err(invalid("wire.status.ok", "is empty".into(), "give the values of a delivered reply, e.g. ok = [0]"));
                }
                let int = int("wire.status", self.bytes, &self.endian, invalid)?;
                Ok(Status::Binary { offset: offset as usize, int, ok })
            }
            (None, Some(path)) => {
                require_lines("wire.status", framing, invalid)?;
                let path = json_path("wire.status.path", path, invalid)?;
                Ok(Status::Json { path, ok: self.ok.clone() })
            }
            _ => Err(invalid(
                "wire.status",
                "has neither or both of offset and path".into(),
                "give offset (a binary field: offset, bytes, endian, ok), path (a JSON member: path, ok) or fails_with (the starts of a failed text reply)",
            )),
        }
    }
}

impl WireSpec {
    pub(crate) fn validate(&self, invalid: &Invalid) -> Result<WireConfig, ScenarioError> {
        if self.address.is_empty() {
            return Err(invalid(
                "wire.address",
                "is missing".into(),
                "give the server, e.g. address = \"127.0.0.1:9000\" or \"unix:///run/app.sock\"",
            ));
        }
        check_endpoint("wire.address", &self.address, invalid)?;
        if !(16..=1 << 30).contains(&self.max_reply) {
            return Err(invalid(
                "wire.max_reply",
                format!("is {}", self.max_reply),
                "give 16 bytes to 1 GiB",
            ));
        }
        let framing = self.framing.validate(invalid)?;
        if let Framing::Fixed(size) = framing {
            if size as u64 > self.max_reply {
                return Err(invalid(
                    "wire.framing.size",
                    format!("is {size}, above max_reply"),
                    "raise wire.max_reply, or give the replies' real size",
                ));
            }
        }
        let matching = self.matching.validate(&framing, invalid)?;
        let status = self
            .status
            .as_ref()
            .map(|s| s.validate(&framing, invalid))
            .transpose()?;
        let requests = self.requests(&framing, &matching, invalid)?;
        let uses = |f: WireField| requests.iter().any(|r| r.layout.uses(f));
        check_key_width(&requests, self.keys, invalid)?;
        if uses(WireField::Key) && self.keys == 0 {
            return Err(invalid(
                "wire.keys",
                "is 0, and a request has {key}".into(),
                "give the key space, e.g. keys = 100000",
            ));
        }
        if !(self.zipf_exponent > 0.0 && self.zipf_exponent.is_finite()) {
            return Err(invalid(
                "wire.zipf_exponent",
                format!("is {}", self.zipf_exponent),
                "give a positive exponent, e.g. 0.99",
            ));
        }
        Ok(WireConfig {
            address: self.address.clone(),
            framing,
            requests,
            matching,
            status,
            keys: (self.keys, self.key_pattern, self.zipf_exponent),
            max_reply: self.max_reply as usize,
        })
    }

    /// The mix, each request laid out and checked against the framing and the matching.
    fn requests(
        &self,
        framing: &Framing,
        matching: &Matching,
        invalid: &Invalid,
    ) -> Result<Vec<WireRequest>, ScenarioError> {
        if self.requests.is_empty() {
            return Err(invalid(
                "wire.requests",
                "is empty".into(),
                "describe a request, e.g. [wire.requests.echo] text = \"PING {id}\\n\"",
            ));
        }
        let shares = shares("wire.requests", &self.requests, |r| r.weight, invalid)?;
        let id_int = match matching {
            Matching::Id { int, .. } => Some(*int),
            _ => None,
        };
        let len_int = match framing {
            Framing::Length(l) => Some(l.int),
            _ => None,
        };
        let mut out = Vec::new();
        for ((name, spec), share) in self.requests.iter().zip(shares) {
            let field = format!("wire.requests.{name}");
            let bad = |why: String, fix: &str| invalid(&field, why, fix);
            let size = spec.size.map(|s| s as usize);
            if size.is_some_and(|s| s > MAX_REQUEST) {
                return Err(bad(
                    format!("has size {}", size.unwrap_or(0)),
                    "give at most 1 MiB (1048576 bytes)",
                ));
            }
            let layout = match (&spec.text, &spec.hex) {
                (Some(t), None) => RequestLayout::Text(
                    parse_text(t, size)
                        .map_err(|e| bad(e, "see docs/own-protocol.md for the fields"))?,
                ),
                (None, Some(h)) => RequestLayout::Binary(
                    parse_hex(h, size, id_int, len_int)
                        .map_err(|e| bad(e, "see docs/own-protocol.md for the fields"))?,
                ),
                (Some(_), Some(_)) => {
                    return Err(bad("has both text and hex".into(), "give one of them"))
                }
                (None, None) => {
                    return Err(bad(
                        "has neither text nor hex".into(),
                        "give text = \"…\" (fields in decimal) or hex = \"…\" (binary fields)",
                    ))
                }
            };
            check_request(&layout, framing, matching, &bad)?;
            out.push(WireRequest {
                name: name.clone(),
                share,
                layout,
            });
        }
        Ok(out)
    }
}

impl WireConfig {
    /// Ids narrower than 64 bits wrap: a reply's id is read back as the newest request's
    /// whose low bits it holds, so every request in flight on a connection must differ in
    /// them (the window below 2^bits).
    pub(crate) fn check_with(
        &self,
        client: &crate::client::ClientConfig,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if let Matching::Id { int, .. } = self.matching {
            if int.bytes < 8 && client.window as u64 >= 1u64 << (8 * int.bytes as u64) {
                return Err(invalid(
                    "wire.match.bytes",
                    format!(
                        "is {}, and client.window = {} requests in flight would share ids",
                        int.bytes, client.window
                    ),
                    "give a wider id, or a smaller window",
                ));
            }
        }
        Ok(())
    }

    /// One line with every setting, in scenario-file spelling.
    pub fn describe(&self, client: &crate::client::ClientConfig) -> String {
        let framing = match &self.framing {
            Framing::Length(l) => format!(
                "length(offset={},bytes={},{},frame=value+{})",
                l.offset,
                l.int.bytes,
                if l.int.big { "big" } else { "little" },
                l.add
            ),
            Framing::Delimiter(d) => format!("delimiter({})", d.escape_ascii()),
            Framing::Fixed(n) => format!("fixed({n})"),
        };
        let matching = match &self.matching {
            Matching::Order => "order".to_string(),
            Matching::Id { offset, int } => format!("id(offset={offset},bytes={})", int.bytes),
            Matching::Json(p) => format!("json({})", p.join(".")),
        };
        let requests: Vec<String> = self
            .requests
            .iter()
            .map(|r| format!("{}:{:.0}%", r.name, r.share * 100.0))
            .collect();
        format!(
            "wire {} {} framing={framing} match={matching} requests={}",
            self.address,
            client.describe(),
            requests.join(","),
        )
    }
}

/// A request fits the wire: its length field where the framing says and able to hold its
/// length, its delimiter at its end and no binary field a delimiter could hide in, its id as
/// wide as the reply's when replies are matched by id, its size bounded.
fn check_request(
    layout: &RequestLayout,
    framing: &Framing,
    matching: &Matching,
    bad: &dyn Fn(String, &str) -> ScenarioError,
) -> Result<(), ScenarioError> {
    match (framing, layout) {
        (Framing::Length(l), RequestLayout::Binary(b)) if b.len_at.map(|x| x.0) != Some(l.offset) => {
            return Err(bad(
                match b.len_at {
                    Some((at, _)) => format!("has {{len}} at offset {at}, and the framing's length field is at offset {}", l.offset),
                    None => format!("has no {{len}}, and the framing's length field is at offset {}", l.offset),
                },
                "put {len} where the length field goes: after the header's bytes",
            ))
        }
        (Framing::Length(l), RequestLayout::Text(_)) if l.offset > 0 => {
            return Err(bad(
                "is text, and the length field is after a header".into(),
                "write it in hex with {len} in its place, or give [wire.framing] offset = 0 (the length is then written before the text)",
            ))
        }
        (Framing::Delimiter(d), _) if !layout.fixed_tail().ends_with(d) => {
            return Err(bad(
                format!("does not end with the delimiter \"{}\"", d.escape_ascii()),
                "end it with the delimiter: the server reads up to it",
            ))
        }
        (Framing::Delimiter(_), RequestLayout::Binary(b)) if !b.fields.is_empty() => {
            return Err(bad(
                "has binary fields, and the wire is delimited: a field's bytes may be the delimiter's".into(),
                "write it as text (fields in decimal), or frame the wire by length",
            ))
        }
        _ => {}
    }
    check_id(layout, matching, bad)?;
    let len = request_len(layout);
    if len.1 > MAX_REQUEST {
        return Err(bad(
            format!("is up to {} bytes", len.1),
            "give at most 1 MiB",
        ));
    }
    if let Framing::Length(l) = framing {
        let prefix = match layout {
            RequestLayout::Text(_) => l.int.bytes as usize,
            RequestLayout::Binary(_) => 0,
        };
        let fits = |n: usize| {
            let v = n as i64 - l.add;
            v >= 0 && (l.int.bytes == 8 || (v as u64) < 1u64 << (8 * u32::from(l.int.bytes)))
        };
        if !fits(len.0 + prefix) || !fits(len.1 + prefix) {
            return Err(bad(
                format!("is {}..={} bytes, a length the framing's {}-byte field (with its counts and adjust) cannot hold", len.0 + prefix, len.1 + prefix, l.int.bytes),
                "give a wider length field, or check counts and adjust",
            ));
        }
    }
    Ok(())
}

/// A binary `{key}` holds every key of the key space.
fn check_key_width(
    requests: &[WireRequest],
    keys: u64,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    for r in requests {
        let RequestLayout::Binary(b) = &r.layout else {
            continue;
        };
        let too_narrow = |f: &&(usize, WireField, Int)| {
            f.1 == WireField::Key && f.2.bytes < 8 && keys > 1u64 << (8 * u32::from(f.2.bytes))
        };
        if let Some(f) = b.fields.iter().find(too_narrow) {
            return Err(invalid(
                &format!("wire.requests.{}", r.name),
                format!(
                    "has a {}-byte {{key}}, and wire.keys = {keys} does not fit in it",
                    f.2.bytes
                ),
                "give a wider {key} (u32be, u64be) or fewer keys",
            ));
        }
    }
    Ok(())
}

/// The request's `{id}` is what the reply can echo: as wide as a binary match's, the whole
/// number for a JSON match.
fn check_id(
    layout: &RequestLayout,
    matching: &Matching,
    bad: &dyn Fn(String, &str) -> ScenarioError,
) -> Result<(), ScenarioError> {
    if !matches!(matching, Matching::Order) && !layout.uses(WireField::Id) {
        return Err(bad(
            "has no {id}, and replies are matched by id".into(),
            "put {id} where the request's id goes (the server echoes it in its reply)",
        ));
    }
    let id_widths = match layout {
        RequestLayout::Binary(b) => b
            .fields
            .iter()
            .filter(|f| f.1 == WireField::Id)
            .map(|f| f.2.bytes)
            .collect(),
        RequestLayout::Text(_) => vec![8],
    };
    let wanted = match matching {
        Matching::Order => return Ok(()),
        Matching::Id { int, .. } => int.bytes,
        Matching::Json(_) => 8,
    };
    match id_widths.iter().find(|w| **w != wanted) {
        None => Ok(()),
        Some(8) => Err(bad(
            format!(
                "writes its {{id}} in decimal (all 64 bits), and replies carry a {wanted}-byte id"
            ),
            "write the request in hex, {id} there takes [wire.match]'s width",
        )),
        Some(w) => Err(bad(
            format!(
                "has a {w}-byte {{id}}, and replies carry {}",
                if wanted == 8 {
                    "the whole id".to_string()
                } else {
                    format!("a {wanted}-byte one")
                }
            ),
            "write {id} alone (it takes [wire.match]'s width), or give both the same width",
        )),
    }
}

/// A request's smallest and largest length, bytes (a text field in decimal takes 1 to 20).
fn request_len(layout: &RequestLayout) -> (usize, usize) {
    match layout {
        RequestLayout::Binary(b) => (b.bytes.len(), b.bytes.len()),
        RequestLayout::Text(t) => {
            let (mut least, mut most) = (0, 0);
            for p in &t.pieces {
                let (a, b) = match p {
                    crate::wire_template::TextPiece::Text(bytes) => (bytes.len(), bytes.len()),
                    crate::wire_template::TextPiece::Field(WireField::Random) => (16, 16),
                    crate::wire_template::TextPiece::Field(_) => (1, 20),
                    crate::wire_template::TextPiece::Pad => (0, 0),
                };
                least += a;
                most += b;
            }
            let size = t.size.unwrap_or(0);
            (least.max(size), most.max(size))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};
    use crate::scenario::System;

    fn wire(text: &str) -> super::WireConfig {
        match valid(&format!("system = \"wire\"\n{text}")).system {
            System::Wire { wire, .. } => wire,
            other => panic!("{other:?}"),
        }
    }

    const LINES: &str = "[wire]\naddress = \"127.0.0.1:9\"\n[wire.framing]\nkind = \"delimiter\"\ndelimiter = \"\\n\"\n";

    #[test]
    fn a_wire_is_described_by_its_framing_requests_and_matching() {
        let json = r#"[wire.match]
by = "json"
path = "id"
[wire.requests.get]
text = "{\"id\":{id},\"key\":{key}}\n"
[wire.status]
path = "error"
"#;
        let w = wire(&format!("{}{LINES}{json}", "[wire]\nkeys = 10\n").replacen(
            "[wire]\naddress",
            "address",
            1,
        ));
        assert!(matches!(w.framing, super::Framing::Delimiter(ref d) if d == b"\n"));
        assert_eq!(w.matching, super::Matching::Json(vec!["id".into()]));
        let l = wire("[wire]\naddress = \"unix:///run/x.sock\"\n[wire.framing]\nkind = \"length\"\nbytes = 2\nendian = \"little\"\noffset = 2\ncounts = \"frame\"\n[wire.match]\nby = \"id\"\noffset = 4\nbytes = 4\n[wire.requests.echo]\nhex = \"abcd {len} {id} {pad}\"\nsize = 64\n");
        let super::Framing::Length(f) = l.framing else {
            panic!()
        };
        assert_eq!((f.offset, f.int.bytes, f.int.big, f.add), (2, 2, false, 0));
        assert_eq!(f.frame_len(64), Some(64));
    }

    #[test]
    fn a_wire_refuses_what_it_cannot_send_or_read() {
        let base = "[wire]\naddress = \"127.0.0.1:9\"\n";
        let len = format!("{base}[wire.framing]\nkind = \"length\"\n");
        for (text, field) in [
            ("[wire]\n[wire.framing]\nkind = \"fixed\"\nsize = 8\n[wire.requests.a]\nhex = \"00\"\n".to_string(), "wire.address"),
            (format!("{base}[wire.requests.a]\nhex = \"00\"\n"), "wire.framing.kind"),
            (format!("{base}[wire.framing]\nkind = \"fixed\"\n[wire.requests.a]\nhex = \"00\"\n"), "wire.framing.size"),
            (format!("{len}bytes = 3\n[wire.requests.a]\nhex = \"00\"\n"), "wire.framing.bytes"),
            (format!("{len}counts = \"all\"\n[wire.requests.a]\nhex = \"00\"\n"), "wire.framing.counts"),
            (format!("{len}[wire.requests.a]\nhex = \"00 {{len}}\"\n"), "wire.requests.a"),
            (format!("{len}offset = 2\n[wire.requests.a]\ntext = \"x\"\n"), "wire.requests.a"),
            (len.clone(), "wire.requests"),
            (format!("{LINES}[wire.requests.a]\ntext = \"no newline\"\n"), "wire.requests.a"),
            (format!("{len}[wire.match]\nby = \"id\"\n[wire.requests.a]\nhex = \"{{len}} 00\"\n"), "wire.requests.a"),
            (format!("{LINES}[wire.match]\nby = \"json\"\n[wire.requests.a]\ntext = \"{{id}}\\n\"\n"), "wire.match.path"),
            (format!("{len}[wire.match]\nby = \"json\"\npath = \"id\"\n[wire.requests.a]\nhex = \"{{len}}\"\n"), "wire.match"),
            (format!("{LINES}[wire.requests.a]\ntext = \"{{key}}\\n\"\n"), "wire.keys"),
            (format!("{LINES}[wire.status]\n[wire.requests.a]\ntext = \"x\\n\"\n"), "wire.status"),
            (format!("{len}[wire.status]\noffset = 0\n[wire.requests.a]\nhex = \"{{len}}\"\n"), "wire.status.ok"),
            (format!("{LINES}[wire.requests.a]\ntext = \"{{idd}}\\n\"\n"), "wire.requests.a"),
            (format!("{base}max_reply = 4\n[wire.framing]\nkind = \"fixed\"\nsize = 8\n[wire.requests.a]\nhex = \"00\"\n"), "wire.max_reply"),
            (format!("{len}[wire.match]\nby = \"id\"\nbytes = 4\n[wire.requests.a]\nhex = \"{{len}} {{id:u64be}}\"\n"), "wire.requests.a"),
            (format!("{len}[wire.match]\nby = \"id\"\nbytes = 4\n[wire.requests.a]\ntext = \"{{id}}\"\n"), "wire.requests.a"),
            (format!("{LINES}[wire.match]\nby = \"id\"\n[wire.requests.a]\ntext = \"{{id}}\\n\"\n"), "wire.match.by"),
            (format!("{LINES}[wire.status]\noffset = 0\nok = [0]\n[wire.requests.a]\ntext = \"x\\n\"\n"), "wire.status.offset"),
            (format!("{LINES}[wire.requests.a]\nhex = \"{{seq:u8}} 0a\"\n"), "wire.requests.a"),
            (format!("{len}bytes = 1\n[wire.requests.a]\nhex = \"{{len}}\"\nsize = 300\n"), "wire.requests.a"),
            (format!("{len}[wire.requests.a]\nhex = \"{{len}}\"\nsize = 4000000000\n"), "wire.requests.a"),
            (format!("{len}adjust = -9000000000\n[wire.requests.a]\nhex = \"{{len}}\"\n"), "wire.framing.adjust"),
            (format!("{len}keys = 70000\n[wire.requests.a]\nhex = \"{{len}} {{key:u16be}}\"\n").replacen("[wire.framing]\nkind = \"length\"\nkeys = 70000", "keys = 70000\n[wire.framing]\nkind = \"length\"", 1), "wire.requests.a"),
            (format!("{len}[wire.requests.a]\nhex = \"{{len}}\"\ntext = \"x\"\n"), "wire.requests.a"),
            (format!("{len}[wire.status]\nfails_with = [\"ERR\"]\n[wire.requests.a]\nhex = \"{{len}}\"\n"), "wire.status"),
            (format!("{LINES}[wire.status]\nfails_with = [\"\"]\n[wire.requests.a]\ntext = \"x\\n\"\n"), "wire.status.fails_with"),
            (format!("{LINES}[wire.status]\nfails_with = [\"E\"]\npath = \"e\"\n[wire.requests.a]\ntext = \"x\\n\"\n"), "wire.status.fails_with"),
        ] {
            let (at, message) = refused(&format!("system = \"wire\"\n{text}"));
            assert_eq!(at, field, "{text}\n{message}");
        }
    }
}
