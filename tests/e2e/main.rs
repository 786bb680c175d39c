//! The image, run as a kubelet would run the manifests' pod: `docker run --read-only --user
//! 65532`, host networking to reach the local API server, and an in-cluster identity — a
//! ServiceAccount token from the TokenRequest API for the manifests' service account, the API
//! server's CA and the namespace, mounted where a pod has them, with `KUBERNETES_SERVICE_HOST`
//! and `KUBERNETES_SERVICE_PORT` set. Two containers elect a leader; the leader evicts; killing
//! it hands over to the other, which evicts at the original deadline.
//!
//! Run by `make e2e` (needs a Docker engine and the image from `scripts/image.sh`; the image tag
//! comes from `NLC_E2E_IMAGE`). Not part of `make test`.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use nlc_testenv::{ControlPlane, shared};
use serde_json::{Value, json};

const NAMESPACE: &str = "node-lifecycle-controller";
const SERVICE_ACCOUNT: &str = "node-lifecycle-controller";
const LEASE: &str = "node-lifecycle-controller";
const KEY: &str = "example.com/evict";

fn image() -> String {
    std::env::var("NLC_E2E_IMAGE").unwrap_or_else(|_| "node-lifecycle-controller:dev".to_owned())
}

/// Applies the rendered base overlay (namespace, service account, RBAC) as a user would.
async fn apply_base(client: &kube::Client) {
    let kustomize = nlc_testenv::tool("kustomize").unwrap_or_else(|e| panic!("{e:#}"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base");
    let out = Command::new(kustomize).arg("build").arg(dir).output().expect("kustomize");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for doc in text.split("\n---\n") {
        let v: Value = serde_saphyr::from_str(doc).expect("yaml");
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Deployment" {
            continue; // no kubelet schedules it here: the containers below play its pods
        }
        let (group, version) = match v["apiVersion"].as_str().unwrap_or_default().split_once('/') {
            Some((g, ver)) => (g.to_owned(), ver.to_owned()),
            None => (String::new(), v["apiVersion"].as_str().unwrap_or_default().to_owned()),
        };
        let (ar, caps) = pinned_kind(client, &GroupVersionKind::gvk(&group, &version, &kind)).await.expect("kind");
        let obj: DynamicObject = serde_json::from_value(v).expect("object");
        let name = obj.metadata.name.clone().expect("name");
        let api: Api<DynamicObject> = match (&caps.scope, &obj.metadata.namespace) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        api.patch(&name, &PatchParams::apply("nlc-e2e").force(), &Patch::Apply(&obj)).await.expect("apply");
    }
}

/// What a kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: a bound token for the
/// service account (TokenRequest), the API server's CA, the namespace. World-readable, as the
/// container runs as 65532.
async fn service_account_dir(env: &ControlPlane, client: &kube::Client) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}})).expect("request");
    let token = sas
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("status")
        .token;
    let dir = env.dir.join("serviceaccount");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("token"), token).expect("token");
    std::fs::copy(&env.pki.ca_cert, dir.join("ca.crt")).expect("ca");
    std::fs::write(dir.join("namespace"), NAMESPACE).expect("namespace");
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(&dir).status();
    let _ = Command::new("chmod").args(["a+rx"]).arg(&env.dir).status();
    dir
}

/// A controller in a container, as the Deployment's pod runs it.
struct Container {
    name: String,
    port: u16,
}

impl Container {
    fn start(env: &ControlPlane, sa: &Path, scope: &str, name: &str) -> Self {
        let port = free_port();
        let api_port = env.server.rsplit(':').next().expect("port").to_owned();
        let name = format!("nlc-e2e-{name}-{port}");
        let out = Command::new("docker")
            .args(["run", "-d", "--name", &name, "--read-only", "--user", "65532:65532", "--network", "host"])
            .args(["-e", "KUBERNETES_SERVICE_HOST=127.0.0.1", "-e", &format!("KUBERNETES_SERVICE_PORT={api_port}")])
            .args(["-e", &format!("POD_NAME={name}"), "-e", &format!("POD_NAMESPACE={NAMESPACE}")])
            .args(["-v", &format!("{}:/var/run/secrets/kubernetes.io/serviceaccount:ro", sa.display())])
            .arg(image())
            .args(["run", "--log-format=json", "--metrics-bind-address", &format!("127.0.0.1:{port}")])
            .args(["--metrics-secure=false", "--health-probe-bind-address=0"])
            .args(["--node-selector", &format!("nlc-test={scope}")])
            .args(["--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s"])
            .args(["--leader-elect-retry-period", "500ms"])
            .output()
            .expect("docker run");
        assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
        Self { name, port }
    }

    fn logs(&self) -> String {
        let out = Command::new("docker").args(["logs", &self.name]).output().expect("docker logs");
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some((200, _)) = http_get(self.port, "/readyz").await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} not ready:\n{}", self.name, self.logs());
    }

    async fn leads(&self) -> bool {
        let metrics = http_get(self.port, "/metrics").await.map(|r| r.1).unwrap_or_default();
        metric(&metrics, &format!("leader_election_master_status{{name=\"{LEASE}\"}}")) == Some(1.0)
    }

    /// `docker kill`: SIGKILL, the node (or the container) gone at once.
    fn kill(&self) {
        let _ = Command::new("docker").args(["kill", &self.name]).output();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.name]).output();
    }
}

async fn leader_of(containers: &[Container], timeout: Duration) -> &Container {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        for c in containers {
            if c.leads().await {
                return c;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader:\n{}", containers.iter().map(Container::logs).collect::<Vec<_>>().join("\n----\n"));
}

#[tokio::test]
async fn the_image_runs_as_a_pod_evicts_and_fails_over() {
    let env = shared();
    let admin = env.client().await;
    apply_base(&admin).await;
    let sa = service_account_dir(env, &admin).await;
    let s = Scope::new(env, "e2e").await;
    let node = s.node("n", json!([])).await;
    s.pod("now", &node, json!([]), json!({})).await;
    s.pod("later", &node, json!([toleration(KEY, Some(12))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;

    let containers = [Container::start(env, &sa, &s.scope, "a"), Container::start(env, &sa, &s.scope, "b")];
    for c in &containers {
        c.wait_ready().await;
    }
    let leader = leader_of(&containers, Duration::from_secs(10)).await;
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    let at = evictions.wait("now", Duration::from_secs(10)).await.unwrap_or_else(|| panic!("{}", leader.logs()));
    assert!(secs_between(added, at) < 3.0, "untolerated pod evicted {:.3}s after the taint", secs_between(added, at));

    // The leader's container dies in the middle of the countdown: the other takes over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed = Timestamp::now();
    leader.kill();
    let standby = containers.iter().find(|c| c.name != leader.name).expect("standby");
    let deadline = Instant::now() + Duration::from_secs(8);
    while !standby.leads().await {
        assert!(Instant::now() < deadline, "no take-over:\n{}", standby.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failover = secs_between(killed, Timestamp::now());
    eprintln!("e2e: fail-over between containers took {failover:.3}s (lease 4 s)");
    let at = evictions.wait("later", Duration::from_secs(15)).await.unwrap_or_else(|| panic!("{}", standby.logs()));
    let late = secs_between(added + Duration::from_secs(12), at);
    assert!(ON_TIME.contains(&late), "evicted {late:.3}s after its deadline");
    let metrics = http_get(standby.port, "/metrics").await.map(|r| r.1).unwrap_or_default();
    assert_eq!(metric_sum(&metrics, "nlc_api_requests_total", &["code=\"403\""]), 0.0, "{metrics}");
}

/// Issue 24: `make release`'s artifacts describe what ships. The SBOM is CycloneDX and lists the
/// binary's crates at the versions of Cargo.lock (and no test-only crate); the chart is packaged
/// at the crate's version; the checksums match; the binary in the image carries its dependency
/// list (cargo auditable's `.dep-v0` section).
#[test]
fn the_release_artifacts_describe_what_ships() {
    let dist =
        PathBuf::from(std::env::var("NLC_DIST").expect("NLC_DIST: run through `make e2e`, which runs `make release`"));
    let version = env!("CARGO_PKG_VERSION");
    let sbom_path = dist.join(format!("node-lifecycle-controller-{version}.cdx.json"));
    let sbom: Value = serde_json::from_slice(&std::fs::read(&sbom_path).expect("the SBOM")).expect("SBOM JSON");
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let components: Vec<(String, String)> = sbom["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| {
            (c["name"].as_str().unwrap_or_default().to_owned(), c["version"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).expect("lock");
    let locked = |name: &str| -> Vec<String> {
        lock.split("[[package]]")
            .filter(|p| p.contains(&format!("\nname = \"{name}\"\n")))
            .filter_map(|p| {
                p.lines().find_map(|l| l.strip_prefix("version = \"")).map(|v| v.trim_end_matches('"').to_owned())
            })
            .collect()
    };
    for name in ["kube-client", "k8s-openapi", "tokio", "governor", "rustls", "tracing"] {
        let listed: Vec<&String> = components.iter().filter(|(n, _)| n == name).map(|(_, v)| v).collect();
        assert!(!listed.is_empty(), "{name} missing from the SBOM");
        for v in listed {
            assert!(locked(name).contains(v), "{name} {v} is not in Cargo.lock");
        }
    }
    for test_only in ["proptest", "base64"] {
        let shipped_too = test_only == "base64"; // kube uses it too
        assert!(shipped_too || !components.iter().any(|(n, _)| n == test_only), "{test_only} is not shipped");
    }
    let chart = dist.join(format!("node-lifecycle-controller-{version}.tgz"));
    assert!(chart.is_file(), "no packaged chart at {}", chart.display());
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).expect("SHA256SUMS");
    let out = Command::new("sha256sum").args(["--check", "SHA256SUMS"]).current_dir(&dist).output().expect("sha256sum");
    assert!(out.status.success(), "{sums}\n{}", String::from_utf8_lossy(&out.stdout));
    assert!(sums.lines().count() >= 3, "{sums}");

    let name = format!("nlc-auditable-{}", std::process::id());
    let created = Command::new("docker").args(["create", "--name", &name, &image()]).output().expect("docker create");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let bin = std::env::temp_dir().join(&name);
    let copied = Command::new("docker")
        .args(["cp", &format!("{name}:/usr/local/bin/node-lifecycle-controller")])
        .arg(&bin)
        .output()
        .expect("docker cp");
    let _ = Command::new("docker").args(["rm", &name]).output();
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    let bytes = std::fs::read(&bin).expect("the binary");
    let _ = std::fs::remove_file(&bin);
    assert!(bytes.windows(7).any(|w| w == b".dep-v0"), "the image's binary has no cargo-auditable section");
}
