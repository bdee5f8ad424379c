//! ironbus-transport-amqp: Azure Service Bus's AMQP 1.0 dialect, so the official Service Bus
//! SDKs work against ironbus unmodified.
//!
//! Our own connection / session / link state machine ([`connection`]) on fe2o3-amqp's types and
//! `serde_amqp` codec ([`frame`]): the broker chooses delivery tags (lock tokens), delivers only
//! against link credit, answers drain after sending what it has, and keeps the client's encoded
//! message bytes ([`codec`]). `$cbs` put-token authorizes links; `<entity>/$management` serves
//! Service Bus's request/response operations ([`management`]).
//!
//! Connections arrive on a TCP listener, on an optional TLS listener (AMQPS: TLS from the
//! first byte, Service Bus's port 5671) and as byte streams other front ends hand over through
//! a [`StreamSender`] (AMQP over WebSockets, upgraded by the HTTP transport); all are served by
//! the same connection code under the same limits ([`listener`]).
//!
//! # Map
//!
//! - [`listener`] — where connections come from (TCP, TLS, handed-over streams), one accept
//!   loop, connection limits.
//! - [`frame`] and [`guard`] — framing, and the bounds check every encoded value passes before
//!   `serde_amqp` sees it.
//! - [`connection`] — one task per connection, and one file per concern under it: SASL,
//!   sessions, links, the client's transfers, our deliveries, `$cbs`, `$management` requests,
//!   addresses, transactions.
//! - [`codec`] — messages in and deliveries out; [`request`] — the request/response envelopes
//!   of `$cbs` and `$management`; [`management`] — one file per `$management` operation;
//!   [`error`] — core errors as the conditions the SDKs recognise.
//! - `limits` — the core's protocol-neutral connection limits, re-exported. Over a limit
//!   (`--max-connections`, `--max-connections-per-ip`, both off by default) a connection gets
//!   the usual handshake, SASL included, an Open and at once a Close with
//!   `amqp:resource-limit-exceeded` naming the limit; at most 64 refusals are answered at once,
//!   the rest are closed unanswered.
//!
//! Transactions are scoped to their *connection* (the .NET SDK puts the controller and the
//! links on different sessions) and commit through the core's via partition. What an idle
//! connection costs is measured by `cargo xtask bench connections` (figures in BENCHMARKS.md).
//!
//! **Architecture Invariant:** protocol knowledge stays here; Service Bus semantics stay in the
//! core. This crate depends on no workspace crate but `ironbus-core`.

pub mod codec;
pub mod connection;
pub mod error;
pub mod frame;
pub mod guard;
pub use ironbus_core::transport::limits;
pub mod listener;
pub mod management;
pub mod request;

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use crate::limits::ConnectionLimits;
pub use crate::listener::{AmqpStream, AmqpTransport, StreamSender};

/// What a connection may have waiting to be written (bytes handed to its writer, its output
/// buffer and the management responses it holds) unless configured otherwise.
pub const DEFAULT_MAX_WRITE_BUFFER: usize = 4 * 1024 * 1024;
/// How long a connection's socket may accept no byte while the broker has bytes for it.
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a TLS handshake may take unless configured otherwise.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the AMQP listener treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmqpOptions {
    /// Connection limits of this listener (0: unlimited).
    pub limits: ConnectionLimits,
    /// A connection whose unwritten bytes exceed this (plus the largest single message or
    /// response it was sent) is closed with `amqp:resource-limit-exceeded`. Deliveries pause
    /// at half of it, so a slow reader with large credit is paused, not closed.
    pub max_write_buffer: usize,
    /// A connection whose socket accepts no byte for this long while bytes wait for it is
    /// closed: the client is not reading.
    pub write_stall_timeout: Duration,
    /// A TLS handshake (on the TLS listener) that takes longer ends the connection.
    pub tls_handshake_timeout: Duration,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            limits: ConnectionLimits::default(),
            max_write_buffer: DEFAULT_MAX_WRITE_BUFFER,
            write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
        }
    }
}

/// What the listener's connections are doing, for metrics and tests.
#[derive(Debug, Default)]
pub struct AmqpStats {
    /// Connections served now.
    pub connections: AtomicUsize,
    /// Connections refused by a connection limit.
    pub refused: AtomicU64,
    /// Bytes waiting to be written, over all connections.
    pub write_buffered: AtomicUsize,
    /// The most bytes one connection ever had waiting to be written.
    pub peak_write_buffered: AtomicUsize,
    /// Connections closed because the client did not read.
    pub slow_reader_closes: AtomicU64,
}
