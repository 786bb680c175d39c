use super::*;
use crate::fixtures::{World, lifecycle_config, node, pod, taint_eviction, ts};
use crate::taints::Effect;
use proptest::prelude::*;

const HORIZON: Duration = Duration::from_secs(3600);
const KEY: &str = "example.com/maintenance";

fn world(pods: Vec<crate::index::SlimPod>) -> World {
    let nodes = (0..6).map(|i| node(&format!("n{i}")).zone("a").build()).collect();
    let leases = (0..6).map(|i| (["n0", "n1", "n2", "n3", "n4", "n5"][i], 0.0)).collect();
    World::with_leases(preview_config(lifecycle_config(), HORIZON), taint_eviction(), nodes, pods, leases)
}

fn taint() -> Taint {
    Taint { key: KEY.into(), value: String::new(), effect: Effect::NoExecute, time_added: None }
}

fn outcome<'a>(w: &'a WhatIf, pod: &str) -> (&'a str, Option<i64>) {
    let row = w.pods.iter().find(|p| p.pod == format!("ns/{pod}")).expect("a row");
    (row.outcome, row.in_seconds)
}

#[test]
fn a_taint_is_previewed_pod_by_pod() {
    let pods = vec![
        pod("now").on("n0").build(),
        pod("soon").on("n0").tolerates(KEY, Some(30)).build(),
        pod("forever").on("n0").tolerates(KEY, None).build(),
        pod("late").on("n0").tolerates(KEY, Some(7200)).build(),
        pod("elsewhere").on("n1").build(),
    ];
    let w = world(pods);
    let h = Hypothesis { taint: Some(taint()), ready: None, lever: None, nodes: vec!["n0".into()] };
    let facts = vec![PodFacts {
        key: "ns/now".into(),
        namespace: "ns".into(),
        labels: BTreeMap::from([("app".into(), "web".into())]),
        healthy: true,
        workload: "Deployment/web".into(),
    }];
    let budget = Budget {
        namespace: "ns".into(),
        name: "web".into(),
        selector: "app=web".parse().expect("selector"),
        min_available: Some(IntOrPercent::Int(1)),
        max_unavailable: None,
    };
    let now = w.now;
    let got = run(w.state, vec![], &h, now, HORIZON, &facts, &[budget]);
    assert_eq!(outcome(&got, "now"), ("immediate", Some(0)));
    assert_eq!(outcome(&got, "soon"), ("delayed", Some(30)));
    assert_eq!(outcome(&got, "forever"), ("never", None));
    assert_eq!(outcome(&got, "late"), ("later", Some(7200)));
    assert!(got.pods.iter().all(|p| p.node == "n0"), "only the tainted node's pods");
    assert_eq!(got.workloads.iter().find(|g| g.name == "ns/Deployment/web").map(|g| g.immediate), Some(1));
    assert_eq!(
        got.namespaces,
        vec![GroupRow { name: "ns".into(), immediate: 1, delayed: 1, later: 1, held: 0, never: 1 }]
    );
    assert_eq!(got.budgets_broken, vec![BudgetRow { budget: "ns/web".into(), healthy: 1, desired: 1, after: 0 }]);
    assert!(render_text(&got).contains("ns/soon"));
}

#[test]
fn a_failure_is_previewed_through_the_zone_limiter() {
    // Three of six nodes of one zone fail: 50 %, under the 55 % threshold: Normal, tainted at
    // 0.1 node/s; their pods carry the API server's 300 s default.
    let pods = (0..3)
        .map(|i| {
            pod(&format!("p{i}")).on(&format!("n{i}")).tolerates(crate::taints::keys::UNREACHABLE, Some(300)).build()
        })
        .collect();
    let w = world(pods);
    let h = Hypothesis {
        taint: None,
        ready: Some("Unknown".into()),
        lever: None,
        nodes: vec!["n0".into(), "n1".into(), "n2".into()],
    };
    let now = w.now;
    let got = run(w.state, vec![], &h, now, HORIZON, &[], &[]);
    let zone = &got.zones[0];
    assert_eq!((zone.before.as_str(), zone.after.as_str(), zone.unhealthy), ("Normal", "Normal", 3));
    let times: Vec<i64> = got
        .tainted
        .iter()
        .filter(|t| t.taint.starts_with(crate::taints::keys::UNREACHABLE))
        .map(|t| t.in_seconds)
        .collect();
    assert_eq!(times, vec![0, 10, 20], "one node every 10 s: {:?}", got.tainted);
    assert_eq!(zone.tainted_first_minute, 3);
    let mut due: Vec<i64> = got.pods.iter().filter_map(|p| p.in_seconds).collect();
    due.sort();
    assert_eq!(due, vec![300, 310, 320], "{:?}", got.pods);
}

/// What `whatif` said is what the controller in `w` did: each pod it said goes within the
/// horizon was evicted then (whole seconds from the start), and no other.
fn agree(said: &WhatIf, w: &World) -> Result<(), TestCaseError> {
    let done: HashMap<String, i64> = w
        .log
        .iter()
        .filter_map(|(t, a)| match a {
            Action::EvictPod(e) => Some((e.key.to_string(), t.duration_since(ts(0.0)).as_secs())),
            _ => None,
        })
        .collect();
    for row in &said.pods {
        let evicted = done.get(&row.pod).copied();
        match row.outcome {
            "immediate" | "delayed" => prop_assert_eq!(evicted, row.in_seconds, "{}", row.pod),
            _ => prop_assert_eq!(evicted, None, "{}", row.pod),
        }
    }
    Ok(())
}

proptest! {
    // Each case runs the state an hour forward twice.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// What `whatif` says is what the controller then does, pod for pod, to the second.
    #[test]
    fn whatif_and_the_controller_agree(seconds in prop::collection::vec(prop::option::of(prop::option::of(-5i64..5000)), 1..8)) {
        let pods: Vec<_> = seconds
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let p = pod(&format!("p{i}")).on(["n0", "n1"][i % 2]);
                match s {
                    None => p.build(), // no toleration for it
                    Some(secs) => p.tolerates(KEY, *secs).build(),
                }
            })
            .collect();
        let h = Hypothesis { taint: Some(taint()), ready: None, lever: None, nodes: vec!["n0".into(), "n1".into()] };
        let w = world(pods.clone());
        let now = w.now;
        let said = run(w.state, vec![], &h, now, HORIZON, &[], &[]);

        // The controller, with the taint really put on the nodes, run to the horizon.
        let mut w = world(pods);
        for n in ["n0", "n1"] {
            let mut node = w.node(n).clone();
            node.taints.push(Taint { time_added: Some(w.now), ..taint() });
            w.update_node(node);
        }
        w.advance_to(3600.0);
        agree(&said, &w)?;
        prop_assert_eq!(said.pods.len(), seconds.len());
    }
}

/// The policies of [`whatif_and_the_controller_agree_with_policies`]: each selects pods
/// labelled `app=<app>` (or every pod) and sets the unreachable deadline (`None`: never).
fn policies(specs: &[(Option<u8>, Option<i64>)]) -> std::sync::Arc<crate::policy::Policies> {
    let specs: Vec<(String, crate::policy::EvictionPolicySpec)> = specs
        .iter()
        .enumerate()
        .map(|(i, (app, secs))| {
            let mut v = serde_json::json!({"unreachable": match secs {
                Some(s) => serde_json::json!({"tolerationSeconds": s}),
                None => serde_json::json!({"never": true}),
            }});
            if let Some(app) = app {
                v["podSelector"] = serde_json::json!({"matchLabels": {"app": format!("a{app}")}});
            }
            (format!("policy-{i}"), serde_json::from_value(v).expect("spec"))
        })
        .collect();
    std::sync::Arc::new(crate::policy::Policies::build(specs.iter().map(|(n, s)| (n.as_str(), s)), BTreeMap::new()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// With eviction policies in force, what `whatif` says of a failure of two nodes is what the
    /// controller then does, pod for pod, to the second: pods whose unreachable toleration is
    /// the API server's default (300 s) take the deadline of the most specific policy, ties and
    /// authored tolerations keep their own.
    #[test]
    fn whatif_and_the_controller_agree_with_policies(
        pods in prop::collection::vec((0u8..3, prop::option::of(prop::option::of(0i64..700))), 1..8),
        specs in prop::collection::vec((prop::option::of(0u8..3), prop::option::of(0i64..700)), 0..4),
    ) {
        use crate::taints::keys::UNREACHABLE;
        let built: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, (app, toleration))| {
                let p = pod(&format!("p{i}")).on(["n0", "n1"][i % 2]).labelled(&[("app", &format!("a{app}"))], "");
                match toleration {
                    None => p.tolerates(UNREACHABLE, Some(300)).build(), // the API server's default
                    Some(secs) => p.tolerates(UNREACHABLE, *secs).build(), // authored
                }
            })
            .collect();
        let policies = policies(&specs);
        let h = Hypothesis { taint: None, ready: Some("Unknown".into()), lever: None, nodes: vec!["n0".into(), "n1".into()] };
        let mut w = world(built.clone());
        w.input(Input::Policies(policies.clone()));
        let now = w.now;
        let said = run(w.state, vec![], &h, now, HORIZON, &[], &[]);

        // The controller, the two nodes really failing, run to the horizon.
        let mut w = world(built);
        w.input(Input::Policies(policies));
        for n in ["n0", "n1"] {
            w.kubelet_posts(n, "Unknown");
        }
        w.advance_to(3600.0);
        agree(&said, &w)?;
        prop_assert_eq!(said.pods.len(), pods.len());
    }
}

/// `whatif` answers with the policies in force (`--policy FILE` adds to them): a pod whose
/// unreachable toleration is the API server's default takes its policy's deadline.
#[test]
fn a_failure_is_previewed_with_the_policies_in_force() {
    use crate::taints::keys::UNREACHABLE;
    let pods = vec![
        pod("web").on("n0").labelled(&[("app", "a0")], "").tolerates(UNREACHABLE, Some(300)).build(),
        pod("db").on("n0").labelled(&[("app", "a1")], "").tolerates(UNREACHABLE, Some(300)).build(),
        pod("authored").on("n0").labelled(&[("app", "a0")], "").tolerates(UNREACHABLE, Some(120)).build(),
        pod("plain").on("n0").labelled(&[("app", "a2")], "").tolerates(UNREACHABLE, Some(300)).build(),
    ];
    let mut w = world(pods);
    w.input(Input::Policies(policies(&[(Some(0), Some(30)), (Some(1), None)])));
    let h = Hypothesis { taint: None, ready: Some("Unknown".into()), lever: None, nodes: vec!["n0".into()] };
    let now = w.now;
    let got = run(w.state, vec![], &h, now, HORIZON, &[], &[]);
    assert_eq!(outcome(&got, "web"), ("delayed", Some(30)));
    assert_eq!(outcome(&got, "db"), ("never", None));
    assert_eq!(outcome(&got, "authored"), ("delayed", Some(120)));
    assert_eq!(outcome(&got, "plain"), ("delayed", Some(300)));
}

/// `extend`'s count: the lever asked (10 s) against the one in force (an hour) on a node
/// tainted 20 s ago, pod by pod; what it brings forward is what it evicts earlier.
#[test]
fn a_shorter_lever_is_previewed_and_what_it_brings_forward_counted() {
    let world = || {
        let nodes = vec![
            node("n0").zone("a").taint(crate::fixtures::no_execute(KEY, Some(0.0))).extended(3600, 7200.0).build(),
            node("n1").zone("a").build(),
        ];
        let pods = vec![
            pod("untolerated").on("n0").build(),
            pod("soon").on("n0").tolerates(KEY, Some(5)).build(),
            pod("late").on("n0").tolerates(KEY, Some(7200)).build(),
            pod("forever").on("n0").tolerates(KEY, None).build(),
            pod("elsewhere").on("n1").build(),
        ];
        let mut w = World::with_leases(
            preview_config(lifecycle_config(), HORIZON),
            taint_eviction(),
            nodes,
            pods,
            vec![("n0", 0.0), ("n1", 0.0)],
        );
        w.advance_to(20.0);
        w
    };
    let asked = crate::extend::Extension { by: Duration::from_secs(10), until: ts(3620.0) };
    let run_with = |lever: Option<crate::extend::Lever>| {
        let w = world();
        let now = w.now;
        let h = Hypothesis { lever, nodes: vec!["n0".into()], ..Default::default() };
        run(w.state, vec![], &h, now, HORIZON, &[], &[])
    };
    let before = run_with(None);
    let after = run_with(Some(crate::extend::Lever::On(asked)));
    let rows = |w: &WhatIf| -> Vec<(String, &'static str, Option<i64>)> {
        w.pods.iter().map(|p| (p.pod.clone(), p.outcome, p.in_seconds)).collect()
    };
    assert_eq!(
        rows(&before),
        [
            ("ns/untolerated".to_owned(), "delayed", Some(3580)),
            ("ns/soon".to_owned(), "delayed", Some(3585)),
            ("ns/late".to_owned(), "later", Some(7180)),
            ("ns/forever".to_owned(), "never", None),
        ]
    );
    assert_eq!(
        rows(&after),
        [
            ("ns/soon".to_owned(), "immediate", Some(0)),
            ("ns/untolerated".to_owned(), "immediate", Some(0)),
            ("ns/late".to_owned(), "later", Some(7180)),
            ("ns/forever".to_owned(), "never", None),
        ]
    );
    assert_eq!(brought_forward(&before, &after), ["ns/soon", "ns/untolerated"]);
    assert_eq!(brought_forward(&after, &before), Vec::<String>::new(), "lengthening brings none forward");
    assert_eq!(after.hypothesis, format!("the lever: {}", asked.describe(ts(20.0))));
}
