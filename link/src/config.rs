//! What both ends of a link are configured with: this node's id, the cluster secret, the bounds
//! and, optionally, TLS.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

/// The largest request body a server accepts unless configured otherwise (16 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// The largest reply body a client accepts unless configured otherwise (16 MiB).
pub const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
/// How many calls one connection carries at once unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;
/// How many connections a server keeps open at once unless configured otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// How long a call may take, connecting included, unless configured otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The fewest bytes a [`Secret`] may have.
pub const MIN_SECRET_BYTES: usize = 16;
/// The most bytes a [`PeerId`] may have.
pub const MAX_PEER_ID_BYTES: usize = 64;

/// A node's id within its cluster: 1 to [`MAX_PEER_ID_BYTES`] ASCII letters, digits, `.`, `_`
/// or `-`, so that it travels in a header as it is and is signed unambiguously.
///
/// On the server side a `PeerId` is the caller's *claim*, checked only in that the caller
/// holds the cluster secret (see the crate docs).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(String);

impl PeerId {
    /// Checks `id` against the grammar above.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidPeerId> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= MAX_PEER_ID_BYTES
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(Self(id))
        } else {
            Err(InvalidPeerId(id))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A node id outside the grammar of [`PeerId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node id {0:?}: 1 to 64 ASCII letters, digits, '.', '_' or '-'")]
pub struct InvalidPeerId(pub String);

/// The cluster's shared secret: the HMAC-SHA256 key every call is signed with. Every node of a
/// cluster holds the same one. Its `Debug` output never shows the bytes.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

impl Secret {
    /// Takes the secret's bytes; fewer than [`MIN_SECRET_BYTES`] are refused (a short key is
    /// guessed offline from one captured call).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, WeakSecret> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(WeakSecret { len: bytes.len() });
        }
        Ok(Self(bytes.into()))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A secret shorter than [`MIN_SECRET_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cluster secret has {len} bytes, fewer than 16")]
pub struct WeakSecret {
    /// How many bytes it had.
    pub len: usize,
}

/// TLS for the link, both ends: the server's rustls configuration (which may require client
/// certificates, for mutual TLS) and the client's, with the name every node's certificate
/// must be valid for (one cluster-wide name, since peers are dialled by address).
///
/// The link speaks HTTP/2 with prior knowledge, so ALPN is not needed; the shared secret is
/// checked over TLS as well.
#[derive(Clone)]
pub struct LinkTls {
    /// Accepts the connections of a [`LinkServer`](crate::LinkServer).
    pub server: Arc<rustls::ServerConfig>,
    /// Makes the connections of a [`LinkClient`](crate::LinkClient).
    pub client: Arc<rustls::ClientConfig>,
    /// The name the client checks each peer's certificate against.
    pub server_name: ServerName<'static>,
}

impl fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

/// One node's link configuration, the same shape for its server and its clients.
///
/// Built with [`LinkConfig::new`], which sets the defaults; change a field after that.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LinkConfig {
    /// This node's id: what a client signs its calls as.
    pub node_id: PeerId,
    /// The cluster secret, which signs and checks every call.
    pub secret: Secret,
    /// A server refuses (413) a request body over this many bytes, before reading it when its
    /// length is declared and as soon as the count passes it otherwise; a client refuses to
    /// send one ([`LinkError::TooLarge`](crate::LinkError::TooLarge)).
    pub max_request_bytes: usize,
    /// A client refuses a reply body over this many bytes
    /// ([`LinkError::Protocol`](crate::LinkError::Protocol)).
    pub max_reply_bytes: usize,
    /// The most calls one connection carries at once (HTTP/2's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`, announced by the server); a client's further calls
    /// wait for a stream.
    pub max_concurrent_streams: u32,
    /// The most connections a server keeps open; it closes those beyond at once.
    pub max_connections: usize,
    /// How long a client's call may take, connecting included, before it fails with
    /// [`LinkError::Timeout`](crate::LinkError::Timeout); a server gives a request as long to
    /// arrive and be answered.
    pub call_timeout: Duration,
    /// TLS for both ends; without it the link is plain TCP.
    pub tls: Option<LinkTls>,
}

impl LinkConfig {
    /// A configuration with the defaults: [`DEFAULT_MAX_REQUEST_BYTES`],
    /// [`DEFAULT_MAX_REPLY_BYTES`], [`DEFAULT_MAX_CONCURRENT_STREAMS`],
    /// [`DEFAULT_MAX_CONNECTIONS`], [`DEFAULT_CALL_TIMEOUT`] and no TLS.
    pub fn new(node_id: PeerId, secret: Secret) -> Self {
        Self {
            node_id,
            secret,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            tls: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ids_follow_the_grammar() {
        for good in ["a", "node-1", "n.2_x", &"x".repeat(64)] {
            assert_eq!(PeerId::new(good).unwrap().as_str(), good);
        }
        for bad in ["", "a b", "ü", "a:b", "a\n", &"x".repeat(65)] {
            assert_eq!(PeerId::new(bad), Err(InvalidPeerId(bad.to_owned())));
        }
    }

    #[test]
    fn short_secrets_are_refused_and_none_is_printed() {
        assert_eq!(Secret::new(vec![7; 15]).unwrap_err(), WeakSecret { len: 15 });
        let secret = Secret::new(b"0123456789abcdef".to_vec()).unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        let config = LinkConfig::new(PeerId::new("n1").unwrap(), secret);
        assert!(!format!("{config:?}").contains("0123456789abcdef"));
    }
}
