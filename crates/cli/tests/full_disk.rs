//! A full disk, for real: a small tmpfs mounted for the test (root is needed to mount one; the
//! test says so and does nothing without it). What must hold: the documented exit code (1),
//! a message naming the file, nothing half-written left behind (no temporary files), the runs
//! written before still there, and a good report never replaced by a truncated one.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left of it.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let block = vec![7u8; 4096];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn msgbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args(args)
        .output()
        .unwrap()
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn temporaries(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

#[test]
fn a_full_disk_leaves_nothing_half_written_and_exits_1() {
    let Some(disk) = Tmpfs::mount("2m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let out = disk.path().join("results");
    let out_text = out.to_str().unwrap();
    // A good result and its reports first.
    let run = [
        "run",
        "--quiet",
        "--duration",
        "200ms",
        "--warmup",
        "0",
        "--set",
        "sweep={}",
        "--out",
        out_text,
    ];
    let first = msgbench(&run);
    assert!(first.status.success(), "{first:?}");
    let result = files(&out)
        .into_iter()
        .find(|p| p.ends_with("report.html"))
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let good_html = std::fs::read(result.join("report.html")).unwrap();

    disk.fill();
    // Re-reporting on a full disk: exit 1, the good report as it was, no temporary left.
    let report = msgbench(&["report", result.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert_eq!(report.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert_eq!(
        std::fs::read(result.join("report.html")).unwrap(),
        good_html
    );
    assert_eq!(temporaries(disk.path()), Vec::<PathBuf>::new());

    // A new run on a full disk: exit 1 with the file it could not write, nothing half-written.
    let second = msgbench(&run);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert_eq!(temporaries(disk.path()), Vec::<PathBuf>::new());
    // The first result is untouched, and the failed run left no empty folder.
    assert_eq!(
        std::fs::read(result.join("report.html")).unwrap(),
        good_html
    );
    assert!(files(&result).iter().any(|p| p.ends_with("metrics.csv")));
    let folders = std::fs::read_dir(result.parent().unwrap())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "latest")
        .count();
    assert_eq!(folders, 1, "a failed run left a folder");

    // Room for the experiment's first files but not for a run's: the disk fills mid-run.
    let filler = std::fs::OpenOptions::new()
        .write(true)
        .open(disk.path().join("filler"))
        .unwrap();
    let len = filler.metadata().unwrap().len();
    filler.set_len(len.saturating_sub(24 << 10)).unwrap();
    let third = msgbench(&run);
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert_eq!(third.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
    assert_eq!(temporaries(disk.path()), Vec::<PathBuf>::new());
    // What was written is whole: every JSON file parses.
    for f in files(disk.path()) {
        if f.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                serde_json::from_str::<serde_json::Value>(&text).is_ok(),
                "{f:?}"
            );
        }
    }
}
