//! The `msgbench` binary: everything lives in the library so tests can call it in-process.
fn main() -> std::process::ExitCode {
    msgbench::main_with_args(std::env::args_os().collect())
}
