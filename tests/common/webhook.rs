//! The webhook as a process, and registering it with the API server for one test's namespaces.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, PostParams};
use nlc_testenv::{ControlPlane, unique};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::{BIN, Process, free_ports, http_get, start_until_ready};

pub struct Webhook {
    pub child: tokio::process::Child,
    pub port: u16,
    /// The admin endpoint (`/metrics`, `/readyz`).
    pub admin: u16,
    pub log: std::path::PathBuf,
}

impl Webhook {
    /// Starts `webhook` with the API server's own serving certificate (issued by the test CA for
    /// 127.0.0.1) and waits until it is ready.
    pub async fn start(env: &ControlPlane, extra: &[&str]) -> Self {
        Self::start_with(env, &env.pki.serving_cert, &env.pki.serving_key, extra).await
    }

    pub async fn start_with(env: &ControlPlane, cert: &Path, key: &Path, extra: &[&str]) -> Self {
        Self::start_as(env, &env.kubeconfig, cert, key, extra, &[]).await
    }

    /// With another kubeconfig (another identity, or through a proxy), and a command prefix
    /// (e.g. `prlimit --nofile=64`).
    pub async fn start_as(
        env: &ControlPlane,
        kubeconfig: &Path,
        cert: &Path,
        key: &Path,
        extra: &[&str],
        prefix: &[&str],
    ) -> Self {
        start_until_ready("webhook", Duration::from_secs(20), || {
            let [port, admin] = free_ports::<2>();
            let log = env.dir.join(format!("webhook-{port}.log"));
            let mut cmd = match prefix.split_first() {
                Some((first, rest)) => {
                    let mut c = tokio::process::Command::new(first);
                    c.args(rest).arg(BIN);
                    c
                }
                None => tokio::process::Command::new(BIN),
            };
            let child = cmd
                // As the image sets it (Dockerfile): two malloc arenas.
                .env("MALLOC_ARENA_MAX", "2")
                .arg("webhook")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
                .args(["--metrics-bind-address", &format!("127.0.0.1:{admin}")])
                .args(super::plain_metrics(extra))
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-private-key-file")
                .arg(key)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")))
                .kill_on_drop(true)
                .spawn()
                .expect("spawn webhook");
            Self { child, port, admin, log }
        })
        .await
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn metrics(&self) -> String {
        http_get(self.admin, "/metrics").await.map(|r| r.1).unwrap_or_default()
    }

    /// Resident memory (kB) and open file descriptors of the process.
    pub fn footprint(&self) -> (u64, usize) {
        let pid = self.child.id().unwrap_or(0);
        let rss = super::status_kb(pid, "VmRSS");
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
        (rss, fds)
    }
}

impl Process for Webhook {
    fn child(&mut self) -> &mut tokio::process::Child {
        &mut self.child
    }

    fn admin_port(&self) -> u16 {
        self.admin
    }

    fn logs(&self) -> String {
        Webhook::logs(self)
    }
}

fn ca_bundle(ca: &Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(ca).expect("ca"))
}

/// Registers the mutating webhook at `port` for namespaces labelled `<label>=<scope>`.
pub async fn register_mutating(client: &kube::Client, label: &str, scope: &str, port: u16, ca: &Path) -> String {
    let name = unique(&format!("{scope}-m"));
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "default-toleration-seconds.node-lifecycle-controller.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": ca_bundle(ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {label: scope}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2
        }]
    }))
    .expect("config");
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &cfg)
        .await
        .expect("register");
    name
}

/// Registers the validating webhook (`/validate`) at `port` for namespaces labelled
/// `<label>=<scope>`, with `failure_policy`.
pub async fn register_validating(
    client: &kube::Client,
    label: &str,
    scope: &str,
    port: u16,
    ca: &Path,
    failure_policy: &str,
) -> String {
    let name = unique(&format!("{scope}-v"));
    let cfg: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "pod-toleration-restriction.node-lifecycle-controller.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_bundle(ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {label: scope}},
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2
        }]
    }))
    .expect("config");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &cfg)
        .await
        .expect("register");
    name
}

/// One POST of `body` to `path` over `stream`; the status code of the answer, if any.
pub async fn post_on<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, path: &str, body: &[u8]) -> Option<u16> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(body).await.ok()?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).split_whitespace().nth(1)?.parse().ok()
}
