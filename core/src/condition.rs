//! A condition's status values (`metav1.ConditionStatus`, `core/v1` `ConditionStatus`), as the
//! API writes them, and the conditions of our own resources' status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// A condition of one of our resources' status (TolerationRule, EvictionPolicy) for
/// `generation`: `True` when `ok`; its `lastTransitionTime` kept from `previous` while its status
/// is unchanged, else `now`.
pub fn of_status(
    previous: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    let status = if ok { TRUE } else { FALSE };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}
