//! The calling end: [`LinkClient`], one per peer, one HTTP/2 connection under it.
//!
//! The connection is opened by the first call and shared by every clone; once it is closed
//! (the peer restarted, went away, or closed it when idle) the next call opens a new one.
//! Concurrent calls share the connection as HTTP/2 streams; beyond the peer's stream limit
//! they wait for one. HTTP/2 pings find a peer that vanished without closing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http2::SendRequest;
use hyper::header::{HeaderValue, CONTENT_LENGTH};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::wire::{self, Credentials};
use crate::{CallError, LinkConfig, LinkError};

/// How often HTTP/2 pings the peer, and how long it has to answer.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// How many times a call is sent at most, when the peer did not process the earlier ones.
const MAX_ATTEMPTS: u32 = 3;

type Sender = SendRequest<Full<Bytes>>;

/// Calls one peer. Cheap to clone: clones share the configuration and the connection.
#[derive(Clone)]
pub struct LinkClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// `host:port`.
    peer: String,
    config: LinkConfig,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// The open connection, if any; locked while one is being opened, so calls share it.
    connection: tokio::sync::Mutex<Option<Sender>>,
}

impl fmt::Debug for LinkClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkClient")
            .field("peer", &self.inner.peer)
            .field("node_id", &self.inner.config.node_id)
            .field("tls", &self.inner.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl LinkClient {
    /// A client of the peer at `peer` (`host:port`, or a `SocketAddr`), calling as
    /// `config.node_id`. Connects on the first call, not here.
    pub fn new(peer: impl ToString, config: LinkConfig) -> Self {
        let tls = config
            .tls
            .as_ref()
            .map(|tls| (TlsConnector::from(tls.client.clone()), tls.server_name.clone()));
        Self {
            inner: Arc::new(Inner {
                peer: peer.to_string(),
                config,
                tls,
                connection: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The peer this client calls, as given to [`new`](Self::new).
    pub fn peer(&self) -> &str {
        &self.inner.peer
    }

    /// Calls `method` on the peer with `body` and returns the reply's bytes.
    ///
    /// The whole call, connecting included, is bounded by
    /// [`LinkConfig::call_timeout`]. A body over [`LinkConfig::max_request_bytes`] is refused
    /// here ([`LinkError::TooLarge`]) without being sent; a method outside
    /// [`wire::method_is_valid`] is a [`LinkError::Protocol`]. See [`LinkError`] for what
    /// each failure means and which are retriable.
    pub async fn call(&self, method: &str, body: Bytes) -> Result<Bytes, LinkError> {
        if !wire::method_is_valid(method) {
            return Err(LinkError::protocol(format!("invalid method name {method:?}")));
        }
        let limit = self.inner.config.max_request_bytes;
        if body.len() > limit {
            return Err(LinkError::TooLarge { limit: Some(limit) });
        }
        tokio::time::timeout(self.inner.config.call_timeout, self.call_once(method, body))
            .await
            .unwrap_or(Err(LinkError::Timeout))
    }

    async fn call_once(&self, method: &str, body: Bytes) -> Result<Bytes, LinkError> {
        let credentials = Credentials::new(self.inner.config.node_id.clone(), &body);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut sender = self.sender().await?;
            let request = self.request(method, &credentials, body.clone())?;
            match sender.send_request(request).await {
                Ok(response) => return self.read_reply(&credentials, response).await,
                // The peer never processed the call (see `unprocessed`): it has not seen the
                // nonce, so the same request may go again, on a new connection if need be.
                Err(error) if unprocessed(&error) && attempts < MAX_ATTEMPTS => {
                    tracing::debug!(peer = %self.inner.peer, %error, "link call sent again");
                }
                Err(error) => return Err(LinkError::connection_lost(error)),
            }
        }
    }

    /// The open connection, or a new one.
    async fn sender(&self) -> Result<Sender, LinkError> {
        let mut slot = self.inner.connection.lock().await;
        if let Some(sender) = slot.as_ref().filter(|sender| !sender.is_closed()) {
            return Ok(sender.clone());
        }
        *slot = None;
        let sender = self.connect().await?;
        *slot = Some(sender.clone());
        Ok(sender)
    }

    async fn connect(&self) -> Result<Sender, LinkError> {
        let peer = &self.inner.peer;
        let stream = TcpStream::connect(peer.as_str())
            .await
            .map_err(|error| LinkError::unreachable(format!("connecting to {peer}: {error}")))?;
        let _ = stream.set_nodelay(true);
        match &self.inner.tls {
            None => handshake(TokioIo::new(stream)).await,
            Some((connector, name)) => {
                let stream = connector.connect(name.clone(), stream).await.map_err(|error| {
                    LinkError::unreachable(format!("tls handshake with {peer}: {error}"))
                })?;
                handshake(TokioIo::new(stream)).await
            }
        }
    }

    fn request(
        &self,
        method: &str,
        credentials: &Credentials,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, LinkError> {
        let scheme = if self.inner.tls.is_some() { "https" } else { "http" };
        let uri = format!("{scheme}://{}{}{method}", self.inner.peer, wire::PATH_PREFIX);
        let uri = uri
            .parse()
            .map_err(|error| LinkError::protocol(format!("peer address {uri:?}: {error}")))?;
        let length = HeaderValue::from(body.len());
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(CONTENT_LENGTH, length);
        credentials.write(&self.inner.config.secret, method, headers);
        Ok(request)
    }

    async fn read_reply(
        &self,
        credentials: &Credentials,
        response: Response<hyper::body::Incoming>,
    ) -> Result<Bytes, LinkError> {
        let (parts, body) = response.into_parts();
        let status = parts.status.as_u16();
        let limit = self.inner.config.max_reply_bytes;
        let body = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(LinkError::protocol(format!("reply over {limit} bytes")));
            }
            Err(error) => return Err(LinkError::connection_lost(error)),
        };
        let code = match status {
            200 => "",
            wire::REMOTE_ERROR => wire::header(&parts.headers, wire::ERROR_CODE)
                .filter(|code| CallError::code_is_valid(code))
                .ok_or_else(|| LinkError::protocol("remote error without a valid code"))?,
            _ => return Err(wire::unsigned_reply_error(status, &body)),
        };
        let secret = &self.inner.config.secret;
        if !wire::reply_is_signed(secret, &credentials.nonce, status, code, &body, &parts.headers) {
            return Err(LinkError::protocol("reply signature does not check"));
        }
        if status == 200 {
            Ok(body)
        } else {
            let message = String::from_utf8_lossy(&body).into_owned();
            Err(LinkError::Remote { code: code.to_owned(), message })
        }
    }
}

/// Whether a failed request is one the peer never processed, so that sending it again cannot
/// run it twice: it never left (the connection closed first), or the peer refused its stream
/// (`RST_STREAM` with `REFUSED_STREAM`: over its stream limit; RFC 9113 §8.7). A stream cut
/// off by a `GOAWAY` does not count: h2 reports calls the peer did process the same way once
/// the connection closes under them.
fn unprocessed(error: &hyper::Error) -> bool {
    if error.is_canceled() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        if let Some(h2) = inner.downcast_ref::<h2::Error>() {
            return h2.is_reset()
                && h2.is_remote()
                && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        source = inner.source();
    }
    false
}

/// HTTP/2 with prior knowledge on `io`; the connection runs in a task of its own until it
/// closes or every sender is gone.
async fn handshake<I>(io: TokioIo<I>) -> Result<Sender, LinkError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(KEEP_ALIVE)
        .keep_alive_while_idle(true)
        // Until the peer's settings arrive its stream limit is unknown: one call at a time
        // rather than calls it refuses.
        .initial_max_send_streams(1)
        .adaptive_window(true)
        .handshake(io)
        .await
        .map_err(|error| LinkError::unreachable(format!("http/2 handshake: {error}")))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "link client connection ended with an error");
        }
    });
    Ok(sender)
}
