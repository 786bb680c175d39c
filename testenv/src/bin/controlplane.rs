//! `controlplane`: start and stop a local control plane (etcd + kube-apiserver, built by
//! `scripts/build-controlplane.sh`).
//!
//! ```text
//!   controlplane start            start in the background; kubeconfig at <cache>/dev/kubeconfig
//!   controlplane stop             stop the background control plane
//!   controlplane exec -- CMD...   start, run CMD with KUBECONFIG set, stop when CMD ends
//!   controlplane kubeconfig       print the background control plane's kubeconfig path
//!   controlplane demo --controller BIN [--stop-after SECS] [-- RUN-FLAGS...]
//!                                 start, run the controller over simulated nodes, stop one
//!                                 node, show `status -w`; Ctrl-C stops everything
//! ```

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use nlc_testenv::{ControlPlane, Options, cache_root, stop_detached};

fn usage() -> ExitCode {
    eprintln!(
        "usage: controlplane start | stop | kubeconfig | exec -- COMMAND [ARGS...]\n\
         \x20      controlplane demo --controller BIN [--stop-after SECS] [--stop-kubelet-after SECS] [-- RUN-FLAGS...]\n\
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
        Some("demo") => match demo_options(&args[1..]) {
            Ok(opts) => demo(opts),
            Err(e) => {
                eprintln!("controlplane: {e:#}");
                return usage();
            }
        },
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

fn demo_options(args: &[String]) -> Result<nlc_testenv::demo::Options> {
    let mut opts = nlc_testenv::demo::Options::default();
    let secs = |v: Option<&String>, flag: &str| -> Result<std::time::Duration> {
        let v = v.with_context(|| format!("{flag} needs a value"))?;
        let n: u64 = v.parse().with_context(|| format!("{flag} {v:?} is not a whole number of seconds"))?;
        Ok(std::time::Duration::from_secs(n))
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--controller" => opts.controller = it.next().context("--controller needs a path")?.into(),
            "--stop-after" => opts.stop_after = Some(secs(it.next(), a)?),
            "--stop-kubelet-after" => opts.stop_kubelet_after = secs(it.next(), a)?,
            "--" => {
                opts.controller_args = it.cloned().collect();
                break;
            }
            other => bail!("unknown demo argument {other:?}"),
        }
    }
    Ok(opts)
}

fn demo(opts: nlc_testenv::demo::Options) -> Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let cp = ControlPlane::start(Options::default())?;
    eprintln!("demo: kube-apiserver {} at {}; KUBECONFIG={}", cp.version, cp.server, cp.kubeconfig.display());
    let result = rt.block_on(nlc_testenv::demo::run(&cp, opts));
    drop(cp);
    eprintln!("demo: stopped; nothing left running");
    result
}
