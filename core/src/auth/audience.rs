//! [`Audience`]: the resource a SAS token is for, normalized so that the URIs clients sign for
//! the same entity compare equal.
//!
//! Invariant: an audience is a path without scheme, host, port, query, fragment, surrounding
//! `/` or upper case, and it covers only whole path segments below it.

use std::fmt;

use crate::address::{uri_path, UriReading};

/// The resource a token is for, normalized to a path: no scheme, host, port, query, fragment,
/// leading or trailing `/`, and lower case. The empty path is the whole namespace.
///
/// # Behavior
/// - `sb://localhost:5672/q`, `amqps://Host/Q/`, `https://ns:443/q?x=1` and `q` all give `q`;
///   `sb://ns/`, `https://localhost:5300` and `""` give the namespace.
/// - The query and fragment (from the first `?` or `#`) are dropped first.
/// - A string counts as a URI when it starts with `scheme://` (any RFC 3986 scheme); everything
///   up to the first `/` after that is the host and is dropped, and the path is percent-decoded
///   once (leniently: kept as is if it does not decode). Anything else is taken as a bare path,
///   not decoded. (The crate's one URI reader, `address::uri_path`, with its audience reading.)
/// - Comparison is case-insensitive because Service Bus entity names are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Audience(String);

impl Audience {
    /// The whole namespace: covers every path.
    pub fn namespace() -> Self {
        Self(String::new())
    }

    /// Normalizes a URI or bare path that is no longer URL-encoded (decode a SAS `sr` first).
    pub fn from_uri(uri: &str) -> Self {
        Self(normalize_path(uri))
    }

    /// The normalized path, without leading or trailing `/`; empty for the namespace.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_namespace(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this audience covers `path` (a link address, entity path or request path, with or
    /// without `scheme://host[:port]`, normalized the same way).
    ///
    /// # Behavior
    /// - True when the audience equals the path or is a whole-segment prefix of it: `q` covers
    ///   `q`, `Q/`, `q/$management`, `q/$DeadLetterQueue`, but not `q2` or the namespace itself.
    /// - The namespace audience covers everything.
    pub fn covers(&self, path: &str) -> bool {
        if self.is_namespace() {
            return true;
        }
        let path = normalize_path(path);
        match path.strip_prefix(self.0.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

/// `/` for the namespace, else `/` followed by the path.
impl fmt::Display for Audience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.0)
    }
}

fn normalize_path(uri: &str) -> String {
    uri_path(uri, UriReading::AUDIENCE).trim_matches('/').to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audience_normalization() {
        let cases = [
            ("sb://localhost:5672/q", "q"),
            ("amqps://Host/q/", "q"),
            ("amqp://h/q/$management", "q/$management"),
            ("http://localhost:5300/q/messages", "q/messages"),
            (
                "https://ns.servicebus.windows.net:443/Q1/Messages/head?timeout=5",
                "q1/messages/head",
            ),
            (
                "sb://ns.servicebus.windows.net/Orders/Subscriptions/Audit/$DeadLetterQueue",
                "orders/subscriptions/audit/$deadletterqueue",
            ),
            ("sb://h/q/$Transfer/$DeadLetterQueue", "q/$transfer/$deadletterqueue"),
            ("SB://HOST:1/Q", "q"),
            ("sb://h/q#fragment", "q"),
            ("https://h/%24resources/queues", "$resources/queues"),
            ("https://h/bad%zzescape", "bad%zzescape"),
            ("https://h/%24ok%zz", "%24ok%zz"),
            ("https://h/%2524", "%24"),
            ("%24q", "%24q"),
            ("sb://h?x=/q", ""),
            ("q?x=1", "q"),
            ("sb://h//q//", "q"),
            ("sb://ns/", ""),
            ("sb://ns", ""),
            ("https://localhost:5300", ""),
            ("https://localhost:5300/?api-version=2021-05", ""),
            ("q", "q"),
            ("/Q/", "q"),
            ("orders/Subscriptions/audit", "orders/subscriptions/audit"),
            ("$cbs", "$cbs"),
            ("", ""),
            ("/", ""),
            ("1bad://scheme/q", "1bad://scheme/q"),
        ];
        for (uri, expected) in cases {
            let audience = Audience::from_uri(uri);
            assert_eq!(audience.as_str(), expected, "{uri}");
            assert_eq!(audience.is_namespace(), expected.is_empty(), "{uri}");
        }
        assert_eq!(Audience::from_uri("sb://ns/").to_string(), "/");
        assert_eq!(Audience::from_uri("sb://ns/Q").to_string(), "/q");
    }

    #[test]
    fn audience_covers_itself_and_whole_segments_below_it() {
        let cases = [
            ("sb://h/q", "q", true),
            ("sb://h/q", "Q", true),
            ("sb://h/q", "q/", true),
            ("sb://h/q", "q/$management", true),
            ("sb://h/q", "q/$DeadLetterQueue", true),
            ("sb://h/q", "q/$DeadLetterQueue/$management", true),
            ("sb://h/q", "q/$Transfer/$DeadLetterQueue", true),
            ("sb://h/q", "amqps://other:5671/q/$management", true),
            ("amqps://h/Q/", "amqps://h/q", true),
            ("sb://h/q", "q2", false),
            ("sb://h/q", "qq/$management", false),
            ("sb://h/q", "", false),
            ("sb://h/q", "p/q", false),
            ("sb://h/q/$management", "q", false),
            ("sb://h/q/$management", "q/$management", true),
            ("sb://h/t", "t/Subscriptions/s", true),
            ("sb://h/t/Subscriptions/s", "t/subscriptions/s/$DeadLetterQueue", true),
            ("sb://h/t/Subscriptions/s", "t/subscriptions/s2", false),
            ("sb://h/t/Subscriptions/s", "t", false),
            ("http://localhost:5300/q/messages", "q/messages/head", true),
            ("http://localhost:5300/q/messages", "q", false),
            ("sb://ns/", "anything/at/all", true),
            ("sb://ns/", "", true),
            ("https://localhost:5300", "$Resources/Queues", true),
        ];
        for (audience, path, expected) in cases {
            assert_eq!(
                Audience::from_uri(audience).covers(path),
                expected,
                "{audience} covers {path}"
            );
        }
    }
}
