//! The README's run command without a cluster: a local control plane, the controller, a handful
//! of simulated nodes whose Leases this program keeps alive, pods with varied tolerations; then
//! one node stops, and `status -w` shows it go Unknown, its taints, the countdowns and the
//! evictions. Ctrl-C (or [`Options::stop_after`]) stops everything.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::ControlPlane;

/// The node that stops.
pub const STOPPING_NODE: &str = "demo-node-3";
const NODES: [&str; 5] = ["demo-node-1", "demo-node-2", STOPPING_NODE, "demo-node-4", "demo-node-5"];
const NAMESPACE: &str = "demo";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

pub struct Options {
    /// The `node-lifecycle-controller` binary.
    pub controller: PathBuf,
    /// Extra `run` flags.
    pub controller_args: Vec<String>,
    /// The grace period given to the controller (and to `status`).
    pub grace: Duration,
    /// When the node's kubelet stops, after the controller is ready.
    pub stop_kubelet_after: Duration,
    /// Stop on our own after this long (for tests); `None`: on Ctrl-C only.
    pub stop_after: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            controller: PathBuf::from("node-lifecycle-controller"),
            controller_args: Vec::new(),
            grace: Duration::from_secs(10),
            stop_kubelet_after: Duration::from_secs(15),
            stop_after: None,
        }
    }
}

/// Runs the demo on `cp` until Ctrl-C (or `stop_after`); stops every process it started.
pub async fn run(cp: &ControlPlane, opts: Options) -> Result<()> {
    let client = crate::client_from(&cp.kubeconfig).await?;
    let grace = format!("{}s", opts.grace.as_secs());
    setup(&client).await?;
    let alive: Arc<Mutex<Vec<&'static str>>> = Arc::new(Mutex::new(NODES.to_vec()));
    let kubelets = tokio::spawn(kubelets(client.clone(), alive.clone()));

    let log = cp.dir.join("controller.log");
    let admin = crate::free_port()?;
    let mut controller = Command::new(&opts.controller)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(["--metrics-bind-address", &format!("127.0.0.1:{admin}")])
        // The demo's own control plane and one process: plain /metrics, no probe listener.
        .args(["--metrics-secure=false", "--health-probe-bind-address=0"])
        .args(["--node-monitor-grace-period", &grace, "--node-monitor-period", "1s", "--leader-elect=false"])
        .args(&opts.controller_args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", opts.controller.display()))?;
    wait_ready(admin, &mut controller, &log).await?;
    eprintln!(
        "demo: the controller is running (grace period {grace}; its log: {}; metrics: http://127.0.0.1:{admin}/metrics).\n\
         demo: {STOPPING_NODE}'s kubelet stops in {}s. Its pods tolerate the unreachable taint for 0 s, 20 s,\n\
         demo: 45 s, 300 s (the API server's default) and forever. Ctrl-C stops everything.",
        log.display(),
        opts.stop_kubelet_after.as_secs()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut status = Command::new(&opts.controller)
        .arg("status")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(["-w", "--interval", "1s", "--node-monitor-grace-period", &grace])
        .kill_on_drop(true)
        .spawn()
        .context("starting status -w")?;

    let stop_kubelet = tokio::time::sleep(opts.stop_kubelet_after);
    let stop_after = async {
        match opts.stop_after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop_kubelet, stop_after);
    let mut stopped = false;
    let outcome = loop {
        tokio::select! {
            _ = &mut stop_kubelet, if !stopped => {
                stopped = true;
                if let Ok(mut a) = alive.lock() {
                    a.retain(|n| *n != STOPPING_NODE);
                }
            }
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = &mut stop_after => break Ok(()),
            exit = controller.wait() => break Err(anyhow::anyhow!("the controller exited ({exit:?}); its log:\n{}", tail(&log))),
            _ = status.wait() => break Ok(()),
        }
    };
    kubelets.abort();
    // Ctrl-C at a terminal reaches the whole process group; a signal sent to this process alone
    // does not: either way, every child is asked to stop, then made to.
    for child in [&mut status, &mut controller] {
        stop(child).await;
    }
    outcome
}

/// SIGTERM, then SIGKILL after 5 s.
async fn stop(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

async fn wait_ready(port: u16, child: &mut Child, log: &Path) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for _ in 0..600 {
        if let Ok(Some(exit)) = child.try_wait() {
            bail!("the controller exited ({exit}) before it was ready; its log:\n{}", tail(log));
        }
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let mut buf = String::new();
            let asked = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            if asked.is_ok() && s.read_to_string(&mut buf).await.is_ok() && buf.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the controller was not ready within 60 s; its log:\n{}", tail(log))
}

fn toleration(seconds: Option<i64>) -> Value {
    let one = |key: &str| match seconds {
        Some(s) => json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}),
        None => json!({"key": key, "operator": "Exists", "effect": "NoExecute"}),
    };
    json!([one(UNREACHABLE), one(NOT_READY)])
}

/// The nodes (Ready, in one zone), their Leases, and the pods.
async fn setup(client: &kube::Client) -> Result<()> {
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone()).create(&pp, &ns).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for name in NODES {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "topology.kubernetes.io/region": "demo", "topology.kubernetes.io/zone": "demo-a"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": Time(Timestamp::now()), "lastTransitionTime": Time(Timestamp::now())}]}
        }))?;
        Api::<Node>::all(client.clone()).create(&pp, &node).await?;
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(Timestamp::now())}
        }))?;
        leases.create(&pp, &lease).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let on_stopping = [
        ("evicted-at-once", toleration(Some(0))),
        ("tolerates-20s", toleration(Some(20))),
        ("tolerates-45s", toleration(Some(45))),
        ("api-server-default-300s", json!([])),
        ("tolerates-forever", toleration(None)),
    ];
    let healthy = [("web-1", "demo-node-1"), ("web-2", "demo-node-2"), ("web-4", "demo-node-4")];
    let all = on_stopping
        .into_iter()
        .map(|(name, tolerations)| (name, STOPPING_NODE, tolerations))
        .chain(healthy.into_iter().map(|(name, node)| (name, node, json!([]))));
    for (name, node, tolerations) in all {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": tolerations,
                     "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
        }))?;
        pods.create(&pp, &pod).await?;
    }
    Ok(())
}

/// Simulated kubelets: renew the Leases of the nodes in `alive` every 2 s.
async fn kubelets(client: kube::Client, alive: Arc<Mutex<Vec<&'static str>>>) {
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    loop {
        let names = alive.lock().map(|a| a.clone()).unwrap_or_default();
        for name in names {
            let patch = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
            let _ = leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
