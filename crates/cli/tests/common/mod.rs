//! What the binary's tests share: running msgbench, its stderr, starting one of its servers.
#![allow(dead_code)] // each test binary uses some of these

// The engine's tests' ports, shared as source: a port handed to a child is owned from the start.
#[path = "../../../engine/tests/common/ports.rs"]
pub mod ports;
#[allow(unused_imports)] // not every test binary starts a server
pub use ports::free_port;
use std::io::BufRead;
use std::process::{Child, ChildStdout, Command, Output, Stdio};

/// Runs `msgbench ARGS` to its end.
pub fn msgbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .args(args)
        .output()
        .unwrap()
}

/// What a run printed to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts `msgbench serve ARGS`; the process, its stdout after the first line, and that line
/// (which says where it listens).
pub fn serve(args: &[&str]) -> (Child, std::io::BufReader<ChildStdout>, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_msgbench"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(
        line.contains("127.0.0.1:") || line.contains("unix://"),
        "serve {args:?} printed no address: {line}"
    );
    (server, stdout, line)
}

/// `serve rpc`'s `host:port`, the last word of its first line.
pub fn rpc_address(line: &str) -> String {
    line.trim().rsplit(' ').next().unwrap().to_string()
}

/// The `ws://…` address in a WebSocket server's first line.
pub fn ws_address(line: &str) -> String {
    let start = line
        .find("ws://")
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    line[start..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect()
}
