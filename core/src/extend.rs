//! The incident lever (docs/spec.md §17): every eviction countdown on a node lengthened by a
//! while, until the lever expires by itself. PURE.
//!
//! During an incident that is not the nodes' fault (a flaky top-of-rack switch, a degrading
//! zone), an operator lengthens the pending and future deadlines of the nodes concerned
//! (`kubectl nlc extend`) instead of editing pods or pausing everything. The lever is two labels
//! on each node, under a prefix the NodeRestriction admission plugin forbids kubelets to set (a
//! node cannot extend its own pods' deadlines): [`EXTEND_BY_LABEL`] (seconds) and
//! [`EXTEND_UNTIL_LABEL`] (Unix seconds). [`EXTENSION_ANNOTATION`] beside them says who, why and
//! when, for people (`status`, the node's event).
//!
//! The rule ([`Extension::apply`]): a deadline that falls before `until` is moved `by` later;
//! one at or after `until` is left. It never shortens a deadline, and its expiry moves none back
//! (a deadline it moved stays moved), so the lever's end is not a mass eviction. An untolerated
//! taint's "at once" counts from when the taint was added. The pause and the hold still hold
//! what is due.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

/// On a node: seconds to add to each eviction deadline before [`EXTEND_UNTIL_LABEL`].
pub const EXTEND_BY_LABEL: &str = "node-restriction.kubernetes.io/node-lifecycle-controller-extend-by";
/// On a node: until when (Unix seconds) deadlines are moved.
pub const EXTEND_UNTIL_LABEL: &str = "node-restriction.kubernetes.io/node-lifecycle-controller-extend-until";
/// Beside them: who, why and when (JSON), written by `kubectl nlc extend`.
pub const EXTENSION_ANNOTATION: &str = "node-lifecycle-controller.io/extension";
/// The longest a lever may add: a week.
pub const MAX_BY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Who set a node's lever and why, as [`EXTENSION_ANNOTATION`] records it (`None`: no
/// annotation, or one that does not read).
pub fn record(annotations: Option<&BTreeMap<String, String>>) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(annotations?.get(EXTENSION_ANNOTATION)?).ok()?;
    let text = |k: &str| v.get(k).and_then(serde_json::Value::as_str).map(str::to_owned);
    Some((text("by")?, text("reason").unwrap_or_default()))
}

/// A node's lever, read from its labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extension {
    pub by: Duration,
    pub until: Timestamp,
}

/// What a node's labels say of the lever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lever {
    None,
    On(Extension),
    /// The labels are there but do not read (a value that is not a whole number, `by` out of
    /// 1 s..=[`MAX_BY`]): ignored, and reported.
    Invalid,
}

impl Lever {
    pub fn from_labels(labels: Option<&BTreeMap<String, String>>) -> Self {
        let by = labels.and_then(|l| l.get(EXTEND_BY_LABEL));
        let until = labels.and_then(|l| l.get(EXTEND_UNTIL_LABEL));
        let (by, until) = match (by, until) {
            (None, None) => return Self::None,
            (Some(by), Some(until)) => (by, until),
            _ => return Self::Invalid,
        };
        let by = by.parse::<u64>().ok().filter(|s| *s >= 1).map(Duration::from_secs).filter(|d| *d <= MAX_BY);
        let until = until.parse::<i64>().ok().and_then(|s| Timestamp::from_second(s).ok());
        match (by, until) {
            (Some(by), Some(until)) => Self::On(Extension { by, until }),
            _ => Self::Invalid,
        }
    }

    pub fn extension(self) -> Option<Extension> {
        match self {
            Self::On(e) => Some(e),
            _ => None,
        }
    }
}

impl Extension {
    /// `deadline` with the lever: `by` later if it falls before `until`.
    pub fn apply(self, deadline: Timestamp) -> Timestamp {
        if deadline < self.until { crate::time::after(deadline, self.by) } else { deadline }
    }

    /// Whether it is still in force at `now`.
    pub fn in_force(self, now: Timestamp) -> bool {
        now < self.until
    }

    /// A pod's deadline with the lever, from each NoExecute taint's anchor (`timeAdded`, or
    /// when it was first seen) and what the taint means for the pod ([`crate::taints::taint_due`]):
    /// the earliest of the taints' deadlines, each moved by [`Extension::apply`], "at once"
    /// counting from the anchor. `None`: no taint makes the pod due.
    pub fn deadline(self, dues: impl IntoIterator<Item = (Timestamp, crate::taints::TaintDue)>) -> Option<Timestamp> {
        use crate::taints::TaintDue;
        dues.into_iter()
            .filter_map(|(anchor, due)| match due {
                TaintDue::Untolerated | TaintDue::NonPositive { .. } => Some(self.apply(anchor)),
                TaintDue::After { at, .. } => at.map(|at| self.apply(at)),
                TaintDue::Unknown | TaintDue::Forever { .. } => None,
            })
            .min()
    }

    /// In words, for `explain` and `status`.
    pub fn describe(self, now: Timestamp) -> String {
        let until = self.until.strftime("%Y-%m-%dT%H:%M:%SZ");
        let state = if self.in_force(now) { "in force" } else { "expired; deadlines it moved stay moved" };
        format!("eviction deadlines before {until} moved {}s later ({state})", self.by.as_secs())
    }

    /// The labels that set it.
    pub fn labels(self) -> [(&'static str, String); 2] {
        [(EXTEND_BY_LABEL, self.by.as_secs().to_string()), (EXTEND_UNTIL_LABEL, self.until.as_second().to_string())]
    }

    /// Whether `asked`, put in place of this lever, would shorten it: a smaller `by`, or an
    /// earlier `until` (docs/spec.md §17, "A second extend"). Either brings deadlines forward: a
    /// smaller `by` every one it moves, an earlier end those between the two ends. A lever that
    /// has expired counts too: the deadlines it moved stay moved only while its labels say so.
    pub fn shortened_by(self, asked: Extension) -> bool {
        asked.by < self.by || asked.until < self.until
    }
}

/// A node whose lever a second `extend` would shorten: its name, its lever, and who set it and
/// why ([`record`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortened {
    pub node: String,
    pub lever: Extension,
    pub record: Option<(String, String)>,
}

/// `n` pending evictions, in words.
pub fn evictions(n: usize) -> String {
    match n {
        0 => "no pending eviction".to_owned(),
        1 => "1 pending eviction".to_owned(),
        n => format!("{n} pending evictions"),
    }
}

/// Why `extend` refuses `asked` without `--replace`: the levers it would shorten (what is in
/// force, and who set it and why, escaped: a tenant's text must not forge output), what was
/// asked, and how many pending evictions it would bring forward (`brought_forward`, counted as
/// `whatif` counts them).
pub fn refusal(shortened: &[Shortened], asked: Extension, brought_forward: usize, now: Timestamp) -> String {
    let levers: Vec<String> = shortened
        .iter()
        .map(|s| {
            let by = match &s.record {
                Some((who, why)) => {
                    format!(", set by {}: {}", crate::text::escape_control(who), crate::text::escape_control(why))
                }
                None => String::new(),
            };
            format!("node {}: {}{by}", s.node, s.lever.describe(now))
        })
        .collect();
    let until = asked.until.strftime("%Y-%m-%dT%H:%M:%SZ");
    format!(
        "would shorten the lever on {} node(s) ({}); asked: eviction deadlines before {until} moved {}s later. That brings {} forward (as whatif counts them). Give --replace to replace it all the same, or a --by and an end (--for) at least as long",
        shortened.len(),
        levers.join("; "),
        asked.by.as_secs(),
        evictions(brought_forward),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(by: &str, until: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(EXTEND_BY_LABEL.to_owned(), by.to_owned()), (EXTEND_UNTIL_LABEL.to_owned(), until.to_owned())])
    }

    #[test]
    fn the_labels_read_or_are_reported_invalid() {
        assert_eq!(Lever::from_labels(None), Lever::None);
        let on = Lever::from_labels(Some(&labels("1800", "1800000000")));
        let until = Timestamp::from_second(1_800_000_000).expect("t");
        assert_eq!(on, Lever::On(Extension { by: Duration::from_secs(1800), until }));
        for (by, until) in
            [("-5", "1800000000"), ("0", "1800000000"), ("30m", "1800000000"), ("604801", "1"), ("60", "soon")]
        {
            assert_eq!(Lever::from_labels(Some(&labels(by, until))), Lever::Invalid, "{by} {until}");
        }
        let half = BTreeMap::from([(EXTEND_BY_LABEL.to_owned(), "60".to_owned())]);
        assert_eq!(Lever::from_labels(Some(&half)), Lever::Invalid);
        let e = Extension { by: Duration::from_secs(1800), until };
        assert_eq!(Lever::from_labels(Some(&e.labels().into_iter().map(|(k, v)| (k.to_owned(), v)).collect())), on);
    }

    #[test]
    fn the_record_says_who_and_why() {
        let a =
            BTreeMap::from([(EXTENSION_ANNOTATION.to_owned(), r#"{"by":"alice","reason":"ToR switch"}"#.to_owned())]);
        assert_eq!(record(Some(&a)), Some(("alice".to_owned(), "ToR switch".to_owned())));
        let bad = BTreeMap::from([(EXTENSION_ANNOTATION.to_owned(), "alice".to_owned())]);
        assert_eq!(record(Some(&bad)), None);
        assert_eq!(record(None), None);
    }

    #[test]
    fn a_smaller_by_or_an_earlier_end_shortens_a_lever() {
        let at = |s: i64| Timestamp::from_second(s).expect("t");
        let lever = |by: u64, until: i64| Extension { by: Duration::from_secs(by), until: at(until) };
        let on = lever(3600, 10_000);
        for (asked, shortens) in [
            (lever(3600, 10_000), false),
            (lever(7200, 20_000), false),
            (lever(3601, 10_000), false),
            (lever(10, 20_000), true),
            (lever(3599, 10_000), true),
            (lever(7200, 9_999), true),
            (lever(10, 100), true),
        ] {
            assert_eq!(on.shortened_by(asked), shortens, "{asked:?}");
        }
    }

    #[test]
    fn the_refusal_says_what_is_in_force_what_was_asked_and_what_it_brings_forward() {
        let at = |s: i64| Timestamp::from_second(s).expect("t");
        let on = Extension { by: Duration::from_secs(3600), until: at(1_800_007_200) };
        let asked = Extension { by: Duration::from_secs(10), until: at(1_800_003_600) };
        let shortened = [Shortened {
            node: "n1".into(),
            lever: on,
            record: Some(("alice".into(), "INC-1\u{1b}[2J\nnode n1: ok".into())),
        }];
        assert_eq!(
            refusal(&shortened, asked, 1, at(1_800_000_000)),
            "would shorten the lever on 1 node(s) (node n1: eviction deadlines before 2027-01-15T10:00:00Z moved 3600s later (in force), set by alice: INC-1\\x1b[2J\\nnode n1: ok); asked: eviction deadlines before 2027-01-15T09:00:00Z moved 10s later. That brings 1 pending eviction forward (as whatif counts them). Give --replace to replace it all the same, or a --by and an end (--for) at least as long"
        );
        assert_eq!([evictions(0), evictions(2)], ["no pending eviction", "2 pending evictions"]);
    }

    #[test]
    fn a_deadline_before_the_end_moves_by_the_whole_while_and_none_moves_back() {
        let until = Timestamp::from_second(1000).expect("t");
        let e = Extension { by: Duration::from_secs(1800), until };
        let at = |s: i64| Timestamp::from_second(s).expect("t");
        assert_eq!(e.apply(at(999)), at(2799));
        assert_eq!(e.apply(at(1000)), at(1000), "at or after the end: left");
        assert!((0..3000).step_by(7).all(|s| e.apply(at(s)) >= at(s)), "never shortens");
        assert!(e.in_force(at(999)) && !e.in_force(at(1000)));
    }
}
