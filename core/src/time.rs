//! Time as the controllers handle it. PURE.
//!
//! - [`after`]: a timestamp plus a duration that never overflows (the far future saturates).
//! - [`backoff`]: capped exponential backoff, shared by every retry in the core.
//! - [`quota`]: a rate in queries per second as a token bucket's quota, for every limiter (the
//!   executor's and the zones').
//! - [`parse_go_time`]: an RFC 3339 timestamp as Go's `time.Parse(time.RFC3339, ..)` reads it,
//!   which is what kube-apiserver stores for every `Time` and `MicroTime`. Go accepts
//!   instants up to 9999-12-31T23:59:59.999999999Z (and offsets up to 23:59), jiff's
//!   [`Timestamp`] only up to 9999-12-30T22:00:00Z: values past jiff's range are **clamped** to
//!   [`Timestamp::MAX`] (or [`Timestamp::MIN`]) instead of failing, so that one object with such
//!   a time (a kubelet can write its Lease's `renewTime`) never poisons a watch (docs/spec.md
//!   §13).

use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::Offset;
use jiff::{SignedDuration, Timestamp};

/// `now + d`, saturating at [`Timestamp::MAX`].
pub fn after(now: Timestamp, d: Duration) -> Timestamp {
    now.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MAX)
}

/// `now + d` for a signed `d`, saturating at either end.
pub fn shift(now: Timestamp, d: SignedDuration) -> Timestamp {
    now.checked_add(d).unwrap_or(if d.is_negative() { Timestamp::MIN } else { Timestamp::MAX })
}

/// Capped exponential backoff: `base * 2^(attempts-1)`, at most `cap` (`attempts` counts from 1).
pub fn backoff(base: Duration, cap: Duration, attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << exp).min(cap)
}

/// `qps` with `burst` as a governor quota; `None` for a rate no flag accepts as a limit (0 and
/// below, NaN, infinite, below [`crate::flags::MIN_RATE`]): what `None` means is the caller's (the
/// executor: no limit; a zone: no tokens). Never panics, however large `qps` or `burst`.
pub fn quota(qps: f64, burst: u32) -> Option<governor::Quota> {
    if !(qps >= crate::flags::MIN_RATE && qps.is_finite()) {
        return None;
    }
    let period = Duration::try_from_secs_f64(1.0 / qps).ok()?.max(Duration::from_nanos(1));
    Some(governor::Quota::with_period(period)?.allow_burst(std::num::NonZeroU32::new(burst.max(1))?))
}

/// Digits `s[range]` as a number within `min..=max`.
fn digits(s: &[u8], from: usize, to: usize, min: u32, max: u32) -> Option<u32> {
    let part = s.get(from..to)?;
    let mut n: u32 = 0;
    for &c in part {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(c - b'0');
    }
    (min..=max).contains(&n).then_some(n)
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `s` as Go's `time.Parse(time.RFC3339, s)` does (what `metav1.Time` reads JSON with),
/// clamping instants outside [`Timestamp`]'s range; `None` for anything Go refuses too. Go tries
/// a strict fast path first and falls back to its layout parser, which accepts more, so the
/// rules are the fallback's: `YYYY-MM-DD`, `T`, an hour of one or two digits (0-23), `:MM:SS`
/// (0-59), an optional fraction after `.` or `,` (any number of digits, the first nine kept),
/// then `Z` or `±HH:MM` with the hour up to 24 and the minute up to 60 (Go allows both), and
/// nothing after. Checked against Go itself in `tests/go_oracle.rs`.
pub fn parse_go_time(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let lit = |at: usize, c: u8| (b.get(at) == Some(&c)).then_some(());
    let year = digits(b, 0, 4, 0, 9999)?;
    lit(4, b'-')?;
    let month = digits(b, 5, 7, 1, 12)?;
    lit(7, b'-')?;
    let day = digits(b, 8, 10, 1, 31)?;
    lit(10, b'T')?;
    // One digit, or two.
    let hour_len = if b.get(12).is_some_and(u8::is_ascii_digit) { 2 } else { 1 };
    let hour = digits(b, 11, 11 + hour_len, 0, 23)?;
    let at = 11 + hour_len;
    lit(at, b':')?;
    let minute = digits(b, at + 1, at + 3, 0, 59)?;
    lit(at + 3, b':')?;
    let second = digits(b, at + 4, at + 6, 0, 59)?;
    let mut rest = &b[at + 6..];
    let mut nanos: u32 = 0;
    if rest.len() >= 2 && matches!(rest[0], b'.' | b',') && rest[1].is_ascii_digit() {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        for (i, &c) in rest[1..=n].iter().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u32::from(c - b'0');
            }
        }
        for _ in n..9 {
            nanos *= 10;
        }
        rest = &rest[1 + n..];
    }
    let offset_secs: i32 = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let hh = digits(rest, 1, 3, 0, 24)?;
            let mm = digits(rest, 4, 6, 0, 60)?;
            let secs = i32::try_from(hh * 3600 + mm * 60).ok()?;
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    if day > days_in(month, year) {
        return None;
    }
    let dt = DateTime::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
        i8::try_from(hour).ok()?,
        i8::try_from(minute).ok()?,
        i8::try_from(second).ok()?,
        i32::try_from(nanos).ok()?,
    )
    .ok()?;
    let offset = Offset::from_seconds(offset_secs).ok()?;
    Some(offset.to_timestamp(dt).unwrap_or(if year >= 5000 { Timestamp::MAX } else { Timestamp::MIN }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        let d = |n| backoff(Duration::from_millis(100), Duration::from_secs(1), n).as_millis();
        assert_eq!((1..=6).map(d).collect::<Vec<_>>(), vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(Duration::from_secs(1), Duration::MAX, u32::MAX), Duration::from_secs(1 << 20));
    }

    #[test]
    fn after_saturates() {
        assert_eq!(after(Timestamp::MAX, Duration::from_secs(1)), Timestamp::MAX);
        assert_eq!(after(Timestamp::UNIX_EPOCH, Duration::MAX), Timestamp::MAX);
        assert_eq!(shift(Timestamp::MIN, SignedDuration::from_secs(-1)), Timestamp::MIN);
    }

    #[test]
    fn go_times_past_jiffs_range_clamp() {
        let max = Some(Timestamp::MAX);
        for s in [
            "9999-12-30T22:00:01Z",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59.999999999Z",
            "9999-12-31T23:59:59.123456789123Z",
            "9999-12-31T10:00:00-23:59",
        ] {
            assert_eq!(parse_go_time(s), max, "{s}");
        }
        assert_eq!(parse_go_time("9999-12-30T22:00:00Z"), "9999-12-30T22:00:00Z".parse::<Timestamp>().ok(), "in range");
        assert_eq!(parse_go_time("0000-01-01T00:00:00+23:59"), "-000001-12-31T00:01:00Z".parse::<Timestamp>().ok());
        assert_eq!(parse_go_time("2026-12-01T10:00:00.5+01:30"), "2026-12-01T08:30:00.5Z".parse::<Timestamp>().ok());
        for bad in [
            "",
            "2026-12-01",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T00:00:60Z",
            "2026-12-01T00:00:00+25:00",
            "2026-12-01T00:00:00+24:61",
            "2026-12-01T00:00:00z",
            "2026-12-01T00:00:00,Z",
            "2026-12-1T00:00:00Z",
            "2026-12-01T00:0:00Z",
            "2026-12-01T00:00:00",
            "2026-12-01 00:00:00Z",
            "2026-12-01T00:00:00.Z",
            "+2026-12-01T00:00:00Z",
        ] {
            assert_eq!(parse_go_time(bad), None, "{bad:?}");
        }
        assert!(parse_go_time("2024-02-29T00:00:00Z").is_some(), "a leap day");
        // What Go's layout parser (its fallback) takes besides: a one-digit hour, a comma before
        // the fraction, offsets up to 24 hours and 60 minutes.
        let at = |s: &str| s.parse::<Timestamp>().ok();
        assert_eq!(parse_go_time("2026-12-01T5:00:00Z"), at("2026-12-01T05:00:00Z"));
        assert_eq!(parse_go_time("2026-12-01T00:00:00,25Z"), at("2026-12-01T00:00:00.25Z"));
        assert_eq!(parse_go_time("2026-12-01T00:00:00+24:00"), at("2026-11-30T00:00:00Z"));
        assert_eq!(parse_go_time("2026-12-01T00:00:00-00:60"), at("2026-12-01T01:00:00Z"));
    }

    /// A timestamp string in Go's RFC 3339 grammar, with the instant Go reads from it (in
    /// nanoseconds since the epoch).
    fn go_time() -> impl Strategy<Value = (String, i128)> {
        (0u32..=9999, 1u32..=12, 1u32..=31, 0u32..24, 0u32..60, 0u32..60, 0usize..=12, 0u64..1_000_000_000_000)
            .prop_flat_map(|(y, mo, d, h, mi, s, frac_len, frac)| {
                let d = d.min(days_in(mo, y));
                let zone = prop_oneof![Just(None), (any::<bool>(), 0u32..24, 0u32..60).prop_map(Some)];
                (Just((y, mo, d, h, mi, s, frac_len, frac)), zone)
            })
            .prop_map(|((y, mo, d, h, mi, s, frac_len, frac), zone)| {
                let digits = format!("{frac:012}");
                let fraction = if frac_len == 0 { String::new() } else { format!(".{}", &digits[..frac_len]) };
                let nanos: i128 = format!("{:0<9}", &digits[..frac_len.min(9)]).parse().unwrap_or(0);
                let (zone_text, offset) = match zone {
                    None => ("Z".to_owned(), 0i128),
                    Some((neg, hh, mm)) => {
                        let secs = i128::from(hh * 3600 + mm * 60);
                        (format!("{}{hh:02}:{mm:02}", if neg { '-' } else { '+' }), if neg { -secs } else { secs })
                    }
                };
                let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}{zone_text}");
                // Days from the civil date (proleptic Gregorian), then seconds.
                let days = days_from_civil(i64::from(y), i64::from(mo), i64::from(d));
                let secs = i128::from(days) * 86_400 + i128::from(h * 3600 + mi * 60 + s) - offset;
                (text, secs * 1_000_000_000 + nanos)
            })
    }

    /// Howard Hinnant's days_from_civil, as an independent model of the calendar.
    fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = if y >= 0 { y } else { y - 399 } / 400;
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    proptest! {
        #[test]
        fn every_time_go_reads_is_read_and_clamped((text, nanos) in go_time()) {
            let got = parse_go_time(&text);
            prop_assert!(got.is_some(), "{text} refused");
            let want = nanos.clamp(Timestamp::MIN.as_nanosecond(), Timestamp::MAX.as_nanosecond());
            prop_assert_eq!(got.map(|t| t.as_nanosecond()), Some(want), "{}", text);
        }
    }
}
