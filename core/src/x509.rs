//! The one fact of an X.509 certificate the webhook reports: when it expires
//! (`nlc_webhook_certificate_expiry_timestamp_seconds`). A DER reader of just the path to
//! `tbsCertificate.validity.notAfter` (RFC 5280 §4.1); anything else is `None`, never a panic.

use jiff::Timestamp;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

fn expect(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, contents, rest) = element(der)?;
    (t == tag).then_some((contents, rest))
}

/// `notAfter` of a DER certificate.
pub fn not_after(der: &[u8]) -> Option<Timestamp> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if let Some((VERSION, _, after)) = element(rest) {
        rest = after;
    }
    let (_, rest) = expect(rest, INTEGER)?; // serialNumber
    let (_, rest) = expect(rest, SEQUENCE)?; // signature
    let (_, rest) = expect(rest, SEQUENCE)?; // issuer
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (_, _, after) = element(validity)?; // notBefore
    let (tag, time, _) = element(after)?;
    let text = std::str::from_utf8(time).ok()?;
    let full = match tag {
        // RFC 5280: YY >= 50 is 19YY, else 20YY.
        UTC_TIME if text.len() == 13 => {
            let yy: u32 = text.get(..2)?.parse().ok()?;
            format!("{}{text}", if yy >= 50 { "19" } else { "20" })
        }
        GENERALIZED_TIME if text.len() == 15 => text.to_owned(),
        _ => return None,
    };
    let b = full.as_bytes();
    if b.get(14) != Some(&b'Z') || !b[..14].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let rfc3339 =
        format!("{}-{}-{}T{}:{}:{}Z", &full[..4], &full[4..6], &full[6..8], &full[8..10], &full[10..12], &full[12..14]);
    rfc3339.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal certificate shape: tbs with version, serial, algorithm, issuer, validity.
    fn cert(time_tag: u8, not_after: &str) -> Vec<u8> {
        fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            if body.len() < 0x80 {
                out.push(body.len() as u8);
            } else {
                out.extend([0x81, body.len() as u8]);
            }
            out.extend_from_slice(body);
            out
        }
        let validity = [tlv(UTC_TIME, b"260101000000Z"), tlv(time_tag, not_after.as_bytes())].concat();
        let tbs = [
            tlv(VERSION, &tlv(INTEGER, &[2])),
            tlv(INTEGER, &[1, 2, 3]),
            tlv(SEQUENCE, &[0x06, 0x01, 0x2a]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &validity),
            tlv(SEQUENCE, &[]),
        ]
        .concat();
        tlv(SEQUENCE, &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[]), tlv(0x03, &[0])].concat())
    }

    #[test]
    fn reads_not_after_in_both_time_forms() {
        assert_eq!(not_after(&cert(UTC_TIME, "270301120000Z")), "2027-03-01T12:00:00Z".parse().ok());
        assert_eq!(not_after(&cert(GENERALIZED_TIME, "20510301120000Z")), "2051-03-01T12:00:00Z".parse().ok());
        assert_eq!(not_after(&cert(UTC_TIME, "990301120000Z")), "1999-03-01T12:00:00Z".parse().ok());
    }

    #[test]
    fn anything_else_is_none() {
        assert_eq!(not_after(&[]), None);
        assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(not_after(&cert(UTC_TIME, "2703011200Z")), None);
        assert_eq!(not_after(&cert(UTC_TIME, "27030112000+Z")), None);
        let mut c = cert(UTC_TIME, "270301120000Z");
        c.truncate(c.len() / 2);
        assert_eq!(not_after(&c), None);
    }
}
