use std::process::ExitCode;

use clap::Parser;
use node_lifecycle_controller::config::{Cli, Command, ExplainArgs, OutputFormat};
use node_lifecycle_controller::explain;
use node_lifecycle_controller::taints::MatchOptions;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => {
            if let Err(e) = node_lifecycle_controller::telemetry::init(cli.log.log_format, &cli.log.log_level) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            runtime.block_on(node_lifecycle_controller::controller::run(*args))
        }
        Command::Webhook(args) => {
            if let Err(e) = node_lifecycle_controller::telemetry::init(cli.log.log_format, &cli.log.log_level) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            runtime.block_on(node_lifecycle_controller::webhook::server::run_standalone(args))
        }
        Command::Explain(args) => runtime.block_on(run_explain(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_explain(args: ExplainArgs) -> anyhow::Result<()> {
    let ExplainArgs { node, pod, from_cluster, enable_comparison_operators, output, kube } = args;
    let (node, pod) = if from_cluster {
        let client = node_lifecycle_controller::client::client(&kube).await?;
        explain::from_cluster(client, &node, &pod).await?
    } else {
        if node == "-" && pod == "-" {
            anyhow::bail!("--node and --pod cannot both read stdin");
        }
        (explain::read_manifest(&node, "Node")?, explain::read_manifest(&pod, "Pod")?)
    };
    let opts = MatchOptions { comparison_operators: enable_comparison_operators };
    let e = explain::explain(&node, &pod, opts, jiff::Timestamp::now());
    match output {
        OutputFormat::Text => print!("{}", explain::render_text(&e)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&e)?),
    }
    Ok(())
}
