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
    }
    if let Some(text) = start_at {
        let now = msgbench_engine::environment::unix_ms();
        let at = parse_start_at(text, now)?;
        planned_starts(experiment, at)?;
        experiment.start_at_unix_ms = Some(at);
    }
    Ok(())
}

/// `--start-at`: RFC 3339 (`2026-11-25T20:00:00Z`), Unix ms, or `+DURATION` from `now_ms`;
/// a time already past is refused (the shards could not all keep it).
pub(crate) fn parse_start_at(text: &str, now_ms: u64) -> Result<u64, String> {
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
        let when = humantime::parse_rfc3339_weak(t)
            .map_err(|e| format!("--start-at {text}: {e}; {usage}"))?;
        when.duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("--start-at {text}: before 1970; {usage}"))?
            .as_millis() as u64
    };
    if at < now_ms {
        return Err(format!(
            "--start-at {text}: that is {} in the past (now is {}); give a time every shard can \
             still keep, e.g. +30s, or regenerate the manifest",
            msgbench_model::duration::format(std::time::Duration::from_millis(now_ms - at)),
            rfc3339(now_ms)
        ));
    }
    Ok(at)
}

/// Unix ms as RFC 3339 UTC, to the second.
fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// `msgbench merge`.
pub(crate) fn merge(args: MergeArgs) -> ExitCode {
    let merged = match msgbench_engine::merge::merge(&args.dirs, &args.out) {
        Ok(m) => m,
        Err(e @ msgbench_engine::merge::MergeError::Refused(_)) => return fail(EXIT_BAD_INPUT, e),
        Err(e) => return fail(1, e),
    };
    if let Err(e) = crate::commands::write_report(&merged.dir, None) {
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

/// A DNS-1123 label from an experiment's name: the Job's name.
fn job_name(experiment: &str) -> String {
    let mut name: String = format!("msgbench-{experiment}")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    // Indexed Job pods are named JOB-INDEX-RANDOM: keep room within 63 characters.
    name.truncate(50);
    name.trim_end_matches('-').to_string()
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
    let mut experiment = crate::commands::load(&args.scenario)?;
    // Every shard must have work: the last has the fewest connections.
    let last = Shard::parse(&format!("{}/{shards}", shards.saturating_sub(1)), &|_| None)
        .map_err(|e| e.replace("--shard", "--shards"))?;
    experiment.set_shard(last)?;
    let now = msgbench_engine::environment::unix_ms();
    let start = parse_start_at(&args.start_at, now)?;
    planned_starts(&experiment, start)?;
    quantity(&args.memory)?;
    if args.cpus == 0 {
        return Err("--cpus 0: give each pod at least 1 CPU".into());
    }
    let ns = label(&args.namespace, "--namespace")?;
    let job = job_name(&experiment.name);
    let scenario: String = experiment
        .resolved_toml
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    Ok(format!(
        r#"# msgbench kube: experiment {experiment:?} as {shards} shards, starting {when}.
# Apply before then (kubectl apply -f this-file). When the Job has completed:
#   msgbench kube collect {job} --namespace {ns} --out shards/
#   msgbench merge shards/* --out results/{job}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {job}-scenario
  namespace: {ns}
  labels:
    app.kubernetes.io/name: msgbench
    msgbench/job: {job}
data:
  scenario.toml: |
{scenario}---
apiVersion: batch/v1
kind: Job
metadata:
  name: {job}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: msgbench
    msgbench/job: {job}
spec:
  completionMode: Indexed
  completions: {shards}
  parallelism: {shards}
  # A shard that fails is not retried: a late rerun would miss the agreed start.
  backoffLimit: 0
  # Keep the finished pods (and their logs, which carry the results) for a day.
  ttlSecondsAfterFinished: 86400
  template:
    metadata:
      labels:
        app.kubernetes.io/name: msgbench
        msgbench/job: {job}
    spec:
      restartPolicy: Never
      affinity:
        podAntiAffinity:
          # One shard per node where the cluster has the nodes: shards that share a node
          # share its CPUs and network.
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    msgbench/job: {job}
      containers:
        - name: msgbench
          image: {image}
          command: ["msgbench"]
          args: ["run", "/scenario/scenario.toml", "--shard", "k8s/{shards}", "--start-at", "{start}", "--out", "/results", "--quiet", "--archive-to-stdout"]
          # Requests equal to limits: Guaranteed QoS, so the static CPU manager gives the pod
          # whole CPUs and client.pin means something.
          resources:
            requests:
              cpu: "{cpus}"
              memory: {memory}
            limits:
              cpu: "{cpus}"
              memory: {memory}
          volumeMounts:
            - name: scenario
              mountPath: /scenario
              readOnly: true
            - name: results
              mountPath: /results
      volumes:
        - name: scenario
          configMap:
            name: {job}-scenario
        - name: results
          emptyDir: {{}}
"#,
        experiment = experiment.name,
        when = rfc3339(start),
        cpus = args.cpus,
        memory = args.memory,
    ))
}

/// A Kubernetes resource quantity such as `1Gi` or `512Mi`.
fn quantity(text: &str) -> Result<(), String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &text[digits.len()..];
    let known = ["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T"];
    if digits.is_empty() || digits.parse::<u64>().is_err() || !known.contains(&suffix) {
        return Err(format!(
            "--memory {text:?}: give a Kubernetes quantity such as 512Mi or 2Gi"
        ));
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

/// `msgbench kube collect`: every pod's archive, unpacked to OUT/shard-I.
fn collect(args: &KubeCollectArgs) -> ExitCode {
    let pods = match kubectl(
        args,
        &[
            "get",
            "pods",
            "-l",
            &format!("msgbench/job={}", args.job),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
        ],
    ) {
        Ok(out) => out,
        Err(e) => return fail(1, e),
    };
    let pods: Vec<&str> = pods
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if pods.is_empty() {
        return fail(
            1,
            format!(
                "no pod of job {} in namespace {}: check the name with `kubectl get jobs -n {}`",
                args.job, args.namespace, args.namespace
            ),
        );
    }
    let mut collected = Vec::new();
    for pod in pods {
        let log = match kubectl(args, &["logs", pod]) {
            Ok(l) => l,
            Err(e) => return fail(1, e),
        };
        match archive_in(&log) {
            None => {
                return fail(
                    1,
                    format!(
                        "pod {pod} has no result archive in its log (it failed or has not \
                         finished): `kubectl logs -n {} {pod}` shows why",
                        args.namespace
                    ),
                )
            }
            Some(Err(e)) => return fail(1, format!("pod {pod}: {e}")),
            Some(Ok((shard, bytes))) => {
                let dir = args.out.join(format!("shard-{}", shard.index));
                if let Err(e) = unpack(&bytes, &dir) {
                    return fail(
                        1,
                        format!("pod {pod}: cannot unpack into {}: {e}", dir.display()),
                    );
                }
                collected.push(dir);
            }
        }
    }
    collected.sort();
    for dir in &collected {
        println!("{}", dir.display());
    }
    eprintln!(
        "msgbench: collected {} shards; merge them with: msgbench merge {}/shard-* --out DIR",
        collected.len(),
        args.out.display()
    );
    ExitCode::SUCCESS
}

/// Unpacks a tar.gz into `dir` (entries that would land outside it are refused by `tar`).
fn unpack(bytes: &[u8], dir: &PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    archive.unpack(dir)
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
    fn start_times_are_read_in_three_spellings_and_the_past_is_refused() {
        let now = 1_764_100_800_000; // 2025-11-25T20:00:00Z
        assert_eq!(parse_start_at("+30s", now), Ok(now + 30_000));
        assert_eq!(parse_start_at("1764100860000", now), Ok(now + 60_000));
        assert_eq!(
            parse_start_at("2025-11-25T20:02:00Z", now),
            Ok(now + 120_000)
        );
        let e = parse_start_at("2025-11-25T19:59:00Z", now).unwrap_err();
        assert!(e.contains("60s in the past"), "{e}");
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
    fn job_names_are_dns_labels() {
        assert_eq!(job_name("RPC capacity_2"), "msgbench-rpc-capacity-2");
        assert!(job_name(&"x".repeat(200)).len() <= 50);
    }
}
