//! `msgbench slurm`: the sbatch script that runs a scenario as N shards on a Slurm cluster and
//! merges them (docs/distributed.md, "On Slurm"). Two forms, as Slurm users launch work:
//! one job of N tasks started by `srun` (the start computed when the job starts, so no task can
//! be queued past it; the merge its last step), or a job array of N one-task jobs (the start
//! fixed when printed, since the array's tasks start apart; the merge a dependent job). Every
//! value from the user that reaches the script is quoted for the shell, and the scenario is
//! written by a quoted here-document whose end marker the scenario does not contain.
use crate::args::SlurmArgs;
use crate::distributed::{fill, is_loopback, parse_start_at, rfc3339, roughly};
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use msgbench_model::shard::{planned_starts, Shard, MAX_SHARDS};
use msgbench_model::Experiment;
use std::process::ExitCode;

/// The script of one job of N tasks, its `{name}`s filled by [`fill`].
const SRUN_JOB: &str = include_str!("slurm-job.sh");
/// The script of a job array of N one-task jobs.
const ARRAY_JOB: &str = include_str!("slurm-array.sh");
/// Time added to the runs' planned length for the default `--time`: connecting, writing
/// results, the merge, and a scheduler that starts the job's steps a little late.
const TIME_SPARE_MS: u64 = 10 * 60 * 1000;

/// `msgbench slurm`: prints the script, or says what is wrong (exit 2).
pub(crate) fn slurm(args: SlurmArgs) -> ExitCode {
    match script(&args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// The sbatch script `args` ask for.
fn script(args: &SlurmArgs) -> Result<String, String> {
    let shards = args.shards;
    if shards == 0 || shards > MAX_SHARDS {
        return Err(format!("--shards {shards}: give 1 to {MAX_SHARDS} tasks"));
    }
    for (flag, n) in [
        ("--tasks-per-node", args.tasks_per_node),
        ("--cpus-per-task", args.cpus_per_task),
    ] {
        if n == 0 {
            return Err(format!("{flag} 0: give at least 1"));
        }
    }
    let experiment = sharded_experiment(args)?;
    warn_of_loopback(&experiment);
    let now = msgbench_engine::environment::unix_ms();
    let (start, start_note) = start(args, now)?;
    planned_starts(&experiment, start.at_ms.unwrap_or(now))?;
    let job = job_name(&experiment.name);
    let mut options = String::new();
    let mut merge_options = String::new();
    if let Some(p) = &args.partition {
        let p = slurm_word(p, "--partition")?;
        options.push_str(&format!("#SBATCH --partition={p}\n"));
        merge_options.push_str(&format!("--partition={p} "));
    }
    for o in &args.sbatch_options {
        if !o.starts_with('-') || o.chars().any(char::is_control) {
            return Err(format!(
                "--sbatch-option {o:?}: give one sbatch option on one line, e.g. \
                 --sbatch-option=--exclusive or --sbatch-option=--account=lab"
            ));
        }
        options.push_str(&format!("#SBATCH {o}\n"));
    }
    match args.time.as_deref().map(time_limit).transpose()? {
        Some(limit) => options.push_str(&format!("#SBATCH --time={limit}\n")),
        None => match planned_minutes(&experiment) {
            Some(minutes) => options.push_str(&format!("#SBATCH --time={minutes}\n")),
            None => options.push_str(
                "# (No --time: a run is ended by operations alone, so its length is unknown.)\n",
            ),
        },
    }
    let msgbench = match &args.msgbench {
        Some(m) => m.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot tell this msgbench's path ({e}); give --msgbench"))?
            .display()
            .to_string(),
    };
    for (flag, text) in [("--results", &args.results), ("--msgbench", &msgbench)] {
        if text.trim().is_empty() || text.chars().any(char::is_control) {
            return Err(format!("{flag} {text:?}: give a path on one line"));
        }
    }
    let fields = [
        ("experiment", format!("{:?}", experiment.name)),
        ("shards", shards.to_string()),
        ("last", (shards - 1).to_string()),
        ("job", job),
        ("per_node", args.tasks_per_node.to_string()),
        ("cpus", args.cpus_per_task.to_string()),
        ("options", options),
        ("merge_options", merge_options),
        ("msgbench", sh_quote(&msgbench)),
        ("results", sh_quote(&args.results)),
        ("results_note", args.results.clone()),
        ("eof", end_marker(&experiment.resolved_toml)),
        ("scenario", with_newline(&experiment.resolved_toml)),
        ("start", start.shell),
        ("start_note", start_note),
    ];
    Ok(fill(if args.array { ARRAY_JOB } else { SRUN_JOB }, &fields))
}

/// The scenario, checked as every shard will load it: each of the N must have work.
fn sharded_experiment(args: &SlurmArgs) -> Result<Experiment, String> {
    if args.array && args.tasks_per_node != 1 {
        eprintln!(
            "msgbench: warning: --tasks-per-node is not for --array (each array task is a job \
             of its own, placed as Slurm will); --sbatch-option=--exclusive gives each a node"
        );
    }
    let mut experiment = crate::commands::scenario::load(&args.scenario)?;
    experiment
        .set_shard(Shard {
            index: 0,
            count: args.shards,
        })
        .map_err(|e| {
            let why = e.split_once(": ").map_or(e.as_str(), |(_, why)| why);
            format!("--shards {}: {why}", args.shards)
        })?;
    Ok(experiment)
}

/// A loopback server is each node's own: right only when every task runs on the server's node.
fn warn_of_loopback(experiment: &Experiment) {
    let servers = experiment
        .points
        .iter()
        .filter_map(|p| p.scenario.system.server_address());
    if let Some(address) = servers.into_iter().find(|a| is_loopback(a)) {
        eprintln!(
            "msgbench: warning: the scenario's server is {address}, a loopback address: each \
             task reaches the one on its own node, which is right only when every task runs on \
             the server's node; give an address the nodes can reach, e.g. --set \
             'rpc.address=\"bench1:7000\"'"
        );
    }
}

/// The agreed start as the script writes it, and the absolute time when one is fixed here.
struct Start {
    /// A shell word: Unix ms, or an arithmetic expansion of the job's own clock.
    shell: String,
    /// The Unix ms fixed when printed (`None`: taken when the job starts).
    at_ms: Option<u64>,
}

/// `--start-at` for the form asked: after the job starts (one job, `+DURATION`), or fixed now.
fn start(args: &SlurmArgs, now: u64) -> Result<(Start, String), String> {
    let default = if args.array { "+2m" } else { "+10s" };
    let text = args.start_at.as_deref().unwrap_or(default);
    if let (false, Some(rel)) = (args.array, text.trim().strip_prefix('+')) {
        let after = msgbench_model::duration::parse(rel)
            .map_err(|e| format!("--start-at {text}: {e}; give +DURATION after the job starts (+10s) or an absolute time"))?;
        let ms = after.as_millis() as u64;
        let start = Start {
            shell: format!("$(( $(date +%s%3N) + {ms} ))"),
            at_ms: None,
        };
        return Ok((start, format!("{} after the job starts", roughly(ms))));
    }
    let at = parse_start_at(text, now, "or print the script again")?;
    if args.array && at < now + 30_000 {
        eprintln!(
            "msgbench: warning: the shards start in {}: every array task must be scheduled \
             before then, or its shard refuses to run (--start-at)",
            roughly(at - now)
        );
    }
    let start = Start {
        shell: at.to_string(),
        at_ms: Some(at),
    };
    Ok((start, format!("at {} (Unix ms {at})", rfc3339(at))))
}

/// The job's default time limit in minutes: every run's slot (as [`planned_starts`] lays them
/// out) plus [`TIME_SPARE_MS`]; `None` when a run is ended by operations alone.
fn planned_minutes(experiment: &Experiment) -> Option<u64> {
    let mut ms = TIME_SPARE_MS;
    for point in &experiment.points {
        let run = &point.scenario.run;
        if run.duration.is_zero() {
            return None;
        }
        ms += run.slot_ms() * u64::from(experiment.replicates);
    }
    Some(ms.div_ceil(60_000))
}

/// `--time` as Slurm reads it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
fn time_limit(text: &str) -> Result<String, String> {
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (Some(d), rest),
        None => (None, text),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let numbers = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    let ok = days.is_none_or(numbers) && parts.len() <= 3 && parts.iter().all(|p| numbers(p));
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "--time {text:?}: give Slurm's form, e.g. 30 (minutes), 1:30:00 or 2-00 (days-hours)"
        ))
    }
}

/// A partition's name: letters, digits, `-`, `_`, `.` and `,` (a list), nothing the shell or
/// an `#SBATCH` line would read otherwise.
fn slurm_word(text: &str, flag: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ','));
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{flag} {text:?}: give a name of letters, digits, '-', '_' and '.' (a list with ',')"
        ))
    }
}

/// The job's name: `msgbench-EXPERIMENT` with anything but letters, digits, `-`, `_` and `.`
/// made `-` (it goes on an `#SBATCH` line and into output file names).
fn job_name(experiment: &str) -> String {
    let name: String = format!("msgbench-{experiment}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    name
}

/// `text` as one shell word: single-quoted, each `'` written `'\''`.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A here-document's end marker that is no line of `text`.
fn end_marker(text: &str) -> String {
    let mut marker = "MSGBENCH_SCENARIO_END".to_string();
    while text.lines().any(|l| l == marker) {
        marker.push('_');
    }
    marker
}

/// `text` ending with a newline (the here-document's end marker must start a line).
fn with_newline(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_reaches_the_shell_is_quoted_and_the_marker_is_no_line_of_the_scenario() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's $HOME"), "'it'\\''s $HOME'");
        assert_eq!(end_marker("x = 1\n"), "MSGBENCH_SCENARIO_END");
        assert_eq!(
            end_marker("x = '''\nMSGBENCH_SCENARIO_END\n'''\n"),
            "MSGBENCH_SCENARIO_END_"
        );
        assert_eq!(job_name("rpc capacity/$(x)"), "msgbench-rpc-capacity---x-");
        for ok in ["30", "1:30:00", "2-00", "2-00:30", "0:45"] {
            assert_eq!(time_limit(ok).as_deref(), Ok(ok));
        }
        for bad in ["", "1h", "1:2:3:4", "-5", "5;rm"] {
            assert!(time_limit(bad).is_err(), "{bad}");
        }
        assert!(slurm_word("bench,debug", "--partition").is_ok());
        assert!(slurm_word("a b", "--partition").is_err());
        assert!(slurm_word("x\n#SBATCH --exclusive", "--partition").is_err());
    }
}
