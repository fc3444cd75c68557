//! Broadcast streams (`ticks`): one row per client — what the server generated, wrote and saw
//! acknowledged for it next to what the client processed and how late — and per-client time
//! series. This is where "the server says 480k/s, the client sees 28k/s" is read off: the
//! server's `written` rate is what it handed its sockets, `delivered` what the client processed.
use crate::format::{count, duration_ns};
use crate::svg::{Axis, Chart, LineChart, Scale, Series};
use msgbench_model::result::{RunResult, StreamClient, StreamInterval};

/// True when some run has stream clients.
pub fn any(runs: &[RunResult]) -> bool {
    runs.iter().any(|r| !r.streams.is_empty())
}

/// A latency cell: `–` for a client that processed no measured tick (not `0 ns`).
fn latency(c: &StreamClient, ns: u64) -> String {
    if c.latency.count == 0 {
        "–".into()
    } else {
        duration_ns(ns)
    }
}

/// The cells of one client's row.
fn row(r: &RunResult, c: &StreamClient) -> Vec<String> {
    let per_sec = |n: u64| count(n as f64 / r.duration_s.max(1e-9));
    let server = |f: fn(&msgbench_model::result::StreamServerCounts) -> u64| {
        c.server
            .as_ref()
            .map(|s| per_sec(f(s)))
            .unwrap_or("–".into())
    };
    // A subscription's name (`t0-s1`) does not say its class; a tick client's (`slow-0`) does.
    let who = if c.name.starts_with(&format!("{}-", c.group)) {
        c.name.clone()
    } else {
        format!("{} ({})", c.name, c.group)
    };
    vec![
        r.run_id.clone(),
        who,
        c.kind.clone(),
        per_sec(c.counters.attempted),
        server(|s| s.written),
        server(|s| s.acked),
        per_sec(c.counters.delivered),
        count(c.counters.dropped as f64),
        count((c.counters.in_flight_end + c.counters.failed) as f64),
        latency(c, c.latency.p50_ns),
        latency(c, c.latency.p99_ns),
        latency(c, c.latency.max_ns),
        count(
            c.intervals
                .iter()
                .map(|i| i.backlog)
                .max()
                .unwrap_or(0)
                .max(0) as f64,
        ),
        c.behind_ns.map_or("–".into(), duration_ns),
        c.closed.clone().unwrap_or_else(|| "–".into()),
    ]
}

const HEADER: [&str; 15] = [
    "run",
    "client",
    "kind",
    "generated/s",
    "written/s",
    "acked/s",
    "delivered/s",
    "dropped",
    "undelivered",
    "p50",
    "p99",
    "max",
    "backlog peak",
    "behind",
    "closed early",
];

const EXPLANATION: &str = "Per client, over the measured window: `generated/s` ticks the server made for it, \
`written/s` ticks it handed that client's socket, `acked/s` ticks the client acknowledged as processed, \
`delivered/s` ticks the client processed (measured by the client, latency from each tick's intended send time). \
`dropped`: shed by the server's slow-client policy; `undelivered`: still queued when the run ended, or lost when \
the connection closed. `backlog peak`: most ticks generated for it but not yet processed or dropped, at a second's end. \
`behind`: at the window's end, how much older the newest tick it had processed was than the newest any client had (ticks.behind_limit names those too far behind). \
Someone else's feed (`[ticks.feed]`: a WebSocket feed, a gRPC stream or an event stream at `ticks.address`) reports none of the server's side: `generated/s` is what the client that read most of the window saw of the feed's sequence numbers, `undelivered` what this client never read of it, `dropped` the gaps in its own (`ticks.gaps = \"drops\"`), and `written/s` and `acked/s` are not known. \
A publish/subscribe run has one row per subscription (its `kind` is the broker): `generated/s` is what the publishers of its topic published, `dropped` the messages the broker lost (missing before a later one from the same publisher), `backlog peak` the most published but not yet received.";

/// The section's explanation for a publish/subscribe run, whose rows are subscriptions.
const PUBSUB_EXPLANATION: &str = "One row per subscription (its `kind` is the broker), over the measured window: \
`generated/s` what the publishers of its topic published, `delivered/s` what reached it (latency from each \
message's intended publish time), `dropped` the messages the broker lost (missing before a later one from the \
same publisher), `undelivered` what had not come when the run ended (or never will, its connection closed), \
`backlog peak` the most published but not yet received at a second's end. `written/s` and `acked/s` are the \
tick server's and stay empty here.";

/// The section's title and explanation: a publish/subscribe run's rows are subscriptions.
fn title_and_explanation(runs: &[RunResult]) -> (&'static str, &'static str) {
    let pubsub = !runs.is_empty()
        && runs
            .iter()
            .all(|r| r.system == msgbench_model::kind::SystemKind::Pubsub);
    match pubsub {
        true => ("Subscriptions", PUBSUB_EXPLANATION),
        false => ("Stream clients", EXPLANATION),
    }
}

/// The terminal's table (the columns that fit a line): header first.
pub fn text_rows(runs: &[RunResult]) -> Vec<Vec<String>> {
    let keep = [0usize, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13];
    let mut rows = vec![keep.iter().map(|&i| HEADER[i].to_string()).collect()];
    for r in runs {
        for c in &r.streams {
            let cells = row(r, c);
            rows.push(keep.iter().map(|&i| cells[i].clone()).collect());
        }
    }
    rows
}

/// How far a browser's latencies can be trusted: its clock's step and the sync's round trip.
fn page_clocks(runs: &[RunResult]) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        for c in &r.streams {
            if let Some(p) = &c.page_clock {
                out.push(format!(
                    "{} {}: the page's clock steps by {}; its offset to the server's clock is known to ±{} (best sync round trip {})",
                    r.run_id,
                    c.name,
                    duration_ns(p.resolution_ns),
                    duration_ns(p.sync_rtt_ns / 2),
                    duration_ns(p.sync_rtt_ns)
                ));
            }
        }
    }
    out
}

/// The markdown section.
pub fn markdown(runs: &[RunResult]) -> String {
    let (title, explanation) = title_and_explanation(runs);
    let mut out = format!("\n## {title}\n\n{explanation}\n\n");
    out.push_str(&format!("| {} |\n", HEADER.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(HEADER.len())));
    for r in runs {
        for c in &r.streams {
            out.push_str(&format!("| {} |\n", row(r, c).join(" | ")));
        }
    }
    let clocks = page_clocks(runs);
    if !clocks.is_empty() {
        out.push('\n');
        for line in clocks {
            out.push_str(&format!("- {line}\n"));
        }
    }
    out
}

/// The HTML section.
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    let (title, explanation) = title_and_explanation(runs);
    let mut out = format!(
        "<h2>{title}</h2>\n<p>{}</p>\n<table>\n<tr>",
        escape(&explanation.replace('`', ""))
    );
    for (i, h) in HEADER.iter().enumerate() {
        let class = if i < 3 || i == HEADER.len() - 1 {
            " class=\"l\""
        } else {
            ""
        };
        out.push_str(&format!("<th{class}>{h}</th>"));
    }
    out.push_str("</tr>\n");
    for r in runs {
        for c in &r.streams {
            out.push_str("<tr>");
            for (i, cell) in row(r, c).iter().enumerate() {
                let class = if i < 3 || i == HEADER.len() - 1 {
                    " class=\"l\""
                } else {
                    ""
                };
                out.push_str(&format!("<td{class}>{}</td>", escape(cell)));
            }
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</table>\n");
    let clocks = page_clocks(runs);
    if !clocks.is_empty() {
        out.push_str("<ul>\n");
        for line in clocks {
            out.push_str(&format!("<li>{}</li>\n", escape(&line)));
        }
        out.push_str("</ul>\n");
    }
    out
}

/// Per-client charts over time: delivered (and written) per second, p99, backlog.
pub fn charts(runs: &[RunResult]) -> Vec<Chart> {
    if !any(runs) {
        return Vec::new();
    }
    // The first replicate of each point.
    let mut firsts: Vec<&RunResult> = Vec::new();
    for r in runs {
        if !firsts.iter().any(|f| f.point == r.point) {
            firsts.push(r);
        }
    }
    let (rate, p99, backlog) = client_series(&firsts);
    let rate_title = if rate.iter().any(|s| s.name.ends_with(" written")) {
        "Per client: ticks delivered (and written by the server) each second"
    } else {
        "Per client: ticks delivered each second"
    };
    let mut out = vec![
        line_chart(
            "stream-rate",
            rate_title,
            "ticks / s",
            Scale::Linear,
            count,
            rate,
            "A client's delivered line below its written line is a client falling behind; written below the generated rate is a server (or socket) that cannot keep up. One line per client (first replicate of each sweep point).",
        ),
        line_chart(
            "stream-p99",
            "Per client: p99 latency each second",
            "p99 latency from intended send (log scale)",
            Scale::Log,
            |v| duration_ns(v.max(0.0) as u64),
            p99,
            "A p99 that climbs second after second is a queue in front of that client: the server's send queue, the kernel's socket buffers, or the client's own. Seconds after the window's end are the drain: no new ticks, the queues empty.",
        ),
    ];
    if !backlog.is_empty() {
        out.push(line_chart(
            "stream-backlog",
            "Per client: backlog (generated − processed − dropped)",
            "ticks waiting for the client",
            Scale::Linear,
            |v| {
                if v < 0.0 {
                    format!("-{}", count(-v))
                } else {
                    count(v)
                }
            },
            backlog,
            "A line that climbs is a client fed faster than it processes: under `unbounded` it climbs for ever; a drop policy flattens it by shedding ticks (counted as dropped). After the window's end the server stops generating and the line falls as the client drains its queue.",
        ));
    }
    out
}

/// Per stream client of `firsts` (the first replicate of each point): its delivered (and,
/// with one point, written) rate, its p99 and its backlog, each second.
fn client_series(firsts: &[&RunResult]) -> (Vec<Series>, Vec<Series>, Vec<Series>) {
    let label = |r: &RunResult, c: &StreamClient| {
        if firsts.len() > 1 {
            format!("{} {}", point_label(r), c.name)
        } else {
            c.name.clone()
        }
    };
    let mut rate = Vec::new();
    let mut p99 = Vec::new();
    let mut backlog = Vec::new();
    for r in firsts {
        for c in &r.streams {
            let at = |i: &StreamInterval| i.start_s + i.length_s;
            let in_window = |i: &&StreamInterval| i.start_s + i.length_s <= r.duration_s + 0.01;
            rate.push(series(
                format!("{} delivered", label(r, c)),
                c.intervals
                    .iter()
                    .filter(in_window)
                    .map(|i| (at(i), i.delivered as f64)),
            ));
            // With one sweep point there is room for the server's side too.
            let falls_behind =
                c.intervals.iter().filter(in_window).any(|i| {
                    (i.written as f64 - i.delivered as f64).abs() > 0.02 * i.generated as f64
                });
            if firsts.len() == 1 && c.server.is_some() && falls_behind {
                rate.push(series(
                    format!("{} written", label(r, c)),
                    c.intervals
                        .iter()
                        .filter(in_window)
                        .map(|i| (at(i), i.written as f64)),
                ));
            }
            p99.push(series(
                label(r, c),
                c.intervals
                    .iter()
                    .filter(|i| i.latency_p99_ns > 0)
                    .map(|i| (at(i), i.latency_p99_ns as f64)),
            ));
            if c.server.is_some() {
                backlog.push(series(
                    label(r, c),
                    c.intervals.iter().map(|i| (at(i), i.backlog as f64)),
                ));
            }
        }
    }
    (rate, p99, backlog)
}

fn point_label(r: &RunResult) -> String {
    r.params
        .iter()
        .map(|p| format!("{}={}", msgbench_model::sweep::short_axis(&p.axis), p.value))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One client's line, thinned past [`crate::svg::MAX_LINE_POINTS`] as every time series is.
fn series(name: String, points: impl Iterator<Item = (f64, f64)>) -> Series {
    Series {
        name,
        points: crate::svg::downsample(points.collect()),
        dots: true,
        point_labels: Vec::new(),
    }
}

fn line_chart(
    name: &str,
    title: &str,
    unit: &str,
    scale: Scale,
    format: fn(f64) -> String,
    series: Vec<Series>,
    caption: &str,
) -> Chart {
    let xs: Vec<f64> = std::iter::once(0.0)
        .chain(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .collect();
    Chart {
        name: name.into(),
        caption: caption.into(),
        svg: LineChart {
            title: title.into(),
            x: Axis::fitted(
                "seconds into the measured window",
                Scale::Linear,
                &xs,
                crate::svg::seconds_label,
            ),
            y: Axis::fitted(unit, scale, &ys, format),
            series,
            callouts: Vec::new(),
            threshold: None,
        }
        .render(name),
    }
}
