//! What the link's tests share: a handler that counts its calls, configurations, and a raw
//! HTTP/2 sender for calls the real client would never make.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use ironbus_link::{CallError, Handler, LinkConfig, LinkServer, PeerId, Secret};

pub const SECRET: &[u8] = b"the test cluster's shared secret";
pub const OTHER_SECRET: &[u8] = b"some other cluster's secret, too";

pub fn secret(bytes: &[u8]) -> Secret {
    Secret::new(bytes.to_vec()).unwrap()
}

pub fn config(node: &str) -> LinkConfig {
    LinkConfig::new(PeerId::new(node).unwrap(), secret(SECRET))
}

pub fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Methods: `echo` answers the body; `fail` answers a `CallError`; `panic` panics; `sleep`
/// sleeps as many milliseconds as the body says, then echoes; `wide` sleeps 20 ms while
/// counting how many calls are under way at once.
#[derive(Debug, Default)]
pub struct CountingHandler {
    pub calls: AtomicUsize,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub callers: Mutex<Vec<PeerId>>,
}

impl CountingHandler {
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Handler for CountingHandler {
    async fn call(&self, from: &PeerId, method: &str, body: Bytes) -> Result<Bytes, CallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.callers.lock().unwrap().push(from.clone());
        match method {
            "echo" => Ok(body),
            "fail" => Err(CallError::new("partition.unavailable", "partition 3 is moving")),
            "panic" => panic!("a bug in the handler"),
            "sleep" => {
                let millis = std::str::from_utf8(&body).unwrap().parse().unwrap();
                tokio::time::sleep(Duration::from_millis(millis)).await;
                Ok(body)
            }
            "wide" => {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(body)
            }
            other => Err(CallError::new("no-such-method", other)),
        }
    }
}

/// A server on 127.0.0.1 with `config`, and its handler.
pub async fn serve(config: LinkConfig) -> (LinkServer, Arc<CountingHandler>) {
    serve_at(localhost(), config).await
}

pub async fn serve_at(addr: SocketAddr, config: LinkConfig) -> (LinkServer, Arc<CountingHandler>) {
    let handler = Arc::new(CountingHandler::default());
    let server = LinkServer::bind(addr, config, handler.clone()).await.unwrap();
    (server, handler)
}

/// Sends one `POST {path}` with `headers` and `body` over a new HTTP/2 connection and returns
/// the status and body of the reply. Without `declare_length` the body goes in 64 KiB chunks
/// of unknown total length (no `content-length`).
pub async fn send_raw(
    addr: SocketAddr,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
    declare_length: bool,
) -> (StatusCode, Bytes) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let body: BoxBody<Bytes, Infallible> = if declare_length {
        Full::new(body).boxed()
    } else {
        let chunks: Vec<Result<Frame<Bytes>, Infallible>> = body
            .chunks(64 * 1024)
            .map(|chunk| Ok(Frame::data(Bytes::copy_from_slice(chunk))))
            .collect();
        StreamBody::new(futures_util::stream::iter(chunks)).boxed()
    };
    let mut request = Request::new(body);
    *request.method_mut() = Method::POST;
    *request.uri_mut() = format!("http://{addr}{path}").parse().unwrap();
    *request.headers_mut() = headers;
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}
