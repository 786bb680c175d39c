//! A timer queue as a plain data structure: one deadline per key, `O(log n)` add/update, `O(1)`
//! cancel (lazy deletion), and `due(now)` popping everything whose time has come. No clock and
//! no task: the I/O loop sleeps until [`TimerQueue::next_deadline`]. Every deadline can be moved
//! by the same amount at once, in `O(1)` ([`TimerQueue::set_offset`]).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

use jiff::{SignedDuration, Timestamp};

use crate::time::shift;

#[derive(Debug)]
pub struct TimerQueue<K> {
    heap: BinaryHeap<Reverse<(Timestamp, u64, K)>>,
    live: HashMap<K, (Timestamp, u64)>,
    seq: u64,
    /// Added to every stored time on the way out (and taken off on the way in): moving it moves
    /// every deadline at once.
    offset: SignedDuration,
}

impl<K> Default for TimerQueue<K> {
    fn default() -> Self {
        Self { heap: BinaryHeap::new(), live: HashMap::new(), seq: 0, offset: SignedDuration::ZERO }
    }
}

impl<K: Clone + Eq + Hash + Ord> TimerQueue<K> {
    /// Sets `key`'s deadline (adding or moving it). Returns the previous deadline.
    pub fn set(&mut self, key: K, at: Timestamp) -> Option<Timestamp> {
        let at = self.stored(at);
        let offset = self.offset;
        self.seq += 1;
        let seq = self.seq;
        let previous = match self.live.entry(key.clone()) {
            Entry::Occupied(mut e) => {
                let (old, _) = *e.get();
                if old == at {
                    return Some(shift(old, offset)); // unchanged: no new heap entry
                }
                e.insert((at, seq));
                Some(shift(old, offset))
            }
            Entry::Vacant(e) => {
                e.insert((at, seq));
                None
            }
        };
        self.heap.push(Reverse((at, seq, key)));
        self.compact_if_needed();
        previous
    }

    /// Removes `key`; returns its deadline if it had one.
    pub fn cancel(&mut self, key: &K) -> Option<Timestamp> {
        let removed = self.live.remove(key).map(|(at, _)| self.shown(at));
        if removed.is_some() {
            self.compact_if_needed();
        }
        removed
    }

    pub fn deadline(&self, key: &K) -> Option<Timestamp> {
        self.live.get(key).map(|(at, _)| self.shown(*at))
    }

    /// Moves every deadline at once, in `O(1)`: a deadline set to `t` while the offset was `a`
    /// reads `t + (offset - a)` from now on; one set afterwards reads as set.
    pub fn set_offset(&mut self, offset: SignedDuration) {
        self.offset = offset;
    }

    /// A time as stored: the offset taken off (saturating).
    fn stored(&self, at: Timestamp) -> Timestamp {
        shift(at, SignedDuration::ZERO.saturating_sub(self.offset))
    }

    /// A stored time as shown: the offset added (saturating).
    fn shown(&self, at: Timestamp) -> Timestamp {
        shift(at, self.offset)
    }

    /// The earliest live deadline.
    pub fn next_deadline(&mut self) -> Option<Timestamp> {
        self.drop_stale_head();
        let at = self.heap.peek().map(|Reverse((at, _, _))| *at)?;
        Some(self.shown(at))
    }

    /// Pops every key whose deadline is `<= now`, earliest first, with its deadline.
    pub fn due(&mut self, now: Timestamp) -> Vec<(K, Timestamp)> {
        let now = self.stored(now);
        let mut out = Vec::new();
        loop {
            self.drop_stale_head();
            match self.heap.peek() {
                Some(Reverse((at, _, _))) if *at <= now => {}
                _ => break,
            }
            if let Some(Reverse((at, _, key))) = self.heap.pop() {
                self.live.remove(&key);
                out.push((key, self.shown(at)));
            }
        }
        out
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.live.contains_key(key)
    }

    /// Every key with its deadline, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, Timestamp)> {
        self.live.iter().map(|(k, (at, _))| (k, self.shown(*at)))
    }

    fn is_live(&self, at: Timestamp, seq: u64, key: &K) -> bool {
        self.live.get(key).is_some_and(|&(a, s)| a == at && s == seq)
    }

    fn drop_stale_head(&mut self) {
        while let Some(Reverse((at, seq, key))) = self.heap.peek() {
            if self.is_live(*at, *seq, key) {
                return;
            }
            self.heap.pop();
        }
    }

    /// Keeps the heap within a constant factor of the live entries, whatever the churn.
    fn compact_if_needed(&mut self) {
        if self.heap.len() > 64 && self.heap.len() > 2 * self.live.len() {
            let live = &self.live;
            self.heap.retain(|Reverse((at, seq, key))| live.get(key).is_some_and(|&(a, s)| a == *at && s == *seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("ts")
    }

    #[test]
    fn add_move_cancel_due() {
        let mut q = TimerQueue::default();
        assert_eq!(q.set("a", t(10)), None);
        assert_eq!(q.set("b", t(5)), None);
        assert_eq!(q.set("c", t(7)), None);
        assert_eq!(q.next_deadline(), Some(t(5)));
        assert_eq!(q.set("b", t(20)), Some(t(5)), "moved later");
        assert_eq!(q.next_deadline(), Some(t(7)));
        assert_eq!(q.cancel(&"c"), Some(t(7)));
        assert_eq!(q.cancel(&"c"), None);
        assert_eq!(q.due(t(9)), vec![]);
        assert_eq!(q.due(t(10)), vec![("a", t(10))]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.set("b", t(1)), Some(t(20)), "moved earlier");
        assert_eq!(q.due(t(1)), vec![("b", t(1))]);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn an_offset_moves_every_deadline_at_once() {
        let mut q = TimerQueue::default();
        q.set("a", t(10));
        q.set("b", t(20));
        q.set("far", Timestamp::MAX);
        q.set_offset(SignedDuration::from_secs(5));
        assert_eq!(q.deadline(&"a"), Some(t(15)));
        assert_eq!(q.next_deadline(), Some(t(15)));
        assert_eq!(q.due(t(14)), vec![]);
        // Set under the offset: reads as set.
        assert_eq!(q.set("c", t(17)), None);
        assert_eq!(q.set("c", t(17)), Some(t(17)), "unchanged");
        assert_eq!(q.due(t(17)), vec![("a", t(15)), ("c", t(17))]);
        assert_eq!(q.deadline(&"far"), Some(Timestamp::MAX), "saturates");
        q.set_offset(SignedDuration::ZERO);
        assert_eq!(q.cancel(&"b"), Some(t(20)));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![(&"far", Timestamp::MAX)]);
    }

    #[test]
    fn churn_does_not_grow_the_heap() {
        let mut q = TimerQueue::default();
        for i in 0..10_000 {
            q.set(i % 10, t(i));
        }
        assert_eq!(q.len(), 10);
        assert!(q.heap.len() <= 64.max(2 * q.len()) + 1, "heap {}", q.heap.len());
    }

    proptest! {
        /// The queue agrees with a plain map model under any sequence of operations.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u8..3, 0u8..8, 0i64..50), 0..200)) {
            let mut q = TimerQueue::default();
            let mut model: std::collections::BTreeMap<u8, i64> = Default::default();
            for (op, key, at) in ops {
                match op {
                    0 => { prop_assert_eq!(q.set(key, t(at)), model.insert(key, at).map(t)); }
                    1 => { prop_assert_eq!(q.cancel(&key), model.remove(&key).map(t)); }
                    _ => {
                        let mut want: Vec<(u8, i64)> = model.iter().filter(|(_, a)| **a <= at).map(|(k, a)| (*k, *a)).collect();
                        want.sort_by_key(|(k, a)| (*a, *k));
                        model.retain(|_, a| *a > at);
                        let mut got: Vec<(u8, i64)> = q.due(t(at)).into_iter().map(|(k, a)| (k, a.as_second())).collect();
                        got.sort_by_key(|(k, a)| (*a, *k));
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.next_deadline(), model.values().min().copied().map(t));
            }
        }
    }
}
