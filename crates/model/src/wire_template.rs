//! A described wire's requests (`[wire.requests.NAME]`), laid out when the scenario is checked:
//! the bytes that never change, and where each per-request field goes. The driver copies the
//! bytes and writes the fields in (no allocation, no parsing per request).
//!
//! Two ways to write one:
//! - `text`: bytes as written, fields in decimal (`{id}`, `{seq}`, `{key}`, `{intended_ns}`),
//!   `{random}` as 16 hex digits, `{pad}` spaces to `size`; `{{` is a `{` of the text.
//! - `hex`: hex bytes (spaces and line breaks ignored), fields binary with their width and byte
//!   order — `{id:u32be}`, `{seq:u64le}`, `{key:u16be}`, `{intended_ns:u64be}`,
//!   `{random:u64le}`, `{len}` (the frame's length field, as `[wire.framing]` says), `{pad}`
//!   (zero bytes to `size`). `{id}` alone takes the width and order of `[wire.match]`'s id.

use crate::http_vary::{cut_fields, Cut};

/// A per-request field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireField {
    /// The request's id on its connection (what a reply's id is matched with).
    Id,
    /// The request's number in the run, per class, over every connection, from 0.
    Seq,
    /// A key number drawn from `wire.keys`.
    Key,
    /// A random 64-bit number (from `run.seed`).
    Random,
    /// The intended send time, Unix ns.
    IntendedNs,
}

/// The fields by name.
const FIELDS: [(&str, WireField); 5] = [
    ("id", WireField::Id),
    ("seq", WireField::Seq),
    ("key", WireField::Key),
    ("random", WireField::Random),
    ("intended_ns", WireField::IntendedNs),
];

/// An unsigned integer's place in a frame: width and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int {
    /// 1, 2, 4 or 8 bytes.
    pub bytes: u8,
    /// Big-endian (network order).
    pub big: bool,
}

impl Int {
    /// Writes `v` (its low `bytes` bytes) into `out`.
    #[inline]
    pub fn put(self, v: u64, out: &mut [u8]) {
        let n = self.bytes as usize;
        if self.big {
            out[..n].copy_from_slice(&v.to_be_bytes()[8 - n..]);
        } else {
            out[..n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
    }

    /// Reads it from the start of `at` (which holds at least `bytes` bytes).
    #[inline]
    pub fn get(self, at: &[u8]) -> u64 {
        let n = self.bytes as usize;
        let mut b = [0u8; 8];
        if self.big {
            b[8 - n..].copy_from_slice(&at[..n]);
            u64::from_be_bytes(b)
        } else {
            b[..n].copy_from_slice(&at[..n]);
            u64::from_le_bytes(b)
        }
    }

    /// `u16be`, `u64le`, `u8`, …
    fn parse(text: &str) -> Option<Int> {
        let (bits, order) = match text.strip_prefix('u')? {
            "8" => ("8", "be"),
            t if t.len() > 2 => t.split_at(t.len() - 2),
            _ => return None,
        };
        let bytes = match bits {
            "8" => 1,
            "16" => 2,
            "32" => 4,
            "64" => 8,
            _ => return None,
        };
        let big = match order {
            "be" => true,
            "le" => false,
            _ => return None,
        };
        Some(Int { bytes, big })
    }
}

/// A binary request: its bytes, with the fields' places in them.
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryRequest {
    /// Every byte (fields as zeros, padding included).
    pub bytes: Vec<u8>,
    /// Each field's offset and width.
    pub fields: Vec<(usize, WireField, Int)>,
    /// Where the frame's length field is (`{len}`) and its width, when there is one.
    pub len_at: Option<(usize, Int)>,
}

/// A piece of a text request.
#[derive(Debug, Clone, PartialEq)]
pub enum TextPiece {
    /// Sent as it is.
    Text(Vec<u8>),
    /// Written in decimal (`Random`: 16 hex digits).
    Field(WireField),
    /// Spaces that make the request `size` bytes.
    Pad,
}

/// A text request.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRequest {
    /// Its pieces.
    pub pieces: Vec<TextPiece>,
    /// The size `{pad}` fills it to.
    pub size: Option<usize>,
}

/// A request as the driver writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestLayout {
    /// From `hex`.
    Binary(BinaryRequest),
    /// From `text`.
    Text(TextRequest),
}

impl RequestLayout {
    /// Whether it carries `field`.
    pub fn uses(&self, field: WireField) -> bool {
        match self {
            RequestLayout::Binary(b) => b.fields.iter().any(|f| f.1 == field),
            RequestLayout::Text(t) => t.pieces.contains(&TextPiece::Field(field)),
        }
    }

    /// Its last bytes when they never change (the end a delimiter must be).
    pub fn fixed_tail(&self) -> &[u8] {
        match self {
            RequestLayout::Binary(b) => {
                let ends = b.fields.iter().map(|(at, _, i)| at + i.bytes as usize);
                let from = ends
                    .chain(b.len_at.map(|(at, i)| at + i.bytes as usize))
                    .max();
                &b.bytes[from.unwrap_or(0)..]
            }
            RequestLayout::Text(t) => match t.pieces.last() {
                Some(TextPiece::Text(bytes)) => bytes,
                _ => &[],
            },
        }
    }
}

/// Reads a `text` request.
pub fn parse_text(text: &str, size: Option<usize>) -> Result<TextRequest, String> {
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    cut_fields(text.as_bytes(), |piece| {
        let piece = match piece {
            Cut::Text(t) => {
                literal.extend_from_slice(t);
                return Ok(());
            }
            Cut::Field("pad") => TextPiece::Pad,
            Cut::Field("len") => return Err("has {len}, which only a hex request holds (a text request under length framing gets its length field before it)".into()),
            Cut::Field(word) => TextPiece::Field(field_named(word)?),
        };
        if !literal.is_empty() {
            pieces.push(TextPiece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(piece);
        Ok(())
    })?;
    if !literal.is_empty() {
        pieces.push(TextPiece::Text(literal));
    }
    let pads = pieces.iter().filter(|p| **p == TextPiece::Pad).count();
    match (pads, size) {
        (0, Some(_)) => {
            Err("has a size and no {pad} to fill it: put {pad} where the padding goes".into())
        }
        (1.., None) => Err("has {pad} and no size: give size = BYTES".into()),
        (2.., _) => Err("has {pad} twice: give it once".into()),
        _ => Ok(TextRequest { pieces, size }),
    }
}

fn field_named(word: &str) -> Result<WireField, String> {
    FIELDS
        .iter()
        .find(|(name, _)| *name == word)
        .map(|f| f.1)
        .ok_or_else(|| {
            format!("has {{{word}}}, no field: the fields are {{id}}, {{seq}}, {{key}}, {{random}}, {{intended_ns}}, {{pad}} (and {{len}} in hex); write {{{{ for a {{ of the text")
        })
}

/// Reads a `hex` request; `id` is the width and order `{id}` alone takes (the match's), `len`
/// the length field's when the wire is length-framed.
pub fn parse_hex(
    text: &str,
    size: Option<usize>,
    id: Option<Int>,
    len: Option<Int>,
) -> Result<BinaryRequest, String> {
    let mut out = BinaryRequest {
        bytes: Vec::new(),
        fields: Vec::new(),
        len_at: None,
    };
    let mut pad_at = None;
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(inner) = rest.strip_prefix('{') {
            let Some(close) = inner.find('}') else {
                return Err("has a { with no }".into());
            };
            hex_field(&inner[..close], &mut out, &mut pad_at, id, len)?;
            rest = &inner[close + 1..];
            continue;
        }
        let pair = rest
            .get(..2)
            .filter(|p| p.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(pair) = pair else {
            let near: String = rest.chars().take(8).collect();
            return Err(format!(
                "has {near:?} where two hex digits or a {{field}} go"
            ));
        };
        out.bytes
            .push(u8::from_str_radix(pair, 16).expect("two hex digits"));
        rest = &rest[2..];
    }
    pad(&mut out, pad_at, size)?;
    Ok(out)
}

/// One `{…}` of a hex request.
fn hex_field(
    inner: &str,
    out: &mut BinaryRequest,
    pad_at: &mut Option<usize>,
    id: Option<Int>,
    len: Option<Int>,
) -> Result<(), String> {
    let at = out.bytes.len();
    let (name, ty) = match inner.split_once(':') {
        Some((n, t)) => (n.trim(), Some(t.trim())),
        None => (inner.trim(), None),
    };
    let int = match ty {
        Some(t) => Some(Int::parse(t).ok_or_else(|| {
            format!("has {{{inner}}}: `{t}` is no width; give u8, u16be, u16le, u32be, u32le, u64be or u64le")
        })?),
        None => None,
    };
    match name {
        "pad" if pad_at.is_some() => return Err("has {pad} twice: give it once".into()),
        "pad" => *pad_at = Some(at),
        "len" => {
            let Some(l) = len else {
                return Err("has {len}, and [wire.framing] is not by length".into());
            };
            if out.len_at.is_some() {
                return Err("has {len} twice".into());
            }
            out.len_at = Some((at, l));
            out.bytes.resize(at + l.bytes as usize, 0);
        }
        _ => {
            let field = field_named(name)?;
            let int = int
                .or(if field == WireField::Id { id } else { None })
                .ok_or_else(|| {
                    format!("has {{{name}}} without its width: write it like {{{name}:u64be}}")
                })?;
            out.fields.push((at, field, int));
            out.bytes.resize(at + int.bytes as usize, 0);
        }
    }
    Ok(())
}

/// Zero bytes at `{pad}` (or at the end) up to `size`.
fn pad(out: &mut BinaryRequest, pad_at: Option<usize>, size: Option<usize>) -> Result<(), String> {
    let Some(size) = size else {
        return match pad_at {
            Some(_) => Err("has {pad} and no size: give size = BYTES".into()),
            None => Ok(()),
        };
    };
    let have = out.bytes.len();
    if size < have {
        return Err(format!("is {have} bytes, more than its size {size}"));
    }
    let at = pad_at.unwrap_or(have);
    let extra = size - have;
    out.bytes.splice(at..at, std::iter::repeat_n(0, extra));
    for f in &mut out.fields {
        if f.0 >= at && pad_at.is_some() {
            f.0 += extra;
        }
    }
    if let Some(l) = out
        .len_at
        .as_mut()
        .filter(|l| l.0 >= at && pad_at.is_some())
    {
        l.0 += extra;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const U32BE: Int = Int {
        bytes: 4,
        big: true,
    };

    #[test]
    fn hex_requests_place_their_fields_and_padding() {
        let r = parse_hex(
            "{len} 01 {id} {pad} {intended_ns:u64le} ff",
            Some(32),
            Some(U32BE),
            Some(U32BE),
        )
        .unwrap();
        assert_eq!(r.bytes.len(), 32);
        assert_eq!(r.len_at, Some((0, U32BE)));
        assert_eq!(r.bytes[4], 1);
        assert_eq!(r.fields[0], (5, WireField::Id, U32BE));
        // 4 + 1 + 4 + 8 + 1 = 18 bytes written: 14 of padding before the stamp.
        assert_eq!(r.fields[1].0, 9 + 14);
        assert_eq!(r.bytes[31], 0xff);
        for (text, why) in [
            ("0", "two hex digits"),
            ("zz", "two hex digits"),
            ("{id}", "width"),
            ("{seq:u24be}", "no width"),
            ("{len}", "not by length"),
            ("{nope:u8}", "no field"),
            ("{pad}", "no size"),
            ("{id:u8", "no }"),
        ] {
            let e = parse_hex(text, None, None, None).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert!(parse_hex("0102", Some(1), None, None)
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn text_requests_read_fields_pad_and_literal_braces() {
        let t = parse_text("{{\"id\":{id},\"k\":\"{key}\"{pad}}\n", Some(64)).unwrap();
        assert_eq!(t.pieces[0], TextPiece::Text(b"{\"id\":".to_vec()));
        assert_eq!(t.pieces[1], TextPiece::Field(WireField::Id));
        assert!(t.pieces.contains(&TextPiece::Pad));
        assert_eq!(RequestLayout::Text(t).fixed_tail(), b"}\n");
        // A JSON object's own braces are text.
        let plain = parse_text("{\"a\": 1}\n", None).unwrap();
        assert_eq!(
            plain.pieces,
            vec![TextPiece::Text(b"{\"a\": 1}\n".to_vec())]
        );
        for (text, size, why) in [
            ("{ids}", None, "no field"),
            ("x{pad}", None, "no size"),
            ("x", Some(8), "no {pad}"),
            ("{len}x", None, "only a hex"),
        ] {
            let e = parse_text(text, size).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn integers_are_written_and_read_in_their_order() {
        let mut b = [0u8; 8];
        Int {
            bytes: 2,
            big: false,
        }
        .put(0x1234, &mut b);
        assert_eq!(&b[..2], &[0x34, 0x12]);
        assert_eq!(
            Int {
                bytes: 2,
                big: false
            }
            .get(&b),
            0x1234
        );
        U32BE.put(0x0102_0304, &mut b);
        assert_eq!(&b[..4], &[1, 2, 3, 4]);
        assert_eq!(U32BE.get(&b), 0x0102_0304);
        assert_eq!(
            Int::parse("u8"),
            Some(Int {
                bytes: 1,
                big: true
            })
        );
        assert_eq!(
            Int::parse("u64le"),
            Some(Int {
                bytes: 8,
                big: false
            })
        );
        assert_eq!(Int::parse("u24be"), None);
    }
}
