//! Files written whole or not at all: every result and report file goes through
//! [`write_atomic`], so a full disk, a kill or a Ctrl-C never leaves a half-written file, and
//! a good file (yesterday's `report.html`) is never replaced by a truncated one.
use std::io::{self, Write};
use std::path::Path;

/// Whether `c` may stand in a name msgbench makes a file or folder of (an experiment's, a run
/// id): ASCII letters, digits and `-_.=` — never a path separator.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.=".contains(c)
}

/// Writes `path` through `fill` into a temporary file beside it, syncs it and renames it into
/// place. On any error the temporary file is removed and `path` is left as it was.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    // Dropped on every early return below: the temporary file is deleted with it.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.unwrap_or_default()))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    {
        let mut w = io::BufWriter::new(tmp.as_file_mut());
        fill(&mut w)?;
        w.flush()?;
    }
    // tempfile creates files readable by their owner only; results are for everyone.
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_data()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        write_atomic(&path, |w| w.write_all(b"good")).unwrap();
        let failed = write_atomic(&path, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "good");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("report.html")]);
    }
}
