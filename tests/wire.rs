//! The protobuf decoders (`nlc_core::wire::proto`, `WirePod::from_protobuf`, ...) against a
//! real API server: the same lists and watch events, fetched once as JSON and once as
//! `application/vnd.kubernetes.protobuf`, decode to equal `WirePod`s, `WireNode`s and
//! `WireLease`s, object by object. The objects are odd on purpose: empty values, far-future and
//! microsecond times, hundreds of tolerations, extreme `tolerationSeconds`, a deleting pod,
//! kube-controller-manager's managedFields.

mod common;

use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

use common::*;
use hyper::body::Body as _;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use jiff::Timestamp;
use kube::client::Body;
use nlc_core::wire::{WireLease, WireNode, WirePod, proto};
use nlc_testenv::shared;
use serde_json::{Value, json};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const JSON: &str = "application/json";
/// Past jiff's range: both decoders clamp it.
const FAR: &str = "9999-12-31T23:59:59.999999Z";
const KCM: &str = "fieldManager=kube-controller-manager";

/// One request through the client's stack (base URI, auth): status, Content-Type and body.
async fn call(client: &kube::Client, method: &str, uri: &str, body: Option<(&str, Value)>, accept: &str) -> Response {
    let mut req = hyper::Request::builder().method(method).uri(uri).header(ACCEPT, accept);
    let body = match body {
        Some((content_type, v)) => {
            req = req.header(CONTENT_TYPE, content_type);
            Body::from(serde_json::to_vec(&v).expect("json"))
        }
        None => Body::empty(),
    };
    let res = client.send(req.body(body).expect("a request")).await.expect("sent");
    let status = res.status().as_u16();
    let content_type = res.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    Response { status, content_type, body: res.into_body() }
}

struct Response {
    status: u16,
    content_type: String,
    body: Body,
}

impl Response {
    async fn bytes(self) -> Vec<u8> {
        self.body.collect_bytes().await.expect("the body").to_vec()
    }

    /// The next chunk of a streamed body, `None` at its end.
    async fn chunk(&mut self) -> Option<Vec<u8>> {
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await?;
            if let Ok(data) = frame.expect("a streamed chunk").into_data() {
                return Some(data.to_vec());
            }
        }
    }
}

async fn create(client: &kube::Client, uri: &str, obj: Value) -> Value {
    let r = call(client, "POST", uri, Some((JSON, obj.clone())), JSON).await;
    let status = r.status;
    let body = r.bytes().await;
    assert_eq!(status, 201, "POST {uri} {obj}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).expect("the created object")
}

/// A merge patch (`?fieldManager=kube-controller-manager` when `kcm`).
async fn patch(client: &kube::Client, uri: &str, kcm: bool, p: Value) {
    let uri = if kcm { format!("{uri}?{KCM}") } else { uri.to_owned() };
    let r = call(client, "PATCH", &uri, Some(("application/merge-patch+json", p.clone())), JSON).await;
    let status = r.status;
    let body = r.bytes().await;
    assert_eq!(status, 200, "PATCH {uri} {p}: {}", String::from_utf8_lossy(&body));
}

/// A kind as both decoders make it.
trait Wire: serde::de::DeserializeOwned {
    type Full: PartialEq + Debug;
    const KIND: &'static str;
    fn proto(msg: &[u8]) -> Self;
    fn parts(self) -> (Self::Full, Option<String>);
}

macro_rules! wire {
    ($t:ty, $full:ty, $kind:literal) => {
        impl Wire for $t {
            type Full = $full;
            const KIND: &'static str = $kind;
            fn proto(msg: &[u8]) -> Self {
                <$t>::from_protobuf(msg)
            }
            fn parts(self) -> (Self::Full, Option<String>) {
                (self.0, self.1)
            }
        }
    };
}

wire!(WirePod, k8s_openapi::api::core::v1::Pod, "Pod");
wire!(WireNode, k8s_openapi::api::core::v1::Node, "Node");
wire!(WireLease, k8s_openapi::api::coordination::v1::Lease, "Lease");

fn name_of<F: Debug>(full: &F) -> String {
    format!("{full:?}").chars().take(200).collect()
}

/// Lists `uri` as JSON and as protobuf (unpaged, and in pages of 2 following the protobuf
/// `continue` tokens) and asserts equal objects, in order. Returns how many.
async fn same_list<K: Wire>(client: &kube::Client, uri: &str) -> usize {
    let sep = if uri.contains('?') { '&' } else { '?' };
    let r = call(client, "GET", uri, None, JSON).await;
    assert_eq!((r.status, r.content_type.as_str()), (200, JSON), "{uri}");
    let page: Value = serde_json::from_slice(&r.bytes().await).expect("a JSON list");
    let json: Vec<(K::Full, Option<String>)> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| serde_json::from_value::<K>(item.clone()).expect("a JSON item").parts())
        .collect();

    let r = call(client, "GET", uri, None, PROTOBUF).await;
    assert_eq!((r.status, r.content_type.as_str()), (200, PROTOBUF), "{uri}");
    let body = r.bytes().await;
    let u = proto::unknown(&body).expect("a protobuf body");
    assert_eq!(u.kind, format!("{}List", K::KIND));
    let (meta, items) = proto::list(u.raw).expect("a protobuf list");
    assert!(meta.resource_version.is_some(), "{meta:?}");
    assert_eq!(meta.continue_, None);
    let protobuf: Vec<_> = items.iter().map(|i| K::proto(i).parts()).collect();

    assert_eq!(protobuf.len(), json.len(), "{uri}");
    for (p, j) in protobuf.iter().zip(&json) {
        assert_eq!(p.1, None, "a problem decoding {}", name_of(&p.0));
        assert_eq!(p, j, "{uri}");
    }

    let (mut paged, mut token) = (Vec::new(), None::<String>);
    loop {
        let page_uri = match &token {
            Some(t) => format!("{uri}{sep}limit=2&continue={t}"),
            None => format!("{uri}{sep}limit=2"),
        };
        let r = call(client, "GET", &page_uri, None, PROTOBUF).await;
        assert_eq!(r.status, 200, "{page_uri}");
        let body = r.bytes().await;
        let (meta, items) = proto::list(proto::unknown(&body).expect("a body").raw).expect("a page");
        assert!(items.len() <= 2);
        paged.extend(items.iter().map(|i| K::proto(i).parts()));
        assert!(meta.continue_.is_none() || meta.remaining_item_count.is_none_or(|n| n > 0), "{meta:?}");
        match meta.continue_ {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(paged, protobuf, "{uri} in pages");
    json.len()
}

/// A watch as JSON lines.
struct JsonWatch(Response, Vec<u8>);

impl JsonWatch {
    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(i) = self.1.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.1.drain(..=i).collect();
                let e: Value = serde_json::from_slice(&line).expect("a JSON event");
                return (e["type"].as_str().unwrap_or_default().to_owned(), e["object"].clone());
            }
            let chunk = self.0.chunk().await.expect("the JSON watch ended");
            self.1.extend_from_slice(&chunk);
        }
    }
}

/// A watch as protobuf frames.
struct ProtoWatch(Response, proto::Framer);

impl ProtoWatch {
    /// The next event: its type and its object's `Unknown` (kind, raw).
    async fn next(&mut self) -> (String, String, Vec<u8>) {
        loop {
            if let Some(frame) = self.1.next_frame().expect("a frame within the cap") {
                let e = proto::watch_event(frame).expect("a WatchEvent");
                let u = proto::unknown(e.object).expect("a prefixed object");
                return (e.type_.to_owned(), u.kind.to_owned(), u.raw.to_vec());
            }
            let chunk = self.0.chunk().await.expect("the protobuf watch ended");
            self.1.push(&chunk);
        }
    }
}

/// Opens the same watch as JSON and as protobuf.
async fn watch_both(client: &kube::Client, uri: &str) -> (JsonWatch, ProtoWatch) {
    let j = call(client, "GET", uri, None, JSON).await;
    assert_eq!(j.status, 200, "{uri}");
    // What client-go sends; the server answers with the stream form of protobuf.
    let p = call(client, "GET", uri, None, &format!("{PROTOBUF}, {JSON}")).await;
    assert_eq!(p.status, 200, "{uri}");
    assert_eq!(p.content_type, format!("{PROTOBUF};stream=watch"), "{uri}");
    (JsonWatch(j, Vec::new()), ProtoWatch(p, proto::Framer::new()))
}

/// Reads events from both watches up to the first `DELETED` and asserts they are the same
/// changes, decoded equal. Returns their types.
async fn same_events<K: Wire>(j: &mut JsonWatch, p: &mut ProtoWatch) -> Vec<String> {
    let (mut types, n) = (Vec::new(), 20);
    for i in 0..n {
        let ((jt, jo), (pt, kind, raw)) =
            tokio::time::timeout(Duration::from_secs(30), async { (j.next().await, p.next().await) })
                .await
                .unwrap_or_else(|_| panic!("event {i} of {n} did not come"));
        assert_eq!(pt, jt, "event {i}");
        assert_eq!(kind, K::KIND);
        let json = serde_json::from_value::<K>(jo).expect("a JSON object").parts();
        let protobuf = K::proto(&raw).parts();
        assert_eq!(protobuf.1, None, "a problem decoding {}", name_of(&protobuf.0));
        assert_eq!(protobuf, json, "event {i} ({jt})");
        let deleted = jt == "DELETED";
        types.push(jt);
        if deleted {
            return types;
        }
    }
    panic!("no DELETED event in {n}: {types:?}")
}

// One scope of odd objects, then every way of reading them (lists, pages, errors, watches, a
// streaming list) compared on those same objects. The order matters: the lists count the
// objects that the watches then change and delete.
#[tokio::test]
async fn protobuf_lists_and_watches_decode_as_their_json() {
    let env = shared();
    let s = Scope::new(env, "wire").await;
    let c = &s.client;
    let ns = &s.ns;
    let selector = format!("labelSelector=nlc-test%3D{}", s.scope);
    let nodes_uri = format!("/api/v1/nodes?{selector}");
    let pods_uri = format!("/api/v1/namespaces/{ns}/pods");
    let leases_uri = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
    let now = now_s();

    let nodes = create_odd_nodes(&s, now).await;
    let negative_admitted = create_odd_pods(c, &pods_uri, &nodes.odd, &nodes.ready, now).await;
    create_odd_leases(c, &leases_uri).await;

    lists_decode_as_their_json(c, &nodes_uri, &pods_uri, &leases_uri, negative_admitted).await;
    the_answers_hold_what_the_cases_are_about(c, &pods_uri, &nodes.odd).await;
    errors_decode_as_their_json(c, &pods_uri).await;
    node_watch_events_decode_as_their_json(&s, &nodes_uri, &nodes.plain, &nodes.ready, now).await;
    pod_watch_events_decode_as_their_json(c, &pods_uri).await;
    a_streaming_list_of_leases_ends_at_its_bookmark(c, &leases_uri).await;
}

/// The scope's three nodes, by name.
struct OddNodes {
    /// Odd labels and taints, written partly by kube-controller-manager.
    odd: String,
    /// Plain, then changed and deleted by the node watch.
    plain: String,
    /// Made by `Scope::node`.
    ready: String,
}

/// Nodes: labels with empty values, unschedulable both ways, taints of every shape.
async fn create_odd_nodes(s: &Scope, now: Timestamp) -> OddNodes {
    let c = &s.client;
    let ns = &s.ns;
    let odd = nlc_testenv::unique(&format!("{ns}-odd"));
    create(
        c,
        "/api/v1/nodes",
        json!({
            "metadata": {"name": odd, "labels": {"nlc-test": s.scope, "topology.kubernetes.io/zone": "z1",
                "topology.kubernetes.io/region": "r1", "node.kubernetes.io/exclude-disruption": "",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "empty": ""},
                "annotations": {"a": "b"}},
            "spec": {"unschedulable": true, "podCIDR": "10.9.0.0/24", "taints": [
                {"key": "example.com/empty-value", "value": "", "effect": "NoSchedule"},
                {"key": "example.com/now", "value": "v", "effect": "NoExecute", "timeAdded": now},
                {"key": "example.com/far", "effect": "NoExecute", "timeAdded": FAR},
                {"key": "example.com/prefer", "effect": "PreferNoSchedule"}]}
        }),
    )
    .await;
    let plain = nlc_testenv::unique(&format!("{ns}-plain"));
    create(
        c,
        "/api/v1/nodes",
        json!({"metadata": {"name": plain, "labels": {"nlc-test": s.scope}},
        "spec": {"unschedulable": false}}),
    )
    .await;
    let ready = s.node("ready", json!([])).await;
    // kube-controller-manager's writes: taints and conditions, so that managedFields are kept.
    patch(
        c,
        &format!("/api/v1/nodes/{odd}"),
        true,
        json!({"spec": {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now},
        {"key": "example.com/far", "effect": "NoExecute", "timeAdded": FAR}]}}),
    )
    .await;
    patch(c, &format!("/api/v1/nodes/{odd}/status"), true, json!({"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
         "lastHeartbeatTime": FAR, "lastTransitionTime": now},
        {"type": "MemoryPressure", "status": "False"}]}}))
    .await;
    patch(
        c,
        &format!("/api/v1/nodes/{plain}/status"),
        false,
        json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "capacity": {"cpu": "4", "memory": "16Gi"},
        "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 123}]}}),
    )
    .await;
    OddNodes { odd, plain, ready }
}

/// A pod labelled `app=wire`, bound to `node` if any.
fn pod(name: &str, node: Option<&str>, tolerations: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
        "env": [{"name": "X", "value": "1"}]}], "tolerations": tolerations});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    json!({"metadata": {"name": name, "labels": {"app": "wire", "empty": ""}}, "spec": spec})
}

/// 300 tolerations of every shape: past the number the cache keeps.
fn many_tolerations() -> Vec<Value> {
    let mut many = Vec::new();
    for i in 0..300 {
        many.push(match i % 5 {
            0 => json!({"key": format!("k{i}"), "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": i}),
            1 => json!({"key": format!("k{i}"), "operator": "Equal", "value": "v", "effect": "NoSchedule"}),
            2 => json!({"operator": "Exists"}),
            3 => json!({"key": format!("k{i}"), "operator": "Equal", "value": "", "effect": ""}),
            _ => json!({"key": format!("k{i}"), "effect": "PreferNoSchedule"}),
        });
    }
    many
}

/// Pods: bound and not, tolerations past the kept limit, extreme seconds, a deleting one.
/// Returns whether the API server admitted the pod with negative `tolerationSeconds`.
async fn create_odd_pods(c: &kube::Client, pods_uri: &str, odd: &str, ready: &str, now: Timestamp) -> bool {
    create(c, pods_uri, pod("many", Some(odd), json!(many_tolerations()))).await;
    create(
        c,
        pods_uri,
        pod(
            "extreme",
            Some(odd),
            json!([
        {"key": "max", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": i64::MAX},
        {"key": "zero", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
        {"operator": "Exists", "effect": "NoExecute"}]),
        ),
    )
    .await;
    let negative_admitted = create_negative_pod(c, pods_uri, odd).await;
    create(c, pods_uri, pod("unbound", None, json!([]))).await;
    create(c, pods_uri, pod("defaults", Some(ready), json!(null))).await;
    let mut deleting = pod("deleting", Some(ready), json!([]));
    deleting["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create(c, pods_uri, deleting).await;
    patch(c, &format!("{pods_uri}/extreme/status"), true, json!({"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager", "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": now}]}}))
    .await;
    let r = call(c, "DELETE", &format!("{pods_uri}/deleting"), None, JSON).await;
    assert_eq!(r.status, 200, "delete");
    let _ = r.bytes().await;
    negative_admitted
}

/// Tries a pod with negative `tolerationSeconds` on `odd`; returns whether it was admitted.
async fn create_negative_pod(c: &kube::Client, pods_uri: &str, odd: &str) -> bool {
    let negative = call(
        c,
        "POST",
        pods_uri,
        Some((
            JSON,
            pod(
                "negative",
                Some(odd),
                json!([
        {"key": "min", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": i64::MIN},
        {"key": "neg", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5}]),
            ),
        )),
        JSON,
    )
    .await;
    let negative_admitted = negative.status == 201;
    if !negative_admitted {
        nlc_testenv::note(&format!("wire: negative tolerationSeconds refused ({})", negative.status));
    }
    let _ = negative.bytes().await;
    negative_admitted
}

/// Leases: empty holder, zero transitions (a zero duration is refused), microseconds, far-future
/// renewTime, a bare spec.
async fn create_odd_leases(c: &kube::Client, leases_uri: &str) {
    let micro = "2026-03-04T05:06:07.123456Z";
    for (name, spec) in [
        (
            "full",
            json!({"holderIdentity": "h", "leaseDurationSeconds": 40, "acquireTime": micro, "renewTime": micro, "leaseTransitions": 2}),
        ),
        ("empty", json!({"holderIdentity": "", "leaseTransitions": 0})),
        ("far", json!({"holderIdentity": "far", "leaseDurationSeconds": 40, "renewTime": FAR})),
        ("pre-epoch", json!({"renewTime": "1969-07-20T20:17:40.000001Z"})),
        ("bare", json!({})),
    ] {
        create(c, leases_uri, json!({"metadata": {"name": name}, "spec": spec})).await;
    }
}

/// Every node, pod and Lease of the scope lists equal in protobuf and in JSON, whole and in pages.
async fn lists_decode_as_their_json(
    c: &kube::Client,
    nodes_uri: &str,
    pods_uri: &str,
    leases_uri: &str,
    negative_admitted: bool,
) {
    assert_eq!(same_list::<WireNode>(c, nodes_uri).await, 3);
    let pods = same_list::<WirePod>(c, pods_uri).await;
    assert_eq!(pods, if negative_admitted { 6 } else { 5 });
    assert_eq!(same_list::<WireLease>(c, leases_uri).await, 5);
}

/// The protobuf and JSON answers hold what the cases are about: more tolerations than the cache
/// keeps, kube-controller-manager's managedFields.
async fn the_answers_hold_what_the_cases_are_about(c: &kube::Client, pods_uri: &str, odd: &str) {
    let r = call(c, "GET", &format!("{pods_uri}/many"), None, PROTOBUF).await;
    let body = r.bytes().await;
    let many = WirePod::from_protobuf(proto::unknown(&body).expect("a pod").raw);
    let kept = many.0.spec.as_ref().and_then(|s| s.tolerations.as_ref()).map(Vec::len);
    let slim = nlc_core::index::SlimPod::from(&many.0);
    assert!(slim.truncated);
    assert_eq!(kept, Some(slim.tolerations.len() + 1), "one more than the cache keeps");
    let r = call(c, "GET", &format!("/api/v1/nodes/{odd}"), None, PROTOBUF).await;
    let body = r.bytes().await;
    let node = WireNode::from_protobuf(proto::unknown(&body).expect("a node").raw);
    assert!(node.0.metadata.managed_fields.is_some(), "kube-controller-manager's entry is kept");
    assert!(!nlc_core::second_writers::node_writes(&node.0).is_empty());
}

/// Errors: a protobuf Status reads as kube reads the JSON one.
async fn errors_decode_as_their_json(c: &kube::Client, pods_uri: &str) {
    for (method, uri, body) in [
        ("GET", format!("{pods_uri}/missing"), None),
        (
            "POST",
            pods_uri.to_owned(),
            Some((JSON, json!({"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}))),
        ),
    ] {
        let j = call(c, method, &uri, body.clone(), JSON).await;
        let (code, jbody) = (j.status, j.bytes().await);
        let p = call(c, method, &uri, body, PROTOBUF).await;
        assert_eq!((p.status, p.content_type.as_str()), (code, PROTOBUF), "{method} {uri}");
        let pbody = p.bytes().await;
        let u = proto::unknown(&pbody).expect("a protobuf Status");
        assert_eq!(u.kind, "Status");
        let status = proto::status(u.raw).expect("a Status");
        let json: kube::core::Status = serde_json::from_slice(&jbody).expect("a JSON Status");
        assert_eq!(status, json, "{method} {uri}");
        assert!(status.code >= 400, "{status:?}");
    }
}

/// The resourceVersion of `uri`'s list, read in protobuf: where a watch of the changes after it starts.
async fn list_resource_version(c: &kube::Client, uri: &str) -> String {
    let r = call(c, "GET", uri, None, PROTOBUF).await;
    let body = r.bytes().await;
    let (meta, _) = proto::list(proto::unknown(&body).expect("a body").raw).expect("a list");
    meta.resource_version.expect("a resourceVersion")
}

/// Watches: the same node changes (a label, kube-controller-manager's taint, a condition, a
/// deletion) decode equal.
async fn node_watch_events_decode_as_their_json(s: &Scope, nodes_uri: &str, plain: &str, ready: &str, now: Timestamp) {
    let c = &s.client;
    let rv = list_resource_version(c, nodes_uri).await;
    let (mut j, mut p) = watch_both(c, &format!("{nodes_uri}&watch=true&resourceVersion={rv}")).await;
    patch(
        c,
        &format!("/api/v1/nodes/{plain}"),
        false,
        json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "z2"}}}),
    )
    .await;
    patch(
        c,
        &format!("/api/v1/nodes/{plain}"),
        true,
        json!({"spec": {"unschedulable": true, "taints": [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": now}]}}),
    )
    .await;
    set_condition(s, ready, "Ready", "Unknown").await;
    let r = call(c, "DELETE", &format!("/api/v1/nodes/{plain}"), None, JSON).await;
    assert_eq!(r.status, 200);
    let _ = r.bytes().await;
    let types = same_events::<WireNode>(&mut j, &mut p).await;
    assert!(types.len() >= 4, "{types:?}");
}

/// Watches: the same pod changes (a finalizer removed, a deletion) decode equal.
async fn pod_watch_events_decode_as_their_json(c: &kube::Client, pods_uri: &str) {
    let rv = list_resource_version(c, pods_uri).await;
    let (mut j, mut p) = watch_both(c, &format!("{pods_uri}?watch=true&resourceVersion={rv}")).await;
    patch(c, &format!("{pods_uri}/deleting"), false, json!({"metadata": {"finalizers": null}})).await;
    let r = call(c, "DELETE", &format!("{pods_uri}/unbound?gracePeriodSeconds=0"), None, JSON).await;
    assert_eq!(r.status, 200);
    let _ = r.bytes().await;
    let types = same_events::<WirePod>(&mut j, &mut p).await;
    assert!(types.len() >= 2, "{types:?}");
}

/// A streaming list (WatchList, 1.34+): ADDED for each Lease, then the bookmark that ends
/// the initial events, found by `proto::bookmark`.
async fn a_streaming_list_of_leases_ends_at_its_bookmark(c: &kube::Client, leases_uri: &str) {
    let uri = format!(
        "{leases_uri}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    );
    let r = call(c, "GET", &uri, None, PROTOBUF).await;
    if r.status == 200 {
        let mut p = ProtoWatch(r, proto::Framer::new());
        let mut added = Vec::new();
        let end = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let (t, kind, raw) = p.next().await;
                assert_eq!(kind, "Lease");
                match t.as_str() {
                    "ADDED" => added.push(WireLease::from_protobuf(&raw).0.metadata.name.unwrap_or_default()),
                    "BOOKMARK" => {
                        let b = proto::bookmark(&raw).expect("a bookmark");
                        if b.initial_events_end {
                            break b;
                        }
                    }
                    other => panic!("{other} in the initial events"),
                }
            }
        })
        .await
        .expect("the initial events end");
        assert!(end.resource_version.is_some());
        added.sort();
        assert_eq!(added, ["bare", "empty", "far", "full", "pre-epoch"]);
    } else {
        nlc_testenv::note(&format!("wire: streaming lists refused ({}); not checked", r.status));
    }
}

/// The controller with `extra` flags: an untolerated pod on a node tainted NoExecute is evicted,
/// a node whose kubelet stops renewing its Lease is marked Unknown and tainted unreachable while
/// its neighbours (Leases renewed) stay Ready: the pod, node and Lease watches all work. Returns
/// its metrics and logs.
async fn controller_behaves(prefix: &str, extra: &[&'static str]) -> (String, String) {
    let env = shared();
    let s = Scope::new(env, prefix).await;
    let mut nodes = vec![];
    for _ in 0..3 {
        nodes.push(make_node(&s, "z1", json!([])).await);
    }
    let kubelets = Kubelets::start(&s.client, &nodes).await;
    s.pod("victim", &nodes[1], json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &flags(extra)).await;

    s.set_taints(&nodes[1], json!([no_execute("example.com/wire", now_s())])).await;
    let evicted = evictions.wait("victim", Duration::from_secs(10)).await;
    assert!(evicted.is_some(), "{extra:?}: never evicted:\n{}", c.logs());

    kubelets.stop(&nodes[0]);
    let unknown = |n: &k8s_openapi::api::core::v1::Node| ready_of(n).is_some_and(|r| r.status == "Unknown");
    let marked = wait_node(&s, &nodes[0], Duration::from_secs(8), unknown).await;
    assert!(marked.is_some(), "{extra:?}: never marked Unknown:\n{}", c.logs());
    let tainted =
        wait_node(&s, &nodes[0], Duration::from_secs(3), |n| taint_of(n, UNREACHABLE, "NoExecute").is_some()).await;
    assert!(tainted.is_some(), "{extra:?}: no unreachable taint:\n{}", c.logs());
    let neighbour = ready_of(&node_now(&s, &nodes[2]).await).map(|r| r.status);
    assert_eq!(neighbour.as_deref(), Some("True"), "{extra:?}: a renewed Lease went unseen:\n{}", c.logs());
    (c.metrics().await, c.logs())
}

/// What `nlc_watch_format` says for `resource` in `format`.
fn format_of(metrics: &str, resource: &str, format: &str) -> Option<f64> {
    metric(metrics, &format!("nlc_watch_format{{resource=\"{resource}\",format=\"{format}\"}}"))
}

/// The same controller behaviour with the default (protobuf) and with
/// `--kube-api-content-type=application/json`; the metrics say which format each watch read.
#[tokio::test]
async fn the_controller_behaves_alike_in_protobuf_and_in_json() {
    let started = std::time::Instant::now();
    let ((pm, pl), (jm, jl)) = tokio::join!(
        controller_behaves("wire-pb", &["--leader-elect=false"]),
        controller_behaves("wire-json", &["--leader-elect=false", "--kube-api-content-type=application/json"]),
    );
    eprintln!("both formats: {:.1}s", started.elapsed().as_secs_f64());
    for resource in ["pods", "nodes", "leases"] {
        assert_eq!(format_of(&pm, resource, "protobuf"), Some(1.0), "{resource}:\n{pm}");
        assert_eq!(format_of(&pm, resource, "json"), Some(0.0), "{resource}:\n{pm}");
        assert_eq!(format_of(&jm, resource, "json"), Some(1.0), "{resource}:\n{jm}");
        assert_eq!(format_of(&jm, resource, "protobuf"), Some(0.0), "{resource}:\n{jm}");
    }
    // The pause ConfigMap stays JSON either way.
    assert_eq!(format_of(&pm, "pause", "json"), Some(1.0), "{pm}");
    for m in [&pm, &jm] {
        assert_eq!(metric_sum(m, "nlc_watch_protobuf_refused_total", &[]), 0.0, "{m}");
        assert_eq!(metric_sum(m, "nlc_decode_errors_total", &[]), 0.0, "{m}");
        assert!(metric_sum(m, "nlc_watch_events_total", &["resource=\"leases\""]) >= 3.0, "{m}");
    }
    let connected = |logs: &str| logs.lines().find(|l| l.contains("connected to the API server")).map(str::to_owned);
    assert!(connected(&pl).is_some_and(|l| l.contains("application/vnd.kubernetes.protobuf")), "{pl}");
    assert!(connected(&jl).is_some_and(|l| l.contains("application/json")), "{jl}");
}

/// An API server (here a proxy in front of it) that refuses protobuf for one resource: that
/// watch falls back to JSON, once, logged and counted; the others stay protobuf, and the
/// controller syncs and acts.
#[tokio::test]
async fn a_resource_refused_in_protobuf_falls_back_to_json() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = shared();
    let s = Scope::new(env, "wire-refused").await;
    let node = make_node(&s, "z1", json!([])).await;
    let _kubelets = Kubelets::start(&s.client, std::slice::from_ref(&node)).await;
    s.pod("victim", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    // Every Lease list and watch is refused with 406 until the controller asked once.
    let refused = proxy.add(Rule::new("GET", &["/kube-node-lease/leases"], Fault::Status(406)));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let scope = s.scope.clone();
    let start = tokio::spawn(async move {
        Controller::start_with_kubeconfig(&kubeconfig, env, &scope, &flags(&["--leader-elect=false"])).await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while refused.hits() == 0 {
        assert!(std::time::Instant::now() < deadline, "the Lease watch never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.remove(&refused);
    let c = start.await.expect("started");
    s.set_taints(&node, json!([no_execute("example.com/wire", now_s())])).await;
    assert!(evictions.wait("victim", Duration::from_secs(10)).await.is_some(), "{}", c.logs());
    let m = c.metrics().await;
    assert_eq!(format_of(&m, "leases", "json"), Some(1.0), "{m}");
    assert_eq!(format_of(&m, "leases", "protobuf"), Some(0.0), "{m}");
    assert_eq!(format_of(&m, "pods", "protobuf"), Some(1.0), "{m}");
    assert_eq!(format_of(&m, "nodes", "protobuf"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "nlc_watch_protobuf_refused_total{resource=\"leases\"}"), Some(1.0), "{m}");
    assert_eq!(metric_sum(&m, "nlc_watch_protobuf_refused_total", &[]), 1.0, "{m}");
    let logs = c.logs();
    assert_eq!(logs.matches("does not serve this resource in protobuf; using JSON").count(), 1, "{logs}");
    assert!(metric_sum(&m, "nlc_watch_events_total", &["resource=\"leases\""]) >= 1.0, "{m}");
}

/// One format's view of a watch: every event as `(type, name, resourceVersion)`, and how many
/// lists and failures it took.
#[derive(Default)]
struct Seen {
    events: Vec<(&'static str, String, String)>,
    lists: usize,
    failures: usize,
}

/// Follows the runtime's watch loop on `ns`'s pods in `format` with a 1 s `timeoutSeconds`, until
/// the pod `last` is deleted.
async fn follow(
    client: kube::Client,
    ns: String,
    format: node_lifecycle_controller::runtime::watch::Format,
    streaming: bool,
    last: &'static str,
    synced: tokio::sync::mpsc::Sender<()>,
) -> Seen {
    use futures::StreamExt;
    use kube::runtime::watcher::{Config, Event};
    use node_lifecycle_controller::runtime::watch::{Item, WatchMetrics, stream_as};
    let config = Config { timeout: Some(1), ..Config::default() };
    let config = if streaming { config.streaming_lists() } else { config };
    let api = kube::Api::<WirePod>::namespaced(client, &ns);
    let mut events = std::pin::pin!(stream_as(api, config, format, "pods", WatchMetrics::default(), None));
    let mut seen = Seen::default();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(30), events.next()).await.expect("an event") {
        let (type_, pod) = match item {
            Item::Failed(_) => {
                seen.failures += 1;
                continue;
            }
            // Protobuf watches hand on bookmarks, JSON ones (kube-runtime's) keep them.
            Item::Bookmark(_) => continue,
            Item::Event(Event::Init) => {
                seen.lists += 1;
                continue;
            }
            Item::Event(Event::InitDone) => {
                let _ = synced.send(()).await;
                continue;
            }
            Item::Event(Event::InitApply(p)) => ("InitApply", p),
            Item::Event(Event::Apply(p)) => ("Apply", p),
            Item::Event(Event::Delete(p)) => ("Delete", p),
        };
        assert_eq!(pod.1, None, "decoded cleanly");
        let name = pod.0.metadata.name.clone().unwrap_or_default();
        seen.events.push((type_, name.clone(), pod.0.metadata.resource_version.clone().unwrap_or_default()));
        if type_ == "Delete" && name == last {
            return seen;
        }
    }
    seen
}

/// The runtime's watch loop in protobuf and in JSON, side by side on one namespace, streaming
/// and paged: the same events in the same order with the same resourceVersions, across several
/// server-side watch timeouts (`timeoutSeconds=1`): each watch resumes from the last
/// resourceVersion, without a new list and without a failure.
#[tokio::test]
async fn the_watch_loop_yields_the_same_events_in_protobuf_and_in_json() {
    use node_lifecycle_controller::runtime::watch::Format;
    let env = shared();
    let s = Scope::new(env, "wire-loop").await;
    let node = s.node("n", json!([])).await;
    s.pod("a", &node, json!([]), json!({})).await;
    // A list at resourceVersion 0 (each follower's, kube-runtime's too) is served from the API
    // server's watch cache, which may not hold `a` yet: then one follower lists it and another
    // sees it as a watch event. Wait until the cache has it, so all four list it.
    let any = kube::api::ListParams::default().match_any();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !s.pods().list(&any).await.expect("list").items.iter().any(|p| p.metadata.name.as_deref() == Some("a")) {
        assert!(tokio::time::Instant::now() < deadline, "the watch cache never held pod a");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let mut followers = Vec::new();
    for (format, streaming) in
        [(Format::Protobuf, true), (Format::Json, true), (Format::Protobuf, false), (Format::Json, false)]
    {
        followers.push(tokio::spawn(follow(s.client.clone(), s.ns.clone(), format, streaming, "a", tx.clone())));
    }
    for _ in 0..followers.len() {
        rx.recv().await.expect("synced");
    }
    // Past two server-side timeouts, then changes.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    s.set_taints(&node, json!([])).await;
    s.pod("b", &node, json!([{"operator": "Exists"}]), json!({"x": "y"})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let patch = json!({"metadata": {"labels": {"changed": "yes"}}});
    s.pods().patch("a", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.expect("patch");
    s.pods()
        .delete("a", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await
        .expect("delete");
    let mut all = Vec::new();
    for f in followers {
        all.push(f.await.expect("joined"));
    }
    for (i, seen) in all.iter().enumerate() {
        assert_eq!((seen.lists, seen.failures), (1, 0), "follower {i}: {:?}", seen.events);
        assert!(seen.events.iter().any(|(t, n, _)| *t == "Apply" && n == "b"), "follower {i}: {:?}", seen.events);
    }
    assert_eq!(all[0].events, all[1].events, "streaming: protobuf and JSON differ");
    assert_eq!(all[2].events, all[3].events, "paged: protobuf and JSON differ");
}

/// The executor's lean requests (`runtime::lean`) in protobuf and in JSON, against the same
/// objects: a node read decodes to the same slim node (odd taints included), and each refusal an
/// eviction meets (404, a UID precondition's 409, a changed `metadata.uid`'s 422) reads as the
/// same `Status` from either format, which is what the executor's decisions are made on.
#[tokio::test]
async fn lean_answers_read_alike_in_protobuf_and_in_json() {
    use kube::Resource;
    use kube::api::{DeleteParams, GetParams, Patch, PatchParams, Preconditions};
    use kube::core::Request;
    use node_lifecycle_controller::runtime::lean::LeanClient;
    use node_lifecycle_controller::runtime::watch::Format;

    let env = shared();
    let s = Scope::new(env, "lean").await;
    let node = s
        .node(
            "odd",
            json!([
                {"key": "example.com/far", "effect": "NoExecute", "timeAdded": "9000-01-01T00:00:00Z"},
                {"key": "example.com/empty-value", "value": "", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now_s()}]),
        )
        .await;
    let pod = s.pod("p", &node, json!([]), json!({})).await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let (pb, js) =
        (LeanClient::new(s.client.clone(), Format::Protobuf), LeanClient::new(s.client.clone(), Format::Json));
    let nodes = Request::new(k8s_openapi::api::core::v1::Node::url_path(&(), None));
    let pods = Request::new(k8s_openapi::api::core::v1::Pod::url_path(&(), Some(&s.ns)));

    let a = pb.slim::<WireNode>(nodes.get(&node, &GetParams::default())).await.expect("protobuf read");
    let b = js.slim::<WireNode>(nodes.get(&node, &GetParams::default())).await.expect("JSON read");
    assert_eq!(a.1, None);
    assert_eq!(format!("{:?}", a.0), format!("{:?}", b.0));
    // Ours, and the not-ready NoSchedule taint the API server adds to a new node.
    let taints = a.0.spec.as_ref().and_then(|s| s.taints.as_ref()).map(Vec::len);
    assert_eq!(taints, Some(4), "{:?}", a.0);

    let status = |r: kube::Result<()>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    };
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions { uid: Some("0".into()), resource_version: None }),
        ..DeleteParams::default()
    };
    let uid_patch =
        json!({"metadata": {"uid": "0"}, "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}});
    let mut codes = vec![];
    for lean in [&pb, &js] {
        let gone = status(lean.send_unread(pods.delete("no-such-pod", &DeleteParams::default())).await);
        let conflict = status(lean.send_unread(pods.delete("p", &wrong_uid)).await);
        let patch = Patch::Strategic(&uid_patch);
        let invalid =
            status(lean.send_unread(pods.patch_subresource("status", "p", &PatchParams::default(), &patch)).await);
        codes.push([gone, conflict, invalid]);
    }
    assert_eq!(codes[0], codes[1]);
    let [gone, conflict, invalid] = &codes[0];
    assert_eq!((gone.0, gone.1.as_str()), (404, "NotFound"));
    assert_eq!((conflict.0, conflict.1.as_str()), (409, "Conflict"));
    assert_eq!(invalid.0, 422);
    assert!(invalid.2.contains("metadata.uid"), "{invalid:?}");

    // Writes that land: answered, not decoded, in either format.
    let condition = json!({"metadata": {"uid": uid}, "status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]}});
    let patch = Patch::Strategic(&condition);
    js.send_unread(pods.patch_subresource("status", "p", &PatchParams::default(), &patch)).await.expect("JSON patch");
    let right_uid = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
        ..DeleteParams::default()
    };
    pb.send_unread(pods.delete("p", &right_uid)).await.expect("protobuf delete");
    let after = s.pods().get_opt("p").await.expect("read the pod");
    assert!(after.as_ref().is_none_or(|p| p.metadata.deletion_timestamp.is_some()), "not deleted: {after:?}");
}

/// A protobuf field: `field` with `bytes` (length-delimited) appended to `out`.
fn pb(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    varint(out, u64::from(field) << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One bad byte in a node condition's reason (written in protobuf, which the API server keeps as
/// it came; a JSON client reads U+FFFD) hides nothing: the controller, watching in protobuf,
/// still sees the node's later taint and evicts for it, and counts no decode error. (Before, the
/// whole node was a decode problem and each of its updates was dropped.)
#[tokio::test]
async fn a_bad_byte_in_a_condition_reason_hides_no_taint() {
    let env = shared();
    let s = Scope::new(env, "wire-utf8").await;
    let node = s.node("n", json!([])).await;
    // PUT nodes/n/status in protobuf: Ready=True, its reason "bad\xff".
    let mut condition = Vec::new();
    pb(&mut condition, 1, b"Ready");
    pb(&mut condition, 2, b"True");
    pb(&mut condition, 5, b"bad\xffreason");
    let (mut status, mut meta, mut obj, mut type_meta, mut unknown) = (vec![], vec![], vec![], vec![], vec![]);
    pb(&mut status, 4, &condition);
    pb(&mut meta, 1, node.as_bytes());
    // The labels too (the scope's selector): a status update takes the object's metadata.
    for (k, v) in node_now(&s, &node).await.metadata.labels.unwrap_or_default() {
        let mut entry = Vec::new();
        pb(&mut entry, 1, k.as_bytes());
        pb(&mut entry, 2, v.as_bytes());
        pb(&mut meta, 11, &entry);
    }
    pb(&mut obj, 1, &meta);
    pb(&mut obj, 3, &status);
    pb(&mut type_meta, 1, b"v1");
    pb(&mut type_meta, 2, b"Node");
    pb(&mut unknown, 1, &type_meta);
    pb(&mut unknown, 2, &obj);
    let body = [&b"k8s\0"[..], &unknown].concat();
    let req = hyper::Request::builder()
        .method("PUT")
        .uri(format!("/api/v1/nodes/{node}/status"))
        .header(ACCEPT, JSON)
        .header(CONTENT_TYPE, PROTOBUF)
        .body(Body::from(body))
        .expect("a request");
    let res = s.client.send(req).await.expect("sent");
    assert_eq!(res.status().as_u16(), 200, "{:?}", res.into_body().collect_bytes().await);
    let read = node_now(&s, &node).await;
    let reason = ready_of(&read).and_then(|r| r.reason.clone());
    assert_eq!(reason.as_deref(), Some("bad\u{FFFD}reason"), "the API server kept the byte; JSON reads U+FFFD");
    s.pod("victim", &node, json!([]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let c = Controller::start(env, &s.scope, &["--leader-elect=false"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.set_taints(&node, json!([no_execute("example.com/utf8", now_s())])).await;
    let evicted = evictions.wait("victim", Duration::from_secs(10)).await;
    assert!(evicted.is_some(), "the taint went unseen:\n{}", c.logs());
    let m = c.metrics().await;
    assert_eq!(format_of(&m, "nodes", "protobuf"), Some(1.0), "{m}");
    assert_eq!(metric_sum(&m, "nlc_decode_errors_total", &[]), 0.0, "{m}");
}
