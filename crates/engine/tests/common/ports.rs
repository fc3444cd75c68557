//! Ports for servers the tests start, owned from the start (shared by the engine's and the
//! CLI's tests through `#[path]`).
//!
//! The old way — bind port 0, read the port, drop the listener, hand the number to a child —
//! raced: the kernel hands a port it just freed to the next `bind(0)` or outgoing connection of
//! any test running beside it, and a readiness check that only saw "something accepted"
//! then met the *other* test's server (a feed test once failed so). Here:
//!
//! - a port handed to another process comes from **below the kernel's ephemeral range**
//!   (`/proc/sys/net/ipv4/ip_local_port_range`), which no `bind(0)` and no outgoing connection
//!   ever takes;
//! - it is **reserved** for this test binary: a lock file per port (`flock`, released when the
//!   process ends, however it ends) keeps other test processes off it, and a list keeps this
//!   process's other tests off it;
//! - readiness is proved by **ownership**: the child (or a process it started) holds the
//!   listening socket on that port (`/proc/net/tcp` and `/proc/PID/fd`), never by a connect
//!   that any server would have answered.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

/// The lowest port handed out: above the well-known and registered ports most services use.
const LOWEST: u16 = 20_000;

/// A loopback port no other process or test of this binary will be handed, free now, outside
/// the ephemeral range: give it to a server that binds it.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<(u16, Option<std::fs::File>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // Below the ephemeral range, wherever it starts (32768 on Linux by default).
    let top = ephemeral_start().saturating_sub(1).max(2024);
    let lowest = LOWEST.min(top - 1000);
    let span = u32::from(top - lowest);
    // Start somewhere this process's PID picks, so that parallel test binaries seldom try the
    // same ports first.
    let seed = std::process::id().wrapping_mul(2_654_435_761) ^ (given.len() as u32 * 7919);
    for k in 0..span {
        let port = lowest + ((seed.wrapping_add(k)) % span) as u16;
        if given.iter().any(|(p, _)| *p == port) {
            continue;
        }
        let Some(lock) = reserve(port) else { continue };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push((port, lock));
            return port;
        }
    }
    panic!("no free loopback port between {lowest} and {top}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// An exclusive lock on `port` for this process's life; `None` when another process holds it.
/// A folder per user (another user's folder on a shared /tmp is not writable); where no lock
/// file can be made at all, the port is taken unlocked (the bind check still holds).
fn reserve(port: u16) -> Option<Option<std::fs::File>> {
    let dir = std::env::temp_dir().join(format!("msgbench-test-ports-{}", user_id()));
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    match file {
        Ok(file) => file.try_lock().is_ok().then_some(Some(file)),
        Err(_) => Some(None),
    }
}

/// This process's user id, from `/proc/self/status` (0 when it cannot be read).
fn user_id() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Whether `pid`, or a process it started, holds a listening TCP socket on `port`.
pub fn owns_listener(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    !inodes.is_empty() && family(pid).iter().any(|p| holds_any(*p, &inodes))
}

/// The inodes of the sockets listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN; the inode is field 9.
            let listening = f.get(3) == Some(&"0A");
            let on_port = f
                .get(1)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port {
                if let Some(inode) = f.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    inodes
}

/// `pid` and every process below it (a shell script that starts Java, say), from each
/// process's parent in `/proc/*/stat`.
fn family(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let p: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `PID (COMMAND) STATE PPID …`: the command may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut all = vec![pid];
    let mut k = 0;
    while k < all.len() {
        let p = all[k];
        all.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        k += 1;
    }
    all
}

/// Whether `pid` has one of `inodes` open.
fn holds_any(pid: u32, inodes: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    })
}

/// Waits until `child` (or a process it started) listens on `port`: `Err` with why when it
/// exits first or `timeout` passes.
pub fn wait_until_listening(child: &mut Child, port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if owns_listener(child.id(), port) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited ({status}) before listening on {port}"));
        }
        if Instant::now() >= deadline {
            return Err(format!("it did not listen on {port} within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a server with `spawn(port)` on a port of its own and waits until it listens there
/// (up to `timeout` each time); tries three ports. Panics with what went wrong, naming `what`.
pub fn start_listening(
    what: &str,
    timeout: Duration,
    mut spawn: impl FnMut(u16) -> Child,
) -> (Child, u16) {
    let mut why = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let mut child = spawn(port);
        match wait_until_listening(&mut child, port, timeout) {
            Ok(()) => return (child, port),
            Err(e) => why.push(e),
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("{what} did not start: {}", why.join("; "))
}
