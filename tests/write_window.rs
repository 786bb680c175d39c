//! No second writer around a leader change, judged by the API server's own audit log: a leader
//! stopped with SIGTERM in the middle of an eviction storm seals its write window, waits for its
//! writes in flight, and only then releases its Lease, so that nothing it sends lands after the
//! new leader's first write. Own control plane (the audit log is the whole API server's).

mod common;

use std::time::Duration;

use common::*;
use nlc_testenv::{ControlPlane, Options};
use serde_json::json;

const KEY: &str = "example.com/storm";

#[tokio::test]
async fn sigterm_under_an_eviction_storm_leaves_no_write_after_the_new_leaders_first() {
    let env = tokio::task::spawn_blocking(|| ControlPlane::start(Options { audit: true, ..Options::default() }))
        .await
        .expect("join")
        .expect("control plane");
    let a_config = env.kubeconfig_for("leader-a", &["system:masters"]).expect("kubeconfig a");
    let b_config = env.kubeconfig_for("leader-b", &["system:masters"]).expect("kubeconfig b");
    let s = Scope::new(&env, "fence").await;
    let nodes = [s.node("n1", json!([])).await, s.node("n2", json!([])).await];
    for i in 0..160 {
        s.pod(&format!("p{i}"), &nodes[i % 2], json!([]), json!({})).await;
    }
    // Paced writes, so that many are queued or in flight when the leader is stopped; default
    // election durations (only the release explains a fast hand-over).
    let paced = ["--leader-elect-resource-name", "fence", "--kube-api-qps", "10", "--kube-api-burst", "2"];
    let a = Controller::start_with_kubeconfig(&a_config, &env, &s.scope, &paced).await;
    a.until_leads("fence", Duration::from_secs(10)).await;
    let mut b = Controller::start_with_kubeconfig(&b_config, &env, &s.scope, &paced).await;
    for n in &nodes {
        s.set_taints(n, json!([no_execute(KEY, now_s())])).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.terminate();
    let mut a = a;
    let exited = a.wait_exit(Duration::from_secs(30)).await.unwrap_or_else(|| panic!("{}", a.logs()));
    assert!(exited.success(), "{exited:?}:\n{}", a.logs());
    // The new leader goes on with the storm.
    tokio::time::sleep(Duration::from_secs(5)).await;
    b.terminate();
    let _ = b.wait_exit(Duration::from_secs(30)).await;

    let writes = env.audit_writes().expect("audit log");
    let by = |user: &str| writes.iter().filter(move |w| w.user == user).collect::<Vec<_>>();
    let (a_writes, b_writes) = (by("leader-a"), by("leader-b"));
    let a_evictions = a_writes.iter().filter(|w| w.resource == "pods" && w.verb == "delete").count();
    let b_evictions = b_writes.iter().filter(|w| w.resource == "pods" && w.verb == "delete").count();
    assert!(a_evictions > 0 && b_evictions > 0, "a storm on both sides: {a_evictions} and {b_evictions} deletes");
    let b_first = b_writes.first().expect("the new leader wrote").received;
    let late: Vec<_> = a_writes.iter().filter(|w| w.completed >= b_first).collect();
    assert!(late.is_empty(), "the old leader wrote after the new leader's first write ({b_first}): {late:#?}");
    eprintln!(
        "old leader: {} writes ({a_evictions} deletes), the last done at {}; new leader's first at {b_first}",
        a_writes.len(),
        a_writes.last().map(|w| w.completed.to_string()).unwrap_or_default()
    );
    // Every write names us.
    for w in a_writes.iter().chain(&b_writes) {
        assert!(w.user_agent.starts_with("node-lifecycle-controller/"), "{w:?}");
    }
}

/// The write window is a deadline, not only a flag: a leader cut off from the API server in the middle
/// of an eviction storm (its deletes take 8 s to arrive, then its renewals stop arriving) gives
/// every write in flight up by the time its lease could be someone else's, and sends none after:
/// the API server's audit log shows nothing of it after the new leader's first write.
#[tokio::test]
async fn a_partitioned_leader_under_an_eviction_storm_leaves_no_write_after_the_new_leaders_first() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = tokio::task::spawn_blocking(|| ControlPlane::start(Options { audit: true, ..Options::default() }))
        .await
        .expect("join")
        .expect("control plane");
    let proxy = FaultProxy::start(&env).await.expect("proxy");
    let a_config = proxy.kubeconfig(&env).expect("kubeconfig a");
    let b_config = env.kubeconfig_for("leader-b", &["system:masters"]).expect("kubeconfig b");
    let s = Scope::new(&env, "fence-cut").await;
    let nodes = [s.node("n1", json!([])).await, s.node("n2", json!([])).await];
    for i in 0..160 {
        s.pod(&format!("p{i}"), &nodes[i % 2], json!([]), json!({})).await;
    }
    let lease = "fence-cut";
    let flags: Vec<&str> = ["--leader-elect-resource-name", lease, "--kube-api-qps", "10", "--kube-api-burst", "2"]
        .into_iter()
        .chain(FAST_ELECTION.iter().copied())
        .collect();
    let mut a = Controller::start_with_kubeconfig(&a_config, &env, &s.scope, &flags).await;
    a.until_leads(lease, Duration::from_secs(10)).await;
    let mut b = Controller::start_with_kubeconfig(&b_config, &env, &s.scope, &flags).await;
    for n in &nodes {
        s.set_taints(n, json!([no_execute(KEY, now_s())])).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The partition: A's deletes take 8 s to arrive; a second later its renewals stop arriving.
    let slow = proxy.add(Rule::new("DELETE", &["/pods/"], Fault::Delay(Duration::from_secs(8))));
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.add(Rule::new("PUT", &[&format!("/leases/{lease}")], Fault::Hold));
    let exited = a.wait_exit(Duration::from_secs(30)).await.unwrap_or_else(|| panic!("{}", a.logs()));
    assert!(!exited.success(), "a lost lease ends the process with an error: {exited:?}");
    assert!(slow.hits() > 0, "no delete was in flight when the partition came:\n{}", a.logs());
    // Long enough for every delayed delete to have arrived; the new leader goes on.
    tokio::time::sleep(Duration::from_secs(10)).await;
    b.terminate();
    let _ = b.wait_exit(Duration::from_secs(30)).await;

    let writes = env.audit_writes().expect("audit log");
    let ours = |w: &&nlc_testenv::AuditedWrite| w.user_agent.starts_with("node-lifecycle-controller/");
    let a_writes: Vec<_> = writes.iter().filter(ours).filter(|w| w.user == "nlc-fault-proxy").collect();
    let b_writes: Vec<_> = writes.iter().filter(ours).filter(|w| w.user == "leader-b").collect();
    let deletes =
        |ws: &[&nlc_testenv::AuditedWrite]| ws.iter().filter(|w| w.resource == "pods" && w.verb == "delete").count();
    assert!(deletes(&a_writes) > 0 && deletes(&b_writes) > 0, "a storm on both sides");
    let b_first = b_writes.first().expect("the new leader wrote").received;
    let late: Vec<_> = a_writes.iter().filter(|w| w.completed >= b_first).collect();
    assert!(
        late.is_empty(),
        "the old leader wrote after the new leader's first write ({b_first}): {late:#?}\n{}",
        a.logs()
    );
    eprintln!(
        "cut-off leader: {} writes ({} deletes, {} delayed), the last done at {}; new leader's first at {b_first}",
        a_writes.len(),
        deletes(&a_writes),
        slow.hits(),
        a_writes.last().map(|w| w.completed.to_string()).unwrap_or_default()
    );
}
