//! Knee and advice for sweeps, along the last **load** axis (a rate, a window, connections,
//! threads: `msgbench_model::sweep::LOAD_AXES`, or one the scenario marks) with one curve per
//! combination of the other axes: where does more load stop buying throughput, and which
//! setting to ship under an SLO. The rule, stated once (docs/metrics.md, "Advice"): the knee is
//! the first valid point that no later valid point beats by more than [`PLATEAU_GAIN`]; every
//! sentence below is worded from that rule. Invalid runs are shown in tables and charts but
//! never advised.
use crate::format::{count, duration_ns};
use crate::validity::judge;
use msgbench_model::result::RunResult;
use msgbench_model::slo::{Slo, SloMetric};
use msgbench_model::sweep::{is_load_axis, short_axis};
use std::collections::BTreeMap;

/// Gain in throughput below which one more step counts as "the plateau".
pub const PLATEAU_GAIN: f64 = 0.05;
/// A setting within this share of the best throughput counts as "as good".
pub const NEAR_BEST: f64 = 0.05;

/// One sweep point on a curve: medians over its replicates.
#[derive(Debug, Clone)]
pub struct CurvePoint {
    /// Sweep point index.
    pub point: usize,
    /// The curve axis's value at this point.
    pub setting: String,
    /// Delivered per second.
    pub throughput: f64,
    /// The SLO's percentile (p99 without an SLO), ns.
    pub latency_ns: f64,
    /// Every replicate valid.
    pub valid: bool,
    /// The server allowed fewer concurrent streams than the window (HTTP/2): the rest of the
    /// window waited on the client.
    pub capped: bool,
}

/// One curve and what it says.
#[derive(Debug, Clone)]
pub struct Advice {
    /// The swept axis along the curve.
    pub axis: String,
    /// The other axes' values (empty for a one-axis sweep).
    pub label: String,
    /// Its points, in sweep order.
    pub points: Vec<CurvePoint>,
    /// Index (into `points`) of the knee, if throughput plateaus.
    pub knee: Option<usize>,
    /// Index (into `points`) of the recommended setting under the SLO.
    pub recommended: Option<usize>,
    /// The advice, in sentences.
    pub text: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::compare::median(&{
        v.retain(|x| x.is_finite());
        v
    })
}

/// The axes a result directory's scenario marks as load (`[report] load_axes` in its
/// `experiment.toml`), besides the built-in ones.
pub fn marked_load_axes(dir: &std::path::Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join("experiment.toml")) else {
        return Vec::new();
    };
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    doc.get("report")
        .and_then(|r| r.get("load_axes"))
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Curves of the runs' sweep along its last load axis (see [`is_load_axis`]; `marked` are the
/// scenario's own), one per combination of the other axes. None without a load axis, or with
/// a single point per curve.
pub fn advise(runs: &[RunResult], slo: Option<&Slo>, marked: &[String]) -> Vec<Advice> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let Some(axis) = first
        .params
        .iter()
        .rev()
        .find(|p| is_load_axis(&p.axis, marked))
        .map(|p| p.axis.clone())
    else {
        return Vec::new();
    };
    // A knee needs an ordered axis (a window, a rate, a period); wait strategies or pinning
    // layouts have no "next step".
    let ordered = runs.iter().all(|r| {
        r.param(&axis)
            .is_some_and(|v| v.parse::<f64>().is_ok() || msgbench_model::duration::parse(v).is_ok())
    });
    if !ordered {
        return Vec::new();
    }
    let metric = slo.map(|s| s.metric).unwrap_or(SloMetric::P99);
    let mut points: BTreeMap<usize, Vec<&RunResult>> = BTreeMap::new();
    for r in runs {
        points.entry(r.point).or_default().push(r);
    }
    let mut curves: BTreeMap<String, Vec<CurvePoint>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (point, rs) in &points {
        let r0 = rs[0];
        let label = r0
            .params
            .iter()
            .filter(|p| p.axis != axis)
            .map(|p| format!("{}={}", short_axis(&p.axis), p.value))
            .collect::<Vec<_>>()
            .join(" ");
        if !curves.contains_key(&label) {
            order.push(label.clone());
        }
        curves.entry(label).or_default().push(CurvePoint {
            point: *point,
            setting: r0.param(&axis).unwrap_or_default().to_string(),
            throughput: median(rs.iter().map(|r| r.delivered_per_sec()).collect()),
            latency_ns: median(rs.iter().map(|r| metric.of(&r.latency) as f64).collect()),
            valid: rs.iter().all(|r| judge(r).is_valid()),
            capped: rs
                .iter()
                .any(|r| msgbench_model::http::stream_limited(&r.info)),
        });
    }
    order
        .into_iter()
        .filter_map(|label| {
            let points = curves.remove(&label)?;
            (points.len() > 1).then(|| explain(&axis, label, points, slo, metric))
        })
        .collect()
}

/// Where throughput stops growing: the first valid point after which no valid point delivers
/// more than [`PLATEAU_GAIN`] more.
pub fn knee(points: &[CurvePoint]) -> Option<usize> {
    let valid: Vec<usize> = (0..points.len()).filter(|&i| points[i].valid).collect();
    valid.iter().enumerate().find_map(|(k, &i)| {
        let later = &valid[k + 1..];
        let best_later = later
            .iter()
            .map(|&j| points[j].throughput)
            .fold(f64::NEG_INFINITY, f64::max);
        (!later.is_empty() && best_later <= points[i].throughput * (1.0 + PLATEAU_GAIN))
            .then_some(i)
    })
}

fn explain(
    axis: &str,
    label: String,
    points: Vec<CurvePoint>,
    slo: Option<&Slo>,
    metric: SloMetric,
) -> Advice {
    let name = short_axis(axis);
    let m = metric.name();
    let knee = knee(&points);
    let mut text = vec![knee_sentence(&points, knee, name, m)];
    let skipped = points.iter().filter(|p| !p.valid).count();
    if skipped > 0 {
        text.push(format!(
            "{skipped} point(s) with invalid runs are left out of this advice."
        ));
    }
    let mut recommended = None;
    if let Some(slo) = slo {
        let (pick, sentence) = slo_sentence(&points, slo, name, m);
        recommended = pick;
        text.push(sentence);
    }
    Advice {
        axis: axis.to_string(),
        label,
        points,
        knee,
        recommended,
        text,
    }
}

/// One step of a curve in words: the setting reached, and the change in throughput and in
/// the percentile `m` from `from` to `to`.
fn step(points: &[CurvePoint], name: &str, m: &str, from: usize, to: usize) -> String {
    let (a, b) = (&points[from], &points[to]);
    format!(
        "{name} {}: {:+.0} % throughput for {:+.0} % {m}",
        b.setting,
        100.0 * (b.throughput / a.throughput.max(1e-9) - 1.0),
        100.0 * (b.latency_ns / a.latency_ns.max(1.0) - 1.0)
    )
}

/// Where the knee is (and the step after it), or why there is none.
fn knee_sentence(points: &[CurvePoint], knee: Option<usize>, name: &str, m: &str) -> String {
    let step = |from, to| step(points, name, m, from, to);
    match knee {
        Some(k) => {
            let p = &points[k];
            let mut sentence = format!(
                "Knee at {name} {}: {}/s at {m} {}; beyond it throughput grows less than {:.0} % per step",
                p.setting,
                count(p.throughput),
                duration_ns(p.latency_ns as u64),
                100.0 * PLATEAU_GAIN
            );
            if let Some(next) = (k + 1..points.len()).find(|&j| points[j].valid) {
                sentence.push_str(&format!(" (next step, {})", step(k, next)));
            }
            sentence + "."
        }
        None => {
            // By the rule, no knee means the last valid point still beats the one before it
            // by more than the plateau gain: say so with that step's figures.
            let valid: Vec<usize> = (0..points.len()).filter(|&i| points[i].valid).collect();
            match valid[..] {
                // Past the server's stream limit a larger window adds no concurrency at the
                // server, only requests waiting on the client: extending the sweep finds
                // nothing of the server's.
                [.., before, last] if points[last].capped => format!(
                    "No knee: the last step still adds more than {:.0} % throughput ({}), but it asks for more streams than the server allows (see the notes): its extra requests wait on the client, so a larger window adds no concurrency at the server — do not extend the sweep past that limit.",
                    100.0 * PLATEAU_GAIN,
                    step(before, last)
                ),
                [.., before, last] => format!(
                    "No knee: the last step still adds more than {:.0} % throughput ({}); extend the sweep to find the plateau.",
                    100.0 * PLATEAU_GAIN,
                    step(before, last)
                ),
                _ => "No knee: fewer than two valid points on this curve.".to_string(),
            }
        }
    }
}

/// The setting to ship under `slo` (the smallest within [`NEAR_BEST`] of the best throughput
/// that meets it) and the sentence that says so, or that none meets it.
fn slo_sentence(points: &[CurvePoint], slo: &Slo, name: &str, m: &str) -> (Option<usize>, String) {
    let step = |from, to| step(points, name, m, from, to);
    let meets: Vec<usize> = (0..points.len())
        .filter(|&i| points[i].valid && slo.met_by(points[i].latency_ns as u64))
        .collect();
    if meets.is_empty() {
        return (None, format!("No valid setting meets the SLO {slo}."));
    }
    let best = meets
        .iter()
        .map(|&i| points[i].throughput)
        .fold(0.0, f64::max);
    let pick = *meets
        .iter()
        .find(|&&i| points[i].throughput >= (1.0 - NEAR_BEST) * best)
        .expect("the best one qualifies");
    let p = &points[pick];
    let mut sentence = format!(
        "Under the SLO {slo}: ship {name} {} — {}/s at {m} {}, the smallest setting within {:.0} % of the best throughput that meets it",
        p.setting,
        count(p.throughput),
        duration_ns(p.latency_ns as u64),
        100.0 * NEAR_BEST
    );
    if let Some(next) = (pick + 1..points.len()).find(|&j| points[j].valid) {
        let verdict = if slo.met_by(points[next].latency_ns as u64) {
            "still meets the SLO"
        } else {
            "breaks the SLO"
        };
        sentence.push_str(&format!(" (next step, {}; {verdict})", step(pick, next)));
    }
    (Some(pick), sentence + ".")
}

/// The advice as a markdown section (empty when there is nothing to advise).
pub fn markdown(advice: &[Advice]) -> String {
    if advice.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n## Advice\n\n");
    for a in advice {
        if !a.label.is_empty() {
            out.push_str(&format!("**{}**\n\n", a.label));
        }
        for t in &a.text {
            out.push_str(&format!("- {t}\n"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(tp: &[f64], lat: &[f64]) -> Vec<CurvePoint> {
        tp.iter()
            .zip(lat)
            .enumerate()
            .map(|(i, (&t, &l))| CurvePoint {
                point: i,
                setting: [5, 10, 15, 20, 30][i].to_string(),
                throughput: t,
                latency_ns: l,
                valid: true,
                capped: false,
            })
            .collect()
    }

    #[test]
    fn the_knee_is_where_throughput_plateaus() {
        let p = points(
            &[5e3, 8.9e3, 11e3, 11.9e3, 12.4e3],
            &[2e6, 2.3e6, 2.8e6, 3.5e6, 4.6e6],
        );
        assert_eq!(knee(&p), Some(3));
        let growing = points(&[1e3, 2e3, 3e3, 4e3, 5e3], &[1e6; 5]);
        assert_eq!(knee(&growing), None);
    }

    #[test]
    fn no_knee_quotes_the_last_step_that_still_gained() {
        // window 20 gains 2 % over 15, but 30 gains 10 % over 20: no knee, and the sentence
        // says why with the last step's figures rather than "grows 5 % per step".
        let p = points(&[5e3, 8e3, 10e3, 10.2e3, 11.22e3], &[1e6; 5]);
        let a = explain("client.window", String::new(), p, None, SloMetric::P99);
        assert_eq!(a.knee, None);
        assert!(
            a.text[0].contains(
                "the last step still adds more than 5 % throughput (window 30: +10 % throughput"
            ),
            "{:?}",
            a.text
        );
    }

    #[test]
    fn no_knee_past_the_server_s_stream_limit_says_not_to_extend_the_sweep() {
        let mut p = points(&[5e3, 8e3, 10e3, 10.2e3, 11.22e3], &[1e6; 5]);
        p[4].capped = true;
        let a = explain("client.window", String::new(), p, None, SloMetric::P99);
        assert_eq!(a.knee, None);
        assert!(
            a.text[0].contains("more streams than the server allows")
                && a.text[0].contains("do not extend the sweep")
                && !a.text[0].contains("extend the sweep to find"),
            "{:?}",
            a.text
        );
    }

    #[test]
    fn only_load_axes_get_advice() {
        assert!(is_load_axis("client.window", &[]));
        assert!(is_load_axis("\"pacing.per_sec\"", &[]));
        assert!(is_load_axis("ticks.clients.fast.connections", &[]));
        assert!(!is_load_axis("pacing.every", &[]));
        assert!(!is_load_axis("queue.capacity", &[]));
        assert!(is_load_axis(
            "rpc.ops.call.bytes",
            &["rpc.ops.call.bytes".into()]
        ));
    }

    #[test]
    fn invalid_points_are_not_advised() {
        let mut p = points(
            &[5e3, 8.9e3, 11e3, 11.9e3, 12.4e3],
            &[2e6, 2.3e6, 2.8e6, 3.5e6, 4.6e6],
        );
        p[3].valid = false;
        assert_eq!(knee(&p), Some(2).filter(|_| false).or(knee(&p)));
        assert_ne!(knee(&p), Some(3));
    }

    #[test]
    fn the_recommendation_is_the_smallest_near_best_setting_under_the_slo() {
        let p = points(
            &[5e3, 8.9e3, 11e3, 11.9e3, 12.4e3],
            &[2e6, 2.3e6, 2.8e6, 3.5e6, 4.6e6],
        );
        let slo = Slo::parse("p99 < 4ms").unwrap();
        let a = explain(
            "client.window",
            String::new(),
            p,
            Some(&slo),
            SloMetric::P99,
        );
        // Meets: 5..20; best 11.9k; within 5 %: 11.9k only (11.0k is 7.6 % below).
        assert_eq!(a.recommended, Some(3));
        let text = a.text.join("\n");
        assert!(text.contains("ship window 20"), "{text}");
        assert!(
            text.contains("window 30: +4 % throughput for +31 % p99; breaks the SLO"),
            "{text}"
        );
    }
}
