//! The `[pacing]` section: when the driver means to send ([`PacingSpec`] → [`Pacing`]).
use crate::check::{Invalid, ScenarioError, MAX_DURATION};

pub use crate::arrivals::{Arrivals, MAX_RATE_PER_SEC};
use crate::duration::{serde_text, serde_text_opt};
use crate::stages::{Profile, StageSpec};
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
    /// `stages` pacing: the rate stages in order, each `{ shape = "ramp" | "step" | "hold" |
    /// "spike", to = rate, over = "10s" }` (request/response systems).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageSpec>,
    /// `stages` pacing: the rate of the warm-up and before the first stage (default: the
    /// first stage's `to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<f64>,
    /// `stages` pacing: a spike has recovered once the p99 of a second (and of the next) is
    /// within this many times the stage before's (the median of its seconds' p99).
    pub recovered_within: f64,
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
            stages: Vec::new(),
            start: None,
            recovered_within: 2.0,
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
    /// Request/response systems: an open-loop rate that changes within the run, stage by
    /// stage (`stages`).
    Stages,
}

/// Validated pacing.
// `Stages` holds its profile inline (about 1 KiB) so that a pacing stays `Copy`: it is handed
// by value to every sender and copied once when one starts, never per message.
#[allow(clippy::large_enum_variant)]
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
    /// Request/response only: an open-loop rate that changes stage by stage. (Inline, so
    /// that a pacing stays `Copy`: a few hundred bytes, copied only when a sender starts.)
    Stages(Profile),
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
            // Its mean over the stages (what a run of their length is meant to offer).
            Pacing::Stages(p) => Some(p.mean_per_sec()),
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
            Pacing::Stages(p) => write!(f, "{p}"),
        }
    }
}

impl PacingSpec {
    /// The mode's name as a scenario writes it.
    fn mode_name(&self) -> String {
        serde_json::to_value(self.mode)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }

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
            // The shortest interval of the stages: at their peak rate.
            (Spin::Auto, PacingMode::Stages) => {
                let peak = (self.stages.iter().filter_map(|s| s.to))
                    .fold(self.start.unwrap_or(0.0), f64::max);
                if peak > 0.0 {
                    ((0.2e9 / peak) as u64).clamp(least, most)
                } else {
                    most
                }
            }
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

    /// Checks the pacing settings (also used by `msgbench serve ticks`, where `stages` is
    /// refused: they belong to a run of a known length).
    pub fn validate(&self, invalid: &Invalid) -> Result<Pacing, ScenarioError> {
        self.validate_for(None, invalid)
    }

    /// Checks the pacing settings of a run with `(warmup, duration)`.
    pub fn validate_for(
        &self,
        run: Option<(Duration, Duration)>,
        invalid: &Invalid,
    ) -> Result<Pacing, ScenarioError> {
        if self.mode == PacingMode::Stages {
            let Some(run) = run else {
                return Err(invalid(
                    "pacing.mode",
                    "is stages".into(),
                    "stages pace a scenario's run: give rate, interval or immediate here",
                ));
            };
            if !(self.recovered_within.is_finite() && self.recovered_within >= 1.0) {
                return Err(invalid("pacing.recovered_within", format!("is {}", self.recovered_within), "give a factor of at least 1, e.g. 2 (p99 back within twice the stage before's)"));
            }
            let profile = crate::stages::profile(
                &self.stages,
                (self.start, self.recovered_within),
                self.arrivals,
                run,
                invalid,
            )?;
            return Ok(Pacing::Stages(profile));
        }
        if !self.stages.is_empty() || self.start.is_some() {
            return Err(invalid("pacing.stages", format!("is given with mode = \"{}\"", self.mode_name()), "stages are their own pacing: give mode = \"stages\", or leave stages and start out"));
        }
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
            PacingMode::Stages => unreachable!("stages are checked in validate_for"),
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
    fn stages_validate_to_a_profile_and_are_refused_where_they_cannot_pace() {
        const S: &str = "[run]\nduration = \"10s\"\n[pacing]\nmode = \"stages\"\n";
        let p = valid(&format!("system = \"rpc\"\n{S}start = 100\nstages = [{{ to = 300, over = \"2s\" }}, {{ shape = \"spike\", to = 900, over = \"1s\" }}, {{ shape = \"hold\", over = \"1s\" }}]\n"));
        let Pacing::Stages(profile) = p.pacing else {
            panic!("{:?}", p.pacing)
        };
        assert_eq!(profile.stages().len(), 3);
        assert_eq!(
            (profile.stages()[2].from, profile.stages()[2].to),
            (300.0, 300.0)
        );
        // Mean over the run: (400 + 900 + 300) in the stages' 4 s, 300/s held for 6 s.
        assert!((p.pacing.target_per_sec().unwrap() - 340.0).abs() < 1e-6);
        assert!(
            p.pacing.to_string().contains("spike to 900/s for 1s"),
            "{}",
            p.pacing
        );
        for (text, field, says) in [
            (format!("system = \"rpc\"\n{S}stages = [{{ to = 1, over = \"11s\" }}]\n"), "pacing.stages", "longer than run.duration"),
            (format!("system = \"rpc\"\n{S}stages = []\n"), "pacing.stages", "0 stages"),
            (format!("system = \"rpc\"\n{S}stages = [{{ shape = \"hold\", to = 5, over = \"1s\" }}]\n"), "pacing.stages[0]", "a hold with `to`"),
            (format!("system = \"rpc\"\n{S}stages = [{{ shape = \"spike\", over = \"1s\" }}]\n"), "pacing.stages[0]", "spike without `to`"),
            (format!("system = \"rpc\"\n{S}stages = [{{ to = 5, over = \"0s\" }}]\n"), "pacing.stages[0]", "lasts 0"),
            (format!("system = \"rpc\"\n{S}recovered_within = 0.5\nstages = [{{ to = 5, over = \"1s\" }}]\n"), "pacing.recovered_within", "0.5"),
            (format!("system = \"rpc\"\n{S}stages = [{{ to = 0, over = \"1s\" }}]\n"), "pacing.stages", "every rate is 0"),
            ("system = \"rpc\"\n[pacing]\nmode = \"rate\"\nper_sec = 5\nstages = [{ to = 5, over = \"1s\" }]\n".to_string(), "pacing.stages", "mode = \"rate\""),
            (format!("system = \"queue\"\n{S}stages = [{{ to = 5, over = \"1s\" }}]\n"), "pacing.mode", "system is queue"),
            (format!("system = \"rpc\"\n{S}stages = [{{ to = 5, over = \"1s\" }}]\n[report]\nthresholds = [\"recovery < 2s\"]\n"), "report.thresholds", "no spike stage"),
        ] {
            let (at, message) = refused(&text);
            assert_eq!(at, field, "{message}");
            assert!(message.contains(says), "{message}");
        }
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
