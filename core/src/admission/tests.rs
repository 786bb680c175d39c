use super::*;

fn review_body(op: &str, ns: &str, tolerations: Option<Value>, sub_resource: Option<&str>) -> Vec<u8> {
    let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
    if let Some(t) = tolerations {
        spec["tolerations"] = t;
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}, "spec": spec});
    let mut req = json!({
        "uid": "7f2a", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "p", "namespace": ns, "operation": op,
        "userInfo": {"username": "alice"}, "object": pod, "oldObject": null, "dryRun": false
    });
    if let Some(s) = sub_resource {
        req["subResource"] = json!(s);
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}))
        .expect("json")
}

fn response(body: &[u8], namespaces: &NamespaceAnnotations) -> Value {
    let (code, out) = review(body, namespaces, DefaultTolerationSeconds::default());
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).expect("json");
    v["response"].clone()
}

/// The patch bytes (kube-rs sends `[]byte` as a JSON array of numbers, which the API server's
/// Go decoder accepts as well as base64).
fn patch_of(resp: &Value) -> Option<Value> {
    let bytes: Vec<u8> = resp["patch"].as_array()?.iter().filter_map(|b| b.as_u64()).map(|b| b as u8).collect();
    Some(serde_json::from_slice(&bytes).expect("patch json"))
}

fn nr(secs: i64) -> Value {
    json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs})
}

fn un(secs: i64) -> Value {
    json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs})
}

#[test]
fn adds_both_tolerations_to_a_pod_without_any() {
    let resp = response(&review_body("CREATE", "ns", None, None), &NamespaceAnnotations::new());
    assert_eq!(resp["allowed"], json!(true));
    assert_eq!(resp["uid"], json!("7f2a"));
    assert_eq!(resp["patchType"], json!("JSONPatch"));
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(300), un(300)]}])));
}

#[test]
fn appends_to_an_existing_list_and_keeps_a_pod_that_already_tolerates() {
    let resp = response(&review_body("UPDATE", "ns", Some(json!([nr(60)])), None), &NamespaceAnnotations::new());
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations/-", "value": un(300)}])));
    let resp = response(
        &review_body("CREATE", "ns", Some(json!([{"operator": "Exists"}])), None),
        &NamespaceAnnotations::new(),
    );
    assert_eq!(resp["allowed"], json!(true));
    assert_eq!(patch_of(&resp), None, "an empty-key toleration covers both");
}

#[test]
fn subresources_and_other_operations_are_left_alone() {
    for (op, sub) in
        [("CREATE", Some("status")), ("UPDATE", Some("ephemeralcontainers")), ("DELETE", None), ("CONNECT", None)]
    {
        let resp = response(&review_body(op, "ns", None, sub), &NamespaceAnnotations::new());
        assert_eq!(resp["allowed"], json!(true), "{op} {sub:?}");
        assert_eq!(patch_of(&resp), None, "{op} {sub:?}");
    }
}

#[test]
fn namespace_annotations_override_each_default() {
    let mut ns = NamespaceAnnotations::new();
    ns.insert("fast".into(), [(NOT_READY_ANNOTATION.to_owned(), "30".to_owned())].into());
    ns.insert(
        "both".into(),
        [(NOT_READY_ANNOTATION.to_owned(), "0".to_owned()), (UNREACHABLE_ANNOTATION.to_owned(), "7200".to_owned())]
            .into(),
    );
    ns.insert(
        "bad".into(),
        [
            (UNREACHABLE_ANNOTATION.to_owned(), "five minutes".to_owned()),
            (NOT_READY_ANNOTATION.to_owned(), "-5".to_owned()),
        ]
        .into(),
    );
    let resp = response(&review_body("CREATE", "fast", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(30), un(300)]}])));
    let resp = response(&review_body("CREATE", "both", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(0), un(7200)]}])));
    let resp = response(&review_body("CREATE", "bad", None, None), &ns);
    assert_eq!(patch_of(&resp), Some(json!([{"op": "add", "path": "/spec/tolerations", "value": [nr(300), un(300)]}])));
    let warnings = resp["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.as_str().is_some_and(|w| w.contains("the default 300 applies"))));
}

#[test]
fn annotation_values() {
    for (v, want) in [
        ("300", Some(300)),
        ("0", Some(0)),
        (" 60 ", Some(60)),
        ("-1", None),
        ("1.5", None),
        ("", None),
        ("007", None),
        ("99999999999999999999", None),
    ] {
        assert_eq!(parse_seconds(v), want, "{v:?}");
    }
}

#[test]
fn malformed_bodies_are_a_400_with_a_message() {
    let g = DefaultTolerationSeconds::default();
    let ns = NamespaceAnnotations::new();
    for body in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"kind\":\"AdmissionReview\"}",
        b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":5}}",
        &[0xff, 0xfe],
    ] {
        let (code, msg) = review(body, &ns, g);
        assert_eq!(code, 400, "{:?}", String::from_utf8_lossy(body));
        assert!(
            String::from_utf8_lossy(&msg).starts_with("invalid AdmissionReview"),
            "{}",
            String::from_utf8_lossy(&msg)
        );
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever bytes arrive, the webhook answers with a status, never a panic.
        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let (code, _) = review(&body, &NamespaceAnnotations::new(), DefaultTolerationSeconds::default());
            prop_assert!(code == 200 || code == 400);
        }
    }
}
