//! Runs past one machine: `run --shard/--start-at`, `merge`, `kube` and `kube collect`
//! (docs/distributed.md).
use crate::args::{KubeArgs, KubeCollectArgs, KubeCommand, MergeArgs};
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use base64::Engine as _;
use msgbench_model::shard::{planned_starts, Shard};
use msgbench_model::Experiment;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// First line of a result archive in a log; the shard and the directory's name follow.
const ARCHIVE_BEGIN: &str = "msgbench-archive-begin";
/// Last line of a result archive in a log.
const ARCHIVE_END: &str = "msgbench-archive-end";
/// Most bytes `kube collect` reads of one pod's log: a shard's archive is a few MB at most.
const MAX_LOG_BYTES: usize = 1 << 30;

/// Applies `--shard` and `--start-at` to `experiment` (each refused with the reason and the
/// fix): which slice of every run this process offers, and when its runs start.
pub(crate) fn apply(
    experiment: &mut Experiment,
    shard: Option<&str>,
    start_at: Option<&str>,
) -> Result<(), String> {
    if let Some(text) = shard {
        let shard = Shard::parse(text, &|name| std::env::var(name).ok())?;
        experiment.set_shard(shard)?;
        let pubsub = (experiment.points.iter()).any(|p| {
            matches!(
                p.scenario.system,
                msgbench_model::scenario::System::Pubsub { .. }
            )
        });
        let one_instant = "one instant for all (RFC 3339, e.g. 2026-12-08T09:00:00Z, or Unix ms): \
                           their messages are marked by it and their latency counts from it";
        match start_at {
            _ if !pubsub || shard.is_whole() => {}
            None => {
                return Err(format!(
                "--shard {shard}: a publish/subscribe run's shards need --start-at, {one_instant}"
            ))
            }
            Some(t) if t.trim_start().starts_with('+') => {
                return Err(format!(
                    "--start-at {t}: each process counts +DURATION from its own now, so a \
                     publish/subscribe run's shards would start apart; give {one_instant}"
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(text) = start_at {
        let now = msgbench_engine::environment::unix_ms();
        let at = parse_start_at(
            text,
            now,
            "e.g. +30s (a publish/subscribe run's shards: one instant, e.g. 2026-12-08T09:00:00Z)",
        )?;
        planned_starts(experiment, at)?;
        experiment.start_at_unix_ms = Some(at);
    }
    Ok(())
}

/// `--start-at`: RFC 3339 (`2026-11-25T20:00:00Z`), Unix ms, or `+DURATION` from `now_ms`;
/// a time already past is refused (the shards could not all keep it), with `fix`.
pub(crate) fn parse_start_at(text: &str, now_ms: u64, fix: &str) -> Result<u64, String> {
    let usage = "give RFC 3339 UTC (2026-11-25T20:00:00Z), Unix ms (13 digits) or +DURATION \
                 (+30s)";
    let t = text.trim();
    let at = if let Some(rel) = t.strip_prefix('+') {
        let d = msgbench_model::duration::parse(rel)
            .map_err(|e| format!("--start-at {text}: {e}; {usage}"))?;
        now_ms + d.as_millis() as u64
    } else if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
        t.parse::<u64>()
            .map_err(|_| format!("--start-at {text}: too large; {usage}"))?
    } else {
        let when = humantime::parse_rfc3339_weak(t).map_err(|e| {
            let offset = t.contains('T') && t.rsplit('T').next().is_some_and(|h| h.contains(['+', '-']));
            if offset {
                format!("--start-at {text}: write the time in UTC with Z (2026-11-25T20:00:00Z); an offset such as +02:00 is not read")
            } else {
                format!("--start-at {text}: {e}; {usage}")
            }
        })?;
        when.duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("--start-at {text}: before 1970; {usage}"))?
            .as_millis() as u64
    };
    if at < now_ms {
        return Err(format!(
            "--start-at {text}: that is {} in the past (now is {}); give a time every shard can \
             still keep, {fix}",
            roughly(now_ms - at),
            rfc3339(now_ms)
        ));
    }
    Ok(at)
}

/// A span of `ms` for a person: `40 s`, `12 min`, `5 h`, `2520 days`.
pub(crate) fn roughly(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=119 => format!("{:.1} s", ms as f64 / 1e3),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// Unix ms as RFC 3339 UTC, to the second.
pub(crate) fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// `msgbench merge`.
pub(crate) fn merge(args: MergeArgs) -> ExitCode {
    let command_line: Vec<String> = std::env::args().collect();
    let merged = match msgbench_engine::merge::merge(&args.dirs, &args.out, &command_line) {
        Ok(m) => m,
        Err(e @ msgbench_engine::merge::MergeError::Refused(_)) => return fail(EXIT_BAD_INPUT, e),
        Err(e) => return fail(1, e),
    };
    if let Err(e) = crate::commands::report::write_report(&merged.dir, None) {
        return fail(1, e);
    }
    if !args.quiet {
        print!(
            "{}",
            msgbench_report::summary::table_for_width(
                &merged.results,
                crate::terminal::stdout_width()
            )
        );
        println!(
            "merged {} shards into {} (report.md, report.html)",
            merged.shards,
            merged.dir.display()
        );
    }
    ExitCode::SUCCESS
}

/// `msgbench kube`: the manifest, or `kube collect`.
pub(crate) fn kube(args: KubeArgs) -> ExitCode {
    if let Some(KubeCommand::Collect(c)) = args.collect {
        return collect(&c);
    }
    match manifest(&args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// A DNS-1123 label from an experiment's name and its start: the Job's name, new for every
/// manifest (a finished Job is kept a day, and a Job's template cannot be changed in place).
fn job_name(experiment: &str, start_ms: u64) -> String {
    let mut name: String = format!("msgbench-{experiment}")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    // Indexed Job pods are named JOB-INDEX-RANDOM: keep room within 63 characters.
    name.truncate(36);
    let stamp: String = rfc3339(start_ms)
        .chars()
        .filter(char::is_ascii_digit)
        .skip(2)
        .take(12)
        .collect();
    format!("{}-{stamp}", name.trim_end_matches('-'))
}

/// True when `address` (`host:port`, or a `ws://`/`http://` URL) names this host: in a pod,
/// that is the pod itself.
pub(crate) fn is_loopback(address: &str) -> bool {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The ConfigMap and Indexed Job of `args`, as YAML.
fn manifest(args: &KubeArgs) -> Result<String, String> {
    let shards = args.shards.unwrap_or(0);
    let image = args.image.clone().unwrap_or_default();
    if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
        return Err(format!(
            "--image {image:?}: give an image reference, e.g. registry.example/msgbench:0.1 \
             (build it from the project's Containerfile)"
        ));
    }
    if shards == 0 || shards > msgbench_model::shard::MAX_SHARDS {
        return Err(format!(
            "--shards {shards}: give 1 to {} pods",
            msgbench_model::shard::MAX_SHARDS
        ));
    }
    let mut experiment = crate::commands::scenario::load(&args.scenario)?;
    // Every shard must have work (set_shard checks the count for every index alike).
    experiment
        .set_shard(Shard {
            index: 0,
            count: shards,
        })
        .map_err(|e| {
            let why = e.split_once(": ").map_or(e.as_str(), |(_, why)| why);
            format!("--shards {shards}: {why}")
        })?;
    let servers = experiment
        .points
        .iter()
        .filter_map(|p| p.scenario.system.server_address());
    if let Some(address) = servers.into_iter().find(|a| is_loopback(a)) {
        return Err(format!(
            "the scenario's server is {address}, a loopback address: in a pod that is the pod \
             itself; give the server's address the pods can reach (a Service's DNS name or an \
             IP), e.g. --set 'rpc.address=\"rpc.bench.svc:7000\"'"
        ));
    }
    let now = msgbench_engine::environment::unix_ms();
    let start = parse_start_at(&args.start_at, now, "or make a new manifest")?;
    planned_starts(&experiment, start)?;
    if start < now + 60_000 {
        eprintln!(
            "msgbench: warning: the shards start in {}: every pod must be scheduled and its \
             image pulled before then, or its shard refuses to run (--start-at)",
            roughly(start - now)
        );
    }
    quantity(&args.memory)?;
    if args.cpus == 0 {
        return Err("--cpus 0: give each pod at least 1 CPU".into());
    }
    let ns = label(&args.namespace, "--namespace")?;
    let job = job_name(&experiment.name, start);
    let scenario: String = experiment
        .resolved_toml
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let fields = [
        ("experiment", format!("{:?}", experiment.name)),
        ("shards", shards.to_string()),
        ("when", rfc3339(start)),
        ("job", job),
        ("ns", ns),
        ("scenario", scenario),
        ("image", image),
        ("start", start.to_string()),
        ("cpus", args.cpus.to_string()),
        ("memory", args.memory.clone()),
    ];
    Ok(fill(KUBE_JOB, &fields))
}

/// The ConfigMap and Indexed Job `msgbench kube` writes, its `{name}`s filled by [`fill`].
const KUBE_JOB: &str = include_str!("kube-job.yaml");

/// `template` with each `{name}` of `fields` replaced by its value, in one pass (a value is
/// never read again for names: a scenario's text may hold braces).
pub(crate) fn fill(template: &str, fields: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let named = after.find('}').and_then(|close| {
            let name = &after[..close];
            let (_, value) = fields.iter().find(|(n, _)| *n == name)?;
            Some((value, close))
        });
        match named {
            Some((value, close)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A Kubernetes memory quantity such as `512Mi`, `1.5Gi` or `1e9`, at least 16 Mi.
fn quantity(text: &str) -> Result<(), String> {
    let bad = || {
        format!("--memory {text:?}: give a Kubernetes quantity of at least 16Mi, such as 512Mi, 1.5Gi or 2G")
    };
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    if value * scale < 16.0 * 1024.0 * 1024.0 {
        return Err(bad());
    }
    Ok(())
}

/// A DNS-1123 label (a namespace).
fn label(text: &str, flag: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{flag} {text:?}: give a DNS-1123 label (lowercase letters, digits and '-', at most \
             63)"
        ))
    }
}

/// Prints `dir` to stdout as a base64 tar.gz between marker lines (`run --archive-to-stdout`).
pub(crate) fn print_archive(dir: &Path, shard: Shard) -> std::io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    {
        let mut tar = tar::Builder::new(&mut gz);
        tar.append_dir_all(".", dir)?;
        tar.finish()?;
    }
    let bytes = gz.finish()?;
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = std::io::stdout().lock();
    let name = dir
        .file_name()
        .map_or("results".into(), |n| n.to_string_lossy());
    writeln!(out, "{ARCHIVE_BEGIN} {shard} {name}")?;
    for line in text.as_bytes().chunks(76) {
        out.write_all(line)?;
        out.write_all(b"\n")?;
    }
    writeln!(out, "{ARCHIVE_END}")?;
    out.flush()
}

/// The last result archive in a log: its shard and its bytes.
fn archive_in(log: &str) -> Option<Result<(Shard, Vec<u8>), String>> {
    let begin = log.rfind(&format!("{ARCHIVE_BEGIN} "))?;
    let rest = &log[begin..];
    let (first, body) = rest.split_once('\n')?;
    let shard = first.split_whitespace().nth(1)?;
    let Some(end) = body.find(ARCHIVE_END) else {
        return Some(Err(
            "its result archive is cut short (the log ends inside it)".into(),
        ));
    };
    let text: String = body[..end].split_whitespace().collect();
    Some(Shard::parse(shard, &|_| None).and_then(|s| {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|b| (s, b))
            .map_err(|e| format!("its result archive is not base64: {e}"))
    }))
}

/// The pods of the job (by its label), or why there are none.
fn job_pods(args: &KubeCollectArgs) -> Result<Vec<String>, String> {
    let selector = format!("msgbench/job={}", args.job);
    let listing = "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}";
    let pods = kubectl(args, &["get", "pods", "-l", &selector, "-o", listing])?;
    let pods: Vec<String> = pods
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if pods.is_empty() {
        return Err(format!(
            "no pod of job {} in namespace {}: check the name with `{} get jobs -n {}`",
            args.job, args.namespace, args.kubectl, args.namespace
        ));
    }
    Ok(pods)
}

/// Every pod's archive unpacked to OUT/shard-I: the shards collected, and what was wrong with
/// the others (no archive, a shard twice, another split, an archive that does not unpack).
fn collect_pods(args: &KubeCollectArgs, pods: &[String]) -> (Vec<(Shard, PathBuf)>, Vec<String>) {
    let mut problems = Vec::new();
    let mut collected: Vec<(Shard, PathBuf)> = Vec::new();
    for pod in pods {
        let pod = pod.as_str();
        let archive = match kubectl(args, &["logs", pod]) {
            Ok(log) => archive_in(&log),
            Err(e) => Some(Err(e)),
        };
        match archive {
            None => problems.push(format!(
                "pod {pod} has no result archive in its log (it failed or has not finished): \
                 `{} logs -n {} {pod}` shows why",
                args.kubectl, args.namespace
            )),
            Some(Err(e)) => problems.push(format!("pod {pod}: {e}")),
            Some(Ok((shard, _))) if collected.iter().any(|(s, _)| s.index == shard.index) => {
                problems.push(format!(
                    "pod {pod} brought shard {shard} again (a pod run twice?); its copy is not \
                     unpacked"
                ))
            }
            Some(Ok((shard, _)))
                if collected
                    .first()
                    .is_some_and(|(s, _)| s.count != shard.count) =>
            {
                problems.push(format!(
                    "pod {pod} brought shard {shard}, of another split than shard {}",
                    collected[0].0
                ))
            }
            Some(Ok((shard, bytes))) => {
                let dir = args.out.join(format!("shard-{}", shard.index));
                match unpack(&bytes, &dir) {
                    Ok(()) => collected.push((shard, dir)),
                    Err(e) => problems.push(format!(
                        "pod {pod}: cannot unpack into {}: {e}",
                        dir.display()
                    )),
                }
            }
        }
    }
    (collected, problems)
}

/// `msgbench kube collect`: every pod's archive, unpacked to OUT/shard-I. Every pod is read
/// before the verdict: a pod without an archive, or a shard no pod brought, is named.
fn collect(args: &KubeCollectArgs) -> ExitCode {
    if std::fs::read_dir(&args.out).is_ok_and(|mut d| d.next().is_some()) {
        return fail(
            EXIT_BAD_INPUT,
            format!(
                "--out {}: exists and is not empty; give a new directory (old shards there \
                 would be merged with these)",
                args.out.display()
            ),
        );
    }
    let pods = match job_pods(args) {
        Ok(p) => p,
        Err(e) => return fail(1, e),
    };
    let (mut collected, mut problems) = collect_pods(args, &pods);
    collected.sort_by_key(|(s, _)| s.index);
    for (_, dir) in &collected {
        println!("{}", dir.display());
    }
    if let Some((first, _)) = collected.first() {
        let missing: Vec<String> = (0..first.count)
            .filter(|i| !collected.iter().any(|(s, _)| s.index == *i))
            .map(|i| format!("{i}/{}", first.count))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("no pod brought shard {}", missing.join(", ")));
        }
    }
    if !problems.is_empty() {
        return fail(
            1,
            format!(
                "collected {} shard(s), but: {}",
                collected.len(),
                problems.join("; ")
            ),
        );
    }
    eprintln!(
        "msgbench: collected {} shards; merge them with: msgbench merge {} --out DIR",
        collected.len(),
        args.out.join("shard-*").display()
    );
    ExitCode::SUCCESS
}

/// Most entries one shard's archive may hold.
const MAX_ARCHIVE_ENTRIES: usize = 100_000;
/// Most bytes it may unpack to, per byte of the archive: a result directory compresses 3–10×
/// (JSON, decimal digits, `.hlog`s already deflated); a 1.4 MB log once unpacked to 1.1 GB.
const MAX_UNPACK_RATIO: u64 = 50;
/// ... and at least this many, whatever the archive's size.
const MIN_UNPACK_BYTES: u64 = 64 << 20;

/// Unpacks a tar.gz from a pod's log (untrusted) into `dir`: regular files only (their
/// folders are made for them), at most [`MAX_ARCHIVE_ENTRIES`] entries, and at most
/// `MAX_UNPACK_RATIO` × its size in bytes (at least [`MIN_UNPACK_BYTES`]) — counted on each
/// entry's size before it is written (a PAX size record included), and on everything the
/// decompressor yields (extension headers too); entries that would land outside `dir` are
/// refused by `tar`. On a refusal `dir` is removed: nothing half-unpacked.
fn unpack(bytes: &[u8], dir: &PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let unpacked = unpack_bounded(bytes, dir);
    if unpacked.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    unpacked
}

fn unpack_bounded(bytes: &[u8], dir: &Path) -> std::io::Result<()> {
    use std::io::Read;
    let bound = (bytes.len() as u64)
        .saturating_mul(MAX_UNPACK_RATIO)
        .max(MIN_UNPACK_BYTES);
    let too_big = |at: &str| {
        refused(format!(
            "it unpacks to more than {MAX_UNPACK_RATIO} × its {} bytes ({at}): not a result \
             archive msgbench wrote",
            bytes.len()
        ))
    };
    // The stream itself is cut past the bound (plus room for the tar's own headers):
    // extension headers that tar reads into memory cannot grow past it either.
    let stream = flate2::read::GzDecoder::new(bytes).take(bound.saturating_add(1 << 20));
    let mut archive = tar::Archive::new(stream);
    let mut budget = bound;
    let mut failed = None;
    for (k, entry) in archive.entries()?.enumerate() {
        if let Err(e) = entry.and_then(|e| unpack_entry(e, k, dir, &mut budget, &too_big)) {
            failed = Some(e);
            break;
        }
    }
    // A stream cut at the bound can end on a block boundary, which tar reads as the archive's
    // end: what reached the cut is refused, whatever tar made of it.
    if archive.into_inner().limit() == 0 {
        return Err(too_big("its stream runs past the bound"));
    }
    failed.map_or(Ok(()), Err)
}

/// An archive refused, and why.
fn refused(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Unpacks entry number `k` into `dir` if it is a regular file within the byte `budget` (a
/// folder is made for the files inside it, with the default mode).
fn unpack_entry<R: std::io::Read>(
    mut entry: tar::Entry<'_, R>,
    k: usize,
    dir: &Path,
    budget: &mut u64,
    too_big: &dyn Fn(&str) -> std::io::Error,
) -> std::io::Result<()> {
    let name = entry.path()?.display().to_string();
    let kind = entry.header().entry_type();
    if k >= MAX_ARCHIVE_ENTRIES {
        return Err(refused(format!("more than {MAX_ARCHIVE_ENTRIES} entries")));
    }
    if kind.is_dir() {
        return Ok(());
    }
    if !kind.is_file() {
        return Err(refused(format!(
            "{name} is not a file or a folder ({kind:?})"
        )));
    }
    let size = entry.size();
    *budget =
        (budget.checked_sub(size)).ok_or_else(|| too_big(&format!("at {name}, {size} bytes")))?;
    if !entry.unpack_in(dir)? {
        return Err(refused(format!("{name} would land outside the folder")));
    }
    Ok(())
}

/// Runs kubectl with the namespace; its stdout, or what went wrong.
fn kubectl(args: &KubeCollectArgs, words: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(&args.kubectl)
        .args(["-n", &args.namespace])
        .args(words)
        .output()
        .map_err(|e| {
            format!(
                "cannot run {}: {e}; install kubectl or pass --kubectl",
                args.kubectl
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "`{} -n {} {}` failed: {}",
            args.kubectl,
            args.namespace,
            words.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if out.stdout.len() > MAX_LOG_BYTES {
        return Err(format!("{} printed more than 1 GiB", args.kubectl));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_takes_each_named_value_once_and_leaves_other_braces() {
        let fields = [
            ("job", "j-1".to_string()),
            ("scenario", "a = { b = \"{job}\" }".to_string()),
        ];
        assert_eq!(
            fill("name: {job}\n{scenario}\nemptyDir: {}\n{unknown}", &fields),
            "name: j-1\na = { b = \"{job}\" }\nemptyDir: {}\n{unknown}"
        );
    }

    #[test]
    fn start_times_are_read_in_three_spellings_and_the_past_is_refused() {
        let now = 1_764_100_800_000; // 2025-11-25T20:00:00Z
        let parse_start_at = |t: &str, now| parse_start_at(t, now, "e.g. +30s");
        assert_eq!(parse_start_at("+30s", now), Ok(now + 30_000));
        assert_eq!(parse_start_at("1764100860000", now), Ok(now + 60_000));
        assert_eq!(
            parse_start_at("2025-11-25T20:02:00Z", now),
            Ok(now + 120_000)
        );
        let e = parse_start_at("2025-11-25T19:59:00Z", now).unwrap_err();
        assert!(e.contains("60.0 s in the past"), "{e}");
        let e = parse_start_at("2020-01-01T00:00:00Z", now).unwrap_err();
        assert!(e.contains("2155 days in the past"), "{e}");
        let e = parse_start_at("2030-01-01T00:00:00+02:00", now).unwrap_err();
        assert!(e.contains("in UTC with Z"), "{e}");
        assert!(parse_start_at("tomorrow", now)
            .unwrap_err()
            .contains("RFC 3339"));
        assert!(parse_start_at("+soon", now).is_err());
    }

    #[test]
    fn an_archive_is_found_in_a_log_and_a_cut_one_is_said() {
        let log = "noise\nmsgbench-archive-begin 2/4 x\naGVsbG8=\nmsgbench-archive-end\n";
        let (shard, bytes) = archive_in(log).unwrap().unwrap();
        assert_eq!(
            (shard.index, shard.count, &bytes[..]),
            (2, 4, &b"hello"[..])
        );
        assert!(archive_in("msgbench-archive-begin 2/4 x\naGVs")
            .unwrap()
            .is_err());
        assert!(archive_in("nothing here").is_none());
    }

    #[test]
    fn job_names_are_dns_labels_new_for_each_start() {
        let at = 1_764_100_800_000; // 2025-11-25T20:00:00Z
        assert_eq!(
            job_name("RPC capacity_2", at),
            "msgbench-rpc-capacity-2-251125200000"
        );
        assert!(job_name(&"x".repeat(200), at).len() <= 50);
    }

    #[test]
    fn loopback_servers_are_told_apart() {
        for a in [
            "127.0.0.1:7000",
            "localhost:6379",
            "ws://[::1]:9000/ticks",
            "http://127.0.0.2",
        ] {
            assert!(is_loopback(a), "{a}");
        }
        for a in [
            "10.0.0.5:7000",
            "rpc.bench.svc:7000",
            "ws://feed.example/ticks",
        ] {
            assert!(!is_loopback(a), "{a}");
        }
    }

    #[test]
    fn memory_quantities_read_as_kubernetes_does() {
        for ok in ["1Gi", "1.5Gi", "512Mi", "1e9", "2G", "100000000"] {
            assert!(quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["0", "0Mi", "100", "lots", "1Gb", ""] {
            assert!(quantity(bad).is_err(), "{bad}");
        }
    }
}
