//! `controlplane`: start and stop a local control plane (etcd + kube-apiserver, built by
//! `scripts/build-controlplane.sh`).
//!
//!   controlplane start            start in the background; kubeconfig at <cache>/dev/kubeconfig
//!   controlplane stop             stop the background control plane
//!   controlplane exec -- CMD...   start, run CMD with KUBECONFIG set, stop when CMD ends
//!   controlplane kubeconfig       print the background control plane's kubeconfig path

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use nlc_testenv::{ControlPlane, Options, cache_root, stop_detached};

fn usage() -> ExitCode {
    eprintln!(
        "usage: controlplane start | stop | kubeconfig | exec -- COMMAND [ARGS...]\n\
         \n\
         Binaries come from $KUBEBUILDER_ASSETS or from scripts/build-controlplane.sh's cache\n\
         ({}).",
        cache_root().display()
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("start") => start(),
        Some("stop") => stop_detached(&cache_root().join("dev")),
        Some("kubeconfig") => {
            println!("{}", cache_root().join("dev").join("kubeconfig").display());
            Ok(())
        }
        Some("exec") => match args.iter().position(|a| a == "--") {
            Some(i) if i + 1 < args.len() => exec(&args[i + 1..]),
            _ => return usage(),
        },
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("controlplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn start() -> Result<()> {
    let dir = cache_root().join("dev");
    if dir.join("pids").exists() {
        bail!("a control plane already runs from {} (run `controlplane stop` first)", dir.display());
    }
    let cp = ControlPlane::start(Options { dir: Some(dir), detached: true, ..Options::default() })?;
    println!("kube-apiserver {} at {}", cp.version, cp.server);
    println!("export KUBECONFIG={}", cp.kubeconfig.display());
    cp.detach();
    Ok(())
}

fn exec(cmd: &[String]) -> Result<()> {
    let mut cp = ControlPlane::start(Options::default())?;
    eprintln!("controlplane: kube-apiserver {} at {}; KUBECONFIG={}", cp.version, cp.server, cp.kubeconfig.display());
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("KUBECONFIG", &cp.kubeconfig)
        .status()
        .with_context(|| format!("running {}", cmd[0]));
    cp.stop();
    let status = status?;
    if !status.success() {
        bail!("{} exited with {status}", cmd[0]);
    }
    Ok(())
}
