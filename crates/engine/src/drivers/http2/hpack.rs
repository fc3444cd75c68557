//! HPACK (RFC 7541) for msgbench's own HTTP/2 client ([`super::h2_wire`]): a decoder that
//! keeps the dynamic table exactly but decodes only the values its caller asks for, and the
//! encoding of a request's fixed header block.
//!
//! Why by hand, when the `h2` crate has one: a response's headers are read by the client
//! for two values (`:status`, and `grpc-status` in gRPC trailers), yet `h2` decodes every
//! header (Huffman included) into an `http::HeaderMap` of allocated values — 7–8 % of all
//! of a saturated HTTP/2 run's CPU in `perf` (`bench/http2-vs-h2load.sh`, nginx, 4 × 64
//! streams). Here a value is Huffman-decoded only when it is wanted or enters the dynamic
//! table (once per distinct value: servers index what repeats), and is skipped otherwise,
//! into buffers that are reused: no allocation per response.
use std::collections::VecDeque;

/// What a header block may not be (the connection ends with COMPRESSION_ERROR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpackError(pub &'static str);

/// The dynamic table's size limit this client announces (HTTP/2's default; it sends no
/// `SETTINGS_HEADER_TABLE_SIZE`).
pub const TABLE_SIZE: usize = 4096;

/// Longest string (name or value) decoded, bytes: as long as a header block may be.
const MAX_STRING: usize = 1 << 20;

/// The static table (RFC 7541, Appendix A), index 1 first.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The Huffman code's lengths in bits, by symbol (RFC 7541, Appendix B; 256 is EOS). The code
/// is canonical (codes of one length are consecutive, in symbol order, shorter lengths first),
/// so the lengths are the whole code; the tests check it against the RFC's examples.
const HUFFMAN_BITS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The canonical code's decoding tables: per length, its first code, how many codes have it,
/// and where its symbols start in `symbols` (symbols in code order).
struct Huffman {
    first: [u32; 31],
    count: [u32; 31],
    start: [u32; 31],
    symbols: [u16; 257],
}

fn huffman() -> &'static Huffman {
    static TABLE: std::sync::OnceLock<Huffman> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut h = Huffman {
            first: [0; 31],
            count: [0; 31],
            start: [0; 31],
            symbols: [0; 257],
        };
        let mut order: Vec<u16> = (0..257).collect();
        order.sort_by_key(|&s| (HUFFMAN_BITS[s as usize], s));
        for (k, &s) in order.iter().enumerate() {
            h.symbols[k] = s;
            h.count[HUFFMAN_BITS[s as usize] as usize] += 1;
        }
        let (mut code, mut at) = (0u32, 0u32);
        for len in 1..31 {
            h.first[len] = code;
            h.start[len] = at;
            code = (code + h.count[len]) << 1;
            at += h.count[len];
        }
        h
    })
}

/// Appends the Huffman-decoded `src` to `out`.
pub fn huffman_decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let h = huffman();
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let offset = code.wrapping_sub(h.first[len]);
            if offset < h.count[len] {
                let symbol = h.symbols[(h.start[len] + offset) as usize];
                if symbol == 256 {
                    return Err(HpackError("EOS in a Huffman string"));
                }
                out.push(symbol as u8);
                (code, len) = (0, 0);
            } else if len == 30 {
                return Err(HpackError("a Huffman code that does not exist"));
            }
        }
    }
    // What is left must be a prefix of EOS (all ones), shorter than a byte.
    if len >= 8 || code != (1 << len) - 1 {
        return Err(HpackError("bad Huffman padding"));
    }
    Ok(())
}

/// Decodes an integer with an `n`-bit prefix at `block[*at]` (RFC 7541, 5.1).
fn integer(block: &[u8], at: &mut usize, n: u8) -> Result<usize, HpackError> {
    let truncated = HpackError("a header block ends inside an integer");
    let mask = (1usize << n) - 1;
    let first = *block.get(*at).ok_or(truncated.clone())? as usize & mask;
    *at += 1;
    if first < mask {
        return Ok(first);
    }
    // In u64, at most 5 continuation bytes: no overflow on any target.
    let (mut value, mut shift) = (mask as u64, 0);
    loop {
        let b = *block.get(*at).ok_or(truncated.clone())? as u64;
        *at += 1;
        value += (b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return usize::try_from(value).map_err(|_| HpackError("an integer too large"));
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError("an integer too large"));
        }
    }
}

/// A string literal's place in a block: its bytes and whether they are Huffman-coded.
fn string_at<'a>(block: &'a [u8], at: &mut usize) -> Result<(&'a [u8], bool), HpackError> {
    let huffman = block.get(*at).is_some_and(|b| b & 0x80 != 0);
    let len = integer(block, at, 7)?;
    if len > MAX_STRING {
        return Err(HpackError("a string longer than a header block may be"));
    }
    let bytes = block
        .get(*at..*at + len)
        .ok_or(HpackError("a header block ends inside a string"))?;
    *at += len;
    Ok((bytes, huffman))
}

/// Strings decoded lately, by their Huffman-coded bytes: some servers (nginx) send every
/// header of every response as a literal to index, Huffman-coded, never referring to the
/// table, so each value would be decoded again per response — `huffman_decode` was 12 % of
/// all of a saturated run's CPU (`perf`, nginx, 4 × 64 streams) before this cache.
#[derive(Default)]
struct Recent {
    /// (coded, decoded), at most [`RECENT`].
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// The next entry replaced.
    next: usize,
}

/// Strings [`Recent`] keeps (a response head's worth, and then some).
const RECENT: usize = 32;
/// Longest coded string [`Recent`] keeps.
const RECENT_LEN: usize = 256;

impl Recent {
    /// The decoding of a Huffman-coded string into `out`.
    fn decode(&mut self, coded: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
        out.clear();
        if let Some((_, plain)) = self.entries.iter().find(|(c, _)| c == coded) {
            out.extend_from_slice(plain);
            return Ok(());
        }
        huffman_decode(coded, out)?;
        if coded.len() <= RECENT_LEN {
            if self.entries.len() < RECENT {
                self.entries.push((Vec::new(), Vec::new()));
            }
            let (c, p) = &mut self.entries[self.next];
            c.clear();
            p.clear();
            c.extend_from_slice(coded);
            p.extend_from_slice(out);
            self.next = (self.next + 1) % RECENT;
        }
        Ok(())
    }
}

/// The decoding side of a connection's HPACK context.
pub struct Decoder {
    /// Newest first: (name, value).
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Evicted entries' buffers, reused by the next insertions (no allocation per header of
    /// a server that indexes every header of every response).
    spare: Vec<(Vec<u8>, Vec<u8>)>,
    recent: Recent,
    /// Its size as RFC 7541 counts it (32 per entry on top of the bytes).
    size: usize,
    /// Its current limit (set by the encoder, at most [`TABLE_SIZE`]).
    max: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            table: VecDeque::new(),
            spare: Vec::new(),
            recent: Recent::default(),
            size: 0,
            max: TABLE_SIZE,
            name: Vec::new(),
            value: Vec::new(),
        }
    }
}

impl Decoder {
    /// Decodes a whole header block. `want(name)` says whose values are needed; `field` gets
    /// each of those (name, value). Every field still updates the table as the encoder did.
    pub fn decode(
        &mut self,
        block: &[u8],
        want: impl Fn(&[u8]) -> bool,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        let mut fields = 0;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                // Indexed field.
                let index = integer(block, &mut at, 7)?;
                let (name, value) = self.entry(index)?;
                if want(name) {
                    field(name, value);
                }
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update: only before the block's first field.
                if fields > 0 {
                    return Err(HpackError("a table size update after a field"));
                }
                let max = integer(block, &mut at, 5)?;
                if max > TABLE_SIZE {
                    return Err(HpackError("a table size over the limit"));
                }
                self.max = max;
                self.evict(0);
                continue;
            } else {
                // A literal: with incremental indexing (01), or without / never indexed.
                let indexing = b & 0xc0 == 0x40;
                let index = integer(block, &mut at, if indexing { 6 } else { 4 })?;
                let mut name = std::mem::take(&mut self.name);
                if index == 0 {
                    let (bytes, huff) = string_at(block, &mut at)?;
                    self.literal(bytes, huff, &mut name)?;
                } else {
                    name.clear();
                    name.extend_from_slice(self.entry(index)?.0);
                }
                let (bytes, huff) = string_at(block, &mut at)?;
                let wanted = want(&name);
                if indexing || wanted {
                    let mut value = std::mem::take(&mut self.value);
                    self.literal(bytes, huff, &mut value)?;
                    if wanted {
                        field(&name, &value);
                    }
                    if indexing {
                        self.insert(&name, &value);
                    }
                    self.value = value;
                }
                self.name = name;
            }
            fields += 1;
        }
        Ok(())
    }

    fn literal(
        &mut self,
        bytes: &[u8],
        huffman: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), HpackError> {
        if huffman {
            self.recent.decode(bytes, out)
        } else {
            out.clear();
            out.extend_from_slice(bytes);
            Ok(())
        }
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError("index 0")),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError("an index past the dynamic table")),
        }
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + 32;
        self.evict(size);
        if size <= self.max {
            let (mut n, mut v) = self.spare.pop().unwrap_or_default();
            n.clear();
            v.clear();
            n.extend_from_slice(name);
            v.extend_from_slice(value);
            self.table.push_front((n, v));
            self.size += size;
        }
    }

    /// Evicts the oldest entries until `room` more fits (all of them if it never can).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + 32;
            // As many as the table can hold entries (4096 / 32): bounded.
            if self.spare.len() < TABLE_SIZE / 32 {
                self.spare.push((n, v));
            }
        }
    }
}

/// A request's header block, encoded once and sent as it is with every request of its
/// class: pseudo-headers then the given headers, each a literal without indexing (no
/// dynamic table, so any number of connections can share it), names from the static table
/// where it has them, strings not Huffman-coded (a few bytes more, no CPU per request).
pub fn request_block(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    headers: &[(String, String)],
) -> Vec<u8> {
    let mut out = Vec::new();
    match (method, scheme) {
        ("GET", _) => out.push(0x80 | 2),
        ("POST", _) => out.push(0x80 | 3),
        _ => literal_field(&mut out, 2, b":method", method.as_bytes()),
    }
    out.push(if scheme == "https" {
        0x80 | 7
    } else {
        0x80 | 6
    });
    literal_field(&mut out, 1, b":authority", authority.as_bytes());
    literal_field(&mut out, 4, b":path", path.as_bytes());
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let index = STATIC
            .iter()
            .position(|(n, _)| *n == name.as_bytes())
            .map_or(0, |i| i + 1);
        literal_field(&mut out, index, name.as_bytes(), value.as_bytes());
    }
    out
}

/// A literal field without indexing; its name by static `index` (0: literal `name`).
fn literal_field(out: &mut Vec<u8>, index: usize, name: &[u8], value: &[u8]) {
    put_integer(out, 0x00, 4, index);
    if index == 0 {
        put_integer(out, 0x00, 7, name.len());
        out.extend_from_slice(name);
    }
    put_integer(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

fn put_integer(out: &mut Vec<u8>, flags: u8, n: u8, mut value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Every field of a block, decoded.
    fn all(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(
            block,
            |_| true,
            |n, v| {
                out.push((
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ))
            },
        )?;
        Ok(out)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn huffman_strings_of_the_rfc_decode() {
        // RFC 7541, C.4.1–C.4.3.
        for (coded, plain) in [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
        ] {
            let mut out = Vec::new();
            huffman_decode(&hex(coded), &mut out).unwrap();
            assert_eq!(out, plain.as_bytes());
        }
    }

    #[test]
    fn a_string_decoded_again_comes_from_the_recent_ones_and_is_the_same() {
        let mut recent = Recent::default();
        let mut out = Vec::new();
        for _ in 0..3 {
            recent
                .decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"), &mut out)
                .unwrap();
            assert_eq!(out, b"www.example.com");
        }
        assert_eq!(recent.entries.len(), 1);
        // Past RECENT others, it is decoded again, still right; a bad one is not kept.
        for k in 0..RECENT + 5 {
            let mut coded = Vec::new();
            // The 5-bit codes 0..9 are these symbols: two of them and 6 bits of EOS padding.
            let five = b"012aceiost";
            let (a, b) = ((k / 10) as u16, (k % 10) as u16);
            let bits = (a << 11) | (b << 6) | 0x3f;
            coded.extend_from_slice(&bits.to_be_bytes());
            recent.decode(&coded, &mut out).unwrap();
            assert_eq!(out, [five[k / 10], five[k % 10]]);
        }
        assert_eq!(recent.entries.len(), RECENT);
        assert!(recent.decode(&hex("ff"), &mut out).is_err());
        recent
            .decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"), &mut out)
            .unwrap();
        assert_eq!(out, b"www.example.com");
    }

    #[test]
    fn bad_huffman_is_refused() {
        let mut out = Vec::new();
        // Padding that is not all ones; a full byte of padding; EOS itself.
        assert!(huffman_decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4fe"), &mut out).is_err());
        assert!(huffman_decode(&hex("ff"), &mut out).is_err());
        assert!(huffman_decode(&hex("ffff fffc"), &mut out).is_err());
    }

    #[test]
    fn the_rfc_request_sequence_decodes_with_its_dynamic_table() {
        // RFC 7541, C.4: three requests on one connection, Huffman-coded, indexing.
        let mut d = Decoder::default();
        let first = all(&mut d, &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")).unwrap();
        assert_eq!(
            first,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.size, 57);
        let second = all(&mut d, &hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(second[3], pairs(&[(":authority", "www.example.com")])[0]);
        assert_eq!(second[4], pairs(&[("cache-control", "no-cache")])[0]);
        assert_eq!(d.size, 110);
        let third = all(
            &mut d,
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
        )
        .unwrap();
        assert_eq!(
            third,
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.size, 164);
    }

    #[test]
    fn entries_are_evicted_as_the_table_limit_says() {
        let mut d = Decoder::default();
        // Size update to 100, then two literals with indexing of 32 + 10 + 40 = 82 each: the
        // second evicts the first.
        let mut block = vec![0x3f, 100 - 31];
        for v in ["a".repeat(40), "b".repeat(40)] {
            block.push(0x40);
            put_integer(&mut block, 0, 7, 10);
            block.extend_from_slice(b"x-custom-h");
            put_integer(&mut block, 0, 7, v.len());
            block.extend_from_slice(v.as_bytes());
        }
        all(&mut d, &block).unwrap();
        assert_eq!(d.table.len(), 1);
        assert_eq!(d.table[0].1, "b".repeat(40).as_bytes());
        // Index 62 is the newest; 63 is gone.
        assert_eq!(all(&mut d, &[0x80 | 62]).unwrap()[0].1, "b".repeat(40));
        assert!(all(&mut d, &[0x80 | 63]).is_err());
        // A size update after a field, or above the limit, is refused.
        assert!(d.decode(&[0x88, 0x20], |_| true, |_, _| {}).is_err());
        assert!(d.decode(&[0x3f, 0xe2, 0x1f], |_| true, |_, _| {}).is_err());
    }

    #[test]
    fn values_not_wanted_are_skipped_but_indexed_ones_still_enter_the_table() {
        let mut d = Decoder::default();
        let mut block = vec![0x88]; // :status 200
                                    // date, without indexing (skipped); server, with indexing (decoded into the table).
        block.extend_from_slice(&[0x0f, 33 - 15, 3]);
        block.extend_from_slice(b"now");
        block.extend_from_slice(&[0x40 | 54, 5]);
        block.extend_from_slice(b"nginx");
        let mut seen = Vec::new();
        d.decode(
            &block,
            |n| n == b":status",
            |n, v| seen.push((n.to_vec(), v.to_vec())),
        )
        .unwrap();
        assert_eq!(seen, [(b":status".to_vec(), b"200".to_vec())]);
        assert_eq!(d.table.len(), 1);
        assert_eq!(
            all(&mut d, &[0x80 | 62]).unwrap()[0],
            pairs(&[("server", "nginx")])[0]
        );
    }

    #[test]
    fn truncated_or_hostile_blocks_are_errors_not_panics() {
        let mut d = Decoder::default();
        for block in [
            &[0x80][..],                           // index 0
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // an integer too large
            &[0x40, 0x05, b'a'],                   // a name cut short
            &[0x0f],                               // ends inside an integer
            &[0xbe],                               // an empty dynamic table's entry
        ] {
            assert!(all(&mut d, block).is_err(), "{block:?}");
        }
        // Whatever the bytes, an answer and no panic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let block: Vec<u8> = (0..(x % 40) as usize)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = all(&mut Decoder::default(), &block);
        }
    }

    #[test]
    fn a_request_block_decodes_to_what_was_given() {
        let block = request_block(
            "PATCH",
            "http",
            "127.0.0.1:8080",
            &format!("/{}", "p".repeat(200)),
            &[
                ("Content-Type".into(), "application/json".into()),
                ("x-trace".into(), "1".into()),
            ],
        );
        let got = all(&mut Decoder::default(), &block).unwrap();
        assert_eq!(
            got,
            pairs(&[
                (":method", "PATCH"),
                (":scheme", "http"),
                (":authority", "127.0.0.1:8080"),
                (":path", &format!("/{}", "p".repeat(200))),
                ("content-type", "application/json"),
                ("x-trace", "1"),
            ])
        );
    }
}
