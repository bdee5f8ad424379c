//! ironbus-transport-http: Azure Service Bus's HTTP APIs, so the official admin clients and REST
//! clients work against ironbus unmodified.
//!
//! - The REST data plane ([`dataplane`]): send, batch send, peek-lock, receive-and-delete,
//!   unlock, complete, renew lock.
//! - The ATOM management API ([`atom`]): create / get / update / delete / list of queues,
//!   topics, subscriptions and rules with their runtime counts, and `$namespaceinfo`.
//! - AMQP over WebSockets ([`websocket`]): `GET /$servicebus/websocket` upgrades to a WebSocket
//!   whose binary messages carry AMQP; the byte stream goes to the server's hook
//!   ([`HttpConfig::websocket`]), which hands it to the AMQP transport.
//! - The web console ([`console`]) under `/$console/` on both listeners, unless
//!   [`HttpConfig::console`] is off: its page and a JSON API behind a sign-in of its own.
//! - Operator endpoints on the plain listener only: `/health` and `/metrics`, and whatever
//!   routes the embedding binary adds there ([`HttpConfig::plain_routes`]).
//!
//! Every API request carries a SAS token in its `Authorization` header, checked with the core's
//! [`Authorizer`] (the same rules as the AMQP transport's CBS).
//!
//! Two listeners: a plain one (REST, management, `/health`, `/metrics`) and a TLS one (REST,
//! management; rustls, the certificate from the server). [`routes`] turns a request into a
//! route (keywords matched from the right, what is left parsed by the core's address grammar);
//! [`service`] authorizes and serves it; [`error`] is the one mapping of broker errors to
//! statuses; [`timefmt`] the APIs' time formats; [`metrics`] this transport's metrics.
//!
//! Connection limits (`--max-connections`, `--max-connections-per-ip`, off by default; the
//! core's protocol-neutral counting, re-exported as `limits`) count the plain and TLS listeners
//! together. A connection over a limit is served by a router that answers every request 503
//! with Service Bus's error body naming the limit, `Connection: close` and `Retry-After: 1`.
//!
//! **Architecture Invariant:** protocol knowledge stays here; Service Bus semantics stay in the
//! core. This crate depends on no workspace crate but `ironbus-core`, and on no metrics exporter:
//! it records through the `metrics` facade under the names in [`metrics`], and the server hands
//! it a function that renders the exposition text (`ironbus-metrics` makes one).
//!
//! **Architecture Invariant:** bad input is answered with a 4xx status and a message (never a
//! 5xx, which makes the Python SDK retry for minutes, and never a panic); 5xx means the broker
//! itself cannot serve (a partition or store unavailable). A body over
//! [`HttpConfig::max_body_bytes`] is 413.

pub mod atom;
pub mod console;
pub mod dataplane;
pub mod error;
pub use ironbus_core::transport::limits;
pub mod metrics;
pub mod routes;
pub mod service;
pub mod timefmt;
pub mod websocket;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ironbus_core::auth::Authorizer;
use ironbus_core::transport::TransportError;
use ironbus_core::{Broker, Shutdown, Tier, Timestamp, Transport};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

pub use crate::error::HttpError;
use crate::limits::{ConnectionCounter, ConnectionLimits};
pub use crate::service::{router, App, Listener};
pub use crate::websocket::{WebSocket, WebSocketHook};

/// Renders the Prometheus exposition text for `/metrics`.
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// The largest request body accepted unless configured otherwise: room for a batch of
/// Standard-tier messages; larger bodies get 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// How long open connections get to finish after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many refused connections are being answered at once (per listener); beyond
/// it a refused connection is closed unanswered.
const MAX_REFUSING: usize = 64;
/// How long a refused connection gets to send its request and read the 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the HTTP front end needs besides the broker.
#[derive(Clone)]
pub struct HttpConfig {
    pub authorizer: Arc<Authorizer>,
    /// The namespace name `$namespaceinfo` reports.
    pub namespace: String,
    /// The namespace's tier: `$namespaceinfo` reports it, and it bounds the
    /// MaxMessageSizeInKilobytes an entity may be created or updated with.
    pub tier: Tier,
    /// When the namespace was created, as `$namespaceinfo` reports it.
    pub started_at: Timestamp,
    /// Request bodies over this many bytes are refused with 413.
    pub max_body_bytes: usize,
    /// Renders `/metrics`; without it `/metrics` is 404.
    pub metrics: Option<MetricsRender>,
    /// Routes of the embedding binary's own that the plain listener serves besides the API
    /// (operator or testing endpoints). Matched before the API's routing, without a SAS check
    /// and outside the request metrics; routes only (a fallback would shadow the API).
    pub plain_routes: Option<axum::Router>,
    /// Connection limits, counted over the plain and the TLS listener together (0: none).
    pub limits: ConnectionLimits,
    /// Serves AMQP over WebSockets: takes each connection upgraded on
    /// `/$servicebus/websocket`. Without it that path is 404.
    pub websocket: Option<WebSocketHook>,
    /// A cluster node's id: `/health` then also says where every partition runs.
    pub node_id: Option<String>,
    /// The namespaces served, when there are several: a request is to the one its `Host`
    /// selects ([`Namespaces`](ironbus_core::Namespaces)); the broker the transport serves is
    /// the default one.
    pub namespaces: Option<ironbus_core::Namespaces>,
    /// Serves the web console under `/$console/` on both listeners (on by default).
    pub console: bool,
}

impl HttpConfig {
    pub fn new(authorizer: Arc<Authorizer>) -> Self {
        Self {
            authorizer,
            namespace: "ironbus".to_owned(),
            tier: Tier::Standard,
            started_at: Timestamp::from_millis(0),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            metrics: None,
            plain_routes: None,
            limits: ConnectionLimits::default(),
            websocket: None,
            node_id: None,
            namespaces: None,
            console: true,
        }
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("namespace", &self.namespace)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("metrics", &self.metrics.is_some())
            .field("plain_routes", &self.plain_routes.is_some())
            .field("limits", &self.limits)
            .field("websocket", &self.websocket.is_some())
            .field("console", &self.console)
            .finish_non_exhaustive()
    }
}

/// The HTTP front end: a plain listener, a TLS listener, or both, on one broker.
pub struct HttpTransport {
    plain: Option<TcpListener>,
    tls: Option<(TcpListener, TlsAcceptor)>,
    config: Arc<HttpConfig>,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("plain", &self.plain_addr())
            .field("tls", &self.tls_addr())
            .finish()
    }
}

impl HttpTransport {
    /// Binds the listeners now, so the caller learns at once if an address is taken and the real
    /// ports when it asked for port 0.
    pub async fn bind(
        plain: Option<SocketAddr>,
        tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
        config: HttpConfig,
    ) -> std::io::Result<Self> {
        let plain = match plain {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let tls = match tls {
            Some((addr, server_config)) => {
                Some((TcpListener::bind(addr).await?, TlsAcceptor::from(server_config)))
            }
            None => None,
        };
        Ok(Self { plain, tls, config: Arc::new(config) })
    }

    pub fn plain_addr(&self) -> Option<SocketAddr> {
        self.plain.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }
}

#[async_trait]
impl Transport for HttpTransport {
    fn name(&self) -> &'static str {
        "http"
    }

    async fn serve(
        self: Box<Self>,
        broker: Broker,
        shutdown: Shutdown,
    ) -> Result<(), TransportError> {
        let mut listeners = tokio::task::JoinSet::new();
        let counter = ConnectionCounter::new(self.config.limits);
        // One set of console sessions for both listeners.
        let sessions = self.config.console.then(|| Arc::new(console::session::Sessions::default()));
        if let Some(listener) = self.plain {
            let app = App {
                namespace: None,
                broker: broker.clone(),
                config: self.config.clone(),
                listener: Listener::Plain,
            };
            let sessions = sessions.clone();
            listeners.spawn(accept_loop(
                listener,
                None,
                app,
                sessions,
                counter.clone(),
                shutdown.clone(),
            ));
        }
        if let Some((listener, acceptor)) = self.tls {
            let app = App {
                namespace: None,
                broker,
                config: self.config.clone(),
                listener: Listener::Tls,
            };
            listeners.spawn(accept_loop(
                listener,
                Some(acceptor),
                app,
                sessions,
                counter,
                shutdown.clone(),
            ));
        }
        while listeners.join_next().await.is_some() {}
        Ok(())
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: App,
    sessions: Option<Arc<console::session::Sessions>>,
    counter: Arc<ConnectionCounter>,
    mut shutdown: Shutdown,
) {
    let websocket = app.config.websocket.clone();
    let extra = app.config.plain_routes.clone().filter(|_| app.listener == Listener::Plain);
    let console = sessions.map(|sessions| console::router(app.clone(), sessions));
    let mut router = router(app);
    if let Some(console) = console {
        router = console.merge(router);
    }
    if let Some(extra) = extra {
        router = extra.merge(router);
    }
    if let Some(hook) = websocket {
        // An upgrade leaves this listener: the connection's permit goes with hyper's side of it,
        // and the AMQP transport counts the stream under its own limits.
        let upgrade = axum::Router::new()
            .route(websocket::PATH, axum::routing::any(websocket::upgrade))
            .with_state(hook);
        router = upgrade.merge(router);
    }
    let refusing = Arc::new(AtomicUsize::new(0));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match counter.try_acquire(peer.ip()) {
                    Ok(permit) => {
                        let serving = serve_connection(stream, peer, tls.clone(), router.clone(), shutdown.clone());
                        connections.spawn(async move {
                            serving.await;
                            drop(permit);
                        });
                    }
                    Err(limit) => {
                        ::metrics::counter!(crate::metrics::CONNECTIONS_REFUSED_TOTAL).increment(1);
                        tracing::debug!(%peer, %limit, "http connection refused");
                        if refusing.fetch_add(1, Ordering::AcqRel) < MAX_REFUSING {
                            let refusal = refusal_router(limit.to_string());
                            let (tls, refusing) = (tls.clone(), refusing.clone());
                            let shutdown = shutdown.clone();
                            connections.spawn(async move {
                                let serving = serve_connection(stream, peer, tls, refusal, shutdown);
                                let _ = tokio::time::timeout(REFUSAL_TIMEOUT, serving).await;
                                refusing.fetch_sub(1, Ordering::AcqRel);
                            });
                        } else {
                            refusing.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                },
                Err(e) => tracing::warn!(error = %e, "http accept failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = shutdown.wait() => break,
        }
    }
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        connections.abort_all();
    }
}

/// Answers every request of a refused connection with 503 (Service Bus's error body, the
/// limit named) and closes the connection after it.
fn refusal_router(detail: String) -> axum::Router {
    use axum::response::IntoResponse;
    axum::Router::new().fallback(move || {
        let detail = detail.clone();
        async move {
            let mut response =
                HttpError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, detail).into_response();
            let headers = response.headers_mut();
            headers.insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            headers
                .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
            response
        }
    })
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    router: axum::Router,
    shutdown: Shutdown,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_io(TokioIo::new(stream), peer, router, shutdown).await,
        Some(acceptor) => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_io(TokioIo::new(stream), peer, router, shutdown).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "tls handshake failed"),
                Err(_) => tracing::debug!("tls handshake timed out"),
            }
        }
    }
}

async fn serve_io<I>(io: TokioIo<I>, peer: SocketAddr, router: axum::Router, mut shutdown: Shutdown)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Handlers that need the client's address (the WebSocket upgrade) find it here.
    let router = tower::ServiceExt::map_request(
        router,
        move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(websocket::PeerAddr(peer));
            request
        },
    );
    let service = TowerToHyperService::new(router);
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "http connection ended with an error");
            }
        }
        () = shutdown.wait() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}
