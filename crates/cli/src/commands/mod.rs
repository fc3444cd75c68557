//! One file per subcommand; each turns flags into a validated experiment first, so bad
//! input fails before anything is measured or written. This file only dispatches.
mod check;
mod compare;
mod import_omb;
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

pub fn dispatch(cli: Cli) -> ExitCode {
    // Measuring commands: the HTTP/2 client the environment asks for must be one there is
    // (bad input: nothing runs).
    if matches!(cli.command, Command::Run(_) | Command::Search(_)) {
        if let Err(e) = msgbench_engine::drivers::h2_wire_socket::h2_crate_asked() {
            return fail(EXIT_BAD_INPUT, e);
        }
    }
    match cli.command {
        Command::Run(args) => run(args),
        Command::Check(args) => check(args),
        Command::Report(args) => report::report(&args.dir, args.slo.as_deref()),
        Command::Search(args) => search(args),
        Command::Compare(args) => compare_command(&args),
        Command::Serve(command) => crate::serve::serve(command),
        Command::Merge(args) => crate::distributed::merge(args),
        Command::Kube(args) => crate::distributed::kube(args),
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
