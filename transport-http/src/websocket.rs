//! AMQP over WebSockets, as Service Bus serves it: `GET /$servicebus/websocket` with the
//! `AMQPWSB10` subprotocol (RFC 6455, version 13). This module checks and answers the upgrade
//! itself (refusals in Service Bus's terms: the subprotocol, the version, the key) and turns the
//! upgraded connection into a plain byte stream ([`WebSocketStream`]: the payload of binary
//! messages in, binary messages out), which it hands to the server's [`WebSocketHook`] — the
//! AMQP transport then serves it like any other connection. This crate knows nothing of AMQP.
//!
//! The frames are tungstenite's: it unmasks, reassembles fragments, answers pings and Closes, and
//! refuses what RFC 6455 forbids; this module only maps its messages onto a byte stream (the SDKs
//! treat the messages as one: a message may hold part of an AMQP frame or several) and says why
//! in a Close when it ends the stream — a text message (1003), a message over [`MAX_MESSAGE`]
//! (1009), any other protocol error (1002). `cargo bench -p ironbus-transport-http --bench
//! websocket` measures what this costs per message and per connection (BENCHMARKS.md).
//!
//! **Architecture Invariant:** a client can make a connection hold at most one message of
//! [`MAX_MESSAGE`] bytes: a frame header declaring more ends the stream before anything is read
//! or allocated for it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use hyper_util::rt::TokioIo;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::error::{Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;

use crate::HttpError;

/// Where Service Bus serves AMQP over WebSockets.
pub const PATH: &str = "/$servicebus/websocket";
/// The subprotocol the SDKs ask for.
pub const SUBPROTOCOL: &str = "AMQPWSB10";
/// RFC 6455's key suffix for `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The largest message (and frame) a client may send: four of the AMQP transport's largest
/// frames. The SDKs send one AMQP frame per message (rhea, the JavaScript SDK's AMQP library,
/// writes each frame with its own `send`).
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// The most payload one outgoing message carries; a larger write becomes several messages.
const MAX_OUT_MESSAGE: usize = 64 * 1024;
/// tungstenite's read buffer for one connection.
const READ_BUFFER: usize = 16 * 1024;

/// An upgraded connection as the hook gets it.
pub type WebSocket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;
/// Takes each upgraded WebSocket (and its peer's address) and serves it.
pub type WebSocketHook = Arc<dyn Fn(WebSocket, SocketAddr) + Send + Sync>;

/// The client's address, put into each request's extensions by the listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub SocketAddr);

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(ACCEPT_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Whether the comma-separated values of header `name` include `token`.
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|part| part.trim().eq_ignore_ascii_case(token))
}

/// The upgrade's checks; the client's key when they pass.
fn check(request: &Request) -> Result<String, HttpError> {
    if request.method() != Method::GET {
        return Err(HttpError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} is not allowed on {PATH}: a WebSocket upgrade is a GET", request.method()),
        ));
    }
    let headers = request.headers();
    if !has_token(headers, header::UPGRADE, "websocket")
        || !has_token(headers, header::CONNECTION, "upgrade")
    {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            format!("{PATH} serves AMQP over WebSockets only: the request asks for no upgrade"),
        ));
    }
    let version = headers.get(header::SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok());
    if version.map(str::trim) != Some("13") {
        return Err(HttpError::new(
            StatusCode::UPGRADE_REQUIRED,
            "only WebSocket version 13 is supported",
        ));
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|key| {
            base64::engine::general_purpose::STANDARD.decode(key).is_ok_and(|k| k.len() == 16)
        })
        .ok_or_else(|| {
            HttpError::new(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing or malformed")
        })?;
    if !has_token(headers, header::SEC_WEBSOCKET_PROTOCOL, SUBPROTOCOL) {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            format!("the WebSocket subprotocol {SUBPROTOCOL} is required"),
        ));
    }
    Ok(key.to_owned())
}

/// Answers the upgrade (101 with `AMQPWSB10`) and, once hyper has handed the connection over,
/// gives it to the hook as a [`WebSocketStream`].
pub(crate) async fn upgrade(State(hook): State<WebSocketHook>, mut request: Request) -> Response {
    let key = match check(&request) {
        Ok(key) => key,
        Err(error) => {
            let mut response = error.into_response();
            if response.status() == StatusCode::UPGRADE_REQUIRED {
                response
                    .headers_mut()
                    .insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
            }
            return response;
        }
    };
    let Some(on_upgrade) = request.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return HttpError::new(StatusCode::BAD_REQUEST, "this connection cannot be upgraded")
            .into_response();
    };
    let peer = request
        .extensions()
        .get::<PeerAddr>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |peer| peer.0);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => hook(WebSocketStream::new(TokioIo::new(upgraded)).await, peer),
            Err(e) => tracing::debug!(%peer, error = %e, "websocket upgrade failed"),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(SUBPROTOCOL));
    if let Ok(accept) = HeaderValue::from_str(&accept_key(&key)) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

/// tungstenite's limits and buffers for one connection: a message (and a frame) of at most
/// [`MAX_MESSAGE`], a small read buffer (a WebSocket connection is mostly idle), and writes
/// handed to the socket at once (the AMQP transport batches its own).
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// A server-side WebSocket as a byte stream: reads yield the payload of the client's binary
/// messages, each write is sent as one binary message of at most 64 KiB.
#[derive(Debug)]
pub struct WebSocketStream<S> {
    inner: tokio_tungstenite::WebSocketStream<S>,
    /// The unread rest of the last binary message.
    pending: Bytes,
    /// The reading side has ended: the peer closed, hung up, or broke the protocol.
    read_done: bool,
    /// This side's Close is queued: nothing more is written.
    close_sent: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocketStream<S> {
    /// Wraps a connection whose upgrade handshake is done.
    pub async fn new(inner: S) -> Self {
        let inner = tokio_tungstenite::WebSocketStream::from_raw_socket(
            inner,
            Role::Server,
            Some(config()),
        )
        .await;
        WebSocketStream { inner, pending: Bytes::new(), read_done: false, close_sent: false }
    }

    /// Ends the reading side with an error, after a Close with `code` that says why (sent if
    /// the socket takes it now: the connection is dropped next either way).
    fn fail(&mut self, cx: &mut Context<'_>, code: CloseCode, reason: String) -> io::Error {
        self.read_done = true;
        if !self.close_sent {
            self.close_sent = true;
            // A Close's reason is at most 123 bytes; cut on a character boundary.
            let mut end = reason.len().min(120);
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            let text = &reason[..end];
            let close = CloseFrame { code, reason: text.to_owned().into() };
            if let Poll::Ready(Ok(())) = self.inner.poll_ready_unpin(cx) {
                if self.inner.start_send_unpin(Message::Close(Some(close))).is_ok() {
                    let _ = self.inner.poll_flush_unpin(cx);
                }
            }
        }
        io::Error::new(io::ErrorKind::InvalidData, format!("websocket: {reason}"))
    }
}

/// A tungstenite error as the byte stream's: I/O errors as they are, a closed connection as a
/// broken pipe, anything else as invalid data.
fn io_error(error: WsError) -> io::Error {
    match error {
        WsError::Io(error) => error,
        WsError::ConnectionClosed | WsError::AlreadyClosed => io::ErrorKind::BrokenPipe.into(),
        other => io::Error::new(io::ErrorKind::InvalidData, format!("websocket: {other}")),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WebSocketStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending.split_to(n));
                if this.pending.is_empty() {
                    // Let go of tungstenite's read buffer, which it can then reuse.
                    this.pending = Bytes::new();
                }
                return Poll::Ready(Ok(()));
            }
            if this.read_done || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.inner.poll_next_unpin(cx)) {
                Some(Ok(Message::Binary(payload))) => this.pending = payload,
                // tungstenite has queued the Pong; the next read or write sends it.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    let reason = "text messages carry no AMQP".to_owned();
                    return Poll::Ready(Err(this.fail(cx, CloseCode::Unsupported, reason)));
                }
                Some(Ok(Message::Close(_))) => {
                    // The end of the stream; tungstenite's answering Close goes out now if the
                    // socket takes it.
                    this.read_done = true;
                    this.close_sent = true;
                    let _ = this.inner.poll_flush_unpin(cx);
                }
                // The peer hung up, between messages or within one: the end of the stream (a
                // cut-off AMQP frame is the AMQP transport's to judge).
                None
                | Some(Err(
                    WsError::ConnectionClosed
                    | WsError::AlreadyClosed
                    | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake),
                )) => this.read_done = true,
                Some(Err(WsError::Io(error))) => {
                    this.read_done = true;
                    return Poll::Ready(Err(error));
                }
                Some(Err(error @ WsError::Capacity(_))) => {
                    return Poll::Ready(Err(this.fail(cx, CloseCode::Size, error.to_string())));
                }
                Some(Err(error)) => {
                    return Poll::Ready(Err(this.fail(cx, CloseCode::Protocol, error.to_string())));
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WebSocketStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(this.inner.poll_ready_unpin(cx)).map_err(io_error)?;
        let n = data.len().min(MAX_OUT_MESSAGE);
        let message = Message::Binary(Bytes::copy_from_slice(&data[..n]));
        this.inner.start_send_unpin(message).map_err(io_error)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner.poll_flush_unpin(cx).map_err(io_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_sent {
            ready!(this.inner.poll_ready_unpin(cx)).map_err(io_error)?;
            let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
            this.inner.start_send_unpin(Message::Close(Some(close))).map_err(io_error)?;
            this.close_sent = true;
        }
        match ready!(this.inner.poll_close_unpin(cx)) {
            Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Poll::Ready(Ok(())),
            Err(error) => Poll::Ready(Err(io_error(error))),
        }
    }
}

#[cfg(test)]
mod tests;
