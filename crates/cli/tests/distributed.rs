//! A run past one machine, simulated on loopback: four `run --shard I/4` processes with one
//! `--start-at` against one `serve rpc`, their results collected from "pod logs" by
//! `kube collect` (a kubectl double) and merged; the merge checked against the shards' raw
//! latencies and counters, and against one process offering the whole schedule. Then every
//! bad input of `--shard`, `--start-at`, `merge` and `kube`.
mod common;
use common::{msgbench, rpc_address, serve, stderr, ws_address};
use msgbench_model::result::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The one run of a result directory.
fn run_of(dir: &Path) -> RunResult {
    let json = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// The result directory `run --out OUT` wrote.
fn result_dir(out: &Path) -> PathBuf {
    std::fs::canonicalize(out.join("sharded").join("latest")).unwrap()
}

/// Every raw latency of a directory's run, sorted.
fn raw_latencies(dir: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join("runs/000.latencies.csv")).unwrap();
    let mut v: Vec<u64> = text.lines().skip(1).map(|l| l.parse().unwrap()).collect();
    v.sort_unstable();
    v
}

/// Starts `serve rpc` on a free port; its process and address.
fn serve_rpc() -> (std::process::Child, String) {
    let (server, _, line) = serve(&[
        "rpc",
        "--listen",
        "127.0.0.1:0",
        "--threads",
        "2",
        "--for",
        "60s",
    ]);
    assert!(line.contains("listening on 127.0.0.1:"), "{line}");
    (server, rpc_address(&line))
}

/// A kubectl double at `path`: `get pods` lists `pods` (named `JOB-I-x`), `logs JOB-I-x`
/// prints `dir/pod-I.log` (or a line without an archive when there is none).
fn fake_kubectl(path: &Path, pods: &str, dir: &Path) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\n# -n NS get pods ... | -n NS logs POD\ncase \"$3\" in\n  get) printf '{pods}' ;;\n  logs) cat \"{}/pod-$(echo \"$4\" | cut -d- -f2).log\" 2>/dev/null || echo 'OOMKilled' ;;\nesac\n",
            dir.display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("755").arg(path).status().unwrap();
}

/// `msgbench kube collect msgbench-sharded` through the kubectl `kubectl` into `out`.
fn collect(kubectl: &Path, out: &Path) -> Output {
    msgbench(&[
        "kube",
        "collect",
        "msgbench-sharded",
        "--kubectl",
        kubectl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
}

const SCENARIO: &str = r#"
name = "sharded"
system = "rpc"
[run]
duration = "2s"
warmup = "200ms"
emit_latencies = 1000000
[pacing]
mode = "rate"
per_sec = 6000
arrivals = "poisson"
[client]
threads = 2
connections = 4
window = 64
[rpc.ops.call]
service = "20us"
"#;

#[test]
fn four_shards_merge_exactly_into_what_one_process_offers() {
    let (mut server, address) = serve_rpc();
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("sharded.toml");
    std::fs::write(
        &scenario,
        format!("{SCENARIO}[rpc]\naddress = \"{address}\"\n"),
    )
    .unwrap();
    let scenario = scenario.to_str().unwrap();

    // Four shards, one agreed start, each printing its result archive as a pod would.
    let start = (now_ms() + 3_000).to_string();
    let shards: Vec<_> = (0..4)
        .map(|i| {
            let out = tmp.path().join(format!("out{i}"));
            let child = Command::new(env!("CARGO_BIN_EXE_msgbench"))
                .args(["run", scenario, "--shard", &format!("{i}/4")])
                .args(["--start-at", &start, "--quiet", "--archive-to-stdout"])
                .arg("--out")
                .arg(&out)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let mut dirs = Vec::new();
    for (i, (out, child)) in shards.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "shard {i}: {}", stderr(&o));
        std::fs::write(tmp.path().join(format!("pod-{i}.log")), &o.stdout).unwrap();
        dirs.push(result_dir(&out));
    }
    let parts: Vec<RunResult> = dirs.iter().map(|d| run_of(d)).collect();
    for (i, r) in parts.iter().enumerate() {
        let s = r.shard.as_ref().expect("a shard says which it is");
        assert_eq!(
            (s.index, s.count, s.connections, s.total_connections),
            (i as u32, 4, 2, 8)
        );
        assert_eq!(s.planned_start_unix_ms, Some(start.parse().unwrap()));
        assert!(
            s.start_late_ms < 1000,
            "shard {i} started {} ms late",
            s.start_late_ms
        );
        // (Timing warnings may come on a loaded 2-core host; a stopped run may not.)
        assert!(
            !r.warnings.iter().any(|w| w.is_stopped_early()),
            "shard {i}: {:?}",
            r.warnings
        );
    }

    // `kube collect` reads the archives from the pods' logs (a kubectl double prints them).
    let kubectl = tmp.path().join("kubectl");
    let all = "sharded-0-a\\nsharded-1-b\\nsharded-2-c\\nsharded-3-d\\n";
    fake_kubectl(&kubectl, all, tmp.path());
    let collected = tmp.path().join("collected");
    let o = collect(&kubectl, &collected);
    assert!(o.status.success(), "{}", stderr(&o));
    // A Job gone wrong: a pod without results, one run twice, shard 3 brought by none.
    let broken = tmp.path().join("kubectl-broken");
    let pods = "sharded-0-a\\nsharded-1-b\\nsharded-1-c\\nsharded-2-d\\nsharded-9-e\\n";
    fake_kubectl(&broken, pods, tmp.path());
    let again = tmp.path().join("again");
    let o = collect(&broken, &again);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    for says in [
        "collected 3 shard(s)",
        "pod sharded-1-c brought shard 1/4 again",
        "pod sharded-9-e has no result archive",
        "no pod brought shard 3/4",
    ] {
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
    }
    let o = collect(&kubectl, &again);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a non-empty --out: {}",
        stderr(&o)
    );
    let collected_dirs: Vec<String> = (0..4)
        .map(|i| collected.join(format!("shard-{i}")).display().to_string())
        .collect();

    // The merge: counters summed, every percentile the raw latencies' own.
    let merged_dir = tmp.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(collected_dirs.iter().map(String::as_str));
    args.extend(["--out", merged_dir.to_str().unwrap()]);
    let o = msgbench(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = run_of(&merged_dir);
    let mut sum = msgbench_model::result::Counters::default();
    for r in &parts {
        sum += r.counters;
    }
    assert_eq!(merged.counters, sum);
    merged.counters.check().unwrap();
    // Poisson arrivals at 6000/s for 2 s: about 12 000, each connection's stream its own.
    assert!(
        (11_000..13_000).contains(&merged.counters.attempted),
        "{:?}",
        merged.counters
    );
    assert_eq!(
        merged.counters.delivered, merged.counters.attempted,
        "{:?}",
        merged.counters
    );
    assert_eq!(merged.shards.len(), 4);
    let raw = raw_latencies(&merged_dir);
    assert_eq!(raw.len() as u64, merged.counters.delivered);
    let mut from_shards: Vec<u64> = dirs.iter().flat_map(|d| raw_latencies(d)).collect();
    from_shards.sort_unstable();
    assert_eq!(raw, from_shards, "the merged raw latencies are the shards'");
    let l = &merged.latency;
    for (q, got) in [
        (0.5, l.p50_ns),
        (0.9, l.p90_ns),
        (0.99, l.p99_ns),
        (0.999, l.p999_ns),
        (1.0, l.max_ns),
    ] {
        // Nearest rank, as HdrHistogram counts; its buckets are exact to 1/2048 of the value.
        let rank = ((q * raw.len() as f64).ceil() as usize).clamp(1, raw.len());
        let exact = raw[rank - 1];
        let error = got.abs_diff(exact) as f64 / exact as f64;
        assert!(error <= 1.0 / 1024.0, "p{q}: merged {got} vs raw {exact}");
    }
    let secs: u64 = merged.intervals.iter().map(|i| i.delivered).sum();
    assert_eq!(secs, merged.counters.delivered, "{:?}", merged.intervals);
    let report = std::fs::read_to_string(merged_dir.join("report.md")).unwrap();
    assert!(report.contains("## Shards"), "{report}");
    assert!(report.matches("| 000 | ").count() >= 4, "{report}");

    // One process offering the whole schedule: the same attempts, the same rate.
    let whole = tmp.path().join("whole");
    let o = msgbench(&["run", scenario, "--quiet", "--out", whole.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let one = run_of(&result_dir(&whole));
    assert_eq!(
        one.counters.attempted, merged.counters.attempted,
        "the shards' Poisson streams are the whole run's, to the message"
    );
    let ratio = merged.delivered_per_sec() / one.delivered_per_sec();
    assert!(
        (0.95..1.05).contains(&ratio),
        "sharded/whole delivered/s {ratio}"
    );
    let o = msgbench(&[
        "compare",
        result_dir(&whole).to_str().unwrap(),
        merged_dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    refusals(tmp.path(), &dirs, scenario);
    let _ = server.kill();
    let _ = server.wait();
}

/// Each bad input of merge, --shard and --start-at: exit 2 and one message naming the fix.
fn refusals(tmp: &Path, dirs: &[PathBuf], scenario: &str) {
    let d: Vec<&str> = dirs.iter().map(|p| p.to_str().unwrap()).collect();
    let out = |name: &str| tmp.join(name).display().to_string();
    let foreign = tmp.join("foreign");
    Command::new("cp")
        .arg("-r")
        .arg(&dirs[3])
        .arg(&foreign)
        .status()
        .unwrap();
    let toml = std::fs::read_to_string(foreign.join("experiment.toml")).unwrap();
    std::fs::write(
        foreign.join("experiment.toml"),
        toml.replace("6000", "7000"),
    )
    .unwrap();
    let foreign = foreign.display().to_string();
    // The same shard from another invocation: planned for another start.
    let later = tampered(tmp, &dirs[3], "later", &|r| {
        r.shard.as_mut().unwrap().planned_start_unix_ms = Some(r.started_unix_ms + 18_000)
    });
    let later = later.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![d[0].into(), d[1].into(), d[2].into()],
            "shard 3/4 missing",
        ),
        (
            vec![
                d[0].into(),
                d[1].into(),
                d[1].into(),
                d[2].into(),
                d[3].into(),
            ],
            "are both shard 1/4",
        ),
        (
            vec![d[0].into(), d[1].into(), d[2].into(), later],
            "two --start-at",
        ),
        (
            vec![d[0].into(), d[1].into(), d[2].into(), foreign],
            "another experiment",
        ),
        (vec![tmp.display().to_string()], "no experiment.toml"),
    ];
    for (i, (dirs, says)) in cases.into_iter().enumerate() {
        let mut args = vec!["merge".to_string()];
        args.extend(dirs);
        args.extend(["--out".into(), out(&format!("refused{i}"))]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = msgbench(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!tmp.join(format!("refused{i}")).exists(), "nothing written");
    }
    hostile_run_ids(tmp, dirs);
    hostile_figures(tmp, dirs);
    for (args, says) in [
        (vec!["--shard", "4/4"], "does not exist"),
        (vec!["--shard", "0/0"], "0 shards"),
        (vec!["--shard", "0/9"], "at most 8 shards"),
        (vec!["--start-at", "2020-01-01T00:00:00Z"], "in the past"),
        (vec!["--start-at", "soon"], "RFC 3339"),
    ] {
        let never = out("never");
        let mut all = vec!["run", scenario, "--out", &never];
        all.extend(&args);
        let o = msgbench(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let o = msgbench(&["run", "--shard", "0/2", "--out", &out("never")]);
    assert!(stderr(&o).contains("cannot be split"), "{}", stderr(&o));
}

/// Every file and folder under `dir`, sorted (what a refused merge must leave as it was).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                todo.push(p.clone());
            }
            all.push(p);
        }
    }
    all.sort();
    all
}

/// A copy of shard directory `shard` at `tmp/name` (replacing one there), its run edited by
/// `edit`.
fn tampered(tmp: &Path, shard: &Path, name: &str, edit: &dyn Fn(&mut RunResult)) -> PathBuf {
    let copy = tmp.join(name);
    let _ = std::fs::remove_dir_all(&copy);
    Command::new("cp")
        .arg("-r")
        .arg(shard)
        .arg(&copy)
        .status()
        .unwrap();
    let json = copy.join("runs/000.json");
    let mut r: RunResult = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    edit(&mut r);
    std::fs::write(&json, serde_json::to_string(&r).unwrap()).unwrap();
    copy
}

/// `msgbench merge` of shards 0-2 and `hostile` (in place of shard 3) into `out`.
fn merge_with(dirs: &[PathBuf], hostile: &Path, out: &Path) -> Output {
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(dirs[..3].iter().map(|d| d.display().to_string()));
    args.push(hostile.display().to_string());
    args.extend(["--out".into(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    msgbench(&args)
}

/// A shard's `run_id` is a file name on the merging host: one that would leave `--out`
/// (`../x`, an absolute path, `a/../../x`) is refused and nothing is written anywhere. (A
/// merge once wrote `<out>/runs/../../../escaped.json`.)
fn hostile_run_ids(tmp: &Path, dirs: &[PathBuf]) {
    let outside = tmp.join("abs");
    for (k, id) in [
        "../x".to_string(),
        format!("{}/x", outside.display()),
        "a/../../x".to_string(),
        "../../../../../../../../../../../../../../tmp/escaped".to_string(),
        "..".to_string(),
        "000".to_string() + &"-".repeat(300),
    ]
    .into_iter()
    .enumerate()
    {
        let hostile = tampered(tmp, &dirs[3], "hostile", &|r| r.run_id = id.clone());
        // The out folder deep inside tmp, so that an escape would land in the tree listed.
        let out = tmp.join(format!("deep{k}/a/b/merged"));
        let before = tree(tmp);
        let o = merge_with(dirs, &hostile, &out);
        assert_eq!(o.status.code(), Some(2), "{id}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("its run_id") && stderr(&o).contains("runs/000.json"),
            "{id}: {}",
            stderr(&o)
        );
        assert_eq!(tree(tmp), before, "{id}: a refused merge wrote something");
        assert!(!Path::new("/tmp/escaped.json").exists());
        std::fs::remove_dir_all(&hostile).unwrap();
    }
}

/// Shard 3 with its run edited by `edit`, or its `.hlog` cut in half: merging it with shards
/// 0-2 is refused (exit 2) saying `says`, and writes nothing.
fn refused_when_tampered(
    tmp: &Path,
    dirs: &[PathBuf],
    edit: &dyn Fn(&mut RunResult),
    cut: bool,
    says: &str,
) {
    let hostile = tampered(tmp, &dirs[3], "tampered", edit);
    if cut {
        let hlog = hostile.join("runs/000.hlog");
        let bytes = std::fs::read(&hlog).unwrap();
        std::fs::write(&hlog, &bytes[..bytes.len() / 2]).unwrap();
    }
    let out = tmp.join("tampered-merge");
    let o = merge_with(dirs, &hostile, &out);
    assert_eq!(o.status.code(), Some(2), "{says}: {}", stderr(&o));
    assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
    assert!(!out.exists(), "{says}: nothing written");
}

/// Figures a merge would have summed wrongly: counts near 2^63 (two wrapped to 0), a
/// histogram that does not hold the delivered count (a tampered bucket gave p99 = 0), a window
/// of 1e308 s (written back as null), percentiles out of order, a truncated `.hlog`.
fn hostile_figures(tmp: &Path, dirs: &[PathBuf]) {
    let huge = |r: &mut RunResult| {
        let c = &mut r.counters;
        (c.attempted, c.sent, c.delivered) = (1 << 63, 1 << 63, 1 << 63);
        (c.skipped, c.dropped, c.failed, c.in_flight_end) = (0, 0, 0, 0);
        c.skipped_by = Default::default();
    };
    refused_when_tampered(tmp, dirs, &huge, false, "more than any run");
    let other = run_of(&dirs[0]).histograms.latency;
    let bucket = move |r: &mut RunResult| r.histograms.latency = other.clone();
    refused_when_tampered(tmp, dirs, &bucket, false, "latency histogram holds");
    let long = |r: &mut RunResult| r.duration_s = 1e308;
    refused_when_tampered(tmp, dirs, &long, false, "is not a measured window");
    let order = |r: &mut RunResult| r.latency.p50_ns = r.latency.p90_ns + 1;
    refused_when_tampered(tmp, dirs, &order, false, "not in order");
    refused_when_tampered(tmp, dirs, &|_| {}, true, "truncated or malformed");
    let settings = |r: &mut RunResult| r.config = format!("{} window=999", r.config);
    refused_when_tampered(
        tmp,
        dirs,
        &settings,
        false,
        "were measured with other settings",
    );
}

/// A result archive as a pod's log prints it, holding one entry: `kind` with a declared
/// `size` (no data: it must be refused from its header, before anything is written).
fn hostile_archive_log(kind: tar::EntryType, size: u64) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut h = tar::Header::new_gnu();
    h.set_path("runs/000.latencies.csv").unwrap();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    if kind == tar::EntryType::Symlink {
        h.set_link_name("/etc/passwd").unwrap();
    }
    h.set_cksum();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(h.as_bytes()).unwrap();
    gz.write_all(&[0; 1024]).unwrap();
    let text = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
    format!("msgbench-archive-begin 0/1 x\n{text}\nmsgbench-archive-end\n")
}

/// A pod's log is untrusted: an archive that would unpack to 3 GiB (a 1.4 MB log once wrote
/// 1.1 GB), or that holds a link, is refused and leaves no folder behind.
#[test]
fn kube_collect_bounds_what_an_archive_unpacks_to() {
    let tmp = tempfile::tempdir().unwrap();
    let kubectl = tmp.path().join("kubectl");
    fake_kubectl(&kubectl, "sharded-0-a\\n", tmp.path());
    for (k, (kind, size, says)) in [
        (tar::EntryType::Regular, 3 << 30, "unpacks to more than 50"),
        (tar::EntryType::Symlink, 0, "is not a file or a folder"),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(
            tmp.path().join("pod-0.log"),
            hostile_archive_log(kind, size),
        )
        .unwrap();
        let out = tmp.path().join(format!("collected{k}"));
        let o = collect(&kubectl, &out);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
        assert!(!out.join("shard-0").exists(), "nothing half-unpacked");
    }
}

#[test]
fn kube_prints_an_indexed_job_and_refuses_what_it_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(
        &scenario,
        format!("{SCENARIO}[rpc]\naddress = \"10.0.0.5:7000\"\n"),
    )
    .unwrap();
    let s = scenario.to_str().unwrap();
    let o = msgbench(&[
        "kube",
        s,
        "--shards",
        "4",
        "--image",
        "reg.example/msgbench:1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let yaml = String::from_utf8(o.stdout).unwrap();
    let o = msgbench(&[
        "kube",
        s,
        "--shards",
        "2",
        "--image",
        "x",
        "--set",
        "rpc.address=\"127.0.0.1:7000\"",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("loopback"), "{}", stderr(&o));
    for needle in [
        "kind: ConfigMap",
        "completionMode: Indexed",
        "completions: 4",
        "parallelism: 4",
        "\"k8s/4\"",
        "podAntiAffinity",
        "address = \"10.0.0.5:7000\"",
        "image: \"reg.example/msgbench:1\"",
    ] {
        assert!(yaml.contains(needle), "{needle} not in\n{yaml}");
    }
    for (args, says) in [
        (vec!["--shards", "0", "--image", "x"], "give 1 to"),
        (
            vec!["--shards", "9", "--image", "x"],
            "--shards 9: the run has 8 connections",
        ),
        (
            vec!["--shards", "2", "--image", "x", "--start-at", "1000"],
            "in the past",
        ),
        (vec!["--shards", "2", "--image", "a b"], "image reference"),
        (
            vec!["--shards", "2", "--image", "x", "--memory", "lots"],
            "quantity",
        ),
    ] {
        let mut all = vec!["kube", s];
        all.extend(&args);
        let o = msgbench(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_tick_streams_subscribers_split_over_shards_and_merge_back() {
    let (mut server, _, line) = serve(&[
        "ticks",
        "--listen",
        "127.0.0.1:0",
        "--rate",
        "2000",
        "--for",
        "30s",
    ]);
    let address = ws_address(&line);
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("ticks.toml");
    std::fs::write(
        &scenario,
        format!(
            "name = \"sharded\"\nsystem = \"ticks\"\n[run]\nduration = \"1s\"\nwarmup = \"100ms\"\n\
             [ticks]\naddress = \"{address}\"\n[ticks.clients.fast]\nconnections = 3\n\
             [ticks.clients.slow]\nconnections = 2\ncost = \"20us\"\n"
        ),
    )
    .unwrap();
    let dirs = run_shards(&scenario, 2, tmp.path());
    let parts: Vec<RunResult> = dirs.iter().map(|d| run_of(d)).collect();
    let names =
        |r: &RunResult| -> Vec<String> { r.streams.iter().map(|s| s.name.clone()).collect() };
    // Clients 0..5 over the groups in order (fast 0-2, slow 0-1): even ones to shard 0.
    assert_eq!(names(&parts[0]), ["fast-0", "fast-2", "slow-1"]);
    assert_eq!(names(&parts[1]), ["fast-1", "slow-0"]);
    let merged = merged_run(&dirs, &tmp.path().join("merged"));
    assert_eq!(merged.streams.len(), 5);
    assert_eq!(merged.counters, {
        let mut c = parts[0].counters;
        c += parts[1].counters;
        c
    });
    assert!(
        merged.counters.delivered > 5 * 1500,
        "{:?}",
        merged.counters
    );
    let _ = server.kill();
    let _ = server.wait();
}

/// nats-server on a free loopback port: its process and port.
fn nats_server() -> (std::process::Child, u16) {
    let program = ["/usr/sbin/nats-server", "nats-server"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("nats-server");
    common::ports::start_listening(program, std::time::Duration::from_secs(20), |port| {
        Command::new(program)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server (run `bash scripts/setup.sh`)")
    })
}

/// `scenario` run as `n` shards with one `--start-at`, merged; and run whole in one process.
/// (the shards' results, the merged run, the whole run).
fn sharded_and_whole(
    scenario: &Path,
    n: u32,
    tmp: &Path,
) -> (Vec<RunResult>, RunResult, RunResult) {
    let dirs = run_shards(scenario, n, tmp);
    let merged = merged_run(&dirs, &tmp.join("merged"));
    let whole_out = tmp.join("whole");
    let o = msgbench(&[
        "run",
        scenario.to_str().unwrap(),
        "--quiet",
        "--out",
        whole_out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let parts = dirs.iter().map(|d| run_of(d)).collect();
    (parts, merged, run_of(&result_dir(&whole_out)))
}

/// `scenario` run as `n` shard processes with one `--start-at` (3 s ahead), each into
/// `tmp/out<i>`: their result directories.
fn run_shards(scenario: &Path, n: u32, tmp: &Path) -> Vec<PathBuf> {
    let start = (now_ms() + 3_000).to_string();
    let shards: Vec<_> = (0..n)
        .map(|i| {
            let out = tmp.join(format!("out{i}"));
            let child = Command::new(env!("CARGO_BIN_EXE_msgbench"))
                .arg("run")
                .arg(scenario)
                .args([
                    "--shard",
                    &format!("{i}/{n}"),
                    "--start-at",
                    &start,
                    "--quiet",
                ])
                .arg("--out")
                .arg(&out)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let mut dirs = Vec::new();
    for (i, (out, child)) in shards.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "shard {i}: {}", stderr(&o));
        dirs.push(result_dir(&out));
    }
    dirs
}

/// `msgbench merge` of `dirs` into `out`: its run.
fn merged_run(dirs: &[PathBuf], out: &Path) -> RunResult {
    let mut args = vec!["merge"];
    args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
    args.extend(["--out", out.to_str().unwrap()]);
    let o = msgbench(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    run_of(out)
}

fn key(c: &msgbench_model::result::Counters) -> (u64, u64, u64, u64, u64, u64) {
    (
        c.attempted,
        c.sent,
        c.delivered,
        c.dropped,
        c.failed,
        c.in_flight_end,
    )
}

/// The merged run's subscriptions, by name, equal the whole run's, to the message.
fn same_subscriptions(merged: &RunResult, whole: &RunResult, each: u64) {
    let mut streams = merged.streams.clone();
    streams.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(streams.len(), whole.streams.len());
    for (m, w) in streams.iter().zip(&whole.streams) {
        assert_eq!(m.name, w.name);
        assert_eq!(key(&m.counters), key(&w.counters), "{}", m.name);
        assert_eq!(m.counters.sent, each, "{}", m.name);
        assert_eq!(m.sequence.total() + m.gaps_seen, 0, "{}", m.name);
        let generated: u64 = m.intervals.iter().map(|i| i.generated).sum();
        assert_eq!(generated, each, "{}: {:?}", m.name, m.intervals);
    }
}

#[test]
fn a_pubsub_run_over_shards_merges_into_what_one_process_offers_to_the_message() {
    let (mut broker, port) = nats_server();
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("pubsub.toml");
    let write = |extra: &str| {
        std::fs::write(
            &scenario,
            format!(
                "name = \"sharded\"\nsystem = \"pubsub\"\n[run]\nduration = \"2s\"\nwarmup = \"500ms\"\n\
                 drain_timeout = \"1s\"\n[pacing]\nmode = \"rate\"\nper_sec = 3000\n[pubsub]\n\
                 broker = \"nats\"\naddress = \"127.0.0.1:{port}\"\n{extra}"
            ),
        )
        .unwrap();
    };
    // Three publishers and three subscriptions of one topic: shard i publishes with
    // publisher i and reads subscription t0-si, which gets every shard's messages.
    write("publishers_per_topic = 3\nsubscriptions_per_topic = 3\n");
    // Without an agreed start the shards could not tell each other's messages: refused.
    let o = msgbench(&["run", scenario.to_str().unwrap(), "--shard", "0/3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("need --start-at"), "{}", stderr(&o));
    let o = msgbench(&[
        "run",
        scenario.to_str().unwrap(),
        "--shard",
        "0/3",
        "--start-at",
        "+30s",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("counts +DURATION from its own now"),
        "{}",
        stderr(&o)
    );
    let o = msgbench(&["run", scenario.to_str().unwrap(), "--shard", "0/4"]);
    assert!(stderr(&o).contains("at most 3 shard(s)"), "{}", stderr(&o));
    let three = tmp.path().join("three");
    std::fs::create_dir(&three).unwrap();
    let (parts, merged, whole) = sharded_and_whole(&scenario, 3, &three);
    for (i, r) in parts.iter().enumerate() {
        let figures = r.pubsub_shard.as_ref().expect("a shard's figures");
        assert_eq!(figures.publishers.len(), 1);
        assert_eq!(figures.publishers[0].index, i as u32);
        assert_eq!(r.streams.len(), 1);
        assert_eq!(r.streams[0].name, format!("t0-s{i}"));
        // Its subscription got every shard's publishers' messages.
        assert!(
            figures.subscriptions[0].delivered.iter().all(|&d| d > 1500),
            "{figures:?}"
        );
    }
    // 3 publishers × 1000/s × 2 s, to each of 3 subscriptions.
    assert_eq!(key(&whole.counters), (18_000, 18_000, 18_000, 0, 0, 0));
    assert_eq!(key(&merged.counters), key(&whole.counters));
    same_subscriptions(&merged, &whole, 6_000);
    assert!(
        merged
            .info
            .iter()
            .any(|i| i.contains("merged from 3 shards")),
        "{:?}",
        merged.info
    );
    // A shared subscription whose two consumers are in two shards (a NATS queue group
    // across processes): each message to one of them, counted once in the merge.
    write("publishers_per_topic = 2\nconsumers_per_subscription = 2\n");
    let two = tmp.path().join("two");
    std::fs::create_dir(&two).unwrap();
    let (parts, merged, whole) = sharded_and_whole(&scenario, 2, &two);
    for r in &parts {
        assert_eq!(
            r.streams.len(),
            1,
            "each shard reads t0-s0 with one consumer"
        );
        assert!(
            r.streams[0].counters.delivered > 1000,
            "{:?}",
            r.streams[0].counters
        );
    }
    let _ = broker.kill();
    let _ = broker.wait();
    assert_eq!(key(&whole.counters), (6_000, 6_000, 6_000, 0, 0, 0));
    assert_eq!(key(&merged.counters), key(&whole.counters));
    same_subscriptions(&merged, &whole, 6_000);
}

/// A RabbitMQ node of its own (`scripts/rabbitmq-server.sh`, its folder under `dir`), killed
/// with the test process (its parent-death signal): its process and AMQP port.
fn rabbitmq_node(dir: &Path) -> (std::process::Child, u16) {
    use std::os::unix::process::CommandExt;
    let port = common::free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/rabbitmq-server.sh"
    );
    let mut command = Command::new("bash");
    command
        .arg(script)
        .arg(port.to_string())
        .arg(dir.join("node"))
        .arg(common::free_port().to_string())
        .arg(common::free_port().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the child only sets its parent-death signal.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .expect("RabbitMQ (run `bash scripts/setup.sh`)");
    common::ports::wait_until_listening(&mut child, port, std::time::Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("RabbitMQ: {e}"));
    (child, port)
}

#[test]
fn a_rabbitmq_run_over_two_shards_shares_its_queues_and_merges_to_the_message() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut node, port) = rabbitmq_node(tmp.path());
    let scenario = tmp.path().join("rabbitmq.toml");
    // Two publishers, two subscriptions (queues) of two consumers each: every shard reads
    // both queues with one consumer each, declares them without deleting the other's.
    std::fs::write(
        &scenario,
        format!(
            "name = \"sharded\"\nsystem = \"pubsub\"\n[run]\nduration = \"2s\"\nwarmup = \"500ms\"\n\
             drain_timeout = \"2s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[pubsub]\n\
             broker = \"rabbitmq\"\naddress = \"127.0.0.1:{port}\"\npublishers_per_topic = 2\n\
             subscriptions_per_topic = 2\nconsumers_per_subscription = 2\n\
             [pubsub.rabbitmq]\nconfirms = true\n"
        ),
    )
    .unwrap();
    let (parts, merged, whole) = sharded_and_whole(&scenario, 2, tmp.path());
    let _ = node.kill();
    let _ = node.wait();
    for r in &parts {
        assert_eq!(r.streams.len(), 2, "each shard reads both queues");
        assert!(r
            .warnings
            .iter()
            .all(|w| !w.to_string().contains("server error")));
    }
    // 2 publishers × 1000/s × 2 s, to each of 2 subscriptions.
    assert_eq!(key(&whole.counters), (8_000, 8_000, 8_000, 0, 0, 0));
    assert_eq!(key(&merged.counters), key(&whole.counters));
    same_subscriptions(&merged, &whole, 4_000);
}
