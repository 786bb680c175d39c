//! The webhook's edge, which any pod can reach: slow clients, floods, oversized and slow
//! bodies, too many requests at once, running out of file descriptors, HTTP/2 offered. In every
//! case the webhook keeps answering a real kube-apiserver's admission calls within their
//! timeout, with bounded memory and file descriptors, and says in its metrics what it did.

mod common;

use std::time::{Duration, Instant};

use common::webhook::{Webhook, post_on, register_mutating};
use common::{eventually_every, metric_sum, webhook};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use nlc_testenv::fault::{Fault, FaultProxy, Rule};
use nlc_testenv::{Options, shared_with, unique};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn env() -> &'static nlc_testenv::ControlPlane {
    shared_with(Options {
        apiserver_args: vec!["--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds".into()],
        ..Options::default()
    })
}

async fn namespace(client: &kube::Client, scope: &str) -> String {
    namespace_annotated(client, scope, serde_json::Value::Null).await
}

/// A namespace whose PodTolerationRestriction whitelist allows the key `allowed` alone.
async fn whitelisted_namespace(client: &kube::Client, scope: &str) -> String {
    let whitelist = r#"[{"key": "allowed", "operator": "Exists"}]"#;
    namespace_annotated(client, scope, json!({"scheduler.alpha.kubernetes.io/tolerationsWhitelist": whitelist})).await
}

async fn namespace_annotated(client: &kube::Client, scope: &str, annotations: serde_json::Value) -> String {
    let name = unique(scope);
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"nlc-hostile": scope}, "annotations": annotations}}),
    )
    .expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
    name
}

/// Creates a pod in `ns`: whether the webhook added its defaults, and the round trip. The
/// registration gives the webhook 2 s and ignores its failure, so `false` is a call the webhook
/// did not answer in time; the round trip also holds the API server's own work.
async fn mutated(client: &kube::Client, ns: &str) -> (bool, Duration) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "p-"},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    let start = Instant::now();
    let created =
        Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.expect("create");
    let took = start.elapsed();
    let tolerations = created.spec.and_then(|s| s.tolerations).unwrap_or_default();
    (tolerations.iter().any(|t| t.key.as_deref() == Some("node.kubernetes.io/unreachable")), took)
}

/// Registers the webhook on `port` as the API server's mutating webhook for a new namespace of
/// `scope`'s, and waits until it takes effect there; the namespace.
async fn registered(client: &kube::Client, port: u16, scope: &str) -> String {
    register_mutating(client, "nlc-hostile", scope, port, &env().pki.ca_cert).await;
    let ns = namespace(client, scope).await;
    until_mutated(client, &ns).await;
    ns
}

async fn until_mutated(client: &kube::Client, ns: &str) {
    eventually_every(Duration::from_secs(10), Duration::from_millis(100), || async {
        mutated(client, ns).await.0.then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the webhook never took effect"));
}

/// A TLS connection to the webhook on `port` (it serves the API server's certificate).
async fn tls(port: u16, alpn: &[&[u8]]) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    common::tls_connect(&env().pki.ca_cert, port, alpn).await
}

/// Whether the server closed the connection (EOF or reset) within `within`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn a_slowloris_and_a_connection_flood_leave_the_api_servers_calls_answered() {
    let env = env();
    let client = env.client().await;
    // Room for the 600 connections from this one address (half the listener is one address's).
    let w = Webhook::start(
        env,
        &["--webhook-header-read-timeout", "3s", "--webhook-idle-timeout", "4s", "--webhook-max-connections", "2000"],
    )
    .await;
    let scope = unique("hostile-flood");
    let ns = registered(&client, w.port, &scope).await;
    let (rss_before, fds_before) = w.footprint();

    // 300 idle TLS connections and 300 half-sent request heads.
    let mut idle = Vec::new();
    let mut slow = Vec::new();
    for _ in 0..300 {
        if let Some(s) = tls(w.port, &[b"http/1.1"]).await {
            idle.push(s);
        }
        if let Some(mut s) = tls(w.port, &[b"http/1.1"]).await {
            let _ = s.write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
            slow.push(s);
        }
    }
    assert!(idle.len() >= 290 && slow.len() >= 290, "the flood did not connect: {} {}", idle.len(), slow.len());
    // The API server's calls are answered meanwhile, within their 2 s timeout (a pod created
    // unmutated says the webhook missed it; see `mutated`).
    for _ in 0..10 {
        let (ok, took) = mutated(&client, &ns).await;
        assert!(ok, "a pod created during the flood was not mutated (round trip {took:?}):\n{}", w.logs());
    }
    // A slow client sending one byte a second does not keep its head open past the timeout.
    let mut dribble = tls(w.port, &[b"http/1.1"]).await.expect("connect");
    let started = Instant::now();
    let mut closed = false;
    for b in b"POST /mutate HTTP/1.1\r\nHost: x\r\n".iter().take(8) {
        if dribble.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    closed = closed || closed_within(&mut dribble, Duration::from_secs(3)).await;
    assert!(closed, "a dribbling head was held {:?}", started.elapsed());
    // Every flood connection is closed by the server 3 s after it was accepted: the half-sent
    // heads, and the idle ones too (their first head was due by then, as Go's ReadHeaderTimeout
    // has it; the idle timeout is for connections between requests).
    for s in slow.iter_mut() {
        assert!(closed_within(s, Duration::from_secs(6)).await, "a half-sent head was held");
    }
    for s in idle.iter_mut() {
        assert!(closed_within(s, Duration::from_secs(6)).await, "an idle connection was held");
    }
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_http_connections_closed_total", &["reason=\"header_timeout\""]) >= 600.0, "{m}");
    let (rss_after, fds_after) = w.footprint();
    assert!(fds_after <= fds_before + 20, "file descriptors {fds_before} -> {fds_after}");
    assert!(rss_after <= rss_before + 30_000, "RSS {rss_before} kB -> {rss_after} kB");
    eprintln!("RSS {rss_before} -> {rss_after} kB, fds {fds_before} -> {fds_after}");
}

/// A TCP connection to `port` from loopback address `127.0.0.<source>` (one address per client,
/// as pods and nodes have).
async fn connect_from(source: u8, port: u16) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, source], 0))).ok()?;
    socket.connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await.ok()
}

/// Past the connection cap, a new connection takes the place of the one that has waited longest
/// without a request (the attack's idle ones), and one address holds at most its share.
#[tokio::test]
async fn past_the_connection_cap_the_longest_idle_connection_makes_way() {
    let env = env();
    let w = Webhook::start(env, &["--webhook-max-connections", "50"]).await;
    let mut held = Vec::new();
    for i in 0..50u8 {
        held.push(connect_from(2 + i / 20, w.port).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One address holds at most half the listener.
    let mut greedy = Vec::new();
    for _ in 0..30 {
        greedy.push(connect_from(30, w.port).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refused = 0;
    for s in greedy.iter_mut() {
        refused += usize::from(closed_within(s, Duration::from_millis(200)).await);
    }
    assert!(refused >= 5, "{refused} of 30 from one address refused past its share of 25");
    // A real client still gets in, and is answered: the oldest idle connections were closed.
    let answered = exchange(w.port, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", b"", Duration::ZERO).await;
    assert_eq!(answered, Some(200));
    assert!(closed_within(&mut held[0], Duration::from_secs(1)).await, "the longest idle connection made way");
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_http_connections_closed_total", &["reason=\"evicted\""]) >= 1.0, "{m}");
    assert!(metric_sum(&m, "nlc_http_connections_closed_total", &["reason=\"per_source\""]) >= 5.0, "{m}");
    drop(held);
}

/// Holds `n` idle connections (they send nothing) to `port` from `sources` (round robin) open,
/// connecting again a second after the server closes one, until aborted.
fn flood(port: u16, sources: std::ops::Range<u8>, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let sources: Vec<u8> = sources.collect();
    (0..n)
        .map(|i| {
            let source = sources[i % sources.len()];
            tokio::spawn(async move {
                loop {
                    if let Some(mut s) = connect_from(source, port).await {
                        let mut buf = [0u8; 256];
                        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        })
        .collect()
}

/// Any pod can reach the probe port and the webhook. Idle connections and unfinished heads from
/// other addresses, far past both listeners' caps and renewed as the server closes them, for
/// three minutes: the kubelet's probes (as it sends them: a new connection, a 1 s timeout) are
/// answered within a second every time, the controller keeps running, and the real API server's
/// admission calls are answered within their timeout.
#[tokio::test]
async fn floods_of_idle_connections_keep_neither_the_probes_nor_the_api_server_out() {
    let env = env();
    let client = env.client().await;
    let w = Webhook::start(env, &[]).await;
    let scope = unique("hostile-probes");
    let ns = registered(&client, w.port, &scope).await;
    let probe_port = common::free_port();
    let probe_flag = format!("127.0.0.1:{probe_port}");
    let mut c =
        common::Controller::start(env, &scope, &["--leader-elect=false", "--health-probe-bind-address", &probe_flag])
            .await;
    // 200 idle connections to the probe port (its cap is 64), 2,000 to the webhook (1,024, in
    // their TLS handshake), from twenty addresses; and 300 requests to the webhook whose bodies
    // stop short (half after 200 kB, half after a byte), sent again when answered.
    let mut attack = flood(probe_port, 2..12, 200);
    attack.extend(flood(w.port, 12..22, 2000));
    attack.extend((0..300).map(|i| {
        let (port, sent) = (w.port, if i % 2 == 0 { 200_000 } else { 1 });
        tokio::spawn(async move {
            loop {
                let _ = held_body(22 + (i % 10) as u8, port, 3_500_000, sent).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let (mut probes, mut slowest, mut calls) = (0, Duration::ZERO, 0);
    while started.elapsed() < Duration::from_secs(180) {
        // The kubelet's probe: a new connection from the node's address, a 1 s timeout.
        let at = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(1), async {
            let mut s = connect_from(1, probe_port).await?;
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await.ok()?;
            Some(String::from_utf8_lossy(&out).into_owned())
        })
        .await;
        let took = at.elapsed();
        assert!(
            matches!(&answer, Ok(Some(a)) if a.starts_with("HTTP/1.1 200")),
            "probe {probes} failed after {took:?} into the flood ({:?} s): {answer:?}\n{}",
            started.elapsed().as_secs(),
            c.logs()
        );
        probes += 1;
        slowest = slowest.max(took);
        if probes % 5 == 0 {
            let (ok, took) = mutated(&client, &ns).await;
            assert!(ok, "admission during the flood went unanswered (round trip {took:?})\n{}", w.logs());
            calls += 1;
        }
        assert!(c.wait_exit(Duration::ZERO).await.is_none(), "the controller exited:\n{}", c.logs());
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(took)).await;
    }
    for a in attack {
        a.abort();
    }
    let m = w.metrics().await;
    eprintln!(
        "{probes} probes in 3 min of floods, the slowest {slowest:?}; {calls} admission calls; webhook evicted {} connections, refused {} bodies past its byte budget, timed out {:.0}",
        metric_sum(&m, "nlc_http_connections_closed_total", &["reason=\"evicted\""]),
        metric_sum(&m, "nlc_http_requests_rejected_total", &["reason=\"body_budget\""]),
        metric_sum(&m, "nlc_http_requests_rejected_total", &["reason=\"body_timeout\""]),
    );
}

/// Sends `head` and `body` on a fresh TLS connection; the status code of the answer.
async fn exchange(port: u16, head: &str, body: &[u8], pause: Duration) -> Option<u16> {
    let mut s = tls(port, &[b"http/1.1"]).await?;
    s.write_all(head.as_bytes()).await.ok()?;
    tokio::time::sleep(pause).await;
    let _ = s.write_all(body).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn bodies_are_bounded_in_size_and_time_and_requests_in_number() {
    let env = env();
    let w = Webhook::start(
        env,
        &[
            "--webhook-body-timeout",
            "1s",
            "--webhook-max-body-bytes",
            "100000",
            "--webhook-max-requests-in-flight",
            "1",
        ],
    )
    .await;
    // Too large, declared: 413 without reading it.
    let head = "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(w.port, head, b"", Duration::ZERO).await, Some(413));
    // A body that does not arrive in time: 408.
    let head = "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(w.port, head, b"{", Duration::ZERO).await, Some(408));
    // One request in flight at most, yet a body still arriving holds no place: another request
    // is answered meanwhile.
    let port = w.port;
    let holder = tokio::spawn(async move { exchange(port, head, b"", Duration::from_millis(900)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(w.port, second, b"", Duration::ZERO).await, Some(200));
    let _ = holder.await;
    let m = w.metrics().await;
    for reason in ["body_too_large", "body_timeout"] {
        assert!(
            metric_sum(&m, "nlc_http_requests_rejected_total", &[&format!("reason=\"{reason}\"")]) >= 1.0,
            "{reason}: {m}"
        );
    }
}

/// A body held half sent, on a fresh TLS connection from `127.0.0.<source>`: the head declares
/// `declared` bytes, `sent` of them are sent at once, then nothing until the server answers or
/// closes. The status code of the answer.
async fn held_body(source: u8, port: u16, declared: usize, sent: usize) -> Option<u16> {
    let mut s = common::tls_connect_from(&env().pki.ca_cert, source, port, &[b"http/1.1"]).await?;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(&vec![b' '; sent]).await.ok()?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).split_whitespace().nth(1)?.parse().ok()
}

/// Bodies share one byte budget, charged as they arrive: while one client holds nearly all of
/// its main part with a body it does not finish, a large body is refused (429) but an ordinary
/// review still fits (the reserve), and the held body gives its bytes back when its time is up.
#[tokio::test]
async fn bodies_share_one_byte_budget_with_room_for_ordinary_reviews() {
    let env = env();
    // Main part 290,063 bytes, reserve 41,437.
    let flags = ["--webhook-body-timeout", "3s", "--webhook-max-body-bytes", "290000"];
    let w = Webhook::start(env, &[&flags[..], &["--webhook-max-body-budget-bytes", "331500"]].concat()).await;
    let port = w.port;
    // 289,000 bytes declared, charged as the buffer grows toward them; 288,000 sent.
    let holder = tokio::spawn(async move { held_body(40, port, 289_000, 288_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let large = review("default", json!([{"key": "k", "operator": "Equal", "value": "x".repeat(100_000)}]));
    assert_eq!(post(w.port, "/mutate", &large).await, Some(429), "a large body past the budget");
    let ordinary = review("default", json!([]));
    assert_eq!(post(w.port, "/mutate", &ordinary).await, Some(200), "an ordinary review, from the reserve");
    assert_eq!(holder.await.expect("holder"), Some(408));
    assert_eq!(post(w.port, "/mutate", &large).await, Some(200), "the held bytes were given back");
    let m = w.metrics().await;
    assert_eq!(metric_sum(&m, "nlc_http_requests_rejected_total", &["reason=\"body_budget\""]), 1.0, "{m}");
}

/// Peak resident memory (kB) of process `pid`.
fn peak_rss_kb(pid: u32) -> u64 {
    common::status_kb(pid, "VmHWM")
}

/// Two hundred of the largest reviews at once, each of tolerations (what decodes largest), from
/// twenty addresses: the webhook's peak memory stays within the chart's limit (128 Mi) and the
/// real API server's admission calls are answered within 2 s throughout.
#[tokio::test]
async fn two_hundred_largest_reviews_at_once_stay_within_the_memory_limit() {
    let env = env();
    let client = env.client().await;
    let w = Webhook::start(env, &[]).await;
    let scope = unique("hostile-memory");
    let ns = registered(&client, w.port, &scope).await;
    let toleration = |i: usize| json!({"key": format!("example.com/k{i}"), "operator": "Equal", "value": format!("v{i}"), "effect": "NoExecute", "tolerationSeconds": i});
    let mut tolerations = Vec::new();
    let mut body = review("default", json!([]));
    while body.len() < 3_500_000 {
        tolerations.extend((tolerations.len()..tolerations.len() + 2000).map(toleration));
        body = review("default", json!(tolerations));
    }
    let body = std::sync::Arc::new(body);
    let pid = w.child.id().expect("pid");
    let before = peak_rss_kb(pid);
    let port = w.port;
    let attack: Vec<_> = (0..200u8)
        .map(|i| {
            let body = body.clone();
            tokio::spawn(async move {
                let ca = &self::env().pki.ca_cert;
                let mut s = common::tls_connect_from(ca, 50 + i % 20, port, &[b"http/1.1"]).await?;
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
    let (mut calls, mut slowest) = (0, Duration::ZERO);
    while attack.iter().any(|a| !a.is_finished()) {
        // Answered in time is the bound (see `mutated`); the round trip is reported, not bounded
        // (2.13 s on a loaded CI machine, the defaults added).
        let (ok, took) = mutated(&client, &ns).await;
        assert!(ok, "admission during the flood went unanswered (round trip {took:?})\n{}", w.logs());
        (calls, slowest) = (calls + 1, slowest.max(took));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut answers = std::collections::BTreeMap::new();
    for a in attack {
        *answers.entry(a.await.expect("joined")).or_insert(0) += 1;
    }
    let peak = peak_rss_kb(pid);
    eprintln!(
        "200 reviews of {} bytes: answers {answers:?}; peak RSS {before} -> {peak} kB; {calls} admission calls, the slowest {slowest:?}",
        body.len()
    );
    assert!(answers.get(&Some(200)).is_some_and(|n| *n > 0), "none decided: {answers:?}");
    assert!(answers.keys().all(|a| matches!(a, Some(200 | 429) | None)), "{answers:?}");
    assert!(peak < 128 * 1024, "peak RSS {peak} kB is past the chart's 128 Mi limit");
    assert!(w.footprint().0 > 0, "the webhook exited:\n{}", w.logs());
}

#[tokio::test]
async fn http2_is_off_unless_asked_for() {
    let env = env();
    let off = Webhook::start(env, &[]).await;
    let s = tls(off.port, &[b"h2", b"http/1.1"]).await.expect("connect");
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let on = Webhook::start(env, &["--webhook-enable-http2"]).await;
    let s = tls(on.port, &[b"h2", b"http/1.1"]).await.expect("connect");
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
}

#[tokio::test]
async fn out_of_file_descriptors_the_accept_loop_backs_off_and_recovers() {
    let env = env();
    let client = env.client().await;
    let w = webhook::Webhook::start_as(
        env,
        &env.kubeconfig,
        &env.pki.serving_cert,
        &env.pki.serving_key,
        &["--webhook-header-read-timeout", "2s"],
        &["prlimit", "--nofile=128"],
    )
    .await;
    let scope = unique("hostile-fds");
    let ns = registered(&client, w.port, &scope).await;
    // More connections than the process may hold open: accepts fail.
    let mut flood = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", w.port)).await {
            flood.push(s);
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = w.logs().lines().filter(|l| l.contains("accept failed")).count();
    assert!(lines <= 10, "{lines} 'accept failed' lines in 3 s");
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_http_accept_errors_total", &[]) >= 1.0, "{m}");
    // The flood's connections time out and the webhook serves the API server again.
    drop(flood);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ok, _) = mutated(&client, &ns).await;
    assert!(ok, "not serving after the flood:\n{}", w.logs());
}

fn review(namespace: &str, tolerations: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE", "userInfo": {"username": "someone"},
            "object": {"metadata": {"name": "p", "namespace": namespace},
                       "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": tolerations}}
        }
    }))
    .expect("review")
}

async fn post(port: u16, path: &str, body: &[u8]) -> Option<u16> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    exchange(port, &head, body, Duration::ZERO).await
}

/// The webhook with PodTolerationRestriction on, through a fault proxy that holds its namespace
/// watch: it lists the namespaces, then never hears of new ones (it must read them live).
async fn blind_to_new_namespaces(env: &nlc_testenv::ControlPlane) -> (FaultProxy, Webhook) {
    let proxy = FaultProxy::start(env).await.expect("proxy");
    proxy.add(Rule::new("GET", &["/api/v1/namespaces", "watch=true"], Fault::Hold));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let w = Webhook::start_as(
        env,
        &kubeconfig,
        &env.pki.serving_cert,
        &env.pki.serving_key,
        &["--enable-pod-toleration-restriction"],
        &[],
    )
    .await;
    (proxy, w)
}

#[tokio::test]
async fn a_namespace_that_cannot_be_read_fails_the_request_so_the_failure_policy_decides() {
    let env = env();
    let client = env.client().await;
    let (proxy, w) = blind_to_new_namespaces(env).await;
    let scope = unique("hostile-ptr");
    let ns = whitelisted_namespace(&client, &scope).await;
    let outside = json!([{"key": "forbidden", "operator": "Exists", "effect": "NoSchedule"}]);

    // Its live read of the namespace fails: the request fails (500), it is not decided on the
    // cluster whitelist alone (which is empty: everything allowed).
    let failing = proxy.add(Rule::new("GET", &[&format!("/api/v1/namespaces/{ns}")], Fault::Status(500)));
    assert_eq!(post(w.port, "/validate", &review(&ns, outside.clone())).await, Some(500));
    // The same when the read is slower than the webhook allows itself.
    proxy.remove(&failing);
    let slow =
        proxy.add(Rule::new("GET", &[&format!("/api/v1/namespaces/{ns}")], Fault::Delay(Duration::from_secs(3))));
    assert_eq!(post(w.port, "/validate", &review(&ns, outside.clone())).await, Some(500));
    proxy.remove(&slow);
    // Readable: decided, and refused by the namespace's whitelist.
    let body = review(&ns, outside);
    assert_eq!(post(w.port, "/validate", &body).await, Some(200));
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_webhook_namespace_lookups_total", &["outcome=\"failed\""]) >= 2.0, "{m}");
    assert!(metric_sum(&m, "nlc_webhook_namespace_lookups_total", &["outcome=\"fetched\""]) >= 1.0, "{m}");

    // Unknown namespaces cannot drive one API read per request: single flight and a negative
    // cache. A namespace that does not exist is not validated against the cluster's whitelist
    // alone (fail-open): as upstream, a pod without tolerations is allowed, one with them
    // refused.
    let counting = proxy.add(Rule::new("GET", &["/api/v1/namespaces/nope-"], Fault::Delay(Duration::from_millis(300))));
    let mut asks = Vec::new();
    for _ in 0..20 {
        let port = w.port;
        asks.push(tokio::spawn(async move { post(port, "/validate", &review("nope-x", json!([]))).await }));
    }
    for a in asks {
        assert_eq!(a.await.ok().flatten(), Some(200));
    }
    for _ in 0..5 {
        assert_eq!(post(w.port, "/validate", &review("nope-x", json!([]))).await, Some(200));
    }
    let tolerating = review("nope-x", json!([{"key": "allowed", "operator": "Exists"}]));
    let (code, answer) = post_body(w.port, "/validate", &tolerating).await;
    assert_eq!(code, Some(200));
    assert!(answer.contains("\"allowed\":false") && answer.contains("not found"), "{answer}");
    assert!(counting.hits() <= 2, "{} reads for one unknown namespace", counting.hits());
    // /mutate adds the cluster's defaults only (the API server admits no pod there anyway).
    assert_eq!(post(w.port, "/mutate", &review("nope-x", json!([]))).await, Some(200));

    // Random names, each read at most once: live reads are paced per address (5/s, burst 10)
    // and in total (10/s, burst 20); the rest fail at once. First from one address: it spends
    // its own pace, not the total.
    let ca = env.pki.ca_cert.clone();
    let random_names = |sources: std::ops::Range<u8>, each: usize, tag: &'static str| {
        let port = w.port;
        let ca = ca.clone();
        sources
            .flat_map(|source| (0..each).map(move |i| (source, i)))
            .map(|(source, i)| {
                let ca = ca.clone();
                tokio::spawn(async move {
                    let body = review(&format!("nope-{tag}-{source}-{i}"), json!([]));
                    let s = common::tls_connect_from(&ca, source, port, &[b"http/1.1"]).await?;
                    post_on(s, "/validate", &body).await
                })
            })
            .collect::<Vec<_>>()
    };
    let tally = |codes: &mut std::collections::BTreeMap<Option<u16>, usize>, code| *codes.entry(code).or_insert(0) += 1;
    let before = counting.hits();
    let started = Instant::now();
    let mut codes = std::collections::BTreeMap::new();
    for a in random_names(1..2, 100, "one") {
        tally(&mut codes, a.await.ok().flatten());
    }
    let took = started.elapsed().as_secs_f64();
    let reads = counting.hits() - before;
    eprintln!(
        "100 reviews for random namespaces from one address in {took:.1} s: answers {codes:?}, {reads} live reads"
    );
    assert!(codes.keys().all(|c| matches!(c, Some(200 | 500))), "{codes:?}");
    assert!(codes.get(&Some(500)).is_some_and(|n| *n >= 70), "{codes:?}");
    assert!((reads as f64) <= 10.0 + 5.0 * took + 1.0, "{reads} live reads from one address in {took:.1} s");
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_webhook_namespace_lookups_total", &["outcome=\"paced_source\""]) >= 1.0, "{m}");

    // Then from twenty addresses at once: the total pace holds.
    let before = counting.hits();
    let started = Instant::now();
    let mut codes = std::collections::BTreeMap::new();
    for a in random_names(2..22, 10, "many") {
        tally(&mut codes, a.await.ok().flatten());
    }
    let took = started.elapsed().as_secs_f64();
    let reads = counting.hits() - before;
    eprintln!(
        "200 reviews for random namespaces from 20 addresses in {took:.1} s: answers {codes:?}, {reads} live reads"
    );
    // Each read within the pace found an absent namespace (a pod without tolerations: allowed);
    // the rest failed at once.
    assert!(codes.keys().all(|c| matches!(c, Some(200 | 500))), "{codes:?}");
    assert!(codes.get(&Some(500)).is_some_and(|n| *n >= 150), "{codes:?}");
    assert!((reads as f64) <= 20.0 + 10.0 * took + 1.0, "{reads} live reads in {took:.1} s");
    let m = w.metrics().await;
    assert!(metric_sum(&m, "nlc_webhook_namespace_lookups_total", &["outcome=\"paced\""]) >= 1.0, "{m}");
}

#[tokio::test]
async fn with_failure_policy_fail_the_refusal_is_the_api_servers() {
    let env = env();
    let client = env.client().await;
    let (proxy, w) = blind_to_new_namespaces(env).await;
    let scope = unique("hostile-fail");
    common::webhook::register_validating(&client, "nlc-hostile", &scope, w.port, &env.pki.ca_cert, "Fail").await;
    let ns = namespace(&client, &scope).await;
    let read = proxy.add(Rule::new("GET", &[&format!("/api/v1/namespaces/{ns}")], Fault::Status(500)));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "p-"},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let refused = eventually_every(Duration::from_secs(5), Duration::from_millis(100), || async {
        match pods.create(&PostParams::default(), &pod).await {
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => Some(s.message),
            _ => None,
        }
    })
    .await;
    assert!(refused.is_some(), "the pod was admitted while the webhook could not know its namespace");
    proxy.remove(&read);
    pods.create(&PostParams::default(), &pod).await.expect("admitted once the namespace can be read");
}

/// A rollout: on SIGTERM readiness fails at once, the listener keeps answering for the shutdown
/// delay (endpoints stop sending traffic meanwhile), requests in flight finish, then it exits.
#[tokio::test]
async fn a_stream_of_requests_across_sigterm_loses_none() {
    let env = env();
    let client = env.client().await;
    let ns = namespace(&client, "hostile-drain").await;
    let mut w = webhook::Webhook::start(env, &["--webhook-shutdown-delay=3s", "--webhook-shutdown-timeout=5s"]).await;
    let (port, admin) = (w.port, w.admin);
    let stream = {
        let ns = ns.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            let start = Instant::now();
            // Until a second before the delay ends (SIGTERM comes at 0.5 s, the delay is 3 s):
            // every one must be answered. Running up to the delay's end raced the listener's
            // close on a loaded machine (1 of 60 lost in a cold CI run).
            while start.elapsed() < Duration::from_millis(2_500) {
                answers.push(post(port, "/mutate", &review(&ns, json!([]))).await);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    if let Some(pid) = w.child.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    let mut unready = None;
    while sent.elapsed() < Duration::from_secs(2) {
        if !matches!(common::http_get(admin, "/readyz").await, Some((200, _))) {
            unready = Some(sent.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unready = unready.expect("readiness still passes 2 s after SIGTERM");
    assert!(unready < Duration::from_millis(500), "readiness failed {unready:?} after SIGTERM");
    let answers = stream.await.expect("stream");
    let lost = answers.iter().filter(|a| **a != Some(200)).count();
    assert!(answers.len() > 20, "{} requests", answers.len());
    assert_eq!(lost, 0, "{lost} of {} requests not answered 200:\n{}", answers.len(), w.logs());
    let status = tokio::time::timeout(Duration::from_secs(10), w.child.wait()).await.expect("exits").expect("status");
    let took = sent.elapsed();
    assert!(status.success(), "{status}:\n{}", w.logs());
    assert!(took >= Duration::from_secs(3), "exited {took:?} after SIGTERM, before the delay");
}

/// Denials are counted by plugin; the serving certificate's expiry is exported.
#[tokio::test]
async fn denials_by_plugin_and_the_certificates_expiry_are_metrics() {
    let env = env();
    let client = env.client().await;
    let scope = unique("hostile-deny");
    let ns = whitelisted_namespace(&client, &scope).await;
    let w = webhook::Webhook::start(env, &["--enable-pod-toleration-restriction"]).await;
    let outside = json!([{"key": "forbidden", "operator": "Exists", "effect": "NoSchedule"}]);
    let mut refused = 0;
    for _ in 0..50 {
        let (code, body) = post_body(w.port, "/validate", &review(&ns, outside.clone())).await;
        assert_eq!(code, Some(200));
        if body.contains("\"allowed\":false") {
            refused += 1;
            if refused == 3 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(refused, 3, "never refused");
    let m = w.metrics().await;
    let denied =
        metric_sum(&m, "nlc_webhook_denials_total", &["endpoint=\"validate\"", "plugin=\"PodTolerationRestriction\""]);
    assert_eq!(denied, 3.0, "{m}");
    // rcgen's default notAfter, which the test PKI keeps.
    let expected = "4096-01-01T00:00:00Z".parse::<jiff::Timestamp>().expect("time").as_second() as f64;
    assert_eq!(common::metric(&m, "nlc_webhook_certificate_expiry_timestamp_seconds"), Some(expected), "{m}");
    // Issue 25: the Grafana dashboard's webhook queries name metrics this webhook exports.
    common::assert_dashboard_queries(&m, |f| f.starts_with("nlc_webhook"));
}

async fn post_body(port: u16, path: &str, body: &[u8]) -> (Option<u16>, String) {
    let Some(mut s) = tls(port, &[]).await else { return (None, String::new()) };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).await.is_err() || s.write_all(body).await.is_err() {
        return (None, String::new());
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    (code, text)
}

/// mTLS, the one fix for "any pod can reach it": with `--webhook-client-ca-file`, only a client
/// whose certificate that CA signed gets an answer, and kube-apiserver is such a client when its
/// AdmissionConfiguration gives it the certificate (`kubeConfigFile`).
#[tokio::test]
async fn with_a_client_ca_only_the_api_servers_certificate_is_answered() {
    // The CA that signs kube-apiserver's certificate for webhooks, apart from the cluster's.
    let dir = std::env::temp_dir().join(unique("nlc-mtls"));
    let callers = nlc_testenv::pki::Pki::create(&dir).expect("webhook client CA");
    let apiserver = callers.client("kube-apiserver-webhook-client", "kube-apiserver", &[]).expect("client cert");
    let kubeconfig = dir.join("webhook-clients.kubeconfig");
    let users = json!({
        "apiVersion": "v1", "kind": "Config",
        "users": [{"name": "*", "user": {
            "client-certificate": apiserver.cert, "client-key": apiserver.key}}]
    });
    std::fs::write(&kubeconfig, serde_json::to_vec(&users).expect("kubeconfig")).expect("write kubeconfig");
    let webhook_config = |plugin: &str| {
        json!({"name": plugin, "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": kubeconfig}})
    };
    let admission = dir.join("admission.json");
    let config = json!({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [webhook_config("MutatingAdmissionWebhook"), webhook_config("ValidatingAdmissionWebhook")]
    });
    std::fs::write(&admission, serde_json::to_vec(&config).expect("config")).expect("write admission config");
    let args = vec![
        "--disable-admission-plugins=ServiceAccount,DefaultTolerationSeconds".to_string(),
        format!("--admission-control-config-file={}", admission.display()),
    ];
    let env = tokio::task::spawn_blocking(move || {
        nlc_testenv::ControlPlane::start(Options { apiserver_args: args, ..Options::default() })
    })
    .await
    .expect("join")
    .expect("control plane");
    let ca = callers.ca_cert.to_str().expect("utf-8 path");
    let w = Webhook::start(&env, &["--webhook-client-ca-file", ca]).await;
    let client = env.client().await;

    // The API server presents its certificate: its admission calls are answered.
    register_mutating(&client, "nlc-hostile", "mtls", w.port, &env.pki.ca_cert).await;
    let ns = namespace(&client, "mtls").await;
    until_mutated(&client, &ns).await;
    for _ in 0..5 {
        let (mutated, took) = mutated(&client, &ns).await;
        assert!(mutated, "admission through mTLS went unanswered (round trip {took:?})");
    }

    // Any other client, with no certificate or one the cluster's own CA signed, gets nothing.
    let body = review(&ns, json!([]));
    let bare = common::tls_connect(&env.pki.ca_cert, w.port, &[b"http/1.1"]).await;
    let bare = match bare {
        Some(s) => post_on(s, "/mutate", &body).await,
        None => None,
    };
    assert_eq!(bare, None, "a client without a certificate was answered");
    let admin = env.pki.client("not-a-webhook-client", "admin", &["system:masters"]).expect("cert");
    let foreign = common::tls_connect_as(&env.pki.ca_cert, (&admin.cert, &admin.key), w.port).await;
    let foreign = match foreign {
        Some(s) => post_on(s, "/mutate", &body).await,
        None => None,
    };
    assert_eq!(foreign, None, "a certificate of another CA was answered");
    // The same request with the right certificate is: the refusals above are the certificate's.
    let right = common::tls_connect_as(&env.pki.ca_cert, (&apiserver.cert, &apiserver.key), w.port).await;
    assert_eq!(post_on(right.expect("mTLS handshake"), "/mutate", &body).await, Some(200));
    let _ = std::fs::remove_dir_all(&dir);
}
