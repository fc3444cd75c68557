//! The fuzzers' kit, shared by `fuzz.rs` and `fuzz_wires.rs`: `cargo fuzz` needs a nightly
//! toolchain; this runs on stable. Proptest draws a seed and a valid message, and each case
//! feeds the decoder that message mutated 100 ways (bytes flipped, set to edge values, cut,
//! inserted, repeated, a 4-byte length made huge) plus random bytes one time in eight.
#![allow(dead_code)] // each fuzzing binary uses part of it
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Mutated inputs per proptest case.
const PER_CASE: u64 = 100;

/// Inputs per decoder: `MSGBENCH_FUZZ_CASES`, or 100 000 in the test suite.
pub fn inputs() -> u64 {
    std::env::var("MSGBENCH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// A small, fast generator for the mutations (the seed comes from proptest).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `valid` with 1–4 random edits, or (one time in eight) random bytes.
pub fn mutate(rng: &mut Rng, valid: &[u8], out: &mut Vec<u8>) {
    out.clear();
    if rng.below(8) == 0 {
        let n = rng.below(300);
        out.extend((0..n).map(|_| rng.next() as u8));
        return;
    }
    out.extend_from_slice(valid);
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = [0, 0xff, 0x7f, 0x80, b'"', b'\r', b'\n', b'-'][rng.below(8)];
            }
            2 => out.truncate(rng.below(len + 1)),
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(32)).min(len);
                let chunk = out[from..to].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, chunk);
            }
            5 if len >= 4 => {
                // A length or count field made huge.
                let i = rng.below(len - 3);
                out[i..i + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0x7f]);
            }
            _ => {
                let at = rng.below(len + 1);
                out.insert(at, b"0123456789{}[]:,"[rng.below(16)]);
            }
        }
    }
}

/// Feeds `decode` `inputs()` mutations of `seeds`; prints how many it ran.
pub fn fuzz(name: &str, seeds: &[Vec<u8>], decode: impl Fn(&[u8])) {
    fuzz_n(name, inputs(), seeds, decode)
}

/// Feeds `decode` `total` mutations of `seeds` (at least one case); prints how many it ran.
pub fn fuzz_n(name: &str, total: u64, seeds: &[Vec<u8>], decode: impl Fn(&[u8])) {
    let cases = total.div_ceil(PER_CASE).max(1) as u32;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let ran = std::cell::Cell::new(0u64);
    let started = std::time::Instant::now();
    runner
        .run(&(any::<u64>(), 0..seeds.len()), |(seed, which)| {
            let mut rng = Rng(seed | 1);
            let mut input = Vec::new();
            for _ in 0..PER_CASE {
                mutate(&mut rng, &seeds[which], &mut input);
                decode(&input);
            }
            ran.set(ran.get() + PER_CASE);
            Ok(())
        })
        .unwrap();
    println!(
        "fuzz {name}: {} inputs, no panic ({:.1} s)",
        ran.get(),
        started.elapsed().as_secs_f64()
    );
}
