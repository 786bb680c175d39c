//! The incident lever (`kubectl nlc extend`, docs/spec.md §17) against the real kube-apiserver:
//! set on a node before a taint, it moves the deadlines of that taint's pods `--by` later (an
//! untolerated one included), `status` and the node's event say who, why and until when, and
//! `--cancel` puts them back (what is then overdue goes); a lever that has expired moves nothing
//! new.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use nlc_core::extend::{EXTEND_BY_LABEL, EXTENSION_ANNOTATION};
use nlc_testenv::shared;
use serde_json::json;

const INCIDENT: &str = "example.com/incident";

fn taint_now() -> serde_json::Value {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!([{"key": INCIDENT, "effect": "NoExecute", "timeAdded": now}])
}

#[tokio::test]
async fn the_lever_moves_deadlines_says_who_and_why_and_cancel_puts_them_back() {
    let env = shared();
    let s = Scope::new(env, "extend").await;
    let target = make_node(&s, "z1", json!([])).await;
    let expired = make_node(&s, "z1", json!([])).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&target, &expired], 2).await;
    s.pod("untolerated", &target, json!([]), json!({})).await;
    s.pod("timed", &target, json!([toleration(INCIDENT, Some(5))]), json!({})).await;
    s.pod("after-expiry", &expired, json!([]), json!({})).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;

    // The lever on `target` for an hour, 60 s; on `expired` for 1 s, which then runs out.
    let said =
        cli(env, &["extend", "--node", &target, "--by", "60s", "--for", "1h", "--reason", "ToR switch flapping"]);
    assert!(said.contains("extended by 60s") && said.contains("ToR switch flapping"), "{said}");
    cli(env, &["extend", "--node", &expired, "--by", "60s", "--for", "1s", "--reason", "short"]);
    let node = node_now(&s, &target).await;
    assert_eq!(node.metadata.labels.as_ref().and_then(|l| l.get(EXTEND_BY_LABEL)).map(String::as_str), Some("60"));
    let record = node.metadata.annotations.as_ref().and_then(|a| a.get(EXTENSION_ANNOTATION)).cloned();
    let record: serde_json::Value = serde_json::from_str(record.as_deref().unwrap_or("null")).expect("record");
    assert_eq!(record["reason"], "ToR switch flapping");
    assert!(record["by"].as_str().is_some_and(|by| !by.is_empty() && by != "unknown"), "{record}");
    let events: Api<Event> = Api::namespaced(s.client.clone(), "default");
    let said: Vec<String> = events
        .list(&ListParams::default().fields("reason=EvictionsExtended"))
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(&target))
        .filter_map(|e| e.message)
        .collect();
    assert!(said.len() == 1 && said[0].contains("ToR switch flapping"), "{said:?}");

    tokio::time::sleep(Duration::from_secs(2)).await;
    s.set_taints(&target, taint_now()).await;
    s.set_taints(&expired, taint_now()).await;
    let tainted = Instant::now();
    // The lever's end passed before the taint: the untolerated pod there goes at once.
    eventually(Duration::from_secs(10), || async { s.deleted("after-expiry").await.then_some(()) })
        .await
        .unwrap_or_else(|| panic!("an expired lever still moved a deadline:\n{}", c.logs()));
    // On `target`, due at taint + 60 s and taint + 65 s instead of at once and taint + 5 s.
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(tainted.elapsed())).await;
    for pod in ["untolerated", "timed"] {
        assert!(!s.deleted(pod).await, "{pod} evicted while the lever held it:\n{}", c.logs());
    }
    let out = cli(env, &["status", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&out).expect("status json");
    let row = report["extended"].as_array().into_iter().flatten().find(|r| r["node"] == target.as_str());
    let row = row.cloned().unwrap_or_default();
    assert_eq!(
        (&row["state"], &row["bySeconds"], &row["reason"]),
        (&json!("in force"), &json!(60), &json!("ToR switch flapping")),
        "{report}"
    );
    let pending: Vec<(String, i64, bool)> = report["evictions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["node"] == target.as_str())
        .map(|e| {
            (
                e["pod"].as_str().unwrap_or_default().to_owned(),
                e["inSeconds"].as_i64().unwrap_or(-1),
                e["extended"] == true,
            )
        })
        .collect();
    assert_eq!(pending.len(), 2, "{report}");
    for (pod, left, extended) in &pending {
        assert!(*extended && (45..=66).contains(left), "{pod}: due in {left} s: {report}");
    }
    let explained =
        cli(env, &["explain", "--from-cluster", "--node", &target, "--pod", &format!("{}/timed", s.ns), "-o", "json"]);
    let explained: serde_json::Value = serde_json::from_str(&explained).expect("explain json");
    let lever = explained["lever"].as_str().unwrap_or_default();
    assert!(
        lever.contains("moved 60s later (in force)") && lever.contains("it moved this pod's deadline"),
        "{explained}"
    );

    let text = cli(env, &["explain", "--from-cluster", "--node", &target, "--pod", &format!("{}/timed", s.ns)]);
    eprintln!("{text}");
    assert!(text.contains("Lever:      eviction deadlines before"), "{text}");

    // Cancelled: both are overdue and go at once.
    let said = cli(env, &["extend", "--node", &target, "--cancel"]);
    assert!(said.contains("no longer extended"), "{said}");
    let cancelled = Instant::now();
    for pod in ["untolerated", "timed"] {
        eventually(Duration::from_secs(10), || async { s.deleted(pod).await.then_some(()) })
            .await
            .unwrap_or_else(|| panic!("{pod} not evicted after the cancel:\n{}", c.logs()));
    }
    eprintln!("evicted {:.1} s after the cancel", cancelled.elapsed().as_secs_f64());
    // Bad input is a clear error, and nothing is written.
    for (flag, value) in [("--by", "200h"), ("--for", "200h"), ("--by", "0s")] {
        let by = if flag == "--by" { value } else { "1m" };
        let out = std::process::Command::new(BIN)
            .args(["extend", "--kubeconfig"])
            .arg(&env.kubeconfig)
            .args(["--node", &target, "--reason", "x", "--by", by])
            .args(if flag == "--for" { vec![flag, value] } else { vec![] })
            .output()
            .expect("the binary");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag), "{flag} {value}: {err}");
    }
    let node = node_now(&s, &expired).await;
    assert!(
        node.metadata.labels.as_ref().is_some_and(|l| l.contains_key(EXTEND_BY_LABEL)),
        "expired stays until cancelled"
    );
    let node = node_now(&s, &target).await;
    assert!(
        node.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(EXTEND_BY_LABEL)),
        "{:?}",
        node.metadata.labels
    );
    assert!(tainted.elapsed() < Duration::from_secs(55), "the cancel, not the lever, let them go");
}

/// A second `extend` never shortens a lever in force by accident (issue 64, item 6): with an
/// hour's lever on a tainted node, `--by 10s` is refused (it would make the untolerated pod due
/// at once) and says so, and the pod is kept; `--replace` then takes it, and the pod goes. The
/// who/why from the annotation is printed with its control characters escaped.
#[tokio::test]
async fn a_second_extend_never_shortens_a_lever_in_force_without_replace() {
    let env = shared();
    let s = Scope::new(env, "extend-short").await;
    let target = make_node(&s, "z1", json!([])).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&target], 2).await;
    s.pod("untolerated", &target, json!([]), json!({})).await;
    s.pod("forever", &target, json!([toleration(INCIDENT, None)]), json!({})).await;
    let c = Controller::start(env, &s.scope, &flags(&[])).await;

    // A reason a tenant could have written to forge a terminal: clear the screen, a fake line.
    let forged = "INC-1\u{1b}[2J\nnode ok: nothing extended";
    cli(env, &["extend", "--node", &target, "--by", "1h", "--for", "2h", "--reason", forged]);
    s.set_taints(&target, taint_now()).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(!s.deleted("untolerated").await, "the lever of an hour held it:\n{}", c.logs());

    // Shorter: refused, nothing written, the pod kept.
    let (ok, out, err) = cli_outcome(env, &["extend", "--node", &target, "--by", "10s", "--reason", "shorter"]);
    eprintln!("--- refused ---\n{out}{err}");
    assert!(!ok, "a shorter --by was taken: {out}{err}");
    for said in ["3600s", "10s", "1 pending eviction", "--replace"] {
        assert!(err.contains(said), "the refusal does not say {said:?}: {err}");
    }
    assert!(!err.contains('\u{1b}') && err.contains("\\x1b[2J\\nnode ok"), "who/why not escaped: {err:?}");
    let node = node_now(&s, &target).await;
    assert_eq!(node.metadata.labels.as_ref().and_then(|l| l.get(EXTEND_BY_LABEL)).map(String::as_str), Some("3600"));
    // An earlier end (a shorter --for) is a shortening too.
    let (ok, _, err) = cli_outcome(env, &["extend", "--node", &target, "--by", "1h", "--for", "1m", "--reason", "x"]);
    assert!(!ok && err.contains("--replace"), "an earlier end was taken: {err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!s.deleted("untolerated").await, "evicted after a refused extend:\n{}", c.logs());
    // `status` escapes it too.
    let text = cli(env, &["status"]);
    assert!(!text.contains('\u{1b}') && text.contains("INC-1\\x1b[2J"), "{text:?}");

    // Longer needs no flag; shorter with --replace is taken, and the pod, now past taint + 10 s, goes.
    cli(env, &["extend", "--node", &target, "--by", "2h", "--for", "3h", "--reason", "longer"]);
    let said = cli(env, &["extend", "--node", &target, "--by", "10s", "--reason", "replaced", "--replace"]);
    assert!(said.contains("extended by 10s") && said.contains("1 pending eviction"), "{said}");
    let replaced = Instant::now();
    eventually(Duration::from_secs(10), || async { s.deleted("untolerated").await.then_some(()) })
        .await
        .unwrap_or_else(|| panic!("not evicted after --replace:\n{}", c.logs()));
    eprintln!("evicted {:.1} s after --replace", replaced.elapsed().as_secs_f64());
    assert!(!s.deleted("forever").await);
}
