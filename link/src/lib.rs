//! ironbus-link: the cluster's internal link, over which a node forwards the work for a
//! partition it does not own to the node that owns it.
//!
//! A byte-level request/reply call on HTTP/2 (hyper): a [`LinkClient`] per peer calls a named
//! method with a body; the peer's [`LinkServer`] hands the call to the node's [`Handler`] and
//! sends back its reply, or its [`CallError`] as [`LinkError::Remote`]. The bodies are opaque
//! here: the encoding of commands belongs to the caller (ironbus's core), and this crate
//! depends on no workspace crate. The protocol is written down in [`wire`].
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use bytes::Bytes;
//! # use ironbus_link::*;
//! struct Echo;
//!
//! #[async_trait::async_trait]
//! impl Handler for Echo {
//!     async fn call(&self, _from: &PeerId, _method: &str, body: Bytes) -> Result<Bytes, CallError> {
//!         Ok(body)
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = Secret::new(b"one secret for the whole cluster".to_vec())?;
//! let server = LinkServer::bind(
//!     "127.0.0.1:0".parse()?,
//!     LinkConfig::new(PeerId::new("node-b")?, secret.clone()),
//!     Arc::new(Echo),
//! )
//! .await?;
//! let client = LinkClient::new(server.local_addr(), LinkConfig::new(PeerId::new("node-a")?, secret));
//! assert_eq!(client.call("echo", Bytes::from_static(b"hi")).await?, "hi");
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Failures
//!
//! [`LinkError`] says what went wrong and whether trying again can help
//! ([`LinkError::is_retriable`]): an unreachable peer, a timeout or a broken connection are
//! retriable, and a forwarding caller reports them as "partition unavailable". After a timeout
//! or a broken connection the call may have run on the peer without its answer arriving, as
//! with any remote call.
//!
//! # Admission: what the cluster secret protects against, and what not
//!
//! Every node of a cluster holds the same [`Secret`]. Each call carries the caller's node id,
//! its clock, a random nonce and SHA-256 of the body, signed together with the method by
//! HMAC-SHA256 under the secret; the server checks the signature in constant time before it
//! reads the body, refuses a timestamp more than 60 seconds from its own clock, and
//! remembers the nonces it admitted within that window. A refused call is answered 401 and
//! never reaches the handler; the caller gets [`LinkError::Refused`]. Replies are signed too,
//! bound to the call's nonce.
//!
//! The secret protects against:
//! - a process that can reach the port but does not hold the secret: it cannot make a call,
//!   and it cannot hold a connection open for more than [`server::FIRST_CALL_TIMEOUT`];
//! - a call altered in flight (method, node id, body) or a reply altered or swapped;
//! - a recorded call sent again: within the window its nonce is known, after it its
//!   timestamp is stale.
//!
//! It does not protect against:
//! - eavesdropping: on plain TCP anyone on the path reads every body (messages included).
//!   Across a network you do not trust, configure [`LinkConfig::tls`]; the secret is still
//!   checked over TLS, and a server configuration that requires client certificates makes it
//!   mutual TLS;
//! - a node that holds the secret: the node id is the caller's claim, signed but not proven,
//!   so any holder of the secret may call as any node. Keep the secret as well as the data;
//! - someone on the path dropping, delaying or cutting off calls and replies (the caller sees
//!   a retriable error), or answering with an unsigned refusal;
//! - clocks more than a minute apart: calls between such nodes are refused. Keep them in sync.
//!
//! A cluster node must not start without a secret, unless every address it listens on and
//! calls is a loopback one ([`loopback_only`]).
//!
//! # Bounds
//!
//! Like the client-facing listeners, a server bounds what any peer can make it hold: open
//! connections ([`LinkConfig::max_connections`]), calls per connection
//! ([`LinkConfig::max_concurrent_streams`]), header bytes, the time to a first admitted call
//! and idle time ([`server`]), the request body ([`LinkConfig::max_request_bytes`]: 413 before
//! reading when declared too long, counted while read otherwise). A client bounds the reply
//! ([`LinkConfig::max_reply_bytes`]) and the whole call ([`LinkConfig::call_timeout`]).
//!
//! **Invariant:** no input from the network panics, and the handler runs only for a call that
//! was admitted and whose body, read within the limit, matches its signed hash.

#![warn(missing_docs)]

mod admission;
mod client;
mod config;
mod error;
pub mod server;
pub mod wire;

use std::net::SocketAddr;

pub use crate::client::LinkClient;
pub use crate::config::{
    InvalidPeerId, LinkConfig, LinkTls, PeerId, Secret, WeakSecret, DEFAULT_CALL_TIMEOUT,
    DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_REQUEST_BYTES, MAX_PEER_ID_BYTES, MIN_SECRET_BYTES,
};
pub use crate::error::{CallError, LinkError};
pub use crate::server::{Handler, LinkServer};

/// Whether every address in `addrs` is a loopback one (`127.0.0.0/8`, `::1`, or `::1`'s
/// IPv4-mapped kin `::ffff:127.x.y.z`): the only case in which a cluster node may start
/// without a secret, because no other host can reach it. An empty list is not loopback-only
/// (nothing shows the node keeps to this host), and neither is an unspecified address
/// (`0.0.0.0`, `::`), which listens on every interface.
pub fn loopback_only(addrs: &[SocketAddr]) -> bool {
    !addrs.is_empty() && addrs.iter().all(|addr| addr.ip().to_canonical().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|addr| addr.parse().unwrap()).collect()
    }

    #[test]
    fn only_loopback_addresses_are_loopback_only() {
        assert!(loopback_only(&addrs(&["127.0.0.1:5000"])));
        assert!(loopback_only(&addrs(&["127.0.0.1:5000", "127.8.9.10:1", "[::1]:5001"])));
        assert!(loopback_only(&addrs(&["[::ffff:127.0.0.1]:5000"])));
        assert!(!loopback_only(&[]));
        assert!(!loopback_only(&addrs(&["127.0.0.1:5000", "10.0.0.2:5000"])));
        assert!(!loopback_only(&addrs(&["0.0.0.0:5000"])));
        assert!(!loopback_only(&addrs(&["[::]:5000"])));
        assert!(!loopback_only(&addrs(&["[::ffff:10.0.0.1]:5000"])));
        assert!(!loopback_only(&addrs(&["192.168.1.1:5000"])));
    }
}
