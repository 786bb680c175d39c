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
    /// Whether a re-list is under way.
    /// The list under way failed: what it had gathered is dropped (the watch lists again from
    /// the start).
    pub(crate) fn abort(&mut self) {
        self.building = None;
    }

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
