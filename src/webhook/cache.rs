//! What the webhook decides with besides the pod: every namespace's labels and the annotations
//! the plugins read, and the toleration rules, kept current by watches. The rules' status is
//! written here too (computed by [`nlc_core::admission::toleration_rules`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use nlc_core::admission::toleration_rules::{RuleSet, TolerationRule};
use nlc_core::admission::{NamespaceInfo, Namespaces};
use serde_json::json;
use tokio::sync::watch;

use crate::metrics::WebhookMetrics;

/// Shared between the watches (writers) and the request handlers (readers).
#[derive(Default)]
pub struct Knowledge {
    pub namespaces: RwLock<Namespaces>,
    pub rules: RwLock<Arc<RuleSet>>,
}

impl Knowledge {
    /// A namespace as last seen.
    pub fn namespace(&self, name: &str) -> Option<NamespaceInfo> {
        self.namespaces.read().ok().and_then(|n| n.get(name).cloned())
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Reads a namespace the cache has not seen yet (created a moment ago) and remembers it.
pub async fn fetch_namespace(client: &kube::Client, knowledge: &Knowledge, name: &str) -> Option<NamespaceInfo> {
    let api: Api<Namespace> = Api::all(client.clone());
    let got = tokio::time::timeout(Duration::from_secs(1), api.get_metadata_opt(name)).await;
    match got {
        Ok(Ok(Some(meta))) => {
            let info = NamespaceInfo::from_meta(&meta.metadata);
            if let Ok(mut n) = knowledge.namespaces.write() {
                n.insert(name.to_owned(), info.clone());
            }
            Some(info)
        }
        Ok(Ok(None)) => None,
        Ok(Err(e)) => {
            tracing::warn!(namespace = name, error = %e, "reading a namespace the cache has not seen");
            None
        }
        Err(_) => {
            tracing::warn!(namespace = name, "reading a namespace the cache has not seen timed out");
            None
        }
    }
}

/// Keeps `knowledge.namespaces` current (metadata only). Sets `synced` once the first list is
/// complete.
pub async fn namespaces(client: kube::Client, knowledge: Arc<Knowledge>, synced: watch::Sender<bool>) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut building: Option<Namespaces> = None;
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
                continue;
            }
        };
        let name = |ns: &PartialObjectMeta<Namespace>| ns.metadata.name.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => building = Some(Namespaces::new()),
            watcher::Event::InitApply(ns) => {
                if let Some(b) = building.as_mut() {
                    b.insert(name(&ns), NamespaceInfo::from_meta(&ns.metadata));
                }
            }
            watcher::Event::InitDone => {
                if let (Some(b), Ok(mut c)) = (building.take(), knowledge.namespaces.write()) {
                    *c = b;
                }
                let _ = synced.send(true);
            }
            watcher::Event::Apply(ns) => {
                if let Ok(mut c) = knowledge.namespaces.write() {
                    c.insert(name(&ns), NamespaceInfo::from_meta(&ns.metadata));
                }
            }
            watcher::Event::Delete(ns) => {
                if let Ok(mut c) = knowledge.namespaces.write() {
                    c.remove(&name(&ns));
                }
            }
        }
    }
}

/// Keeps `knowledge.rules` current from the `TolerationRule` resources and writes each rule's
/// status (valid or why not, conflicts). Sets `synced` once the first list is complete.
pub async fn rules(
    client: kube::Client,
    knowledge: Arc<Knowledge>,
    synced: watch::Sender<bool>,
    metrics: WebhookMetrics,
) {
    let api: Api<TolerationRule> = Api::all(client);
    let mut stream = watcher(api.clone(), watcher::Config::default()).default_backoff().boxed();
    let mut all: BTreeMap<String, TolerationRule> = BTreeMap::new();
    let mut building: Option<BTreeMap<String, TolerationRule>> = None;
    // Status writes that failed are tried again on the next change or after a while.
    let mut resync = tokio::time::interval(Duration::from_secs(30));
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => return,
            },
            _ = resync.tick() => {
                if *synced.borrow() {
                    publish(&api, &all, &knowledge, &metrics).await;
                }
                continue;
            }
        };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "TolerationRule watch failed (is the CRD installed?); retrying");
                continue;
            }
        };
        // Apply this event and every one already waiting, then publish once: a burst (the
        // status writes below come back as events) costs one rebuild, not one per event.
        let mut changed = apply_rule_event(ev, &mut all, &mut building);
        while let Some(Some(more)) = stream.next().now_or_never() {
            match more {
                Ok(ev) => changed |= apply_rule_event(ev, &mut all, &mut building),
                Err(e) => tracing::warn!(error = %e, "TolerationRule watch failed; retrying"),
            }
        }
        if changed && building.is_none() {
            publish(&api, &all, &knowledge, &metrics).await;
            let _ = synced.send(true);
        }
    }
}

/// Applies one watch event to the rules; whether the published set should be rebuilt.
fn apply_rule_event(
    ev: watcher::Event<TolerationRule>,
    all: &mut BTreeMap<String, TolerationRule>,
    building: &mut Option<BTreeMap<String, TolerationRule>>,
) -> bool {
    let name = |r: &TolerationRule| r.metadata.name.clone().unwrap_or_default();
    match ev {
        watcher::Event::Init => {
            *building = Some(BTreeMap::new());
            false
        }
        watcher::Event::InitApply(r) => {
            if let Some(b) = building.as_mut() {
                b.insert(name(&r), r);
            }
            false
        }
        watcher::Event::InitDone => {
            if let Some(b) = building.take() {
                *all = b;
            }
            true
        }
        watcher::Event::Apply(r) => {
            // A status write (ours) comes back as an event: kept, nothing to rebuild for it.
            let key = name(&r);
            let same_spec = all.get(&key).is_some_and(|old| old.spec == r.spec);
            all.insert(key, r);
            !same_spec
        }
        watcher::Event::Delete(r) => {
            all.remove(&name(&r));
            true
        }
    }
}

/// Checks every rule, hands the set to the handlers, and writes the statuses that changed.
async fn publish(
    api: &Api<TolerationRule>,
    all: &BTreeMap<String, TolerationRule>,
    knowledge: &Knowledge,
    metrics: &WebhookMetrics,
) {
    let set = RuleSet::build(all.iter().map(|(n, r)| (n.as_str(), &r.spec)));
    metrics.set_rules(set.rules.len(), set.invalid.len(), set.conflicts.len());
    let set = Arc::new(set);
    if let Ok(mut r) = knowledge.rules.write() {
        *r = set.clone();
    }
    let now = jiff::Timestamp::now();
    for (name, rule) in all {
        let want = set.status(name, rule.metadata.generation, rule.status.as_ref(), now);
        if rule.status.as_ref() == Some(&want) {
            continue;
        }
        let patch = json!({"status": want});
        match api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(rule = %name, "TolerationRule status written"),
            Err(e) => tracing::warn!(rule = %name, error = %e, "writing a TolerationRule's status; retried later"),
        }
    }
}
