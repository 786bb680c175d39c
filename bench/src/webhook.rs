//! The webhook scenario: admission requests per second against `node-lifecycle-controller
//! webhook` pinned to one core (taskset -c 0), from CONNECTIONS keep-alive HTTPS connections, for
//! STEADY seconds; with the latency of the requests and the webhook's CPU and peak RSS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use nlc_testenv::ControlPlane;
use serde_json::json;
use tokio_rustls::TlsConnector;

use crate::common::{DEFAULT_CONTROLLER, Measured, percentile};

#[derive(Debug, Clone, clap::Args)]
pub struct WebhookArgs {
    /// Keep-alive HTTPS connections, each sending one request after the other.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub connections: usize,
    /// Seconds to send requests for.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub steady: u64,
    /// The node-lifecycle-controller binary whose `webhook` subcommand is measured.
    #[arg(long, value_name = "BIN", default_value = DEFAULT_CONTROLLER)]
    pub controller: PathBuf,
    /// TolerationRules to create (0: DefaultTolerationSeconds alone, as before). With rules, every
    /// plugin is on (ExtendedResourceToleration, PodTolerationRestriction, the rules): each request
    /// is matched against every rule, and one of them matches the pod.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub rules: usize,
    /// Every plugin on even without rules.
    #[arg(long)]
    pub all_plugins: bool,
}

pub async fn run(cp: &ControlPlane, args: &WebhookArgs) -> Result<serde_json::Value> {
    let client = cp.client().await;
    let all_plugins = args.all_plugins || args.rules > 0;
    setup(&client, args.rules, all_plugins).await?;
    let (measured, port) = start_webhook(cp, &args.controller, all_plugins).await?;
    let connector = tls_connector(&cp.pki.ca_cert)?;
    let body = Bytes::from(admission_review());
    let stop_at = Instant::now() + Duration::from_secs(args.steady);
    let cpu0 = measured.cpu_seconds();
    let started = Instant::now();
    let mut tasks = vec![];
    for _ in 0..args.connections {
        tasks.push(tokio::spawn(send_until(connector.clone(), port, body.clone(), stop_at)));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = measured.cpu_seconds() - cpu0;
    all.sort_by(f64::total_cmp);
    Ok(json!({
        "benchmark": "webhook",
        "rules": args.rules,
        "all_plugins": all_plugins,
        "connections": args.connections, "seconds": secs, "requests": all.len(),
        "requests_per_s": all.len() as f64 / secs,
        "latency_ms": {"p50": percentile(&all, 50.0) * 1e3, "p99": percentile(&all, 99.0) * 1e3, "max": all.last().copied().unwrap_or(0.0) * 1e3},
        "webhook_cpu_cores": cpu / secs, "webhook_peak_rss_mb": measured.peak_rss_mb(),
        "body_bytes": body.len(),
    }))
}

/// The pod's namespace (the webhook knows it from its watch, as in a cluster) and `rules`
/// TolerationRules, the first of which matches the pod.
async fn setup(client: &kube::Client, rules: usize, crd: bool) -> Result<()> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shop", "labels": {"team": "shop"}}}))?;
    match Api::all(client.clone()).create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    if !crd {
        return Ok(());
    }
    let crd_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crds/tolerationrules.yaml");
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(nlc_core::explain::parse_manifest::<serde_json::Value>(
            crd_path,
            &std::fs::read_to_string(crd_path)?,
            "CustomResourceDefinition",
        )?)?;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
        client.clone(),
    )
    .patch("tolerationrules.node-lifecycle-controller.io", &PatchParams::apply("bench").force(), &Patch::Apply(&crd))
    .await?;
    let gvk = kube::core::GroupVersionKind::gvk("node-lifecycle-controller.io", "v1alpha1", "TolerationRule");
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &kube::core::ApiResource::from_gvk_with_plural(&gvk, "tolerationrules"));
    for _ in 0..100 {
        if api.list(&Default::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..rules {
        let (team, app, group) = if i == 0 {
            ("shop".to_owned(), "web".to_owned(), "web".to_owned())
        } else {
            (format!("team-{i}"), format!("app-{i}"), format!("group-{i}"))
        };
        let rule: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "node-lifecycle-controller.io/v1alpha1", "kind": "TolerationRule",
            "metadata": {"name": format!("bench-{i:03}")},
            "spec": {
                "namespaceSelector": {"matchLabels": {"team": team}},
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": group, "effect": "NoSchedule"}],
                "requiredNodeAffinity": [{"key": "dedicated", "operator": "In", "values": [group]}]
            }
        }))?;
        api.create(&PostParams::default(), &rule).await?;
    }
    Ok(())
}

/// Starts `controller webhook` on core 0 with the control plane's serving certificate (every
/// plugin on with `all_plugins`); returns it (measured, with its metrics port) and the port it
/// serves admission requests on, once it is ready.
async fn start_webhook(cp: &ControlPlane, controller: &Path, all_plugins: bool) -> Result<(Measured, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(cp.dir.join("webhook.log"))?;
    let child = tokio::process::Command::new("taskset")
        .args(["-c", "0"])
        .arg(controller)
        .arg("webhook")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .arg("--tls-cert-file")
        .arg(&cp.pki.serving_cert)
        .arg("--tls-private-key-file")
        .arg(&cp.pki.serving_key)
        .args([
            "--webhook-bind-address",
            &format!("127.0.0.1:{port}"),
            "--metrics-bind-address",
            &format!("127.0.0.1:{admin}"),
        ])
        .args(["--log-level", "warn"])
        .args(if all_plugins {
            &[
                "--enable-extended-resource-toleration=true",
                "--enable-pod-toleration-restriction=true",
                "--enable-toleration-rules=true",
            ][..]
        } else {
            &[][..]
        })
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let measured = Measured::new(child, admin)?;
    // Ready: the namespace cache (and the rules) have synced.
    for _ in 0..200 {
        if measured.get("/readyz").await.starts_with("HTTP/1.1 200") {
            return Ok((measured, port));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the webhook did not become ready; see {}", cp.dir.join("webhook.log").display())
}

/// A TLS client that trusts the control plane's CA alone.
pub(crate) fn tls_connector(ca_cert: &Path) -> Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for c in <rustls_pki_types::CertificateDer as rustls_pki_types::pem::PemObject>::pem_file_iter(ca_cert)? {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(tls)))
}

/// One keep-alive connection: POSTs `body` to /mutate until `stop_at`, checking that each answer
/// carries a patch; returns the latencies in seconds.
async fn send_until(connector: TlsConnector, port: u16, body: Bytes, stop_at: Instant) -> Result<Vec<f64>> {
    let mut lat = vec![];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
    let stream = connector.connect(name, tcp).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    while Instant::now() < stop_at {
        let req = hyper::Request::post("/mutate")
            .header("content-type", "application/json")
            .header("host", "127.0.0.1")
            .body(Full::new(body.clone()))?;
        let t = Instant::now();
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() || !bytes.windows(5).any(|w| w == b"patch") {
            anyhow::bail!("bad answer {status}: {}", String::from_utf8_lossy(&bytes));
        }
        lat.push(t.elapsed().as_secs_f64());
    }
    Ok(lat)
}

/// A pod as a Deployment would create it, without tolerations: the webhook adds two. The
/// same request as `cargo bench -p nlc-core --bench admission` decides.
fn admission_review() -> Vec<u8> {
    include_bytes!("../../core/benches/admission-review.json").to_vec()
}
