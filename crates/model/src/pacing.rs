//! The `[pacing]` section: when the driver means to send ([`PacingSpec`] → [`Pacing`]).
use crate::check::{Invalid, ScenarioError, MAX_DURATION};

/// Highest pacing rate accepted, messages per second: one message every 10 ns is already
/// beyond what a clock read and a send can do per message; above it a schedule cannot be kept
/// and its catch-up would never end.
pub const MAX_RATE_PER_SEC: f64 = 1e8;
use crate::duration::{serde_text, serde_text_opt};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// When the driver means to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PacingSpec {
    /// `immediate`, `interval`, `rate`, `relative` or `closed-loop`.
    pub mode: PacingMode,
    /// Period of `interval` and `relative` pacing (`"1ms"`); `"0"` means immediate.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub every: Option<Duration>,
    /// Messages sent per tick of `interval` / `relative` pacing.
    pub batch: u32,
    /// Target messages per second of `rate` pacing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_sec: Option<f64>,
    /// Arrival process of `rate` pacing.
    pub arrivals: Arrivals,
    /// How long before a deadline the pacer stops sleeping and spins (precision vs CPU):
    /// `auto` (a fifth of the schedule's interval, 20–80 µs) or a duration.
    #[schemars(with = "String")]
    pub spin: Spin,
}

/// `pacing.spin`: how long before each due send the pacer stops sleeping and spins.
///
/// Measured on this project's 2-vCPU VM (`bench/pacer-spin.sh`, docs/concepts.md "The pacer's
/// spin"): at 1k/s, 80 µs costs 0.03 of a core more than no spin and halves the median latency
/// (a sleep wakes tens of µs late); at 10k/s, 80 µs costs 0.57 of a core more than 20 µs for no
/// better latency (its p99 was twice as high: the spin took the server's CPU); above, 20 µs
/// holds the schedule where 0 lets sends go 0.5 ms late. So `auto` spins a fifth of the
/// interval, at least 20 µs and at most 80 µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spin {
    /// A fifth of the schedule's interval between sends, within [`SPIN_LEAST`]..=[`SPIN_MOST`].
    #[default]
    Auto,
    /// This long.
    Fixed(Duration),
}

/// The shortest spin `auto` picks.
pub const SPIN_LEAST: Duration = Duration::from_micros(20);
/// The longest spin `auto` picks (and the spin of a pacing without a schedule).
pub const SPIN_MOST: Duration = Duration::from_micros(80);

impl Serialize for Spin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Spin::Auto => s.serialize_str("auto"),
            Spin::Fixed(d) => serde_text::serialize(d, s),
        }
    }
}

impl<'de> Deserialize<'de> for Spin {
    /// `"auto"`, or whatever `duration::serde_text` reads (text with a unit, or the integer 0).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Spin, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Auto(AutoWord),
            #[serde(with = "serde_text")]
            Fixed(Duration),
        }
        #[derive(Deserialize)]
        enum AutoWord {
            #[serde(rename = "auto")]
            Auto,
        }
        match Raw::deserialize(d) {
            Ok(Raw::Auto(_)) => Ok(Spin::Auto),
            Ok(Raw::Fixed(duration)) => Ok(Spin::Fixed(duration)),
            Err(_) => Err(serde::de::Error::custom(
                "write a duration with a unit (\"20us\", \"0\") or \"auto\"",
            )),
        }
    }
}

impl Default for PacingSpec {
    fn default() -> Self {
        PacingSpec {
            mode: PacingMode::Immediate,
            every: None,
            batch: 1,
            per_sec: None,
            arrivals: Arrivals::Uniform,
            spin: Spin::Auto,
        }
    }
}

/// Pacing modes (see `docs/concepts.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PacingMode {
    /// Send as fast as the system accepts.
    Immediate,
    /// Every `every`, send `batch` messages, on an absolute schedule.
    Interval,
    /// `per_sec` messages per second on an absolute schedule.
    Rate,
    /// Sleep `every` after each batch (relative sleeping: drifts on purpose).
    Relative,
    /// Request/response systems: send the next request when a response frees a window slot
    /// (latency then counts from the actual send: there is no schedule).
    ClosedLoop,
}

/// Arrival processes for `rate` pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Evenly spaced.
    Uniform,
    /// Exponentially distributed gaps (seeded).
    Poisson,
}

/// Validated pacing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// As fast as possible.
    Immediate,
    /// `batch` messages every `every_ns`, absolute schedule.
    Interval {
        /// Period in ns (> 0).
        every_ns: u64,
        /// Messages per tick (> 0).
        batch: u32,
    },
    /// Open-loop rate on an absolute schedule.
    Rate {
        /// Messages per second (> 0).
        per_sec: f64,
        /// Arrival process.
        arrivals: Arrivals,
    },
    /// Relative sleeping after each batch (drifts; for reproducing the trap).
    Relative {
        /// Sleep in ns (> 0).
        every_ns: u64,
        /// Messages per wake-up.
        batch: u32,
    },
    /// Request/response only: a new request whenever a response frees a window slot.
    ClosedLoop,
}

impl Pacing {
    /// The rate this pacing aims at, if it aims at one.
    pub fn target_per_sec(&self) -> Option<f64> {
        match *self {
            Pacing::Immediate | Pacing::ClosedLoop => None,
            Pacing::Interval { every_ns, batch } | Pacing::Relative { every_ns, batch } => {
                Some(batch as f64 * 1e9 / every_ns as f64)
            }
            Pacing::Rate { per_sec, .. } => Some(per_sec),
        }
    }
}

impl std::fmt::Display for Pacing {
    /// `immediate`, `interval 1ms x 10`, `rate 100000/s uniform`, `relative 1ms x 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |ns: u64| crate::duration::format(Duration::from_nanos(ns));
        match *self {
            Pacing::Immediate => write!(f, "immediate"),
            Pacing::ClosedLoop => write!(f, "closed-loop"),
            Pacing::Interval { every_ns, batch } => write!(f, "interval {} x {batch}", d(every_ns)),
            Pacing::Rate { per_sec, arrivals } => write!(
                f,
                "rate {per_sec}/s {}",
                if arrivals == Arrivals::Poisson {
                    "poisson"
                } else {
                    "uniform"
                }
            ),
            Pacing::Relative { every_ns, batch } => write!(f, "relative {} x {batch}", d(every_ns)),
        }
    }
}

impl PacingSpec {
    /// The spin of the pacer's waits, ns: `pacing.spin`, or for `auto` a fifth of the interval
    /// between due sends (`interval`: between ticks) within 20–80 µs.
    pub fn spin_ns(&self) -> u64 {
        let (least, most) = (SPIN_LEAST.as_nanos() as u64, SPIN_MOST.as_nanos() as u64);
        match (self.spin, self.mode) {
            (Spin::Fixed(d), _) => d.as_nanos() as u64,
            (Spin::Auto, PacingMode::Rate) => match self.per_sec {
                Some(r) if r > 0.0 => ((0.2e9 / r) as u64).clamp(least, most),
                _ => most,
            },
            (Spin::Auto, PacingMode::Interval) => {
                let every = self.every.unwrap_or_default().as_nanos() as u64;
                (every / 5).clamp(least, most)
            }
            (Spin::Auto, _) => most,
        }
    }

    /// A fixed spin's length (0 for `auto`), for the bounds check.
    fn spin_ns_fixed(&self) -> Duration {
        match self.spin {
            Spin::Fixed(d) => d,
            Spin::Auto => Duration::ZERO,
        }
    }

    /// Checks the pacing settings (also used by `msgbench serve ticks`).
    pub fn validate(&self, invalid: &Invalid) -> Result<Pacing, ScenarioError> {
        for (field, d) in [
            ("pacing.every", self.every.unwrap_or_default()),
            ("pacing.spin", self.spin_ns_fixed()),
        ] {
            if d > MAX_DURATION {
                return Err(invalid(
                    field,
                    format!("is {}", crate::duration::format(d)),
                    "use at most 365 days",
                ));
            }
        }
        if self.batch == 0 {
            return Err(invalid(
                "pacing.batch",
                "is 0".into(),
                "send at least 1 message per tick",
            ));
        }
        let pacing = self.schedule(invalid)?;
        if let Some(rate) = pacing.target_per_sec().filter(|r| *r > MAX_RATE_PER_SEC) {
            let field = if self.mode == PacingMode::Rate {
                "pacing.per_sec"
            } else {
                "pacing.every"
            };
            return Err(invalid(
                field,
                format!("asks for {rate:.3e} messages per second"),
                "pace at most 100 million messages per second (1e8), or use mode = \"immediate\" to send as fast as the system takes them",
            ));
        }
        Ok(pacing)
    }

    fn schedule(&self, invalid: &Invalid) -> Result<Pacing, ScenarioError> {
        let every = |mode: &str| {
            self.every.ok_or_else(|| {
                invalid(
                    "pacing.every",
                    format!("is missing for mode `{mode}`"),
                    "set it, e.g. \"1ms\"",
                )
            })
        };
        Ok(match self.mode {
            PacingMode::Immediate => Pacing::Immediate,
            PacingMode::ClosedLoop => Pacing::ClosedLoop,
            PacingMode::Interval => match every("interval")? {
                d if d.is_zero() => Pacing::Immediate,
                d => Pacing::Interval {
                    every_ns: d.as_nanos() as u64,
                    batch: self.batch,
                },
            },
            PacingMode::Relative => match every("relative")? {
                d if d.is_zero() => {
                    return Err(invalid(
                        "pacing.every",
                        "is 0 for mode `relative`".into(),
                        "use mode = \"immediate\" to send without sleeping",
                    ))
                }
                d => Pacing::Relative {
                    every_ns: d.as_nanos() as u64,
                    batch: self.batch,
                },
            },
            PacingMode::Rate => {
                let per_sec = self.per_sec.ok_or_else(|| {
                    invalid(
                        "pacing.per_sec",
                        "is missing for mode `rate`".into(),
                        "set it, e.g. 10000",
                    )
                })?;
                if !(per_sec.is_finite() && per_sec >= 0.001) {
                    return Err(invalid(
                        "pacing.per_sec",
                        format!("is {per_sec}"),
                        "give a rate of at least 0.001 messages per second, e.g. 10000",
                    ));
                }
                Pacing::Rate {
                    per_sec,
                    arrivals: self.arrivals,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    use crate::pacing::{Arrivals, Pacing};

    #[test]
    fn every_mode_validates_to_its_schedule() {
        let p = |t: &str| valid(&format!("[pacing]\n{t}")).pacing;
        assert_eq!(p("mode = \"immediate\"\n"), Pacing::Immediate);
        assert_eq!(
            p("mode = \"interval\"\nevery = \"2ms\"\nbatch = 10\n"),
            Pacing::Interval {
                every_ns: 2_000_000,
                batch: 10
            }
        );
        assert!(matches!(
            p("mode = \"rate\"\nper_sec = 1000\narrivals = \"poisson\"\n"),
            Pacing::Rate {
                arrivals: Arrivals::Poisson,
                ..
            }
        ));
    }

    #[test]
    fn the_spin_is_a_fifth_of_the_interval_within_20_to_80_us_unless_set() {
        let spin = |t: &str| valid(&format!("[pacing]\n{t}")).spin_ns;
        assert_eq!(spin("mode = \"rate\"\nper_sec = 1000\n"), 80_000);
        assert_eq!(spin("mode = \"rate\"\nper_sec = 5000\n"), 40_000);
        assert_eq!(spin("mode = \"rate\"\nper_sec = 10000\n"), 20_000);
        assert_eq!(spin("mode = \"rate\"\nper_sec = 1e6\n"), 20_000);
        assert_eq!(spin("mode = \"interval\"\nevery = \"100us\"\n"), 20_000);
        assert_eq!(spin("mode = \"immediate\"\n"), 80_000);
        assert_eq!(
            spin("mode = \"rate\"\nper_sec = 10000\nspin = \"80us\"\n"),
            80_000
        );
        assert_eq!(spin("mode = \"rate\"\nper_sec = 10000\nspin = 0\n"), 0);
        assert_eq!(spin("mode = \"rate\"\nper_sec = 10000\nspin = \"0\"\n"), 0);
        assert_eq!(spin("spin = \"auto\"\n"), 80_000);
        // Said when it may take a quarter of a core: not auto's 20 µs at 10k/s (a fifth).
        let note = |t: &str| valid(&format!("[pacing]\n{t}")).spin_note();
        assert_eq!(note("mode = \"rate\"\nper_sec = 10000\n"), None);
        let fixed = note("mode = \"rate\"\nper_sec = 10000\nspin = \"80us\"\n");
        assert!(
            fixed
                .as_deref()
                .is_some_and(|n| n.contains("last 80us") && n.contains("at most 80 % of a core")),
            "{fixed:?}"
        );
    }

    #[test]
    fn pacing_refuses_missing_and_impossible_values() {
        for (text, field) in [
            ("mode = \"interval\"\n", "pacing.every"),
            ("mode = \"rate\"\n", "pacing.per_sec"),
            ("mode = \"rate\"\nper_sec = 0\n", "pacing.per_sec"),
            ("batch = 0\n", "pacing.batch"),
            ("spin = \"400d\"\n", "pacing.spin"),
            // A schedule no clock can keep (this one ran for ever).
            ("mode = \"rate\"\nper_sec = 1e30\n", "pacing.per_sec"),
            ("mode = \"interval\"\nevery = \"1ns\"\n", "pacing.every"),
            (
                "mode = \"relative\"\nevery = \"1ms\"\nbatch = 1000000000\n",
                "pacing.every",
            ),
        ] {
            assert_eq!(refused(&format!("[pacing]\n{text}")).0, field, "{text}");
        }
    }
}
