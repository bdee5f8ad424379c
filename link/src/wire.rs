//! The link's protocol on HTTP/2: what a call and its reply look like, and how both are
//! signed. The client and the server in this crate are its only producers and consumers;
//! it is public so that it is written down in one place (and so tests can forge calls).
//!
//! A call is `POST /ironbus-link/v1/{method}` (HTTP/2 with prior knowledge), the request body
//! the call's bytes, with these headers:
//!
//! | header | value |
//! |---|---|
//! | [`NODE`] | the caller's [`PeerId`] |
//! | [`TIMESTAMP`] | the caller's clock, milliseconds since the Unix epoch, decimal |
//! | [`NONCE`] | 16 random bytes, lower-case hex |
//! | [`BODY_SHA256`] | SHA-256 of the body, lower-case hex |
//! | [`SIGNATURE`] | HMAC-SHA256 under the cluster secret of [`Credentials::signed_bytes`], hex |
//! | `content-length` | the body's length |
//!
//! The server checks the headers before it reads a byte of the body: the timestamp within
//! [`CLOCK_WINDOW`] of its clock, the signature (in constant time), the nonce unseen within
//! the window; then the length, then the body against its hash.
//!
//! Replies, by status:
//!
//! - 200: the handler's reply is the body;
//! - [`REMOTE_ERROR`] (422): the handler's error, its code in [`ERROR_CODE`] and its message
//!   the body (UTF-8);
//! - 401: refused credentials, the reason in the body; 413: body too large; 503: shutting down
//!   or busy; 400, 404, 405: a malformed call.
//!
//! 200 and 422 carry [`REPLY_SIGNATURE`]: HMAC-SHA256 of [`reply_signed_bytes`], which binds
//! the reply to the call's nonce, so that no one without the secret forges or swaps replies.
//! The other statuses are unsigned: they carry no data and anyone on the path can break a
//! call anyway.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use hyper::header::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

use crate::{LinkError, PeerId, Secret};

/// The path of a call is this prefix and the method.
pub const PATH_PREFIX: &str = "/ironbus-link/v1/";
/// The caller's node id.
pub const NODE: &str = "x-ironbus-node";
/// The caller's clock at signing, in milliseconds since the Unix epoch.
pub const TIMESTAMP: &str = "x-ironbus-timestamp";
/// The call's nonce.
pub const NONCE: &str = "x-ironbus-nonce";
/// SHA-256 of the request body.
pub const BODY_SHA256: &str = "x-ironbus-body-sha256";
/// The call's signature.
pub const SIGNATURE: &str = "x-ironbus-signature";
/// The handler's error code, on a [`REMOTE_ERROR`] reply.
pub const ERROR_CODE: &str = "x-ironbus-error-code";
/// The reply's signature.
pub const REPLY_SIGNATURE: &str = "x-ironbus-reply-signature";
/// The status of a reply that carries the handler's error.
pub const REMOTE_ERROR: u16 = 422;
/// How far a call's timestamp may be from the server's clock, either way.
pub const CLOCK_WINDOW: Duration = Duration::from_secs(60);
/// The most bytes a method name may have.
pub const MAX_METHOD_BYTES: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// Whether `method` is a valid method name: 1 to [`MAX_METHOD_BYTES`] ASCII letters, digits,
/// `.`, `_` or `-`.
pub fn method_is_valid(method: &str) -> bool {
    !method.is_empty()
        && method.len() <= MAX_METHOD_BYTES
        && method.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What a call's signature covers besides the method: who calls, when, a nonce and the body's
/// hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The caller's node id.
    pub node: PeerId,
    /// The caller's clock, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Random, never used twice.
    pub nonce: [u8; 16],
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
}

impl Credentials {
    /// Credentials for a call from `node` with `body`, now, with a fresh random nonce.
    pub fn new(node: PeerId, body: &[u8]) -> Self {
        Self {
            node,
            timestamp_ms: now_ms(),
            nonce: rand::random(),
            body_sha256: Sha256::digest(body).into(),
        }
    }

    /// The bytes the signature is computed over: a domain tag, then the method and the node id
    /// (each after its length as a big-endian `u32`), the timestamp (big-endian `u64`), the
    /// nonce and the body's hash.
    pub fn signed_bytes(&self, method: &str) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(128);
        bytes.extend_from_slice(b"ironbus-link/v1 call\0");
        put_str(&mut bytes, method);
        put_str(&mut bytes, self.node.as_str());
        bytes.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        bytes.extend_from_slice(&self.nonce);
        bytes.extend_from_slice(&self.body_sha256);
        bytes
    }

    /// The signature of a call to `method` with these credentials under `secret`.
    pub fn signature(&self, secret: &Secret, method: &str) -> [u8; 32] {
        mac(secret, &self.signed_bytes(method)).finalize().into_bytes().into()
    }

    /// Whether `signature` is the one of a call to `method`, compared in constant time.
    pub(crate) fn verify(&self, secret: &Secret, method: &str, signature: &[u8; 32]) -> bool {
        mac(secret, &self.signed_bytes(method)).verify_slice(signature).is_ok()
    }

    /// Writes the credentials and their signature into `headers`.
    pub fn write(&self, secret: &Secret, method: &str, headers: &mut HeaderMap) {
        let signature = self.signature(secret, method);
        let fields: [(&'static str, String); 5] = [
            (NODE, self.node.as_str().to_owned()),
            (TIMESTAMP, self.timestamp_ms.to_string()),
            (NONCE, hex(&self.nonce)),
            (BODY_SHA256, hex(&self.body_sha256)),
            (SIGNATURE, hex(&signature)),
        ];
        for (name, value) in fields {
            // Node ids, digits and hex are all visible ASCII.
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
    }

    /// Reads the credentials and the signature from `headers`; the reason when one is missing
    /// or malformed.
    pub(crate) fn read(headers: &HeaderMap) -> Result<(Self, [u8; 32]), &'static str> {
        let node = header(headers, NODE)
            .and_then(|node| PeerId::new(node).ok())
            .ok_or("missing or invalid node id")?;
        let timestamp_ms = header(headers, TIMESTAMP)
            .filter(|t| !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse().ok())
            .ok_or("missing or invalid timestamp")?;
        let nonce = header(headers, NONCE).and_then(unhex).ok_or("missing or invalid nonce")?;
        let body_sha256 =
            header(headers, BODY_SHA256).and_then(unhex).ok_or("missing or invalid body hash")?;
        let signature =
            header(headers, SIGNATURE).and_then(unhex).ok_or("missing or invalid signature")?;
        Ok((Self { node, timestamp_ms, nonce, body_sha256 }, signature))
    }
}

/// The bytes a reply's signature is computed over: a domain tag, the call's nonce, the status
/// (big-endian `u16`), the error code (after its length as a big-endian `u32`; empty on 200)
/// and SHA-256 of the reply body.
pub fn reply_signed_bytes(nonce: &[u8; 16], status: u16, code: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(128);
    bytes.extend_from_slice(b"ironbus-link/v1 reply\0");
    bytes.extend_from_slice(nonce);
    bytes.extend_from_slice(&status.to_be_bytes());
    put_str(&mut bytes, code);
    bytes.extend_from_slice(&Sha256::digest(body));
    bytes
}

/// The signature of a reply (hex), as a server sends it in [`REPLY_SIGNATURE`].
pub(crate) fn reply_signature(
    secret: &Secret,
    nonce: &[u8; 16],
    status: u16,
    code: &str,
    body: &[u8],
) -> String {
    let signature = mac(secret, &reply_signed_bytes(nonce, status, code, body)).finalize();
    hex(&signature.into_bytes())
}

/// Whether `headers` carry the right signature of this reply, compared in constant time.
pub(crate) fn reply_is_signed(
    secret: &Secret,
    nonce: &[u8; 16],
    status: u16,
    code: &str,
    body: &[u8],
    headers: &HeaderMap,
) -> bool {
    let Some(signature) = header(headers, REPLY_SIGNATURE).and_then(unhex::<32>) else {
        return false;
    };
    mac(secret, &reply_signed_bytes(nonce, status, code, body)).verify_slice(&signature).is_ok()
}

/// What a reply with an unsigned status (anything but 200 and [`REMOTE_ERROR`]) means to the
/// caller: 401 [`LinkError::Refused`], 413 [`LinkError::TooLarge`], 503
/// [`LinkError::Unreachable`], anything else [`LinkError::Protocol`]. `body` is the server's
/// reason.
pub fn unsigned_reply_error(status: u16, body: &[u8]) -> LinkError {
    let reason: String = String::from_utf8_lossy(body).chars().take(256).collect();
    match status {
        401 => LinkError::Refused { reason },
        413 => LinkError::TooLarge { limit: None },
        503 => LinkError::Unreachable { reason },
        _ => LinkError::protocol(format!("unexpected status {status}: {reason}")),
    }
}

/// The server's clock in milliseconds since the Unix epoch (0 before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn mac(secret: &Secret, bytes: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(secret.bytes()).expect("hmac accepts any key length");
    mac.update(bytes);
    mac
}

fn put_str(bytes: &mut Vec<u8>, s: &str) {
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&len.to_be_bytes());
    bytes.extend_from_slice(s.as_bytes());
}

pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    fn credentials() -> Credentials {
        Credentials::new(PeerId::new("node-a").unwrap(), b"body")
    }

    #[test]
    fn credentials_survive_their_headers() {
        let credentials = credentials();
        let mut headers = HeaderMap::new();
        credentials.write(&secret(1), "send", &mut headers);
        let (read, signature) = Credentials::read(&headers).unwrap();
        assert_eq!(read, credentials);
        assert!(read.verify(&secret(1), "send", &signature));
    }

    #[test]
    fn a_signature_covers_every_field_and_the_key() {
        let base = credentials();
        let signature = base.signature(&secret(1), "send");
        assert!(base.verify(&secret(1), "send", &signature));
        assert!(!base.verify(&secret(2), "send", &signature));
        assert!(!base.verify(&secret(1), "sendx", &signature));
        let changed = [
            Credentials { node: PeerId::new("node-b").unwrap(), ..base.clone() },
            Credentials { timestamp_ms: base.timestamp_ms + 1, ..base.clone() },
            Credentials { nonce: [9; 16], ..base.clone() },
            Credentials { body_sha256: [9; 32], ..base.clone() },
        ];
        for other in changed {
            assert!(!other.verify(&secret(1), "send", &signature), "{other:?}");
        }
    }

    #[test]
    fn method_and_node_cannot_trade_bytes() {
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        let a = Credentials { node: PeerId::new("c").unwrap(), ..credentials() };
        let b = Credentials { node: PeerId::new("bc").unwrap(), ..a.clone() };
        assert_ne!(a.signed_bytes("ab"), b.signed_bytes("a"));
    }

    #[test]
    fn malformed_headers_are_reasons_not_panics() {
        let mut headers = HeaderMap::new();
        credentials().write(&secret(1), "send", &mut headers);
        for (name, bad) in [
            (NODE, "a b"),
            (TIMESTAMP, "-1"),
            (TIMESTAMP, "99999999999999999999999"),
            (NONCE, "00"),
            (NONCE, &"zz".repeat(16)),
            (BODY_SHA256, &"AB".repeat(32)),
            (SIGNATURE, ""),
        ] {
            let mut headers = headers.clone();
            headers.insert(name, HeaderValue::from_str(bad).unwrap());
            assert!(Credentials::read(&headers).is_err(), "{name}: {bad}");
            let mut headers = headers.clone();
            headers.remove(name);
            assert!(Credentials::read(&headers).is_err(), "{name} missing");
        }
    }

    #[test]
    fn a_reply_signature_binds_nonce_status_code_and_body() {
        let nonce = [3; 16];
        let signature = reply_signature(&secret(1), &nonce, 200, "", b"reply");
        let mut headers = HeaderMap::new();
        headers.insert(REPLY_SIGNATURE, HeaderValue::from_str(&signature).unwrap());
        assert!(reply_is_signed(&secret(1), &nonce, 200, "", b"reply", &headers));
        assert!(!reply_is_signed(&secret(2), &nonce, 200, "", b"reply", &headers));
        assert!(!reply_is_signed(&secret(1), &[4; 16], 200, "", b"reply", &headers));
        assert!(!reply_is_signed(&secret(1), &nonce, 422, "", b"reply", &headers));
        assert!(!reply_is_signed(&secret(1), &nonce, 200, "c", b"reply", &headers));
        assert!(!reply_is_signed(&secret(1), &nonce, 200, "", b"replz", &headers));
        assert!(!reply_is_signed(&secret(1), &nonce, 200, "", b"reply", &HeaderMap::new()));
    }

    #[test]
    fn unsigned_statuses_map_to_their_errors() {
        assert_eq!(
            unsigned_reply_error(401, b"bad signature"),
            LinkError::Refused { reason: "bad signature".into() }
        );
        assert_eq!(unsigned_reply_error(413, b""), LinkError::TooLarge { limit: None });
        assert!(unsigned_reply_error(503, b"shutting down").is_retriable());
        assert!(matches!(unsigned_reply_error(404, b"\xff"), LinkError::Protocol { .. }));
    }

    #[test]
    fn hex_round_trips_and_rejects_bad_digits() {
        let bytes: [u8; 4] = [0, 0x7f, 0xa0, 0xff];
        assert_eq!(hex(&bytes), "007fa0ff");
        assert_eq!(unhex::<4>("007fa0ff"), Some(bytes));
        assert_eq!(unhex::<4>("007fa0f"), None);
        assert_eq!(unhex::<4>("007fa0fg"), None);
        assert_eq!(unhex::<2>("é1"), None);
    }
}
