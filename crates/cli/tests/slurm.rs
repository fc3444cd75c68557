//! Shards launched by a real Slurm cluster: a one-node cluster (munged, slurmctld, slurmd from
//! Debian's packages) started by scripts/slurm-cluster.sh in a temporary folder, the scripts
//! `msgbench slurm` prints submitted to it with `sbatch` — one job of 4 tasks started by
//! `srun`, then a job array of 4 with its dependent merge job — each merged result compared
//! with one process offering the same schedule, to the message; then a task killed in the
//! middle of its run, named by the merge. One test function: its steps share the cluster and
//! must not run beside each other on a 2-core machine.
mod common;
use common::{msgbench, rpc_address, serve, stderr};
use msgbench_model::result::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The cluster of scripts/slurm-cluster.sh in `dir`, stopped (jobs cancelled, daemons ended)
/// when dropped, whatever the test did.
struct Cluster {
    dir: PathBuf,
    conf: String,
}

fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-cluster.sh")
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let o = Command::new("bash")
            .arg(cluster_script())
            .arg("start")
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "the Slurm cluster did not start (scripts/slurm-cluster.sh): {}",
            stderr(&o)
        );
        let conf = String::from_utf8_lossy(&o.stdout)
            .trim()
            .strip_prefix("SLURM_CONF=")
            .expect("the script prints SLURM_CONF=")
            .to_string();
        Cluster {
            dir: dir.to_path_buf(),
            conf,
        }
    }

    /// A Slurm command (`sbatch`, `squeue`, …) of this cluster.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Waits until the queue is empty (a job array and its dependent merge job have ended).
    fn wait_idle(&self, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let o = self.command("squeue").arg("-h").output().unwrap();
            if o.status.success() && o.stdout.is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "jobs still queued after {limit:?}: {}",
                String::from_utf8_lossy(&o.stdout)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(cluster_script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// The one run of a result directory.
fn run_of(dir: &Path) -> RunResult {
    let json = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap_or_else(|| panic!("no run in {}", dir.display()));
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// The only job folder under `results` (`msgbench slurm --results`).
fn job_dir(results: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// `msgbench slurm SCENARIO ARGS`: the script it prints.
fn script(scenario: &str, args: &[&str]) -> String {
    let mut all = vec!["slurm", scenario, "--shards", "4", "--cpus-per-task", "1"];
    all.extend(args);
    let o = msgbench(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// `sbatch --wait` with the script on stdin, run from `dir` (where its output file goes).
fn submit_and_wait(cluster: &Cluster, script: &str, dir: &Path) -> std::process::Child {
    let mut child = cluster
        .command("sbatch")
        .arg("--wait")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child
}

/// `msgbench slurm SCENARIO FLAGS --results RESULTS`, whose script must hold `holds`, submitted
/// from `results`' parent with `sbatch --wait`: the job must succeed (its outputs shown if not).
fn job_succeeds(cluster: &Cluster, scenario: &str, flags: &[&str], results: &Path, holds: &str) {
    let mut args = flags.to_vec();
    args.extend(["--results", results.to_str().unwrap()]);
    let text = script(scenario, &args);
    assert!(text.contains(holds), "{text}");
    let dir = results.parent().unwrap();
    let o = submit_and_wait(cluster, &text, dir)
        .wait_with_output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stderr(&o), job_outputs(dir));
}

/// What every job's output files under `dir` say.
fn job_outputs(dir: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "out") {
            text += &format!("== {}\n", p.display());
            text += &std::fs::read_to_string(&p).unwrap_or_default();
        }
    }
    text
}

/// The merged run under `job`, checked: 4 shards, the accounting closed, each shard's counters
/// summed, everything delivered.
fn merged_of(job: &Path) -> RunResult {
    let merged = run_of(&job.join("merged"));
    assert_eq!(merged.shards.len(), 4, "{:?}", merged.shards);
    merged.counters.check().unwrap();
    let mut sum = msgbench_model::result::Counters::default();
    for i in 0..4 {
        let latest = std::fs::read_dir(job.join(format!("shard-{i}")))
            .unwrap()
            .map(|e| e.unwrap().path().join("latest"))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("shard {i} wrote no result"));
        let part = run_of(&latest);
        assert_eq!(part.shard.map(|s| (s.index, s.count)), Some((i, 4)));
        sum += part.counters;
    }
    assert_eq!(merged.counters, sum);
    assert_eq!(merged.counters.delivered, merged.counters.attempted);
    merged
}

/// The msgbench process of task `rank` of Slurm job `job` (of the cluster `conf`), found by
/// its name and environment; waits up to `limit` for it to appear.
fn task_pid(conf: &str, job: &str, rank: &str, limit: Duration) -> u32 {
    let end = Instant::now() + limit;
    let wanted = [
        format!("SLURM_CONF={conf}"),
        format!("SLURM_JOB_ID={job}"),
        format!("SLURM_PROCID={rank}"),
    ];
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim() != "msgbench" {
                continue;
            }
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            let vars: Vec<String> = environ
                .split(|&b| b == 0)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            if wanted.iter().all(|w| vars.contains(w)) {
                return pid;
            }
        }
        assert!(
            Instant::now() < end,
            "task {rank} of job {job} never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process ended when dropped (a test that fails leaves no server behind).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The agreed start (Unix ms) job `job`'s script printed into its output file in `dir`.
fn job_start_ms(dir: &Path, job: &str, limit: Duration) -> u64 {
    let end = Instant::now() + limit;
    let file = dir.join(format!("msgbench-slurm-sharded-{job}.out"));
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some(rest) = text.split("starting at ").nth(1) {
            return rest.split_whitespace().next().unwrap().parse().unwrap();
        }
        assert!(Instant::now() < end, "job {job} printed no start: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const SCENARIO: &str = r#"
name = "slurm-sharded"
system = "rpc"
[run]
duration = "2s"
warmup = "200ms"
[pacing]
mode = "rate"
per_sec = 4000
arrivals = "poisson"
[client]
threads = 1
connections = 4
window = 64
[rpc.ops.call]
service = "20us"
"#;

#[test]
fn slurm_launches_the_shards_and_their_merge_equals_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(&tmp.path().join("cluster"));
    let (server, _, line) = serve(&[
        "rpc",
        "--listen",
        "127.0.0.1:0",
        "--threads",
        "1",
        "--for",
        "120s",
    ]);
    let _server = KillOnDrop(server);
    let address = rpc_address(&line);
    let scenario = tmp.path().join("slurm-sharded.toml");
    std::fs::write(
        &scenario,
        format!("{SCENARIO}[rpc]\naddress = \"{address}\"\n"),
    )
    .unwrap();
    let scenario = scenario.to_str().unwrap();

    // One process offering the whole schedule: what every merge must equal.
    let whole = tmp.path().join("whole");
    let o = msgbench(&["run", scenario, "--quiet", "--out", whole.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let one = run_of(&whole.join("slurm-sharded/latest"));

    // One job of 4 tasks: `msgbench slurm … | sbatch --wait`.
    let results = tmp.path().join("srun");
    let flags = ["--tasks-per-node", "4", "--start-at", "+5s"];
    job_succeeds(&cluster, scenario, &flags, &results, "#SBATCH --ntasks=4");
    let merged = merged_of(&job_dir(&results));
    assert_eq!(
        merged.counters.attempted, one.counters.attempted,
        "srun's 4 shards offer the one process's Poisson schedule, to the message"
    );

    // A job array of 4 one-task jobs; array task 0 submits the merge, which waits for all.
    let results = tmp.path().join("array");
    let flags = ["--array", "--start-at", "+10s"];
    job_succeeds(&cluster, scenario, &flags, &results, "#SBATCH --array=0-3");
    cluster.wait_idle(Duration::from_secs(60));
    let job = job_dir(&results);
    let merged = merged_of(&job);
    assert_eq!(
        merged.counters.attempted, one.counters.attempted,
        "the array's 4 shards offer the one process's schedule, to the message"
    );
    let merge_job = std::fs::read_to_string(job.join("merge-job")).unwrap();
    assert!(
        merge_job.trim().parse::<u64>().is_ok(),
        "the merge job's id: {merge_job:?}"
    );

    killed_task_named_by_merge(&cluster, scenario, tmp.path());
}

/// Task 2 of a 4-task job killed a second into its measured span: the others finish, the job's
/// merge step names shard 2/4, and the job fails.
fn killed_task_named_by_merge(cluster: &Cluster, scenario: &str, tmp: &Path) {
    let results = tmp.join("killed");
    let text = script(
        scenario,
        &[
            "--tasks-per-node",
            "4",
            "--start-at",
            "+3s",
            "--duration",
            "5s",
            "--results",
            results.to_str().unwrap(),
        ],
    );
    let mut job = submit_and_wait(cluster, &text, tmp);
    let mut submitted = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(job.stdout.as_mut().unwrap())
        .read_line(&mut submitted)
        .unwrap();
    let job_id = submitted
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(job_id.parse::<u64>().is_ok(), "{submitted:?}");
    let start = job_start_ms(tmp, &job_id, Duration::from_secs(30));
    let pid = task_pid(&cluster.conf, &job_id, "2", Duration::from_secs(30));
    // Into its measured span: the warm-up is 200 ms, the run 5 s.
    let kill_at = start + 1_500;
    std::thread::sleep(Duration::from_millis(kill_at.saturating_sub(now_ms())));
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o: Output = job.wait_with_output().unwrap();
    assert!(!o.status.success(), "a job with a killed task succeeded");
    let said = job_outputs(tmp);
    let out = said
        .split("== ")
        .find(|part| part.contains(&format!("-{job_id}.out")))
        .unwrap_or_else(|| panic!("no output of job {job_id}: {said}"));
    assert!(
        out.contains("shard 2/4") && out.contains("missing"),
        "the merge names the killed task's shard: {out}"
    );
    // The others ran on: each measured its whole run.
    for i in [0, 1, 3] {
        let shard = job_dir(&results).join(format!("shard-{i}/slurm-sharded/latest"));
        let r = run_of(&shard);
        assert!(r.duration_s > 4.9, "shard {i} measured {} s", r.duration_s);
        assert!(!r.warnings.iter().any(|w| w.is_stopped_early()), "{i}");
    }
}

/// What `msgbench slurm` refuses, each with exit 2 and the fix; and what it prints is a shell
/// script bash reads, whatever the paths hold.
#[test]
fn slurm_refuses_what_it_cannot_run_and_quotes_what_it_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(
        &scenario,
        format!("{SCENARIO}[rpc]\naddress = \"10.0.0.7:7000\"\n"),
    )
    .unwrap();
    let s = scenario.to_str().unwrap();
    for (args, says) in [
        (vec!["--shards", "0"], "--shards 0: give 1 to"),
        (vec!["--shards", "5"], "--shards 5:"),
        (
            vec!["--shards", "2", "--partition", "a b"],
            "--partition \"a b\": give a name",
        ),
        (
            vec!["--shards", "2", "--time", "1h"],
            "--time \"1h\": give Slurm's form",
        ),
        (
            vec!["--shards", "2", "--array", "--start-at", "1000"],
            "in the past",
        ),
        (
            vec!["--shards", "2", "--start-at", "+soon"],
            "--start-at +soon",
        ),
        (vec!["--shards", "2", "--results", ""], "--results \"\""),
        (
            vec!["--shards", "2", "--cpus-per-task", "0"],
            "--cpus-per-task 0",
        ),
        (
            vec!["--shards", "2", "--sbatch-option", "exclusive"],
            "--sbatch-option \"exclusive\": give one sbatch option",
        ),
    ] {
        let mut all = vec!["slurm", s];
        all.extend(&args);
        let o = msgbench(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?} printed a script");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let odd = "/tmp/it's \"odd\" $(dir)";
    for form in [&[][..], &["--array"][..]] {
        let mut all = vec!["slurm", s, "--shards", "2", "--results", odd];
        all.extend(form);
        all.extend(["--msgbench", "/opt/my msgbench/bin/msgbench"]);
        all.extend([
            "--sbatch-option=--exclusive",
            "--sbatch-option",
            "--account=lab",
        ]);
        let o = msgbench(&all);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8(o.stdout).unwrap();
        let file = tmp.path().join("job.sh");
        std::fs::write(&file, &text).unwrap();
        let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
        assert!(syntax.status.success(), "{}\n{text}", stderr(&syntax));
        assert!(
            text.contains("JOB_DIR='/tmp/it'\\''s \"odd\" $(dir)'/"),
            "{text}"
        );
        assert!(text.contains("#SBATCH --time=11"), "{text}");
        assert!(
            text.contains("#SBATCH --exclusive\n#SBATCH --account=lab\n"),
            "{text}"
        );
    }
    let o = msgbench(&["slurm", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("Example: msgbench slurm"), "{help}");
}
