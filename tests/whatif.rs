//! `whatif` against the real API server: its answer for a taint, pod for pod, is what the
//! controller then does when the taint is put on the node; a failure is previewed through the zone
//! limiter with the API server's default tolerations.

mod common;

use std::time::Duration;

use common::*;
use nlc_testenv::shared;
use serde_json::{Value, json};

const KEY: &str = "example.com/maintenance";

fn whatif(env: &nlc_testenv::ControlPlane, args: &[&str]) -> Value {
    let out = std::process::Command::new(BIN)
        .args(["whatif", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--controller-config=false", "-o", "json"])
        .args(args)
        .output()
        .expect("whatif");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("whatif: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn row<'a>(answer: &'a Value, s: &Scope, pod: &str) -> &'a Value {
    let key = format!("{}/{pod}", s.ns);
    answer["pods"].as_array().into_iter().flatten().find(|r| r["pod"] == key.as_str()).unwrap_or(&Value::Null)
}

#[tokio::test]
async fn whatif_says_what_the_controller_then_does_pod_for_pod() {
    let env = shared();
    let s = Scope::new(env, "whatif").await;
    let target = make_node_labelled(&s, "z1", json!([]), json!({"whatif": "target"})).await;
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    let tolerate = |secs: Option<i64>| {
        let mut t = json!({"key": KEY, "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = secs {
            t["tolerationSeconds"] = json!(s);
        }
        json!([t])
    };
    s.pod("now", &target, json!([]), json!({})).await;
    s.pod("soon", &target, tolerate(Some(4)), json!({})).await;
    s.pod("forever", &target, tolerate(None), json!({})).await;
    s.pod("late", &target, tolerate(Some(7200)), json!({})).await;
    let selector = format!("nlc-test={},whatif=target", s.scope);

    let said = whatif(env, &["--nodes", &selector, "--taint", &format!("{KEY}:NoExecute")]);
    assert_eq!(said["nodes"], json!([target]), "{said}");
    let outcome = |pod: &str| (row(&said, &s, pod)["outcome"].clone(), row(&said, &s, pod)["inSeconds"].clone());
    assert_eq!(outcome("now"), (json!("immediate"), json!(0)), "{said}");
    assert_eq!(outcome("soon"), (json!("delayed"), json!(4)), "{said}");
    assert_eq!(outcome("forever"), (json!("never"), Value::Null), "{said}");
    assert_eq!(outcome("late"), (json!("later"), json!(7200)), "{said}");
    let ns = said["namespaces"].as_array().into_iter().flatten().find(|g| g["name"] == s.ns.as_str()).cloned();
    assert_eq!(ns.map(|g| (g["immediate"].clone(), g["never"].clone())), Some((json!(1), json!(1))), "{said}");

    // The controller, with the taint put on the node: the same pods, at the same times (±2 s).
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, FAST).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tainted = jiff::Timestamp::now();
    s.set_taints(&target, json!([{"key": KEY, "effect": "NoExecute", "timeAdded": now_s()}])).await;
    for (pod, after) in [("now", 0.0), ("soon", 4.0)] {
        let at = evictions.wait(pod, Duration::from_secs(15)).await;
        let at = at.unwrap_or_else(|| panic!("{pod} never evicted:\n{}", c.logs()));
        let took = common::secs_between(tainted, at);
        assert!((took - after).abs() <= 2.0, "{pod} evicted {took:.1} s after the taint, whatif said {after} s");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(evictions.at("forever"), None, "{}", c.logs());
    assert_eq!(evictions.at("late"), None, "{}", c.logs());
}

#[tokio::test]
async fn a_failure_is_previewed_through_the_zone_limiter() {
    let env = shared();
    let s = Scope::new(env, "whatif-fail").await;
    let target = make_node_labelled(&s, "z1", json!([]), json!({"whatif": "target"})).await;
    // Alive for the other test's controller, which sees every node.
    let (_, _kubelets) = with_live_neighbours(&s, "z1", &[&target], 3).await;
    // The API server's DefaultTolerationSeconds gives it 300 s for unreachable.
    s.pod("p", &target, json!([]), json!({})).await;
    let selector = format!("nlc-test={},whatif=target", s.scope);
    let said = whatif(env, &["--nodes", &selector, "--condition", "Ready=Unknown"]);
    assert_eq!(row(&said, &s, "p")["outcome"], "delayed", "{said}");
    assert_eq!(row(&said, &s, "p")["inSeconds"], 300, "{said}");
    let zone = said["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|z| z["zone"].as_str().is_some_and(|n| n.contains(&s.scope)));
    let zone = zone.cloned().unwrap_or_else(|| panic!("no zone of the scope: {said}"));
    assert_eq!(
        (zone["after"].clone(), zone["unhealthy"].clone(), zone["tainted"].clone()),
        (json!("Normal"), json!(1), json!(1)),
        "{said}"
    );
    // Nothing was written.
    let node = node_now(&s, &target).await;
    assert_eq!(taint_of(&node, UNREACHABLE, "NoExecute"), None);
    // A bad hypothesis is a clear error.
    let out = std::process::Command::new(BIN)
        .args(["whatif", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--nodes", &selector, "--taint", "no-effect"])
        .output()
        .expect("whatif");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("KEY[=VALUE]:EFFECT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
