//! `msgbench compare` on two result directories: their runs paired by sweep point (or the one
//! point of each), every metric's change judged against the noise ([`crate::compare`]), what
//! the two sides measured differently, the gate (`--fail-on regressed`, `--max-regression`),
//! and the comparison as markdown or JSON. The CLI only reads the flags and picks the exit
//! code.
use std::path::{Path, PathBuf};

/// What fails the gate, one sentence each: a regressed verdict (with `--fail-on regressed`),
/// or a significant regression beyond a metric's allowance.
pub fn gate(compared: &Compared, fail_on_regressed: bool, limits: &[(String, f64)]) -> Vec<String> {
    use crate::compare::{worse_by, Verdict};
    let mut failures = Vec::new();
    let gating = fail_on_regressed || !limits.is_empty();
    for point in &compared.points {
        if gating {
            failures.extend(judged_invalid(point));
        }
        // A gate that cannot judge fails: a CI job that forgot --replicates learns it now,
        // not after the regression it could never catch.
        let unjudged = point.changes.iter().find_map(|c| match c.verdict {
            Verdict::NeedsReplicates(a, b) => Some((a, b)),
            _ => None,
        });
        if let Some((a, b)) = unjudged {
            if fail_on_regressed || !limits.is_empty() {
                failures.push(format!(
                    "{}: no verdict with {a} and {b} replicate(s); the gate needs 3 a side \
                     (run both with --replicates 3)",
                    point.title
                ));
                continue;
            }
        }
        for c in &point.changes {
            if c.verdict != Verdict::Regressed {
                continue;
            }
            let worse = worse_by(c);
            let over_limit = limits
                .iter()
                .find(|(m, _)| m == c.metric)
                .filter(|(_, allowed)| worse > *allowed);
            if fail_on_regressed || over_limit.is_some() {
                let allowance = over_limit
                    .map(|(_, a)| format!(" (allowed {:.1} %)", a * 100.0))
                    .unwrap_or_default();
                failures.push(format!(
                    "{}: {} regressed by {:.1} %{allowance}",
                    point.title,
                    c.metric,
                    worse * 100.0
                ));
            }
        }
    }
    failures
}

/// A gate's failure for a point whose invalid runs leave a side fewer than 3 valid ones (what
/// the gate needs a side): a change between runs that did not measure the system is no
/// evidence either way. One invalid replicate of five (a busy host's late send) leaves the
/// verdict to the other four; the report lists it.
fn judged_invalid(point: &ComparedPoint) -> Option<String> {
    let invalid = point.invalid_a.len() + point.invalid_b.len();
    let valid_a = point.runs_a.saturating_sub(point.invalid_a.len());
    let valid_b = point.runs_b.saturating_sub(point.invalid_b.len());
    if invalid == 0 || (valid_a >= 3 && valid_b >= 3) {
        return None;
    }
    let sides = [("A", &point.invalid_a), ("B", &point.invalid_b)];
    let (side, (id, why)) = (sides.iter())
        .find_map(|(side, runs)| runs.first().map(|r| (side, r)))
        .expect("one is invalid");
    Some(format!(
        "{}: {invalid} of the {} runs judged are invalid, leaving {valid_a} and {valid_b} \
         valid (the gate needs 3 a side; first: {side} {id}, {why}); a change between runs \
         that did not measure the system is no evidence",
        point.title,
        point.runs_a + point.runs_b
    ))
}

/// Two result directories compared point by matching point.
pub struct Compared {
    a: PathBuf,
    b: PathBuf,
    points: Vec<ComparedPoint>,
    /// How the two sides' runs were measured differently (warm-up, span): a change may be
    /// theirs rather than the system's.
    differences: Vec<String>,
}

/// A setting of a run, read from its result (`None`: not recorded).
type Setting = fn(&msgbench_model::RunResult) -> Option<f64>;

/// The warm-ups, spans and HTTP/2 clients of `a`'s runs against `b`'s, where they differ.
fn measured_differently(
    a: &[msgbench_model::RunResult],
    b: &[msgbench_model::RunResult],
) -> Vec<String> {
    let values = |runs: &[msgbench_model::RunResult], read: Setting| {
        let mut v: Vec<String> = (runs.iter())
            .filter_map(read)
            .map(|s| match (s * 1e9).round() as u64 {
                0 => "0 s".to_string(),
                ns => crate::format::duration_ns(ns),
            })
            .collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let settings: [(&str, Setting); 2] = [
        ("warm-up", |r| Some(r.warmup_s)),
        ("run.duration", |r| r.schedule_s),
    ];
    let mut differences: Vec<String> = settings
        .iter()
        .filter_map(|(name, read)| {
            let (va, vb) = (values(a, *read), values(b, *read));
            (!va.is_empty() && !vb.is_empty() && va != vb)
                .then(|| format!("{name}: A {va}, B {vb}"))
        })
        .collect();
    // Which HTTP/2 client measured (the environment's choice, said in each run's notes): a
    // server can serve one client's writes more cheaply than another's.
    let clients = |runs: &[msgbench_model::RunResult]| {
        let mut v: Vec<&str> = (runs.iter())
            .filter_map(|r| msgbench_model::http::http2_client(&r.info))
            .collect();
        v.sort_unstable();
        v.dedup();
        v.join(", ")
    };
    let (ca, cb) = (clients(a), clients(b));
    if !ca.is_empty() && !cb.is_empty() && ca != cb {
        differences.push(format!("HTTP/2 client: A {ca}, B {cb}"));
    }
    differences
}

/// One sweep point present on both sides: its runs, every metric's change, the invalid runs.
pub struct ComparedPoint {
    title: String,
    runs_a: usize,
    runs_b: usize,
    changes: Vec<crate::compare::Change>,
    /// `(run id, reasons)` of the invalid runs on each side: a change they take part in
    /// compares figures that are not the system's.
    invalid_a: Vec<(String, String)>,
    invalid_b: Vec<(String, String)>,
}

/// `(run id, reasons)` of the invalid runs among `runs`.
fn invalid_of(runs: &[msgbench_model::RunResult]) -> Vec<(String, String)> {
    crate::validity::invalid_runs(runs)
        .into_iter()
        .map(|(id, why)| (id.to_string(), why))
        .collect()
}

/// The comparison as markdown: per point its changes, then what the two sides measured
/// differently and which runs are invalid.
pub fn markdown(c: &Compared, noise: f64) -> String {
    let mut out = format!(
        "# Comparison\n\nA = {}\nB = {}\n",
        c.a.display(),
        c.b.display()
    );
    if !c.differences.is_empty() {
        out.push_str(&format!(
            "\nMeasured differently (a change may be this, not the system): {}.\n",
            c.differences.join("; ")
        ));
    }
    for p in &c.points {
        out.push_str(&format!(
            "\n## {} ({} vs {} run(s))\n\n{}",
            p.title,
            p.runs_a,
            p.runs_b,
            crate::compare::table(&p.changes, noise)
        ));
        if !(p.invalid_a.is_empty() && p.invalid_b.is_empty()) {
            out.push_str("\nInvalid runs (their figures are not the system's: a change they take part in is no evidence):\n\n");
            for (side, invalid) in [("A", &p.invalid_a), ("B", &p.invalid_b)] {
                for (id, why) in invalid {
                    out.push_str(&format!("- {side} {id}: {why}\n"));
                }
            }
        }
    }
    out
}

/// The comparison as JSON, with the gate's failures.
pub fn json(c: &Compared, failures: &[String]) -> String {
    use crate::compare::{verdict_text, worse_by};
    let points: Vec<_> = c
        .points
        .iter()
        .map(|p| {
            let metrics: Vec<_> = p
                .changes
                .iter()
                .map(|ch| {
                    serde_json::json!({
                        "metric": ch.metric, "a": ch.a, "b": ch.b, "change": ch.change,
                        "worse_by": worse_by(ch),
                        "interval": ch.interval.map(|(low, high)| [low, high]),
                        "verdict": verdict_text(&ch.verdict),
                    })
                })
                .collect();
            let invalid = |runs: &[(String, String)]| -> Vec<serde_json::Value> {
                (runs.iter())
                    .map(|(id, why)| serde_json::json!({ "run_id": id, "reasons": why }))
                    .collect()
            };
            serde_json::json!({ "point": p.title, "runs_a": p.runs_a, "runs_b": p.runs_b,
                "metrics": metrics, "invalid_a": invalid(&p.invalid_a),
                "invalid_b": invalid(&p.invalid_b) })
        })
        .collect();
    let doc = serde_json::json!({ "a": c.a, "b": c.b, "points": points,
        "measured_differently": c.differences, "gate_failures": failures });
    serde_json::to_string_pretty(&doc).expect("serializable")
}

/// The comparison of two result directories, point by matching point.
pub fn compare_dirs(a: &Path, b: &Path, noise: f64) -> Result<Compared, String> {
    use crate::compare;
    use msgbench_model::sweep::render_params;
    if !(noise.is_finite() && noise >= 0.0) {
        return Err(format!(
            "--noise {}: give a percentage of 0 or more, e.g. 5",
            noise * 100.0
        ));
    }
    let (runs_a, runs_b) = (
        crate::load::load_dir(a).map_err(|e| e.to_string())?,
        crate::load::load_dir(b).map_err(|e| e.to_string())?,
    );
    let differences = measured_differently(&runs_a, &runs_b);
    let key = |r: &msgbench_model::RunResult| {
        render_params(
            &r.params
                .iter()
                .map(|p| (p.axis.clone(), p.value.clone()))
                .collect::<Vec<_>>(),
        )
    };
    let group = |runs: Vec<msgbench_model::RunResult>| {
        let mut g: Vec<(String, Vec<msgbench_model::RunResult>)> = Vec::new();
        for r in runs {
            match g.iter_mut().find(|(k, _)| *k == key(&r)) {
                Some((_, v)) => v.push(r),
                None => g.push((key(&r), vec![r])),
            }
        }
        g
    };
    let (ga, gb) = (group(runs_a), group(runs_b));
    let pairs: Vec<(
        String,
        &[msgbench_model::RunResult],
        &[msgbench_model::RunResult],
    )> = if ga.len() == 1 && gb.len() == 1 {
        vec![(
            format!("A: {} vs B: {}", or_none(&ga[0].0), or_none(&gb[0].0)),
            &ga[0].1[..],
            &gb[0].1[..],
        )]
    } else {
        ga.iter()
            .filter_map(|(k, va)| {
                gb.iter()
                    .find(|(kb, _)| kb == k)
                    .map(|(_, vb)| (or_none(k), &va[..], &vb[..]))
            })
            .collect()
    };
    if pairs.is_empty() {
        return Err(format!("no sweep point of {} has the parameters of a point of {}; compare directories of the same experiment, or two single-point directories", a.display(), b.display()));
    }
    let mut points = Vec::with_capacity(pairs.len());
    for (title, va, vb) in pairs {
        let changes = compare::compare(va, vb, noise).map_err(|e| format!("{title}: {e}"))?;
        points.push(ComparedPoint {
            title,
            runs_a: va.len(),
            runs_b: vb.len(),
            changes,
            invalid_a: invalid_of(va),
            invalid_b: invalid_of(vb),
        });
    }
    Ok(Compared {
        a: a.to_path_buf(),
        b: b.to_path_buf(),
        points,
        differences,
    })
}

fn or_none(params: &str) -> String {
    if params.is_empty() {
        "(no sweep)".into()
    } else {
        params.to_string()
    }
}
