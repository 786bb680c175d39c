//! Upstream's MarkPodsNotReady (docs/spec.md §3): when a node's Ready turns from True to Unknown,
//! its ready pods are marked not ready (and a pod bound to a not-ready node at once); failed
//! writes are retried with backoff while the node is still not ready, and a node that is ready
//! again calls its writes off.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;

use super::{RETRY_BASE, RETRY_CAP};
use crate::action::{Action, MarkPodNotReady, MarkResult, Op, PodEvent, PodEventKind};
use crate::index::{Index, PodKey, SlimNode};
use crate::time::after;
use crate::timer_queue::TimerQueue;
use crate::uid::Uid;

/// A MarkPodsNotReady write that is out or waiting to be retried.
#[derive(Debug)]
struct Mark {
    uid: Uid,
    node: String,
    op: u64,
    in_flight: bool,
    attempts: u32,
}

/// The MarkPodsNotReady writes out or waiting to be retried.
#[derive(Debug, Default)]
pub(super) struct Marks {
    marks: HashMap<PodKey, Mark>,
    retries: TimerQueue<PodKey>,
    /// Nodes with marks out, so that a node that is ready again can call them off.
    nodes: HashSet<String>,
    next_op: u64,
}

impl Marks {
    /// Sends (or re-sends) the MarkPodsNotReady write of one pod.
    pub(super) fn mark(&mut self, key: &PodKey, index: &Index, out: &mut Vec<Action>) {
        let Some(pod) = index.pods.get(key) else { return };
        if self.marks.get(key).is_some_and(|m| m.in_flight && m.uid == pod.uid) {
            return;
        }
        self.next_op += 1;
        let op = self.next_op;
        let attempts = self.marks.get(key).filter(|m| m.uid == pod.uid).map_or(0, |m| m.attempts);
        self.retries.cancel(key);
        self.marks.insert(
            key.clone(),
            Mark { uid: pod.uid.clone(), node: pod.node_name.to_string(), op, in_flight: true, attempts },
        );
        self.nodes.insert(pod.node_name.to_string());
        out.push(Action::MarkPodNotReady(MarkPodNotReady {
            op,
            key: key.clone(),
            namespace: pod.namespace().to_owned(),
            name: pod.name().to_owned(),
            uid: pod.uid.to_string(),
            resource_version: (pod.resource_version != 0).then(|| pod.resource_version.to_string()),
        }));
    }

    /// `node`'s Ready turned from True to Unknown: its ready pods are marked.
    pub(super) fn mark_node(&mut self, node: &str, index: &Index, out: &mut Vec<Action>) {
        let keys: Vec<PodKey> = index.pods_on(node).filter(|p| p.ready == Some(true)).map(|p| p.key()).collect();
        for key in keys {
            self.mark(&key, index, out);
        }
    }

    /// The executor's report on a [`MarkPodNotReady`]: failures are retried with backoff (see
    /// [`Marks::retry_due`]).
    pub(super) fn mark_result(
        &mut self,
        key: &PodKey,
        op: u64,
        result: &MarkResult,
        now: Timestamp,
        out: &mut Vec<Action>,
    ) {
        let Some(m) = self.marks.get_mut(key).filter(|m| m.op == op) else { return };
        m.in_flight = false;
        match result {
            MarkResult::Done => {
                let (namespace, name) = crate::index::split_pod_key(key);
                out.push(Action::PodEvent(PodEvent {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    uid: m.uid.to_string(),
                    kind: PodEventKind::NodeNotReady,
                }));
            }
            MarkResult::Failed(_) => {
                m.attempts = m.attempts.saturating_add(1);
                let at = after(now, crate::time::backoff(RETRY_BASE, RETRY_CAP, m.attempts));
                self.retries.set(key.clone(), at);
                return;
            }
            MarkResult::Gone | MarkResult::Cancelled => {}
        }
        self.marks.remove(key);
    }

    /// Retries that are due: sent again while the pod is still ready, still the same pod, and its
    /// node still not ready (`not_ready`); dropped otherwise.
    pub(super) fn retry_due(
        &mut self,
        index: &Index,
        now: Timestamp,
        not_ready: impl Fn(&SlimNode) -> bool,
        out: &mut Vec<Action>,
    ) {
        for (key, _) in self.retries.due(now) {
            let still_wanted = index.pods.get(&key).is_some_and(|p| {
                p.ready == Some(true)
                    && self.marks.get(&key).is_some_and(|m| m.uid == p.uid)
                    && index.nodes.get(&*p.node_name).is_some_and(&not_ready)
            });
            if still_wanted {
                self.mark(&key, index, out);
            } else {
                self.marks.remove(&key);
            }
        }
    }

    /// A node is ready again: its queued MarkPodsNotReady writes are called off.
    pub(super) fn call_off(&mut self, node: &str, out: &mut Vec<Action>) {
        if !self.nodes.remove(node) {
            return;
        }
        let keys: Vec<PodKey> = self.marks.iter().filter(|(_, m)| m.node == node).map(|(k, _)| k.clone()).collect();
        for key in keys {
            if let Some(m) = self.marks.remove(&key) {
                self.retries.cancel(&key);
                if m.in_flight {
                    out.push(Action::Cancel(Op::MarkPodNotReady(m.op)));
                }
            }
        }
    }

    pub(super) fn next_wakeup(&mut self) -> Option<Timestamp> {
        self.retries.next_deadline()
    }
}
