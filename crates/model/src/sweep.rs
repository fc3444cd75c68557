//! An experiment: a scenario file with sweep axes and replicates, expanded into sweep points.
//!
//! Expansion works on the TOML document itself: each point is the base document with the axis
//! values written in at their dotted paths, then deserialized and validated like any scenario.
//! So every field can be swept and every swept value is checked before anything runs.
use crate::check::{MachineLimits, ScenarioError};
use crate::scenario::{Scenario, ScenarioSpec};
use serde::Deserialize;

/// The embedded default experiment, run by `msgbench run` without a file.
pub const DEFAULT_SCENARIO: &str = include_str!("default.toml");
/// The annotated template of every section (`msgbench default-scenario --full`): the queue's
/// keys set, the other systems' sections commented out with `# ` (a test uncomments each).
pub const FULL_SCENARIO: &str = include_str!("full.toml");

/// One `--set path=value` override.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// Dotted path, e.g. `queue.capacity` or `sweep.queue.capacity`.
    pub path: String,
    /// The value (TOML syntax; bare words are strings); `None` removes the field, so that its
    /// default applies (`--set key=`).
    pub value: Option<toml::Value>,
    /// The flag the user typed, for errors: `--set` or a shorthand such as `--slo`.
    pub flag: &'static str,
}

impl Override {
    /// A shorthand flag's override (`--slo "p99 < 1ms"` sets `report.slo`).
    pub fn from_flag(flag: &'static str, path: &str, value: toml::Value) -> Override {
        Override {
            path: path.into(),
            value: Some(value),
            flag,
        }
    }

    /// What the user typed, for errors: `--set queue.capacity`, `--slo`.
    pub fn source(&self) -> String {
        if self.flag == "--set" {
            format!("--set {}", self.path)
        } else {
            self.flag.to_string()
        }
    }

    /// Parses `path=value`; the value is TOML (`8`, `"2ms"`, `[64, 8]`) or a bare word;
    /// nothing after `=` removes the field (its default applies).
    pub fn parse(text: &str) -> Result<Override, String> {
        let (path, value) = text.split_once('=').ok_or_else(|| {
            format!("--set {text:?}: expected PATH=VALUE, e.g. --set queue.capacity=8")
        })?;
        let path = path.trim();
        if path.is_empty() {
            return Err(format!("--set {text:?}: the path before '=' is empty"));
        }
        let value = value.trim();
        let value = (!value.is_empty()).then(|| {
            toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.to_string()))
        });
        Ok(Override {
            path: path.to_string(),
            value,
            flag: "--set",
        })
    }
}

/// Sweep axes that are load: more of them offers the system more work at once or per second
/// (a rate, a pipeline window, connections, threads, a batch, clients). A knee — where more
/// load stops buying throughput — only means something along one of these (a pacing interval,
/// a queue capacity or a wait strategy is a setting, not a load). A scenario marks more with
/// `[report] load_axes`.
pub const LOAD_AXES: &[&str] = &[
    "pacing.per_sec",
    "pacing.batch",
    "client.window",
    "client.connections",
    "client.threads",
    "client.turn_batch",
];

/// Whether `axis` is a load axis: built in, or among `marked` (`[report] load_axes`).
pub fn is_load_axis(axis: &str, marked: &[String]) -> bool {
    let axis = axis.trim_matches('"');
    // A tick client's connections: `ticks.clients.<name>.connections`.
    let tick_clients = axis.starts_with("ticks.clients.") && axis.ends_with(".connections");
    LOAD_AXES.contains(&axis) || tick_clients || marked.iter().any(|m| m.trim_matches('"') == axis)
}

/// What a run costs beyond its warm-up and measured window, for time estimates: connecting,
/// starting a server, the drain (measured: 0.2–0.4 s on the examples).
pub const RUN_OVERHEAD_S: f64 = 0.3;

/// `1 min 20 s`, `45 s`, `2 h 5 min`: a time estimate as a person reads it.
pub fn human_seconds(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// One point of the sweep: its parameter values and the scenario to run.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    /// Position in the sweep (0-based).
    pub index: usize,
    /// `(axis, value)` for every sweep axis, in file order.
    pub params: Vec<(String, String)>,
    /// The validated scenario.
    pub scenario: Scenario,
}

/// An expanded experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Experiment name.
    pub name: String,
    /// Where it came from (file name, or `<embedded default>`).
    pub source_name: String,
    /// The resolved document (overrides applied), saved as `experiment.toml`.
    pub resolved_toml: String,
    /// Sweep axes in file order.
    pub axes: Vec<String>,
    /// Replicates per point.
    pub replicates: u32,
    /// The points, cartesian product of the axes (last axis varies fastest).
    pub points: Vec<SweepPoint>,
    /// The agreed start of the first run, Unix ms (`run --start-at`): every shard starts run
    /// `k` at the same planned instant ([`crate::shard::planned_starts`]). `None`: at once.
    pub start_at_unix_ms: Option<u64>,
}

impl Experiment {
    /// Parses, applies overrides, expands the sweep and validates every point.
    pub fn load(
        text: &str,
        source_name: &str,
        overrides: &[Override],
        limits: &MachineLimits,
    ) -> Result<Experiment, ScenarioError> {
        let syntax = |message: String| ScenarioError::Syntax {
            source_name: source_name.into(),
            message,
        };
        // Parse into the typed spec first: toml then reports line, column and the valid keys.
        toml::from_str::<ScenarioSpec>(text)
            .map_err(|e| syntax(e.to_string().trim_end().to_string()))?;
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        for o in overrides {
            // The command line wins: a --set on a swept field replaces that sweep axis.
            if !o.path.starts_with("sweep.") {
                if let Some(sweep) = doc.get_mut("sweep").and_then(|s| s.as_table_mut()) {
                    // The axis itself, a field inside it, or a table around it.
                    sweep.retain(|axis, _| {
                        let axis: &str = axis;
                        !(axis == o.path
                            || axis.starts_with(&format!("{}.", o.path))
                            || o.path.starts_with(&format!("{axis}.")))
                    });
                }
            }
            match &o.value {
                Some(v) => set_path(&mut doc, &o.path, v.clone()),
                None => known_path(&doc, &o.path).and_then(|()| remove_path(&mut doc, &o.path)),
            }
            .map_err(|m| override_error(o, m))?;
            spec_of(&doc).map_err(|m| override_error(o, m))?;
        }
        let base = spec_of(&doc).map_err(syntax)?;
        for axis in &base.report.load_axes {
            known_path(&doc, axis.trim_matches('"')).map_err(|m| {
                syntax(format!(
                    "report.load_axes names `{axis}`, which is not a scenario field: {m}"
                ))
            })?;
        }
        let axes = axes_of(&base, source_name)?;
        check_run_count(&axes, &base.run, source_name)?;
        let mut base_doc = doc.clone();
        base_doc.remove("sweep");
        let mut points = Vec::new();
        for (index, combination) in cartesian(&axes).into_iter().enumerate() {
            let mut point_doc = base_doc.clone();
            let mut params = Vec::new();
            for (axis, value) in axes.iter().map(|(a, _)| a).zip(combination) {
                set_path(&mut point_doc, axis, value.clone())
                    .map_err(|m| syntax(format!("sweep axis `{axis}` = {value}: {m}")))?;
                params.push((axis.clone(), display_value(&value)));
            }
            let spec = spec_of(&point_doc)
                .map_err(|m| syntax(format!("sweep point {}: {m}", render_params(&params))))?;
            let scenario = spec
                .validate(source_name, limits)
                .map_err(|e| attribute(e, &params, overrides))?;
            read_by_the_system(&axes, &spec, source_name)?;
            points.push(SweepPoint {
                index,
                params,
                scenario,
            });
        }
        Ok(Experiment {
            name: base.name.clone(),
            source_name: source_name.into(),
            resolved_toml: toml::to_string(&base).unwrap_or_else(|_| text.to_string()),
            axes: axes.into_iter().map(|(a, _)| a).collect(),
            replicates: base.run.replicates,
            points,
            start_at_unix_ms: None,
        })
    }

    /// Makes every point's run shard `shard` of the whole (see [`crate::shard`]).
    pub fn set_shard(&mut self, shard: crate::shard::Shard) -> Result<(), String> {
        for point in &mut self.points {
            point.scenario.system.set_shard(shard)?;
        }
        Ok(())
    }

    /// The shard every run of this experiment is (the whole run unless `--shard`).
    pub fn shard(&self) -> crate::shard::Shard {
        self.points
            .first()
            .map_or(crate::shard::Shard::WHOLE, |p| p.scenario.system.shard())
    }

    /// Number of runs (points × replicates).
    pub fn run_count(&self) -> usize {
        self.points.len() * self.replicates as usize
    }

    /// Seconds the runs of points `from..` should take: warm-up and measured window of each,
    /// plus [`RUN_OVERHEAD_S`] for connecting, starting servers and draining.
    pub fn planned_seconds_from(&self, from_run: usize) -> f64 {
        let per_point = |p: &SweepPoint| {
            (p.scenario.run.warmup + p.scenario.run.duration).as_secs_f64() + RUN_OVERHEAD_S
        };
        let replicates = self.replicates.max(1) as usize;
        self.points
            .iter()
            .flat_map(|p| std::iter::repeat_n(per_point(p), replicates))
            .skip(from_run)
            .sum()
    }
}

/// Says where an invalid value came from: a `--set` flag, or a sweep point of the file.
fn attribute(
    e: ScenarioError,
    params: &[(String, String)],
    overrides: &[Override],
) -> ScenarioError {
    let ScenarioError::Invalid {
        source_name,
        field,
        problem,
        fix,
    } = e
    else {
        return e;
    };
    let from_flag = overrides
        .iter()
        .find(|o| field == o.path || field.starts_with(&format!("{}.", o.path)));
    let swept = params
        .iter()
        .any(|(axis, _)| field == *axis || field.starts_with(&format!("{axis}.")));
    ScenarioError::Invalid {
        source_name: match from_flag {
            Some(o) if o.flag == "--set" => format!("--set {field}"),
            Some(o) => o.flag.to_string(),
            None => source_name,
        },
        problem: if swept {
            format!("{problem} (at sweep point {})", render_params(params))
        } else {
            problem
        },
        field,
        fix,
    }
}

fn override_error(o: &Override, message: String) -> ScenarioError {
    ScenarioError::Syntax {
        source_name: o.source(),
        message,
    }
}

fn spec_of(doc: &toml::Table) -> Result<ScenarioSpec, String> {
    ScenarioSpec::deserialize(toml::Value::Table(doc.clone())).map_err(|e| readable(&e.to_string()))
}

/// toml's errors for a document built in memory end with lines such as "in `queue`": fold them
/// into one line, and say how values are written when the type was wrong.
fn readable(message: &str) -> String {
    let mut lines = message.trim_end().lines();
    let mut out = lines.next().unwrap_or_default().to_string();
    for line in lines {
        out.push_str(&format!(" ({})", line.trim()));
    }
    if out.contains("invalid type") {
        out.push_str("; numbers are written bare (8, 1e5), durations and names in quotes (\"2ms\", \"rate\")");
    }
    out
}

fn axes_of(
    spec: &ScenarioSpec,
    source_name: &str,
) -> Result<Vec<(String, Vec<toml::Value>)>, ScenarioError> {
    let mut axes = Vec::new();
    for (axis, values) in &spec.sweep {
        if ["name", "run.replicates", "sweep"]
            .iter()
            .any(|fixed| axis == fixed || axis.starts_with(&format!("{fixed}.")))
        {
            return Err(ScenarioError::Invalid {
                source_name: source_name.into(),
                field: format!("sweep.\"{axis}\""),
                problem: "cannot be swept (it applies to the whole experiment)".into(),
                fix: "set it once instead, e.g. in [run] or with --replicates".into(),
            });
        }
        let problem = match values {
            toml::Value::Array(v) if !v.is_empty() => {
                axes.push((axis.clone(), v.clone()));
                continue;
            }
            toml::Value::Array(_) => "is an empty list".to_string(),
            other => format!("is {} rather than a list", with_article(other.type_str())),
        };
        return Err(ScenarioError::Invalid {
            source_name: source_name.into(),
            field: format!("sweep.\"{axis}\""),
            problem,
            fix: format!("give the values to sweep, e.g. \"{axis}\" = [1, 2]"),
        });
    }
    Ok(axes)
}

/// A sweep axis in a section the system does not read would run the same experiment at every
/// point under different labels (the embedded default's `queue.ring` axis after `--set
/// system="rpc"`, say): refused, naming the section and the way out.
fn read_by_the_system(
    axes: &[(String, Vec<toml::Value>)],
    spec: &ScenarioSpec,
    source_name: &str,
) -> Result<(), ScenarioError> {
    for (axis, _) in axes {
        if let Some(section) = spec.system.foreign_section(axis) {
            return Err(ScenarioError::Invalid {
                source_name: source_name.into(),
                field: format!("sweep.\"{axis}\""),
                problem: format!(
                    "sweeps [{section}], which system = \"{}\" does not read: every point would run the same",
                    spec.system
                ),
                fix: "sweep a field of the system's own sections, or remove the axis (`--set 'sweep={}'` removes every axis)".into(),
            });
        }
    }
    Ok(())
}

fn with_article(noun: &str) -> String {
    match noun.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {noun}"),
        _ => format!("a {noun}"),
    }
}

/// Refuses an experiment of more than `run.max_runs` runs before any point is built.
fn check_run_count(
    axes: &[(String, Vec<toml::Value>)],
    run: &crate::scenario::RunSpec,
    source_name: &str,
) -> Result<(), ScenarioError> {
    let runs = axes
        .iter()
        .try_fold(u64::from(run.replicates.max(1)), |n, (_, v)| {
            n.checked_mul(v.len() as u64)
        });
    if runs.is_some_and(|n| n <= run.max_runs) {
        return Ok(());
    }
    let sizes: Vec<String> = axes
        .iter()
        .map(|(a, v)| format!("{a}: {}", v.len()))
        .collect();
    Err(ScenarioError::Invalid {
        source_name: source_name.into(),
        field: "sweep".into(),
        problem: format!(
            "makes {} runs ({} × {} replicates), more than run.max_runs ({})",
            runs.map_or("more than 2^64".to_string(), |n| n.to_string()),
            sizes.join(" × "),
            run.replicates.max(1),
            run.max_runs
        ),
        fix: "sweep fewer values, or raise run.max_runs (e.g. --set run.max_runs=100000)".into(),
    })
}

/// Cartesian product; the last axis varies fastest. No axes = one empty combination.
fn cartesian(axes: &[(String, Vec<toml::Value>)]) -> Vec<Vec<toml::Value>> {
    let mut out = vec![Vec::new()];
    for (_, values) in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut c = prefix.clone();
                    c.push(v.clone());
                    c
                })
            })
            .collect();
    }
    out
}

/// Writes `value` at a dotted path, creating tables on the way. `sweep.<rest>` keeps `<rest>`
/// as a single key, since sweep axis names contain dots themselves.
fn set_path(doc: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    if let Some(axis) = path.strip_prefix("sweep.") {
        let sweep = doc
            .entry("sweep")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let table = sweep.as_table_mut().ok_or("`sweep` is not a table")?;
        table.insert(axis.trim_matches('"').to_string(), value);
        return Ok(());
    }
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys.pop().ok_or("empty path")?;
    let mut table = doc;
    for key in keys {
        let entry = table
            .entry(key)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{key}` in `{path}` is not a table"))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// Refuses to unset a field the scenario format does not have (`--set queue.capcity=`), as a
/// value for it would be refused: set it to a probe value and see whether the field is unknown.
fn known_path(doc: &toml::Table, path: &str) -> Result<(), String> {
    if path.starts_with("sweep.") {
        return Ok(());
    }
    let mut probe = doc.clone();
    set_path(&mut probe, path, toml::Value::Boolean(true))?;
    match spec_of(&probe) {
        Err(m) if m.contains("unknown field") => Err(m),
        _ => Ok(()),
    }
}

/// Removes the field at `path` (a `sweep.` path removes that axis); a missing field is not an
/// error: its default applies either way.
fn remove_path(doc: &mut toml::Table, path: &str) -> Result<(), String> {
    if let Some(axis) = path.strip_prefix("sweep.") {
        if let Some(t) = doc.get_mut("sweep").and_then(|s| s.as_table_mut()) {
            t.remove(axis.trim_matches('"'));
        }
        return Ok(());
    }
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys.pop().ok_or("empty path")?;
    let mut table = doc;
    for key in keys {
        match table.get_mut(key) {
            Some(toml::Value::Table(t)) => table = t,
            Some(_) => return Err(format!("`{key}` in `{path}` is not a table")),
            None => return Ok(()),
        }
    }
    table.remove(last);
    Ok(())
}

/// Renders a parameter value compactly: `64`, `2ms`, `producer=0 consumer=1`, `none`.
pub fn display_value(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) if t.is_empty() => "none".into(),
        toml::Value::Table(t) => t
            .iter()
            .map(|(k, v)| format!("{k}={}", display_value(v)))
            .collect::<Vec<_>>()
            .join(" "),
        toml::Value::Array(a) => a.iter().map(display_value).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// `capacity=8, every=1ms` — the short form used in run ids and tables.
pub fn render_params(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={v}", short_axis(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The last segment of an axis path: `queue.capacity` → `capacity`.
pub fn short_axis(axis: &str) -> &str {
    axis.rsplit('.').next().unwrap_or(axis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> MachineLimits {
        MachineLimits::cpus(vec![0, 1])
    }

    #[test]
    fn default_scenario_is_valid() {
        let e = Experiment::load(DEFAULT_SCENARIO, "default", &[], &limits()).unwrap();
        assert!(e.run_count() >= 1);
    }

    #[test]
    fn a_sweep_over_max_runs_is_refused_before_its_points_are_built() {
        // 10⁴ × 10⁴ values: building the points allocated until the process aborted.
        let values: Vec<String> = (1..=10_000).map(|v| v.to_string()).collect();
        let list = values.join(", ");
        let text = format!("[sweep]\n\"queue.capacity\" = [{list}]\n\"pacing.batch\" = [{list}]\n");
        let err = Experiment::load(&text, "t.toml", &[], &limits())
            .unwrap_err()
            .to_string();
        assert!(err.contains("100000000 runs"), "{err}");
        assert!(err.contains("run.max_runs"), "{err}");
        let raised = [Override::parse("run.max_runs=20").unwrap()];
        let small = "[run]\nreplicates = 2\n[sweep]\n\"queue.capacity\" = [64, 8, 4]\n";
        assert!(Experiment::load(small, "t.toml", &[], &limits()).is_ok());
        let lowered = [Override::parse("run.max_runs=5").unwrap()];
        assert!(Experiment::load(small, "t.toml", &lowered, &limits()).is_err());
        assert!(Experiment::load(small, "t.toml", &raised, &limits()).is_ok());
    }

    #[test]
    fn sweep_is_a_cartesian_product_in_file_order() {
        let text = "[sweep]\n\"queue.capacity\" = [64, 8]\n\"queue.pin\" = [{}, {producer = 0, consumer = 1}]\n";
        let e = Experiment::load(text, "t.toml", &[], &limits()).unwrap();
        let params: Vec<_> = e.points.iter().map(|p| render_params(&p.params)).collect();
        assert_eq!(
            params,
            [
                "capacity=64, pin=none",
                "capacity=64, pin=producer=0 consumer=1",
                "capacity=8, pin=none",
                "capacity=8, pin=producer=0 consumer=1"
            ]
        );
    }

    #[test]
    fn a_sweep_of_a_section_the_system_does_not_read_is_refused() {
        // The embedded default sweeps `queue.ring`; another system does not read [queue].
        let rpc = [Override::parse("system=\"rpc\"").unwrap()];
        let err = Experiment::load(DEFAULT_SCENARIO, "default", &rpc, &limits())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sweep.\"queue.ring\"")
                && err.contains("sweeps [queue], which system = \"rpc\" does not read")
                && err.contains("--set 'sweep={}'"),
            "{err}"
        );
        let no_sweep = [rpc[0].clone(), Override::parse("sweep={}").unwrap()];
        assert!(Experiment::load(DEFAULT_SCENARIO, "default", &no_sweep, &limits()).is_ok());
        // Shared sections may be swept under any system; [client] is not the queue lab's.
        let paced = "system = \"rpc\"\n[sweep]\n\"pacing.per_sec\" = [1000, 2000]\n\"client.window\" = [1, 4]\n";
        assert!(Experiment::load(paced, "t.toml", &[], &limits()).is_ok());
        let queue = "[sweep]\n\"client.window\" = [1, 4]\n";
        assert!(Experiment::load(queue, "t.toml", &[], &limits()).is_err());
    }

    #[test]
    fn unknown_key_names_line_and_valid_keys() {
        let err = Experiment::load(
            "[queue]\ncapacity = 8\ncapacty = 9\n",
            "q.toml",
            &[],
            &limits(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("q.toml: "), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(
            err.contains("unknown field `capacty`") && err.contains("`capacity`"),
            "{err}"
        );
    }

    #[test]
    fn bad_sweep_value_names_the_point() {
        let text = "[sweep]\n\"queue.capacity\" = [8, 0]\n";
        let err = Experiment::load(text, "q.toml", &[], &limits())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`queue.capacity` is 0") && err.contains("capacity=0"),
            "{err}"
        );
    }

    #[test]
    fn overrides_set_fields_and_sweeps() {
        let o = [
            Override::parse("queue.capacity=8").unwrap(),
            Override::parse("sweep.pacing.every=[\"1ms\", \"0\"]").unwrap(),
            Override::parse("pacing.mode=interval").unwrap(),
        ];
        let e = Experiment::load("", "t", &o, &limits()).unwrap();
        assert_eq!(e.points.len(), 2);
        let crate::scenario::System::Queue(q) = &e.points[0].scenario.system else {
            panic!("a queue scenario")
        };
        assert_eq!(q.capacity, 8);
        assert_eq!(
            e.points[1].scenario.pacing,
            crate::pacing::Pacing::Immediate
        );
    }

    #[test]
    fn the_annotated_template_loads_and_each_system_section_does_once_uncommented() {
        let e = Experiment::load(FULL_SCENARIO, "full", &[], &limits()).unwrap();
        assert_eq!(e.points.len(), 2);
        // The block of `system`, and the client block for request/response systems.
        let block = |title: &str| -> String {
            let start = FULL_SCENARIO
                .find(title)
                .unwrap_or_else(|| panic!("{title}"));
            FULL_SCENARIO[start..]
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with("## ----") && !l.starts_with('['))
                .filter_map(|l| l.strip_prefix("# "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let active = FULL_SCENARIO
            .split("## ---- request/response")
            .next()
            .unwrap()
            .replace("system = \"queue\"", "system = \"SYSTEM\"")
            .replace("[queue]\n", "[queue_unused]\n");
        let active = &active[..active.find("[queue_unused]").unwrap()];
        for (system, title, client) in [
            ("rpc", "## ---- system = \"rpc\"", true),
            ("redis", "## ---- system = \"redis\"", true),
            ("ws-rpc", "## ---- system = \"ws-rpc\"", true),
            ("ticks", "## ---- system = \"ticks\"", false),
            ("http", "## ---- system = \"http\"", true),
            ("pubsub", "## ---- system = \"pubsub\"", false),
        ] {
            let mut text = active.replace("SYSTEM", system);
            if system == "ticks" {
                text = text.replace("per_sec = 100000", "per_sec = 1000");
            }
            if client {
                text.push_str(&block("## ---- request/response"));
                text.push('\n');
            }
            text.push_str(&block(title));
            if let Err(e) = Experiment::load(&text, system, &[], &limits()) {
                panic!("{system}: {e}\n{text}");
            }
        }
    }

    #[test]
    fn an_empty_set_removes_the_field_so_its_default_applies() {
        let text = "[queue]\ncapacity = 8\n[sweep]\n\"queue.ring\" = [\"msgbench\", \"rtrb\"]\n";
        let o = [
            Override::parse("queue.capacity=").unwrap(),
            Override::parse("sweep.queue.ring=").unwrap(),
        ];
        assert_eq!(o[0].value, None);
        let e = Experiment::load(text, "t", &o, &limits()).unwrap();
        assert!(e.axes.is_empty(), "{:?}", e.axes);
        let crate::scenario::System::Queue(q) = &e.points[0].scenario.system else {
            panic!("a queue scenario")
        };
        assert_eq!(q.capacity, 1024, "the default");
        let typo = [Override::parse("queue.capcity=").unwrap()];
        let err = Experiment::load(text, "t", &typo, &limits())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--set queue.capcity") && err.contains("capcity"),
            "{err}"
        );
    }

    #[test]
    fn load_axes_must_be_scenario_fields() {
        let ok = "[report]\nload_axes = [\"rpc.request_bytes\"]\n";
        Experiment::load(ok, "t", &[], &limits()).unwrap();
        let typo = "[report]\nload_axes = [\"queue.capcity\"]\n";
        let err = Experiment::load(typo, "t", &[], &limits())
            .unwrap_err()
            .to_string();
        assert!(err.contains("queue.capcity"), "{err}");
    }

    #[test]
    fn an_error_in_a_shorthand_flag_names_that_flag() {
        let o = [Override::from_flag(
            "--slo",
            "report.slo",
            toml::Value::String("p98 < 1ms".into()),
        )];
        let err = Experiment::load("", "t", &o, &limits())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--slo"), "{err}");
        assert!(!err.contains("--set"), "{err}");
    }

    #[test]
    fn a_set_on_a_swept_field_replaces_the_axis() {
        let text =
            "[sweep]\n\"queue.capacity\" = [64, 8]\n\"queue.ring\" = [\"msgbench\", \"rtrb\"]\n";
        let o = [Override::parse("queue.capacity=16").unwrap()];
        let e = Experiment::load(text, "t", &o, &limits()).unwrap();
        assert_eq!(e.axes, ["queue.ring"]);
        assert!(e.points.iter().all(
            |p| matches!(&p.scenario.system, crate::scenario::System::Queue(q) if q.capacity == 16)
        ));
    }

    #[test]
    fn an_invalid_value_from_the_command_line_is_blamed_on_the_flag() {
        let o = [Override::parse("queue.capacity=0").unwrap()];
        let err = Experiment::load(DEFAULT_SCENARIO, "d.toml", &o, &limits())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--set queue.capacity: "), "{err}");
        assert!(!err.contains("sweep point"), "{err}");
    }

    #[test]
    fn the_resolved_document_reproduces_the_experiment() {
        let o = [Override::parse("queue.capacity=16").unwrap()];
        let e = Experiment::load(DEFAULT_SCENARIO, "d", &o, &limits()).unwrap();
        assert!(
            e.resolved_toml.contains("when_full"),
            "defaults are written out: {}",
            e.resolved_toml
        );
        let again = Experiment::load(&e.resolved_toml, "experiment.toml", &[], &limits()).unwrap();
        assert_eq!(again.axes, e.axes);
        let scenarios = |x: &Experiment| {
            x.points
                .iter()
                .map(|p| p.scenario.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(scenarios(&again), scenarios(&e));
    }

    #[test]
    fn a_set_inside_or_around_a_swept_table_replaces_the_axis() {
        let text = "[sweep]\n\"queue.pin\" = [{}, {producer = 0, consumer = 1}]\n";
        let e = Experiment::load(
            text,
            "t",
            &[Override::parse("queue.pin.producer=1").unwrap()],
            &limits(),
        )
        .unwrap();
        assert!(e.axes.is_empty() && e.points.len() == 1);
        let text = "[sweep]\n\"queue.pin.producer\" = [0, 1]\n";
        let e = Experiment::load(
            text,
            "t",
            &[Override::parse("queue.pin={}").unwrap()],
            &limits(),
        )
        .unwrap();
        assert!(e.axes.is_empty());
    }

    #[test]
    fn experiment_wide_fields_cannot_be_swept() {
        for axis in ["run.replicates", "name"] {
            let text = format!("[sweep]\n\"{axis}\" = [1, 2]\n");
            let err = Experiment::load(&text, "t", &[], &limits())
                .unwrap_err()
                .to_string();
            assert!(err.contains("cannot be swept"), "{err}");
        }
    }

    #[test]
    fn override_with_unknown_path_is_an_error() {
        let o = [Override::parse("queue.size=8").unwrap()];
        let err = Experiment::load("", "t", &o, &limits())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--set queue.size") && err.contains("unknown field `size`"),
            "{err}"
        );
    }

    #[test]
    fn pinning_to_a_missing_cpu_is_an_error() {
        let err = Experiment::load("[queue.pin]\nproducer = 7\n", "p.toml", &[], &limits())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("queue.pin.producer") && err.contains("CPU 7") && err.contains("[0, 1]"),
            "{err}"
        );
    }
}
