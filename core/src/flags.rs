//! Values that come from flags: Go-style durations, and the ranges rates and durations must
//! fall in. PURE. Shared by every component's arguments and by the load generator.

use std::time::Duration;

use crate::error::{Error, Result};

/// The smallest non-zero rate a flag may ask for: one per ~11.6 days. Below it a token bucket's
/// period no longer fits a nanosecond clock.
pub const MIN_RATE: f64 = 1e-6;
/// The largest rate a flag may ask for.
pub const MAX_RATE: f64 = 1e9;

pub const SECOND: Duration = Duration::from_secs(1);
pub const HOUR: Duration = Duration::from_secs(3600);
pub const DAY: Duration = Duration::from_secs(86_400);

/// Parses a Go-style duration (`300ms`, `5s`, `1m30s`, `2h`, or `0`), as Kubernetes flags take.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let bad = |problem: String| Error::invalid(format!("duration {s:?}"), problem);
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad("empty".into()));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_end == 0 {
            return Err(bad(format!("expected a number at {rest:?}")));
        }
        let value: f64 = rest[..num_end].parse().map_err(|_| bad("not a number".into()))?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            "" => return Err(bad("missing unit (e.g. 30s, 5m)".into())),
            u => return Err(bad(format!("unknown unit {u:?}"))),
        };
        rest = &rest[unit_end..];
        let part = Duration::try_from_secs_f64(value * unit).map_err(|_| bad("out of range".into()))?;
        total = total.checked_add(part).ok_or_else(|| bad("out of range".into()))?;
    }
    Ok(total)
}

/// A rate flag: 0 (unlimited, or for the node eviction rates: stopped) or a finite number
/// between [`MIN_RATE`] and [`MAX_RATE`]; anything else would be a token bucket that never
/// refills, or one that no clock can represent.
pub fn check_rate(flag: &str, rate: f64) -> Result<f64> {
    if rate == 0.0 || (rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&rate)) {
        Ok(rate)
    } else {
        Err(Error::invalid(flag, format!("must be 0 or between {MIN_RATE} and {MAX_RATE} per second, got {rate}")))
    }
}

/// A duration flag within `[min, max]`: a zero retry delay would be a hot loop, a period of years
/// would overflow timestamps.
pub fn check_duration(flag: &str, d: Duration, min: Duration, max: Duration) -> Result<Duration> {
    if d < min || d > max {
        Err(Error::invalid(flag, format!("must be between {min:?} and {max:?}, got {d:?}")))
    } else {
        Ok(d)
    }
}

/// A whole-number flag within `[min, max]`.
pub fn check_count(flag: &str, n: usize, min: usize, max: usize) -> Result<usize> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(Error::invalid(flag, format!("must be between {min} and {max}, got {n}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("5m", Duration::from_secs(300)),
            ("50s", Duration::from_secs(50)),
            ("1m30s", Duration::from_secs(90)),
            ("300ms", Duration::from_millis(300)),
            ("1.5s", Duration::from_millis(1500)),
            ("2h", Duration::from_secs(7200)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "5", "s", "5x", "-5s", "1e9h9999999999999999999h", "5 s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(check_rate("--r", 0.0), Ok(0.0));
        assert_eq!(check_rate("--r", 20.0), Ok(20.0));
        for bad in [-1.0, 1e-12, f64::NAN, f64::INFINITY, 1e10] {
            let e = check_rate("--r", bad).expect_err("refused");
            assert!(e.to_string().starts_with("--r: "), "{e}");
        }
        assert!(check_duration("--d", Duration::ZERO, SECOND, DAY).is_err());
        assert!(check_duration("--d", DAY * 2, SECOND, DAY).is_err());
        assert_eq!(check_duration("--d", HOUR, SECOND, DAY), Ok(HOUR));
        assert!(check_count("--n", 0, 1, 10).is_err());
    }
}
