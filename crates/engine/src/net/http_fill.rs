//! HTTP/1.1 requests that vary, written per send: a template's fields filled in, or the next
//! request of a request file ([`msgbench_model::http_vary`] lays both out when the scenario
//! is checked). Nothing is allocated per request: a file's requests are copied from one
//! buffer, a template is written piece by piece, its body first into a reused scratch buffer
//! when its length must be written before it.
use super::push_decimal;
use crate::drivers::request_response::keys::Keys;
use crossbeam_utils::CachePadded;
use msgbench_model::http_vary::{Field, FileOrder, Piece, RequestFile, Template, Vary, Varying};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};

/// What every connection of a run shares: each class's count of requests written (its
/// `{seq}`, and where a cycled file is), and the wall clock's offset from the run's clock.
pub struct Counters {
    sent: Vec<CachePadded<AtomicU64>>,
    wall_minus_now_ns: i128,
    /// The run's seed (`run.seed`, a replicate's own): `{random}` and `{key}` draw from it.
    seed: u64,
}

impl Counters {
    /// Counters for `classes` classes; `{intended_ns}` is the run's clock plus
    /// `wall_minus_now_ns`; `seed` is the run's.
    pub fn new(classes: usize, wall_minus_now_ns: i128, seed: u64) -> Counters {
        Counters {
            sent: (0..classes)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            wall_minus_now_ns,
            seed,
        }
    }

    /// The next number of class `class`, over every connection.
    #[inline]
    pub(crate) fn next(&self, class: usize) -> u64 {
        self.sent[class].fetch_add(1, Ordering::Relaxed)
    }

    /// `intended_ns` (the run's clock) as Unix ns.
    #[inline]
    pub(crate) fn unix_ns(&self, intended_ns: u64) -> u64 {
        (intended_ns as i128 + self.wall_minus_now_ns).max(0) as u64
    }

    /// Connection `index`'s random streams from the run's seed: one for `{random}`, another
    /// for `{key}` (drawn from one stream, a key would follow the random number before it).
    pub(crate) fn streams(&self, index: usize) -> (SmallRng, SmallRng) {
        let stream = self.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (
            SmallRng::seed_from_u64(stream ^ 0x4177_9e5d),
            SmallRng::seed_from_u64(stream ^ 0x6b65_7973),
        )
    }
}

/// A connection's writer of varying requests.
pub struct Filler<'a> {
    counters: &'a Counters,
    keys: Keys,
    rng: SmallRng,
    /// A templated body, written before its `Content-Length` (reused).
    body: Vec<u8>,
}

impl<'a> Filler<'a> {
    /// Connection `index`'s writer; `keys` is `http.keys`' space, pattern and exponent.
    pub fn new(
        counters: &'a Counters,
        keys: (u64, msgbench_model::redis::KeyPattern, f64),
        index: usize,
    ) -> Filler<'a> {
        let (rng, key_rng) = counters.streams(index);
        Filler {
            counters,
            keys: Keys::new(keys, key_rng, index),
            rng,
            body: Vec::new(),
        }
    }

    /// Appends class `class`'s next request, meant to go at `intended_ns` (the run's clock).
    #[inline]
    pub fn write(&mut self, class: usize, vary: &Vary, intended_ns: u64, out: &mut Vec<u8>) {
        match vary {
            Vary::File(file) => out.extend_from_slice(file.request(self.pick(class, file))),
            Vary::Template(t) => self.fill(class, t, intended_ns, out),
        }
    }

    /// Which of `file`'s requests goes next.
    fn pick(&mut self, class: usize, file: &RequestFile) -> usize {
        match file.order {
            FileOrder::Cycle => (self.counters.next(class) % file.len() as u64) as usize,
            FileOrder::Random => self.rng.gen_range(0..file.len()),
        }
    }

    /// `t` with its fields filled in.
    fn fill(&mut self, class: usize, t: &Varying, intended_ns: u64, out: &mut Vec<u8>) {
        let values = Values {
            seq: if t.uses(Field::Seq) {
                self.counters.next(class)
            } else {
                0
            },
            key: if t.uses(Field::Key) {
                self.keys.draw()
            } else {
                0
            },
            random: if t.uses(Field::Random) {
                self.rng.gen()
            } else {
                0
            },
            intended_ns: self.counters.unix_ns(intended_ns),
        };
        values.write(&t.head, out);
        if t.length {
            self.body.clear();
            values.write(&t.body, &mut self.body);
            out.extend_from_slice(b"Content-Length: ");
            push_decimal(self.body.len() as u64, out);
            out.extend_from_slice(b"\r\n\r\n");
            out.extend_from_slice(&self.body);
        } else {
            out.extend_from_slice(b"\r\n");
            values.write(&t.body, out);
        }
    }
}

/// One request's fields.
struct Values {
    seq: u64,
    key: u64,
    random: u64,
    intended_ns: u64,
}

impl Values {
    /// `t` filled in, appended to `out`.
    #[inline]
    fn write(&self, t: &Template, out: &mut Vec<u8>) {
        for piece in &t.pieces {
            match piece {
                Piece::Text(text) => out.extend_from_slice(text),
                Piece::Field(Field::Seq) => push_decimal(self.seq, out),
                Piece::Field(Field::Key) => push_decimal(self.key, out),
                Piece::Field(Field::IntendedNs) => push_decimal(self.intended_ns, out),
                Piece::Field(Field::Random) => push_hex16(self.random, out),
            }
        }
    }
}

/// `n` as 16 lowercase hex digits.
#[inline]
pub(crate) fn push_hex16(n: u64, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::redis::KeyPattern;

    fn template(head: &str, body: &str, length: bool) -> Vary {
        Vary::Template(Varying {
            head: Template::parse(head.as_bytes()).unwrap(),
            body: Template::parse(body.as_bytes()).unwrap(),
            length,
        })
    }

    #[test]
    fn fields_are_filled_and_the_length_is_the_filled_body() {
        let counters = Counters::new(1, 1_000, 7);
        let mut filler = Filler::new(&counters, (10, KeyPattern::Sequential, 0.99), 0);
        let vary = template(
            "POST /i/{seq} HTTP/1.1\r\nX-T: {intended_ns}\r\n",
            "{\"k\":{key},\"r\":\"{random}\"}",
            true,
        );
        let mut out = Vec::new();
        filler.write(0, &vary, 5, &mut out);
        filler.write(0, &vary, 6, &mut out);
        let text = String::from_utf8(out).unwrap();
        let requests: Vec<&str> = text.split("POST ").skip(1).collect();
        assert!(
            requests[0].starts_with(
                "/i/0 HTTP/1.1\r\nX-T: 1005\r\nContent-Length: 30\r\n\r\n{\"k\":0,\"r\":\""
            ),
            "{text}"
        );
        assert!(
            requests[1].starts_with("/i/1 HTTP/1.1\r\nX-T: 1006\r\n"),
            "{text}"
        );
        let random = &requests[0][requests[0].len() - 18..requests[0].len() - 2];
        assert!(
            random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()),
            "{random}"
        );
    }

    #[test]
    fn a_cycled_file_goes_round_over_every_connection() {
        let file = Vary::File(RequestFile {
            path: "f".into(),
            bytes: b"AB".to_vec(),
            ends: vec![1, 2],
            order: FileOrder::Cycle,
        });
        let counters = Counters::new(1, 0, 7);
        let keys = (0, KeyPattern::Uniform, 0.99);
        let (mut a, mut b) = (
            Filler::new(&counters, keys, 0),
            Filler::new(&counters, keys, 1),
        );
        let mut out = Vec::new();
        for _ in 0..3 {
            a.write(0, &file, 0, &mut out);
            b.write(0, &file, 0, &mut out);
        }
        assert_eq!(out, b"ABABAB");
        let mut n = Vec::new();
        push_decimal(0, &mut n);
        push_decimal(u64::MAX, &mut n);
        assert_eq!(n, b"018446744073709551615");
    }
}
