//! Thresholds: pass/fail checks on a finished run, for CI (`p99 < 10ms`, `delivered >= 99.9%`,
//! `failed == 0`, `class.get.p99 < 5ms`, `client.slow.dropped == 0`). One grammar with the SLO
//! of advice and `search` ([`crate::slo::Slo::parse`] reads its latency subset).
//!
//! ```text
//! threshold := [scope "."] metric op value
//! scope     := "class." NAME | "client." NAME      (a stream client or its group)
//!            | "publish."                          (pubsub: the broker's answers to publishes)
//! metric    := p50 | p90 | p95 | p99 | p99.9 | p99.99 | max        (value: a duration)
//!            | delivered | failed | dropped | skipped                (value: a count or N%)
//!            | rate                                  (value: messages/s, or N% of the target)
//! op        := < | <= | > | >= | ==
//! ```
//! Percentages: `delivered`, `failed` and `dropped` of the messages sent, `skipped` of those
//! attempted. A run whose verdict is not valid fails every threshold: its figures cannot be
//! trusted to pass.
use crate::histogram::Percentiles;
use crate::percentile::SloMetric;
use crate::result::{Counters, RunResult};
use std::time::Duration;

/// How to write one, for every parse error.
pub const HELP: &str = "write it like `p99 < 10ms`, `delivered >= 99.9%`, `failed == 0`, \
`rate >= 95%` or `class.get.p99 < 5ms` (latency: p50, p90, p95, p99, p99.9, p99.99, max with a \
duration; delivered, failed, dropped, skipped with a count or a percentage; rate in messages/s \
or % of the target; recovery, a spike stage's recovery time, with a duration; operators <, <=, \
>, >=, ==; scopes class.NAME., client.NAME. and publish. (a pubsub run's publish latency: \
`publish.p99 < 5ms`))";

/// A parsed threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// As written (trimmed), for reports.
    pub text: String,
    /// What part of a run it looks at.
    pub scope: Scope,
    /// Which figure.
    pub metric: Metric,
    /// How the figure compares with the bound.
    pub op: Op,
    /// The bound.
    pub bound: Bound,
}

/// The part of a run a threshold looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The whole run.
    Run,
    /// One operation class (its latency only: classes have no counters of their own).
    Class(String),
    /// A stream client by name (`native-0`) or every client of a group (`native`).
    Client(String),
    /// A pubsub run's publish latency (the broker's answer − the intended publish time).
    Publish,
}

/// The figures a threshold may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// A latency percentile.
    Latency(SloMetric),
    /// Messages delivered.
    Delivered,
    /// Messages failed.
    Failed,
    /// Messages dropped.
    Dropped,
    /// Messages skipped (not sent: the schedule could not be kept).
    Skipped,
    /// Delivered per second of the measured window.
    Rate,
    /// A spike stage's recovery time (`pacing.mode = "stages"`): every spike's must pass.
    Recovery,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
}

/// A threshold's bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// A latency, ns.
    Nanos(u64),
    /// A count (or, for `rate`, messages per second).
    Number(f64),
    /// A percentage (of the messages sent, attempted, or of the target rate).
    Percent(f64),
}

/// One threshold checked on one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The threshold as written.
    pub threshold: String,
    /// The run.
    pub run_id: String,
    /// The measured figure, formatted like the bound (`4.21 ms`, `99.95 %`, `0`), or `–`.
    pub measured: String,
    /// Whether the run passes it.
    pub passed: bool,
    /// Why it failed when the figure alone does not say (a missing class).
    pub note: Option<String>,
    /// Why the run is not valid, when it is not: the check is not judged (it fails, shown
    /// `INVALID` with this reason, not as a figure that missed its bound).
    pub invalid: Option<String>,
}

impl Op {
    const ALL: [(&'static str, Op); 5] = [
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("==", Op::Eq),
        ("<", Op::Lt),
        (">", Op::Gt),
    ];

    fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Op::Lt => value < bound,
            Op::Le => value <= bound,
            Op::Gt => value > bound,
            Op::Ge => value >= bound,
            Op::Eq => value == bound,
        }
    }
}

impl Threshold {
    /// Parses one threshold; errors name what is wrong and end with [`HELP`].
    pub fn parse(text: &str) -> Result<Threshold, String> {
        let text = text.trim();
        let fail = |what: String| format!("cannot parse the threshold `{text}`: {what}; {HELP}");
        let (at, symbol, op) = Op::ALL
            .iter()
            .filter_map(|(s, o)| text.find(s).map(|i| (i, *s, *o)))
            .min_by_key(|(i, s, _)| (*i, std::cmp::Reverse(s.len())))
            .ok_or_else(|| fail("no comparison (<, <=, >, >=, ==)".into()))?;
        let left = text[..at].trim().to_ascii_lowercase();
        let right = text[at + symbol.len()..].trim();
        let (scope, metric_text) = split_scope(&left).map_err(&fail)?;
        let metric =
            metric(metric_text).ok_or_else(|| fail(format!("unknown metric `{metric_text}`")))?;
        if matches!(scope, Scope::Class(_)) && !matches!(metric, Metric::Latency(_)) {
            return Err(fail(format!(
                "a class has latency figures only, not `{metric_text}`"
            )));
        }
        if metric == Metric::Recovery && scope != Scope::Run {
            return Err(fail(
                "recovery is the run's (a spike stage's), not a class's or a client's".into(),
            ));
        }
        if scope == Scope::Publish && !matches!(metric, Metric::Latency(_)) {
            return Err(fail(format!(
                "publish latency has latency figures only, not `{metric_text}`"
            )));
        }
        let bound = bound(metric, right).map_err(&fail)?;
        Ok(Threshold {
            text: text.to_string(),
            scope,
            metric,
            op,
            bound,
        })
    }

    /// Checks it on `run`; `valid` is the run's verdict (an invalid run fails).
    pub fn check(&self, run: &RunResult, valid: Result<(), &str>) -> Outcome {
        let mut outcome = Outcome {
            threshold: self.text.clone(),
            run_id: run.run_id.clone(),
            measured: "–".into(),
            passed: false,
            note: None,
            invalid: None,
        };
        let figures = match self.figures(run) {
            Ok(f) => f,
            Err(why) => {
                outcome.note = Some(why);
                return outcome;
            }
        };
        // The worst figure is shown: every client of a group must pass.
        let mut passed = true;
        let mut shown = None;
        for (value, bound) in figures {
            let ok = self.op.holds(value, bound);
            if shown.is_none() || (!ok && passed) {
                shown = Some(value);
            }
            passed &= ok;
        }
        outcome.measured = shown.map(|v| self.format(v)).unwrap_or_else(|| "–".into());
        outcome.passed = passed;
        if let Err(why) = valid {
            outcome.passed = false;
            outcome.invalid = Some(why.to_string());
        }
        outcome
    }

    /// (measured value, bound) pairs in the bound's unit, one per client of a group.
    fn figures(&self, run: &RunResult) -> Result<Vec<(f64, f64)>, String> {
        match &self.scope {
            Scope::Run if self.metric == Metric::Recovery => recoveries(run, self.bound),
            Scope::Run => Ok(vec![self.figure(&run.counters, &run.latency, run)]),
            Scope::Class(name) => {
                let class = run
                    .classes
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name));
                let Some(class) = class else {
                    let known: Vec<&str> = run.classes.iter().map(|c| c.name.as_str()).collect();
                    return Err(format!(
                        "the run has no class `{name}` (its classes: {})",
                        list_or_none(&known)
                    ));
                };
                Ok(vec![self.figure(&run.counters, &class.latency, run)])
            }
            Scope::Publish => match &run.publish_latency {
                Some(p) => Ok(vec![self.figure(&run.counters, p, run)]),
                None => Err(
                    "the run has no publish latency (its broker answers no publish: NATS core, MQTT at QoS 0, Kafka at acks 0, or not a pubsub run)"
                        .into(),
                ),
            },
            Scope::Client(name) => {
                let clients: Vec<_> = run
                    .streams
                    .iter()
                    .filter(|s| {
                        s.name.eq_ignore_ascii_case(name) || s.group.eq_ignore_ascii_case(name)
                    })
                    .collect();
                if clients.is_empty() {
                    let known: Vec<&str> = run.streams.iter().map(|s| s.name.as_str()).collect();
                    return Err(format!(
                        "the run has no stream client or group `{name}` (its clients: {})",
                        list_or_none(&known)
                    ));
                }
                Ok(clients
                    .iter()
                    .map(|c| self.figure(&c.counters, &c.latency, run))
                    .collect())
            }
        }
    }

    fn figure(&self, c: &Counters, latency: &Percentiles, run: &RunResult) -> (f64, f64) {
        let share = |part: u64, of: u64| 100.0 * part as f64 / of.max(1) as f64;
        let value = match (self.metric, self.bound) {
            (Metric::Latency(m), _) => m.of(latency) as f64,
            (Metric::Recovery, _) => unreachable!("a recovery's figures are its spikes'"),
            (Metric::Delivered, Bound::Percent(_)) => share(c.delivered, c.sent),
            (Metric::Failed, Bound::Percent(_)) => share(c.failed, c.sent),
            (Metric::Dropped, Bound::Percent(_)) => share(c.dropped, c.sent),
            (Metric::Skipped, Bound::Percent(_)) => share(c.skipped, c.attempted),
            (Metric::Delivered, _) => c.delivered as f64,
            (Metric::Failed, _) => c.failed as f64,
            (Metric::Dropped, _) => c.dropped as f64,
            (Metric::Skipped, _) => c.skipped as f64,
            (Metric::Rate, bound) => {
                let rate = c.delivered as f64 / run.duration_s.max(1e-9);
                match (bound, run.target_per_sec) {
                    (Bound::Percent(_), Some(target)) if target > 0.0 => 100.0 * rate / target,
                    // No target (closed loop, unpaced): a share of nothing is 0 % and fails.
                    (Bound::Percent(_), _) => 0.0,
                    _ => rate,
                }
            }
        };
        let bound = match self.bound {
            Bound::Nanos(n) => n as f64,
            Bound::Number(n) | Bound::Percent(n) => n,
        };
        (value, bound)
    }

    fn format(&self, value: f64) -> String {
        match self.bound {
            Bound::Nanos(_) if value.is_infinite() => "not recovered".into(),
            Bound::Nanos(_) => latency(value),
            Bound::Percent(_) => format!("{value:.3} %"),
            Bound::Number(_) if self.metric == Metric::Rate => format!("{value:.0}/s"),
            Bound::Number(_) => format!("{value:.0}"),
        }
    }

    /// The latency SLO it states, when it is one (`p99 < 10ms`: a whole-run percentile below or
    /// at a bound).
    pub fn as_slo(&self) -> Option<(SloMetric, bool, u64)> {
        match (&self.scope, self.metric, self.op, self.bound) {
            (Scope::Run, Metric::Latency(m), Op::Lt, Bound::Nanos(n)) => Some((m, false, n)),
            (Scope::Run, Metric::Latency(m), Op::Le, Bound::Nanos(n)) => Some((m, true, n)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A latency with three significant digits in the unit that suits it, as the tables print it.
fn latency(ns: f64) -> String {
    let (v, unit) = match ns {
        n if n < 1e3 => return format!("{n:.0} ns"),
        n if n < 1e6 => (n / 1e3, "µs"),
        n if n < 1e9 => (n / 1e6, "ms"),
        n => (n / 1e9, "s"),
    };
    let digits = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.digits$} {unit}")
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// `class.get.p99` → (Class("get"), "p99"); `p99.9` → (Run, "p99.9").
fn split_scope(left: &str) -> Result<(Scope, &str), String> {
    if let Some(metric) = left.strip_prefix("publish.") {
        return Ok((Scope::Publish, metric.trim()));
    }
    for (prefix, make) in [
        ("class.", Scope::Class as fn(String) -> Scope),
        ("client.", Scope::Client as fn(String) -> Scope),
    ] {
        if let Some(rest) = left.strip_prefix(prefix) {
            // The metric is what follows the name's dot; a name has no dots, a metric may.
            let (name, metric) = rest
                .split_once('.')
                .ok_or_else(|| format!("`{left}` names no metric after the {prefix} name"))?;
            if name.is_empty() {
                return Err(format!("`{left}` has an empty name"));
            }
            return Ok((make(name.to_string()), metric.trim()));
        }
    }
    Ok((Scope::Run, left))
}

fn metric(text: &str) -> Option<Metric> {
    let latency = match text {
        "p999" => Some(SloMetric::P999),
        "p9999" => Some(SloMetric::P9999),
        "p100" => Some(SloMetric::Max),
        other => SloMetric::named(other),
    };
    if let Some(m) = latency {
        return Some(Metric::Latency(m));
    }
    Some(match text {
        "delivered" => Metric::Delivered,
        "failed" => Metric::Failed,
        "dropped" => Metric::Dropped,
        "skipped" => Metric::Skipped,
        "rate" => Metric::Rate,
        "recovery" => Metric::Recovery,
        _ => return None,
    })
}

fn bound(metric: Metric, text: &str) -> Result<Bound, String> {
    if text.is_empty() {
        return Err("nothing after the comparison".into());
    }
    let percent = text.strip_suffix('%').map(str::trim);
    match metric {
        Metric::Latency(_) | Metric::Recovery => {
            let name = match metric {
                Metric::Latency(m) => m.name(),
                _ => "recovery",
            };
            if percent.is_some() {
                return Err(format!(
                    "{name} is a latency and {text} a percentage: compare it with a duration such as 10ms",
                ));
            }
            let d = crate::duration::parse(text)
                .map_err(|e| format!("{name} is a latency: `{text}` is not a duration ({e})"))?;
            if d.is_zero() || d > Duration::from_secs(3600) {
                return Err("the bound must be between 1ns and 1h".into());
            }
            Ok(Bound::Nanos(d.as_nanos() as u64))
        }
        _ => {
            let number = percent.unwrap_or(text);
            if crate::duration::parse(number).is_ok_and(|d| !d.is_zero())
                && number.parse::<f64>().is_err()
            {
                return Err(format!("`{text}` is a duration: compare a latency (p99, max) with it, or this count with a number or a percentage"));
            }
            let v: f64 = number
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("`{text}` is not a number or a percentage"))?;
            match percent {
                Some(_) if v > 100.0 && metric != Metric::Rate => {
                    Err(format!("{v}% is more than all of them"))
                }
                None if metric != Metric::Rate && v.fract() != 0.0 => Err(format!(
                    "`{text}` is not a whole number: a count is compared with one (or with a \
                     percentage, e.g. 0.5%)"
                )),
                Some(_) => Ok(Bound::Percent(v)),
                None => Ok(Bound::Number(v)),
            }
        }
    }
}

/// (recovery ns, bound ns) of each spike stage of `run`: a spike not recovered by the run's end
/// is infinitely long; one whose stage before had no whole second cannot be judged.
fn recoveries(run: &RunResult, bound: Bound) -> Result<Vec<(f64, f64)>, String> {
    let Bound::Nanos(bound) = bound else {
        unreachable!("recovery is bounded by a duration")
    };
    let spikes: Vec<_> = (run.stages.iter())
        .filter(|s| s.shape == crate::stages::Shape::Spike)
        .collect();
    if spikes.is_empty() {
        return Err(
            "the run has no spike stage (pacing.mode = \"stages\" with a shape = \"spike\")".into(),
        );
    }
    spikes
        .iter()
        .map(|s| match (s.recovery_s, s.not_recovered) {
            (Some(r), _) => Ok((r * 1e9, bound as f64)),
            (None, true) => Ok((f64::INFINITY, bound as f64)),
            (None, false) => Err(format!(
                "the spike at {:.2} s has no stage before it with a whole second to compare with",
                s.start_s
            )),
        })
        .collect()
}

/// Every threshold on every run: outcomes in run order, thresholds in the order given.
pub fn check_all(thresholds: &[Threshold], runs: &[RunResult]) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(thresholds.len() * runs.len());
    for run in runs {
        let verdict = crate::verdict::judge(run);
        let why = verdict.reasons.first().map(String::as_str);
        for t in thresholds {
            out.push(t.check(run, why.map_or(Ok(()), Err)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_in_every_form() {
        let t = Threshold::parse("p99 < 10ms").unwrap();
        assert_eq!(
            (t.scope.clone(), t.metric, t.op, t.bound),
            (
                Scope::Run,
                Metric::Latency(SloMetric::P99),
                Op::Lt,
                Bound::Nanos(10_000_000)
            )
        );
        assert_eq!(
            Threshold::parse("p99.9<=50ms").unwrap().metric,
            Metric::Latency(SloMetric::P999)
        );
        let t = Threshold::parse("delivered >= 99.9%").unwrap();
        assert_eq!(
            (t.metric, t.op, t.bound),
            (Metric::Delivered, Op::Ge, Bound::Percent(99.9))
        );
        let t = Threshold::parse("failed == 0").unwrap();
        assert_eq!(
            (t.metric, t.op, t.bound),
            (Metric::Failed, Op::Eq, Bound::Number(0.0))
        );
        let t = Threshold::parse("class.strong.p99 < 5ms").unwrap();
        assert_eq!(t.scope, Scope::Class("strong".into()));
        let t = Threshold::parse("client.slow.p99.9 < 5ms").unwrap();
        assert_eq!(
            (t.scope, t.metric),
            (
                Scope::Client("slow".into()),
                Metric::Latency(SloMetric::P999)
            )
        );
        assert_eq!(
            Threshold::parse("rate >= 95%").unwrap().bound,
            Bound::Percent(95.0)
        );
        assert_eq!(
            Threshold::parse("rate > 5e4").unwrap().bound,
            Bound::Number(5e4)
        );
    }

    #[test]
    fn bad_thresholds_say_what_is_wrong_and_how_to_write_one() {
        for (bad, why) in [
            ("p99 10ms", "no comparison"),
            ("p98 < 1ms", "unknown metric `p98`"),
            ("p99 < 5%", "is a latency and 5% a percentage"),
            ("delivered >= 10ms", "is a duration"),
            ("failed == lots", "not a number"),
            ("delivered >= 120%", "more than all"),
            ("class.get.failed == 0", "latency figures only"),
            ("class..p99 < 1ms", "empty name"),
            ("p99 <", "nothing after"),
            ("failed == 0.5", "not a whole number"),
            ("publish.dropped == 0", "latency figures only"),
        ] {
            let e = Threshold::parse(bad).unwrap_err();
            assert!(e.contains(why) && e.contains("p99 < 10ms"), "{bad}: {e}");
        }
    }

    fn run(delivered: u64, sent: u64, p99_ms: u64) -> RunResult {
        RunResult {
            run_id: "000".into(),
            counters: Counters {
                attempted: sent,
                sent,
                delivered,
                failed: sent - delivered,
                ..Counters::default()
            },
            latency: Percentiles {
                p99_ns: p99_ms * 1_000_000,
                ..Percentiles::default()
            },
            duration_s: 1.0,
            target_per_sec: Some(sent as f64),
            ..RunResult::default()
        }
    }

    #[test]
    fn outcomes_compare_the_measured_figure_and_an_invalid_run_fails() {
        let r = run(999, 1000, 4);
        let check = |t: &str| Threshold::parse(t).unwrap().check(&r, Ok(()));
        assert!(check("p99 < 10ms").passed);
        assert_eq!(check("p99 < 10ms").measured, "4.00 ms");
        assert!(!check("p99 < 4ms").passed && check("p99 <= 4ms").passed);
        assert!(check("delivered >= 99.9%").passed && !check("delivered >= 99.95%").passed);
        assert!(!check("failed == 0").passed && check("failed <= 1").passed);
        assert!(check("rate >= 99%").passed && !check("rate >= 100%").passed);
        let missing = check("class.nope.p99 < 1s");
        assert!(!missing.passed && missing.note.unwrap().contains("no class `nope`"));
        let invalid = Threshold::parse("p99 < 10ms")
            .unwrap()
            .check(&r, Err("target missed"));
        assert!(!invalid.passed && invalid.invalid.unwrap().contains("target missed"));
    }

    #[test]
    fn publish_latency_is_checked_where_the_broker_answers_publishes() {
        let t = Threshold::parse("publish.p99 < 5ms").unwrap();
        assert_eq!(
            (t.scope.clone(), t.metric),
            (Scope::Publish, Metric::Latency(SloMetric::P99))
        );
        let mut r = run(1000, 1000, 40);
        let none = t.check(&r, Ok(()));
        assert!(!none.passed && none.note.unwrap().contains("no publish latency"));
        r.publish_latency = Some(Percentiles {
            p99_ns: 3_000_000,
            ..Percentiles::default()
        });
        let answered = t.check(&r, Ok(()));
        assert!(answered.passed, "{answered:?}");
        assert_eq!(answered.measured, "3.00 ms");
    }
}

#[cfg(test)]
mod recovery_tests {
    use super::*;
    use crate::stages::{Shape, StageResult};

    fn stage(shape: Shape, recovery_s: Option<f64>, not_recovered: bool) -> StageResult {
        StageResult {
            shape,
            from_per_sec: 100.0,
            to_per_sec: 500.0,
            start_s: 1.0,
            end_s: 2.0,
            delivered_per_sec: Some(100.0),
            p99_ns: Some(1_000_000),
            recovery_s,
            not_recovered,
            recovered_within: (shape == Shape::Spike).then_some(2.0),
        }
    }

    #[test]
    fn recovery_is_every_spike_s_and_one_not_recovered_fails() {
        let t = Threshold::parse("recovery < 3s").unwrap();
        assert_eq!(
            (t.metric, t.bound),
            (Metric::Recovery, Bound::Nanos(3_000_000_000))
        );
        for bad in ["class.a.recovery < 1s", "recovery < 5%", "recovery < many"] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        let mut run = RunResult {
            run_id: "000".into(),
            stages: vec![
                stage(Shape::Hold, None, false),
                stage(Shape::Spike, Some(2.0), false),
            ],
            ..RunResult::default()
        };
        let o = t.check(&run, Ok(()));
        assert!(o.passed && o.measured == "2.00 s", "{o:?}");
        run.stages.push(stage(Shape::Spike, None, true));
        let o = t.check(&run, Ok(()));
        assert!(!o.passed && o.measured == "not recovered", "{o:?}");
        run.stages.clear();
        let o = t.check(&run, Ok(()));
        assert!(!o.passed && o.note.unwrap().contains("no spike stage"));
    }
}
