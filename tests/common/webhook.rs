//! The webhook as a process, and registering it with the API server for one test's namespaces.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, PostParams};
use nlc_testenv::{ControlPlane, unique};
use serde_json::json;

use super::{BIN, START_ATTEMPTS, free_ports, http_get};

pub struct Webhook {
    pub child: tokio::process::Child,
    pub port: u16,
    pub log: std::path::PathBuf,
}

impl Webhook {
    /// Starts `webhook` with the API server's own serving certificate (issued by the test CA for
    /// 127.0.0.1) and waits until it is ready.
    pub async fn start(env: &ControlPlane, extra: &[&str]) -> Self {
        Self::start_with(env, &env.pki.serving_cert, &env.pki.serving_key, extra).await
    }

    pub async fn start_with(env: &ControlPlane, cert: &Path, key: &Path, extra: &[&str]) -> Self {
        for attempt in 1..=START_ATTEMPTS {
            let [port, admin] = free_ports::<2>();
            let log = env.dir.join(format!("webhook-{port}.log"));
            let child = tokio::process::Command::new(BIN)
                .arg("webhook")
                .arg("--kubeconfig")
                .arg(&env.kubeconfig)
                .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
                .args(["--metrics-bind-address", &format!("127.0.0.1:{admin}")])
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
            let mut w = Self { child, port, log };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some((200, _)) = http_get(admin, "/readyz").await {
                    return w;
                }
                if let Ok(Some(status)) = w.child.try_wait() {
                    assert!(
                        attempt < START_ATTEMPTS,
                        "webhook exited ({status}) before it was ready; log:\n{}",
                        w.logs()
                    );
                    eprintln!("webhook exited ({status}) before it was ready; again:\n{}", w.logs());
                    break;
                }
                assert!(Instant::now() < deadline, "webhook not ready; log:\n{}", w.logs());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        unreachable!("every attempt returns or panics")
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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
