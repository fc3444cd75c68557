//! The `wire` system: a request/response protocol described in the scenario (`[wire]`,
//! [`msgbench_model::wire`]) — the user's own server, unmodified, over TCP or a Unix socket,
//! with the byte-stream driver's pacing, window, `when_full`, classes, shards and accounting.
//!
//! Requests are laid out when the scenario is checked; here each is a copy of its bytes with
//! its fields written in (no allocation per request). Replies are cut by the framing, bounded
//! by `wire.max_reply` (a length past it, or no delimiter within it, ends the connection as a
//! protocol error), and matched in order, by a binary id or by a JSON id. A reply whose id
//! matches no request in flight is counted and skipped, the connection kept.
use crate::cpu::CpuSnapshot;
use crate::drivers::request_response::byte_stream::{self, Plan, Response, Wire};
use crate::drivers::request_response::keys::Keys;
use crate::drivers::request_response::launcher::Launch;
use crate::error::EngineError;
use crate::harness::sut::resolve_endpoint;
use crate::harness::{Measured, NoServer, RunContext, SystemUnderTest};
use crate::net::endpoint::Stream;
use crate::net::http_fill::{push_hex16, Counters};
use crate::net::json_path::{self, Found};
use crate::net::push_decimal;
use msgbench_model::client::ClientConfig;
use msgbench_model::result::ErrorCount;
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;
use msgbench_model::wire::{Framing, Matching, Status, StatusValue, WireConfig};
use msgbench_model::wire_template::{RequestLayout, TextPiece, WireField};
use rand::rngs::SmallRng;
use rand::Rng;
use std::fmt::Write as _;

/// How to get a server where the scenario points.
const HINT: &str = "(start your server there, or let the scenario start it: `[sut] command = \"exec ./my-server --port PORT\"`)";

/// Runs one `wire` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    wire: &WireConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::<NoServer>::external(sut, &ctx.stop)?;
    let counters = Counters::new(
        wire.requests.len(),
        crate::clock::wall_minus_now_ns(),
        scenario.run.seed,
    );
    let plan = Plan {
        scenario,
        client,
        address: resolve_endpoint(&wire.address)?,
        shares: wire.requests.iter().map(|r| r.share).collect(),
        make_wire: |i| DescribedWire::new(wire, &counters, i, client.window),
        hint: HINT,
        connector: (),
    };
    let out = byte_stream::drive::<_, Stream>(plan, ctx, &|| server.cpu_ns())?;
    let mut notes = server.process_notes();
    if out.faults.unmatched_replies > 0 {
        notes.push(format!(
            "{} replies carried an id of no request in flight (skipped, the connection kept): a server answering twice, or ids it does not echo as [wire.match] says",
            out.faults.unmatched_replies
        ));
    }
    if out.faults.server_errors > 0 {
        notes.push(format!(
            "{} replies had a failed status ([wire.status]; counted as failed)",
            out.faults.server_errors
        ));
    }
    Ok(Measured::from_driver(
        out,
        scenario.system.class_names(),
        process_before,
        scenario.system.describe(),
        notes,
    ))
}

/// Which fields a class's request carries (read once, not per request).
#[derive(Clone, Copy)]
struct Needs {
    seq: bool,
    key: bool,
    random: bool,
}

/// One request's field values.
struct Values {
    id: u64,
    seq: u64,
    key: u64,
    random: u64,
    intended_ns: u64,
}

impl Values {
    #[inline]
    fn get(&self, field: WireField) -> u64 {
        match field {
            WireField::Id => self.id,
            WireField::Seq => self.seq,
            WireField::Key => self.key,
            WireField::Random => self.random,
            WireField::IntendedNs => self.intended_ns,
        }
    }
}

/// A connection's side of the described protocol.
pub struct DescribedWire<'a> {
    config: &'a WireConfig,
    counters: &'a Counters,
    needs: Vec<Needs>,
    keys: Keys,
    rng: SmallRng,
    /// Narrow ids (a binary `{id}` under 8 bytes): each slot of the connection's window, the
    /// id last sent from it and how many times it was used; how many low bits name the slot.
    by_slot: Vec<(u64, u64)>,
    slot_bits: u32,
    /// Delimiter framing: bytes of the reply being read already searched (nothing is
    /// searched twice).
    scanned: usize,
    errors: Vec<ErrorCount>,
    /// The last failed reply's words (reused), counted in `errors` once the reply is known to
    /// answer a request (`pending`): a stray reply's status is no request's.
    scratch: String,
    pending: bool,
}

impl<'a> DescribedWire<'a> {
    /// The wire of connection `index`, whose window holds `window` requests.
    pub fn new(
        config: &'a WireConfig,
        counters: &'a Counters,
        index: usize,
        window: usize,
    ) -> Self {
        let (rng, key_rng) = counters.streams(index);
        let needs = config
            .requests
            .iter()
            .map(|r| Needs {
                seq: r.layout.uses(WireField::Seq),
                key: r.layout.uses(WireField::Key),
                random: r.layout.uses(WireField::Random),
            })
            .collect();
        DescribedWire {
            config,
            counters,
            needs,
            keys: Keys::new(config.keys, key_rng, index),
            rng,
            by_slot: vec![(u64::MAX, 0); window.max(1)],
            slot_bits: usize::BITS - (window.max(1) - 1).leading_zeros(),
            scanned: 0,
            errors: Vec::new(),
            scratch: String::new(),
            pending: false,
        }
    }

    fn values(&mut self, launch: &Launch) -> Values {
        let needs = self.needs[launch.class];
        Values {
            id: launch.id,
            seq: if needs.seq {
                self.counters.next(launch.class)
            } else {
                0
            },
            key: if needs.key { self.keys.draw() } else { 0 },
            random: if needs.random { self.rng.gen() } else { 0 },
            intended_ns: self.counters.unix_ns(launch.intended_ns),
        }
    }

    /// Appends a text request: its pieces, `{pad}` spaces up to its size, and its length
    /// field before it when the wire is length-framed.
    fn write_text(&self, pieces: &[TextPiece], size: Option<usize>, v: &Values, out: &mut Vec<u8>) {
        let start = out.len();
        let length = match &self.config.framing {
            Framing::Length(l) => Some(l),
            _ => None,
        };
        if let Some(l) = length {
            out.resize(start + l.offset + l.int.bytes as usize, 0);
        }
        let mut pad_at = None;
        for piece in pieces {
            match piece {
                TextPiece::Text(bytes) => out.extend_from_slice(bytes),
                TextPiece::Field(WireField::Random) => push_hex16(v.random, out),
                TextPiece::Field(f) => push_decimal(v.get(*f), out),
                TextPiece::Pad => pad_at = Some(out.len()),
            }
        }
        if let (Some(at), Some(size)) = (pad_at, size) {
            let end = out.len();
            let extra = size.saturating_sub(end - start);
            out.resize(end + extra, b' ');
            out.copy_within(at..end, at + extra);
            out[at..at + extra].fill(b' ');
        }
        if let Some(l) = length {
            let len = l.value_for(out.len() - start);
            l.int.put(len, &mut out[start + l.offset..]);
        }
    }

    /// The whole reply frame's length at the start of `buf` (`None`: not all there yet).
    fn frame_len(&mut self, buf: &[u8]) -> Result<Option<usize>, String> {
        let max = self.config.max_reply;
        match &self.config.framing {
            Framing::Fixed(size) => Ok((buf.len() >= *size).then_some(*size)),
            Framing::Length(l) => {
                let head = l.offset + l.int.bytes as usize;
                if buf.len() < head {
                    return Ok(None);
                }
                let value = l.int.get(&buf[l.offset..]);
                match l.frame_len(value) {
                    Some(n) if n >= head && n <= max => Ok((buf.len() >= n).then_some(n)),
                    _ => Err(format!(
                        "a reply's length field says {value}, a frame outside {head}..={max} bytes (wire.max_reply); is [wire.framing] right?"
                    )),
                }
            }
            Framing::Delimiter(d) => {
                let from = self.scanned.saturating_sub(d.len() - 1);
                let found = find(&buf[from..], d).map(|at| from + at + d.len());
                match found {
                    Some(n) if n <= max => {
                        self.scanned = 0;
                        Ok(Some(n))
                    }
                    None if buf.len() <= max => {
                        self.scanned = buf.len();
                        Ok(None)
                    }
                    _ => Err(format!(
                        "no delimiter within {max} bytes of a reply (wire.max_reply); is [wire.framing] right?"
                    )),
                }
            }
        }
    }

    /// The reply's id (when replies carry one) and whether it was delivered.
    fn judge(&mut self, frame: &[u8]) -> Result<(Option<u64>, bool), String> {
        let json = matches!(self.config.matching, Matching::Json(_))
            || matches!(self.config.status, Some(Status::Json { .. }));
        let (json_id, json_ok) = if json {
            self.judge_json(frame)?
        } else {
            (None, true)
        };
        let id = match &self.config.matching {
            Matching::Order => None,
            Matching::Id { offset, int } => {
                let at = field_at(frame, *offset, int.bytes, "id")?;
                Some(self.widen(int.get(at), int.bytes))
            }
            Matching::Json(_) => json_id,
        };
        let ok = match &self.config.status {
            Some(Status::Binary { offset, int, ok }) => {
                let status = int.get(field_at(frame, *offset, int.bytes, "status")?);
                ok.contains(&status) || self.failed(format_args!("status {status}"))
            }
            Some(Status::Json { .. }) => json_ok,
            Some(Status::Prefix(fails)) => match fails.iter().find(|p| frame.starts_with(p)) {
                None => true,
                Some(_) => {
                    let line = &frame[..frame.len().min(60)];
                    let line = String::from_utf8_lossy(line);
                    self.failed(format_args!("{}", line.trim_end()))
                }
            },
            None => true,
        };
        Ok((id, ok))
    }

    /// A JSON reply (a line, its delimiter cut off): its id at the match's path, its status.
    fn judge_json(&mut self, frame: &[u8]) -> Result<(Option<u64>, bool), String> {
        let body = match &self.config.framing {
            Framing::Delimiter(d) => &frame[..frame.len() - d.len()],
            _ => frame,
        };
        let empty: &[String] = &[];
        let id_path = match &self.config.matching {
            Matching::Json(p) => p.as_slice(),
            _ => empty,
        };
        let (status_path, ok_values) = match &self.config.status {
            Some(Status::Json { path, ok }) => (path.as_slice(), ok.as_slice()),
            _ => (empty, &[][..]),
        };
        let [id, status, _] = json_path::find(body, &[id_path, status_path, empty])
            .map_err(|e| format!("a reply that is not JSON ({e}): {}", show(body)))?;
        let id = match (id_path.is_empty(), id) {
            (true, _) => None,
            (false, Found::Int(n)) => Some(n),
            (false, Found::Text(t)) if t.parse::<u64>().is_ok() => t.parse().ok(),
            (false, _) => {
                return Err(format!(
                    "a reply without a whole-number id at `{}`: {}",
                    id_path.join("."),
                    show(body)
                ))
            }
        };
        let ok = status_path.is_empty() || self.json_status_ok(&status, ok_values);
        Ok((id, ok))
    }

    /// Whether a JSON status is a delivered one; counts a failed one by its words.
    fn json_status_ok(&mut self, status: &Found<'_>, ok: &[StatusValue]) -> bool {
        let delivered = if ok.is_empty() {
            matches!(status, Found::Missing | Found::Null)
        } else {
            ok.iter().any(|v| match (v, status) {
                (StatusValue::Int(n), Found::Int(m)) => n == m,
                (StatusValue::Text(a), Found::Text(b)) => a == b,
                _ => false,
            })
        };
        delivered
            || match status {
                Found::Int(n) => self.failed(format_args!("status {n}")),
                Found::Text(t) => self.failed(format_args!("status {t:?}")),
                Found::Missing => self.failed(format_args!("no status")),
                _ => self.failed(format_args!("an error member")),
            }
    }

    /// Keeps a failed reply's `words` to count; always false (the reply is not delivered).
    fn failed(&mut self, words: std::fmt::Arguments<'_>) -> bool {
        self.scratch.clear();
        let _ = self.scratch.write_fmt(words);
        self.pending = true;
        false
    }

    /// Counts the last failed reply's words, now that it answered a request.
    fn count_pending(&mut self) {
        if std::mem::take(&mut self.pending) {
            ErrorCount::add(&mut self.errors, &self.scratch, 1);
        }
    }

    /// The id of the request last sent from window slot `slot` in `bytes` bytes: the slot in
    /// the low `slot_bits`, as much of the slot's use count as fits above it (the model keeps
    /// the window below 2^(8 × bytes), so every request in flight has its own, and a slot's
    /// previous request differs from its current one).
    #[inline]
    fn narrow(&self, slot: usize, bytes: u8) -> u64 {
        let (id, uses) = self.by_slot[slot];
        if bytes >= 8 {
            return id;
        }
        (uses << self.slot_bits | slot as u64) & ((1u64 << (8 * u32::from(bytes))) - 1)
    }

    /// The request id a reply's narrow id stands for: the one last sent from its slot, when
    /// the use count's bits agree (else an id of no request: a stale or foreign reply).
    #[inline]
    fn widen(&self, narrow: u64, bytes: u8) -> u64 {
        if bytes >= 8 {
            return narrow;
        }
        let slot = (narrow & ((1u64 << self.slot_bits) - 1)) as usize;
        match self.by_slot.get(slot) {
            Some(&(id, _)) if id != u64::MAX && self.narrow(slot, bytes) == narrow => id,
            _ => u64::MAX,
        }
    }
}

/// The `bytes` bytes of a reply's `what` at `offset`.
fn field_at<'f>(frame: &'f [u8], offset: usize, bytes: u8, what: &str) -> Result<&'f [u8], String> {
    frame.get(offset..offset + bytes as usize).ok_or_else(|| {
        format!(
            "a reply of {} bytes, too short for its {what} at offset {offset}",
            frame.len()
        )
    })
}

/// Where `needle` starts in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    match needle {
        [b] => hay.iter().position(|x| x == b),
        _ => hay.windows(needle.len()).position(|w| w == needle),
    }
}

/// The start of a reply, for an error message.
fn show(body: &[u8]) -> String {
    let cut = &body[..body.len().min(80)];
    format!(
        "{:?}{}",
        String::from_utf8_lossy(cut),
        if body.len() > 80 { "…" } else { "" }
    )
}

impl Wire for DescribedWire<'_> {
    /// A reply with an id of no request in flight is skipped and counted.
    const STRAY_REPLIES_FAIL: bool = false;

    #[inline]
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>) {
        let slot = (launch.id & 0xFFFF_FFFF) as usize;
        if slot >= self.by_slot.len() {
            self.by_slot.resize(slot + 1, (u64::MAX, 0));
        }
        let uses = self.by_slot[slot].1 + 1;
        self.by_slot[slot] = (launch.id, uses);
        let v = self.values(launch);
        let config = self.config;
        match &config.requests[launch.class].layout {
            RequestLayout::Binary(b) => {
                let start = out.len();
                out.extend_from_slice(&b.bytes);
                let frame = &mut out[start..];
                for (at, field, int) in &b.fields {
                    let value = match field {
                        WireField::Id => self.narrow(slot, int.bytes),
                        _ => v.get(*field),
                    };
                    int.put(value, &mut frame[*at..]);
                }
                if let (Some((at, int)), Framing::Length(l)) = (b.len_at, &config.framing) {
                    int.put(l.value_for(frame.len()), &mut frame[at..]);
                }
            }
            RequestLayout::Text(t) => self.write_text(&t.pieces, t.size, &v, out),
        }
    }

    #[inline]
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        self.count_pending();
        let Some(size) = self.frame_len(buf)? else {
            return Ok(None);
        };
        let (id, ok) = self.judge(&buf[..size])?;
        Ok(Some(Response {
            id,
            size,
            ok,
            closes: false,
        }))
    }

    fn reset(&mut self) {
        self.count_pending();
        self.scanned = 0;
    }

    fn stray(&mut self) {
        self.pending = false;
    }

    fn unfinished(&self, held: &[u8]) -> Option<String> {
        let n = held.len();
        Some(match &self.config.framing {
            Framing::Length(l) if n >= l.offset + l.int.bytes as usize => {
                let value = l.int.get(&held[l.offset..]);
                let frame = l.frame_len(value).unwrap_or(usize::MAX);
                format!("{n} bytes of a reply whose length field says {value}, a frame of {frame} bytes: is [wire.framing] right (endian, counts, offset)?")
            }
            Framing::Length(_) => format!("{n} bytes of a reply, short of its length field"),
            Framing::Delimiter(d) => format!(
                "{n} bytes of a reply without the delimiter \"{}\": is [wire.framing] right?",
                d.escape_ascii()
            ),
            Framing::Fixed(size) => format!("{n} of a reply's {size} bytes"),
        })
    }

    fn take_errors(&mut self) -> Vec<ErrorCount> {
        self.count_pending();
        std::mem::take(&mut self.errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_ids_name_their_slot_and_refuse_a_slot_s_previous_request() {
        let wire = WireConfig {
            address: "127.0.0.1:1".into(),
            framing: Framing::Fixed(8),
            requests: Vec::new(),
            matching: Matching::Order,
            status: None,
            keys: (0, msgbench_model::redis::KeyPattern::Uniform, 1.0),
            max_reply: 64,
        };
        let counters = Counters::new(1, 0, 1);
        let mut w = DescribedWire::new(&wire, &counters, 0, 16);
        assert_eq!(w.slot_bits, 4);
        // A window that completes in order reuses slot s every 16 sends: the slot's own use
        // count tells its requests apart even in 1 byte (4 bits of it).
        for generation in 1..100u64 {
            for slot in [0usize, 5, 15] {
                let id = generation << 32 | slot as u64;
                let before = w.narrow(slot, 1);
                let uses = w.by_slot[slot].1 + 1;
                w.by_slot[slot] = (id, uses);
                for bytes in [1u8, 2, 4] {
                    let narrow = w.narrow(slot, bytes);
                    assert!(narrow < 1 << (8 * bytes as u32));
                    assert_eq!(w.widen(narrow, bytes), id, "{bytes} bytes, {id:#x}");
                }
                if generation > 1 {
                    assert_eq!(w.widen(before, 1), u64::MAX, "the slot's previous request");
                }
                assert_eq!(w.narrow(slot, 8), id);
            }
        }
    }
}
