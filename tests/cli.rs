//! The binary: `run` against the real control plane (readiness, metrics, clean exit on SIGTERM)
//! and `explain` from files and from the cluster.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use nlc_testenv::{shared, unique};

mod common;
use common::{BIN, eventually, eventually_every, free_port, http_get};
use serde_json::json;

#[tokio::test]
async fn run_becomes_ready_serves_metrics_and_stops_on_sigterm() {
    let env = shared();
    let port = free_port();
    let child = tokio::process::Command::new(BIN)
        .args(["run", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--log-format", "json"])
        .args(common::plain_metrics(&[]))
        // Other tests of this binary own their nodes: act on none.
        .args(["--node-selector", "nlc-test=cli-run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn controller");

    let ready = eventually(Duration::from_secs(30), || async {
        matches!(http_get(port, "/readyz").await, Some((200, _))).then_some(())
    })
    .await;
    assert!(ready.is_some(), "controller never became ready");
    assert_eq!(http_get(port, "/healthz").await.map(|r| r.0), Some(200));
    let (code, metrics) = http_get(port, "/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("nlc_cache_objects{resource=\"nodes\"}"), "{metrics}");

    let pid = child.id().expect("pid").to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(status.success());
    let out =
        tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await.expect("exits").expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    // JSON logs: every line is a JSON object; one of them says the caches synced.
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.iter().any(|l| l["message"] == "caches synced; ready"), "{stderr}");
    // Strict parsers (Elasticsearch, Loki's JSON stage) refuse an object with a key twice.
    for line in stderr.lines() {
        let mut de = serde_json::Deserializer::from_str(line);
        serde::de::Deserializer::deserialize_any(&mut de, Strict).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

/// A JSON value walked with every object's keys checked for repeats.
struct Strict;

impl<'de> serde::de::Visitor<'de> for Strict {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if !keys.insert(k.clone()) {
                return Err(serde::de::Error::custom(format!("the key {k:?} twice")));
            }
            map.next_value_seed(Strict)?;
        }
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strict)?.is_some() {}
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Strict {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(BIN).args(["run", "--help"]).output().expect("help");
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--kubeconfig", "--context", "--metrics-bind-address", "--log-format", "--log-level"] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

/// The long flags of `args`' `--help` (without `--help` and `--version`).
fn help_flags(args: &[&str]) -> std::collections::BTreeSet<String> {
    let out = Command::new(BIN).args(args).arg("--help").output().expect("help");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches(',').split(['=', '[']).next().unwrap_or(w).to_owned())
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// docs/configuration.md's tables name every flag of `run` and `webhook` (and the global ones),
/// and no flag the binary does not have.
#[test]
fn the_configuration_reference_lists_exactly_the_binarys_flags() {
    let mut help = help_flags(&[]);
    help.extend(help_flags(&["run"]));
    help.extend(help_flags(&["webhook"]));
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).expect("doc");
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| cell.split('`').filter(|w| w.starts_with("--")).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let undocumented: Vec<_> = help.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&help).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "not in docs/configuration.md: {undocumented:?}; not in --help: {unknown:?}"
    );
    assert!(help.len() > 60, "{help:?}");
}

#[test]
fn a_rule_that_evicts_healthy_nodes_needs_to_be_allowed_explicitly() {
    let out = Command::new(BIN)
        .args(["run", "--taint-rule", "Ready=True:example.com/drain-all:NoExecute"])
        .args(["--allow-no-execute-on-healthy-nodes", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!err.contains("--taint-rule"), "refused although allowed: {err}");
    assert!(err.contains("kubeconfig"), "{err}");
}

/// A second process with the identity of a running one is refused at start, naming --instance;
/// also with an identity too long for an abstract socket's name (a pod name in the chart's
/// namespace: the lock is then named by a digest).
#[tokio::test]
async fn a_second_process_with_the_same_identity_is_refused() {
    twin_refused("twin-a").await;
    twin_refused(&format!("nlc-node-lifecycle-controller-579b754758-rqhc6-{}", "x".repeat(60))).await;
}

async fn twin_refused(identity: &str) {
    let env = shared();
    let port = free_port();
    let lease = unique("twin");
    let args = |port: u16| -> Vec<String> {
        vec![
            "run".into(),
            "--kubeconfig".into(),
            env.kubeconfig.display().to_string(),
            "--metrics-bind-address".into(),
            format!("127.0.0.1:{port}"),
            "--metrics-secure=false".into(),
            "--health-probe-bind-address=0".into(),
            "--node-selector".into(),
            "nlc-test=cli-twin".into(),
            "--instance".into(),
            identity.into(),
            "--leader-elect-resource-name".into(),
            lease.clone(),
        ]
    };
    // The first one's log goes to a file, as a container's does: plain lines, no colour.
    let log = std::env::temp_dir().join(unique("nlc-twin-log"));
    let mut first = tokio::process::Command::new(BIN)
        .args(args(port))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while http_get(port, "/readyz").await.map(|r| r.0) != Some(200) {
        assert!(std::time::Instant::now() < deadline, "the first process never got ready");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let second = tokio::process::Command::new(BIN).args(args(free_port())).output().await.expect("run");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a twin was accepted");
    assert!(err.contains("--instance") && err.contains(identity), "{err}");
    let _ = first.kill().await;
    let written = std::fs::read_to_string(&log).expect("log");
    let _ = std::fs::remove_file(&log);
    assert!(written.contains(" INFO "), "no plain log line: {written}");
    assert!(!written.contains('\u{1b}'), "escape codes in a log file: {written:?}");
}

#[test]
fn run_with_a_broken_kubeconfig_fails_clearly() {
    let dir = std::env::temp_dir().join(unique("nlc-bad-kubeconfig"));
    std::fs::write(&dir, "this: is: not: a kubeconfig").expect("write");
    let out = Command::new(BIN).arg("run").arg("--kubeconfig").arg(&dir).output().expect("run");
    let _ = std::fs::remove_file(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kubeconfig"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn explain(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(BIN)
        .arg("explain")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn explain_files_and_bad_input() {
    let dir = std::env::temp_dir().join(unique("nlc-explain"));
    std::fs::create_dir_all(&dir).expect("dir");
    let node = dir.join("node.yaml");
    std::fs::write(
        &node,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\nspec:\n  taints:\n  - key: node.kubernetes.io/unreachable\n    effect: NoExecute\n    timeAdded: \"2026-01-01T00:00:00Z\"\n",
    )
    .expect("write");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n  containers: []\n  tolerations:\n  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 300}\n";
    let node_s = node.to_str().expect("utf8");
    let (ok, out, err) = explain(&["--node", node_s, "--pod", "-", "-o", "json"], Some(pod));
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        v["eviction"],
        json!({"decision": "Delayed", "tolerationSeconds": 300, "deadline": "2026-01-01T00:05:00Z", "anchor": "timeAdded"})
    );
    assert_eq!(v["taints"][0]["toleratedBy"], json!(0));
    assert_eq!(v["scheduling"], json!("Allowed"));

    let (ok, out, _) = explain(&["--node", node_s, "--pod", "-"], Some(pod));
    assert!(ok);
    assert!(out.contains("TOLERATED BY") && out.contains("Delayed"), "{out}");

    let cases = [
        (vec!["--node", "/nonexistent/node.yaml", "--pod", "-"], Some(pod), "/nonexistent/node.yaml: "),
        (vec!["--node", node_s, "--pod", node_s], None, "not a Pod (kind: Node)"),
        (vec!["--node", node_s, "--pod", "-"], Some("{not json"), "<stdin>: invalid JSON"),
        (vec!["--node", node_s, "--pod", "-"], Some("kind: Pod\n  x: [\n"), "<stdin>: invalid YAML"),
    ];
    for (args, stdin, needle) in cases {
        let (ok, _, err) = explain(&args, stdin);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn explain_from_cluster() {
    let env = shared();
    let client = env.client().await;
    let node_name = unique("explain-node");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": node_name},
                "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]}}))
            .expect("node"),
        )
        .await
        .expect("create node");
    let ns = unique("explain");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"))
        .await
        .expect("ns");
    let pod = Api::<Pod>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]}}))
            .expect("pod"),
        )
        .await
        .expect("pod");
    let created = pod.metadata.creation_timestamp.expect("creationTimestamp").0;
    let kubeconfig = env.kubeconfig.to_str().expect("utf8").to_owned();
    let pod_ref = format!("{ns}/p");
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        explain(
            &["--from-cluster", "--kubeconfig", &kubeconfig, "--node", &node_name, "--pod", &pod_ref, "-o", "json"],
            None,
        )
    })
    .await
    .expect("join");
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    // The API server's DefaultTolerationSeconds gave the pod 300 s for not-ready; the pod was
    // bound (created with nodeName) long after the taint: its countdown starts at its creation.
    let deadline = (created + jiff::SignedDuration::from_secs(300)).strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    assert_eq!(
        v["eviction"],
        json!({"decision": "Delayed", "tolerationSeconds": 300, "deadline": deadline, "anchor": "podBound"})
    );
}

/// Odd flag values are refused at start with one line naming the flag: no panic, no hot loop, no
/// attempt to reach a cluster.
#[test]
fn odd_flag_values_are_refused_naming_the_flag() {
    #[rustfmt::skip]
    let cases: &[(&[&str], &str)] = &[
        (&["--kube-api-qps", "1e-12"], "--kube-api-qps"),
        (&["--kube-api-qps", "NaN"], "--kube-api-qps"),
        (&["--pod-eviction-qps", "1e-300"], "--pod-eviction-qps"),
        (&["--node-eviction-rate", "1e-12"], "--node-eviction-rate"),
        (&["--secondary-node-eviction-rate", "inf"], "--secondary-node-eviction-rate"),
        (&["--node-taint-qps=-3"], "--node-taint-qps"),
        (&["--mark-pods-not-ready-qps", "1e-9"], "--mark-pods-not-ready-qps"),
        (&["--node-monitor-period", "87600h"], "--node-monitor-period"),
        (&["--node-monitor-period", "1ns"], "--node-monitor-period"),
        (&["--node-monitor-grace-period", "876000h"], "--node-monitor-grace-period"),
        (&["--node-startup-grace-period", "0s"], "--node-startup-grace-period"),
        (&["--eviction-retry-delay", "0s"], "--eviction-retry-delay"),
        (&["--eviction-retry-delay", "1s", "--eviction-retry-max-delay", "10ms"], "--eviction-retry-max-delay"),
        (&["--pdb-max-wait", "8760h"], "--pdb-max-wait"),
        // Accepted by the Lease as 2 s: a standby could take over before this leader stops.
        (&["--leader-elect-lease-duration", "2.9s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"], "--leader-elect-lease-duration"),
        (&["--leader-elect-resource-name", ""], "--leader-elect-resource-name"),
        (&["--log-level", ""], "--log-level"),
        // Taints every healthy node NoExecute.
        (&["--taint-rule", "Ready=True:example.com/oops:NoExecute"], "--taint-rule"),
        (&["--taint-rule", "MemoryPressure=False:example.com/oops:NoExecute"], "--taint-rule"),
        // node-problem-detector's conditions are True for a problem.
        (&["--taint-rule", "KernelDeadlock=False:example.com/oops:NoExecute"], "--taint-rule"),
        (&["--api-write-timeout", "0s"], "--api-write-timeout"),
        (&["--webhook-max-connections", "0", "--enable-webhook"], "--webhook-max-connections"),
        (&["--eviction-concurrency", "0"], "--eviction-concurrency"),
        (&["--node-selector", "role in (a"], "--node-selector"),
        (&["--node-monitor-period", "99999999999999999999h"], "--node-monitor-period"),
    ];
    for (args, flag) in cases {
        let out = Command::new(BIN)
            .arg("run")
            .args(*args)
            .args(["--kubeconfig", "/nonexistent/kubeconfig"])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.contains(flag), "{args:?}: the error's first line does not name {flag}: {err}");
    }
}

#[test]
fn explain_admission_says_what_each_plugin_and_rule_would_add() {
    let dir = std::env::temp_dir().join(unique("nlc-explain-admission"));
    std::fs::create_dir_all(&dir).expect("dir");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let pod = write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: train, namespace: ml}\nspec:\n  containers:\n  - name: c\n    image: x\n    \
         resources: {requests: {example.com/gpu: \"1\"}, limits: {example.com/gpu: \"1\"}}\n",
    );
    let ns = write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: ml}}\n");
    let rules = write(
        "rules.yaml",
        "apiVersion: node-lifecycle-controller.io/v1alpha1\nkind: TolerationRule\nmetadata: {name: ml}\nspec:\n  \
         namespaceSelector: {matchLabels: {team: ml}}\n  tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]\n\
         ---\napiVersion: node-lifecycle-controller.io/v1alpha1\nkind: TolerationRule\nmetadata: {name: other}\nspec:\n  \
         namespaces: [web]\n  tolerations: [{key: web, operator: Exists}]\n",
    );
    let (ok, out, err) = explain(&["--admission", "--pod", &pod, "--namespace-manifest", &ns, "--rules", &rules], None);
    assert!(ok, "{err}");
    let line =
        |plugin: &str| out.lines().find(|l| l.trim_start().starts_with(&format!("{plugin} "))).unwrap_or_default();
    assert!(line("ExtendedResourceToleration").ends_with("adds example.com/gpu (exists):NoSchedule"), "{out}");
    assert!(line("TolerationRule/ml").ends_with("adds dedicated=ml:NoSchedule"), "{out}");
    assert!(line("TolerationRule/other").ends_with("nothing"), "{out}");
    assert!(out.contains("why: does not match the pod's namespace or labels"), "{out}");
    assert!(out.contains("  - dedicated=ml:NoSchedule"), "{out}");
    let (ok, out, err) = explain(&["--admission", "--pod", &pod, "-o", "json"], None);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["namespace"], "ml");
    assert!(v["result"]["Ok"]["tolerations"].as_array().is_some_and(|t| t.len() == 3), "{v:#}");
    // Broken input is a clear error.
    let bad = write("bad.yaml", "apiVersion: node-lifecycle-controller.io/v1alpha1\nkind: TolerationRule\nspec: [1]\n");
    let (ok, _, err) = explain(&["--admission", "--pod", &pod, "--rules", &bad], None);
    assert!(!ok && err.contains("bad.yaml") && !err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `make run` writes to a cluster only when it is named on the command line; an exported
/// KUBECONFIG alone (most shells have one) gets shadow mode, said loudly.
#[test]
fn make_run_writes_only_to_a_cluster_named_on_the_command_line() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/run.sh");
    let run = |args: &[&str], kubeconfig: Option<&str>| {
        let mut c = Command::new("bash");
        c.arg(&script).args(args).env("NLC_RUN_BIN", "echo").env("HOME", "/nonexistent");
        match kubeconfig {
            Some(k) => c.env("KUBECONFIG", k),
            None => c.env_remove("KUBECONFIG"),
        };
        let out = c.output().expect("run.sh");
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (argv, err) = run(&[], Some("/some/kubeconfig"));
    assert!(argv.contains("run --dry-run"), "an exported KUBECONFIG must not be written to: {argv}");
    assert!(err.contains("SHADOW MODE"), "{err}");
    let (argv, _) = run(&["--context", "prod"], Some("/some/kubeconfig"));
    assert!(argv.starts_with("run --context prod") && !argv.contains("--dry-run"), "{argv}");
    let (argv, _) = run(&["--kubeconfig", "/k"], None);
    assert!(!argv.contains("--dry-run"), "{argv}");
}

/// `GET path` on the metrics endpoint (serving the test CA's certificate), with a token.
async fn https_get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    common::https_get(&shared().pki.ca_cert, port, path, token).await
}

/// A token of a new service account in `ns`.
async fn service_account_token(client: &kube::Client, ns: &str, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa");
    sas.create(&PostParams::default(), &sa).await.expect("create service account");
    let req = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let tr = sas.create_token_request(name, &PostParams::default(), &req).await.expect("token request");
    tr.status.expect("token").token
}

/// The probes are plain HTTP on their own port (with `?verbose`), and the metrics port speaks
/// no plain HTTP.
async fn assert_plain_probes(probes: u16, metrics: u16) {
    assert_eq!(http_get(probes, "/healthz").await.map(|r| r.0), Some(200));
    assert_eq!(http_get(probes, "/livez").await.map(|r| r.0), Some(200));
    // Issue 25: `?verbose` lists the checks, as kube components do.
    let verbose = http_get(probes, "/readyz?verbose").await.expect("readyz?verbose");
    assert_eq!(verbose.0, 200);
    assert!(verbose.1.contains("[+]ping ok") && verbose.1.ends_with("readyz check passed\n"), "{}", verbose.1);
    assert!(verbose.1.lines().count() >= 4, "every component is listed: {}", verbose.1);
    let live = http_get(probes, "/livez?verbose").await.expect("livez?verbose").1;
    assert!(live.contains("[+]ping ok") && live.ends_with("livez check passed\n"), "{live}");
    assert_eq!(http_get(probes, "/metrics").await.map(|r| r.0), Some(404), "the probe port serves no metrics");
    // Plain HTTP is not spoken on the metrics port.
    assert_ne!(http_get(metrics, "/metrics").await.map(|r| r.0), Some(200));
}

/// Issue 25: `/configz` is reviewed for its own path (the scraper may read /metrics, not it;
/// "nobody" the reverse) and lists the flags in effect.
async fn assert_configz(metrics: u16, scraper: &str, nobody: &str) {
    // Issue 25: `/configz`, reviewed for its own path: the scraper's answer for /metrics does
    // not open it, and "nobody"'s refusal for /metrics does not close it.
    assert_eq!(https_get(metrics, "/configz", None).await.map(|r| r.0), Some(401));
    let scraper_configz = https_get(metrics, "/configz", Some(scraper)).await.expect("https");
    assert_eq!(scraper_configz.0, 403, "{scraper_configz:?}");
    let configz = https_get(metrics, "/configz", Some(nobody)).await.expect("https");
    assert_eq!(configz.0, 200, "{configz:?}");
    let doc: serde_json::Value = serde_json::from_str(&configz.1).expect("configz JSON");
    let flags = &doc["componentconfig"]["flags"];
    assert_eq!(doc["componentconfig"]["command"], "run", "{doc:#}");
    assert_eq!(flags["node-selector"], json!(["nlc-test=cli-metrics-auth"]), "given: {doc:#}");
    assert_eq!(flags["node-monitor-grace-period"], json!(["50s"]), "defaulted: {doc:#}");
    assert_eq!(flags["leader-elect"], json!(["false"]), "{doc:#}");
}

/// A ClusterRole `name` with `rules`, bound to the service account `ns/account`.
async fn bind_cluster_role(client: &kube::Client, name: &str, rules: serde_json::Value, ns: &str, account: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).expect("role");
    Api::<ClusterRole>::all(client.clone()).create(&PostParams::default(), &role).await.expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await.expect("binding");
}

/// Issue 24: `/metrics` is HTTPS and answers only a caller the API server authenticates
/// (TokenReview) and authorizes for `get /metrics` (SubjectAccessReview), with the ClusterRole
/// the manifests ship; the probes are plain HTTP on their own port, and allowed without a token
/// on the metrics port too.
#[tokio::test]
async fn metrics_are_served_only_to_callers_the_api_server_authorizes() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let env = shared();
    let client = env.client().await;
    let ns = unique("metrics-auth");
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &nsobj).await.expect("namespace");
    let scraper = service_account_token(&client, &ns, "scraper").await;
    let nobody = service_account_token(&client, &ns, "nobody").await;
    // The manifests' metrics-reader role, under this test's own name, bound to the scraper.
    let docs = common::yaml::file("manifests/base/metrics-auth.yaml");
    let role =
        docs.iter().find(|d| d["kind"] == "ClusterRole").expect("the manifests ship a metrics-reader ClusterRole");
    bind_cluster_role(&client, &ns, role["rules"].clone(), &ns, "scraper").await;
    // `/configz` is another path: "nobody" may read it (and not /metrics), the scraper not.
    let configz_reader = format!("{ns}-configz");
    let rules = json!([{"nonResourceURLs": ["/configz"], "verbs": ["get"]}]);
    bind_cluster_role(&client, &configz_reader, rules, &ns, "nobody").await;

    let [metrics, probes] = common::free_ports::<2>();
    let mut child = tokio::process::Command::new(BIN)
        .args(["run", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .args(["--health-probe-bind-address", &format!("127.0.0.1:{probes}")])
        .arg("--metrics-tls-cert-file")
        .arg(&env.pki.serving_cert)
        .arg("--metrics-tls-private-key-file")
        .arg(&env.pki.serving_key)
        .args(["--node-selector", "nlc-test=cli-metrics-auth", "--leader-elect=false"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn controller");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(probes, "/readyz").await.map(|r| r.0) != Some(200) {
        assert!(child.try_wait().expect("wait").is_none(), "the controller exited");
        assert!(Instant::now() < deadline, "never ready on the probe port");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_plain_probes(probes, metrics).await;

    let anonymous = https_get(metrics, "/metrics", None).await.expect("https");
    assert_eq!(anonymous.0, 401, "anonymous: {anonymous:?}");
    let bogus = https_get(metrics, "/metrics", Some("not-a-token")).await.expect("https");
    assert_eq!(bogus.0, 401, "a token the API server does not know: {bogus:?}");
    let refused = https_get(metrics, "/metrics", Some(&nobody)).await.expect("https");
    assert_eq!(refused.0, 403, "a token without the permission: {refused:?}");
    assert!(refused.1.contains(&format!("system:serviceaccount:{ns}:nobody")), "{refused:?}");
    let served = https_get(metrics, "/metrics", Some(&scraper)).await.expect("https");
    assert_eq!(served.0, 200, "the scraper: {served:?}");
    assert!(served.1.contains("nlc_build_info"), "{}", served.1);
    // The process metrics every Prometheus client exports.
    for series in
        ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"]
    {
        assert!(common::metric(&served.1, series).is_some_and(|v| v > 0.0), "{series}: {}", served.1);
    }
    // The probe paths need no token on the metrics port either.
    assert_eq!(https_get(metrics, "/readyz", None).await.map(|r| r.0), Some(200));
    assert_configz(metrics, &scraper, &nobody).await;
    // Every answer counted; the second scrape came from the cache (no new review needed).
    let again = https_get(metrics, "/metrics", Some(&scraper)).await.expect("https");
    assert_eq!(again.0, 200);
    for (result, at_least) in [("unauthenticated", 2.0), ("forbidden", 1.0), ("allowed", 1.0)] {
        let line = format!("nlc_metrics_requests_total{{result=\"{result}\"}}");
        let n = common::metric(&again.1, &line).unwrap_or(0.0);
        assert!(n >= at_least, "{line} = {n}");
    }
    // Any pod can send tokens: random ones from twenty addresses, for longer than the answers
    // are cached (10 s). The scraper is answered throughout (reviews are paced per address,
    // random tokens' answers are cached apart, and a busy reviewer serves an identity's last
    // answer), and the flood causes a bounded number of reviews.
    let ca = shared().pki.ca_cert.clone();
    let flood: Vec<_> = (0..60u32)
        .map(|i| {
            let ca = ca.clone();
            tokio::spawn(async move {
                for n in 0u64.. {
                    let token = format!("bogus-{i}-{n}");
                    let _ =
                        common::https_get_from(&ca, Some(20 + (i % 20) as u8), metrics, "/metrics", Some(&token)).await;
                }
            })
        })
        .collect();
    let flood_started = Instant::now();
    let mut scrapes = 0;
    while flood_started.elapsed() < Duration::from_secs(14) {
        let got = https_get(metrics, "/metrics", Some(&scraper)).await.map(|r| r.0);
        assert_eq!(got, Some(200), "scrape {scrapes} during the token flood ({:?} in)", flood_started.elapsed());
        scrapes += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for f in flood {
        f.abort();
    }
    let after = https_get(metrics, "/metrics", Some(&scraper)).await.expect("https");
    let count = |result: &str| {
        common::metric(&after.1, &format!("nlc_metrics_requests_total{{result=\"{result}\"}}")).unwrap_or(0.0)
    };
    eprintln!(
        "{scrapes} scrapes answered during the token flood; unauthenticated {}, busy {}",
        count("unauthenticated"),
        count("busy")
    );
    // Twenty addresses at five reviews a second (burst twenty) for ~14 s: under 2,000 reviews
    // (plus the few cached answers served again).
    assert!(count("unauthenticated") < 2000.0, "{}", after.1);
    let _ = child.kill().await;
    for name in [&ns, &configz_reader] {
        let _ = Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &Default::default()).await;
        let _ = Api::<ClusterRole>::all(client.clone()).delete(name, &Default::default()).await;
    }
}

/// `status` as `kubectl nlc status -o json`, with `extra` flags.
fn status_json(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["status", "--kubeconfig"])
        .arg(&shared().kubeconfig)
        .args(["-o", "json"])
        .args(extra)
        .output()
        .expect("status runs");
    assert!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Issue 25: `status` decides with the leader's own configuration (its `/configz`, published on
/// its Lease), not with flags repeated by hand; without a leader, or asked not to, it says it
/// used its own flags.
#[tokio::test]
async fn status_reads_the_leaders_configuration() {
    let env = shared();
    let scope = unique("cli-configz");
    let given = ["--leader-elect-resource-namespace", "default", "--node-monitor-grace-period=17s"];
    let c = common::Controller::start(env, &scope, &given).await;
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(env.client().await, "default");
    let lease = eventually_every(Duration::from_secs(30), Duration::from_millis(100), || async {
        let l = leases.get_opt(&scope).await.expect("read lease");
        l.filter(|l| l.spec.as_ref().is_some_and(|s| s.holder_identity.is_some()))
    })
    .await
    .unwrap_or_else(|| panic!("never led:\n{}", c.logs()));
    let holder = lease.spec.and_then(|s| s.holder_identity).expect("holder");
    let published = lease.metadata.annotations.unwrap_or_default();
    let doc: serde_json::Value =
        serde_json::from_str(published.get("node-lifecycle-controller.io/configz").expect("published")).expect("JSON");
    assert_eq!(doc["componentconfig"]["flags"]["node-monitor-grace-period"], json!(["17s"]), "{doc:#}");

    let from_leader = status_json(&["-n", "default", "--lease", &scope]);
    let source = from_leader["configuration"].as_str().unwrap_or_default();
    assert!(source.starts_with(&format!("leader {holder}'s (/configz on Lease default/{scope}")), "{source}");
    let own = status_json(&["-n", "default", "--lease", &scope, "--controller-config=false"]);
    assert_eq!(own["configuration"], "the flags given here (--controller-config=false)");
    let none = status_json(&["-n", "default", "--lease", "no-such-lease"]);
    assert_eq!(none["configuration"], "the flags given here (no Lease default/no-such-lease: no leader)");
}

/// Issue 25: docs/lifecycle.svg draws the code's own states: every zone state and every pending
/// eviction state is named in it (a renamed or new state fails here until the picture follows).
#[test]
fn the_lifecycle_diagram_names_the_codes_states() {
    let svg = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/lifecycle.svg"))
        .expect("docs/lifecycle.svg");
    let zone = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src/zone.rs"))
        .expect("zone.rs");
    let eviction =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src/eviction/mod.rs"))
            .expect("eviction");
    let variants = |text: &str, name: &str| -> Vec<String> {
        let start = text.find(&format!("pub enum {name} {{")).unwrap_or_else(|| panic!("enum {name}"));
        let body = &text[start..start + text[start..].find('}').expect("end")];
        body.lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('#'))
            .map(|l| l.trim_end_matches(',').to_owned())
            .collect()
    };
    for (text, name) in [(&zone, "ZoneState"), (&eviction, "PendingState")] {
        let names = variants(text, name);
        assert!(names.len() >= 4, "{name}: {names:?}");
        for v in names {
            assert!(svg.contains(&v), "docs/lifecycle.svg does not show {name}::{v}");
        }
    }
    for rule in ["max(taint timeAdded, pod bound)", "tolerationSeconds", "Cancelled", "Unknown"] {
        assert!(svg.contains(rule), "docs/lifecycle.svg does not show {rule}");
    }
}
