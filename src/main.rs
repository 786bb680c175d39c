#![warn(clippy::disallowed_methods)]
use std::process::ExitCode;

use node_lifecycle_controller::config::{Cli, Command};
use node_lifecycle_controller::{controller, explain, runtime, status, webhook};

fn main() -> ExitCode {
    let (Cli { log, command }, configz) = Cli::parse_effective();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match command {
        Command::Explain(args) => rt.block_on(explain::run(args)),
        Command::Status(args) => rt.block_on(status::run(*args)),
        Command::Whatif(args) => rt.block_on(node_lifecycle_controller::whatif::run(*args)),
        Command::Crds => nlc_core::admission::toleration_rules::crd_yaml()
            .and_then(|rules| Ok(format!("{rules}---\n{}", nlc_core::policy::crd_yaml()?)))
            .map(|y| print!("{y}"))
            .map_err(|problem| nlc_core::Error::Input { source_name: "CRDs".into(), problem }.into()),
        Command::Uninstall(args) => rt.block_on(node_lifecycle_controller::uninstall::run(args)),
        Command::Fence(args) => rt.block_on(node_lifecycle_controller::fencing::run(args, false)),
        Command::Unfence(args) => rt.block_on(node_lifecycle_controller::fencing::run(args, true)),
        Command::Extend(args) => rt.block_on(node_lifecycle_controller::extend::run(*args)),
        Command::Run(args) => {
            runtime::telemetry::init(&log).and_then(|()| rt.block_on(controller::run(*args, configz)))
        }
        Command::Webhook(args) => {
            runtime::telemetry::init(&log).and_then(|()| rt.block_on(webhook::run(*args, configz)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
