//! Key numbers for a request's `{key}` (Redis commands, HTTP requests): one key, uniform, in
//! sequence per connection, or Zipf-distributed (a few hot keys, as YCSB draws them).
use msgbench_model::redis::KeyPattern;
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// Picks each request's key number.
pub enum Keys {
    /// One key (`keys = 0`): nothing to pick.
    Fixed,
    /// Any of `n`, equally likely.
    Uniform(u64, SmallRng),
    /// 0, 1, 2, … of `n` (the next one second), wrapping.
    Sequential(u64, u64),
    /// Zipf-distributed over `n` (the third), key 0 the hottest.
    Zipf(Zipf<f64>, SmallRng, u64),
}

impl Keys {
    /// The keys of connection `index`: `(keys, pattern, zipf exponent)`, drawn with `rng`.
    pub fn new(
        (keys, pattern, exponent): (u64, KeyPattern, f64),
        rng: SmallRng,
        index: usize,
    ) -> Keys {
        match (keys, pattern) {
            (0, _) => Keys::Fixed,
            (n, KeyPattern::Uniform) => Keys::Uniform(n, rng),
            // Connections start apart, so that they do not walk the same keys in step.
            (n, KeyPattern::Sequential) => {
                Keys::Sequential(n, (index as u64).wrapping_mul(7919) % n)
            }
            (n, KeyPattern::Zipf) => match Zipf::new(n, exponent) {
                Ok(z) => Keys::Zipf(z, rng, n),
                Err(_) => Keys::Uniform(n, rng), // refused at validation (exponent ≤ 0)
            },
        }
    }

    /// The next key number.
    #[inline]
    pub fn draw(&mut self) -> u64 {
        match self {
            Keys::Fixed => 0,
            Keys::Uniform(n, rng) => rng.gen_range(0..*n),
            Keys::Sequential(n, next) => {
                let k = *next;
                *next = (k + 1) % *n;
                k
            }
            // Zipf draws 1..=n, 1 the most frequent: key 0 is the hottest. Clamped: rounding
            // can yield n + a hair (rand_distr #54).
            Keys::Zipf(z, rng, n) => (z.sample(rng) as u64).clamp(1, *n) - 1,
        }
    }
}
