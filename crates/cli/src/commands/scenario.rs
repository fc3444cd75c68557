//! A scenario from the command line: the file (or the embedded default), `--set`,
//! `--sweep`, `--threshold` and the run flags applied, validated into an experiment.
use crate::args::ScenarioArgs;
use crate::setup::machine_limits;
use msgbench_model::sweep::{Override, DEFAULT_SCENARIO};
use msgbench_model::Experiment;

/// The scenario's `report.thresholds` followed by those of `--threshold`, each checked here so
/// a bad one is named by the flag that gave it.
fn thresholds_with(text: &str, flags: &[String]) -> Result<toml::Value, String> {
    let mut all: Vec<toml::Value> = text
        .parse::<toml::Table>()
        .ok()
        .and_then(|doc| doc.get("report")?.get("thresholds")?.as_array().cloned())
        .unwrap_or_default();
    for t in flags {
        msgbench_model::threshold::Threshold::parse(t).map_err(|e| format!("--threshold: {e}"))?;
        all.push(toml::Value::String(t.clone()));
    }
    Ok(toml::Value::Array(all))
}

/// Reads the scenario, applies the flags, expands and validates every run.
pub(crate) fn load(args: &ScenarioArgs) -> Result<Experiment, String> {
    let (text, source) = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
            (text, path.display().to_string())
        }
        None => (
            DEFAULT_SCENARIO.to_string(),
            "<embedded default>".to_string(),
        ),
    };
    let mut overrides = Vec::new();
    for set in &args.set {
        overrides.push(Override::parse(set)?);
    }
    overrides.extend(run_flags(args, &text)?);
    if args.scenario.is_none() {
        drop_the_default_axes_of_another_system(&text, &mut overrides);
    }
    let limits = machine_limits();
    let experiment =
        Experiment::load(&text, &source, &overrides, &limits).map_err(|e| e.to_string())?;
    // An ad-hoc run of another system on the embedded default (`--set system=rpc`) is not the
    // default experiment: its results go under results/<system>/. Loaded again with the name
    // set, so that experiment.toml (and a --resume) say the same.
    let system = experiment.points[0].scenario.system.kind();
    if args.scenario.is_none() && system != msgbench_model::scenario::SystemKind::Queue {
        overrides.push(Override::from_flag(
            "--set name",
            "name",
            toml::Value::String(system.to_string()),
        ));
        return Experiment::load(&text, &source, &overrides, &limits).map_err(|e| e.to_string());
    }
    Ok(experiment)
}

/// The run flags (`--slo`, `--threshold`, `--duration`, `--warmup`, `--operations`,
/// `--replicates`, `--emit-latencies`) as overrides, each named by its flag; `text` is the
/// scenario's (its own thresholds come first).
fn run_flags(args: &ScenarioArgs, text: &str) -> Result<Vec<Override>, String> {
    let mut flags = Vec::new();
    let flag = Override::from_flag;
    if let Some(slo) = &args.slo {
        flags.push(flag(
            "--slo",
            "report.slo",
            toml::Value::String(slo.clone()),
        ));
    }
    if !args.thresholds.is_empty() {
        flags.push(flag(
            "--threshold",
            "report.thresholds",
            thresholds_with(text, &args.thresholds)?,
        ));
    }
    if let Some(d) = &args.duration {
        check_duration("--duration", d)?;
        flags.push(flag(
            "--duration",
            "run.duration",
            toml::Value::String(d.clone()),
        ));
    }
    if let Some(d) = &args.warmup {
        check_duration("--warmup", d)?;
        flags.push(flag(
            "--warmup",
            "run.warmup",
            toml::Value::String(d.clone()),
        ));
    }
    if let Some(n) = args.operations {
        flags.push(flag(
            "--operations",
            "run.operations",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    if let Some(n) = args.replicates {
        flags.push(flag(
            "--replicates",
            "run.replicates",
            toml::Value::Integer(n as i64),
        ));
    }
    if let Some(n) = args.emit_latencies {
        flags.push(flag(
            "--emit-latencies",
            "run.emit_latencies",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    Ok(flags)
}

/// The embedded default is the queue lab's experiment: four points (unpaced and at 100k/s,
/// through two rings). On an ad-hoc run of another system (`--set system="rpc"`) none of that
/// is the user's: every axis of the default's sweep and its pacing are left out, before the
/// user's own overrides, so the run is one point of that system at its defaults (issue 48: a
/// newcomer's first run against their service included an unpaced point and one at 100k/s).
/// What the user sets after it (`--set pacing.per_sec=…`, a sweep) applies as usual.
fn drop_the_default_axes_of_another_system(text: &str, overrides: &mut Vec<Override>) {
    use msgbench_model::scenario::SystemKind;
    let chosen = overrides
        .iter()
        .rev()
        .find(|o| o.path == "system")
        .and_then(|o| o.value.clone())
        .and_then(|v| v.try_into::<SystemKind>().ok());
    let (Some(system), Ok(doc)) = (chosen, text.parse::<toml::Table>()) else {
        return;
    };
    if system == SystemKind::Queue {
        return;
    }
    let axes = doc.get("sweep").and_then(|s| s.as_table());
    let removals: Vec<Override> = (axes.into_iter().flat_map(|sweep| sweep.keys()))
        .map(|axis| format!("sweep.{axis}"))
        .chain(doc.contains_key("pacing").then(|| "pacing".to_string()))
        .map(|path| Override {
            path,
            value: None,
            flag: "--set system",
        })
        .collect();
    overrides.splice(0..0, removals);
}

fn check_duration(flag: &str, text: &str) -> Result<(), String> {
    msgbench_model::duration::parse(text)
        .map(|_| ())
        .map_err(|e| format!("{flag}: {e}"))
}
