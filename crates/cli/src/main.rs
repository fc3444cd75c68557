//! The `msgbench` binary: everything lives in the library so tests can call it in-process.
fn main() -> std::process::ExitCode {
    quiet_on_closed_stdout();
    msgbench::main_with_args(std::env::args_os().collect())
}

/// `msgbench check … | head` closes stdout early. Rust ignores SIGPIPE (so that a peer closing
/// a socket is an error, not a death), which turns the next `println!` into a panic with a
/// backtrace. Results are on disk before anything is printed, so a reader that left is not a
/// failure of msgbench: exit as a SIGPIPE'd process would (141), silently.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
