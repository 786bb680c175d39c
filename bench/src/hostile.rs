//! What any pod can do to the controller's and the webhook's ports, added to the chaos run's
//! faults (issue: "any pod can reach it"): 200 idle TCP connections held to the controller's probe
//! port, 2,000 idle TLS handshakes and 300 bodies that stop short held to the webhook, each from
//! ten addresses and opened again whenever the server closes one; once in the run, 200 reviews of
//! 3.5 MiB of tolerations at once. A kubelet stand-in probes `/livez` on the probe port as the
//! chart configures it (every 10 s, a 1 s timeout, 3 failures in a row restart the container) and
//! the chaos run's own count of wrongful and missed evictions says whether any of it mattered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// A new TCP connection to `127.0.0.1:port` from `127.0.0.<source>` (a pod's own address).
async fn connect_from(source: u8, port: u16) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, source], 0))).ok()?;
    socket.connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await.ok()
}

/// `n` connections to `port` from the addresses `sources`, each opened again (after 100 ms)
/// when the server closes it. `tls_head`: the first bytes of a TLS handshake are sent and
/// nothing more; else nothing at all.
fn hold_idle(port: u16, sources: std::ops::Range<u8>, n: usize, tls_head: bool) -> Vec<JoinHandle<()>> {
    let width = usize::from(sources.end - sources.start).max(1);
    (0..n)
        .map(|i| {
            let source = sources.start + (i % width) as u8;
            tokio::spawn(async move {
                loop {
                    if let Some(mut s) = connect_from(source, port).await {
                        if tls_head {
                            let _ = s.write_all(b"\x16\x03\x01").await;
                        }
                        let mut buf = [0u8; 64];
                        let _ = s.read(&mut buf).await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect()
}

/// A TLS connection to the webhook from `127.0.0.<source>`.
async fn tls_from(
    connector: &TlsConnector,
    source: u8,
    port: u16,
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = connect_from(source, port).await?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").ok()?.to_owned();
    connector.connect(name, tcp).await.ok()
}

/// POSTs to `/mutate` a head declaring `declared` bytes and sends `sent` of them, then waits
/// for the answer; its status code.
async fn held_body(connector: &TlsConnector, source: u8, port: u16, declared: usize, sent: usize) -> Option<u16> {
    let mut s = tls_from(connector, source, port).await?;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(&vec![b' '; sent]).await.ok()?;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).split_whitespace().nth(1)?.parse().ok()
}

/// The floods, running until aborted.
pub struct Floods {
    tasks: Vec<JoinHandle<()>>,
}

impl Floods {
    /// 200 idle connections to the probe port, 2,000 idle TLS handshakes and 300 bodies that stop
    /// short (half after 200 kB, half after a byte) to the webhook.
    pub fn start(probe_port: u16, webhook_port: u16, connector: TlsConnector) -> Self {
        let mut tasks = hold_idle(probe_port, 2..12, 200, false);
        tasks.extend(hold_idle(webhook_port, 12..22, 2000, true));
        tasks.extend((0..300usize).map(|i| {
            let connector = connector.clone();
            let sent = if i % 2 == 0 { 200_000 } else { 1 };
            tokio::spawn(async move {
                loop {
                    let _ = held_body(&connector, 22 + (i % 10) as u8, webhook_port, 3_500_000, sent).await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        }));
        Self { tasks }
    }
}

impl Drop for Floods {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// An AdmissionReview of a pod in `default` with 3.5 MiB of tolerations (what decodes largest).
fn largest_review() -> Vec<u8> {
    let mut tolerations = Vec::new();
    let mut body = Vec::new();
    while body.len() < 3_500_000 {
        let from = tolerations.len();
        tolerations.extend((from..from + 2000).map(|i| {
            serde_json::json!({"key": format!("example.com/k{i}"), "operator": "Equal", "value": format!("v{i}"),
                               "effect": "NoExecute", "tolerationSeconds": i})
        }));
        body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "chaos-largest", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "default", "operation": "CREATE", "userInfo": {"username": "chaos"},
                        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                                   "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": tolerations}}}
        }))
        .unwrap_or_default();
    }
    body
}

/// Posts `n` of the largest reviews at once to the webhook, from twenty addresses; the answers
/// by status code ("none": no answer) and how long the last took.
pub async fn largest_reviews(connector: TlsConnector, port: u16, n: usize) -> serde_json::Value {
    let body = Arc::new(largest_review());
    let started = Instant::now();
    let tasks: Vec<JoinHandle<Option<u16>>> = (0..n)
        .map(|i| {
            let (body, connector) = (body.clone(), connector.clone());
            tokio::spawn(async move {
                let mut s = tls_from(&connector, 50 + (i % 20) as u8, port).await?;
                let head = format!(
                    "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).await.ok()?;
                let _ = s.write_all(&body).await;
                let mut out = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out)).await;
                String::from_utf8_lossy(&out).split_whitespace().nth(1)?.parse::<u16>().ok()
            })
        })
        .collect();
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        let code = t.await.ok().flatten().map_or_else(|| "none".to_owned(), |c| c.to_string());
        *answers.entry(code).or_default() += 1;
    }
    serde_json::json!({"n": n, "bytes": body.len(), "answers": answers, "took_s": started.elapsed().as_secs_f64()})
}

/// The kubelet's liveness probe of the controller, as the chart sets it: `GET /livez` on the
/// probe port every 10 s on a new connection with a 1 s timeout; after 3 failures in a row the
/// container is restarted (here: `restart` is called, and the count starts again).
pub struct Kubelet {
    pub probes: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    pub restarts: Arc<AtomicU64>,
    pub slowest_us: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Kubelet {
    pub fn start<F, Fut>(probe_port: u16, restart: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let [probes, failed, restarts, slowest_us] = std::array::from_fn(|_| Arc::new(AtomicU64::new(0)));
        let task = {
            let (probes, failed, restarts, slowest_us) =
                (probes.clone(), failed.clone(), restarts.clone(), slowest_us.clone());
            tokio::spawn(async move {
                let mut in_a_row = 0;
                let mut tick = tokio::time::interval(Duration::from_secs(10));
                loop {
                    tick.tick().await;
                    let at = Instant::now();
                    let answer = tokio::time::timeout(Duration::from_secs(1), async {
                        let mut s = connect_from(1, probe_port).await?;
                        s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
                        let mut out = Vec::new();
                        s.read_to_end(&mut out).await.ok()?;
                        Some(out.starts_with(b"HTTP/1.1 200"))
                    })
                    .await;
                    probes.fetch_add(1, Ordering::Relaxed);
                    slowest_us.fetch_max(at.elapsed().as_micros() as u64, Ordering::Relaxed);
                    if matches!(answer, Ok(Some(true))) {
                        in_a_row = 0;
                        continue;
                    }
                    failed.fetch_add(1, Ordering::Relaxed);
                    in_a_row += 1;
                    if in_a_row >= 3 {
                        eprintln!("bench: the controller failed 3 liveness probes in a row; restarting it");
                        restarts.fetch_add(1, Ordering::Relaxed);
                        restart().await;
                        in_a_row = 0;
                    }
                }
            })
        };
        Self { probes, failed, restarts, slowest_us, task }
    }

    pub fn report(&self) -> serde_json::Value {
        self.task.abort();
        serde_json::json!({
            "probes": self.probes.load(Ordering::Relaxed),
            "failed": self.failed.load(Ordering::Relaxed),
            "restarts": self.restarts.load(Ordering::Relaxed),
            "slowest_ms": self.slowest_us.load(Ordering::Relaxed) as f64 / 1e3,
        })
    }
}
