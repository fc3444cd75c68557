//! `msgbench import omb`: an OpenMessaging Benchmark workload as a `pubsub` scenario.
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use std::process::ExitCode;

/// `msgbench import omb`: the workload read (its `${name:-default}` placeholders resolved from
/// the environment), checked, and written as a scenario that is itself checked before it is
/// printed or saved.
pub(super) fn import_omb(args: &crate::args::ImportOmbArgs) -> ExitCode {
    use msgbench_model::omb::{OmbWorkload, Target};
    use msgbench_model::pubsub::Broker;
    let source = args.workload.display().to_string();
    let text = match std::fs::read_to_string(&args.workload) {
        Ok(t) => t,
        Err(e) => return fail(EXIT_BAD_INPUT, format!("cannot read {source}: {e}")),
    };
    let text = OmbWorkload::resolve_placeholders(&text, |name| std::env::var(name).ok());
    let workload: OmbWorkload = match serde_saphyr::from_str(&text) {
        Ok(w) => w,
        Err(e) => {
            return fail(
                EXIT_BAD_INPUT,
                format!("{source} is not an OpenMessaging Benchmark workload: {e}"),
            )
        }
    };
    if let Err(e) = workload.check(&source) {
        return fail(EXIT_BAD_INPUT, e);
    }
    // The parser accepts only the registry's names.
    let broker = Broker::from_name(&args.broker).unwrap_or_default();
    let address = args
        .address
        .clone()
        .unwrap_or_else(|| broker.default_address());
    let scenario = workload.to_scenario(&source, &Target { broker, address });
    let limits = msgbench_engine::machine_limits();
    if let Err(e) =
        msgbench_model::Experiment::load(&scenario, "the imported scenario", &[], &limits)
    {
        return fail(EXIT_BAD_INPUT, format!("{source}: {e}"));
    }
    match &args.out {
        None => {
            print!("{scenario}");
            ExitCode::SUCCESS
        }
        Some(path) => {
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, scenario.as_bytes()));
            match written {
                Ok(()) => {
                    println!("{}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => fail(
                    EXIT_BAD_INPUT,
                    format!(
                        "{} exists; msgbench import never overwrites: choose another --out or remove it",
                        path.display()
                    ),
                ),
                Err(e) => fail(1, format!("cannot write {}: {e}", path.display())),
            }
        }
    }
}
