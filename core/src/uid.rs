//! An object's UID as the cache holds it. The API server makes UIDs as random UUIDs, written
//! as 36 characters; held as a `String` that is 72 bytes a pod (its 24 and the allocator's 48),
//! 10 MB at 150,000 pods. A UUID in its canonical form is kept as its 16 bytes; anything else
//! (a UID an API server is free to choose) is kept verbatim, so that the text always comes back
//! exactly as it was read.

use std::fmt;

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Uid {
    /// A UUID written in lowercase hexadecimal, `8-4-4-4-12`.
    Uuid([u8; 16]),
    Other(Box<str>),
}

const DASHES: [usize; 4] = [8, 13, 18, 23];

impl Uid {
    pub fn new(s: &str) -> Self {
        Self::parse_uuid(s).map_or_else(|| Self::Other(s.into()), Self::Uuid)
    }

    fn parse_uuid(s: &str) -> Option<[u8; 16]> {
        let b = s.as_bytes();
        if b.len() != 36 || DASHES.iter().any(|&i| b[i] != b'-') {
            return None;
        }
        let mut out = [0u8; 16];
        let mut digits = b.iter().enumerate().filter(|(i, _)| !DASHES.contains(i)).map(|(_, c)| *c);
        for byte in &mut out {
            let (hi, lo) = (digits.next().and_then(nibble)?, digits.next().and_then(nibble)?);
            *byte = hi << 4 | lo;
        }
        Some(out)
    }
}

/// Lowercase hexadecimal only: an uppercase UUID is kept verbatim, so that it prints as read.
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(s) => f.write_str(s),
            Self::Uuid(b) => {
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl Default for Uid {
    fn default() -> Self {
        Self::Other("".into())
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Uid {
    fn from(s: String) -> Self {
        Self::new(&s)
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        match self {
            Self::Other(s) => **s == *other,
            Self::Uuid(b) => Self::parse_uuid(other).is_some_and(|o| o == *b),
        }
    }
}

impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for Uid {
    fn eq(&self, other: &String) -> bool {
        *self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_uuid_is_16_bytes_and_prints_as_read() {
        let s = "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
        let uid = Uid::new(s);
        assert!(matches!(uid, Uid::Uuid(_)));
        assert_eq!(uid.to_string(), s);
        assert_eq!(uid, s);
        assert_ne!(uid, "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e50");
        assert_eq!(format!("{uid:?}"), format!("{s:?}"));
    }

    #[test]
    fn anything_else_is_kept_verbatim() {
        for s in [
            "",
            "uid-p",
            "3F1C2D4E-5A6B-4C7D-8E9F-0A1B2C3D4E5F",  // uppercase
            "3f1c2d4e5a6b4c7d8e9f0a1b2c3d4e5f",      // no dashes
            "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5g",  // not hexadecimal
            "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5",   // short
            "3f1c2d4e-5a6b-4c7d-8e9f_0a1b2c3d4e5f",  // a dash missing
            "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f-", // long
            "ééééééééé-éééé-éééé-éééé-éééééééééééé",
        ] {
            let uid = Uid::new(s);
            assert!(matches!(uid, Uid::Other(_)), "{s}");
            assert_eq!(uid.to_string(), s);
            assert_eq!(uid, s);
        }
        assert_ne!(Uid::new("a"), Uid::new("b"));
        assert_ne!(Uid::new("3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"), "3F1C2D4E-5A6B-4C7D-8E9F-0A1B2C3D4E5F");
    }
}
