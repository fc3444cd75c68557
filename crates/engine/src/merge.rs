//! `msgbench merge`: one result directory from the directories of a run's shards
//! (`run --shard I/N`). Exact where HdrHistograms are: every histogram (whole run, per class,
//! send lag, unanswered, each second's) is the sum of the shards', so a merged p99.99 is the one
//! a single generator offering the whole schedule would have recorded, to the histogram's
//! 0.1 %. Counters, faults and CPU are summed; seconds are aligned on the wall clock.
//!
//! Refused, before anything is written: a directory that is not a shard's result, shards of
//! different experiments or format versions, a shard given twice, a shard or a run missing.
use crate::recorder::IntervalLatency;
use crate::store::{ResultStore, StoreError};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::Histogram;
use msgbench_model::histogram::{decode, encode, new_latency_histogram, Percentiles};
use msgbench_model::histogram_sum::Summer;
use msgbench_model::result::ShardRow;
use msgbench_model::result::{ClassResult, IntervalSample, RunResult, ThreadCpu};
use msgbench_model::warning::Warning;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Why the shards could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The shards given do not make one whole run; nothing was written.
    #[error("{0}")]
    Refused(String),
    /// The merged directory could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One shard's result directory, read.
struct ShardDir {
    dir: PathBuf,
    /// `experiment.toml` without its first (comment) line, which names where it came from.
    experiment: String,
    environment: Vec<u8>,
    /// Its runs by id.
    runs: BTreeMap<String, RunResult>,
    index: u32,
    count: u32,
}

/// What `merge` wrote.
#[derive(Debug)]
pub struct Merged {
    /// The merged directory.
    pub dir: PathBuf,
    /// The merged runs, in order.
    pub results: Vec<RunResult>,
    /// How many shards.
    pub shards: u32,
}

/// Merges the shards' result directories `dirs` into the new directory `out`; `command_line`
/// is the merge's own, for the merged `environment.json`.
pub fn merge(dirs: &[PathBuf], out: &Path, command_line: &[String]) -> Result<Merged, MergeError> {
    let shards = read_all(dirs)?;
    let refuse = |m: String| Err(MergeError::Refused(m));
    if out.exists() && std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return refuse(format!(
            "--out {}: exists and is not empty; give a new directory",
            out.display()
        ));
    }
    let first = &shards[0];
    let axes = first
        .runs
        .values()
        .next()
        .map(|r| r.params.iter().map(|p| p.axis.clone()).collect())
        .unwrap_or_default();
    let header = format!(
        "# Merged by msgbench {} from {} shards ({}).\n{}",
        env!("CARGO_PKG_VERSION"),
        shards.len(),
        shards
            .iter()
            .map(|s| s.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        first.experiment
    );
    // Every run is merged before anything is written: a refusal leaves no directory behind.
    let mut merged = Vec::new();
    for id in first.runs.keys() {
        let parts: Vec<&RunResult> = shards.iter().map(|s| &s.runs[id]).collect();
        let seconds = merged_hlog(&shards, id)?;
        let result = merge_runs(&parts, &seconds).map_err(MergeError::Refused)?;
        let intervals = hlog_intervals(seconds);
        let raw: Vec<PathBuf> = shards
            .iter()
            .map(|s| s.dir.join(format!("runs/{id}.latencies.csv")))
            .filter(|p| p.exists())
            .collect();
        merged.push((result, intervals, raw));
    }
    let environment = merged_environment(&shards, command_line);
    let existed = out.exists();
    let written = write_merged(out, axes, header.as_bytes(), &environment, &merged);
    if written.is_err() && !existed {
        // A full disk halfway: no half-written merge is left to be mistaken for one.
        let _ = std::fs::remove_dir_all(out);
    }
    written?;
    Ok(Merged {
        dir: out.to_path_buf(),
        results: merged.into_iter().map(|(r, _, _)| r).collect(),
        shards: first.count,
    })
}

/// Writes the merged runs into `out`.
fn write_merged(
    out: &Path,
    axes: Vec<String>,
    header: &[u8],
    environment: &[u8],
    merged: &[(RunResult, Vec<IntervalLatency>, Vec<PathBuf>)],
) -> Result<(), StoreError> {
    let mut store = ResultStore::create_in(out, axes, header, environment)?;
    for (result, intervals, raw) in merged {
        if !raw.is_empty() {
            store.write_file_with(&format!("runs/{}.latencies.csv", result.run_id), |w| {
                concatenate_latencies(raw, w)
            })?;
        }
        store.write_run(result, intervals, &[])?;
    }
    Ok(())
}

/// Shard 0's `environment.json` with every shard's host and the merge's command line (the
/// shard's own is kept as `shard_command_line`).
fn merged_environment(shards: &[ShardDir], command_line: &[String]) -> Vec<u8> {
    let mut env: serde_json::Value =
        serde_json::from_slice(&shards[0].environment).unwrap_or_else(|_| serde_json::json!({}));
    let mut hosts: Vec<String> = shards
        .iter()
        .filter_map(|s| serde_json::from_slice::<serde_json::Value>(&s.environment).ok())
        .filter_map(|e| e.get("hostname").and_then(|h| h.as_str()).map(String::from))
        .collect();
    hosts.sort();
    hosts.dedup();
    if let Some(map) = env.as_object_mut() {
        if let Some(c) = map.remove("command_line") {
            map.insert("shard_command_line".into(), c);
        }
        map.insert("command_line".into(), serde_json::json!(command_line));
        map.insert(
            "hostname".into(),
            serde_json::json!(format!("{} ({} shards)", hosts.join(", "), shards.len())),
        );
    }
    let mut bytes = serde_json::to_vec_pretty(&env).expect("serializable");
    bytes.push(b'\n');
    bytes
}

/// Reads every directory and checks that together they are every shard of one run, once.
fn read_all(dirs: &[PathBuf]) -> Result<Vec<ShardDir>, MergeError> {
    if dirs.is_empty() {
        return Err(MergeError::Refused(
            "no directory given: give every shard's result directory".into(),
        ));
    }
    let mut shards = dirs
        .iter()
        .map(|d| read_shard(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(MergeError::Refused)?;
    shards.sort_by_key(|s| s.index);
    one_split(&shards)?;
    same_runs(&shards)?;
    Ok(shards)
}

/// The shards (sorted by index) are one split of one experiment, each shard once, none
/// missing.
fn one_split(shards: &[ShardDir]) -> Result<(), MergeError> {
    let first = &shards[0];
    for (k, s) in shards.iter().enumerate().skip(1) {
        let why = if s.count != first.count {
            Some(format!("is shard {}/{}", s.index, s.count))
        } else if s.experiment != first.experiment {
            Some("ran another experiment (its experiment.toml differs)".to_string())
        } else if shards[k - 1].index == s.index {
            return Err(MergeError::Refused(format!(
                "{} and {} are both shard {}/{}: give each shard's directory once",
                shards[k - 1].dir.display(),
                s.dir.display(),
                s.index,
                s.count
            )));
        } else {
            None
        };
        if let Some(why) = why {
            return Err(MergeError::Refused(format!(
                "{} {why}, but {} is shard {}/{}: give the directories of the shards of one run, \
                 each once",
                s.dir.display(),
                first.dir.display(),
                first.index,
                first.count
            )));
        }
    }
    let missing: Vec<String> = (0..first.count)
        .filter(|i| !shards.iter().any(|s| s.index == *i))
        .map(|i| format!("{i}/{}", first.count))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Refused(format!(
            "shard {} missing: the {} directories given are shards {}; a merge needs every \
             shard's result directory",
            missing.join(", "),
            shards.len(),
            shards
                .iter()
                .map(|s| format!("{}/{}", s.index, s.count))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// Every shard has every run, and each run's shards ran together.
fn same_runs(shards: &[ShardDir]) -> Result<(), MergeError> {
    let first = &shards[0];
    for s in &shards[1..] {
        for (id, r) in &s.runs {
            if let Some(theirs) = first.runs.get(id) {
                together(theirs, r, first, s)?;
            }
        }
    }
    for s in shards {
        for id in first.runs.keys().chain(s.runs.keys()) {
            for o in [first, s] {
                if !o.runs.contains_key(id) {
                    return Err(MergeError::Refused(format!(
                        "run {id} is missing from shard {}/{} ({}): that shard stopped before \
                         it; finish it (`msgbench run --resume {} --shard {}/{}`) or merge \
                         shards that all finished",
                        o.index,
                        o.count,
                        o.dir.display(),
                        o.dir.display(),
                        o.index,
                        o.count
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Refuses a run's shards that did not run together: planned for different starts (two
/// invocations of `--start-at`), or, without one, measured spans that do not overlap.
fn together(a: &RunResult, b: &RunResult, da: &ShardDir, db: &ShardDir) -> Result<(), MergeError> {
    if let Some(what) = settings_differ(a, b) {
        return Err(MergeError::Refused(format!(
            "run {} of {} and of {} were measured with other settings ({what}): they are not \
             shards of one run; give the directories of the shards started together",
            a.run_id,
            da.dir.display(),
            db.dir.display()
        )));
    }
    let planned = |r: &RunResult| r.shard.as_ref().and_then(|s| s.planned_start_unix_ms);
    let apart = match (planned(a), planned(b)) {
        // `+30s` read by processes launched a few ms apart differs by those ms: that is one
        // invocation. Two invocations are a run's length apart or more.
        (Some(x), Some(y))
            if x.abs_diff(y) > (a.duration_s.min(b.duration_s) * 500.0).max(1000.0) as u64 =>
        {
            Some(format!(
                "were planned to start {} ms apart (two --start-at)",
                x.abs_diff(y)
            ))
        }
        (None, None) => {
            let (sa, sb) = (a.started_unix_ms as f64, b.started_unix_ms as f64);
            let overlap = (sa + a.duration_s * 1e3).min(sb + b.duration_s * 1e3) - sa.max(sb);
            (overlap <= 0.0).then(|| {
                format!(
                    "did not run at the same time (their measured spans start {} ms apart)",
                    a.started_unix_ms.abs_diff(b.started_unix_ms)
                )
            })
        }
        (Some(_), None) | (None, Some(_)) => {
            Some("were not all given --start-at (one was, one was not)".to_string())
        }
        _ => None,
    };
    match apart {
        None => Ok(()),
        Some(why) => Err(MergeError::Refused(format!(
            "run {} of {} and of {} {why}: they are shards of different invocations; give \
             the directories of the shards started together",
            a.run_id,
            da.dir.display(),
            db.dir.display()
        ))),
    }
}

/// What two shards of one run must agree on and do not: the system's settings as the run
/// describes them, the sweep point, the measured window asked for.
fn settings_differ(a: &RunResult, b: &RunResult) -> Option<String> {
    if a.config != b.config {
        return Some(format!("`{}` against `{}`", a.config, b.config));
    }
    if a.params != b.params {
        let point = |r: &RunResult| {
            (r.params.iter())
                .map(|p| format!("{}={}", p.axis, p.value))
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Some(format!("sweep point {} against {}", point(a), point(b)));
    }
    None
}

/// Reads one shard's directory.
fn read_shard(dir: &Path) -> Result<ShardDir, String> {
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| format!("{}: {e}; give a shard's result directory", dir.display()))?;
    let not_ours = |what: &str| {
        format!(
            "{}: {what}; give the result directory `msgbench run --shard I/N` wrote (it holds \
             experiment.toml and runs/)",
            dir.display()
        )
    };
    let experiment = std::fs::read_to_string(dir.join("experiment.toml"))
        .map_err(|_| not_ours("no experiment.toml"))?;
    let experiment = experiment
        .split_once('\n')
        .map_or(String::new(), |(_, rest)| rest.to_string());
    let environment = std::fs::read(dir.join("environment.json")).unwrap_or_default();
    let mut runs = BTreeMap::new();
    let entries = std::fs::read_dir(dir.join("runs")).map_err(|_| not_ours("no runs/"))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let r: RunResult = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: not a result of this msgbench ({e}); merge shards written by the same version",
                path.display()
            )
        })?;
        if r.schema_version != msgbench_model::result::SCHEMA_VERSION {
            return Err(format!(
                "{}: result format {} (this msgbench writes {}); run every shard with the same \
                 msgbench",
                path.display(),
                r.schema_version,
                msgbench_model::result::SCHEMA_VERSION
            ));
        }
        check_run_id(&path, &r.run_id)?;
        if let Some(why) = r.implausible() {
            return Err(format!(
                "{}: {why}: it is not a result msgbench wrote; give the shard's directory as \
                 msgbench wrote it",
                path.display()
            ));
        }
        runs.insert(r.run_id.clone(), r);
    }
    let identities: Vec<(u32, u32)> = runs
        .values()
        .map(|r| r.shard.as_ref().map_or((0, 0), |s| (s.index, s.count)))
        .collect();
    let Some(&(index, count)) = identities.first() else {
        return Err(not_ours("no finished run in runs/"));
    };
    if count == 0 {
        return Err(not_ours("its runs were not run as shards (no --shard)"));
    }
    if identities.iter().any(|&i| i != (index, count)) {
        return Err(not_ours("its runs are of different shards"));
    }
    Ok(ShardDir {
        dir,
        experiment,
        environment,
        runs,
        index,
        count,
    })
}

/// Refuses a run id read from `path` that msgbench would not have written, or that is not its
/// file's name: the id becomes a file name in the merged directory, and a shard's files come
/// from another host (`"run_id": "../../x"` once wrote outside `--out`).
fn check_run_id(path: &Path, id: &str) -> Result<(), String> {
    let why = msgbench_model::result::run_id_problem(id).or_else(|| {
        (path.file_stem().and_then(|s| s.to_str()) != Some(id))
            .then(|| "is not its file's name".to_string())
    });
    match why {
        None => Ok(()),
        Some(why) => Err(format!(
            "{}: its run_id {:?} {why}: it is not a result msgbench wrote (a run id becomes a \
             file name, so merge refuses it); give the shard's directory as msgbench wrote it",
            path.display(),
            msgbench_model::result::truncate_chars(id, 80)
        )),
    }
}

/// One run's shards as one run.
pub fn merge_runs(parts: &[&RunResult], seconds: &Seconds) -> Result<RunResult, String> {
    let first = parts[0];
    let start_ms = parts.iter().map(|r| r.started_unix_ms).min().unwrap_or(0);
    let end_ms = parts
        .iter()
        .map(|r| r.started_unix_ms as f64 + r.duration_s * 1e3)
        .fold(0.0, f64::max);
    let mut m = RunResult {
        started_unix_ms: start_ms,
        duration_s: (end_ms - start_ms as f64).max(0.0) / 1e3,
        shard: None,
        pubsub_shard: None,
        shards: parts.iter().map(|r| shard_row(r)).collect(),
        counters: Default::default(),
        sequence: Default::default(),
        early: Default::default(),
        faults: Default::default(),
        streams: Vec::new(),
        connections: Vec::new(),
        warnings: Vec::new(),
        info: Vec::new(),
        ..first.clone()
    };
    m.target_per_sec = parts.iter().map(|r| r.target_per_sec).sum();
    m.interrupted = parts.iter().any(|r| r.interrupted);
    for r in parts {
        m.counters += r.counters;
        m.sequence += r.sequence;
        m.early += r.early;
        m.faults += r.faults.clone();
        m.streams.extend(r.streams.iter().cloned());
        m.connections.extend(r.connections.iter().cloned());
        for line in &r.info {
            if !m.info.contains(line) {
                m.info.push(line.clone());
            }
        }
    }
    reaccount_pubsub(&mut m, parts).map_err(|e| {
        format!(
            "run {}: the shards' publish/subscribe figures: {e}",
            first.run_id
        )
    })?;
    m.counters.check().map_err(|e| {
        format!(
            "run {}: the shards' counters do not add up: {e}",
            first.run_id
        )
    })?;
    m.connections.sort_by_key(|c| c.index);
    merge_histograms(&mut m, parts)?;
    m.classes = merged_classes(parts)?;
    merge_cpu(&mut m, parts);
    m.intervals = merged_intervals(parts, seconds);
    if parts.iter().any(|r| r.pubsub_shard.is_some()) {
        crate::drivers::streams::stream_stats::patch_run_intervals(
            &mut m.intervals,
            &m.streams,
            true,
        );
    }
    // The shards' stages are the one schedule's: judged again on the merged seconds.
    let window_s = m.schedule_s.unwrap_or(m.duration_s);
    msgbench_model::stage_judge::judge_stages(&mut m.stages, &m.intervals, window_s);
    m.fairness = msgbench_model::result::fairness_of(&m);
    m.info.push(format!(
        "merged from {} shards on {}",
        parts.len(),
        hosts(parts)
    ));
    merged_warnings(&mut m, parts);
    Ok(m)
}

/// The merged run's warnings: each shard's as a note, the clocks of a publish/subscribe run
/// across hosts, and the verdict on the whole.
fn merged_warnings(m: &mut RunResult, parts: &[&RunResult]) {
    for r in parts {
        let id = r
            .shard
            .as_ref()
            .map_or(String::new(), |s| format!("{}/{}", s.index, s.count));
        for w in &r.warnings {
            m.warnings.push(Warning::Note(format!("shard {id}: {w}")));
        }
    }
    if parts.iter().any(|r| r.pubsub_shard.is_some()) {
        let (info, flags) = clocks_across_hosts(m, parts);
        m.info.extend(info);
        m.warnings.extend(flags);
        m.warnings.extend(late_shards(parts));
    }
    m.warnings.extend(msgbench_model::verdict::warnings(m));
}

/// A publish/subscribe shard that started after the agreed instant (its opening outlasted the
/// lead) stamped its messages from its own start: every latency between it and the others is
/// off by its lateness.
fn late_shards(parts: &[&RunResult]) -> Vec<Warning> {
    (parts.iter())
        .filter_map(|r| r.shard.as_ref())
        // On time, a shard's start reads 0–1 ms late (a wall-clock reading's rounding).
        .filter(|s| s.start_late_ms >= 2)
        .map(|s| {
            Warning::Note(format!(
                "shard {}/{} started {} ms after the agreed start: its messages are stamped from its own start, so latencies between it and the other shards are off by about {} ms (give the shards a later --start-at)",
                s.index, s.count, s.start_late_ms, s.start_late_ms
            ))
        })
        .collect()
}

/// Most of a merged publish/subscribe run's p50 latency that the hosts' clock errors may be
/// before it is flagged.
pub const CLOCK_FRACTION: f64 = 0.1;

/// A publish/subscribe run over several hosts measures each message with two clocks: the
/// publisher's host stamps it, the subscriber's reads it. Its latency is then exact only to
/// the sum of their errors: each host's synchronization said (info), and a host whose bound
/// exceeds [`CLOCK_FRACTION`] of the p50 (or is not synchronized) flagged.
fn clocks_across_hosts(m: &RunResult, parts: &[&RunResult]) -> (Vec<String>, Vec<Warning>) {
    let mut hosts: Vec<(&str, &msgbench_model::result::WallClockStatus)> = parts
        .iter()
        .filter_map(|r| r.shard.as_ref().map(|s| (s.host.as_str(), &s.clock)))
        .collect();
    hosts.sort_by_key(|(h, _)| *h);
    hosts.dedup_by_key(|(h, _)| *h);
    if hosts.len() < 2 {
        return (Vec::new(), Vec::new());
    }
    let said: Vec<String> = hosts
        .iter()
        .map(|(h, c)| match c.synchronized {
            true => format!("{h} ±{} µs", c.max_error_us),
            false => format!("{h} not synchronized"),
        })
        .collect();
    let info = vec![format!(
        "publishers and subscriptions ran on {} hosts: each latency is the subscriber's clock − the publisher's stamp, exact to the sum of the two hosts' clock errors (their bounds: {})",
        hosts.len(),
        said.join(", ")
    )];
    let p50_us = m.latency.p50_ns as f64 / 1e3;
    let flags = hosts
        .iter()
        .filter(|(_, c)| !c.synchronized || c.max_error_us as f64 > CLOCK_FRACTION * p50_us)
        .map(|(h, c)| {
            Warning::Note(format!(
                "clock of {h}: {} against a p50 latency of {p50_us:.0} µs (over {:.0} % of it): latencies across hosts mix the clocks' error with the system's; synchronize the hosts (chrony, PTP) or measure on one",
                if c.synchronized { format!("bound ±{} µs", c.max_error_us) } else { "not synchronized".into() },
                CLOCK_FRACTION * 100.0
            ))
        })
        .collect();
    (info, flags)
}

/// A publish/subscribe run's shards: each subscription accounted again against every shard's
/// publishers (a shard's own counters knew only its own publishers' messages), and the run's
/// counters their sum. Nothing to do for other systems; shards of which only some carry
/// figures are refused.
fn reaccount_pubsub(m: &mut RunResult, parts: &[&RunResult]) -> Result<(), String> {
    let figures: Vec<_> = parts
        .iter()
        .filter_map(|r| r.pubsub_shard.as_ref())
        .collect();
    if figures.is_empty() {
        return Ok(());
    }
    if figures.len() != parts.len() {
        return Err("some shards carry no figures (pubsub_shard)".into());
    }
    // Their messages' mark and times come from the agreed start: one instant for all.
    let starts: Vec<Option<u64>> = (parts.iter())
        .map(|r| r.shard.as_ref().and_then(|s| s.planned_start_unix_ms))
        .collect();
    if starts.iter().any(|s| s.is_none() || *s != starts[0]) {
        return Err(format!(
            "their planned starts differ ({starts:?}): a publish/subscribe run's shards need one --start-at instant (RFC 3339 or Unix ms)"
        ));
    }
    // Each shard's publish latency is its own publishers': not merged (kept per shard).
    if m.publish_latency.take().is_some() {
        m.info.push("publish latency is each shard's own (its publishers'), in the shards' results; it is not merged".into());
    }
    m.info
        .retain(|line| !line.contains("of a publish/subscribe run: its subscriptions count"));
    crate::drivers::pubsub::accounting::merge_shards(&figures, &mut m.streams)?;
    // The streams' faults are in the shards' summed already: only the counts are redone.
    let (mut counters, sequence) = crate::drivers::streams::stream_stats::run_sums(
        &m.streams,
        &mut msgbench_model::result::Faults::default(),
    );
    counters.held_by_window = parts.iter().map(|r| r.counters.held_by_window).sum();
    (m.counters, m.sequence) = (counters, sequence);
    Ok(())
}

/// The hosts the shards ran on, once each.
fn hosts(parts: &[&RunResult]) -> String {
    let mut hosts: Vec<&str> = parts
        .iter()
        .filter_map(|r| r.shard.as_ref().map(|s| s.host.as_str()))
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    hosts.join(", ")
}

/// A shard's row in the merged run.
fn shard_row(r: &RunResult) -> ShardRow {
    ShardRow {
        shard: r.shard.clone().unwrap_or_default(),
        counters: r.counters,
        duration_s: r.duration_s,
        latency: r.latency.clone(),
        send_lag: r.send_lag.clone(),
        driver_cpu_s: r.cpu.driver_cpu_s,
        started_unix_ms: r.started_unix_ms,
        warnings: r.warnings.iter().map(|w| w.to_string()).collect(),
    }
}

/// The whole run's histograms (latency, service, send lag and its held part, unanswered), each
/// the sum of the shards', with their percentiles.
fn merge_histograms(m: &mut RunResult, parts: &[&RunResult]) -> Result<(), String> {
    let sum = |pick: fn(&RunResult) -> &String| add_all(parts.iter().map(|r| pick(r)));
    let latency = sum(|r| &r.histograms.latency)?;
    let service = sum(|r| &r.histograms.service)?;
    let send_lag = sum(|r| &r.histograms.send_lag)?;
    let send_lag_held = sum(|r| &r.histograms.send_lag_held)?;
    let unanswered = sum(|r| &r.histograms.unanswered)?;
    // Shards written before the split have none: the whole stays unsplit ("either"), not all
    // the pacer's.
    m.send_lag_split = match parts.iter().any(|r| r.send_lag_split != Default::default()) {
        true => msgbench_model::result::SendLagSplit::of(&send_lag, &send_lag_held),
        false => Default::default(),
    };
    m.histograms.send_lag_held = encode(&send_lag_held);
    (m.latency, m.service) = (Percentiles::of(&latency), Percentiles::of(&service));
    (m.send_lag, m.unanswered) = (Percentiles::of(&send_lag), Percentiles::of(&unanswered));
    m.histograms.latency = encode(&latency);
    m.histograms.service = encode(&service);
    m.histograms.send_lag = encode(&send_lag);
    m.histograms.unanswered = encode(&unanswered);
    m.streamed = crate::streamed::sum(parts.iter().filter_map(|r| r.streamed.as_ref()))?;
    Ok(())
}

/// The sum of encoded histograms.
fn add_all<'a>(encoded: impl Iterator<Item = &'a String>) -> Result<Histogram<u64>, String> {
    let mut all = new_latency_histogram();
    for text in encoded {
        if text.is_empty() {
            continue;
        }
        all.add(decode(text)?)
            .map_err(|e| format!("histograms do not add: {e:?}"))?;
    }
    Ok(all)
}

/// Each class's histograms added over the shards.
fn merged_classes(parts: &[&RunResult]) -> Result<Vec<ClassResult>, String> {
    let first = parts[0];
    if parts.iter().any(|r| r.classes.len() != first.classes.len()) {
        return Err(format!(
            "run {}: the shards have different operation classes",
            first.run_id
        ));
    }
    (0..first.classes.len())
        .map(|i| {
            let latency = add_all(parts.iter().map(|r| &r.classes[i].latency_histogram))?;
            Ok(ClassResult {
                name: first.classes[i].name.clone(),
                latency: Percentiles::of(&latency),
                // A class's service time is not kept as a histogram; the shards' largest
                // figures are the merged run's bounds, so keep the busiest shard's.
                service: parts
                    .iter()
                    .map(|r| r.classes[i].service.clone())
                    .max_by_key(|s| s.count)
                    .unwrap_or_default(),
                latency_histogram: encode(&latency),
            })
        })
        .collect()
}

/// Process CPU summed, threads listed per shard.
fn merge_cpu(m: &mut RunResult, parts: &[&RunResult]) {
    let mut process = msgbench_model::result::CpuTimes::default();
    let mut threads = Vec::new();
    for (k, r) in parts.iter().enumerate() {
        let p = r.cpu.process;
        process.user_s += p.user_s;
        process.sys_s += p.sys_s;
        process.ctx_switches_voluntary += p.ctx_switches_voluntary;
        process.ctx_switches_involuntary += p.ctx_switches_involuntary;
        process.cpu_wait_s = match (process.cpu_wait_s, p.cpu_wait_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        process.migrations = match (process.migrations, p.migrations) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) if k == 0 => b,
            _ => None,
        };
        let id = r.shard.as_ref().map_or(0, |s| s.index);
        threads.extend(r.cpu.threads.iter().map(|t| ThreadCpu {
            role: format!("shard {id} {}", t.role),
            ..t.clone()
        }));
    }
    m.cpu.process = process;
    m.cpu.threads = threads;
    m.cpu.driver_cpu_s = parts.iter().map(|r| r.cpu.driver_cpu_s).sum();
    m.cpu.sut_cpu_s = parts.iter().map(|r| r.cpu.sut_cpu_s).sum::<Option<f64>>();
    m.cpu.delivered_per_cpu_s = if m.cpu.driver_cpu_s > 0.0 {
        m.counters.delivered as f64 / m.cpu.driver_cpu_s
    } else {
        0.0
    };
}

/// The second of the merged run (from its earliest shard's start) that a shard's interval
/// starting `start_s` into its own span falls in: nearest whole second, on the wall clock.
fn second_of(r: &RunResult, start_ms: u64, start_s: f64) -> usize {
    let offset_ms = r.started_unix_ms.saturating_sub(start_ms) as f64;
    ((offset_ms / 1e3 + start_s).round().max(0.0)) as usize
}

/// Each second of a merged run (from its earliest shard's start), summed over the shards.
pub type Seconds = BTreeMap<usize, Second>;

/// One second of a merged run: what the merged `.hlog` and its interval sample need of the
/// shards' latencies in it — not the histogram itself. A latency histogram is hundreds of KB;
/// a day of seconds held at once took gigabytes (two one-day shards: 87 s, ~20 GB).
#[derive(Debug, Clone, Default)]
pub struct Second {
    /// The longest of the shards' intervals in it, seconds.
    pub length_s: f64,
    /// The added histogram, as the `.hlog` holds it.
    pub encoded: String,
    /// Its p50, p99 and max, ns: what an interval sample shows (the full set of percentiles
    /// per second was a third of a merge's time).
    pub latency: (u64, u64, u64),
}

/// One interval of a shard's `.hlog`: the second of the merged run it falls in, its length and
/// its encoded histogram (borrowed from the file's bytes).
struct Entry<'a> {
    second: usize,
    length_s: f64,
    encoded: &'a str,
}

/// A shard's `.hlog`'s intervals in order, each placed in a second of the merged run.
fn shard_entries<'a>(
    path: &Path,
    bytes: &'a [u8],
    run: &RunResult,
    start_ms: u64,
) -> Result<Vec<Entry<'a>>, MergeError> {
    let mut entries: Vec<Entry<'a>> = Vec::new();
    for entry in IntervalLogIterator::new(bytes) {
        let i = match entry {
            Ok(LogEntry::Interval(i)) => i,
            Ok(_) => continue,
            Err(e) => return Err(damaged(path, &format!("{e:?}"))),
        };
        let second = second_of(run, start_ms, i.start_timestamp().as_secs_f64());
        if entries.last().is_some_and(|last| last.second > second) {
            return Err(damaged(path, &"its intervals are out of time order"));
        }
        entries.push(Entry {
            second,
            length_s: i.duration().as_secs_f64(),
            encoded: i.encoded_histogram(),
        });
    }
    Ok(entries)
}

/// The merged run's seconds, from the shards' `.hlog`s: every shard's intervals of a second
/// added, the seconds shared among the host's cores (each sum is independent).
fn merged_hlog(shards: &[ShardDir], id: &str) -> Result<Seconds, MergeError> {
    let parts: Vec<&RunResult> = shards.iter().map(|s| &s.runs[id]).collect();
    let start_ms = parts.iter().map(|r| r.started_unix_ms).min().unwrap_or(0);
    let mut files = Vec::new();
    for s in shards {
        let path = s.dir.join(format!("runs/{id}.hlog"));
        let bytes = std::fs::read(&path).map_err(|e| {
            MergeError::Refused(format!(
                "{}: {e}; the shard's directory is incomplete",
                path.display()
            ))
        })?;
        files.push((path, bytes));
    }
    // (second, shard, entry): a stable sort keeps each shard's own order within a second.
    let mut all: Vec<(usize, &Entry)> = Vec::new();
    // Each shard's log parsed on its own thread (a day's is 86 400 lines of base64).
    let per_shard = std::thread::scope(|scope| {
        let readers: Vec<_> = (files.iter().zip(&parts))
            .map(|((path, bytes), run)| {
                scope.spawn(move || shard_entries(path, bytes, run, start_ms))
            })
            .collect();
        (readers.into_iter())
            .map(|r| r.join().expect("a merge thread panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    for (k, entries) in per_shard.iter().enumerate() {
        all.extend(entries.iter().map(|e| (k, e)));
    }
    all.sort_by_key(|(_, e)| e.second);
    let groups: Vec<&[(usize, &Entry)]> = all.chunk_by(|a, b| a.1.second == b.1.second).collect();
    let paths: Vec<&Path> = files.iter().map(|(p, _)| p.as_path()).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let per_thread = groups.len().div_ceil(threads).max(1);
    let sums = std::thread::scope(|scope| {
        let workers: Vec<_> = (groups.chunks(per_thread))
            .map(|chunk| scope.spawn(|| sum_seconds(chunk, &paths)))
            .collect();
        (workers.into_iter())
            .map(|w| w.join().expect("a merge thread panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(sums.into_iter().flatten().collect())
}

/// Each group's intervals (one second's, every shard's) added into one [`Second`].
fn sum_seconds(
    groups: &[&[(usize, &Entry)]],
    paths: &[&Path],
) -> Result<Vec<(usize, Second)>, MergeError> {
    let mut summer = Summer::new();
    let mut out = Vec::with_capacity(groups.len());
    for group in groups {
        let mut length_s: f64 = 0.0;
        for (shard, entry) in group.iter() {
            length_s = length_s.max(entry.length_s);
            summer
                .add(entry.encoded)
                .map_err(|e| damaged(paths[*shard], &e))?;
        }
        let sum = summer
            .finish()
            .map_err(|e| MergeError::Refused(format!("second {}: {e}", group[0].1.second)))?;
        let second = Second {
            length_s,
            encoded: sum.encoded,
            latency: (sum.p50, sum.p99, sum.max),
        };
        out.push((group[0].1.second, second));
    }
    Ok(out)
}

/// A shard's `.hlog` that does not read whole.
fn damaged(path: &Path, e: &dyn std::fmt::Display) -> MergeError {
    MergeError::Refused(format!(
        "{}: truncated or malformed ({e}); the shard's directory is damaged: copy it again from \
         its host",
        path.display()
    ))
}

/// The merged `.hlog`'s intervals.
fn hlog_intervals(seconds: Seconds) -> Vec<IntervalLatency> {
    (seconds.into_iter())
        .map(|(second, s)| IntervalLatency {
            start_s: second as f64,
            length_s: s.length_s,
            encoded: s.encoded,
            max_ns: s.latency.2,
        })
        .collect()
}

/// The per-second samples: counts summed per wall-clock second, latency from that second's
/// added histogram, backlog the sum of each shard's at that second's end.
fn merged_intervals(parts: &[&RunResult], seconds: &Seconds) -> Vec<IntervalSample> {
    let start_ms = parts.iter().map(|r| r.started_unix_ms).min().unwrap_or(0);
    let mut merged: BTreeMap<usize, IntervalSample> = BTreeMap::new();
    for r in parts {
        for i in &r.intervals {
            let second = second_of(r, start_ms, i.start_s);
            let m = merged.entry(second).or_insert_with(|| IntervalSample {
                start_s: second as f64,
                ..Default::default()
            });
            m.length_s = m.length_s.max(i.length_s);
            // Saturating: an interval's counts are not checked against the run's.
            m.sent = m.sent.saturating_add(i.sent);
            m.delivered = m.delivered.saturating_add(i.delivered);
            m.dropped = m.dropped.saturating_add(i.dropped);
            m.skipped = m.skipped.saturating_add(i.skipped);
        }
    }
    // Each shard's backlog at a second's end is that of its last interval starting in or
    // before it: one cursor per shard walks its intervals once (seconds ascend), so the merge
    // is linear in the intervals (it once searched them all for every second).
    let mut cursors = vec![0usize; parts.len()];
    for (second, m) in merged.iter_mut() {
        m.backlog = 0;
        for (r, at) in parts.iter().zip(cursors.iter_mut()) {
            while *at < r.intervals.len()
                && second_of(r, start_ms, r.intervals[*at].start_s) <= *second
            {
                *at += 1;
            }
            if *at > 0 {
                m.backlog = m.backlog.saturating_add(r.intervals[*at - 1].backlog);
            }
        }
        if let Some(s) = seconds.get(second) {
            (m.latency_p50_ns, m.latency_p99_ns, m.latency_max_ns) = s.latency;
        }
    }
    merged.into_values().collect()
}

/// The shards' raw latencies, one header, every line.
fn concatenate_latencies(files: &[PathBuf], w: &mut dyn Write) -> std::io::Result<()> {
    w.write_all(b"latency_ns\n")?;
    for path in files {
        let reader = std::io::BufReader::new(std::fs::File::open(path)?);
        for line in reader.lines().skip(1) {
            writeln!(w, "{}", line?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod clock_tests {
    use super::*;
    use msgbench_model::result::{ShardInfo, WallClockStatus};

    fn shard(host: &str, synchronized: bool, max_error_us: u64) -> RunResult {
        RunResult {
            shard: Some(ShardInfo {
                host: host.into(),
                clock: WallClockStatus {
                    synchronized,
                    max_error_us,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_host_whose_clock_bound_is_a_tenth_of_the_p50_or_more_is_flagged() {
        let mut m = RunResult::default();
        m.latency.p50_ns = 500_000;
        let (a, b, c) = (
            shard("a", true, 16),
            shard("b", true, 80),
            shard("c", false, 0),
        );
        let (info, flags) = clocks_across_hosts(&m, &[&a, &b, &c]);
        assert!(
            info[0].contains("3 hosts") && info[0].contains("a ±16 µs"),
            "{info:?}"
        );
        let flagged: Vec<String> = flags.iter().map(|w| w.to_string()).collect();
        assert_eq!(flagged.len(), 2, "{flagged:?}");
        assert!(
            flagged[0].starts_with("clock of b: bound ±80 µs"),
            "{flagged:?}"
        );
        assert!(flagged[1].contains("c: not synchronized"), "{flagged:?}");
        // One host: one clock, nothing said.
        let (info, flags) = clocks_across_hosts(&m, &[&a, &a]);
        assert!(info.is_empty() && flags.is_empty());
    }
}
