//! A condition's status values (`metav1.ConditionStatus`, `core/v1` `ConditionStatus`), as the
//! API writes them.

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";
