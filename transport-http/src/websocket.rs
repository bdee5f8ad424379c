//! AMQP over WebSockets, as Service Bus serves it: `GET /$servicebus/websocket` with the
//! `AMQPWSB10` subprotocol (RFC 6455, version 13). This module answers the upgrade and turns the
//! upgraded connection into a plain byte stream ([`WebSocketStream`]: the payload of binary
//! messages in, binary messages out), which it hands to the server's [`WebSocketHook`] — the
//! AMQP transport then serves it like any other connection. This crate knows nothing of AMQP.
//!
//! The SDKs treat the messages as a byte stream (a message may hold part of an AMQP frame or
//! several), so payload is passed on as it arrives, frame by frame, never assembled into whole
//! messages: what a message may cost is bounded by the AMQP transport's own frame limits, and
//! this layer allocates nothing per frame on the read side (a control frame's payload, at most
//! 125 bytes, sits in a fixed buffer). Pings are answered with pongs, a Close is answered with a
//! Close and ends the stream; a text frame, an unmasked client frame, reserved bits or opcodes
//! and broken fragmentation are protocol errors: the stream ends with an error, after a Close
//! with the status code that says why.
//!
//! **Architecture Invariant:** a length read from a frame header never sizes an allocation.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::{Buf, BytesMut};
use hyper_util::rt::TokioIo;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::HttpError;

/// Where Service Bus serves AMQP over WebSockets.
pub const PATH: &str = "/$servicebus/websocket";
/// The subprotocol the SDKs ask for.
pub const SUBPROTOCOL: &str = "AMQPWSB10";
/// RFC 6455's key suffix for `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The most payload one outgoing frame carries; a larger write becomes several frames.
const MAX_OUT_FRAME: usize = 64 * 1024;
/// Encoded frames waiting to be written beyond which writes wait.
const OUT_LIMIT: usize = MAX_OUT_FRAME;

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
            Ok(upgraded) => hook(WebSocketStream::new(TokioIo::new(upgraded)), peer),
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

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// Close status codes (RFC 6455 §7.4.1).
const CLOSE_NORMAL: u16 = 1000;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_UNSUPPORTED_DATA: u16 = 1003;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    /// Reading a frame header into `header`.
    Header,
    /// Passing on `payload_left` bytes of a data frame's payload.
    Payload,
    /// Reading a control frame's payload into `control`.
    Control,
    /// The peer sent a Close: the stream is at its end.
    Closed,
    /// A protocol error ended the stream.
    Failed,
}

/// A server-side WebSocket as a byte stream: reads yield the payload of the client's binary
/// messages, each write is sent as binary frames of at most 64 KiB.
#[derive(Debug)]
pub struct WebSocketStream<S> {
    inner: S,
    state: ReadState,
    header: [u8; 14],
    header_len: usize,
    opcode: u8,
    mask: [u8; 4],
    /// Payload bytes of the current frame already passed on (for the mask's phase).
    payload_done: u64,
    payload_left: u64,
    /// A fragmented data message is under way (continuation frames may follow).
    in_message: bool,
    control: [u8; 125],
    control_len: usize,
    control_read: usize,
    /// Encoded frames not yet written to `inner`.
    out: BytesMut,
    /// `out` holds a Pong or Close queued by the reading side.
    control_queued: bool,
    close_sent: bool,
    /// The writing side's task, woken when the reading side wrote what was waiting.
    write_waker: Option<Waker>,
}

impl<S> WebSocketStream<S> {
    /// Wraps a connection whose upgrade handshake is done.
    pub fn new(inner: S) -> Self {
        WebSocketStream {
            inner,
            state: ReadState::Header,
            header: [0; 14],
            header_len: 0,
            opcode: 0,
            mask: [0; 4],
            payload_done: 0,
            payload_left: 0,
            in_message: false,
            control: [0; 125],
            control_len: 0,
            control_read: 0,
            out: BytesMut::new(),
            control_queued: false,
            close_sent: false,
            write_waker: None,
        }
    }
}

/// Appends one unmasked (server) frame.
fn encode_frame(out: &mut BytesMut, opcode: u8, payload: &[u8]) {
    out.reserve(payload.len() + 10);
    out.extend_from_slice(&[0x80 | opcode]);
    match payload.len() {
        len @ 0..=125 => out.extend_from_slice(&[len as u8]),
        len @ 126..=0xFFFF => {
            out.extend_from_slice(&[126]);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.extend_from_slice(&[127]);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// How many header bytes a header starting with `first_two` has (mask key included).
fn header_size(first_two: [u8; 2]) -> usize {
    let extended = match first_two[1] & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if first_two[1] & 0x80 != 0 { 4 } else { 0 };
    2 + extended + mask
}

fn protocol_error(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("websocket: {reason}"))
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocketStream<S> {
    /// Writes what `out` holds. Pending while `inner` takes no more.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.out.advance(n),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.control_queued = false;
        Poll::Ready(Ok(()))
    }

    /// The reading side's push of a queued Pong or Close. Whatever it writes, the writing
    /// side may have been waiting for (the socket keeps one waker per direction, and this
    /// call may have replaced the writer's), so the writer is woken after any progress.
    fn push_control(&mut self, cx: &mut Context<'_>) {
        if !self.control_queued {
            return;
        }
        let before = self.out.len();
        let drained = self.poll_drain(cx);
        if self.out.len() != before || drained.is_ready() {
            if let Some(waker) = self.write_waker.take() {
                waker.wake();
            }
        }
    }

    fn queue_close(&mut self, code: u16, reason: &str) {
        if self.close_sent {
            return;
        }
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(&reason.as_bytes()[..reason.len().min(120)]);
        encode_frame(&mut self.out, OP_CLOSE, &payload);
        self.close_sent = true;
        self.control_queued = true;
    }

    /// Ends the stream with a protocol error, after queueing a Close that says why.
    fn fail(&mut self, cx: &mut Context<'_>, code: u16, reason: &str) -> io::Error {
        self.queue_close(code, reason);
        self.push_control(cx);
        self.state = ReadState::Failed;
        protocol_error(reason)
    }

    /// Reads from `inner` into `into`; `Ok(0)` at its end.
    fn poll_inner_read(
        &mut self,
        cx: &mut Context<'_>,
        into: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(into);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }

    /// Takes a complete header: the frame's kind, length and mask.
    fn start_frame(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let h = self.header;
        let (fin, rsv, opcode) = (h[0] & 0x80 != 0, h[0] & 0x70, h[0] & 0x0F);
        let masked = h[1] & 0x80 != 0;
        let (len, mask_at) = match h[1] & 0x7F {
            126 => (u64::from(u16::from_be_bytes([h[2], h[3]])), 4),
            127 => (u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]), 10),
            len => (u64::from(len), 2),
        };
        if rsv != 0 {
            return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "reserved bits set"));
        }
        if !masked {
            return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "client frames must be masked"));
        }
        if len >> 63 != 0 {
            return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "frame length out of range"));
        }
        self.mask.copy_from_slice(&h[mask_at..mask_at + 4]);
        self.opcode = opcode;
        self.header_len = 0;
        match opcode {
            OP_BINARY | OP_CONTINUATION => {
                if (opcode == OP_CONTINUATION) != self.in_message {
                    return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "broken fragmentation"));
                }
                self.in_message = !fin;
                self.payload_done = 0;
                self.payload_left = len;
                self.state = ReadState::Payload;
            }
            OP_TEXT => {
                return Err(self.fail(
                    cx,
                    CLOSE_UNSUPPORTED_DATA,
                    "text messages are not AMQP: send binary messages",
                ));
            }
            OP_CLOSE | OP_PING | OP_PONG => {
                if !fin || len > 125 {
                    return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "malformed control frame"));
                }
                self.control_len = len as usize;
                self.control_read = 0;
                self.state = ReadState::Control;
            }
            _ => return Err(self.fail(cx, CLOSE_PROTOCOL_ERROR, "unknown opcode")),
        }
        Ok(())
    }

    /// Acts on a complete control frame.
    fn end_control(&mut self, cx: &mut Context<'_>) {
        let len = self.control_len;
        for (i, byte) in self.control[..len].iter_mut().enumerate() {
            *byte ^= self.mask[i % 4];
        }
        self.state = ReadState::Header;
        match self.opcode {
            OP_PING if !self.close_sent => {
                let payload = self.control;
                encode_frame(&mut self.out, OP_PONG, &payload[..len]);
                self.control_queued = true;
                self.push_control(cx);
            }
            OP_CLOSE => {
                // Echo the status code (RFC 6455 §5.5.1), then the stream is at its end.
                let code = if len >= 2 {
                    u16::from_be_bytes([self.control[0], self.control[1]])
                } else {
                    CLOSE_NORMAL
                };
                self.queue_close(code, "");
                self.push_control(cx);
                self.state = ReadState::Closed;
            }
            _ => {}
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WebSocketStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.push_control(cx);
        loop {
            match this.state {
                ReadState::Closed => return Poll::Ready(Ok(())),
                ReadState::Failed => {
                    return Poll::Ready(Err(protocol_error("the stream ended with an error")))
                }
                ReadState::Header => {
                    let need = if this.header_len < 2 {
                        2
                    } else {
                        header_size([this.header[0], this.header[1]])
                    };
                    if this.header_len == need {
                        this.start_frame(cx)?;
                        continue;
                    }
                    let mut header = this.header;
                    let n = ready!(this.poll_inner_read(cx, &mut header[this.header_len..need]))?;
                    this.header = header;
                    if n == 0 {
                        if this.header_len == 0 && !this.in_message {
                            // The client went without a Close: the end of the stream.
                            this.state = ReadState::Closed;
                            return Poll::Ready(Ok(()));
                        }
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                    this.header_len += n;
                }
                ReadState::Payload => {
                    if this.payload_left == 0 {
                        this.state = ReadState::Header;
                        continue;
                    }
                    if buf.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    let want = usize::try_from(this.payload_left)
                        .unwrap_or(usize::MAX)
                        .min(buf.remaining());
                    let into = &mut buf.initialize_unfilled_to(want)[..want];
                    let mut read = ReadBuf::new(into);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
                    let got = read.filled().len();
                    if got == 0 {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                    let phase = (this.payload_done % 4) as usize;
                    for (i, byte) in into[..got].iter_mut().enumerate() {
                        *byte ^= this.mask[(phase + i) % 4];
                    }
                    buf.advance(got);
                    this.payload_done += got as u64;
                    this.payload_left -= got as u64;
                    if this.payload_left == 0 {
                        this.state = ReadState::Header;
                    }
                    return Poll::Ready(Ok(()));
                }
                ReadState::Control => {
                    if this.control_read == this.control_len {
                        this.end_control(cx);
                        continue;
                    }
                    let (from, to) = (this.control_read, this.control_len);
                    let mut control = this.control;
                    let n = ready!(this.poll_inner_read(cx, &mut control[from..to]))?;
                    this.control = control;
                    if n == 0 {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                    this.control_read += n;
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
        if this.out.len() >= OUT_LIMIT && this.poll_drain(cx)?.is_pending() {
            this.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = data.len().min(MAX_OUT_FRAME);
        encode_frame(&mut this.out, OP_BINARY, &data[..n]);
        // Sent now if the socket takes it; the rest goes with the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_drain(cx)?.is_pending() {
            this.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.queue_close(CLOSE_NORMAL, "");
        if this.poll_drain(cx)?.is_pending() {
            this.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
