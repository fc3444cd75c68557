//! Report rendering on a fixed synthetic sweep: snapshot tests of report.md, report.html and
//! every SVG (regenerate with `UPDATE_SNAPSHOTS=1 cargo test -p msgbench-report --test render`
//! and look at the diff), plus what must hold whatever the layout: no NaN, every chart inlined,
//! the knee and the advice where they belong.
use msgbench_model::histogram::{encode, new_latency_histogram, Percentiles};
use msgbench_model::result::*;
use std::path::Path;

/// A point of a pipeline-depth-like sweep: throughput plateaus at 12k/s while latency grows.
fn run(point: usize, window: u32, replicate: u32, rate: f64, base_ns: u64) -> RunResult {
    let mut h = new_latency_histogram();
    for i in 0..2000u64 {
        // A spread with a tail: the last 1 % is 3× slower.
        let v = base_ns + base_ns * (i % 100) / 100 + if i % 100 == 99 { 2 * base_ns } else { 0 };
        h.record(v + replicate as u64 * 1000).unwrap();
    }
    let delivered = (rate * 2.0) as u64;
    let intervals = (0..2)
        .map(|s| IntervalSample {
            start_s: s as f64,
            length_s: 1.0,
            sent: delivered / 2,
            delivered: delivered / 2,
            dropped: 0,
            skipped: 0,
            latency_p50_ns: base_ns,
            latency_p99_ns: base_ns * 3 + s * 1000,
            latency_max_ns: base_ns * 4,
            backlog: (window as i64) * (s as i64 + 1),
        })
        .collect();
    RunResult {
        schema_version: SCHEMA_VERSION,
        run_id: format!("{point:03}-window={window}-r{replicate}"),
        experiment: "pipeline-depth".into(),
        point,
        replicate,
        params: vec![Param {
            axis: "client.window".into(),
            value: window.to_string(),
        }],
        system: msgbench_model::scenario::SystemKind::Rpc,
        config: format!("rpc window={window}"),
        started_unix_ms: 1_790_000_000_000,
        duration_s: 2.0,
        warmup_s: 0.5,
        send_lag_limit_ns: None,
        target_per_sec: None,
        schedule_s: Some(2.0),
        interrupted: false,
        counters: Counters {
            attempted: delivered,
            sent: delivered,
            delivered,
            ..Default::default()
        },
        sequence: SequenceErrors::default(),
        early: Default::default(),
        faults: Faults::default(),
        latency: Percentiles::of(&h),
        service: Percentiles::of(&h),
        send_lag: Percentiles::default(),
        send_lag_split: SendLagSplit::default(),
        unanswered: Percentiles::default(),
        publish_latency: None,
        streamed: None,
        classes: vec![ClassResult {
            name: "call".into(),
            latency: Percentiles::of(&h),
            service: Percentiles::of(&h),
            latency_histogram: encode(&h),
        }],
        cpu: CpuUsage {
            driver_cpu_s: 0.1,
            sut_cpu_s: Some(0.8),
            ..Default::default()
        },
        intervals,
        stages: Vec::new(),
        histograms: Histograms {
            latency: encode(&h),
            service: encode(&h),
            send_lag: encode(&new_latency_histogram()),
            send_lag_held: String::new(),
            unanswered: String::new(),
        },
        warnings: vec![],
        streams: vec![],
        connections: vec![],
        fairness: vec![],
        info: vec![],
        shard: None,
        pubsub_shard: None,
        shards: vec![],
    }
}

fn write_results(dir: &Path) {
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    std::fs::write(
        dir.join("experiment.toml"),
        "name = \"pipeline-depth\"\n[report]\nslo = \"p99 < 4ms\"\n",
    )
    .unwrap();
    let sweep = [
        (5, 5.0e3, 1_000_000),
        (10, 8.9e3, 1_100_000),
        (15, 11.0e3, 1_200_000),
        (20, 11.9e3, 1_400_000),
        (30, 12.4e3, 1_900_000),
    ];
    for (point, (window, rate, base)) in sweep.into_iter().enumerate() {
        for replicate in 1..=2 {
            let r = run(
                point,
                window,
                replicate,
                rate * (1.0 + 0.01 * replicate as f64),
                base,
            );
            std::fs::write(
                dir.join(format!("runs/{}.json", r.run_id)),
                serde_json::to_string_pretty(&r).unwrap(),
            )
            .unwrap();
        }
    }
}

#[test]
fn reports_match_their_snapshots_and_hold_together() {
    let tmp = tempfile::tempdir().unwrap();
    write_results(tmp.path());
    let written = msgbench_report::publish::publish(tmp.path(), None).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "report.md",
        "report.html",
        "spectrum.svg",
        "throughput.svg",
        "cpu.svg",
        "latency-vs-throughput.svg",
        "timeseries-rate.svg",
        "timeseries-p99.svg",
        "timeseries-backlog.svg",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n == "loss.svg"),
        "nothing was lost: no empty loss chart"
    );
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert_eq!(
        html.matches("<svg ").count(),
        names.len() - 2,
        "every chart is inlined"
    );
    assert!(
        !html.contains("<script") && !html.contains("http://")
            || html.matches("http://").count()
                == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
        "no script, no fetch"
    );
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(md.contains("Knee at window 20"), "{md}");
    assert!(
        md.contains("Under the SLO p99 < 4ms: ship window 20"),
        "{md}"
    );
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    for (path, name) in written.iter().zip(&names) {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            !text.contains("NaN") && !text.contains("inf"),
            "{name} has NaN/inf"
        );
        let snapshot = snapshots.join(name);
        if update {
            std::fs::write(&snapshot, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&snapshot).unwrap_or_default();
        assert!(
            expected == text,
            "{name} differs from tests/snapshots/{name}; if the change is intended, run `UPDATE_SNAPSHOTS=1 cargo test --release -p msgbench-report --test render`, review the diff, and commit it"
        );
    }
}

#[test]
fn a_bad_slo_is_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    write_results(tmp.path());
    let e = msgbench_report::publish::publish(tmp.path(), Some("p99 ~ 4ms"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("p99 ~ 4ms") && e.contains("p99 < 10ms"), "{e}");
}

#[test]
fn a_saturated_driver_that_missed_its_target_makes_the_run_invalid() {
    let mut r = run(0, 5, 1, 5e3, 1_000_000);
    r.target_per_sec = Some(20_000.0);
    r.cpu.threads = vec![ThreadCpu {
        role: "client-0".into(),
        pinned_cpu: None,
        cpu: CpuTimes {
            user_s: 1.5,
            sys_s: 0.48,
            ..Default::default()
        },
    }];
    let v = msgbench_report::validity::judge(&r);
    assert!(
        v.reasons
            .iter()
            .any(|w| w.starts_with("driver CPU saturated: the client-0 thread used 99 %")),
        "{:?}",
        v.reasons
    );
    r.target_per_sec = Some(5e3);
    assert!(
        msgbench_report::validity::judge(&r).is_valid(),
        "target reached: the busy driver is fine"
    );
}

/// A tick-stream run: a fast client that keeps up, a slow one whose backlog grows 9k/s.
fn stream_run() -> RunResult {
    let mut r = run(0, 5, 1, 5e3, 1_000_000);
    r.system = msgbench_model::scenario::SystemKind::Ticks;
    r.duration_s = 4.0;
    let client = |name: &str, delivered_per_s: u64, backlog_growth: i64| {
        let mut h = msgbench_model::histogram::new_latency_histogram();
        h.record(20_000).unwrap();
        StreamClient {
            name: name.into(),
            group: name.trim_end_matches("-0").into(),
            kind: "native".into(),
            source: None,
            server: Some(StreamServerCounts {
                generated: 40_000,
                queued: 40_000,
                dropped: 0,
                written: 40_000,
                acked: delivered_per_s * 4,
                queue_peak: 10,
            }),
            counters: Counters {
                attempted: 40_000,
                sent: 40_000,
                delivered: delivered_per_s * 4,
                in_flight_end: 40_000 - delivered_per_s * 4,
                ..Default::default()
            },
            sequence: SequenceErrors::default(),
            gaps_seen: 0,
            duplicates_seen: 0,
            reordered_seen: 0,
            latency: Percentiles::of(&h),
            latency_histogram: encode(&h),
            faults: Faults::default(),
            closed: None,
            reconnects: 0,
            page_clock: None,
            behind_ns: None,
            intervals: (0..4)
                .map(|k| StreamInterval {
                    start_s: k as f64,
                    length_s: 1.0,
                    generated: 10_000,
                    written: 10_000,
                    delivered: delivered_per_s,
                    dropped: 0,
                    backlog: backlog_growth * (k + 1),
                    latency_p50_ns: 20_000,
                    latency_p99_ns: 40_000 * (k as u64 + 1),
                    latency_max_ns: 50_000 * (k as u64 + 1),
                })
                .collect(),
        }
    };
    r.streams = vec![client("fast-0", 10_000, 0), client("slow-0", 1_000, 9_000)];
    r
}

#[test]
fn stream_clients_get_their_table_charts_and_a_not_steady_verdict() {
    let r = stream_run();
    let reasons = msgbench_report::validity::judge(&r).reasons;
    assert!(
        reasons
            .iter()
            .any(|w| w.starts_with("not steady: client slow-0's backlog grew by 9.00k/s")),
        "{reasons:?}"
    );
    assert!(
        !reasons.iter().any(|w| w.contains("fast-0")),
        "a client that keeps up is steady: {reasons:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("runs")).unwrap();
    std::fs::write(
        tmp.path().join("runs/000.json"),
        serde_json::to_string(&r).unwrap(),
    )
    .unwrap();
    let written = msgbench_report::publish::publish(tmp.path(), None).unwrap();
    for chart in ["stream-rate.svg", "stream-p99.svg", "stream-backlog.svg"] {
        assert!(
            written.iter().any(|p| p.ends_with(chart)),
            "{chart} missing"
        );
    }
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(md.contains("## Stream clients"), "{md}");
    let slow_row = md.lines().find(|l| l.contains("| slow-0 |")).unwrap();
    // generated/s, written/s, acked/s, delivered/s: the server's 10k/s next to the client's 1k/s.
    assert!(
        slow_row.contains("| 10.0k | 10.0k | 1.00k | 1.00k |"),
        "{slow_row}"
    );
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert!(
        html.contains("<h2>Stream clients</h2>") && html.contains("data-chart=\"stream-backlog\"")
    );
    let summary = msgbench_report::summary::table(std::slice::from_ref(&r));
    assert!(
        summary.contains("stream clients") && summary.contains("slow-0"),
        "{summary}"
    );
    // A publish/subscribe run's rows are subscriptions, and the section says so.
    let pubsub = RunResult {
        system: msgbench_model::kind::SystemKind::Pubsub,
        ..r
    };
    let md = msgbench_report::streams::markdown(&[pubsub]);
    assert!(
        md.contains("## Subscriptions") && md.contains("the broker lost"),
        "{md}"
    );
}

#[test]
fn impossible_data_is_shown_invalid_with_its_reason() {
    // Before: delivered > sent rendered "success 20000 %", and a histogram that did not
    // decode was left out of the chart without a word.
    let tmp = tempfile::tempdir().unwrap();
    write_results(tmp.path());
    let path = tmp.path().join("runs/000-window=5-r1.json");
    let mut r: RunResult = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    r.counters.delivered *= 200;
    std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
    let path2 = tmp.path().join("runs/001-window=10-r1.json");
    let mut r2: RunResult =
        serde_json::from_str(&std::fs::read_to_string(&path2).unwrap()).unwrap();
    r2.histograms.latency = "SElTVEZBQUFBRVh4".into();
    std::fs::write(&path2, serde_json::to_string(&r2).unwrap()).unwrap();

    let v = msgbench_report::validity::judge(&r);
    assert!(
        v.reasons[0].starts_with("impossible counters (sent "),
        "{:?}",
        v.reasons
    );
    let v2 = msgbench_report::validity::judge(&r2);
    assert!(
        v2.reasons[0].starts_with("its latency histogram cannot be read"),
        "{:?}",
        v2.reasons
    );
    msgbench_report::publish::publish(tmp.path(), None).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    // No share above 100 % anywhere ("success 20000 %" before).
    let shares = md.split(" %").filter_map(|before| {
        let number = before
            .rsplit(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()?;
        number.parse::<f64>().ok()
    });
    for share in shares {
        assert!(share <= 100.0, "a share of {share} % was printed");
    }
    assert!(
        md.contains("impossible counters"),
        "the reason is not in report.md"
    );
    assert!(md.contains("latency histogram cannot be read"));
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert!(html.contains("impossible counters"));
    assert!(!html.contains("20000 %"));
}

#[test]
fn unanswered_requests_make_the_tail_a_lower_bound_and_leave_the_body_alone() {
    // 2000 answered requests of 10–30 µs; 5 that got no answer, given up after 300 ms. Before,
    // the tables said max ~30 µs: a server that stalled past the timeout looked fast.
    let mut r = run(0, 5, 1, 1000.0, 10_000);
    let mut waits = new_latency_histogram();
    for _ in 0..5 {
        waits.record(300_000_000).unwrap();
    }
    r.unanswered = Percentiles::of(&waits);
    r.histograms.unanswered = encode(&waits);
    r.counters.failed = 5;
    r.counters.sent += 5;
    r.counters.attempted += 5;
    let bounds = r.latency_at_least().expect("there are unanswered requests");
    assert!(bounds.max_ns >= 300_000_000 - 300_000);
    use msgbench_model::percentile::SloMetric::{Max as MAX, P50, P99, P999, P9999};
    use msgbench_report::format::latency;
    // 5 of 2005 (0.25 %) reach into p99.9 and p99.99 and the max, not into p99 or p50.
    assert!(latency(&r, Some(&bounds), MAX).starts_with("≥ 300"));
    assert!(latency(&r, Some(&bounds), P9999).starts_with("≥ 300"));
    assert!(latency(&r, Some(&bounds), P999).starts_with("≥ 300"));
    assert!(!latency(&r, Some(&bounds), P99).starts_with('≥'));
    assert_eq!(
        latency(&r, Some(&bounds), P50),
        msgbench_report::format::duration_ns(r.latency.p50_ns)
    );
    // The verdict names it, and report.md marks the bound.
    let w = msgbench_model::verdict::warnings(&r);
    assert!(
        w.iter()
            .any(|w| w.to_string().contains("5 requests got no answer")),
        "{w:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("runs")).unwrap();
    write_results(tmp.path());
    std::fs::write(
        tmp.path().join("runs/000-window=5-r1.json"),
        serde_json::to_string(&r).unwrap(),
    )
    .unwrap();
    msgbench_report::publish::publish(tmp.path(), None).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    // Point 0 has two replicates: the cell is the median (min–max) of the bounds, marked.
    let row = md.lines().find(|l| l.starts_with("| 0 |")).unwrap();
    assert!(
        row.contains("| ≥ ") && row.contains("–300 ms) | ≥ "),
        "{row}"
    );
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert!(html.contains("≥ 300 ms"));
}

#[test]
fn most_requests_unanswered_make_every_percentile_a_bound_even_with_short_waits() {
    // A backlog given up at the span's end: 7000 requests that waited 1–50 ms, 3000 answered
    // after ~100 ms. The answered p50 alone (~100 ms) described 30 % of the run, unmarked.
    let mut r = run(0, 5, 1, 1000.0, 3000);
    let mut answered = new_latency_histogram();
    let mut waits = new_latency_histogram();
    for i in 0..3000u64 {
        answered.record(100_000_000 + i * 1000).unwrap();
    }
    for i in 0..7000u64 {
        waits.record(1_000_000 + i * 7_000).unwrap();
    }
    r.latency = Percentiles::of(&answered);
    r.histograms.latency = encode(&answered);
    r.unanswered = Percentiles::of(&waits);
    r.histograms.unanswered = encode(&waits);
    r.counters.attempted = 10_000;
    r.counters.sent = 3000;
    r.counters.skipped = 7000;
    r.counters.delivered = 3000;
    let bounds = r.latency_at_least().unwrap();
    use msgbench_model::percentile::SloMetric::{P50, P99};
    use msgbench_report::format::latency;
    let p50 = latency(&r, Some(&bounds), P50);
    assert!(p50.starts_with("≥ "), "{p50}");
    assert!(latency(&r, Some(&bounds), P99).starts_with("≥ "));
    // The bound is the percentile of both together, below the answered figure here.
    assert!(bounds.p50_ns < r.latency.p50_ns);
}

#[test]
fn a_late_run_s_send_lag_is_split_by_whose_it_is_in_both_reports() {
    // Issue 44: the send-lag warning read "the driver could not keep its schedule, or the
    // system pushed back under `block`" whichever it was; the two need opposite fixes.
    let mut late = run(0, 5, 1, 5e3, 1_000_000);
    late.run_id = "late-host".into();
    late.send_lag = Percentiles {
        count: 10_000,
        p99_ns: 4_200_000,
        ..Default::default()
    };
    late.send_lag_split = SendLagSplit {
        pacer: Percentiles {
            count: 9_990,
            p99_ns: 4_100_000,
            ..Default::default()
        },
        held: Percentiles {
            count: 10,
            p99_ns: 300_000,
            ..Default::default()
        },
    };
    late.cpu.threads = vec![ThreadCpu {
        role: "client-0".into(),
        pinned_cpu: Some(0),
        cpu: CpuTimes {
            user_s: 0.2,
            cpu_wait_s: Some(0.35),
            ..Default::default()
        },
    }];
    late.warnings = msgbench_model::verdict::warnings(&late);
    let lag = late
        .warnings
        .iter()
        .map(|w| w.to_string())
        .find(|w| w.starts_with("send lag"));
    assert!(
        lag.as_deref()
            .is_some_and(|w| w.contains("msgbench's pacer woke or ran late")),
        "{lag:?}"
    );
    let calm = run(1, 5, 1, 5e3, 1_000_000);
    let runs = [late, calm];
    let md = msgbench_report::markdown::render(&runs, &[], &[]);
    let section = md
        .split("## Send lag: whose lateness")
        .nth(1)
        .expect("report.md has the section");
    assert!(
        section.contains(
            "| late-host | 4.20 ms | 4.10 ms | 10 | 300 µs | 350 ms (17.5 %) | client-0 |"
        ),
        "{section}"
    );
    assert!(
        !section.contains("001-"),
        "a run that was not late is not listed: {section}"
    );
    let html = msgbench_report::html::render(&runs, &[], &[], None, "", &[]);
    assert!(html.contains("Send lag: whose lateness"));
    assert!(
        html.contains("<td class=\"l\">4.10 ms</td>") && html.contains("350 ms (17.5 %)"),
        "{html}"
    );
}
