//! What every decision of both controllers is made in: the cache, the time, and the eviction
//! gate, node lifecycle's judgement of the taints it manages. Its own module because both
//! controllers take it: node lifecycle implements the [`Gate`], taint eviction asks it.

use jiff::Timestamp;

use crate::index::{Index, SlimNode};
use crate::policy::Policies;
use crate::taints::Taint;

/// Whether an eviction caused by `taint` on `node` may be carried out now. Node lifecycle
/// implements it for the taints it manages; [`Ungated`] stands behind every taint (node
/// lifecycle does not run in this process, so another controller owns those taints).
pub trait Gate {
    fn confirmed(&self, node: &SlimNode, taint: &Taint, now: Timestamp) -> bool;
}

pub struct Ungated;

impl Gate for Ungated {
    fn confirmed(&self, _: &SlimNode, _: &Taint, _: Timestamp) -> bool {
        true
    }
}

/// What every decision of both controllers needs: the cache, the time, and the gate. Only taint
/// eviction asks the gate; node lifecycle stands behind it (it is the [`Gate`] that judges its
/// own taints), so it is handed an ungated context ([`Ctx::new`]).
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub index: &'a Index,
    pub now: Timestamp,
    pub gate: &'a dyn Gate,
    /// The eviction policies in force ([`crate::policy`]).
    pub policies: &'a Policies,
}

impl<'a> Ctx<'a> {
    /// [`Ungated`]: every taint counts.
    pub fn new(index: &'a Index, now: Timestamp) -> Self {
        Self { index, now, gate: &Ungated, policies: &crate::policy::NONE }
    }

    /// The same, with evictions gated on `gate`.
    pub fn gated(self, gate: &'a dyn Gate) -> Self {
        Self { gate, ..self }
    }

    /// The same, with `policies` in force.
    pub fn with_policies(self, policies: &'a Policies) -> Self {
        Self { policies, ..self }
    }
}
