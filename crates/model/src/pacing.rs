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
    /// How long before a deadline the pacer stops sleeping and spins (precision vs CPU).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub spin: Duration,
}

impl Default for PacingSpec {
    fn default() -> Self {
        PacingSpec {
            mode: PacingMode::Immediate,
            every: None,
            batch: 1,
            per_sec: None,
            arrivals: Arrivals::Uniform,
            spin: Duration::from_micros(80),
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
    /// Checks the pacing settings (also used by `msgbench serve ticks`).
    pub fn validate(&self, invalid: &Invalid) -> Result<Pacing, ScenarioError> {
        for (field, d) in [
            ("pacing.every", self.every.unwrap_or_default()),
            ("pacing.spin", self.spin),
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
