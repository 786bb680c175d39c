//! Taints and tolerations, decided exactly as Kubernetes decides them (docs/spec.md §1, §2).
//!
//! PURE: no I/O and no clock. Time enters as arguments (`timeAdded`, observation times).
//!
//! The rules, in upstream's order (`staging/src/k8s.io/api/core/v1/toleration.go`):
//! a toleration tolerates a taint when its effect is empty or equal, its key is empty or equal,
//! and its operator holds (`Equal`/empty: string equality of values; `Exists`: always;
//! `Lt`/`Gt`: canonical int64 comparison, only when enabled). For each NoExecute taint the
//! *first* tolerating toleration in pod-spec order decides the timing.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1 as core;

/// Well-known taint keys (all current keys live under `node.kubernetes.io/`).
pub mod keys {
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
    pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
    pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
    pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
    pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
    /// Set by the kubelet, removed by the cloud controller manager: never ours to touch.
    pub const CLOUD_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

    /// Keys from Kubernetes 1.6-1.8 that nothing sets any more, with their current name where one
    /// exists. A toleration naming one of them protects nothing.
    pub const LEGACY: &[(&str, Option<&str>)] = &[
        ("node.alpha.kubernetes.io/notReady", Some(NOT_READY)),
        ("node.alpha.kubernetes.io/unreachable", Some(UNREACHABLE)),
        ("node.kubernetes.io/outOfDisk", None),
        ("node.kubernetes.io/memoryPressure", Some(MEMORY_PRESSURE)),
        ("node.kubernetes.io/diskPressure", Some(DISK_PRESSURE)),
        ("node.kubernetes.io/networkUnavailable", Some(NETWORK_UNAVAILABLE)),
    ];

    /// The current replacement of a legacy key: `Some(None)` for a legacy key with no successor,
    /// `None` when `key` is not a legacy key.
    pub fn legacy_replacement(key: &str) -> Option<Option<&'static str>> {
        LEGACY.iter().find(|(old, _)| *old == key).map(|(_, new)| *new)
    }
}

/// A taint or toleration effect. Unknown strings are kept verbatim so that odd objects (from an
/// older or misbehaving API server) are compared exactly as upstream compares strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
    Other(Box<str>),
}

impl Effect {
    pub fn parse(s: &str) -> Self {
        match s {
            "NoSchedule" => Self::NoSchedule,
            "PreferNoSchedule" => Self::PreferNoSchedule,
            "NoExecute" => Self::NoExecute,
            other => Self::Other(other.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node taint. A missing value is the empty string, as in upstream's Go structs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
    pub time_added: Option<Timestamp>,
}

impl Taint {
    pub fn new(key: impl Into<String>, effect: Effect) -> Self {
        Self { key: key.into(), value: String::new(), effect, time_added: None }
    }

    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }

    pub fn added_at(mut self, at: Timestamp) -> Self {
        self.time_added = Some(at);
        self
    }
}

impl From<&core::Taint> for Taint {
    fn from(t: &core::Taint) -> Self {
        Self {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: Effect::parse(&t.effect),
            time_added: t.time_added.as_ref().map(|t| t.0),
        }
    }
}

impl From<&Taint> for core::Taint {
    fn from(t: &Taint) -> Self {
        Self {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.as_str().to_owned(),
            time_added: t.time_added.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// A toleration operator; the empty string means `Equal`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Equal,
    Exists,
    Lt,
    Gt,
    Unknown(Box<str>),
}

impl Operator {
    pub fn parse(s: &str) -> Self {
        match s {
            "" | "Equal" => Self::Equal,
            "Exists" => Self::Exists,
            "Lt" => Self::Lt,
            "Gt" => Self::Gt,
            other => Self::Unknown(other.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Equal => "Equal",
            Self::Exists => "Exists",
            Self::Lt => "Lt",
            Self::Gt => "Gt",
            Self::Unknown(s) => s,
        }
    }
}

/// A pod toleration. `effect: None` is the empty effect (matches every effect).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    pub key: String,
    pub operator: Operator,
    pub value: String,
    pub effect: Option<Effect>,
    pub toleration_seconds: Option<i64>,
}

impl From<&core::Toleration> for Toleration {
    fn from(t: &core::Toleration) -> Self {
        Self {
            key: t.key.clone().unwrap_or_default(),
            operator: Operator::parse(t.operator.as_deref().unwrap_or_default()),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.as_deref().filter(|e| !e.is_empty()).map(Effect::parse),
            toleration_seconds: t.toleration_seconds,
        }
    }
}

impl fmt::Display for Toleration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() { "*" } else { &self.key };
        match &self.operator {
            Operator::Exists => write!(f, "{key} Exists")?,
            op => write!(f, "{key} {} {:?}", op.as_str(), self.value)?,
        }
        write!(f, " :{}", self.effect.as_ref().map_or("*", Effect::as_str))?;
        if let Some(s) = self.toleration_seconds {
            write!(f, " for {s}s")?;
        }
        Ok(())
    }
}

/// Switches that change matching. `comparison_operators` enables `Lt`/`Gt` (upstream's feature
/// gate `TaintTolerationComparisonOperators`, off by default). With `infer_from_pod`, a pod that
/// carries an `Lt`/`Gt` toleration has it honoured: the API server admitted it, so the gate is
/// on in the cluster, and evicting for a toleration the API server admitted would be wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchOptions {
    pub comparison_operators: bool,
    pub infer_from_pod: bool,
}

/// `--enable-comparison-operators`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ComparisonOperators {
    /// Honour `Lt`/`Gt` on the pods that carry them (the API server admitted them, so its
    /// TaintTolerationComparisonOperators gate is on).
    #[default]
    Auto,
    /// Always honour them.
    True,
    /// Never (a toleration with them tolerates nothing, as with the gate off).
    False,
}

impl ComparisonOperators {
    pub fn options(self) -> MatchOptions {
        match self {
            Self::Auto => MatchOptions::AUTO,
            Self::True => MatchOptions::on(),
            Self::False => MatchOptions::default(),
        }
    }
}

impl MatchOptions {
    /// `--enable-comparison-operators=auto`: honoured where a pod carries them.
    pub const AUTO: Self = Self { comparison_operators: false, infer_from_pod: true };

    pub fn on() -> Self {
        Self { comparison_operators: true, infer_from_pod: false }
    }

    /// The options that apply to a pod with `tolerations`.
    pub fn for_tolerations(self, tolerations: &[Toleration]) -> Self {
        if self.infer_from_pod && !self.comparison_operators && tolerations.iter().any(Toleration::compares) {
            Self { comparison_operators: true, ..self }
        } else {
            self
        }
    }
}

/// Parses a canonical decimal int64: `0`, or an optional `-` followed by a digit 1-9 and more
/// digits; no `+`, no leading zeros, no `-0`, no spaces, and within range. Anything else is
/// `None`, which makes `Lt`/`Gt` never match.
pub fn parse_canonical_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let first = *digits.as_bytes().first()?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // "0" is the only canonical spelling of zero; "-0", "00", "007" are not canonical.
    if first == b'0' && (digits.len() > 1 || digits.len() != s.len()) {
        return None;
    }
    s.parse().ok()
}

impl Toleration {
    /// An `Lt` or `Gt` toleration.
    pub fn compares(&self) -> bool {
        matches!(self.operator, Operator::Lt | Operator::Gt)
    }

    /// Whether this toleration tolerates `taint`. `timeAdded` plays no part.
    pub fn tolerates(&self, taint: &Taint, opts: MatchOptions) -> bool {
        if self.effect.as_ref().is_some_and(|e| *e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            Operator::Equal => self.value == taint.value,
            Operator::Exists => true,
            Operator::Lt | Operator::Gt if opts.comparison_operators => {
                match (parse_canonical_i64(&taint.value), parse_canonical_i64(&self.value)) {
                    (Some(taint_v), Some(tol_v)) => {
                        if self.operator == Operator::Lt {
                            taint_v < tol_v
                        } else {
                            taint_v > tol_v
                        }
                    }
                    _ => false,
                }
            }
            Operator::Lt | Operator::Gt | Operator::Unknown(_) => false,
        }
    }
}

/// The index of the first toleration (pod-spec order) that tolerates `taint`.
pub fn first_tolerating(tolerations: &[Toleration], taint: &Taint, opts: MatchOptions) -> Option<usize> {
    let opts = opts.for_tolerations(tolerations);
    tolerations.iter().position(|t| t.tolerates(taint, opts))
}

/// Adds whole seconds to a timestamp without ever overflowing: beyond the representable range
/// the result saturates ("far future" / "far past").
pub fn add_seconds(at: Timestamp, seconds: i64) -> Timestamp {
    crate::time::shift(at, SignedDuration::from_secs(seconds))
}

/// Where a taint's countdown starts: its `timeAdded`, or when we first observed it if it has
/// none; a `timeAdded` in the future (clock skew) is clamped to the observation time.
pub fn anchor(time_added: Option<Timestamp>, first_observed: Timestamp) -> Timestamp {
    match time_added {
        Some(t) if t <= first_observed => t,
        _ => first_observed,
    }
}

/// A taint's identity on a node: taints are unique by (key, effect); the value is not part of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaintId {
    pub key: String,
    pub effect: Effect,
}

impl TaintId {
    pub fn new(key: impl Into<String>, effect: Effect) -> Self {
        Self { key: key.into(), effect }
    }
}

/// What names a taint: a taint, a [`TaintId`], a rule's taint ([`crate::rules::TaintRule`]).
/// Taints are unique on a node by key and effect; the value (and `timeAdded`) is not part of the
/// identity.
pub trait TaintIdentity {
    /// The key and the effect.
    fn identity(&self) -> (&str, &Effect);

    /// Upstream's `MatchTaint`: the same key and effect. The one test of taint identity.
    fn match_taint(&self, other: &impl TaintIdentity) -> bool {
        self.identity() == other.identity()
    }

    /// The identity as a value.
    fn id(&self) -> TaintId {
        let (key, effect) = self.identity();
        TaintId::new(key, effect.clone())
    }
}

impl TaintIdentity for Taint {
    fn identity(&self) -> (&str, &Effect) {
        (&self.key, &self.effect)
    }
}

impl TaintIdentity for TaintId {
    fn identity(&self) -> (&str, &Effect) {
        (&self.key, &self.effect)
    }
}

impl fmt::Display for TaintId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.effect)
    }
}

/// A taint a controller adds. `inherit` names a taint removed in the same change whose
/// `timeAdded` the new one keeps: the not-ready <-> unreachable swap, where `timeAdded` means
/// "not Ready since" and must not restart every pending eviction's countdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintAdd {
    pub id: TaintId,
    pub inherit: Option<TaintId>,
    /// The taint's value (empty for every rule's taint).
    pub value: String,
}

impl TaintAdd {
    pub fn new(id: TaintId) -> Self {
        Self { id, inherit: None, value: String::new() }
    }
}

/// Applies a controller's taint change to a node's live taint list: removes `remove` (by key and
/// effect) and appends each of `add` that is absent (by key and effect), with `timeAdded` =
/// `now`, or the `timeAdded` of the taint it inherits from when that one is on the live list. An
/// existing taint is never replaced, so its `timeAdded` -- the anchor of every pending eviction
/// -- survives. Taints of other owners are untouched and keep their order. `None` when nothing
/// changes.
pub fn apply_changes(current: &[Taint], add: &[TaintAdd], remove: &[TaintId], now: Timestamp) -> Option<Vec<Taint>> {
    let mut next: Vec<Taint> = current.iter().filter(|t| !remove.iter().any(|r| r.match_taint(*t))).cloned().collect();
    for a in add {
        if !next.iter().any(|t| a.id.match_taint(t)) {
            let inherited =
                a.inherit.as_ref().and_then(|i| current.iter().find(|t| i.match_taint(*t))).and_then(|t| t.time_added);
            next.push(Taint {
                key: a.id.key.clone(),
                value: a.value.clone(),
                effect: a.id.effect.clone(),
                time_added: Some(inherited.unwrap_or(now)),
            });
        }
    }
    (next != current).then_some(next)
}

/// Where a pod's countdown for one taint starts: the later of the taint's anchor (see
/// [`anchor`]) and the moment the pod was bound to the node, so that a pod arriving on an
/// already tainted node gets its whole `tolerationSeconds` (as upstream gives it) instead of
/// being deleted on arrival.
pub fn pod_anchor(taint_anchor: Timestamp, bound: Option<Timestamp>) -> Timestamp {
    bound.map_or(taint_anchor, |b| b.max(taint_anchor))
}

/// Why a pod must go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictNowCause {
    /// The NoExecute taint at this index (node order) is tolerated by nothing.
    Untolerated { taint: usize },
    /// The toleration used for this taint has `tolerationSeconds <= 0`.
    NonPositiveSeconds { taint: usize, toleration: usize },
}

/// What the NoExecute taints of a node mean for one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The node has no NoExecute taint.
    NoTaints,
    /// Every NoExecute taint is tolerated by a toleration without `tolerationSeconds`.
    Never,
    /// Evict at once.
    EvictNow(EvictNowCause),
    /// Evict when time runs out. `seconds` is the smallest positive `tolerationSeconds` among the
    /// used tolerations; `deadline` the earliest `anchor + seconds` over the NoExecute taints, or
    /// `None` when an anchor was not known.
    EvictAt { seconds: i64, deadline: Option<Timestamp> },
}

/// When one NoExecute taint makes a pod due: **the** rule (docs/spec.md §1), the only place it
/// is written. The controller ([`crate::eviction`]), `status` and `explain` all decide through
/// it, so that they cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaintDue {
    /// No toleration tolerates it: due at once.
    Untolerated,
    /// The pod's tolerations were cut short ([`crate::index::KEPT_TOLERATION_BYTES`]) and none of
    /// the kept ones tolerates it: whether a later one does is not known, so it never makes
    /// the pod due (never a wrongful eviction).
    Unknown,
    /// Tolerated by `toleration` with `tolerationSeconds <= 0`: due at once.
    NonPositive { toleration: usize },
    /// Tolerated by `toleration` without `tolerationSeconds`: never.
    Forever { toleration: usize },
    /// Tolerated by `toleration` for `seconds > 0`: due at `max(anchor, bound) + seconds`
    /// (`None` when the anchor is not known), where `from_bound` says the pod's binding was the
    /// later of the two.
    After { toleration: usize, seconds: i64, at: Option<Timestamp>, from_bound: bool },
}

impl TaintDue {
    /// Due at once.
    pub fn now(self) -> bool {
        matches!(self, Self::Untolerated | Self::NonPositive { .. })
    }

    /// The toleration (its index in the list) that decides it, if one does.
    pub fn toleration(self) -> Option<usize> {
        match self {
            Self::Untolerated | Self::Unknown => None,
            Self::NonPositive { toleration } | Self::Forever { toleration } | Self::After { toleration, .. } => {
                Some(toleration)
            }
        }
    }

    /// The `tolerationSeconds` that decides it, if any.
    pub fn seconds(self) -> Option<i64> {
        match self {
            Self::NonPositive { .. } | Self::Untolerated | Self::Unknown | Self::Forever { .. } => None,
            Self::After { seconds, .. } => Some(seconds),
        }
    }
}

/// The rule: the first toleration (pod-spec order) that tolerates `taint` decides. `anchor` is
/// when the taint's countdown started (see [`anchor`]), `bound` when the pod was bound to the
/// node; `truncated`: `tolerations` is only the first part of the pod's list.
pub fn taint_due(
    taint: &Taint,
    tolerations: &[Toleration],
    opts: MatchOptions,
    anchor: Option<Timestamp>,
    bound: Option<Timestamp>,
    truncated: bool,
) -> TaintDue {
    let Some(j) = first_tolerating(tolerations, taint, opts) else {
        return if truncated { TaintDue::Unknown } else { TaintDue::Untolerated };
    };
    match tolerations[j].toleration_seconds {
        None => TaintDue::Forever { toleration: j },
        Some(s) if s <= 0 => TaintDue::NonPositive { toleration: j },
        Some(seconds) => {
            let from_bound = matches!((anchor, bound), (Some(a), Some(b)) if b > a);
            let at = anchor.map(|a| add_seconds(pod_anchor(a, bound), seconds));
            TaintDue::After { toleration: j, seconds, at, from_bound }
        }
    }
}

/// Decides the eviction outcome of a pod with `tolerations` on a node with `taints`, through
/// [`taint_due`] for each NoExecute taint.
///
/// `anchor_of(i, taint)` gives the moment taint `i`'s countdown started (see [`anchor`]); it is
/// only called for taints whose used toleration has positive seconds. No allocation.
pub fn evaluate<F>(taints: &[Taint], tolerations: &[Toleration], opts: MatchOptions, mut anchor_of: F) -> Outcome
where
    F: FnMut(usize, &Taint) -> Option<Timestamp>,
{
    let mut any = false;
    let mut min_seconds: Option<i64> = None;
    // The earliest deadline and the seconds of the toleration that sets it.
    let mut deadline: Option<(Timestamp, i64)> = None;
    let mut deadline_known = true;
    for (i, taint) in taints.iter().enumerate() {
        if taint.effect != Effect::NoExecute {
            continue;
        }
        any = true;
        // The anchor is only asked for when the seconds are positive.
        let anchor = match first_tolerating(tolerations, taint, opts).and_then(|j| tolerations[j].toleration_seconds) {
            Some(s) if s > 0 => anchor_of(i, taint),
            _ => None,
        };
        match taint_due(taint, tolerations, opts, anchor, None, false) {
            TaintDue::Untolerated | TaintDue::Unknown => {
                return Outcome::EvictNow(EvictNowCause::Untolerated { taint: i });
            }
            TaintDue::NonPositive { toleration } => {
                return Outcome::EvictNow(EvictNowCause::NonPositiveSeconds { taint: i, toleration });
            }
            TaintDue::Forever { .. } => {}
            TaintDue::After { seconds, at, .. } => {
                min_seconds = Some(min_seconds.map_or(seconds, |m| m.min(seconds)));
                match at {
                    Some(d) => {
                        if deadline.is_none_or(|cur| (d, seconds) < cur) {
                            deadline = Some((d, seconds));
                        }
                    }
                    None => deadline_known = false,
                }
            }
        }
    }
    match (any, min_seconds) {
        (false, _) => Outcome::NoTaints,
        (true, None) => Outcome::Never,
        // With every deadline known, the seconds of the taint that goes first; otherwise (a
        // deadline that cannot be placed) the fewest seconds, as upstream's minimum.
        (true, Some(min)) => match deadline.filter(|_| deadline_known) {
            Some((at, seconds)) => Outcome::EvictAt { seconds, deadline: Some(at) },
            None => Outcome::EvictAt { seconds: min, deadline: None },
        },
    }
}

/// The scheduler's view, for explanations (the scheduler enforces it, not us).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Scheduling {
    Allowed,
    PreferAvoid,
    Forbidden,
}

/// `Forbidden` if a NoSchedule or NoExecute taint is untolerated, else `PreferAvoid` if a
/// PreferNoSchedule taint is untolerated, else `Allowed`. Taints with unknown effects are
/// ignored, as the scheduler ignores them.
pub fn scheduling(taints: &[Taint], tolerations: &[Toleration], opts: MatchOptions) -> Scheduling {
    let opts = opts.for_tolerations(tolerations);
    let untolerated = |effect: &Effect| {
        taints.iter().filter(|t| t.effect == *effect).any(|t| first_tolerating(tolerations, t, opts).is_none())
    };
    if untolerated(&Effect::NoSchedule) || untolerated(&Effect::NoExecute) {
        Scheduling::Forbidden
    } else if untolerated(&Effect::PreferNoSchedule) {
        Scheduling::PreferAvoid
    } else {
        Scheduling::Allowed
    }
}

/// Human-readable problems with a pod's tolerations and a node's taints: things that are legal
/// to write (or were, on an older server) but almost certainly do not do what their author meant.
pub fn warnings(taints: &[Taint], tolerations: &[Toleration], opts: MatchOptions) -> Vec<String> {
    let opts = opts.for_tolerations(tolerations);
    let mut out = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        match keys::legacy_replacement(&t.key) {
            Some(Some(new)) => out.push(format!(
                "toleration {i} uses the legacy key {} which nothing sets any more, so it protects nothing; the current key is {new}",
                t.key
            )),
            Some(None) => out.push(format!(
                "toleration {i} uses the legacy key {} which nothing sets any more, so it protects nothing",
                t.key
            )),
            None => {}
        }
        match &t.operator {
            Operator::Lt | Operator::Gt if !opts.comparison_operators => out.push(format!(
                "toleration {i} uses operator {} which matches nothing unless comparison operators are enabled (--enable-comparison-operators)",
                t.operator.as_str()
            )),
            Operator::Lt | Operator::Gt if parse_canonical_i64(&t.value).is_none() => out.push(format!(
                "toleration {i} compares with {:?}, which is not a canonical integer, so it matches nothing",
                t.value
            )),
            Operator::Unknown(op) => out.push(format!("toleration {i} has unknown operator {op:?}, which matches nothing")),
            Operator::Exists if !t.value.is_empty() => out.push(format!(
                "toleration {i} uses Exists with a value ({:?}); the API server rejects this and the value is ignored",
                t.value
            )),
            _ => {}
        }
        if t.key.is_empty() && t.operator != Operator::Exists {
            out.push(format!(
                "toleration {i} has an empty key but operator {}; an empty key requires Exists",
                t.operator.as_str()
            ));
        }
        if let Some(s) = t.toleration_seconds {
            if t.effect.as_ref().is_some_and(|e| *e != Effect::NoExecute) {
                out.push(format!(
                    "toleration {i} sets tolerationSeconds but its effect is not NoExecute, so the seconds are ignored"
                ));
            } else if s <= 0 {
                out.push(format!("toleration {i} has tolerationSeconds {s} (<= 0): the pod is evicted at once"));
            }
        }
        if let Some(Effect::Other(e)) = &t.effect {
            out.push(format!("toleration {i} has unknown effect {e:?}"));
        }
    }
    for (i, t) in taints.iter().enumerate() {
        if let Effect::Other(e) = &t.effect {
            out.push(format!("taint {i} ({}) has unknown effect {e:?}; nothing enforces it", t.key));
        }
        if taints[..i].iter().any(|earlier| earlier.match_taint(t)) {
            out.push(format!("taint {i} ({t}) repeats an earlier taint's key and effect; the API server rejects this"));
        }
        if t.effect == Effect::NoExecute && t.time_added.is_none() {
            out.push(format!(
                "taint {i} ({t}) has no timeAdded: a controller anchors its countdown on the moment it first sees it"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
