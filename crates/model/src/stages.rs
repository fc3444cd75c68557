//! Load that changes shape within a run: `pacing.mode = "stages"`, a list of open-loop rate
//! stages (`ramp`, `step`, `hold`, `spike`), each `{ to = rate, over = duration }`
//! ([`StageSpec`] → [`Profile`]); what each stage did is judged from the run's seconds in
//! [`crate::stage_judge`].
//!
//! The schedule is the rate's integral: message k (of the whole run, every connection
//! together) is due when the count of messages the rate calls for, Λ(t) = ∫₀ᵗ rate, reaches
//! k (uniform arrivals), or reaches a running sum of exponential gaps (Poisson arrivals: a
//! non-homogeneous Poisson process by time rescaling). On a linear ramp Λ is quadratic and its
//! inverse closed-form, so a due time is computed, never searched for, and never drifts.
use crate::arrivals::{Arrivals, MAX_RATE_PER_SEC};
use crate::check::{Invalid, ScenarioError, MAX_DURATION};
use crate::duration::serde_text;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Most stages a run may have (a profile is kept inline, so that a pacing stays `Copy`).
pub const MAX_STAGES: usize = 32;

/// How a stage moves the rate.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// From the rate before to `to`, linearly over `over` (k6's stages).
    #[default]
    Ramp,
    /// To `to` at once, held for `over`.
    Step,
    /// The rate before, held for `over` (`to` is not given).
    Hold,
    /// To `to` at once for `over`, then back to the rate before: its recovery is measured.
    Spike,
}

/// One stage as the scenario writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// `ramp` (the default), `step`, `hold` or `spike`.
    #[serde(default)]
    pub shape: Shape,
    /// The rate the stage goes to, messages per second (not for `hold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<f64>,
    /// How long the stage lasts (`"10s"`).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub over: Duration,
}

/// One validated stage: the rate goes from `from` to `to` over `over_ns` (a ramp), or is `to`
/// throughout (step, spike; hold has `to == from`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// Its shape.
    pub shape: Shape,
    /// The rate when it starts, per second (a step's or a spike's: the rate before it).
    pub from: f64,
    /// The rate it goes to, per second.
    pub to: f64,
    /// Its length, ns.
    pub over_ns: u64,
}

impl Stage {
    const NONE: Stage = Stage {
        shape: Shape::Hold,
        from: 0.0,
        to: 0.0,
        over_ns: 0,
    };

    /// The rate at its start and at its end, per ns, as the schedule follows it.
    fn rates_per_ns(&self) -> (f64, f64) {
        match self.shape {
            Shape::Ramp => (self.from / 1e9, self.to / 1e9),
            _ => (self.to / 1e9, self.to / 1e9),
        }
    }
}

/// A run's rate profile: the warm-up at the first stage's starting rate, then the stages; past
/// their end, the last rate is held until the run's end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    stages: [Stage; MAX_STAGES],
    len: usize,
    /// The warm-up before the first stage, ns.
    pub warmup_ns: u64,
    /// The measured window (`run.duration`), ns: the stages and the last rate held after them.
    pub run_ns: u64,
    /// The rate of the warm-up and the first stage's "rate before", per second.
    pub start: f64,
    /// The arrival process within the stages.
    pub arrivals: Arrivals,
    /// This sender's part: it takes messages `index`, `index + of`, … of the whole schedule
    /// (uniform), or an `of`-th of its arrivals (Poisson). `(0, 1)` for the whole.
    pub part: (u64, u64),
    /// A spike has recovered once a second's p99 is within this many times the stage before's.
    pub recovered_within: f64,
}

impl Profile {
    /// The stages.
    pub fn stages(&self) -> &[Stage] {
        &self.stages[..self.len]
    }

    /// The stages' length together, ns.
    pub fn span_ns(&self) -> u64 {
        self.stages().iter().map(|s| s.over_ns).sum()
    }

    /// The mean rate over the measured window, per second: the messages the stages (and the
    /// last rate held after them) call for over `run.duration`, what the run is judged by.
    pub fn mean_per_sec(&self) -> f64 {
        let span = self.run_ns.max(1);
        (self.count_at(self.warmup_ns + span) - self.count_at(self.warmup_ns)) * 1e9 / span as f64
    }

    /// The highest rate it asks for, per second.
    pub fn peak(&self) -> f64 {
        (self.stages().iter()).fold(self.start, |m, s| m.max(s.to).max(s.from))
    }

    /// The rate after the last stage, per second.
    fn last_rate(&self) -> f64 {
        match self.stages().last() {
            Some(s) if s.shape == Shape::Spike => s.from,
            Some(s) => s.to,
            None => self.start,
        }
    }

    /// Its segments from the schedule's start: (length ns, rate at start and end per ns); the
    /// warm-up first, the held last rate after (of no end).
    fn segments(&self) -> impl Iterator<Item = (u64, (f64, f64))> + '_ {
        let warmup = (self.warmup_ns, (self.start / 1e9, self.start / 1e9));
        let last = self.last_rate() / 1e9;
        std::iter::once(warmup)
            .chain(self.stages().iter().map(|s| (s.over_ns, s.rates_per_ns())))
            .chain(std::iter::once((u64::MAX, (last, last))))
    }

    /// Messages the whole schedule calls for from its start to `t_ns` after it (Λ).
    pub fn count_at(&self, t_ns: u64) -> f64 {
        let (mut count, mut at) = (0.0, 0u64);
        for (len, (a, b)) in self.segments() {
            let into = t_ns.saturating_sub(at).min(len) as f64;
            count += if len == u64::MAX || a == b {
                a * into
            } else {
                a * into + (b - a) * into * into / (2.0 * len as f64)
            };
            if t_ns <= at.saturating_add(len) {
                break;
            }
            at += len;
        }
        count
    }

    /// When, from the schedule's start, the whole schedule's count reaches `count` (Λ⁻¹), ns;
    /// `None` if it never does (the rate falls to 0 for good before).
    pub fn time_of(&self, count: f64) -> Option<u64> {
        let (mut left, mut at) = (count.max(0.0), 0u64);
        for (len, (a, b)) in self.segments() {
            let whole = if len == u64::MAX {
                f64::INFINITY
            } else {
                let t = len as f64;
                (a + b) / 2.0 * t
            };
            if left <= whole && (a > 0.0 || b > 0.0) {
                let t = if a == b || len == u64::MAX {
                    left / a
                } else {
                    // a·t + (b−a)·t²/(2·len) = left, in the form that is stable when a → 0.
                    let slope = (b - a) / len as f64;
                    let denominator = a + (a * a + 2.0 * slope * left).max(0.0).sqrt();
                    // A ramp from 0: its first message is due at its start.
                    if denominator > 0.0 {
                        2.0 * left / denominator
                    } else {
                        0.0
                    }
                };
                if !t.is_finite() {
                    return None;
                }
                return Some(at.saturating_add(t.min(len as f64) as u64));
            }
            if len == u64::MAX {
                return None;
            }
            left -= whole;
            at = at.saturating_add(len);
        }
        None
    }

    /// The rate the schedule asks for `t_ns` after its start, per second (the warm-up's, a
    /// stage's, or the one held after the stages).
    pub fn rate_at(&self, t_ns: u64) -> f64 {
        let mut at = 0u64;
        for (len, (a, b)) in self.segments() {
            if t_ns < at.saturating_add(len) {
                let into = (t_ns - at) as f64;
                let r = if len == u64::MAX {
                    a
                } else {
                    a + (b - a) * into / len as f64
                };
                return r * 1e9;
            }
            at = at.saturating_add(len);
        }
        self.last_rate()
    }
}

impl std::fmt::Display for Profile {
    /// `stages 1000/s ramp→5000/s 2s, spike→9000/s 1s uniform`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stages from {}/s", self.start)?;
        for s in self.stages() {
            let over = crate::duration::format(Duration::from_nanos(s.over_ns));
            match s.shape {
                Shape::Hold => write!(f, ", hold {over}")?,
                Shape::Ramp => write!(f, ", ramp to {}/s over {over}", s.to)?,
                Shape::Step => write!(f, ", step to {}/s for {over}", s.to)?,
                Shape::Spike => write!(f, ", spike to {}/s for {over}", s.to)?,
            }
        }
        let arrivals = match self.arrivals {
            Arrivals::Uniform => "uniform",
            Arrivals::Poisson => "poisson",
        };
        write!(f, " {arrivals}")
    }
}

/// Checks `specs` into a profile that starts at `start` (the first stage's `to` when not
/// given) after a warm-up of `warmup`, within a run of `duration`.
pub(crate) fn profile(
    specs: &[StageSpec],
    (start, recovered_within): (Option<f64>, f64),
    arrivals: Arrivals,
    (warmup, duration): (Duration, Duration),
    invalid: &Invalid,
) -> Result<Profile, ScenarioError> {
    if specs.is_empty() || specs.len() > MAX_STAGES {
        return Err(invalid(
            "pacing.stages",
            format!("has {} stages", specs.len()),
            &format!("give 1 to {MAX_STAGES} stages, e.g. stages = [{{ to = 1000, over = \"10s\" }}, {{ shape = \"spike\", to = 5000, over = \"2s\" }}, {{ shape = \"hold\", over = \"10s\" }}]"),
        ));
    }
    let rate_ok = |r: f64| r.is_finite() && (0.0..=MAX_RATE_PER_SEC).contains(&r);
    // As k6's ramping arrival rate: a first ramp climbs from 0; a first step or spike starts at
    // its own rate (a hold first needs `start`).
    let start = start
        .or(match specs[0].shape {
            Shape::Ramp => Some(0.0),
            _ => specs[0].to,
        })
        .unwrap_or(0.0);
    if !rate_ok(start) {
        return Err(invalid(
            "pacing.start",
            format!("is {start}"),
            "give a rate from 0 to 1e8 per second",
        ));
    }
    let stages = checked_stages(specs, start, invalid)?;
    let profile = Profile {
        stages,
        len: specs.len(),
        warmup_ns: warmup.as_nanos() as u64,
        run_ns: duration.as_nanos() as u64,
        start,
        arrivals,
        part: (0, 1),
        recovered_within,
    };
    if profile.span_ns() > duration.as_nanos() as u64 {
        let span = crate::duration::format(Duration::from_nanos(profile.span_ns()));
        return Err(invalid("pacing.stages", format!("last {span}, longer than run.duration ({})", crate::duration::format(duration)), &format!("give run.duration = \"{span}\" or more (after the last stage its rate is held to the run's end)")));
    }
    if profile.peak() <= 0.0 {
        return Err(invalid(
            "pacing.stages",
            "never ask for a message (every rate is 0)".into(),
            "give a stage a rate above 0",
        ));
    }
    Ok(profile)
}

/// Each stage checked, with the rate it starts from (a spike's: the rate before it, which the
/// stage after it starts from again).
fn checked_stages(
    specs: &[StageSpec],
    start: f64,
    invalid: &Invalid,
) -> Result<[Stage; MAX_STAGES], ScenarioError> {
    let rate_ok = |r: f64| r.is_finite() && (0.0..=MAX_RATE_PER_SEC).contains(&r);
    let mut stages = [Stage::NONE; MAX_STAGES];
    let mut before = start;
    for (i, spec) in specs.iter().enumerate() {
        let field = format!("pacing.stages[{i}]");
        let to = match (spec.shape, spec.to) {
            (Shape::Hold, None) => before,
            (Shape::Hold, Some(_)) => {
                return Err(invalid(
                    &field,
                    "is a hold with `to`".into(),
                    "a hold keeps the rate before it: leave `to` out, or make it a step",
                ));
            }
            (_, None) => {
                return Err(invalid(
                    &field,
                    format!("is a {:?} without `to`", spec.shape).to_lowercase(),
                    "give the rate it goes to, e.g. { to = 5000, over = \"10s\" }",
                ));
            }
            (_, Some(to)) if !rate_ok(to) => {
                return Err(invalid(
                    &field,
                    format!("goes to {to}"),
                    "give a rate from 0 to 1e8 per second",
                ));
            }
            (_, Some(to)) => to,
        };
        if spec.over.is_zero() || spec.over > MAX_DURATION {
            return Err(invalid(&field, format!("lasts {}", crate::duration::format(spec.over)), "give each stage a length from 1ms to 365 days (a step is `shape = \"step\"`, not a ramp of 0 s)"));
        }
        stages[i] = Stage {
            shape: spec.shape,
            from: before,
            to,
            over_ns: spec.over.as_nanos() as u64,
        };
        if spec.shape != Shape::Spike {
            before = to;
        }
    }
    Ok(stages)
}

/// What one stage of a run did, in its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageResult {
    /// Its shape.
    pub shape: Shape,
    /// The rate when it starts, per second (a step's or a spike's: the rate before it).
    pub from_per_sec: f64,
    /// The rate it goes to, per second.
    pub to_per_sec: f64,
    /// Its start, seconds since the measured window began.
    pub start_s: f64,
    /// Its end, seconds since the measured window began.
    pub end_s: f64,
    /// Messages delivered per second over its whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_per_sec: Option<f64>,
    /// The median of its whole seconds' p99 latency, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    /// A spike: seconds from its end until the p99 of a second was back within
    /// `recovered_within` times the stage before's (and stayed so the next second); `None`
    /// when it was not by the run's end, or there was no stage before to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_s: Option<f64>,
    /// A spike: whether its recovery could be judged and was not reached by the run's end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_recovered: bool,
    /// A spike: the factor its recovery is judged with (`pacing.recovered_within`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_within: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(shape: Shape, to: Option<f64>, secs: f64) -> StageSpec {
        StageSpec {
            shape,
            to,
            over: Duration::from_secs_f64(secs),
        }
    }

    fn profile_of(specs: &[StageSpec], warmup_s: u64) -> Profile {
        let invalid = |f: &str, p: String, x: &str| ScenarioError::Invalid {
            source_name: "t".into(),
            field: f.into(),
            problem: p,
            fix: x.into(),
        };
        profile(
            specs,
            (Some(1000.0), 2.0),
            Arrivals::Uniform,
            (Duration::from_secs(warmup_s), Duration::from_secs(60)),
            &invalid,
        )
        .unwrap()
    }

    #[test]
    fn a_first_ramp_climbs_from_0_and_its_first_message_is_due_at_its_start() {
        let invalid = |f: &str, p: String, x: &str| ScenarioError::Invalid {
            source_name: "t".into(),
            field: f.into(),
            problem: p,
            fix: x.into(),
        };
        let run = (Duration::ZERO, Duration::from_secs(2));
        let specs = [stage(Shape::Ramp, Some(1000.0), 1.0)];
        let p = profile(&specs, (None, 2.0), Arrivals::Uniform, run, &invalid).unwrap();
        assert_eq!((p.start, p.time_of(0.0)), (0.0, Some(0)));
        assert!((p.count_at(1_000_000_000) - 500.0).abs() < 1e-6);
        // Message 8 of a ramp of 1000/s² is due at √(2·8/1000) s.
        let t = p.time_of(8.0).unwrap() as f64 / 1e9;
        assert!((t - (16.0f64 / 1000.0).sqrt()).abs() < 1e-6, "{t}");
        // The mean over the run (the stage, then 1000/s held for 1 s): 1500 in 2 s.
        assert!(
            (p.mean_per_sec() - 750.0).abs() < 1e-6,
            "{}",
            p.mean_per_sec()
        );
    }

    #[test]
    fn the_count_follows_each_shape_and_its_inverse_lands_on_it() {
        // 1 s warm-up at 1000/s, ramp to 3000/s over 2 s, spike to 9000/s for 1 s, hold 1 s
        // (back at 3000/s), step to 0 for 1 s, then 0 held.
        let p = profile_of(
            &[
                stage(Shape::Ramp, Some(3000.0), 2.0),
                stage(Shape::Spike, Some(9000.0), 1.0),
                stage(Shape::Hold, None, 1.0),
                stage(Shape::Step, Some(0.0), 1.0),
            ],
            1,
        );
        let s = |x: f64| (x * 1e9) as u64;
        for (t, count) in [
            (1.0, 1000.0),
            (2.0, 1000.0 + 1500.0),
            (3.0, 1000.0 + 4000.0),
            (4.0, 14_000.0),
            (5.0, 17_000.0),
            (6.0, 17_000.0),
            (100.0, 17_000.0),
        ] {
            assert!(
                (p.count_at(s(t)) - count).abs() < 1e-6,
                "Λ({t}) = {} not {count}",
                p.count_at(s(t))
            );
        }
        for k in [
            0.0, 1.0, 999.0, 1000.5, 2500.0, 4999.0, 5000.0, 9000.0, 16_999.0,
        ] {
            let t = p.time_of(k).unwrap();
            assert!(
                (p.count_at(t) - k).abs() < 0.01,
                "Λ(Λ⁻¹({k})) = {}",
                p.count_at(t)
            );
        }
        assert_eq!(p.time_of(17_000.5), None, "the rate is 0 for good");
        for (t, rate) in [(3.5, 9000.0), (4.5, 3000.0), (2.0, 2000.0)] {
            assert!((p.rate_at(s(t)) - rate).abs() < 1e-6, "rate at {t}");
        }
    }
}
