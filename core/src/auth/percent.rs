//! Percent-encoding as the Service Bus SDKs use it for SAS tokens.
//!
//! Small on purpose: one encoder (the strictest of the SDKs' encoders, so its output is valid
//! for all of them) and one decoder (that accepts what every SDK produces). The decoder is the
//! `percent-encoding` crate's, made strict: a malformed escape or a result that is not UTF-8
//! is refused rather than passed through, because a token that does not decode is malformed.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// Percent-encodes every byte of `text`'s UTF-8 form except the RFC 3986 unreserved characters
/// `A-Z a-z 0-9 - _ . ~`.
///
/// # Behavior
/// - Escapes are upper-case hex (`%2F`), as Python's `quote_plus` and JS's
///   `encodeURIComponent` write them.
/// - A space becomes `%20` (never `+`), so the output does not depend on form-encoding rules.
pub(super) fn encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// Decodes `%XX` escapes in `text`; `None` if an escape is malformed or the result is not UTF-8.
///
/// # Behavior
/// - Hex digits may be upper or lower case (the JS admin client lower-cases its whole encoded
///   audience, `%3a%2f`).
/// - `+` stays `+`: it is not turned into a space. A base64 signature may contain a literal `+`
///   and the SDKs never encode a space as `+` in a value that is decoded here for meaning
///   (entity and policy names cannot contain spaces).
/// - A `%` not followed by two hex digits is an error, not a literal.
/// - Decodes once: `%2524` gives `%24`.
/// - Borrows `text` when it has no escape; allocates only when something is decoded.
pub(crate) fn decode(text: &str) -> Option<Cow<'_, str>> {
    // `percent_decode_str` passes a malformed escape through as a literal `%`: refuse it first.
    let escapes_are_valid = text.split('%').skip(1).all(|after| {
        after.as_bytes().get(..2).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !escapes_are_valid {
        return None;
    }
    percent_decode_str(text).decode_utf8().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_escapes_all_but_unreserved() {
        let cases = [
            ("", ""),
            ("AZaz09-_.~", "AZaz09-_.~"),
            ("sb://localhost:5672/q", "sb%3A%2F%2Flocalhost%3A5672%2Fq"),
            ("q/$management", "q%2F%24management"),
            ("a b+c=d&e", "a%20b%2Bc%3Dd%26e"),
            ("!'()*", "%21%27%28%29%2A"),
            ("é", "%C3%A9"),
        ];
        for (input, expected) in cases {
            assert_eq!(encode(input), expected, "encode({input:?})");
        }
    }

    #[test]
    fn decode_accepts_either_hex_case_and_keeps_plus() {
        let cases = [
            ("", Some("")),
            ("sb%3A%2F%2Fh%2Fq", Some("sb://h/q")),
            ("sb%3a%2f%2fh%2fq", Some("sb://h/q")),
            ("a+b%2Bc", Some("a+b+c")),
            ("%C3%A9", Some("é")),
            ("plain", Some("plain")),
            ("%", None),
            ("%4", None),
            ("%zz", None),
            ("abc%2", None),
            ("%FF", None),
            // Invalid escapes are refused wherever they are, never kept as literals.
            ("%%41", None),
            ("%4%41", None),
            ("%G1", None),
            ("ok%2", None),
            ("%24ok%zz", None),
            // `+` and spaces are left alone, escaped or not.
            ("a b", Some("a b")),
            ("%2b", Some("+")),
            ("+%20+", Some("+ +")),
            // Not UTF-8 once decoded: refused (a lone lead byte, a lone continuation byte).
            ("%C3", None),
            ("%A9", None),
            ("%C3%28", None),
            ("%00", Some("\0")),
            ("%2524", Some("%24")),
            ("é%C3%A9", Some("éé")),
        ];
        for (input, expected) in cases {
            assert_eq!(decode(input).as_deref(), expected, "decode({input:?})");
        }
    }

    #[test]
    fn decode_borrows_unless_it_decodes_something() {
        assert!(matches!(decode("sb://h/q+1"), Some(Cow::Borrowed("sb://h/q+1"))));
        assert!(matches!(decode("sb%3A%2F%2Fh"), Some(Cow::Owned(text)) if text == "sb://h"));
    }

    #[test]
    fn decode_inverts_encode() {
        for text in ["sb://h:1/q/$DeadLetterQueue", "a b+c", "é~!*", ""] {
            assert_eq!(decode(&encode(text)).as_deref(), Some(text));
        }
    }
}
