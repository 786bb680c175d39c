//! The deciders' places (one per core), handed out in turn among the addresses requests come
//! from: a source with many reviews queued waits behind one review of each other source's, not
//! the other way round. So a few pods sending valid but costly reviews (hundreds of tolerations
//! against a namespace with many defaults, milliseconds of CPU each) delay the API server's
//! calls by about one such review per flooding source, well within the webhook's 2 s timeout,
//! instead of by the whole queue.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Where a request came from; `None` when the listener did not say.
type Source = Option<IpAddr>;

pub(crate) struct Deciders {
    state: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    free: usize,
    /// The sources with requests waiting, in turn.
    turn: VecDeque<Source>,
    waiting: HashMap<Source, VecDeque<oneshot::Sender<Place>>>,
}

impl Queue {
    /// The next waiter in turn; its source goes to the back of the turn if it has more.
    fn next(&mut self) -> Option<oneshot::Sender<Place>> {
        while let Some(source) = self.turn.pop_front() {
            let Some(queue) = self.waiting.get_mut(&source) else { continue };
            let next = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&source);
            } else {
                self.turn.push_back(source);
            }
            if next.is_some() {
                return next;
            }
        }
        None
    }
}

impl Deciders {
    pub(crate) fn new(places: usize) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(Queue { free: places.max(1), ..Queue::default() }) })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a request from `source`, once it is its turn. Dropping the future gives up the
    /// turn; a place handed to a request that was called off meanwhile goes to the next one.
    pub(crate) async fn place(self: &Arc<Self>, source: Source) -> Option<Place> {
        let rx = {
            let mut q = self.lock();
            if q.free > 0 && q.turn.is_empty() {
                q.free -= 1;
                return Some(Place { deciders: Some(self.clone()) });
            }
            let (tx, rx) = oneshot::channel();
            if !q.waiting.contains_key(&source) {
                q.turn.push_back(source);
            }
            q.waiting.entry(source).or_default().push_back(tx);
            rx
        };
        rx.await.ok()
    }

    /// A place given back: to the next waiter in turn, or free.
    fn release(self: &Arc<Self>) {
        loop {
            let next = {
                let mut q = self.lock();
                let next = q.next();
                if next.is_none() {
                    q.free += 1;
                }
                next
            };
            let Some(tx) = next else { return };
            match tx.send(Place { deciders: Some(self.clone()) }) {
                Ok(()) => return,
                // Called off: the place goes on to the next, not back through its own drop.
                Err(mut place) => place.deciders = None,
            }
        }
    }

    #[cfg(test)]
    fn free(&self) -> usize {
        self.lock().free
    }
}

/// A decider's place, given back when dropped.
pub(crate) struct Place {
    deciders: Option<Arc<Deciders>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(d) = self.deciders.take() {
            d.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> Source {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    #[tokio::test]
    async fn places_go_round_the_sources_in_turn() {
        let d = Deciders::new(1);
        let held = d.place(ip(1)).await.expect("free");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        // A flood of ten from one source, then one from another.
        for (i, source) in (0..10).map(|i| (i, ip(1))).chain([(100, ip(2))]) {
            let (d, order) = (d.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let place = d.place(source).await;
                order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
                drop(place);
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for w in waiting {
            w.await.expect("task");
        }
        let order = order.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(order[..2], [0, 100], "the other source's one review waits behind one of the flood's: {order:?}");
        assert_eq!(order[2..], [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(d.free(), 1);
    }

    #[tokio::test]
    async fn a_called_off_request_passes_its_place_on() {
        let d = Deciders::new(1);
        let held = d.place(ip(1)).await.expect("free");
        let gone = tokio::spawn({
            let d = d.clone();
            async move { d.place(ip(2)).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        let next = tokio::spawn({
            let d = d.clone();
            async move { d.place(ip(3)).await.is_some() }
        });
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        assert!(next.await.expect("task"));
        assert_eq!(d.free(), 1, "every place came back");
    }
}
