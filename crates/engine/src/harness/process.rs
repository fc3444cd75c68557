//! An external server started for a run (`[sut] command`): spawned with `sh -c` in its own
//! process group, waited for until its TCP port accepts, measured (CPU of every process in the
//! group, from `/proc`), and stopped afterwards — SIGTERM to the group, SIGKILL after 3 s —
//! also when the run fails, is interrupted, or panics (it is stopped on drop).
use crate::error::EngineError;
use msgbench_model::sut::SutConfig;
use std::io::{Read, Seek};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A running server process group.
pub struct SutProcess {
    child: Child,
    command: String,
    log: std::fs::File,
}

impl SutProcess {
    /// Starts `config.command` and waits until `config.ready` accepts a TCP connection.
    pub fn start(config: &SutConfig, stop: &AtomicBool) -> Result<SutProcess, EngineError> {
        let fail = |problem: String| EngineError::Sut {
            command: config.command.clone(),
            problem,
        };
        if accepts(&config.ready) {
            return Err(fail(format!(
                "something already accepts connections on {} before the server was started; stop it or give the server and `sut.ready` another port",
                config.ready
            )));
        }
        let mut sut = SutProcess::spawn_with(&config.command, Some(&config.ready)).map_err(fail)?;
        let deadline = Instant::now() + config.ready_timeout;
        loop {
            if let Some(status) = sut.child.try_wait().ok().flatten() {
                return Err(fail(format!(
                    "it exited ({status}) before {} accepted connections; its output: {}",
                    config.ready,
                    sut.output_tail()
                )));
            }
            if stop.load(Ordering::Relaxed) {
                return Err(fail("interrupted while waiting for it to start".into()));
            }
            if accepts(&config.ready) {
                return Ok(sut);
            }
            if Instant::now() > deadline {
                return Err(fail(format!(
                    "{} did not accept connections within {}; its output: {}",
                    config.ready,
                    msgbench_model::duration::format(config.ready_timeout),
                    sut.output_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `command` with `sh -c` in a process group of its own, its output going to an
    /// unlinked temporary file; does not wait for anything.
    pub fn spawn(command: &str) -> Result<SutProcess, String> {
        SutProcess::spawn_with(command, None)
    }

    /// [`SutProcess::spawn`], with `$MSGBENCH_READY` set to `ready` (the address the run waits
    /// on: a scenario comparing servers starts only the one its point uses).
    pub fn spawn_with(command: &str, ready: Option<&str>) -> Result<SutProcess, String> {
        let log = tempfile_log().map_err(|e| format!("cannot create its log file: {e}"))?;
        let mut sh = Command::new("sh");
        // `$MSGBENCH` in a command is this binary (a scenario can start `serve http`).
        if let Ok(me) = std::env::current_exe() {
            sh.env("MSGBENCH", me);
        }
        if let Some(ready) = ready {
            sh.env("MSGBENCH_READY", ready);
        }
        let child = sh
            .arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log.try_clone().map_err(|e| e.to_string())?)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run `sh -c`: {e}"))?;
        Ok(SutProcess {
            child,
            command: command.to_string(),
            log,
        })
    }

    /// The process id of the shell that leads the group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU used so far by every live process of the group (user + system), ns.
    pub fn cpu_ns(&self) -> u64 {
        group_cpu_ns(self.child.id() as i32)
    }

    /// `Some(description)` when the leading process has exited.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok().flatten()?;
        let output = self.output_tail();
        Some(format!(
            "`{}` exited ({status}) during the run; its output: {output}",
            self.command
        ))
    }

    /// What the server printed, for a message: its first error line and its last 400
    /// characters ([`excerpt`]).
    pub fn output_tail(&mut self) -> String {
        let mut text = String::new();
        let _ = self.log.rewind();
        let _ = self.log.read_to_string(&mut text);
        excerpt(&text)
    }
}

/// A process's output in a line: its last 400 characters, after its first line that names an
/// error when that one is further up (Node's "Error: Cannot find module 'ws'" comes before a
/// long require stack, and the tail alone cut it off); lines joined with ` | `.
fn excerpt(text: &str) -> String {
    let last: String = {
        let tail: Vec<char> = text.chars().rev().take(400).collect();
        tail.into_iter().rev().collect()
    };
    let last = last.trim();
    if last.is_empty() {
        return "(nothing)".into();
    }
    let names_an_error = |line: &&str| {
        let l = line.to_ascii_lowercase();
        [
            "error",
            "cannot",
            "not found",
            "no such",
            "denied",
            "refused",
        ]
        .iter()
        .any(|w| l.contains(w))
    };
    let first_error = text.lines().map(str::trim).find(names_an_error);
    let joined = last.replace('\n', " | ");
    match first_error {
        Some(e) if !last.contains(e) => {
            let e: String = e.chars().take(300).collect();
            format!("{e} | … | {joined}")
        }
        _ => joined,
    }
}

impl Drop for SutProcess {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() && !group_alive(-group) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn tempfile_log() -> std::io::Result<std::fs::File> {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "msgbench-sut-{}-{}.log",
        std::process::id(),
        crate::clock::now_ns()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    // Unlinked at once: the open handle keeps it readable, nothing is left behind.
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

/// True when `address` (`host:port` or `unix:///path`) accepts a connection now.
pub fn accepts(address: &str) -> bool {
    use std::net::ToSocketAddrs;
    if address.starts_with(crate::net::endpoint::UNIX_SCHEME) {
        return crate::net::endpoint::Endpoint::resolve(address).is_some_and(|e| e.accepts());
    }
    address
        .to_socket_addrs()
        .map(|mut addrs| {
            addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok())
        })
        .unwrap_or(false)
}

/// `(pgrp, utime + stime ticks)` of every process, read from `/proc/<pid>/stat`.
fn processes() -> impl Iterator<Item = (i32, u64)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            name.to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The command name may hold spaces and parentheses: fields start after the last ')'.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            // After the name: state(3) ppid(4) pgrp(5) ... utime(14) stime(15), 1-based.
            let pgrp = fields.get(2)?.parse().ok()?;
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((pgrp, utime + stime))
        })
}

fn group_cpu_ns(pgrp: i32) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    processes()
        .filter(|(g, _)| *g == pgrp)
        .map(|(_, ticks)| ticks * 1_000_000_000 / hz)
        .sum()
}

fn group_alive(pgrp: i32) -> bool {
    processes().any(|(g, _)| g == pgrp)
}

#[cfg(test)]
mod excerpt_tests {
    use super::excerpt;

    #[test]
    fn the_first_error_line_is_kept_before_a_long_tail() {
        // Issue 44: the tail of Node's output cut off the line naming the missing module.
        let mut out = String::from("node:internal/modules/cjs/loader:1228\n  throw err;\n\nError: Cannot find module 'ws'\nRequire stack:\n");
        for i in 0..40 {
            out.push_str(&format!("- /srv/app/node_modules/lib/file{i}.js\n"));
        }
        let e = excerpt(&out);
        assert!(
            e.starts_with("Error: Cannot find module 'ws' | … | "),
            "{e}"
        );
        assert!(e.ends_with("file39.js"), "{e}");
        assert_eq!(excerpt("  \n"), "(nothing)");
        let short = "ModuleNotFoundError: No module named 'flask'";
        assert_eq!(excerpt(short), short);
    }
}
