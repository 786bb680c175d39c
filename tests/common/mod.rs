//! Shared helpers for the integration tests: a controller process scoped to the test's own
//! nodes (by label), and small builders for nodes and pods.
#![allow(dead_code)]

pub mod rng;
pub mod webhook;
pub mod yaml;

use std::collections::HashMap;
use std::collections::HashSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nlc_testenv::{ControlPlane, unique};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_node-lifecycle-controller");

/// A controller process managing only the nodes labelled `nlc-test=<scope>`.
pub struct Controller {
    child: tokio::process::Child,
    pub port: u16,
    pub scope: String,
    log: std::path::PathBuf,
}

/// The metric families the Grafana dashboard queries: the tokens of its PromQL with the
/// project's and upstream's prefixes, without `_total`, `_bucket`, `_sum` and `_count`.
pub fn dashboard_families() -> std::collections::BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("charts/node-lifecycle-controller/dashboards/node-lifecycle-controller.json");
    let dashboard: Value = serde_json::from_slice(&std::fs::read(path).expect("dashboard")).expect("dashboard JSON");
    let mut families = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            for token in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                let ours = ["nlc_", "node_collector_", "taint_eviction_", "leader_election_", "process_"];
                if ours.iter().any(|p| token.starts_with(p)) {
                    let mut family = token;
                    for suffix in ["_total", "_bucket", "_sum", "_count"] {
                        family = family.strip_suffix(suffix).unwrap_or(family);
                    }
                    families.insert(family.to_owned());
                }
            }
        }
    }
    families
}

/// Asserts that every family of the dashboard that `which` selects is in `scrape` (a real
/// `/metrics`: `# TYPE` lines name the families with series).
pub fn assert_dashboard_queries(scrape: &str, which: impl Fn(&str) -> bool) {
    let exported: HashSet<&str> = scrape.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let missing: Vec<String> =
        dashboard_families().into_iter().filter(|f| which(f) && !exported.contains(f.as_str())).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics this run does not export: {missing:?}\n{scrape}");
}

/// The flags that serve `/metrics` as plain HTTP with no probe listener (the tests scrape it
/// directly; `tests/metrics_auth` covers the secure default), unless `extra` sets them.
pub fn plain_metrics(extra: &[&str]) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if !extra.iter().any(|a| a.starts_with("--metrics-secure")) {
        flags.push("--metrics-secure=false");
    }
    if !extra.iter().any(|a| a.starts_with("--health-probe-bind-address")) {
        flags.push("--health-probe-bind-address=0");
    }
    flags
}

pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free ports (all held open at once while picked, so that none repeats). Another
/// process may still take one before it is bound again: starts retry on a fresh pick.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> =
        (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    std::array::from_fn(|i| held[i].local_addr().expect("addr").port())
}

/// How many times a process that exits before it is ready (say, its port was taken between the
/// pick and the bind) is started again on fresh ports.
pub const START_ATTEMPTS: usize = 3;

/// A process of ours that a test starts: ready once `/readyz` on its admin port answers 200.
pub trait Process {
    fn child(&mut self) -> &mut tokio::process::Child;
    /// The port that serves `/readyz`.
    fn admin_port(&self) -> u16;
    fn logs(&self) -> String;
}

/// Starts a process with `spawn` (fresh ports each time) and waits up to `timeout` for it to be
/// ready; one that exits first is started again, [`START_ATTEMPTS`] times in all. `what` names it
/// in the messages.
pub async fn start_until_ready<P: Process>(what: &str, timeout: Duration, mut spawn: impl FnMut() -> P) -> P {
    for attempt in 1..=START_ATTEMPTS {
        let mut p = spawn();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((200, _)) = http_get(p.admin_port(), "/readyz").await {
                return p;
            }
            if let Ok(Some(status)) = p.child().try_wait() {
                assert!(attempt < START_ATTEMPTS, "{what} exited ({status}) before it was ready; log:\n{}", p.logs());
                eprintln!("{what} exited ({status}) before it was ready; again:\n{}", p.logs());
                break;
            }
            assert!(Instant::now() < deadline, "{what} not ready; log:\n{}", p.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    unreachable!("every attempt returns or panics")
}

pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    status_and_body(&buf)
}

/// The status code and the body of an HTTP/1.1 response.
fn status_and_body(response: &str) -> Option<(u16, String)> {
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// A TLS connection to `127.0.0.1:port`, trusting the CA in `ca` (a test control plane's: its
/// serving certificate is the one the webhook and the metrics endpoint serve in the tests),
/// offering `alpn`.
pub async fn tls_connect(
    ca: &std::path::Path,
    port: u16,
    alpn: &[&[u8]],
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_client(ca, None, None, port, alpn).await
}

/// [`tls_connect`] presenting the client certificate `(cert, key)` (PEM files).
pub async fn tls_connect_as(
    ca: &std::path::Path,
    identity: (&std::path::Path, &std::path::Path),
    port: u16,
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_client(ca, Some(identity), None, port, &[b"http/1.1"]).await
}

async fn tls_client(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
    source: Option<u8>,
    port: u16,
    alpn: &[&[u8]],
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("cert")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls")
        .with_root_certificates(roots);
    let mut cfg = match identity {
        Some((cert, key)) => {
            let chain = rustls_pki_types::CertificateDer::pem_file_iter(cert)
                .expect("client cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert");
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).expect("client key");
            builder.with_client_auth_cert(chain, key).expect("client identity")
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = match source {
        Some(source) => {
            let socket = tokio::net::TcpSocket::new_v4().ok()?;
            socket.bind(std::net::SocketAddr::from(([127, 0, 0, source], 0))).ok()?;
            socket.connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await.ok()?
        }
        None => tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?,
    };
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").ok()?.to_owned();
    tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.ok()
}

/// [`tls_connect`] from loopback address `127.0.0.<source>` (one address per client, as pods
/// have).
pub async fn tls_connect_from(
    ca: &std::path::Path,
    source: u8,
    port: u16,
    alpn: &[&[u8]],
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_client(ca, None, Some(source), port, alpn).await
}

/// `GET path` over HTTPS (trusting `ca`) with an optional bearer token: the status and the body.
pub async fn https_get(ca: &std::path::Path, port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    https_get_from(ca, None, port, path, token).await
}

/// [`https_get`] from loopback address `127.0.0.<source>` when given.
pub async fn https_get_from(
    ca: &std::path::Path,
    source: Option<u8>,
    port: u16,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tls_client(ca, None, source, port, &[b"http/1.1"]).await?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    // The server may close without TLS's close_notify: keep what arrived.
    let _ = s.read_to_end(&mut out).await;
    status_and_body(&String::from_utf8_lossy(&out))
}

impl Controller {
    /// Starts the controller for `scope` with extra flags and waits until it is ready.
    pub async fn start(env: &ControlPlane, scope: &str, extra: &[&str]) -> Self {
        Self::start_with_kubeconfig(&env.kubeconfig, env, scope, extra).await
    }

    /// The same, with another identity.
    pub async fn start_with_kubeconfig(
        kubeconfig: &std::path::Path,
        env: &ControlPlane,
        scope: &str,
        extra: &[&str],
    ) -> Self {
        Self::start_full(kubeconfig, env, scope, extra, &[]).await
    }

    /// The same, with environment variables for the process.
    pub async fn start_full(
        kubeconfig: &std::path::Path,
        env: &ControlPlane,
        scope: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Self {
        start_until_ready("controller", Duration::from_secs(30), || Self::spawn(kubeconfig, env, scope, extra, vars))
            .await
    }

    /// Starts the controller without waiting for it to be ready (for a test whose caches
    /// cannot sync).
    pub fn spawn(
        kubeconfig: &std::path::Path,
        env: &ControlPlane,
        scope: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let log = env.dir.join(format!("controller-{scope}-{port}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        // Every controller of a test elects itself on a Lease of the test's own, unless the
        // test names one.
        let own_lease = ["--leader-elect-resource-name", scope];
        let lease: &[&str] = if extra.contains(&"--leader-elect-resource-name") { &[] } else { &own_lease };
        // Each process its own identity (one host runs them all), unless the test gives one.
        let own_instance = format!("{scope}-{port}");
        let own_instance = ["--instance", own_instance.as_str()];
        let instance: &[&str] = if extra.contains(&"--instance") { &[] } else { &own_instance };
        let child = tokio::process::Command::new(BIN)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
            .args(plain_metrics(extra))
            .args(["--node-selector", &format!("nlc-test={scope}")])
            .args(["--log-level", "info,node_lifecycle_controller=debug"])
            .args(lease)
            .args(instance)
            .args(extra)
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn controller");
        Self { child, port, scope: scope.to_owned(), log }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metrics_port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub async fn metrics(&self) -> String {
        http_get(self.port, "/metrics").await.map(|r| r.1).unwrap_or_default()
    }

    /// Kills the process (no graceful shutdown): the harshest restart.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Sends SIGTERM (a graceful shutdown, as a kubelet does).
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait()).await.ok().and_then(Result::ok)
    }

    /// Whether it leads on `lease` (its `leader_election_master_status`).
    pub async fn leads(&self, lease: &str) -> bool {
        metric(&self.metrics().await, &format!("leader_election_master_status{{name=\"{lease}\"}}")) == Some(1.0)
    }

    /// Waits up to `timeout` until it leads on `lease`; panics with its log if it does not.
    pub async fn until_leads(&self, lease: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.leads(lease).await {
            assert!(Instant::now() < deadline, "never led on {lease}:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Process for Controller {
    fn child(&mut self) -> &mut tokio::process::Child {
        &mut self.child
    }

    fn admin_port(&self) -> u16 {
        self.port
    }

    fn logs(&self) -> String {
        Controller::logs(self)
    }
}

/// A test's own namespace and node scope.
pub struct Scope {
    pub client: kube::Client,
    pub ns: String,
    pub scope: String,
}

impl Scope {
    pub async fn new(env: &ControlPlane, prefix: &str) -> Self {
        let client = env.client().await;
        let ns = unique(prefix);
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"))
            .await
            .expect("create namespace");
        Self { client, scope: ns.clone(), ns }
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates a Ready node in this scope, with `taints`.
    pub async fn node(&self, name_prefix: &str, taints: Value) -> String {
        let name = unique(&format!("{}-{name_prefix}", self.ns));
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"nlc-test": self.scope}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": Timestamp::now(), "lastTransitionTime": Timestamp::now()}]}
        }))
        .expect("node");
        self.nodes().create(&PostParams::default(), &node).await.expect("create node");
        name
    }

    /// Replaces the node's taints.
    pub async fn set_taints(&self, node: &str, taints: Value) {
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": taints}})))
            .await
            .expect("set taints");
    }

    /// Creates a pod bound to `node` with `tolerations` (and `labels`).
    /// Whether pod `name` is gone or terminating (evicted).
    pub async fn deleted(&self, name: &str) -> bool {
        let p: Option<Pod> = self.pods().get_opt(name).await.expect("get pod");
        p.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    }

    pub async fn pod(&self, name: &str, node: &str, tolerations: Value, labels: Value) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "tolerations": tolerations,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        }))
        .expect("pod");
        self.pods().create(&PostParams::default(), &pod).await.expect("create pod")
    }
}

impl Scope {
    /// Creates the PodDisruptionBudget `name` over this scope's pods labelled `app=<app>`.
    pub async fn pdb(&self, name: &str, min_available: i32, app: &str) {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}
        }))
        .expect("pdb");
        Api::<PodDisruptionBudget>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &pdb)
            .await
            .expect("create pdb");
    }

    /// Marks a pod Running and Ready, as a kubelet would (the Eviction API ignores budgets for
    /// pods that are still Pending).
    pub async fn mark_running(&self, pod: &str) {
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now_s()}]}});
        self.pods().patch_status(pod, &PatchParams::default(), &Patch::Merge(status)).await.expect("pod status");
    }
}

/// How late (in seconds) a timed eviction may be seen by a test and still count as on time. What a
/// test sees is the controller's timer, then its writes (the `DisruptionTarget` condition, the
/// delete), then the test's own pod watch, all on an API server that the whole test binary shares
/// on two cores: 1.06 s has been seen once in CI, in a run where every other test passed. Early is
/// never allowed (the 50 ms are the clocks' rounding). How late evictions are on an unloaded API
/// server is measured by the benchmarks (`timed lateness`), not here.
pub const ON_TIME: std::ops::RangeInclusive<f64> = -0.05..=1.5;

/// Whole seconds: what `timeAdded` keeps after a round trip through the API.
pub fn now_s() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("now")
}

pub fn no_execute(key: &str, added: Timestamp) -> Value {
    json!({"key": key, "effect": "NoExecute", "timeAdded": added})
}

pub fn toleration(key: &str, seconds: Option<i64>) -> Value {
    match seconds {
        Some(s) => json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}),
        None => json!({"key": key, "operator": "Exists", "effect": "NoExecute"}),
    }
}

/// Records, per pod name, the wall-clock moment its `deletionTimestamp` was first seen.
#[derive(Clone)]
pub struct Evictions {
    seen: Arc<Mutex<HashMap<String, Timestamp>>>,
    _task: Arc<tokio::task::JoinHandle<()>>,
}

impl Evictions {
    pub async fn watch(pods: Api<Pod>) -> Self {
        let seen: Arc<Mutex<HashMap<String, Timestamp>>> = Arc::default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut ready = Some(ready_tx);
                let mut stream = watcher(pods, watcher::Config::default()).boxed();
                while let Some(ev) = stream.next().await {
                    let pod = match ev {
                        Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    if pod.metadata.deletion_timestamp.is_some() {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        if let Ok(mut s) = seen.lock() {
                            s.entry(name).or_insert_with(Timestamp::now);
                        }
                    }
                }
            })
        };
        let _ = ready_rx.await;
        Self { seen, _task: Arc::new(task) }
    }

    pub fn at(&self, pod: &str) -> Option<Timestamp> {
        self.seen.lock().ok().and_then(|s| s.get(pod).copied())
    }

    /// Waits up to `timeout` for `pod` to be evicted; returns when it was.
    pub async fn wait(&self, pod: &str, timeout: Duration) -> Option<Timestamp> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.at(pod) {
                return Some(t);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Seconds from `a` to `b` (negative if `b` is earlier).
pub fn secs_between(a: Timestamp, b: Timestamp) -> f64 {
    b.duration_since(a).as_secs_f64()
}

/// Events (core/v1 view) regarding `pod` in `ns`, as (reason, message).
pub async fn pod_events(client: &kube::Client, ns: &str, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&Default::default()).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Fake kubelets: renew the Leases of the nodes in `alive` every 500 ms.
pub struct Kubelets {
    alive: Arc<Mutex<HashSet<String>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Kubelets {
    pub async fn start(client: &kube::Client, nodes: &[String]) -> Self {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        for n in nodes {
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": n},
                "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": MicroTime(Timestamp::now())}
            }))
            .expect("lease");
            leases.create(&PostParams::default(), &lease).await.expect("create lease");
        }
        let alive: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(nodes.iter().cloned().collect()));
        let task = {
            let alive = alive.clone();
            tokio::spawn(async move {
                loop {
                    let names: Vec<String> = alive.lock().map(|a| a.iter().cloned().collect()).unwrap_or_default();
                    for n in names {
                        let patch = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                        let _ = leases.patch(&n, &PatchParams::default(), &Patch::Merge(&patch)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        Self { alive, _task: task }
    }

    pub fn stop(&self, node: &str) {
        if let Ok(mut a) = self.alive.lock() {
            a.remove(node);
        }
    }

    pub fn resume(&self, node: &str) {
        if let Ok(mut a) = self.alive.lock() {
            a.insert(node.to_owned());
        }
    }
}

/// A Ready node in this scope, in zone `zone` of a region of its own (every node in the cluster
/// counts towards zone states, so tests must not share zones).
pub async fn make_node(s: &Scope, zone: &str, taints: Value) -> String {
    make_node_labelled(s, zone, taints, json!({})).await
}

/// The same, with extra labels.
pub async fn make_node_labelled(s: &Scope, zone: &str, taints: Value, labels: Value) -> String {
    let name = unique(&format!("{}-{zone}", s.ns));
    let mut all =
        json!({"nlc-test": s.scope, "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": s.scope});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": now_s(), "lastTransitionTime": now_s()}]}
    }))
    .expect("node");
    s.nodes().create(&PostParams::default(), &node).await.expect("create node");
    name
}

/// `nodes` (made in `zone` of this scope) and `neighbours` more Ready nodes there, every one's
/// kubelet started: a zone where one node can fail without the zone being judged down. Every
/// node's name (`nodes` first) and the kubelets.
pub async fn with_live_neighbours(s: &Scope, zone: &str, nodes: &[&str], neighbours: usize) -> (Vec<String>, Kubelets) {
    let mut all: Vec<String> = nodes.iter().map(|n| (*n).to_owned()).collect();
    for _ in 0..neighbours {
        all.push(make_node(s, zone, json!([])).await);
    }
    let kubelets = Kubelets::start(&s.client, &all).await;
    (all, kubelets)
}

/// The zone key of `zone` in this scope's region, as metrics label it.
pub fn zone_key(s: &Scope, zone: &str) -> String {
    format!("{}:\0:{zone}", s.scope)
}

pub async fn set_condition(s: &Scope, node: &str, type_: &str, status: &str) {
    let patch = json!({"status": {"conditions": [{"type": type_, "status": status, "reason": "Test",
        "lastHeartbeatTime": Timestamp::now(), "lastTransitionTime": now_s()}]}});
    s.nodes().patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch)).await.expect("status");
}

pub fn taint_of<'a>(node: &'a Node, key: &str, effect: &str) -> Option<&'a k8s_openapi::api::core::v1::Taint> {
    node.spec.as_ref()?.taints.as_ref()?.iter().find(|t| t.key == key && t.effect == effect)
}

pub fn ready_of(node: &Node) -> Option<k8s_openapi::api::core::v1::NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").cloned()
}

/// Calls `probe` every 50 ms until it answers `Some`, for at most `timeout`; `None` if it never
/// did. The one polling loop of the tests: a wait for something to happen, never a fixed sleep.
pub async fn eventually<T, Fut>(timeout: Duration, probe: impl FnMut() -> Fut) -> Option<T>
where
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_every(timeout, Duration::from_millis(50), probe).await
}

/// [`eventually`], polling every `every` (finer where the moment it happened is measured).
pub async fn eventually_every<T, Fut>(timeout: Duration, every: Duration, mut probe: impl FnMut() -> Fut) -> Option<T>
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `node` until `pred` holds; returns the node and when it was first seen holding.
pub async fn wait_node(
    s: &Scope,
    node: &str,
    timeout: Duration,
    pred: impl Fn(&Node) -> bool,
) -> Option<(Node, Timestamp)> {
    eventually(timeout, || async {
        let n = s.nodes().get(node).await.ok()?;
        pred(&n).then(|| (n, Timestamp::now()))
    })
    .await
}

pub async fn node_now(s: &Scope, node: &str) -> Node {
    s.nodes().get(node).await.expect("node")
}

/// The value of one metric line (`name{labels}`), if present.
pub fn metric(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

/// The sum of every series of `name` whose labels contain all of `labels` (e.g. `code="403"`).
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";

/// Flags for a fast controller: 3 s grace, a 1 s safety pass.
pub const FAST: &[&str] =
    &["--node-monitor-grace-period", "3s", "--node-startup-grace-period", "3s", "--node-monitor-period", "1s"];

/// Leader election's short durations for a fast suite: lease 4 s, renew deadline 3 s, retry
/// 500 ms.
pub const FAST_ELECTION: &[&str] = &[
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
];

/// Flags for evictions through the Eviction API, falling back to delete after 3 s of refusals.
pub const EVICT_MODE: &[&str] =
    &["--eviction-mode", "evict", "--pdb-max-wait", "3s", "--eviction-retry-max-delay", "500ms"];

/// `node-lifecycle-controller ARGS[0] --kubeconfig <env's> ARGS[1..]`, its stdout; a failure
/// fails the test with its stderr.
pub fn cli(env: &ControlPlane, args: &[&str]) -> String {
    let (ok, out, err) = cli_outcome(env, args);
    assert!(ok, "{args:?}: {err}");
    out
}

/// [`cli`] that may fail: whether it succeeded, its stdout and its stderr.
pub fn cli_outcome(env: &ControlPlane, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(BIN)
        .arg(args[0])
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(&args[1..])
        .output()
        .expect("the binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A new user (named from `prefix`) granted cluster-wide `rules` (a ClusterRole's), and a client
/// acting as it.
pub async fn user_with_rules(env: &ControlPlane, prefix: &str, rules: Value) -> (String, kube::Client) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let admin = env.client().await;
    let user = unique(prefix);
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": user}, "rules": rules})).expect("role");
    Api::<ClusterRole>::all(admin.clone()).create(&Default::default(), &role).await.expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin).create(&Default::default(), &binding).await.expect("binding");
    let client = nlc_testenv::client_from(&env.kubeconfig_for(&user, &["system:authenticated"]).expect("kubeconfig"))
        .await
        .expect("client");
    (user, client)
}

pub fn flags(extra: &[&'static str]) -> Vec<&'static str> {
    FAST.iter().chain(extra).copied().collect()
}

/// A TCP proxy on loopback that a test can cut: while cut, it forwards nothing and new
/// connections hang (a network partition, not a refused connection).
pub struct Proxy {
    pub port: u16,
    cut: Arc<std::sync::atomic::AtomicBool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let cut = cut.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let cut = cut.clone();
                    tokio::spawn(async move {
                        let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::spawn(pipe(cr, sw, cut.clone()));
                        pipe(sr, cw, cut).await;
                    });
                }
            })
        };
        Self { port, cut, _task: task }
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// A kubeconfig like `env`'s that reaches the API server through this proxy.
    pub fn kubeconfig(&self, env: &ControlPlane) -> std::path::PathBuf {
        let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
        let proxied = text.replace(&env.server, &format!("https://127.0.0.1:{}", self.port));
        let path = env.dir.join(format!("proxied-{}.kubeconfig", self.port));
        std::fs::write(&path, proxied).expect("write kubeconfig");
        path
    }
}

/// Copies bytes until either side closes; once `cut`, holds everything.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.load(std::sync::atomic::Ordering::SeqCst) {
            // A partition: nothing gets through, nothing is refused.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A `kB` field of a process's `/proc/<pid>/status` (`VmRSS`, `VmHWM`...); 0 when unreadable.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// kube-controller-manager, built with the test control plane, running only `controllers`
/// (comma-separated) with `flags`; leader election, service-account credentials and its own
/// port off; its log is `<dir>/kcm.log`.
pub fn start_kcm(
    env: &ControlPlane,
    kubeconfig: &std::path::Path,
    controllers: &str,
    flags: &[&str],
) -> tokio::process::Child {
    let kcm = nlc_testenv::assets_dir().expect("assets").join("kube-controller-manager");
    let log = std::fs::File::create(env.dir.join("kcm.log")).expect("log");
    tokio::process::Command::new(kcm)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--controllers={controllers}"))
        .args(["--leader-elect=false", "--use-service-account-credentials=false", "--secure-port=0"])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("kube-controller-manager")
}
