//! Folding a small watch into a map by name (namespaces, toleration rules, eviction policies).

use kube::runtime::watcher;
use nlc_core::wire::Tolerant;

pub(crate) fn name_of<K: kube::Resource>(k: &K) -> String {
    k.meta().name.clone().unwrap_or_default()
}

/// The re-list protocol of a watch folded into a map by name, as kube-runtime's reflector folds
/// it (`Store::apply_watcher_event`): `Init` starts a new map, each `InitApply` fills it (an
/// object that could not be decoded keeps its last readable value), `InitDone` hands it over
/// whole. The one fold of the small watches (the webhook's namespaces and toleration rules, the
/// controller's eviction policies and namespaces).
pub(crate) struct Relist<M> {
    building: Option<M>,
}

impl<M> Default for Relist<M> {
    fn default() -> Self {
        Self { building: None }
    }
}

/// Where an event left the re-list.
pub(crate) enum Step<K, M> {
    /// Part of a re-list still under way.
    Listing,
    /// The re-list is complete: its map (`None` for an `InitDone` without an `Init`).
    Listed(Option<M>),
    /// Not part of a re-list: an `Apply` or `Delete`, for the caller.
    Event(watcher::Event<Tolerant<K>>),
}

impl<M: Default> Relist<M> {
    /// The list under way failed: what it had gathered is dropped (the watch lists again from
    /// the start).
    pub(crate) fn abort(&mut self) {
        self.building = None;
    }

    /// Whether a re-list is under way.
    pub(crate) fn listing(&self) -> bool {
        self.building.is_some()
    }

    /// Takes `ev` into the re-list: `read` makes a listed object's value, `kept` gives an
    /// unreadable object's last readable one.
    pub(crate) fn step<K: kube::Resource, V>(
        &mut self,
        ev: watcher::Event<Tolerant<K>>,
        read: impl FnOnce(K) -> V,
        kept: impl FnOnce(&str) -> Option<V>,
    ) -> Step<K, M>
    where
        M: Extend<(String, V)>,
    {
        match ev {
            watcher::Event::Init => {
                self.building = Some(M::default());
                Step::Listing
            }
            watcher::Event::InitApply(object) => {
                let key = name_of(&object);
                if let Some(b) = self.building.as_mut() {
                    let value = match object {
                        Tolerant::Ok(k) => Some(read(k)),
                        Tolerant::Bad { .. } => kept(&key),
                    };
                    b.extend(value.map(|v| (key, v)));
                }
                Step::Listing
            }
            watcher::Event::InitDone => Step::Listed(self.building.take()),
            ev => Step::Event(ev),
        }
    }
}

/// Where [`Relist::fold`] left a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Folded {
    /// Part of a re-list still under way: the map is as it was.
    Listing,
    /// A re-list completed: the map is what it listed.
    Listed,
    /// An `Apply` or `Delete`: whether it changed the map (`same` said the new value equals the
    /// old one).
    Event { changed: bool },
}

impl<V: Clone> Relist<std::collections::BTreeMap<String, V>> {
    /// Takes `ev` into `map`, a watch folded by name: a completed re-list replaces it, an
    /// object that could not be decoded keeps its last readable value, an `Apply` of one `same`
    /// finds equal to what is kept is stored without counting as a change (a status write of
    /// ours coming back), a `Delete` removes it.
    pub(crate) fn fold<K: kube::Resource>(
        &mut self,
        map: &mut std::collections::BTreeMap<String, V>,
        ev: watcher::Event<Tolerant<K>>,
        read: impl Fn(K) -> V,
        same: impl Fn(&V, &V) -> bool,
    ) -> Folded {
        let ev = match self.step(ev, &read, |key| map.get(key).cloned()) {
            Step::Listing => return Folded::Listing,
            Step::Listed(listed) => {
                if let Some(b) = listed {
                    *map = b;
                }
                return Folded::Listed;
            }
            Step::Event(ev) => ev,
        };
        let changed = match ev {
            watcher::Event::Apply(Tolerant::Ok(k)) => {
                let key = name_of(&k);
                let new = read(k);
                let same = map.get(&key).is_some_and(|old| same(old, &new));
                map.insert(key, new);
                !same
            }
            watcher::Event::Apply(Tolerant::Bad { .. }) => false,
            watcher::Event::Delete(k) => map.remove(&name_of(&k)).is_some(),
            // Handed to the re-list above.
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => false,
        };
        Folded::Event { changed }
    }
}
