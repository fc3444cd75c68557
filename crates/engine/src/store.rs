//! Writes results the moment each run ends: `runs/<id>.json`, `runs/<id>.hlog`, optional
//! `runs/<id>.latencies.csv`, and `metrics.csv` rewritten whole. Every file is written to a
//! temporary name and renamed, so a crash or Ctrl-C never leaves a half-written file, and
//! nothing measured before is lost. A run's `.json` is written last: it is what makes the run
//! count as done for `--resume`.
use crate::environment::{stamp, Environment};
use crate::recorder::IntervalLatency;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use msgbench_model::metrics;
use msgbench_model::result::RunResult;
use msgbench_model::Experiment;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file that could not be written, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}; pass --out with a directory you can write to", path.display())]
pub struct StoreError {
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}

/// The result directory of one experiment invocation.
pub struct ResultStore {
    dir: PathBuf,
    axes: Vec<String>,
    /// The finished runs, in order: `metrics.csv` is rewritten whole from them (its class
    /// columns are those of every run so far).
    rows: Vec<MetricsRow>,
}

/// What `metrics.csv` needs of one run: the result without its histograms, intervals and
/// stream clients (kept small over long sweeps).
struct MetricsRow(RunResult);

impl MetricsRow {
    fn of(result: &RunResult) -> MetricsRow {
        let mut r = result.clone();
        r.histograms = Default::default();
        r.intervals = Vec::new();
        r.streams = Vec::new();
        r.connections = Vec::new();
        for c in &mut r.classes {
            c.latency_histogram = String::new();
        }
        MetricsRow(r)
    }
}

impl ResultStore {
    /// Creates `<root>/<experiment>/<stamp>/` and writes `experiment.toml` and `environment.json`.
    pub fn create(
        root: &Path,
        experiment: &Experiment,
        env: &Environment,
    ) -> Result<ResultStore, StoreError> {
        let base = root
            .join(sanitize(&experiment.name))
            .join(stamp(env.created_unix_ms / 1000));
        let mut dir = base.clone();
        let mut n = 2;
        while dir.exists() {
            dir = PathBuf::from(format!("{}-{n}", base.display()));
            n += 1;
        }
        let header = format!(
            "# Resolved experiment ({}), as run by msgbench {}.\n{}",
            experiment.source_name, env.msgbench_version, experiment.resolved_toml
        );
        let mut env_json = serde_json::to_vec_pretty(env).expect("serializable");
        env_json.push(b'\n');
        let created =
            ResultStore::create_in(&dir, experiment.axes.clone(), header.as_bytes(), &env_json);
        if created.is_err() {
            // Nothing of this experiment is on disk yet: leave no empty folder behind.
            let _ = std::fs::remove_dir_all(&dir);
        }
        created
    }

    /// Creates the directory `dir` itself (not a stamped one under it) with the given
    /// `experiment.toml` and `environment.json` (`create` picks a stamped one; `msgbench merge`
    /// names its own).
    pub fn create_in(
        dir: &Path,
        axes: Vec<String>,
        experiment_toml: &[u8],
        environment_json: &[u8],
    ) -> Result<ResultStore, StoreError> {
        let runs = dir.join("runs");
        std::fs::create_dir_all(&runs).map_err(|source| StoreError {
            path: runs.clone(),
            source,
        })?;
        let store = ResultStore {
            dir: dir.to_path_buf(),
            axes,
            rows: Vec::new(),
        };
        store.write_atomic("experiment.toml", experiment_toml)?;
        store.write_atomic("environment.json", environment_json)?;
        store.write_metrics()?;
        Ok(store)
    }

    /// Writes another file of the experiment whole or not at all, filled by `fill`.
    pub fn write_file_with(
        &self,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        self.write_atomic_with(name, fill)
    }

    /// Opens the result directory `dir` of an interrupted run of `experiment` to go on
    /// writing into it; returns the runs already there. The experiment must be the one saved
    /// in `dir/experiment.toml` (the caller loads it from there).
    pub fn open(
        dir: &Path,
        experiment: &Experiment,
    ) -> Result<(ResultStore, Vec<RunResult>), StoreError> {
        let runs_dir = dir.join("runs");
        let err = |path: &Path, source| StoreError {
            path: path.to_path_buf(),
            source,
        };
        let mut done = Vec::new();
        for entry in std::fs::read_dir(&runs_dir).map_err(|e| err(&runs_dir, e))? {
            let path = entry.map_err(|e| err(&runs_dir, e))?.path();
            // A run is done when its .json and .hlog are both there (a result written by an
            // older msgbench could have its .json without its .hlog).
            if path.extension().is_some_and(|e| e == "json") && path.with_extension("hlog").exists()
            {
                // A truncated or foreign file is not a finished run: it is run again.
                if let Ok(r) = std::fs::read_to_string(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|t| serde_json::from_str::<RunResult>(&t).map_err(|e| e.to_string()))
                {
                    done.push(r);
                }
            }
        }
        done.sort_by_key(|a| (a.point, a.replicate));
        let store = ResultStore {
            dir: dir.to_path_buf(),
            axes: experiment.axes.clone(),
            rows: done.iter().map(MetricsRow::of).collect(),
        };
        store.write_metrics()?;
        Ok((store, done))
    }

    /// Writes another file of the experiment (e.g. `search.json`) atomically.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_atomic(name, bytes)
    }

    /// The directory results go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the directory of an experiment none of whose runs was written (its first run
    /// failed: a dead server, a bad address), so no empty folder is left behind; true when it
    /// did.
    pub fn discard_if_empty(&self) -> bool {
        let runs = self.dir.join("runs");
        let empty = std::fs::read_dir(&runs).is_ok_and(|mut d| d.next().is_none());
        if empty && std::fs::remove_dir_all(&self.dir).is_ok() {
            // `results/<experiment>/` too, when this was all it held.
            if let Some(parent) = self.dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
            return true;
        }
        false
    }

    /// Points `latest` beside this directory at it (`results/<experiment>/latest`), replacing
    /// the link atomically. Best effort: a file system without symbolic links keeps none.
    pub fn mark_latest(&self) {
        // A run resumed through the link itself: point at what the link resolves to.
        let Ok(dir) = std::fs::canonicalize(&self.dir) else {
            return;
        };
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return;
        };
        let tmp = parent.join(format!(".latest.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        #[cfg(unix)]
        if std::os::unix::fs::symlink(name, &tmp).is_ok()
            && std::fs::rename(&tmp, parent.join("latest")).is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Writes one run's files and its `metrics.csv` row.
    pub fn write_run(
        &mut self,
        result: &RunResult,
        intervals: &[IntervalLatency],
        raw_latencies: &[u64],
    ) -> Result<(), StoreError> {
        let id = &result.run_id;
        // Streamed: a day of seconds is a 100 MB log.
        self.write_atomic_with(&format!("runs/{id}.hlog"), |w| {
            write_hlog(result, intervals, w)
        })?;
        if !raw_latencies.is_empty() {
            // Streamed: up to 100 M lines must not become one string in memory.
            self.write_atomic_with(&format!("runs/{id}.latencies.csv"), |w| {
                w.write_all(b"latency_ns\n")?;
                for v in raw_latencies {
                    writeln!(w, "{v}")?;
                }
                Ok(())
            })?;
        }
        // Last: a run is done (for --resume) once its .json is there, so everything it
        // names must be there before it.
        self.write_atomic(
            &format!("runs/{id}.json"),
            &serde_json::to_vec_pretty(result).expect("serializable"),
        )?;
        self.rows.push(MetricsRow::of(result));
        self.write_metrics()
    }

    fn write_metrics(&self) -> Result<(), StoreError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let runs = self.rows.iter().map(|r| &r.0);
        let classes = metrics::classes(runs.clone());
        w.write_record(metrics::header(&self.axes, &classes))
            .expect("in memory");
        for run in runs {
            w.write_record(metrics::row(run, &self.axes, &classes))
                .expect("in memory");
        }
        self.write_atomic("metrics.csv", &w.into_inner().expect("in memory"))
    }

    fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_atomic_with(name, |w| w.write_all(bytes))
    }

    /// Writes `name` whole or not at all (see [`msgbench_model::files::write_atomic`]).
    fn write_atomic_with(
        &self,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let path = self.inside(name)?;
        msgbench_model::files::write_atomic(&path, fill).map_err(|source| StoreError {
            path: path.clone(),
            source,
        })
    }

    /// `name` under the result directory, refused unless it stays there: a relative path of
    /// plain components only (no `..`, no root), whose folder, links resolved, is inside the
    /// directory. Names are msgbench's own, but a run id can come from another host's file
    /// (`merge`): this is the last guard that nothing is written outside `--out`.
    fn inside(&self, name: &str) -> Result<PathBuf, StoreError> {
        use std::path::Component;
        let path = self.dir.join(name);
        let refuse = |why: &str| StoreError {
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        };
        let relative = Path::new(name);
        if name.is_empty()
            || !relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(refuse("a file name that would leave the result directory"));
        }
        let resolved = |p: &Path| std::fs::canonicalize(p).ok();
        let folder = path.parent().and_then(resolved);
        match (folder, resolved(&self.dir)) {
            (Some(folder), Some(dir)) if folder.starts_with(&dir) => Ok(path),
            (None, _) | (_, None) => Ok(path), // not there: the write itself fails and says so
            _ => Err(refuse("a folder that links outside the result directory")),
        }
    }
}

/// The run's `.hlog`: HdrHistogram's interval log of its per-second latency histograms.
fn write_hlog(
    result: &RunResult,
    intervals: &[IntervalLatency],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_millis(result.started_unix_ms);
    // The header (comment, start and base time, legend) from HdrHistogram's own writer.
    IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "msgbench run {} ({}): latency in ns, completion - intended send",
            result.run_id, result.config
        ))
        .with_start_time(start)
        .with_base_time(start)
        .begin_log_with(&mut head, &mut serializer)
        .expect("writing to memory");
    out.write_all(&head)?;
    // Each line as HdrHistogram's writer lays it out (start, length, max with three decimals,
    // the encoded histogram), from the encoding the collector made: decoding and encoding each
    // interval again took 4 s of a one-day merge.
    for i in intervals {
        writeln!(
            out,
            "{:.3},{:.3},{:.3},{}",
            i.start_s, i.length_s, i.max_ns as f64, i.encoded
        )?;
    }
    Ok(())
}

/// Keeps names safe as path components: other characters become `_`, runs of them one (a
/// swept JSON message reads `message=_rate_10000_size_64`), at most 120 characters.
pub fn sanitize(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if msgbench_model::files::is_name_char(c) {
            c
        } else {
            '_'
        };
        if !(c == '_' && s.ends_with('_')) && s.len() < 120 {
            s.push(c);
        }
    }
    if s.len() > 1 {
        s.truncate(s.trim_end_matches('_').len().max(1));
    }
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn names_become_short_safe_path_components() {
        assert_eq!(sanitize("window=16"), "window=16");
        assert_eq!(
            sanitize(r#"message={"rate": "10000", "size": 64}"#),
            "message=_rate_10000_size_64"
        );
        assert_eq!(sanitize("../etc"), "_.._etc");
        assert_eq!(sanitize(""), "_");
        assert_eq!(sanitize("///"), "_");
        assert_eq!(sanitize(&"x".repeat(500)).len(), 120);
    }

    #[test]
    fn no_name_leaves_the_result_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let store = super::ResultStore::create_in(&dir, vec![], b"", b"{}").unwrap();
        for name in ["runs/../../x.json", "/etc/x", "../x", "runs/../../../x", ""] {
            let e = store.write_file(name, b"no").unwrap_err();
            assert_eq!(e.source.kind(), std::io::ErrorKind::InvalidInput, "{name}");
        }
        // A folder inside that links outside: refused after the link is resolved.
        std::os::unix::fs::symlink(tmp.path(), dir.join("away")).unwrap();
        assert!(store.write_file("away/x.json", b"no").is_err());
        assert!(!tmp.path().join("x.json").exists());
        store.write_file("runs/000.json", b"{}").unwrap();
    }
}
