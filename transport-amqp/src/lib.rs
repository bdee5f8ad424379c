//! ironbus-transport-amqp: Azure Service Bus's AMQP 1.0 dialect, so the official Service Bus
//! SDKs work against ironbus unmodified.
//!
//! Our own connection / session / link state machine ([`connection`]) on fe2o3-amqp's types and
//! `serde_amqp` codec ([`frame`]): the broker chooses delivery tags (lock tokens), delivers only
//! against link credit, answers drain after sending what it has, and keeps the client's encoded
//! message bytes ([`codec`]). `$cbs` put-token authorizes links; `<entity>/$management` serves
//! Service Bus's request/response operations ([`management`]).
//!
//! **Architecture Invariant:** protocol knowledge stays here; Service Bus semantics stay in the
//! core. This crate depends on no workspace crate but `ironbus-core`.

pub mod codec;
pub mod connection;
pub mod error;
pub mod frame;
pub mod guard;
pub use ironbus_core::transport::limits;
pub mod management;
pub mod request;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ironbus_core::auth::Authorizer;
use ironbus_core::transport::TransportError;
use ironbus_core::{Broker, Shutdown, Transport};
use tokio::net::TcpListener;

use crate::connection::ConnectionContext;
use crate::limits::{ConnectionCounter, ConnectionLimits};

/// What a connection may have waiting to be written (bytes handed to its writer, its output
/// buffer and the management responses it holds) unless configured otherwise.
pub const DEFAULT_MAX_WRITE_BUFFER: usize = 4 * 1024 * 1024;
/// How long a connection's socket may accept no byte while the broker has bytes for it.
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many refused connections are being answered at once; beyond it a refused
/// connection is closed without an answer.
const MAX_REFUSING: usize = 64;
/// How long a refused connection gets to reach its Open.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

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
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            limits: ConnectionLimits::default(),
            max_write_buffer: DEFAULT_MAX_WRITE_BUFFER,
            write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
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

/// The AMQP front end: listens on a TCP address and serves each connection on its own task.
pub struct AmqpTransport {
    listener: TcpListener,
    authorizer: Arc<Authorizer>,
    options: AmqpOptions,
    stats: Arc<AmqpStats>,
}

impl fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpTransport").field("listener", &self.listener.local_addr().ok()).finish()
    }
}

impl AmqpTransport {
    /// Binds `addr` now, so the caller learns at once if the address is taken, and the real
    /// port when it asked for port 0.
    pub async fn bind(addr: SocketAddr, authorizer: Arc<Authorizer>) -> std::io::Result<Self> {
        Self::bind_with(addr, authorizer, AmqpOptions::default()).await
    }

    /// [`bind`](Self::bind) with connection limits and write-buffer bounds.
    pub async fn bind_with(
        addr: SocketAddr,
        authorizer: Arc<Authorizer>,
        options: AmqpOptions,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(AmqpTransport { listener, authorizer, options, stats: Arc::default() })
    }

    /// The listener's live counters.
    pub fn stats(&self) -> Arc<AmqpStats> {
        self.stats.clone()
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

#[async_trait]
impl Transport for AmqpTransport {
    fn name(&self) -> &'static str {
        "amqp"
    }

    async fn serve(
        self: Box<Self>,
        broker: Broker,
        mut shutdown: Shutdown,
    ) -> Result<(), TransportError> {
        let cx = Arc::new(ConnectionContext {
            broker,
            authorizer: self.authorizer.clone(),
            container_id: "ironbus".to_owned(),
            max_write_buffer: self.options.max_write_buffer,
            write_stall_timeout: self.options.write_stall_timeout,
            stats: self.stats.clone(),
        });
        let counter = ConnectionCounter::new(self.options.limits);
        let refusing = Arc::new(AtomicUsize::new(0));
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => match counter.try_acquire(peer.ip()) {
                        Ok(permit) => {
                            let (cx, shutdown) = (cx.clone(), shutdown.clone());
                            connections.spawn(async move {
                                cx.stats.connections.fetch_add(1, Ordering::Relaxed);
                                connection::serve(stream, cx.clone(), shutdown).await;
                                cx.stats.connections.fetch_sub(1, Ordering::Relaxed);
                                drop(permit);
                            });
                        }
                        Err(limit) => {
                            self.stats.refused.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, %limit, "connection refused");
                            // Answering costs a task and a socket for a few seconds: only so
                            // many at once, the rest are closed unanswered.
                            if refusing.fetch_add(1, Ordering::AcqRel) < MAX_REFUSING {
                                let (cx, refusing) = (cx.clone(), refusing.clone());
                                let shutdown = shutdown.clone();
                                connections.spawn(async move {
                                    let _ = tokio::time::timeout(
                                        REFUSAL_TIMEOUT,
                                        connection::refuse(stream, cx, shutdown, limit.to_string()),
                                    )
                                    .await;
                                    refusing.fetch_sub(1, Ordering::AcqRel);
                                });
                            } else {
                                refusing.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                    },
                    Err(e) => tracing::warn!(error = %e, "accept failed"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = shutdown.wait() => break,
            }
        }
        // Connections see the same shutdown signal and close themselves.
        while connections.join_next().await.is_some() {}
        Ok(())
    }
}
