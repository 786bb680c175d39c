use super::*;

fn rfc3339(s: &str) -> Timestamp {
    s.parse().expect("test timestamp")
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint { key: key.into(), value: value.into(), effect: Effect::parse(effect), time_added: None }
}

fn tol(key: &str, op: &str, value: &str, effect: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: Operator::parse(op),
        value: value.into(),
        effect: (!effect.is_empty()).then(|| Effect::parse(effect)),
        toleration_seconds: seconds,
    }
}

const ON: MatchOptions = MatchOptions { comparison_operators: true, infer_from_pod: false };
const OFF: MatchOptions = MatchOptions { comparison_operators: false, infer_from_pod: false };

#[test]
fn matching_table() {
    let t = taint("k", "v", "NoExecute");
    #[rustfmt::skip]
    let cases: &[(&str, Toleration, &Taint, MatchOptions, bool)] = &[
        ("equal key value effect", tol("k", "Equal", "v", "NoExecute", None), &t, OFF, true),
        ("empty operator is Equal", tol("k", "", "v", "NoExecute", None), &t, OFF, true),
        ("value differs", tol("k", "Equal", "w", "NoExecute", None), &t, OFF, false),
        ("empty value matches only empty value", tol("k", "Equal", "", "NoExecute", None), &t, OFF, false),
        ("key differs", tol("other", "Exists", "", "", None), &t, OFF, false),
        ("effect differs", tol("k", "Exists", "", "NoSchedule", None), &t, OFF, false),
        ("empty effect matches any effect", tol("k", "Exists", "", "", None), &t, OFF, true),
        ("empty key Exists tolerates everything", tol("", "Exists", "", "", None), &t, OFF, true),
        ("empty key Exists with effect", tol("", "Exists", "", "NoExecute", None), &t, OFF, true),
        ("empty key Exists wrong effect", tol("", "Exists", "", "NoSchedule", None), &t, OFF, false),
        ("empty key Equal with matching value", tol("", "Equal", "v", "", None), &t, OFF, true),
        ("key is case sensitive", tol("K", "Exists", "", "", None), &t, OFF, false),
        ("effect is case sensitive", tol("k", "Exists", "", "noexecute", None), &t, OFF, false),
        ("unknown operator never matches", tol("k", "In", "v", "", None), &t, ON, false),
        ("lower-case operator is unknown", tol("k", "exists", "", "", None), &t, ON, false),
        ("Exists ignores a (invalid) value", tol("k", "Exists", "zzz", "", None), &t, OFF, true),
        ("timeAdded plays no part", tol("k", "Equal", "v", "", None), &taint("k", "v", "NoExecute").added_at(rfc3339("2020-01-01T00:00:00Z")), OFF, true),
        ("odd taint effect, empty toleration effect", tol("k", "Exists", "", "", None), &taint("k", "", "Bogus"), OFF, true),
        ("odd taint effect, same odd toleration effect", tol("k", "Exists", "", "Bogus", None), &taint("k", "", "Bogus"), OFF, true),
        ("odd taint effect, NoExecute toleration", tol("k", "Exists", "", "NoExecute", None), &taint("k", "", "Bogus"), OFF, false),
    ];
    for (name, toleration, taint, opts, want) in cases {
        assert_eq!(toleration.tolerates(taint, *opts), *want, "{name}");
    }
}

#[test]
fn comparison_operators_table() {
    // (operator, taint value, toleration value, enabled, expected)
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, MatchOptions, bool)] = &[
        ("Lt", "5", "10", ON, true),   // taint < toleration
        ("Lt", "10", "5", ON, false),
        ("Lt", "5", "5", ON, false),
        ("Gt", "10", "5", ON, true),   // taint > toleration
        ("Gt", "5", "10", ON, false),
        ("Gt", "5", "5", ON, false),
        ("Lt", "-3", "0", ON, true),
        ("Gt", "0", "-3", ON, true),
        ("Lt", "5", "10", OFF, false), // disabled: never matches
        ("Gt", "10", "5", OFF, false),
        ("Lt", "007", "10", ON, false),
        ("Lt", "1", "010", ON, false),
        ("Gt", "+1", "0", ON, false),
        ("Lt", "-0", "1", ON, false),
        ("Lt", " 1", "5", ON, false),
        ("Lt", "1 ", "5", ON, false),
        ("Lt", "1.0", "5", ON, false),
        ("Lt", "1e3", "5000", ON, false),
        ("Lt", "", "5", ON, false),
        ("Lt", "-", "5", ON, false),
        ("Gt", "9223372036854775808", "0", ON, false), // beyond i64
        ("Lt", "-9223372036854775809", "0", ON, false),
        ("Gt", "9223372036854775807", "0", ON, true),  // i64::MAX is fine
        ("Lt", "-9223372036854775808", "0", ON, true), // i64::MIN is fine
        ("Lt", "1", "٣", ON, false),                   // non-ASCII digit
    ];
    for (op, taint_value, tol_value, opts, want) in cases {
        let t = taint("k", taint_value, "NoSchedule");
        let tl = tol("k", op, tol_value, "", None);
        assert_eq!(tl.tolerates(&t, *opts), *want, "{op} taint={taint_value:?} toleration={tol_value:?} {opts:?}");
    }
}

#[test]
fn canonical_integers() {
    for ok in ["0", "1", "-1", "10", "123456789", "9223372036854775807", "-9223372036854775808"] {
        assert_eq!(parse_canonical_i64(ok), Some(ok.parse().expect("valid")), "{ok}");
    }
    for bad in
        ["", "-", "+1", "-0", "00", "007", "-07", " 1", "1 ", "1.0", "1e3", "0x10", "9223372036854775808", "--1", "1-"]
    {
        assert_eq!(parse_canonical_i64(bad), None, "{bad:?}");
    }
}

#[test]
fn first_match_order_rule() {
    let not_ready = taint(keys::NOT_READY, "", "NoExecute");
    // docs/spec.md §1: with Exists first, the not-ready taint is tolerated forever.
    let tols = vec![tol("", "Exists", "", "", None), tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(300))];
    assert_eq!(first_tolerating(&tols, &not_ready, OFF), Some(0));
    assert_eq!(evaluate(std::slice::from_ref(&not_ready), &tols, OFF, |_, _| None), Outcome::Never);
    // Reversed, the 300 s toleration is the one used.
    let reversed: Vec<_> = tols.into_iter().rev().collect();
    let at = rfc3339("2026-01-01T00:00:00Z");
    assert_eq!(
        evaluate(&[not_ready], &reversed, OFF, |_, _| Some(at)),
        Outcome::EvictAt { seconds: 300, deadline: Some(rfc3339("2026-01-01T00:05:00Z")) }
    );
}

#[test]
fn outcome_table() {
    let t0 = rfc3339("2026-01-01T00:00:00Z");
    let nr = taint(keys::NOT_READY, "", "NoExecute").added_at(t0);
    let un = taint(keys::UNREACHABLE, "", "NoExecute").added_at(rfc3339("2026-01-01T00:01:00Z"));
    let ns = taint("x", "", "NoSchedule");
    let anchors = |_: usize, t: &Taint| t.time_added;
    let far = Timestamp::MAX;
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Taint>, Vec<Toleration>, Outcome)> = vec![
        ("no taints", vec![], vec![], Outcome::NoTaints),
        ("only NoSchedule", vec![ns.clone()], vec![], Outcome::NoTaints),
        ("untolerated", vec![nr.clone()], vec![], Outcome::EvictNow(EvictNowCause::Untolerated { taint: 0 })),
        ("untolerated second taint", vec![ns.clone(), nr.clone()], vec![tol("x", "Exists", "", "", None)],
            Outcome::EvictNow(EvictNowCause::Untolerated { taint: 1 })),
        ("forever", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", None)], Outcome::Never),
        ("zero seconds", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(0))],
            Outcome::EvictNow(EvictNowCause::NonPositiveSeconds { taint: 0, toleration: 0 })),
        ("negative seconds", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(-5))],
            Outcome::EvictNow(EvictNowCause::NonPositiveSeconds { taint: 0, toleration: 0 })),
        ("i64::MIN seconds", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(i64::MIN))],
            Outcome::EvictNow(EvictNowCause::NonPositiveSeconds { taint: 0, toleration: 0 })),
        ("delayed", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(300))],
            Outcome::EvictAt { seconds: 300, deadline: Some(rfc3339("2026-01-01T00:05:00Z")) }),
        ("huge seconds saturate", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(i64::MAX))],
            Outcome::EvictAt { seconds: i64::MAX, deadline: Some(far) }),
        ("beyond jiff range saturates", vec![nr.clone()], vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(400_000_000_000))],
            Outcome::EvictAt { seconds: 400_000_000_000, deadline: Some(far) }),
        // Two taints, different tolerations and timeAdded: the earliest per-taint deadline wins,
        // even when it does not come from the smallest seconds.
        ("two taints earliest deadline", vec![nr.clone(), un.clone()],
            vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(600)), tol(keys::UNREACHABLE, "Exists", "", "NoExecute", Some(60))],
            Outcome::EvictAt { seconds: 60, deadline: Some(rfc3339("2026-01-01T00:02:00Z")) }),
        // The seconds reported are those of the taint that goes first (what status says too).
        ("two taints, older taint wins", vec![nr.clone(), un.clone()],
            vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(90)), tol(keys::UNREACHABLE, "Exists", "", "NoExecute", Some(60))],
            Outcome::EvictAt { seconds: 90, deadline: Some(rfc3339("2026-01-01T00:01:30Z")) }),
        ("one forever, one timed", vec![nr.clone(), un.clone()],
            vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", None), tol(keys::UNREACHABLE, "Exists", "", "NoExecute", Some(60))],
            Outcome::EvictAt { seconds: 60, deadline: Some(rfc3339("2026-01-01T00:02:00Z")) }),
        ("one timed, one untolerated", vec![nr.clone(), un.clone()],
            vec![tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(60))],
            Outcome::EvictNow(EvictNowCause::Untolerated { taint: 1 })),
        ("one toleration used by both taints", vec![nr.clone(), un.clone()],
            vec![tol("", "Exists", "", "NoExecute", Some(120))],
            Outcome::EvictAt { seconds: 120, deadline: Some(rfc3339("2026-01-01T00:02:00Z")) }),
        ("seconds on a non-NoExecute toleration never decide", vec![nr.clone()],
            vec![tol(keys::NOT_READY, "Exists", "", "NoSchedule", Some(1)), tol(keys::NOT_READY, "Exists", "", "", None)],
            Outcome::Never),
    ];
    for (name, taints, tols, want) in cases {
        assert_eq!(evaluate(&taints, &tols, OFF, anchors), want, "{name}");
    }
}

#[test]
fn deadline_unknown_without_anchor() {
    let nr = taint(keys::NOT_READY, "", "NoExecute");
    let tols = [tol(keys::NOT_READY, "Exists", "", "NoExecute", Some(30))];
    assert_eq!(
        evaluate(std::slice::from_ref(&nr), &tols, OFF, |_, t| t.time_added),
        Outcome::EvictAt { seconds: 30, deadline: None }
    );
}

#[test]
fn anchor_rules() {
    let seen = rfc3339("2026-01-01T00:00:10Z");
    assert_eq!(anchor(None, seen), seen, "no timeAdded: observation time");
    assert_eq!(anchor(Some(rfc3339("2026-01-01T00:00:00Z")), seen), rfc3339("2026-01-01T00:00:00Z"));
    assert_eq!(anchor(Some(rfc3339("2030-01-01T00:00:00Z")), seen), seen, "future timeAdded is clamped");
}

#[test]
fn add_seconds_saturates() {
    assert_eq!(add_seconds(Timestamp::MAX, 1), Timestamp::MAX);
    assert_eq!(add_seconds(Timestamp::MIN, -1), Timestamp::MIN);
    assert_eq!(add_seconds(Timestamp::UNIX_EPOCH, i64::MAX), Timestamp::MAX);
    assert_eq!(add_seconds(Timestamp::UNIX_EPOCH, i64::MIN), Timestamp::MIN);
    assert_eq!(add_seconds(Timestamp::UNIX_EPOCH, 60), rfc3339("1970-01-01T00:01:00Z"));
}

#[test]
fn apply_changes_keeps_foreign_taints_and_time_added() {
    let t0 = rfc3339("2026-01-01T00:00:00Z");
    let t1 = rfc3339("2026-01-01T00:01:00Z");
    let user = taint("example.com/mine", "x", "NoSchedule");
    let unreachable = taint(keys::UNREACHABLE, "", "NoExecute").added_at(t0);
    let current = vec![user.clone(), unreachable.clone()];
    let ne = |k: &str| TaintId::new(k, Effect::NoExecute);
    let add = |k: &str| TaintAdd::new(ne(k));
    // Already there: nothing to write, and the old timeAdded stays.
    assert_eq!(apply_changes(&current, &[add(keys::UNREACHABLE)], &[], t1), None);
    // A plain replacement: the new taint is stamped with the time of the write.
    let replaced = apply_changes(&current, &[add(keys::NOT_READY)], &[ne(keys::UNREACHABLE)], t1).expect("changed");
    assert_eq!(replaced, vec![user.clone(), taint(keys::NOT_READY, "", "NoExecute").added_at(t1)]);
    // The not-ready <-> unreachable swap keeps the replaced taint's timeAdded ("not Ready since");
    // the user's taint is untouched.
    let swap = TaintAdd { inherit: Some(ne(keys::UNREACHABLE)), ..TaintAdd::new(ne(keys::NOT_READY)) };
    let swapped = apply_changes(&current, std::slice::from_ref(&swap), &[ne(keys::UNREACHABLE)], t1).expect("changed");
    assert_eq!(swapped, vec![user.clone(), taint(keys::NOT_READY, "", "NoExecute").added_at(t0)]);
    // Inheriting from a taint that is not there (or has no timeAdded) falls back to now.
    let swapped = apply_changes(std::slice::from_ref(&user), &[swap], &[], t1).expect("changed");
    assert_eq!(swapped[1].time_added, Some(t1));
    // Removing something absent changes nothing.
    assert_eq!(apply_changes(std::slice::from_ref(&user), &[], &[ne(keys::NOT_READY)], t1), None);
    // A NoSchedule taint of the same key is a different taint.
    let ns = TaintAdd::new(TaintId::new(keys::UNREACHABLE, Effect::NoSchedule));
    assert_eq!(apply_changes(&current, std::slice::from_ref(&ns), &[], t1).expect("added").len(), 3);
}

#[test]
fn a_pod_bound_after_the_taint_counts_from_its_binding() {
    let added = rfc3339("2026-01-01T00:00:00Z");
    let later = rfc3339("2026-01-01T01:00:00Z");
    assert_eq!(pod_anchor(added, None), added, "no binding time known: the taint alone");
    assert_eq!(pod_anchor(added, Some(later)), later, "bound an hour after the taint");
    assert_eq!(pod_anchor(later, Some(added)), later, "bound before the taint");
}

#[test]
fn scheduling_table() {
    let ns = taint("a", "", "NoSchedule");
    let pns = taint("b", "", "PreferNoSchedule");
    let ne = taint("c", "", "NoExecute");
    let odd = taint("d", "", "Sometimes");
    let all = tol("", "Exists", "", "", None);
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Taint>, Vec<Toleration>, Scheduling)> = vec![
        ("no taints", vec![], vec![], Scheduling::Allowed),
        ("NoSchedule", vec![ns.clone()], vec![], Scheduling::Forbidden),
        ("NoExecute", vec![ne.clone()], vec![], Scheduling::Forbidden),
        ("PreferNoSchedule", vec![pns.clone()], vec![], Scheduling::PreferAvoid),
        ("unknown effect is ignored", vec![odd], vec![], Scheduling::Allowed),
        ("all tolerated", vec![ns.clone(), pns.clone(), ne.clone()], vec![all], Scheduling::Allowed),
        ("prefer and forbidden", vec![pns, ns.clone()], vec![], Scheduling::Forbidden),
        ("tolerated NoSchedule", vec![ns], vec![tol("a", "Exists", "", "NoSchedule", None)], Scheduling::Allowed),
    ];
    for (name, taints, tols, want) in cases {
        assert_eq!(scheduling(&taints, &tols, OFF), want, "{name}");
    }
}

#[test]
fn warnings_name_legacy_keys() {
    let tols = [
        tol("node.alpha.kubernetes.io/notReady", "Exists", "", "NoExecute", Some(300)),
        tol("node.kubernetes.io/outOfDisk", "Exists", "", "", None),
        tol(keys::UNREACHABLE, "Exists", "", "NoExecute", Some(300)),
    ];
    let w = warnings(&[], &tols, OFF);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("node.alpha.kubernetes.io/notReady") && w[0].contains(keys::NOT_READY), "{w:?}");
    assert!(w[1].contains("outOfDisk"), "{w:?}");
    for (legacy, _) in keys::LEGACY {
        let w = warnings(&[], &[tol(legacy, "Exists", "", "", None)], OFF);
        assert_eq!(w.len(), 1, "{legacy}: {w:?}");
    }
}

#[test]
fn warnings_for_odd_objects() {
    let taints = [taint("k", "", "NoExecute"), taint("k", "x", "NoExecute"), taint("z", "", "Bogus")];
    let tols = [
        tol("k", "Lt", "5", "", None),
        tol("", "Equal", "", "", None),
        tol("k", "Exists", "", "NoSchedule", Some(5)),
        tol("k", "Exists", "", "NoExecute", Some(-1)),
    ];
    let w = warnings(&taints, &tols, OFF);
    let has = |needle: &str| w.iter().any(|m| m.contains(needle));
    assert!(has("comparison operators"), "{w:?}");
    assert!(has("empty key requires Exists"), "{w:?}");
    assert!(has("seconds are ignored"), "{w:?}");
    assert!(has("evicted at once"), "{w:?}");
    assert!(has("repeats an earlier taint"), "{w:?}");
    assert!(has("unknown effect"), "{w:?}");
    assert!(has("no timeAdded"), "{w:?}");
}

#[test]
fn conversions_round_trip() {
    let k = core::Taint {
        key: "k".into(),
        value: None,
        effect: "NoExecute".into(),
        time_added: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(rfc3339("2026-01-01T00:00:00Z"))),
    };
    let ours = Taint::from(&k);
    assert_eq!(ours.value, "");
    assert_eq!(core::Taint::from(&ours), k);
    let t = core::Toleration { effect: Some(String::new()), operator: None, ..Default::default() };
    let ours = Toleration::from(&t);
    assert_eq!(ours.effect, None, "empty effect means any effect");
    assert_eq!(ours.operator, Operator::Equal, "empty operator means Equal");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A plain reference model of docs/spec.md §1, written independently of the implementation: string
    /// fields as in Go, integers parsed by a regular-language check then `i128`.
    mod model {
        pub struct T<'a> {
            pub key: &'a str,
            pub value: &'a str,
            pub effect: &'a str,
        }
        pub struct Tol<'a> {
            pub key: &'a str,
            pub op: &'a str,
            pub value: &'a str,
            pub effect: &'a str,
            pub seconds: Option<i64>,
        }

        fn int(s: &str) -> Option<i128> {
            let (neg, rest) = match s.strip_prefix('-') {
                Some(r) => (true, r),
                None => (false, s),
            };
            let ok = if rest == "0" {
                !neg
            } else {
                let mut chars = rest.chars();
                matches!(chars.next(), Some('1'..='9')) && chars.all(|c| c.is_ascii_digit())
            };
            if !ok || rest.len() > 19 {
                return None;
            }
            let mut v: i128 = 0;
            for c in rest.chars() {
                v = v * 10 + i128::from(c as u8 - b'0');
            }
            let v = if neg { -v } else { v };
            (i128::from(i64::MIN)..=i128::from(i64::MAX)).contains(&v).then_some(v)
        }

        pub fn tolerates(tol: &Tol, t: &T, cmp: bool) -> bool {
            if !tol.effect.is_empty() && tol.effect != t.effect {
                return false;
            }
            if !tol.key.is_empty() && tol.key != t.key {
                return false;
            }
            match tol.op {
                "" | "Equal" => tol.value == t.value,
                "Exists" => true,
                "Lt" if cmp => matches!((int(t.value), int(tol.value)), (Some(a), Some(b)) if a < b),
                "Gt" if cmp => matches!((int(t.value), int(tol.value)), (Some(a), Some(b)) if a > b),
                _ => false,
            }
        }

        /// None = no NoExecute taint; Some(None) = never; Some(Some(0)) = now; Some(Some(s)) = after s.
        pub fn min_seconds(taints: &[T], tols: &[Tol], cmp: bool) -> Option<Option<i64>> {
            let mut used = Vec::new();
            let mut any = false;
            for t in taints.iter().filter(|t| t.effect == "NoExecute") {
                any = true;
                match tols.iter().find(|tol| tolerates(tol, t, cmp)) {
                    Some(tol) => used.push(tol.seconds),
                    None => return Some(Some(0)),
                }
            }
            if !any {
                return None;
            }
            if used.iter().flatten().any(|s| *s <= 0) {
                return Some(Some(0));
            }
            Some(used.into_iter().flatten().min())
        }
    }

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("k".to_owned()),
            Just("v".to_owned()),
            Just(keys::NOT_READY.to_owned()),
            Just("0".to_owned()),
            Just("-0".to_owned()),
            Just("007".to_owned()),
            Just("+1".to_owned()),
            Just("9223372036854775808".to_owned()),
            any::<i64>().prop_map(|i| i.to_string()),
            "[-+ 0-9a-z.]{0,6}",
        ]
    }
    fn effect() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("NoSchedule".to_owned()),
            Just("PreferNoSchedule".to_owned()),
            Just("NoExecute".to_owned()),
            Just("Odd".to_owned()),
        ]
    }
    fn op() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("Equal".to_owned()),
            Just("Exists".to_owned()),
            Just("Lt".to_owned()),
            Just("Gt".to_owned()),
            Just("In".to_owned()),
        ]
    }
    fn seconds() -> impl Strategy<Value = Option<i64>> {
        prop_oneof![Just(None), any::<i64>().prop_map(Some), (-2i64..400).prop_map(Some)]
    }
    prop_compose! {
        fn arb_taint()(key in word(), value in word(), effect in effect(), added in proptest::option::of(any::<i64>())) -> Taint {
            Taint {
                key, value, effect: Effect::parse(&effect),
                time_added: added.and_then(|s| Timestamp::from_second(s % 253_402_207_200).ok()),
            }
        }
    }
    prop_compose! {
        fn arb_tol()(key in word(), op in op(), value in word(), effect in effect(), seconds in seconds()) -> Toleration {
            Toleration {
                key, operator: Operator::parse(&op), value,
                effect: (!effect.is_empty()).then(|| Effect::parse(&effect)),
                toleration_seconds: seconds,
            }
        }
    }

    fn to_model_taint(t: &Taint) -> model::T<'_> {
        model::T { key: &t.key, value: &t.value, effect: t.effect.as_str() }
    }
    fn to_model_tol(t: &Toleration) -> model::Tol<'_> {
        model::Tol {
            key: &t.key,
            op: match &t.operator {
                Operator::Equal => "Equal",
                op => op.as_str(),
            },
            value: &t.value,
            effect: t.effect.as_ref().map_or("", Effect::as_str),
            seconds: t.toleration_seconds,
        }
    }

    proptest! {
        #[test]
        fn matching_agrees_with_model(taint in arb_taint(), tol in arb_tol(), cmp in any::<bool>()) {
            let opts = MatchOptions { comparison_operators: cmp, infer_from_pod: false };
            prop_assert_eq!(tol.tolerates(&taint, opts), model::tolerates(&to_model_tol(&tol), &to_model_taint(&taint), cmp));
        }

        #[test]
        fn canonical_parse_agrees_with_model(s in word()) {
            let model = model::tolerates(
                &model::Tol { key: "", op: "Lt", value: "9223372036854775807", effect: "", seconds: None },
                &model::T { key: "", value: &s, effect: "" }, true);
            let ours = parse_canonical_i64(&s).is_some_and(|v| v < i64::MAX);
            prop_assert_eq!(ours, model);
        }

        #[test]
        fn outcome_agrees_with_model(
            taints in proptest::collection::vec(arb_taint(), 0..6),
            tols in proptest::collection::vec(arb_tol(), 0..6),
            cmp in any::<bool>(),
            seen in 0i64..4_000_000_000,
        ) {
            let opts = MatchOptions { comparison_operators: cmp, infer_from_pod: false };
            let seen = Timestamp::from_second(seen).expect("in range");
            let got = evaluate(&taints, &tols, opts, |_, t| Some(anchor(t.time_added, seen)));
            let mt: Vec<_> = taints.iter().map(to_model_taint).collect();
            let ml: Vec<_> = tols.iter().map(to_model_tol).collect();
            let want = model::min_seconds(&mt, &ml, cmp);
            match (got, want) {
                (Outcome::NoTaints, None) | (Outcome::Never, Some(None)) | (Outcome::EvictNow(_), Some(Some(0))) => {}
                (Outcome::EvictAt { seconds, deadline }, Some(Some(s))) => {
                    prop_assert_eq!(seconds, s);
                    // The deadline is never before the earliest anchor plus the smallest seconds,
                    // and never after the observation time plus the smallest seconds.
                    let deadline = deadline.expect("all anchors known");
                    prop_assert!(deadline <= add_seconds(seen, s));
                }
                (got, want) => prop_assert!(false, "got {:?}, model {:?}", got, want),
            }
            // Scheduling and warnings never panic on any input.
            let _ = scheduling(&taints, &tols, opts);
            let _ = warnings(&taints, &tols, opts);
        }
    }
}

#[test]
fn auto_honours_comparison_operators_on_a_pod_that_carries_them() {
    let taint = Taint::new("gpu-count", Effect::NoExecute).value("4");
    let gt = Toleration::from(&k8s_openapi::api::core::v1::Toleration {
        key: Some("gpu-count".into()),
        operator: Some("Gt".into()),
        value: Some("2".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    });
    // The API server admitted a Gt toleration: its gate is on, so it is honoured.
    assert_eq!(first_tolerating(std::slice::from_ref(&gt), &taint, MatchOptions::AUTO), Some(0));
    assert_eq!(first_tolerating(std::slice::from_ref(&gt), &taint, OFF), None, "forced off");
    assert_eq!(first_tolerating(std::slice::from_ref(&gt), &taint, ON), Some(0));
    assert_eq!(
        evaluate(std::slice::from_ref(&taint), std::slice::from_ref(&gt), MatchOptions::AUTO, |_, _| None),
        Outcome::Never
    );
}
