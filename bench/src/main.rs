//! Benchmarks against a real local control plane. Rerun them with `make bench-eviction`,
//! `make bench-lifecycle` and `target/release/bench webhook`; each prints its report as JSON on
//! stdout (progress goes to stderr).
//!
//! eviction:  NODES nodes x PODS pods, every node tainted NoExecute: first those whose pods
//!            tolerate for an hour (so that ~NODES x PODS timers are pending), then the TARGET
//!            nodes at once, whose pods are evicted (a third at once, two thirds with
//!            tolerationSeconds spread over 10-30 s). Reports taint -> deletion of the untolerated
//!            pods, the lateness (deletion seen minus deadline) of the timed evictions, and the
//!            controller's ready time, RSS and CPU. `--floor`: a raw client instead (floor.rs),
//!            its streaming list in protobuf or JSON (`--floor-wire`), over HTTP/2 with
//!            `--floor-http2`.
//! compare:   the table and chart of `make bench-compare` from its reports.
//! lifecycle: NODES nodes whose Leases this tool renews every LEASE_PERIOD; after a warm-up it
//!            measures the controller's CPU and RSS over STEADY seconds, then stops STOP nodes'
//!            heartbeats and reports the detection delay (Ready=Unknown seen minus last renewal
//!            minus grace).
//! webhook:   admission requests per second against the webhook pinned to one core (taskset -c 0),
//!            from CONNECTIONS keep-alive HTTPS connections, for STEADY seconds.
//! chaos:     NODES x PODS pods, a node failing every few seconds while a proxy injects 429s,
//!            500s, resets and stalls, the API server restarts and a slowloris client holds the
//!            webhook's connections: wrongful and missed evictions, lateness, RSS, relists
//!            (chaos.rs). `chaos-report` turns a run with and one without faults into a table.
//!
//! The controller under test is `--controller BIN` (default target/release/node-lifecycle-controller)
//! or, for eviction and lifecycle, with `--upstream`, kube-controller-manager from the same build
//! as the API server. Flags after `--` go to the controller under test.
//!
//! Usage:
//!
//! ```text
//! bench eviction [--nodes N] [--pods N] [--target N] [--lease-period SECS] [--controller BIN | --upstream]
//!                [-- CONTROLLER FLAGS]
//! bench lifecycle [--nodes N] [--stop N] [--steady SECS | --stop-at-start] [--lease-period SECS] [--grace DUR]
//!                 [--controller BIN | --upstream] [-- CONTROLLER FLAGS]
//! bench webhook [--connections N] [--steady SECS] [--all-plugins | --rules N] [--controller BIN]
//! bench eviction --floor [--floor-wire protobuf|json] [--floor-http2] [--nodes N] [--pods N] [--target N]
//! bench compare --runs DIR --out DIR
//! bench chaos [--nodes N] [--pods N] [--duration DUR] [--no-faults] [--controller BIN]
//! bench chaos-report --with FILE --without FILE
//! ```

mod chaos;
mod common;
mod compare;
mod eviction;
mod floor;
mod hostile;
mod lifecycle;
mod webhook;

use std::path::Path;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use nlc_testenv::{ControlPlane, Options};

use crate::eviction::EvictionArgs;
use crate::lifecycle::LifecycleArgs;
use crate::webhook::WebhookArgs;

/// Benchmarks node-lifecycle-controller against a real local control plane; prints the report as
/// JSON.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// NODES x PODS pods, every node tainted NoExecute at once: the time to the last eviction,
    /// the lateness of the timed evictions, the controller's peak RSS and CPU.
    Eviction(EvictionArgs),
    /// NODES heartbeating nodes: the controller's CPU and RSS over STEADY seconds, then the
    /// detection delay of STOP nodes whose heartbeats stop.
    Lifecycle(LifecycleArgs),
    /// Admission requests per second against the webhook pinned to one core, from CONNECTIONS
    /// keep-alive HTTPS connections for STEADY seconds.
    Webhook(WebhookArgs),
    /// Turns `make bench-compare`'s eviction reports into a markdown table and an SVG chart
    /// (no control plane).
    Compare(compare::CompareArgs),
    /// Node failures under injected API faults, API server restarts and a slowloris client:
    /// wrongful and missed evictions (chaos.rs).
    Chaos(chaos::ChaosArgs),
    /// The markdown table of a chaos run with faults beside one without (no control plane).
    ChaosReport {
        #[arg(long)]
        with: std::path::PathBuf,
        #[arg(long)]
        without: std::path::PathBuf,
    },
}

impl Scenario {
    /// The controller binary the scenario runs, which must exist; `None` with `--upstream`.
    fn controller_binary(&self) -> Option<&Path> {
        match self {
            Self::Eviction(a) => a.binary(),
            Self::Lifecycle(a) => a.under_test.binary().filter(|_| !a.floor),
            Self::Webhook(a) => Some(a.controller.as_path()),
            Self::Chaos(a) => Some(a.controller.as_path()),
            Self::Compare(_) | Self::ChaosReport { .. } => None,
        }
    }

    async fn run(&self, cp: &mut ControlPlane) -> Result<serde_json::Value> {
        match self {
            Self::Eviction(a) => eviction::run(cp, a).await,
            Self::Lifecycle(a) => lifecycle::run(cp, a).await,
            Self::Webhook(a) => webhook::run(cp, a).await,
            Self::Chaos(a) => chaos::run(cp, a).await,
            Self::Compare(a) => compare::run(a),
            Self::ChaosReport { .. } => Ok(serde_json::Value::Null),
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(bin) = cli.scenario.controller_binary()
        && !bin.is_file()
    {
        bail!("{} not found: run `cargo build --release` first (the Makefile's bench targets do)", bin.display());
    }
    if let Scenario::Compare(a) = &cli.scenario {
        println!("{}", serde_json::to_string_pretty(&compare::run(a)?)?);
        return Ok(());
    }
    if let Scenario::ChaosReport { with, without } = &cli.scenario {
        let read = |p: &Path| -> Result<serde_json::Value> { Ok(serde_json::from_str(&std::fs::read_to_string(p)?)?) };
        print!("{}", chaos::report(&read(with)?, &read(without)?));
        return Ok(());
    }
    let mut cp = ControlPlane::start(Options {
        apiserver_args: vec!["--watch-cache-sizes=pods#50000,nodes#10000,leases.coordination.k8s.io#10000".into()],
        ..Options::default()
    })?;
    eprintln!("bench: kube-apiserver {} at {}", cp.version, cp.server);
    let report = match cli.scenario.run(&mut cp).await {
        Ok(r) => r,
        Err(e) => {
            // As below: leave without waiting for the scenario's tasks.
            drop(cp);
            eprintln!("Error: {e:#}");
            std::process::exit(1)
        }
    };
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    // Stop the control plane, then leave without waiting for the runtime to wind down the
    // scenario's tasks: a chaos run once outlived its report by the 15 minutes of its timeout.
    drop(cp);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Scenario, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.scenario)
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let Scenario::Eviction(e) = parse(&["eviction"]).expect("parses") else { panic!("not eviction") };
        assert_eq!((e.nodes, e.pods, e.target), (1000, 30, 100));
        assert_eq!(e.under_test.controller, Path::new("target/release/node-lifecycle-controller"));
        assert!(!e.under_test.upstream && e.under_test.extra.is_empty());
        assert!(!e.floor && !e.floor_http2);
        assert_eq!(e.floor_wire, crate::floor::Wire::Protobuf);

        let Scenario::Lifecycle(l) = parse(&["lifecycle"]).expect("parses") else { panic!("not lifecycle") };
        assert_eq!((l.nodes, l.stop, l.steady, l.lease_period), (1000, 100, 600, 10));
        assert_eq!((l.grace.text.as_str(), l.grace.value), ("50s", Duration::from_secs(50)));

        let Scenario::Webhook(w) = parse(&["webhook"]).expect("parses") else { panic!("not webhook") };
        assert_eq!((w.connections, w.steady), (16, 600));
        assert_eq!(w.controller, Path::new("target/release/node-lifecycle-controller"));
    }

    #[test]
    fn flags_and_trailing_controller_flags() {
        let Scenario::Eviction(e) =
            parse(&["eviction", "--nodes", "5", "--upstream", "--", "--kube-api-qps", "20"]).expect("parses")
        else {
            panic!("not eviction")
        };
        assert_eq!(e.nodes, 5);
        assert!(e.under_test.upstream);
        assert_eq!(e.under_test.extra, ["--kube-api-qps", "20"]);

        let Scenario::Lifecycle(l) = parse(&["lifecycle", "--lease-period", "40", "--grace", "1m30s"]).expect("parses")
        else {
            panic!("not lifecycle")
        };
        assert_eq!((l.lease_period, l.grace.value), (40, Duration::from_secs(90)));

        let Scenario::Eviction(e) =
            parse(&["eviction", "--floor", "--floor-wire", "json", "--floor-http2"]).expect("parses")
        else {
            panic!("not eviction")
        };
        assert!(e.floor && e.floor_http2);
        assert_eq!(e.floor_wire, crate::floor::Wire::Json);
    }

    #[test]
    fn rejects_bad_values_and_foreign_flags() {
        assert!(parse(&["lifecycle", "--grace", "50"]).is_err());
        assert!(parse(&["eviction", "--stop", "5"]).is_err());
        assert!(parse(&["webhook", "--upstream"]).is_err());
        // The floor's options only with --floor.
        assert!(parse(&["eviction", "--floor-http2"]).is_err());
        assert!(parse(&["eviction", "--floor-wire", "json"]).is_err());
        assert!(parse(&["eviction", "--floor", "--floor-wire", "yaml"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
