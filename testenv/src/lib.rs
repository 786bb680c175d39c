//! A real local Kubernetes control plane -- `etcd` and `kube-apiserver` built from source by
//! `scripts/build-controlplane.sh` -- for integration tests, benchmarks and local runs.
//!
//! One control plane per test binary ([`shared`]): started on first use, reused by every test in
//! the binary, torn down when the process ends however it ends (a watchdog process holds a pipe
//! to us; when the pipe closes it kills the servers and removes the temporary directory). Each
//! test gets its own `kube::Client` (a client is tied to the tokio runtime that built it) and
//! unique names ([`unique`]), because nothing is ever garbage-collected here.
//!
//! Missing binaries are an error that names the command that builds them: tests never skip.

pub mod demo;
pub mod fault;
pub mod pki;

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use pki::Pki;

/// The command that builds the binaries, named in every "not found" error.
pub const BUILD_COMMAND: &str = "scripts/build-controlplane.sh";

/// Where the build script puts its output: `$NLC_CACHE_DIR`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/node-lifecycle-controller`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("NLC_CACHE_DIR") {
        return dir.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("node-lifecycle-controller")
}

/// The directory holding `kube-apiserver`, `etcd` (and `kube-controller-manager` when built
/// here): `$KUBEBUILDER_ASSETS` (the envtest convention) or the build script's output.
pub fn assets_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("KUBEBUILDER_ASSETS") {
        Some(d) => PathBuf::from(d),
        None => cache_root().join("current"),
    };
    for bin in ["kube-apiserver", "etcd"] {
        let p = dir.join(bin);
        if !p.is_file() {
            bail!(
                "{} not found: the test control plane is not built. Run `{BUILD_COMMAND}` (10-25 min cold, \
                 seconds when cached) or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd",
                p.display()
            );
        }
    }
    Ok(dir)
}

/// A tool the build script builds beside the control plane (`kustomize`, `helm`), by path.
pub fn tool(name: &str) -> Result<PathBuf> {
    let p = cache_root().join("tools").join(name);
    if !p.is_file() {
        bail!("{} not found: run `{BUILD_COMMAND}`, which builds it from its Go module", p.display());
    }
    Ok(p)
}

/// Options for [`ControlPlane::start`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Extra `kube-apiserver` flags, e.g. `--disable-admission-plugins=...`; a later flag of the
    /// same name overrides the default.
    pub apiserver_args: Vec<String>,
    /// Directory for PKI, data, logs and kubeconfig; a fresh temporary one when `None`.
    pub dir: Option<PathBuf>,
    /// Keep running after this process exits (for `controlplane start`); stop with
    /// [`stop_detached`].
    pub detached: bool,
    /// Write an audit log of every write (metadata level) to `<dir>/audit.log`
    /// ([`ControlPlane::audit_writes`]).
    pub audit: bool,
}

/// One write as the API server's audit log records it.
#[derive(Clone, Debug)]
pub struct AuditedWrite {
    pub user: String,
    pub user_agent: String,
    pub verb: String,
    /// `pods`, `nodes`, `leases`, ... with `/status`, `/eviction` for subresources.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub received: jiff::Timestamp,
    pub completed: jiff::Timestamp,
}

pub struct ControlPlane {
    pub dir: PathBuf,
    /// Admin (system:masters) kubeconfig.
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// `gitVersion` reported by `/version`.
    pub version: String,
    pub pki: Pki,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    watchdog: Option<(Child, ChildStdin)>,
    /// How the API server was started, to start it again ([`ControlPlane::restart_apiserver`]).
    apiserver_cmd: (PathBuf, Vec<String>),
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn log_file(dir: &Path, name: &str) -> Result<Stdio> {
    let f = std::fs::File::create(dir.join(format!("{name}.log")))?;
    Ok(Stdio::from(f))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes a kubeconfig for `server` authenticating with a client certificate.
pub fn write_kubeconfig(path: &Path, server: &str, ca: &Path, cert: &Path, key: &Path, user: &str) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nlc-testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
         users:\n- name: {user}\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
         contexts:\n- name: nlc-testenv\n  context:\n    cluster: nlc-testenv\n    user: {user}\n\
         current-context: nlc-testenv\n",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Builds a client from a kubeconfig file. Call it inside the runtime that will use the client.
pub async fn client_from(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver on free loopback ports and waits until the API server is
    /// ready (`/readyz` 200, early 429s retried, namespace `kube-node-lease` present). Blocking;
    /// safe to call from inside an async runtime.
    pub fn start(opts: Options) -> Result<Self> {
        let assets = assets_dir()?;
        let mut last_err = None;
        // A free port can be taken between our probe and the server's bind: try again.
        for _ in 0..3 {
            match Self::start_once(&assets, &opts) {
                Ok(cp) => return Ok(cp),
                Err(e) => {
                    note(&format!("control plane failed to start, retrying: {e:#}"));
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("control plane did not start")))
    }

    fn start_once(assets: &Path, opts: &Options) -> Result<Self> {
        let dir = work_dir(opts)?;
        let pki = Pki::create(&dir.join("pki"))?;
        let admin = pki.client("admin", "nlc-testenv-admin", &["system:masters"])?;
        let (etcd_port, etcd_peer, api_port) = (free_port()?, free_port()?, free_port()?);
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &server, &pki.ca_cert, &admin.cert, &admin.key, "admin")?;

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let mut etcd = spawn_etcd(assets, &dir, &etcd_url, etcd_peer)?;
        let mut args = apiserver_args(&pki, &dir, &etcd_url, api_port);
        if opts.audit {
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(
                &policy,
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
                 - level: None\n  verbs: [get, list, watch]\n- level: Metadata\n",
            )?;
            args.push(format!("--audit-policy-file={}", policy.display()));
            args.push(format!("--audit-log-path={}", dir.join("audit.log").display()));
            args.push("--audit-log-format=json".into());
            args.push("--audit-log-mode=blocking".into());
        }
        args.extend(opts.apiserver_args.iter().cloned());
        let apiserver_cmd = (assets.join("kube-apiserver"), args);
        let apiserver = match spawn_apiserver(&apiserver_cmd, &dir) {
            Ok(c) => c,
            Err(e) => {
                let _ = etcd.kill();
                return Err(e).context("starting kube-apiserver");
            }
        };

        std::fs::write(dir.join("pids"), format!("{} {}\n", etcd.id(), apiserver.id()))?;
        let watchdog = if opts.detached { None } else { Some(spawn_watchdog(&dir)?) };
        let mut cp = Self {
            dir,
            kubeconfig,
            server,
            version: String::new(),
            pki,
            etcd: Some(etcd),
            apiserver: Some(apiserver),
            watchdog,
            apiserver_cmd,
        };
        match cp.wait_ready(Duration::from_secs(120)) {
            Ok(version) => {
                cp.version = version;
                // Straight to stderr, past libtest's capture: the CI log shows the version.
                note(&format!("kube-apiserver {} ready at {} (dir {})", cp.version, cp.server, cp.dir.display()));
                Ok(cp)
            }
            Err(e) => {
                let logs = tail(&cp.dir.join("kube-apiserver.err.log"), 30);
                let etcd_logs = tail(&cp.dir.join("etcd.err.log"), 10);
                cp.stop();
                Err(e.context(format!("kube-apiserver log tail:\n{logs}\netcd log tail:\n{etcd_logs}")))
            }
        }
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<String> {
        let kubeconfig = self.kubeconfig.clone();
        let deadline = Instant::now() + timeout;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Probe on a private runtime in its own thread (callers may be inside a runtime), while
        // this thread watches the servers so that an early exit fails at once.
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || -> Result<String> {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                rt.block_on(async move {
                    let client = client_from(&kubeconfig).await?;
                    let mut last = String::from("no answer yet");
                    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                        match probe(&client).await {
                            Ok(version) => return Ok(version),
                            Err(e) => last = format!("{e:#}"),
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    bail!("kube-apiserver not ready within {timeout:?}: {last}")
                })
            })
        };
        let mut exited = None;
        while !handle.is_finished() {
            for (name, child) in [("etcd", &mut self.etcd), ("kube-apiserver", &mut self.apiserver)] {
                if let Some(c) = child
                    && let Ok(Some(status)) = c.try_wait()
                {
                    exited = Some(format!("{name} exited early with {status}"));
                }
            }
            if exited.is_some() {
                stop.store(true, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let result = handle.join().map_err(|_| anyhow!("readiness thread panicked"))?;
        match exited {
            Some(msg) => Err(anyhow!(msg)),
            None => result,
        }
    }

    /// Every write the audit log has recorded so far (with [`Options::audit`]), in the order
    /// the API server received them.
    pub fn audit_writes(&self) -> Result<Vec<AuditedWrite>> {
        let text = std::fs::read_to_string(self.dir.join("audit.log")).context("no audit log (Options::audit)")?;
        let mut out = Vec::new();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            if v["stage"] != "ResponseComplete" {
                continue;
            }
            let s = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or_default().to_owned();
            let t = |p: &str| s(p).parse::<jiff::Timestamp>().unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let sub = s("/objectRef/subresource");
            let resource =
                if sub.is_empty() { s("/objectRef/resource") } else { format!("{}/{sub}", s("/objectRef/resource")) };
            out.push(AuditedWrite {
                user: s("/user/username"),
                user_agent: s("/userAgent"),
                verb: s("/verb"),
                resource,
                namespace: s("/objectRef/namespace"),
                name: s("/objectRef/name"),
                code: v
                    .pointer("/responseStatus/code")
                    .and_then(|c| c.as_u64())
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
                received: t("/requestReceivedTimestamp"),
                completed: t("/stageTimestamp"),
            });
        }
        out.sort_by_key(|w| w.received);
        Ok(out)
    }

    /// A fresh admin client, bound to the calling runtime.
    pub async fn client(&self) -> kube::Client {
        match client_from(&self.kubeconfig).await {
            Ok(c) => c,
            Err(e) => panic!("testenv: cannot build a client from {}: {e:#}", self.kubeconfig.display()),
        }
    }

    /// A kubeconfig (and client) for `user` in `groups`, with no RBAC rights unless the test
    /// grants some.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> Result<PathBuf> {
        let stem = format!("user-{}", unique(user));
        let cert = self.pki.client(&stem, user, groups)?;
        let path = self.dir.join(format!("{stem}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.pki.ca_cert, &cert.cert, &cert.key, user)?;
        Ok(path)
    }

    /// Kills kube-apiserver (SIGKILL: a crash), waits `down`, and starts it again with the same
    /// flags, port and etcd data; returns when it is ready again, with the moment it was.
    pub fn restart_apiserver(&mut self, down: Duration) -> Result<Instant> {
        if let Some(mut old) = self.apiserver.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        std::thread::sleep(down);
        let child = spawn_apiserver(&self.apiserver_cmd, &self.dir)?;
        let etcd = self.etcd.as_ref().map_or(0, Child::id);
        std::fs::write(self.dir.join("pids"), format!("{etcd} {}\n", child.id()))?;
        self.apiserver = Some(child);
        self.wait_ready(Duration::from_secs(120))?;
        Ok(Instant::now())
    }

    /// Stops the servers and removes the directory (not for detached planes' callers).
    pub fn stop(&mut self) {
        for child in [self.apiserver.take(), self.etcd.take()].into_iter().flatten() {
            terminate(child);
        }
        if let Some((mut w, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = w.wait();
        }
        if !keep_dirs() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Leaves the servers running (detached mode): forget the children without killing them.
    pub fn detach(mut self) {
        self.etcd.take();
        self.apiserver.take();
        self.watchdog.take();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.etcd.is_some() || self.apiserver.is_some() {
            self.stop();
        }
    }
}

/// `NLC_KEEP_TESTENV=1` keeps each control plane's directory (logs, PKI) after it stops.
fn keep_dirs() -> bool {
    std::env::var_os("NLC_KEEP_TESTENV").is_some_and(|v| v == "1")
}

fn terminate(mut child: Child) {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `opts.dir` emptied, or a fresh directory under this process's temporary one.
fn work_dir(opts: &Options) -> Result<PathBuf> {
    if let Some(d) = &opts.dir {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d)?;
        return Ok(d.clone());
    }
    let base = std::env::temp_dir().join(format!("nlc-testenv-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let d = base.join(format!("cp{n}"));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn spawn_etcd(assets: &Path, dir: &Path, url: &str, peer_port: u16) -> Result<Child> {
    let peer = format!("http://127.0.0.1:{peer_port}");
    Command::new(assets.join("etcd"))
        .args(["--data-dir", &dir.join("etcd").display().to_string()])
        .args(["--listen-client-urls", url, "--advertise-client-urls", url])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .args(["--unsafe-no-fsync", "--quota-backend-bytes", "8589934592", "--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(log_file(dir, "etcd")?)
        .stderr(log_file(dir, "etcd.err")?)
        .process_group(0)
        .spawn()
        .context("starting etcd")
}

/// envtest's flag set, plus two for a single loopback host, and the Node authorizer with
/// NodeRestriction.
fn apiserver_args(pki: &Pki, dir: &Path, etcd_url: &str, port: u16) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--client-ca-file={}", pki.ca_cert.display()),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        "--endpoint-reconciler-type=none".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--service-account-issuer=https://localhost".into(),
        format!("--service-account-key-file={}", pki.sa_pub.display()),
        format!("--service-account-signing-key-file={}", pki.sa_key.display()),
        // As kubeadm and kind run it: kubelets (user system:node:<name>, group system:nodes) are
        // authorized by the Node authorizer and limited by NodeRestriction.
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        "--disable-admission-plugins=ServiceAccount".into(),
        "--allow-privileged=true".into(),
        format!("--cert-dir={}", dir.join("certs").display()),
        // Tests and benchmarks create objects fast; the defaults are meant for real clusters.
        "--max-requests-inflight=2000".into(),
        "--max-mutating-requests-inflight=1000".into(),
        "--enable-priority-and-fairness=false".into(),
        "--event-ttl=1h".into(),
        "--v=1".into(),
    ]
}

fn spawn_apiserver((bin, args): &(PathBuf, Vec<String>), dir: &Path) -> Result<Child> {
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log_file(dir, "kube-apiserver")?)
        .stderr(log_file(dir, "kube-apiserver.err")?)
        .process_group(0)
        .spawn()
        .context("starting kube-apiserver")
}

/// A watchdog in its own process group: it blocks reading a pipe from us; when this process
/// ends for any reason (panic, abort, SIGKILL) the pipe closes, and it kills the servers (whose
/// pids it reads from `dir/pids` then, so a restarted API server is covered) and removes the
/// directory. No orphans, no `unsafe`.
fn spawn_watchdog(dir: &Path) -> Result<(Child, ChildStdin)> {
    let cleanup = if keep_dirs() {
        String::new()
    } else {
        let parent = dir.parent().map(|p| format!("; rmdir '{}' 2>/dev/null", p.display())).unwrap_or_default();
        format!("rm -rf '{}'{parent}", dir.display())
    };
    // By pid, not process group: dash's `kill` builtin takes no negative pids.
    let pids = format!("$(cat '{}/pids' 2>/dev/null)", dir.display());
    let script =
        format!("read -r _ ; kill -TERM {pids} 2>/dev/null; sleep 3; kill -KILL {pids} 2>/dev/null; {cleanup}");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the watchdog")?;
    let stdin = child.stdin.take().ok_or_else(|| anyhow!("watchdog has no stdin"))?;
    Ok((child, stdin))
}

async fn probe(client: &kube::Client) -> Result<String> {
    let req = http::Request::get("/readyz").body(Vec::new())?;
    let body = client.request_text(req).await.context("GET /readyz")?;
    if body.trim() != "ok" {
        bail!("/readyz: {body}");
    }
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    ns.get("kube-node-lease").await.context("namespace kube-node-lease")?;
    let version = client.apiserver_version().await.context("GET /version")?;
    Ok(version.git_version)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique within this process (and therefore within its control plane), valid as a
/// DNS-1123 label: `<prefix>-<n>`.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let clean: String =
        prefix.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(40).collect();
    format!("{}-{n}", clean.trim_matches('-'))
}

static SHARED: OnceLock<std::result::Result<ControlPlane, String>> = OnceLock::new();

/// The control plane of this test binary, started on first call with default options.
/// Panics (failing the test loudly) when it cannot start, e.g. because the binaries are missing.
pub fn shared() -> &'static ControlPlane {
    shared_with(Options::default())
}

/// Like [`shared`], with options; only the first call's options count.
pub fn shared_with(opts: Options) -> &'static ControlPlane {
    let result = SHARED.get_or_init(|| ControlPlane::start(opts).map_err(|e| format!("{e:#}")));
    match result {
        Ok(cp) => cp,
        Err(e) => panic!("testenv: the local control plane could not start: {e}"),
    }
}

/// Stops a control plane started with `Options { detached: true, dir }`.
pub fn stop_detached(dir: &Path) -> Result<()> {
    let pids =
        std::fs::read_to_string(dir.join("pids")).with_context(|| format!("no control plane in {}", dir.display()))?;
    for pid in pids.split_whitespace() {
        let _ = Command::new("kill").args(["-TERM", pid]).status();
    }
    std::thread::sleep(Duration::from_secs(1));
    for pid in pids.split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", pid]).stderr(Stdio::null()).status();
    }
    std::fs::remove_file(dir.join("pids"))?;
    Ok(())
}

/// Writes a line to stderr directly (not through `eprintln!`, which libtest captures), so that
/// it shows in CI logs even when the test passes.
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "testenv: {msg}");
}
