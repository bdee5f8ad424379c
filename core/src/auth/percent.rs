//! Percent-encoding as the Service Bus SDKs use it for SAS tokens.
//!
//! Small on purpose: one encoder (the strictest of the SDKs' encoders, so its output is valid
//! for all of them) and one decoder (that accepts what every SDK produces).

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
pub(super) fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let high = hex_value(*bytes.get(i + 1)?)?;
            let low = hex_value(*bytes.get(i + 2)?)?;
            out.push(high << 4 | low);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
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
        ];
        for (input, expected) in cases {
            assert_eq!(decode(input).as_deref(), expected, "decode({input:?})");
        }
    }

    #[test]
    fn decode_inverts_encode() {
        for text in ["sb://h:1/q/$DeadLetterQueue", "a b+c", "é~!*", ""] {
            assert_eq!(decode(&encode(text)).as_deref(), Some(text));
        }
    }
}
