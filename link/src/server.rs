//! The serving end: [`LinkServer`] accepts connections from peers and hands each admitted
//! call to the node's [`Handler`].
//!
//! One task accepts; one task per connection serves it (HTTP/2, hyper) and watches it:
//!
//! - at most [`LinkConfig::max_connections`] connections are open; one beyond is closed at once;
//! - a connection has [`FIRST_CALL_TIMEOUT`] from its accept (TLS handshake included) to bring
//!   a call with valid credentials, or it is closed: a peer without the secret cannot hold one;
//! - after that it is closed once it has carried no call for [`IDLE_TIMEOUT`], and HTTP/2
//!   pings find a peer that went away;
//! - a connection carries at most [`LinkConfig::max_concurrent_streams`] calls at once, and a
//!   request's headers at most [`MAX_HEADER_BYTES`].
//!
//! The submodule `call` answers one call: credentials, length, body, handler.

mod call;

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::admission::Admission;
use crate::{CallError, LinkConfig, PeerId};

/// How long a new connection has to bring its first admitted call (its "header-read timeout").
pub const FIRST_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may carry no call before the server closes it.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The most bytes of headers a request may have (HTTP/2's `SETTINGS_MAX_HEADER_LIST_SIZE`).
pub const MAX_HEADER_BYTES: u32 = 16 * 1024;
/// How long a closing connection gets to finish its calls (after [`LinkServer::shutdown`], or
/// when the watchdog closes it).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often HTTP/2 pings an idle peer, and how long it has to answer.
const KEEP_ALIVE: Duration = Duration::from_secs(20);
/// How long the accept loop waits after a failed accept (out of file descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a node does with the calls its peers make: the server's one upcall.
///
/// A call is handed over only once its credentials checked and its body was read whole and
/// matched its signed hash. The future may be dropped at any await point when the caller
/// gives up (its call timed out or its connection broke); a panic is caught and reaches the
/// caller as [`CallError::HANDLER_PANICKED`].
#[async_trait]
pub trait Handler: Send + Sync {
    /// Answers a call to `method` with `body` from the node `from` (the id the caller signed
    /// with): the reply's bytes, or an error the caller receives as
    /// [`LinkError::Remote`](crate::LinkError::Remote).
    async fn call(&self, from: &PeerId, method: &str, body: Bytes) -> Result<Bytes, CallError>;
}

/// What every connection of a server shares.
struct Shared {
    config: LinkConfig,
    admission: Admission,
    handler: Arc<dyn Handler>,
}

/// A running link server. [`shutdown`](Self::shutdown) stops it gracefully; dropping it stops
/// it at once (calls under way are cut off).
pub struct LinkServer {
    local_addr: SocketAddr,
    connections: Arc<Semaphore>,
    max_connections: usize,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for LinkServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkServer")
            .field("local_addr", &self.local_addr)
            .field("open_connections", &self.open_connections())
            .finish_non_exhaustive()
    }
}

impl LinkServer {
    /// Binds `addr` and starts serving calls to `handler` on the current tokio runtime. Fails
    /// only when the address cannot be bound.
    pub async fn bind(
        addr: SocketAddr,
        config: LinkConfig,
        handler: Arc<dyn Handler>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let max_connections = config.max_connections;
        let connections = Arc::new(Semaphore::new(max_connections));
        let (shutdown, stopping) = watch::channel(false);
        let tls = config.tls.as_ref().map(|tls| TlsAcceptor::from(tls.server.clone()));
        let shared =
            Arc::new(Shared { admission: Admission::new(config.secret.clone()), config, handler });
        let task = tokio::spawn(accept_loop(listener, tls, shared, connections.clone(), stopping));
        Ok(Self { local_addr, connections, max_connections, shutdown, task: Some(task) })
    }

    /// The address the server listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// How many connections are open now.
    pub fn open_connections(&self) -> usize {
        self.max_connections.saturating_sub(self.connections.available_permits())
    }

    /// Stops accepting, tells every peer to open no new calls on its connection (HTTP/2
    /// `GOAWAY`), lets the calls under way finish for up to 5 seconds, then closes what is
    /// left. The port is free when this returns.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LinkServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let serving = serve_connection(
                            stream, tls.clone(), shared.clone(), stopping.clone(),
                        );
                        connections.spawn(async move {
                            serving.await;
                            drop(permit);
                        });
                    }
                    Err(_) => tracing::debug!(%peer, "link connection refused: at the limit"),
                },
                Err(error) => {
                    tracing::warn!(%error, "link accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopping.changed() => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    stopping: watch::Receiver<bool>,
) {
    let accepted = Instant::now();
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_io(TokioIo::new(stream), accepted, shared, stopping).await,
        Some(acceptor) => {
            match tokio::time::timeout(FIRST_CALL_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_io(TokioIo::new(stream), accepted, shared, stopping).await,
                Ok(Err(error)) => tracing::debug!(%error, "link tls handshake failed"),
                Err(_) => tracing::debug!("link tls handshake timed out"),
            }
        }
    }
}

async fn serve_io<I>(
    io: TokioIo<I>,
    accepted: Instant,
    shared: Arc<Shared>,
    mut stopping: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new(accepted));
    let max_streams = shared.config.max_concurrent_streams;
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request| {
            let (shared, activity) = (shared.clone(), activity.clone());
            async move { Ok::<_, Infallible>(call::answer(&shared, &activity, request).await) }
        })
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(max_streams)
        .max_header_list_size(MAX_HEADER_BYTES)
        .keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(KEEP_ALIVE)
        .adaptive_window(true);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    loop {
        let deadline = activity.deadline();
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "link connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                if activity.expired() {
                    tracing::debug!("link connection closed: no call in time");
                    break;
                }
            }
            _ = stopping.changed() => break,
        }
    }
    connection.as_mut().graceful_shutdown();
    // A peer that stops reading must not hold the connection open.
    match tokio::time::timeout(DRAIN_TIMEOUT, connection).await {
        Ok(Err(error)) => tracing::debug!(%error, "link connection ended with an error"),
        Ok(Ok(())) => {}
        Err(_) => tracing::debug!("link connection closed: calls did not finish in time"),
    }
}

/// What one connection has been doing, for its watchdog: the calls it carries now, whether
/// one was ever admitted, and since when it is idle.
#[derive(Debug)]
pub(crate) struct Activity {
    accepted: Instant,
    in_flight: AtomicUsize,
    admitted: AtomicBool,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn new(accepted: Instant) -> Self {
        Self {
            accepted,
            in_flight: AtomicUsize::new(0),
            admitted: AtomicBool::new(false),
            idle_since: Mutex::new(accepted),
        }
    }

    /// Counts a call under way until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Records that a call on this connection was admitted.
    pub(crate) fn admitted(&self) {
        self.admitted.store(true, Ordering::Release);
    }

    fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// When the watchdog should look again.
    fn deadline(&self) -> Instant {
        if !self.admitted.load(Ordering::Acquire) {
            self.accepted + FIRST_CALL_TIMEOUT
        } else if self.in_flight.load(Ordering::Acquire) > 0 {
            Instant::now() + IDLE_TIMEOUT
        } else {
            self.idle_since() + IDLE_TIMEOUT
        }
    }

    /// Whether the connection should be closed now.
    fn expired(&self) -> bool {
        let now = Instant::now();
        if !self.admitted.load(Ordering::Acquire) {
            return now >= self.accepted + FIRST_CALL_TIMEOUT;
        }
        self.in_flight.load(Ordering::Acquire) == 0 && now >= self.idle_since() + IDLE_TIMEOUT
    }
}

/// A call under way on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut idle_since =
            self.0.idle_since.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            *idle_since = Instant::now();
        }
    }
}
