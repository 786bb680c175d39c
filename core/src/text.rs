//! Text that others wrote (the who/why of an annotation a tenant with `patch` on nodes may set),
//! made safe to print on a terminal. PURE.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with every control character escaped (`\n`, `\r`, `\t`, `\x1b`, `\u{9b}`; a backslash
/// doubled so that an escape cannot be forged either), and the Unicode controls that reorder
/// text (bidirectional overrides and isolates: "Trojan Source", CVE-2021-42574)
/// written as `\u{202e}`: printed, it is one line of visible characters, and no escape sequence
/// can clear the screen, move the cursor or fake another line of output. Borrowed when there is
/// nothing to escape (the usual case).
pub fn escape_control(s: &str) -> Cow<'_, str> {
    let reorders = |c: char| matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(|c| c.is_control() || c == '\\' || reorders(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() || reorders(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape_control;

    #[test]
    fn control_characters_are_printed_as_escapes() {
        for (given, printed) in [
            ("INC-4711: ToR switch flapping", "INC-4711: ToR switch flapping"),
            ("zone eu-1a — ünïcode is kept", "zone eu-1a — ünïcode is kept"),
            ("a\u{1b}[2J\u{1b}[Hcleared", "a\\x1b[2J\\x1b[Hcleared"),
            ("why\nnode n2: nothing extended", "why\\nnode n2: nothing extended"),
            ("tab\tcr\rnul\0del\u{7f}", "tab\\tcr\\rnul\\x00del\\x7f"),
            ("c1 csi \u{9b}2J", "c1 csi \\u{9b}2J"),
            ("bidi \u{202e}desrever\u{202c} \u{2066}x\u{2069}", "bidi \\u{202e}desrever\\u{202c} \\u{2066}x\\u{2069}"),
            ("a literal \\x1b stays told apart", "a literal \\\\x1b stays told apart"),
            ("", ""),
        ] {
            assert_eq!(escape_control(given), printed, "{given:?}");
        }
        assert!(matches!(escape_control("plain"), std::borrow::Cow::Borrowed("plain")));
    }
}
