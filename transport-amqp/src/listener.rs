//! Where connections come from: the TCP listener, the optional TLS listener (AMQPS) and byte
//! streams handed over by other front ends ([`StreamSender`]: AMQP over WebSockets). Every
//! connection, whatever its stream, is admitted by one accept loop under one
//! [`ConnectionCounter`] and served by the same connection code ([`connection::serve`]), so the
//! connection limits, the write-buffer bound and the stall time-out apply to all alike. Each is
//! split into a read and a write half; the writer flushes whenever its queue is empty, since a
//! TLS or WebSocket stream may hold back what it accepted. AMQPS is TLS from the first byte, as
//! on Service Bus's port 5671, with rustls and the certificate the server gives.
//!
//! **Architecture Invariant:** a connection holds its permit from the moment it is accepted
//! (before a TLS handshake), and a TLS handshake that does not finish within
//! [`AmqpOptions::tls_handshake_timeout`] ends the connection.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ironbus_core::auth::Authorizer;
use ironbus_core::transport::TransportError;
use ironbus_core::{Broker, Namespaces, Shutdown, Transport};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use crate::connection::{self, ConnectionContext};
use crate::limits::ConnectionCounter;
use crate::{AmqpOptions, AmqpStats};

/// At most this many refused connections are being answered at once; beyond it a refused
/// connection is closed without an answer.
const MAX_REFUSING: usize = 64;
/// How long a refused connection gets to reach its Open.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams handed over and not yet taken by the accept loop; beyond it a stream is dropped.
const STREAM_BACKLOG: usize = 128;

/// A byte stream that carries one AMQP connection (a WebSocket's payload, say).
pub trait AmqpStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> AmqpStream for T {}

type Handoff = (Box<dyn AmqpStream>, SocketAddr);

/// Hands byte streams to an [`AmqpTransport`], which serves each as an AMQP connection from
/// `peer`, counted under the transport's connection limits. Cheap to clone.
#[derive(Clone)]
pub struct StreamSender(mpsc::Sender<Handoff>);

impl fmt::Debug for StreamSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamSender").finish_non_exhaustive()
    }
}

impl StreamSender {
    /// Hands `stream` over. `false` (the stream is dropped, which closes it) when the transport
    /// has stopped or too many handed-over streams are waiting for it.
    pub fn send(&self, stream: impl AmqpStream, peer: SocketAddr) -> bool {
        self.0.try_send((Box::new(stream), peer)).is_ok()
    }
}

/// The AMQP front end: listens on a TCP address (and on a TLS one if asked) and serves each
/// connection on its own task.
pub struct AmqpTransport {
    listener: TcpListener,
    tls: Option<(TcpListener, TlsAcceptor)>,
    streams: mpsc::Receiver<Handoff>,
    sender: StreamSender,
    authorizer: Arc<Authorizer>,
    options: AmqpOptions,
    stats: Arc<AmqpStats>,
    namespaces: Option<Namespaces>,
}

impl fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpTransport")
            .field("listener", &self.listener.local_addr().ok())
            .field("tls", &self.tls_addr())
            .finish()
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
        let (tx, streams) = mpsc::channel(STREAM_BACKLOG);
        Ok(AmqpTransport {
            listener,
            tls: None,
            streams,
            sender: StreamSender(tx),
            authorizer,
            options,
            stats: Arc::default(),
            namespaces: None,
        })
    }

    /// Also listens on `addr` for AMQP over TLS (TLS from the first byte, as Service Bus's port
    /// 5671 and the SDKs without `UseDevelopmentEmulator` expect), with `config`'s certificate.
    pub async fn bind_tls(
        &mut self,
        addr: SocketAddr,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<()> {
        self.tls = Some((TcpListener::bind(addr).await?, TlsAcceptor::from(config)));
        Ok(())
    }

    /// Serves several namespaces: a connection is to the one its Open's hostname selects (the
    /// broker [`serve`](Transport::serve) is given serves the others).
    pub fn serve_namespaces(&mut self, namespaces: Namespaces) {
        self.namespaces = Some(namespaces);
    }

    /// What hands other front ends' streams (WebSockets) to this transport.
    pub fn stream_sender(&self) -> StreamSender {
        self.sender.clone()
    }

    /// The listener's live counters.
    pub fn stats(&self) -> Arc<AmqpStats> {
        self.stats.clone()
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The TLS listener's address, if there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().and_then(|(listener, _)| listener.local_addr().ok())
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
        let AmqpTransport {
            listener,
            tls,
            mut streams,
            sender,
            authorizer,
            options,
            stats,
            namespaces,
        } = *self;
        // Only other front ends' senders keep the channel open.
        drop(sender);
        let cx = Arc::new(ConnectionContext {
            broker,
            namespaces,
            namespace: None,
            authorizer,
            container_id: "ironbus".to_owned(),
            max_write_buffer: options.max_write_buffer,
            write_stall_timeout: options.write_stall_timeout,
            stats,
        });
        let mut admission = Admission {
            cx,
            counter: ConnectionCounter::new(options.limits),
            refusing: Arc::new(AtomicUsize::new(0)),
            handshake_timeout: options.tls_handshake_timeout,
            shutdown: shutdown.clone(),
            connections: tokio::task::JoinSet::new(),
        };
        let (tls_listener, acceptor) = match tls {
            Some((listener, acceptor)) => (Some(listener), Some(acceptor)),
            None => (None, None),
        };
        let mut streams_open = true;
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => admission.admit(Incoming::Tcp(stream), peer),
                    Err(e) => tracing::warn!(error = %e, "accept failed"),
                },
                accepted = accept_opt(tls_listener.as_ref()) => match (accepted, &acceptor) {
                    (Ok((stream, peer)), Some(acceptor)) => {
                        admission.admit(Incoming::Tls(stream, acceptor.clone()), peer);
                    }
                    (Ok(_), None) => {}
                    (Err(e), _) => tracing::warn!(error = %e, "tls accept failed"),
                },
                handed = streams.recv(), if streams_open => match handed {
                    Some((stream, peer)) => admission.admit(Incoming::Stream(stream), peer),
                    None => streams_open = false,
                },
                Some(_) = admission.connections.join_next(), if !admission.connections.is_empty() => {}
                () = shutdown.wait() => break,
            }
        }
        // Connections see the same shutdown signal and close themselves.
        while admission.connections.join_next().await.is_some() {}
        Ok(())
    }
}

/// Accepts on the listener if there is one; never finishes otherwise.
async fn accept_opt(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// A connection as it arrived, before its stream is ready for AMQP.
enum Incoming {
    Tcp(TcpStream),
    /// Not yet through its TLS handshake.
    Tls(TcpStream, TlsAcceptor),
    Stream(Box<dyn AmqpStream>),
}

type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

impl Incoming {
    /// The stream's halves, after the TLS handshake if it has one (`None`: the handshake
    /// failed or took longer than `handshake_timeout`).
    async fn open(self, handshake_timeout: Duration) -> Option<(ReadHalf, WriteHalf)> {
        match self {
            Incoming::Tcp(stream) => {
                let _ = stream.set_nodelay(true);
                let (read, write) = stream.into_split();
                Some((Box::new(read), Box::new(write)))
            }
            Incoming::Tls(stream, acceptor) => {
                let _ = stream.set_nodelay(true);
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let (read, write) = tokio::io::split(stream);
                        Some((Box::new(read), Box::new(write)))
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "amqp tls handshake failed");
                        None
                    }
                    Err(_) => {
                        tracing::debug!("amqp tls handshake timed out");
                        None
                    }
                }
            }
            Incoming::Stream(stream) => {
                let (read, write) = tokio::io::split(stream);
                Some((Box::new(read), Box::new(write)))
            }
        }
    }
}

/// The accept loop's side of every connection: the permit, then the connection's task.
struct Admission {
    cx: Arc<ConnectionContext>,
    counter: Arc<ConnectionCounter>,
    refusing: Arc<AtomicUsize>,
    handshake_timeout: Duration,
    shutdown: Shutdown,
    connections: tokio::task::JoinSet<()>,
}

impl Admission {
    fn admit(&mut self, incoming: Incoming, peer: SocketAddr) {
        let handshake_timeout = self.handshake_timeout;
        match self.counter.try_acquire(peer.ip()) {
            Ok(permit) => {
                let (cx, mut shutdown) = (self.cx.clone(), self.shutdown.clone());
                self.connections.spawn(async move {
                    cx.stats.connections.fetch_add(1, Ordering::Relaxed);
                    let opened = tokio::select! {
                        opened = incoming.open(handshake_timeout) => opened,
                        () = shutdown.wait() => None,
                    };
                    if let Some(halves) = opened {
                        connection::serve(halves, Some(peer), cx.clone(), shutdown).await;
                    }
                    cx.stats.connections.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
            Err(limit) => {
                self.cx.stats.refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, %limit, "connection refused");
                // Answering costs a task and a socket for a few seconds: only so many at once,
                // the rest are closed unanswered.
                if self.refusing.fetch_add(1, Ordering::AcqRel) < MAX_REFUSING {
                    let (cx, refusing) = (self.cx.clone(), self.refusing.clone());
                    let shutdown = self.shutdown.clone();
                    self.connections.spawn(async move {
                        let refusal = async {
                            if let Some(halves) = incoming.open(handshake_timeout).await {
                                connection::refuse(halves, cx, shutdown, limit.to_string()).await;
                            }
                        };
                        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, refusal).await;
                        refusing.fetch_sub(1, Ordering::AcqRel);
                    });
                } else {
                    self.refusing.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }
}
