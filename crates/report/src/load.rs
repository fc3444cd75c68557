//! Reads a result directory (`runs/*.json`) back into `RunResult`s, with one clear error per
//! problem: no results, a truncated or foreign file, a format version this build cannot read.
use msgbench_model::result::{RunResult, SCHEMA_VERSION};
use std::path::{Path, PathBuf};

/// Why a result directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory has no `runs/*.json`.
    #[error("{} holds no results (no runs/*.json){hint}; give a directory written by `msgbench run`, e.g. results/<experiment>/latest", dir.display())]
    Empty {
        /// The directory.
        dir: PathBuf,
        /// What the directory is instead, when that helps: missing, or an experiment's folder.
        hint: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not a run result (truncated, foreign, or hand-edited).
    #[error("{} is not a msgbench run result: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A run written by another format version.
    #[error("{} has result format version {found}, this msgbench reads version {SCHEMA_VERSION}; report it with the msgbench version that wrote it (see environment.json)", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
    },
}

/// Every run of a result directory, in run-id order.
pub fn load_dir(dir: &Path) -> Result<Vec<RunResult>, LoadError> {
    let runs = dir.join("runs");
    let entries = std::fs::read_dir(&runs).map_err(|_| empty(dir))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    if paths.is_empty() {
        return Err(empty(dir));
    }
    paths.sort();
    paths.iter().map(|p| load_run(p)).collect()
}

/// [`LoadError::Empty`] for `dir`, saying when it does not exist or is an experiment's folder
/// (the one holding `latest` and the stamped result directories).
fn empty(dir: &Path) -> LoadError {
    let hint = if !dir.exists() {
        ": it does not exist".to_string()
    } else if dir.join("latest").join("runs").is_dir() {
        format!(
            ": it is an experiment's folder; its newest results are in {}",
            dir.join("latest").display()
        )
    } else {
        String::new()
    };
    LoadError::Empty {
        dir: dir.to_path_buf(),
        hint,
    }
}

/// One `runs/<id>.json`.
pub fn load_run(path: &Path) -> Result<RunResult, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let malformed = |message: String| LoadError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    // The version first, read without building the document (a `serde_json::Value` of a run
    // of a million seconds took a gigabyte): a result of another version may not parse as
    // this one, and must be told as such.
    #[derive(serde::Deserialize)]
    struct Version {
        schema_version: Option<u64>,
    }
    let version: Version = serde_json::from_str(&text)
        .map_err(|e| malformed(format!("not JSON ({e}); the file may be truncated")))?;
    match version.schema_version {
        None => return Err(malformed("no `schema_version` field".into())),
        Some(v) if v != SCHEMA_VERSION as u64 => {
            return Err(LoadError::Version {
                path: path.to_path_buf(),
                found: v,
            })
        }
        Some(_) => {}
    }
    serde_json::from_str(&text).map_err(|e| malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_directory_gets_its_own_message() {
        let tmp = tempfile::tempdir().unwrap();
        let err = load_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("holds no results"), "{err}");
        std::fs::create_dir(tmp.path().join("runs")).unwrap();
        std::fs::write(
            tmp.path().join("runs/a.json"),
            "{\"schema_version\": 1, \"run_id\": ",
        )
        .unwrap();
        let err = load_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("a.json") && err.contains("truncated"), "{err}");
        std::fs::write(
            tmp.path().join("runs/a.json"),
            "{\"name\": \"something else\"}",
        )
        .unwrap();
        assert!(load_dir(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("no `schema_version`"));
        std::fs::write(tmp.path().join("runs/a.json"), "{\"schema_version\": 99}").unwrap();
        assert!(load_dir(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("version 99"));
        std::fs::write(tmp.path().join("runs/a.json"), "{\"schema_version\": 1}").unwrap();
        assert!(load_dir(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("missing field"));
    }
}
