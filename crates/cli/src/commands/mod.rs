//! One file per subcommand; each turns flags into a validated experiment first, so bad
//! input fails before anything is measured or written. This file only dispatches.
mod check;
mod compare;
mod import_omb;
mod one_line;
pub(crate) mod report;
mod run;
pub(crate) mod scenario;
mod search;

use crate::args::{Cli, Command};
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use check::check;
use compare::compare_command;
use import_omb::import_omb;
use msgbench_model::sweep::{DEFAULT_SCENARIO, FULL_SCENARIO};
use run::run;
use search::search;
use std::process::ExitCode;

/// The environment variable that once chose the HTTP/2 client (now `http.client`).
const OLD_CLIENT_VAR: &str = "MSGBENCH_HTTP2_CLIENT";

pub fn dispatch(cli: Cli) -> ExitCode {
    // Measuring commands: the HTTP/2 client was once chosen by this variable; a run must not
    // quietly measure with another client than the one its user asked for (nothing runs).
    if matches!(
        cli.command,
        Command::Run(_) | Command::Search(_) | Command::Http(_)
    ) {
        if let Some(v) = std::env::var_os(OLD_CLIENT_VAR) {
            return fail(
                EXIT_BAD_INPUT,
                format!(
                    "{OLD_CLIENT_VAR}={v:?} is no longer read: the HTTP/2 client is the scenario's http.client; give --set 'http.client=\"h2\"' (or \"msgbench\") and unset {OLD_CLIENT_VAR}"
                ),
            );
        }
    }
    match cli.command {
        Command::Run(args) => run(args),
        Command::Http(args) => one_line::http(args),
        Command::Redis(args) => one_line::redis(args),
        Command::Grpc(args) => one_line::grpc(args),
        Command::Ws(args) => one_line::ws(args),
        Command::Check(args) => check(args),
        Command::Report(args) => report::report(&args.dir, args.slo.as_deref()),
        Command::Search(args) => search(args),
        Command::Compare(args) => compare_command(&args),
        Command::Serve(command) => crate::serve::serve(command),
        Command::Merge(args) => crate::distributed::merge(args),
        Command::Kube(args) => crate::distributed::kube(args),
        Command::Slurm(args) => crate::slurm::slurm(args),
        Command::Import(crate::args::ImportCommand::Omb(args)) => import_omb(&args),
        Command::DefaultScenario(args) => {
            print!(
                "{}",
                if args.full {
                    FULL_SCENARIO
                } else {
                    DEFAULT_SCENARIO
                }
            );
            ExitCode::SUCCESS
        }
    }
}
