//! What each stage of a run in stages did, from the run's one-second intervals: its delivered
//! rate, the median of its seconds' p99, and a spike's recovery time — from its end until the
//! p99 of a second (and of the next) is back within `pacing.recovered_within` times the stage
//! before's. Apart from [`crate::stages`] so that the result (which holds a [`StageResult`])
//! and the schedule do not import each other.
use crate::result::IntervalSample;
use crate::stages::{Profile, Shape, StageResult};

/// Each stage of `profile` as the run's one-second `intervals` saw it, a spike's recovery
/// judged against `profile.recovered_within` times the stage before's p99.
pub fn stage_results(
    profile: &Profile,
    intervals: &[IntervalSample],
    window_s: f64,
) -> Vec<StageResult> {
    let mut stages = Vec::with_capacity(profile.stages().len());
    let mut at = 0.0;
    for s in profile.stages() {
        let end = at + s.over_ns as f64 / 1e9;
        stages.push(StageResult {
            shape: s.shape,
            from_per_sec: s.from,
            to_per_sec: s.to,
            start_s: at,
            end_s: end,
            delivered_per_sec: None,
            p99_ns: None,
            recovery_s: None,
            not_recovered: false,
            recovered_within: (s.shape == Shape::Spike).then_some(profile.recovered_within),
        });
        at = end;
    }
    judge_stages(&mut stages, intervals, window_s);
    stages
}

/// Fills in each stage's figures from the run's one-second `intervals` (again after a merge
/// has added the shards' seconds): its whole seconds' delivered rate and median p99, and a
/// spike's recovery: the seconds from its end to the first second whose p99 (and the next
/// one's) is within its factor of the stage before's. Only the whole seconds of the measured
/// window (`window_s` long) count: a drain's seconds are not the schedule's.
pub fn judge_stages(stages: &mut [StageResult], intervals: &[IntervalSample], window_s: f64) {
    let whole_seconds: Vec<IntervalSample> = (intervals.iter())
        .filter(|i| i.length_s >= 0.999 && i.start_s + i.length_s <= window_s + 1e-6)
        .cloned()
        .collect();
    let intervals = &whole_seconds[..];
    for k in 0..stages.len() {
        let (at, end) = (stages[k].start_s, stages[k].end_s);
        let whole: Vec<&IntervalSample> = (intervals.iter())
            .filter(|i| {
                i.length_s > 0.0 && i.start_s >= at - 1e-9 && i.start_s + i.length_s <= end + 1e-9
            })
            .collect();
        let stage = &mut stages[k];
        // A second with nothing delivered has no p99 (its 0 is no latency): not in the median.
        let answered = whole.iter().filter(|i| i.delivered > 0);
        stage.p99_ns = median(answered.map(|i| i.latency_p99_ns).collect());
        stage.delivered_per_sec = (!whole.is_empty()).then(|| {
            let seconds: f64 = whole.iter().map(|i| i.length_s).sum();
            whole.iter().map(|i| i.delivered).sum::<u64>() as f64 / seconds
        });
        (stage.recovery_s, stage.not_recovered) = (None, false);
        let before = k.checked_sub(1).and_then(|b| stages[b].p99_ns);
        let (Some(within), Some(base)) = (stages[k].recovered_within, before.filter(|b| *b > 0))
        else {
            continue;
        };
        let limit = (base as f64 * within) as u64;
        let after: Vec<&IntervalSample> = intervals
            .iter()
            .filter(|i| i.start_s >= end - 1e-9)
            .collect();
        // A second that answered nothing (a server stalled, a rate of 0) has not recovered.
        let good = |i: &&IntervalSample| i.delivered > 0 && i.latency_p99_ns <= limit;
        let back = (0..after.len()).find(|&j| good(&after[j]) && after.get(j + 1).is_none_or(good));
        let stage = &mut stages[k];
        match back {
            Some(j) => stage.recovery_s = Some((after[j].start_s - end).max(0.0)),
            None => stage.not_recovered = true,
        }
    }
}

/// The median of `values` (`None` for none).
fn median(mut values: Vec<u64>) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::Arrivals;
    use crate::stages::{profile, StageSpec};
    use crate::ScenarioError;
    use std::time::Duration;

    fn profile_of(specs: &[StageSpec]) -> Profile {
        let invalid = |f: &str, p: String, x: &str| ScenarioError::Invalid {
            source_name: "t".into(),
            field: f.into(),
            problem: p,
            fix: x.into(),
        };
        let run = (Duration::ZERO, Duration::from_secs(60));
        profile(specs, (Some(1000.0), 2.0), Arrivals::Uniform, run, &invalid).unwrap()
    }

    fn stage(shape: Shape, to: Option<f64>, secs: f64) -> StageSpec {
        StageSpec {
            shape,
            to,
            over: Duration::from_secs_f64(secs),
        }
    }

    #[test]
    fn a_spike_s_recovery_is_the_first_second_back_within_the_factor() {
        let p = profile_of(&[
            stage(Shape::Hold, None, 3.0),
            stage(Shape::Spike, Some(5000.0), 1.0),
            stage(Shape::Hold, None, 5.0),
        ]);
        let p99s = [10, 12, 11, 900, 800, 300, 19, 40, 12];
        let intervals: Vec<IntervalSample> = (p99s.iter().enumerate())
            .map(|(i, &p99)| IntervalSample {
                start_s: i as f64,
                length_s: 1.0,
                sent: 0,
                delivered: 100,
                dropped: 0,
                skipped: 0,
                latency_p50_ns: 0,
                latency_p99_ns: p99,
                latency_max_ns: 0,
                backlog: 0,
            })
            .collect();
        let r = stage_results(&p, &intervals, 9.0);
        assert_eq!(r[0].p99_ns, Some(11));
        // Second 6 (19 ≤ 22) is followed by 40: not yet; second 8 is back to stay.
        assert_eq!((r[1].recovery_s, r[1].not_recovered), (Some(4.0), false));
        let r = stage_results(&p, &intervals[..8], 9.0);
        assert_eq!((r[1].recovery_s, r[1].not_recovered), (None, true));
        // Seconds that answered nothing (a stalled server: p99 0) are not a recovery, nor in
        // a stage's median.
        let mut stalled = intervals.clone();
        for i in [1, 6, 7] {
            (stalled[i].delivered, stalled[i].latency_p99_ns) = (0, 0);
        }
        let r = stage_results(&p, &stalled, 9.0);
        assert_eq!(r[0].p99_ns, Some(11));
        assert_eq!(r[1].recovery_s, Some(4.0), "{r:?}");
    }
}
