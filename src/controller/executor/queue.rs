//! The pod writes waiting for a worker: one bounded queue per kind (evictions, MarkPodsNotReady),
//! first in first out, at most one job per pod (a newer job for the same pod replaces the queued
//! one), and a job called off while queued leaves at once. Workers are the executor's eviction
//! permits: a user's NoExecute taint on every node queues 150,000 small jobs, not 150,000 tasks.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use nlc_core::index::PodKey;
use tokio::sync::Notify;

/// A queued job, with the operation number that can call it off.
pub(crate) trait Job {
    fn op(&self) -> u64;
    fn key(&self) -> &PodKey;
}

struct State<J> {
    order: VecDeque<PodKey>,
    jobs: HashMap<PodKey, J>,
    by_op: HashMap<u64, PodKey>,
}

pub(crate) struct Queue<J> {
    state: Mutex<State<J>>,
    ready: Notify,
}

impl<J: Job> Default for Queue<J> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State { order: VecDeque::new(), jobs: HashMap::new(), by_op: HashMap::new() }),
            ready: Notify::new(),
        }
    }
}

impl<J: Job> Queue<J> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`; returns the job it replaced (same pod), which will never run.
    pub(crate) fn push(&self, job: J) -> Option<J> {
        let key = job.key().clone();
        let replaced = {
            let mut s = self.lock();
            s.by_op.insert(job.op(), key.clone());
            match s.jobs.insert(key.clone(), job) {
                Some(old) => {
                    s.by_op.remove(&old.op());
                    Some(old)
                }
                None => {
                    s.order.push_back(key);
                    None
                }
            }
        };
        self.ready.notify_one();
        replaced
    }

    /// Takes the job of operation `op` off the queue, if it is still waiting there.
    pub(crate) fn remove(&self, op: u64) -> Option<J> {
        let mut s = self.lock();
        let key = s.by_op.remove(&op)?;
        // Its place in `order` is skipped when reached.
        s.jobs.remove(&key)
    }

    /// The next job, waiting for one.
    pub(crate) async fn pop(&self) -> J {
        loop {
            let notified = self.ready.notified();
            {
                let mut s = self.lock();
                while let Some(key) = s.order.pop_front() {
                    if let Some(job) = s.jobs.remove(&key) {
                        s.by_op.remove(&job.op());
                        return job;
                    }
                }
            }
            notified.await;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct J(u64, PodKey);

    impl Job for J {
        fn op(&self) -> u64 {
            self.0
        }
        fn key(&self) -> &PodKey {
            &self.1
        }
    }

    fn key(s: &str) -> PodKey {
        s.into()
    }

    #[tokio::test]
    async fn fifo_one_job_per_pod_and_called_off_jobs_leave() {
        let q = Queue::<J>::default();
        assert_eq!(q.push(J(1, key("a/p1"))), None);
        assert_eq!(q.push(J(2, key("a/p2"))), None);
        assert_eq!(q.push(J(3, key("a/p3"))), None);
        // A newer job for p1 replaces the queued one and keeps its place.
        assert_eq!(q.push(J(4, key("a/p1"))), Some(J(1, key("a/p1"))));
        assert_eq!(q.remove(1), None, "the replaced job is gone");
        assert_eq!(q.remove(2), Some(J(2, key("a/p2"))));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop().await, J(4, key("a/p1")));
        assert_eq!(q.pop().await, J(3, key("a/p3")));
        assert_eq!(q.len(), 0);
        assert_eq!(q.remove(3), None, "popped jobs cannot be removed");
    }
}
