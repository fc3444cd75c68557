//! The charts of a result directory, each a standalone SVG (`<name>.svg`) that `report.html`
//! also inlines: latency percentile spectrum, throughput, loss, CPU per message,
//! latency vs throughput with the knee, and per-second time series.
use crate::advice::Advice;
use crate::format::{count, duration_ns};
pub use crate::svg::Chart;
use crate::svg::{
    downsample, seconds_label, Axis, BarChart, Callout, LineChart, Scale, Series, MAX_LINE_POINTS,
};
use msgbench_model::result::RunResult;
use msgbench_model::slo::Slo;
use std::collections::BTreeMap;

/// A per-run figure a chart plots.
type Metric = fn(&RunResult) -> f64;

/// The file stems of every chart a report can have.
pub const ALL_NAMES: &[&str] = &[
    "spectrum",
    "throughput",
    "loss",
    "cpu",
    "latency-vs-throughput",
    "timeseries-rate",
    "timeseries-p99",
    "timeseries-backlog",
    "stream-rate",
    "stream-p99",
    "stream-backlog",
];

fn ns_label(v: f64) -> String {
    duration_ns(v.max(0.0) as u64)
}
fn count_label(v: f64) -> String {
    count(v)
}
fn percent_label(v: f64) -> String {
    let p = 100.0 * v;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}
fn signed_count_label(v: f64) -> String {
    if v < 0.0 {
        format!("-{}", count(-v))
    } else {
        count(v)
    }
}

/// Runs grouped by sweep point, in point order.
fn by_point(runs: &[RunResult]) -> Vec<(String, Vec<&RunResult>)> {
    let mut points: BTreeMap<usize, Vec<&RunResult>> = BTreeMap::new();
    for r in runs {
        points.entry(r.point).or_default().push(r);
    }
    points
        .into_values()
        .map(|rs| {
            let name = if rs[0].params.is_empty() {
                format!("point {}", rs[0].point)
            } else {
                rs[0]
                    .params
                    .iter()
                    .map(|p| format!("{}={}", msgbench_model::sweep::short_axis(&p.axis), p.value))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            (name, rs)
        })
        .collect()
}

fn median_and_range(values: Vec<f64>) -> (f64, (f64, f64)) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (crate::compare::median(&values), (lo, hi))
}

/// Every chart for these runs.
pub fn charts(runs: &[RunResult], advice: &[Advice], slo: Option<&Slo>) -> Vec<Chart> {
    let points = by_point(runs);
    let mut out = vec![spectrum(&points)];
    out.push(bars(
        &points,
        "throughput",
        "Delivered per second",
        "messages / s",
        count_label,
        &[("delivered/s", |r| r.delivered_per_sec())],
        "Bars: median over replicates; whiskers: min–max.",
    ));
    // Nothing lost: an empty frame would only make a reader look for bars that are not there.
    let lost = |r: &RunResult| {
        r.counters.skipped + r.counters.dropped + r.counters.failed + r.counters.in_flight_end
    };
    if runs.iter().any(|r| lost(r) > 0) {
        out.push(bars(
            &points,
            "loss",
        "Messages not delivered, share of attempted",
        "share of attempted",
        percent_label,
        &[
            ("skipped + dropped", |r| {
                (r.counters.skipped + r.counters.dropped) as f64 / r.counters.attempted.max(1) as f64
            }),
            ("failed", |r| r.counters.failed as f64 / r.counters.attempted.max(1) as f64),
            ("still in flight at the end", |r| {
                r.counters.in_flight_end as f64 / r.counters.attempted.max(1) as f64
            }),
        ],
        "What the success column hides: messages skipped (never sent: the window full, no connection up, or the run ended; the Skipped section says which) or dropped by the system, failed ones, and those still queued when the drain ended (latency percentiles describe only the delivered).",
        ));
    }
    let with_sut = runs.iter().any(|r| r.cpu.sut_cpu_s.is_some());
    let mut cpu: Vec<(&str, Metric)> = vec![("driver CPU per message", |r| {
        per_message(r.cpu.driver_cpu_s, r)
    })];
    if with_sut {
        cpu.push(("server CPU per message", |r| {
            per_message(r.cpu.sut_cpu_s.unwrap_or(0.0), r)
        }));
    }
    out.push(bars(
        &points,
        "cpu",
        "CPU time per delivered message",
        "CPU time per message",
        ns_label,
        &cpu,
        "CPU seconds of the driver's threads (and of the server, when measured) over the measured window, per delivered message.",
    ));
    if !advice.is_empty() {
        out.push(latency_vs_throughput(advice, slo));
    }
    out.extend(time_series(&points));
    out.extend(crate::streams::charts(runs));
    out
}

fn spectrum(points: &[(String, Vec<&RunResult>)]) -> Chart {
    let mut series = Vec::new();
    let mut all_x = 0.0f64;
    let mut values = Vec::new();
    for (name, rs) in points {
        let mut merged = msgbench_model::histogram::new_latency_histogram();
        for r in rs {
            if let Ok(h) = msgbench_model::histogram::decode(&r.histograms.latency) {
                let _ = merged.add(&h);
            }
        }
        if merged.is_empty() {
            continue;
        }
        // x = log10(1 / (1 − p)): 0 = median-ish start, 2 = p99, 4 = p99.99 (HdrHistogram's plot).
        let x_max = (merged.len() as f64).log10().clamp(1.0, 6.0);
        all_x = all_x.max(x_max);
        let mut pts = Vec::new();
        let mut x = 0.0;
        while x < x_max {
            let p = 1.0 - 10f64.powf(-x);
            let v = merged.value_at_quantile(p) as f64;
            pts.push((x, v));
            values.push(v);
            x += 0.05;
        }
        pts.push((x_max, merged.max() as f64));
        values.push(merged.max() as f64);
        series.push(Series {
            name: name.clone(),
            points: pts,
            dots: false,
            point_labels: Vec::new(),
        });
    }
    let ticks: Vec<(f64, String)> = [
        "0 %",
        "90 %",
        "99 %",
        "99.9 %",
        "99.99 %",
        "99.999 %",
        "99.9999 %",
    ]
    .iter()
    .enumerate()
    .filter(|(i, _)| *i as f64 <= all_x.max(1.0) + 1e-9)
    .map(|(i, t)| (i as f64, t.to_string()))
    .collect();
    let x = Axis {
        label: "percentile (log scale of 1 / (1 − p); the right end is the maximum)".into(),
        scale: Scale::Linear,
        min: 0.0,
        max: all_x.max(1.0),
        format: |v| format!("{v}"),
        ticks: Some(ticks),
    };
    let y = Axis::fitted(
        "latency from intended send (log scale)",
        Scale::Log,
        &values,
        ns_label,
    );
    Chart {
        name: "spectrum".into(),
        caption: "Latency percentile spectrum per sweep point (replicates merged): read across to compare the median with the tail; a line that bends up late hides its trouble in the last nines.".into(),
        svg: LineChart {
            title: "Latency percentile spectrum".into(),
            x,
            y,
            series,
            callouts: Vec::new(),
            threshold: None,
        }
        .render("spectrum"),
    }
}

type Read = fn(&RunResult) -> f64;

fn bars(
    points: &[(String, Vec<&RunResult>)],
    name: &str,
    title: &str,
    unit: &str,
    format: fn(f64) -> String,
    metrics: &[(&str, Read)],
    caption: &str,
) -> Chart {
    let mut series = Vec::new();
    let mut values = Vec::new();
    for (label, read) in metrics {
        let mut medians = Vec::new();
        let mut ranges = Vec::new();
        for (_, rs) in points {
            let (m, range) = median_and_range(rs.iter().map(|r| read(r)).collect());
            values.extend([m, range.1]);
            medians.push(m);
            ranges.push(range);
        }
        series.push((label.to_string(), medians, ranges));
    }
    let mut y = Axis::fitted(unit, Scale::Linear, &values, format);
    if y.max <= 0.0 {
        y.max = 1.0;
    }
    Chart {
        name: name.into(),
        caption: caption.into(),
        svg: BarChart {
            title: title.into(),
            categories: points.iter().map(|(n, _)| n.clone()).collect(),
            category_label: "sweep point".into(),
            y,
            series,
        }
        .render(name),
    }
}

fn latency_vs_throughput(advice: &[Advice], slo: Option<&Slo>) -> Chart {
    let metric = slo.map(|s| s.metric.name()).unwrap_or("p99");
    let mut series = Vec::new();
    let mut callouts = Vec::new();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for a in advice {
        let pts: Vec<(f64, f64)> = a
            .points
            .iter()
            .map(|p| (p.throughput, p.latency_ns))
            .collect();
        xs.extend(pts.iter().map(|p| p.0));
        ys.extend(pts.iter().map(|p| p.1));
        let mut mark = |k: usize, text: &str| {
            callouts.push(Callout {
                x: a.points[k].throughput,
                y: a.points[k].latency_ns,
                text: text.into(),
            })
        };
        match (a.knee, a.recommended) {
            (Some(k), Some(r)) if k == r => mark(k, "knee, ship"),
            (k, r) => {
                k.into_iter().for_each(|k| mark(k, "knee"));
                r.into_iter().for_each(|r| mark(r, "ship"));
            }
        }
        series.push(Series {
            name: if a.label.is_empty() {
                a.axis.clone()
            } else {
                a.label.clone()
            },
            points: pts,
            dots: true,
            point_labels: a
                .points
                .iter()
                .map(|p| format!("{}{}", p.setting, if p.valid { "" } else { " (invalid)" }))
                .collect(),
        });
    }
    let axis = advice
        .first()
        .map(|a| msgbench_model::sweep::short_axis(&a.axis).to_string())
        .unwrap_or_default();
    Chart {
        name: "latency-vs-throughput".into(),
        caption: format!("Each dot is a sweep point, labelled with its {axis}; the knee is where more {axis} stops buying throughput and only adds latency."),
        svg: LineChart {
            title: format!("Latency vs throughput along {axis}"),
            x: Axis::fitted("delivered per second", Scale::Linear, &xs, count_label),
            y: Axis::fitted(
                &format!("{metric} latency"),
                Scale::Linear,
                &ys.iter().copied().chain(slo.map(|s| s.bound_ns as f64)).collect::<Vec<_>>(),
                ns_label,
            ),
            series,
            callouts,
            threshold: slo
                .filter(|s| s.metric.name() == metric || metric == "SLO percentile")
                .map(|s| (s.bound_ns as f64, format!("SLO {s}"))),
        }
        .render("latency-vs-throughput"),
    }
}

fn time_series(points: &[(String, Vec<&RunResult>)]) -> Vec<Chart> {
    type Metric = (
        &'static str,
        &'static str,
        &'static str,
        Scale,
        fn(f64) -> String,
        fn(&msgbench_model::result::IntervalSample) -> f64,
        &'static str,
    );
    let metrics: [Metric; 3] = [
        ("timeseries-rate", "Delivered per second, second by second", "delivered / s", Scale::Linear, count_label, |i| i.delivered as f64 / i.length_s.max(1e-9), "A flat line is a steady state; a slope means the run had not settled (or was falling behind)."),
        ("timeseries-p99", "p99 latency, second by second", "p99 latency (log scale)", Scale::Log, ns_label, |i| i.latency_p99_ns as f64, "A p99 that climbs second after second is a queue building up: the system is past its capacity."),
        ("timeseries-backlog", "Backlog: sent but not yet delivered, dropped or failed", "messages in the system", Scale::Linear, signed_count_label, |i| i.backlog as f64, "A backlog that keeps growing means latency is queueing time."),
    ];
    metrics
        .iter()
        .map(|(name, title, unit, scale, format, read, caption)| {
            let mut series = Vec::new();
            let mut ys = Vec::new();
            let mut xs = vec![0.0];
            let mut thinned = None;
            let mut callouts = Vec::new();
            for (label, rs) in points {
                let r = rs[0];
                let pts: Vec<(f64, f64)> = r
                    .intervals
                    .iter()
                    .filter(|i| i.length_s >= 0.5 && (*scale == Scale::Linear || read(i) > 0.0))
                    .map(|i| (i.start_s + i.length_s, read(i)))
                    .collect();
                let seconds = pts.len();
                let pts = downsample(pts);
                if pts.len() < seconds {
                    thinned = thinned.max(Some(seconds));
                }
                ys.extend(pts.iter().map(|p| p.1));
                // The time axis spans every interval, also those without a p99 (nothing was
                // delivered): the three charts share one axis, and a gap at the end shows.
                let ends = (r.intervals.iter())
                    .filter(|i| i.length_s >= 0.5)
                    .map(|i| i.start_s + i.length_s);
                xs.extend(ends.max_by(f64::total_cmp));
                let (target, marks) = stage_marks(name, r, label, &pts);
                callouts.extend(marks);
                series.push(Series {
                    name: label.clone(),
                    dots: pts.len() == seconds,
                    points: pts,
                    point_labels: Vec::new(),
                });
                if let Some(target) = target {
                    ys.extend(target.points.iter().map(|p| p.1));
                    series.push(target);
                }
            }
            let thinned = thinned.map_or(String::new(), |n| {
                format!(" Drawn from {n} seconds as the lowest and highest of each of {} spans (every second is in the run's JSON).", MAX_LINE_POINTS / 2)
            });
            Chart {
                name: name.to_string(),
                caption: format!("{caption} One line per sweep point (its first replicate).{thinned}"),
                svg: LineChart {
                    title: title.to_string(),
                    x: Axis::fitted(
                        "seconds into the measured window",
                        Scale::Linear,
                        &xs,
                        seconds_label,
                    ),
                    y: Axis::fitted(unit, *scale, &ys, *format),
                    series,
                    callouts,
                    threshold: None,
                }
                .render(name),
            }
        })
        .collect()
}

/// What a run in stages adds to time series chart `name`: the stages' target on the rate chart,
/// each spike's recovery on the p99 chart (whose line for point `label` is `pts`).
fn stage_marks(
    name: &str,
    r: &RunResult,
    label: &str,
    pts: &[(f64, f64)],
) -> (Option<Series>, Vec<Callout>) {
    match name {
        "timeseries-rate" if !r.stages.is_empty() => {
            let target = Series {
                name: format!("{label} target (stages)"),
                dots: false,
                points: stage_targets(r),
                point_labels: Vec::new(),
            };
            (Some(target), Vec::new())
        }
        "timeseries-p99" => (None, recoveries(r, pts)),
        _ => (None, Vec::new()),
    }
}

/// The rate the stages asked for, as a line over the measured window: a ramp's slope, a step's
/// or a spike's jump.
fn stage_targets(r: &RunResult) -> Vec<(f64, f64)> {
    use msgbench_model::stages::Shape;
    let mut line = Vec::new();
    for s in &r.stages {
        let first = if s.shape == Shape::Ramp {
            s.from_per_sec
        } else {
            s.to_per_sec
        };
        line.push((s.start_s, first));
        line.push((s.end_s, s.to_per_sec));
    }
    line
}

/// A call-out on the p99 line at each spike's end (the second that ends there, as the chart
/// draws a second at its end), saying how long p99 took to come back.
fn recoveries(r: &RunResult, p99s: &[(f64, f64)]) -> Vec<Callout> {
    use msgbench_model::stages::Shape;
    let spikes = r.stages.iter().filter(|s| s.shape == Shape::Spike);
    spikes
        .filter_map(|s| {
            let text = match s.recovery_s {
                Some(after) => format!("spike ends: p99 back {after:.0} s later"),
                None if s.not_recovered => "spike ends: p99 not back by the run's end".into(),
                None => return None,
            };
            let nearest = |p: &&(f64, f64)| (p.0 - s.end_s).abs();
            let (x, y) = p99s
                .iter()
                .min_by(|a, b| nearest(a).total_cmp(&nearest(b)))?;
            Some(Callout { x: *x, y: *y, text })
        })
        .collect()
}

/// CPU seconds `cpu_s` per delivered message, ns; nothing delivered: no bar (the CPU of no
/// message is not the CPU of one).
fn per_message(cpu_s: f64, r: &RunResult) -> f64 {
    match r.counters.delivered {
        0 => 0.0,
        n => cpu_s * 1e9 / n as f64,
    }
}
