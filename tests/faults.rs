//! Faults a controller must ride through without missed or wrongful evictions, against a real
//! kube-apiserver (through a fault-injecting proxy where the fault is the API server's): a
//! write that never gets an answer, a tenant's pod with 30,000 tolerations, a NoExecute taint
//! that makes hundreds of pods due while deletions are paced.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use nlc_testenv::fault::{Fault, FaultProxy, Rule};
use nlc_testenv::shared;
use serde_json::json;

const KEY: &str = "example.com/fault";

#[tokio::test]
async fn a_write_without_an_answer_times_out_and_is_retried() {
    let env = shared();
    let s = Scope::new(env, "fault-timeout").await;
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    // Every delete of the pod hangs for a minute (a slow etcd), until the rule goes.
    let stall = proxy.add(Rule::new(
        "DELETE",
        &[&format!("/namespaces/{}/pods/p", s.ns)],
        Fault::Delay(Duration::from_secs(60)),
    ));
    let c = Controller::start_with_kubeconfig(
        &kubeconfig,
        env,
        &s.scope,
        &["--leader-elect=false", "--api-write-timeout", "2s", "--eviction-retry-delay", "100ms"],
    )
    .await;
    let tainted = jiff::Timestamp::now();
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    // The first delete hangs; it is given up after 2 s, and its retry goes through.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stall.hits() == 0 {
        assert!(std::time::Instant::now() < deadline, "the delete never came:\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.remove(&stall);
    let at = evictions.wait("p", Duration::from_secs(15)).await.unwrap_or_else(|| panic!("{}", c.logs()));
    let took = secs_between(tainted, at);
    assert!(took < 6.0, "evicted {took:.1}s after the taint: the hanging write held it");
    let m = c.metrics().await;
    assert!(metric(&m, "nlc_api_write_timeouts_total").unwrap_or(0.0) >= 1.0, "{m}");
}

/// Resident memory of a process, in kB.
fn rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmRSS")
}

#[tokio::test]
async fn a_pod_with_thirty_thousand_tolerations_costs_a_bounded_amount_and_is_never_wrongly_evicted() {
    let env = shared();
    let s = Scope::new(env, "fault-tolerations").await;
    let node = s.node("n", json!([])).await;
    let c = Controller::start(env, &s.scope, &["--leader-elect=false"]).await;
    let pid = c.pid();
    let before = rss_kb(pid);
    // 30,000 distinct NoExecute tolerations (short keys: etcd takes 1.5 MiB per object); the
    // one for KEY is the 20,000th.
    let mut tolerations: Vec<serde_json::Value> =
        (0..30_000).map(|i| json!({"key": format!("t{i}"), "operator": "Exists", "effect": "NoExecute"})).collect();
    tolerations[20_000] = json!({"key": KEY, "operator": "Exists", "effect": "NoExecute"});
    let create = |name: &'static str| {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": tolerations, "containers": [{"name": "c", "image": "x"}]}
        }))
        .expect("pod");
        let pods = s.pods();
        async move { pods.create(&PostParams::default(), &pod).await.expect("the API server takes it") }
    };
    // The first few such pods cost the watch's buffers for their 1.8 MB of JSON, once (glibc
    // keeps them); after that each costs next to nothing (each is 6 MB kept whole).
    for name in ["many", "many-2", "many-3"] {
        create(name).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let three = rss_kb(pid);
    for name in ["many-4", "many-5", "many-6", "many-7", "many-8", "many-9"] {
        create(name).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s.pod("few", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let nine = rss_kb(pid);
    eprintln!("RSS {before} kB; with three pods of 30,000 tolerations {three} kB, with nine {nine} kB");
    // Kept whole, six more pods would add 36 MB; slim, the allocator's noise (3.0 MB seen once on
    // v1.35, 0.5 to 2 MB usually). The bounds tell the two apart with room for that noise.
    assert!(nine < three + 12_000, "RSS grew from {three} to {nine} kB for six more pods (6 MB each kept whole)");
    assert!(nine < before + 24_000, "RSS grew from {before} to {nine} kB");
    // A taint only its 20,000th toleration tolerates: the untolerated pod goes, it stays.
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    assert!(evictions.wait("few", Duration::from_secs(10)).await.is_some(), "{}", c.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(evictions.at("many").is_none(), "evicted for a taint it tolerates:\n{}", c.logs());
    assert!(evictions.at("many-9").is_none(), "evicted for a taint it tolerates:\n{}", c.logs());
    let m = c.metrics().await;
    assert!(metric(&m, "nlc_pods_tolerations_truncated_total").unwrap_or(0.0) >= 1.0, "{m}");
    let events = pod_events(&s.client, &s.ns, "many").await;
    assert!(events.iter().any(|(reason, _)| reason == "TolerationsTruncated"), "{events:?}");
}

/// Past the tolerations the cache keeps (4 KiB of them), the pod's own list still decides: a pod with 129
/// tolerations of other keys and, after them, one for the taint with `tolerationSeconds: 3` is
/// read live and evicted at that deadline (before, it was never evicted for that taint); a pod
/// the whole list does not tolerate at all goes at once; one it tolerates forever stays.
#[tokio::test]
async fn past_the_kept_tolerations_the_whole_list_read_live_decides() {
    let env = shared();
    let s = Scope::new(env, "fault-cut-short").await;
    let node = s.node("n", json!([])).await;
    let others: Vec<serde_json::Value> =
        (0..129).map(|i| json!({"key": format!("other-{i}"), "operator": "Exists", "effect": "NoExecute"})).collect();
    let with = |last: serde_json::Value| {
        let mut t = others.clone();
        t.push(last);
        serde_json::Value::Array(t)
    };
    s.pod(
        "three",
        &node,
        with(json!({"key": KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3})),
        json!({}),
    )
    .await;
    s.pod("never", &node, with(json!({"key": "unrelated", "operator": "Exists", "effect": "NoExecute"})), json!({}))
        .await;
    s.pod("forever", &node, with(json!({"key": KEY, "operator": "Exists", "effect": "NoExecute"})), json!({})).await;
    let c = Controller::start(env, &s.scope, &["--leader-elect=false"]).await;
    let evictions = Evictions::watch(s.pods()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    let never = evictions.wait("never", Duration::from_secs(10)).await.expect("untolerated: evicted at once");
    let three = evictions.wait("three", Duration::from_secs(15)).await;
    let three = three
        .unwrap_or_else(|| panic!("never evicted for the taint its 130th toleration tolerates for 3 s:\n{}", c.logs()));
    let after = |t: jiff::Timestamp| (t - added).total(jiff::Unit::Millisecond).unwrap_or(0.0) / 1000.0;
    eprintln!("evicted at once after {:.2} s; at its 3 s deadline after {:.2} s", after(never), after(three));
    assert!(after(three) >= 3.0 && after(three) < 6.0, "{} s", after(three));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(evictions.at("forever").is_none(), "evicted for a taint it tolerates forever:\n{}", c.logs());
    let m = c.metrics().await;
    assert!(metric_sum(&m, "nlc_api_requests_total", &["verb=\"get\"", "resource=\"pods\""]) >= 3.0, "{m}");
}

#[tokio::test]
async fn paced_evictions_wait_in_a_bounded_queue_and_leave_it_when_called_off() {
    let env = shared();
    let s = Scope::new(env, "fault-queue").await;
    let node = s.node("n", json!([])).await;
    for i in 0..300 {
        s.pod(&format!("p{i}"), &node, json!([]), json!({})).await;
    }
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &["--leader-elect=false", "--pod-eviction-qps", "2"]).await;
    s.set_taints(&node, json!([no_execute(KEY, now_s())])).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut queued = 0.0;
    while queued < 250.0 {
        assert!(std::time::Instant::now() < deadline, "never queued:\n{}", c.metrics().await);
        queued = metric(&c.metrics().await, "nlc_executor_queue_depth{queue=\"evictions\"}").unwrap_or(0.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The taint goes: every queued eviction is called off at once.
    s.set_taints(&node, json!([])).await;
    let last_seen = Cell::new(0.0);
    eventually(Duration::from_secs(3), || async {
        let left = metric(&c.metrics().await, "nlc_executor_queue_depth{queue=\"evictions\"}").unwrap_or(0.0);
        last_seen.set(left);
        (left == 0.0).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        let left = last_seen.get();
        panic!("{left} still queued")
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let evicted = (0..300).filter(|i| evictions.at(&format!("p{i}")).is_some()).count();
    assert!(evicted <= 20, "{evicted} evicted after the taint went");
}

/// A tenant's pods of a megabyte each, every one with its own list of the longest tolerations
/// the API admits, present before the controller starts and listed in pages (as on 1.33, where
/// the API server refuses streamed lists; forced here with `--streaming-lists=false` so that
/// both versions test it): 200 pods make a 200 MB page. Before, the page was buffered whole and
/// every pod kept 128 tolerations of 64 kB (together past the chart's 256 Mi limit: an OOM kill
/// on every relist, for both replicas). Now the page is decoded as it arrives and each pod keeps
/// 4 KiB of its tolerations: the controller's peak stays under 128 MiB, listing and then reading
/// the cut-short pods live; and every decision is exact: the pods whose last toleration
/// tolerates the taint for ever stay, the one tolerating it for 5 s goes at its deadline, the one
/// nothing tolerates goes at once.
#[tokio::test]
async fn megabyte_pods_listed_in_pages_keep_memory_bounded_and_decisions_exact() {
    use futures::StreamExt as _;
    const PODS: usize = 200;
    const PER_POD: usize = 2_400;
    let env = tokio::task::spawn_blocking(|| nlc_testenv::ControlPlane::start(nlc_testenv::Options::default()))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("control plane: {e:#}"));
    let s = Scope::new(&env, "fault-heavy").await;
    let node = s.node("n", json!([])).await;
    // A 253-byte DNS prefix and a 63-byte name: the longest key; a 63-byte value.
    let prefix = ["a", "b", "c"].map(|l| l.repeat(63)).join(".") + "." + &"d".repeat(61);
    let tolerations = |pod: usize, last: Option<serde_json::Value>| {
        let mut t: Vec<serde_json::Value> = (0..PER_POD)
            .map(|j| {
                json!({"key": format!("{prefix}/{:0>63}", format!("p{pod}-{j}")), "operator": "Equal",
                       "value": format!("{:0>63}", j), "effect": "NoExecute"})
            })
            .collect();
        t.extend(last);
        serde_json::Value::Array(t)
    };
    let forever = json!({"key": KEY, "operator": "Exists", "effect": "NoExecute"});
    let kinds: Vec<(String, Option<serde_json::Value>)> = (0..PODS)
        .map(|i| match i {
            0 => ("doomed".to_owned(), None),
            1 => (
                "timed".to_owned(),
                Some(json!({"key": KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5})),
            ),
            i => (format!("stays-{i}"), Some(forever.clone())),
        })
        .collect();
    let created = futures::stream::iter(kinds.iter().enumerate())
        .map(|(i, (name, last))| {
            let (s, node) = (&s, &node);
            let t = tolerations(i, last.clone());
            async move {
                let pod = s.pod(name, node, t, json!({})).await;
                serde_json::to_vec(&pod).map(|b| b.len()).unwrap_or(0)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<usize>>()
        .await;
    let bytes: usize = created.iter().sum();
    eprintln!("{PODS} pods, {:.0} MB of JSON", bytes as f64 / 1e6);
    assert!(bytes > 200_000_000, "{bytes} bytes: the pods are not the megabyte each the test is about");

    let c = Controller::start(&env, &s.scope, &["--leader-elect=false", "--streaming-lists=false"]).await;
    let listed_kb = status_kb(c.pid(), "VmHWM");
    eprintln!("peak RSS after the paged list: {} MiB", listed_kb / 1024);
    assert!(listed_kb < 128 * 1024, "peak RSS {listed_kb} kB after listing {PODS} pods of a megabyte");
    let m = c.metrics().await;
    assert!(metric(&m, "nlc_pods_tolerations_truncated_total").unwrap_or(0.0) >= PODS as f64, "{m}");

    let evictions = Evictions::watch(s.pods()).await;
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    let after = |t: jiff::Timestamp| (t - added).total(jiff::Unit::Millisecond).unwrap_or(0.0) / 1000.0;
    let doomed = evictions.wait("doomed", Duration::from_secs(60)).await;
    let doomed = doomed.unwrap_or_else(|| panic!("nothing tolerates the taint, never evicted:\n{}", c.logs()));
    let timed = evictions.wait("timed", Duration::from_secs(60)).await;
    let timed = timed.unwrap_or_else(|| panic!("tolerated for 5 s, never evicted:\n{}", c.logs()));
    // Every cut-short pod is read live once (the taint is none of its kept tolerations').
    let last_seen = Cell::new((0.0, String::new()));
    eventually_every(Duration::from_secs(120), Duration::from_millis(250), || async {
        let m = c.metrics().await;
        let reads = metric_sum(&m, "nlc_api_requests_total", &["verb=\"get\"", "resource=\"pods\""]);
        if reads >= PODS as f64 {
            return Some(());
        }
        last_seen.set((reads, m));
        None
    })
    .await
    .unwrap_or_else(|| {
        let (reads, m) = last_seen.take();
        panic!("{reads} pods read live of {PODS}:\n{m}")
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak_kb = status_kb(c.pid(), "VmHWM");
    eprintln!(
        "evicted at once after {:.2} s, at its 5 s deadline after {:.2} s; peak RSS {} MiB",
        after(doomed),
        after(timed),
        peak_kb / 1024
    );
    assert!(after(doomed) < 10.0, "{} s", after(doomed));
    assert!((5.0..10.0).contains(&after(timed)), "{} s", after(timed));
    let wrong: Vec<&str> = kinds
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("stays-") && evictions.at(n).is_some())
        .collect();
    assert!(wrong.is_empty(), "evicted for a taint they tolerate for ever: {wrong:?}");
    assert!(peak_kb < 128 * 1024, "peak RSS {peak_kb} kB after reading {PODS} pods of a megabyte live");
}

/// Accepts on `listener` and forwards each connection to the API server's port.
async fn forward(listener: tokio::net::TcpListener, to: u16) {
    while let Ok((mut a, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut b) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            }
        });
    }
}

/// Started while no API server answers (a leader that lost its Lease in an API server restart,
/// started again at once by its kubelet): the process waits for one instead of exiting into the
/// kubelet's crash-loop backoff, and is ready once it answers. (Before, it exited at once: the
/// chaos bench's controller was started eleven times in the 5 s of one restart.)
#[tokio::test]
async fn started_while_no_api_server_answers_it_waits_for_one() {
    let env = shared();
    let s = Scope::new(env, "fault-no-server").await;
    let api_port: u16 = env.server.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    // A port where nothing listens yet: connections are refused, as during a restart.
    let port = free_port();
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let kubeconfig = env.dir.join(format!("later-{port}.kubeconfig"));
    std::fs::write(&kubeconfig, text.replace(&env.server, &format!("https://127.0.0.1:{port}"))).expect("kubeconfig");
    let mut c = Controller::spawn(&kubeconfig, env, &s.scope, &flags(&["--leader-elect=false"]), &[]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(c.wait_exit(Duration::ZERO).await.is_none(), "exited while no API server answered:\n{}", c.logs());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let _forward = tokio::spawn(forward(listener, api_port));
    let ready = eventually_every(Duration::from_secs(15), Duration::from_millis(100), || async {
        matches!(http_get(c.admin_port(), "/readyz").await, Some((200, _))).then_some(())
    })
    .await;
    assert!(ready.is_some(), "not ready 15 s after the API server answered:\n{}", c.logs());
}
