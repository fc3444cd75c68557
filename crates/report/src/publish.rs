//! Writes every report of a result directory from its files alone: `report.md`,
//! `report.html` and one `<chart>.svg` per chart. The SLO for advice comes from the caller
//! (`--slo`) or from `[report] slo` in the directory's `experiment.toml`.
use crate::load::{load_dir, LoadError};
use msgbench_model::slo::Slo;
use std::path::{Path, PathBuf};

/// Why the reports could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The results could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The SLO does not parse.
    #[error("{0}")]
    Slo(String),
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
}

/// The SLO saved with the experiment (`[report] slo`), if any.
pub fn saved_slo(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("experiment.toml")).ok()?;
    let doc: toml::Table = text.parse().ok()?;
    doc.get("report")?.get("slo")?.as_str().map(String::from)
}

/// Writes the reports of `dir`; returns the paths written, `report.md` first.
pub fn publish(dir: &Path, slo: Option<&str>) -> Result<Vec<PathBuf>, PublishError> {
    let runs = load_dir(dir)?;
    let slo_text = slo.map(String::from).or_else(|| saved_slo(dir));
    let slo = slo_text
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(PublishError::Slo)?;
    let search = crate::search::section(dir);
    // A search's steps are not a sweep: its answer is in the Search section, not a knee.
    let advice = if search.is_some() {
        Vec::new()
    } else {
        crate::advice::advise(&runs, slo.as_ref(), &crate::advice::marked_load_axes(dir))
    };
    let charts = crate::charts::charts(&runs, &advice, slo.as_ref());
    let environment = crate::environment::read(dir);
    let checks = msgbench_model::threshold::check_all(&crate::thresholds::saved(dir), &runs);
    let write = |name: &str, text: &str| -> Result<PathBuf, PublishError> {
        let path = dir.join(name);
        // Whole or not at all: a full disk must not replace a good report with half of one.
        let written = msgbench_model::files::write_atomic(&path, |w| w.write_all(text.as_bytes()));
        written.map_err(|source| PublishError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    };
    let mut written = vec![write(
        "report.md",
        &format!(
            "{}{}{}",
            crate::markdown::render(&runs, &advice, &environment),
            crate::thresholds::markdown(&checks),
            search.as_ref().map(|s| s.markdown.as_str()).unwrap_or("")
        ),
    )?];
    written.push(write(
        "report.html",
        &crate::html::render(
            &runs,
            &advice,
            &charts,
            slo_text.as_deref(),
            &format!(
                "{}{}",
                crate::thresholds::html(&checks, crate::html::escape),
                search.as_ref().map(|s| s.html.as_str()).unwrap_or("")
            ),
            &environment,
        ),
    )?);
    for c in &charts {
        written.push(write(&format!("{}.svg", c.name), &c.svg)?);
    }
    // A chart this report no longer has (e.g. no advice after a re-report) must not linger.
    for stale in crate::charts::ALL_NAMES {
        if !charts.iter().any(|c| c.name == *stale) {
            let _ = std::fs::remove_file(dir.join(format!("{stale}.svg")));
        }
    }
    Ok(written)
}
