//! Only a holder of the cluster secret gets a handler call: a wrong secret, no signature, an
//! altered body, a replayed call or a stale timestamp is refused (401, `LinkError::Refused`)
//! and the handler never runs.

mod common;

use bytes::Bytes;
use common::{config, secret, serve, CountingHandler, OTHER_SECRET, SECRET};
use hyper::header::HeaderMap;
use hyper::StatusCode;
use ironbus_link::wire::{self, Credentials};
use ironbus_link::{LinkClient, LinkConfig, LinkError, PeerId};

fn node(id: &str) -> PeerId {
    PeerId::new(id).unwrap()
}

/// The headers of a call to `method` from `node-a` with `credentials` signed under `key`.
fn signed(key: &[u8], method: &str, credentials: &Credentials) -> HeaderMap {
    let mut headers = HeaderMap::new();
    credentials.write(&secret(key), method, &mut headers);
    headers
}

fn echo_path() -> String {
    format!("{}echo", wire::PATH_PREFIX)
}

/// What the client makes of a refused reply (the function its `call` uses).
fn client_error(status: StatusCode, body: &Bytes) -> LinkError {
    wire::unsigned_reply_error(status.as_u16(), body)
}

fn assert_refused(status: StatusCode, body: &Bytes, handler: &CountingHandler) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body:?}");
    assert!(matches!(client_error(status, body), LinkError::Refused { .. }));
    assert_eq!(handler.calls(), 0, "the handler ran for a refused call");
}

#[tokio::test]
async fn a_client_with_another_secret_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    let stranger = LinkConfig::new(node("node-a"), secret(OTHER_SECRET));
    let client = LinkClient::new(server.local_addr(), stranger);
    let error = client.call("echo", Bytes::from_static(b"let me in")).await.unwrap_err();
    assert_eq!(error, LinkError::Refused { reason: "bad signature".to_owned() });
    assert!(!error.is_retriable());
    assert_eq!(handler.calls(), 0);
    // The same call with the cluster's secret goes through.
    let member = LinkClient::new(server.local_addr(), config("node-a"));
    assert_eq!(member.call("echo", Bytes::from_static(b"hi")).await.unwrap(), "hi");
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn an_unsigned_call_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    let (status, body) =
        common::send_raw(server.local_addr(), &echo_path(), HeaderMap::new(), "x".into(), true)
            .await;
    assert_refused(status, &body, &handler);
    // A signature with the other headers missing is no better.
    let credentials = Credentials::new(node("node-a"), b"x");
    let mut headers = signed(SECRET, "echo", &credentials);
    headers.remove(wire::NONCE);
    let (status, body) =
        common::send_raw(server.local_addr(), &echo_path(), headers, "x".into(), true).await;
    assert_refused(status, &body, &handler);
}

#[tokio::test]
async fn an_altered_body_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    let credentials = Credentials::new(node("node-a"), b"send 1 message");
    let headers = signed(SECRET, "echo", &credentials);
    let (status, body) = common::send_raw(
        server.local_addr(),
        &echo_path(),
        headers.clone(),
        Bytes::from_static(b"send 9 message"),
        true,
    )
    .await;
    assert_refused(status, &body, &handler);
    assert_eq!(body, "body does not match its signed hash");
    // Nor does a hash rewritten to fit the new body pass (a new call, with a nonce of its own):
    // the signature covers the hash.
    let credentials = Credentials::new(node("node-a"), b"send 1 message");
    let mut rehashed = signed(SECRET, "echo", &credentials);
    let fitting = signed(SECRET, "echo", &Credentials::new(node("node-a"), b"send 9 message"));
    rehashed.insert(wire::BODY_SHA256, fitting[wire::BODY_SHA256].clone());
    let (status, body) = common::send_raw(
        server.local_addr(),
        &echo_path(),
        rehashed,
        Bytes::from_static(b"send 9 message"),
        true,
    )
    .await;
    assert_refused(status, &body, &handler);
    assert_eq!(body, "bad signature");
}

#[tokio::test]
async fn a_call_to_another_method_than_signed_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    let credentials = Credentials::new(node("node-a"), b"x");
    let headers = signed(SECRET, "sleep", &credentials);
    let (status, body) =
        common::send_raw(server.local_addr(), &echo_path(), headers, "x".into(), true).await;
    assert_refused(status, &body, &handler);
    assert_eq!(body, "bad signature");
}

#[tokio::test]
async fn a_replayed_call_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    let credentials = Credentials::new(node("node-a"), b"once");
    let headers = signed(SECRET, "echo", &credentials);
    let addr = server.local_addr();
    let (status, body) =
        common::send_raw(addr, &echo_path(), headers.clone(), "once".into(), true).await;
    assert_eq!((status, body), (StatusCode::OK, Bytes::from_static(b"once")));
    assert_eq!(handler.calls(), 1);
    // The same bytes again, on a new connection: refused, and the handler ran once only.
    let (status, body) = common::send_raw(addr, &echo_path(), headers, "once".into(), true).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body, "replayed call");
    assert!(matches!(client_error(status, &body), LinkError::Refused { .. }));
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_stale_or_future_timestamp_is_refused() {
    let (server, handler) = serve(config("node-b")).await;
    for shift in [-61_000_i64, 61_000] {
        let mut credentials = Credentials::new(node("node-a"), b"x");
        credentials.timestamp_ms = credentials.timestamp_ms.checked_add_signed(shift).unwrap();
        let headers = signed(SECRET, "echo", &credentials);
        let (status, body) =
            common::send_raw(server.local_addr(), &echo_path(), headers, "x".into(), true).await;
        assert_refused(status, &body, &handler);
        assert_eq!(body, "timestamp outside the clock window");
    }
}

#[tokio::test]
async fn an_unsigned_call_is_refused_before_its_body_is_read() {
    // A body over the limit, unsigned: the answer is 401 (not 413), so nothing of it was read.
    let mut server_config = config("node-b");
    server_config.max_request_bytes = 1024;
    let (server, handler) = serve(server_config).await;
    let body = Bytes::from(vec![0; 64 * 1024]);
    for declare_length in [true, false] {
        let (status, reply) = common::send_raw(
            server.local_addr(),
            &echo_path(),
            HeaderMap::new(),
            body.clone(),
            declare_length,
        )
        .await;
        assert_refused(status, &reply, &handler);
    }
}

#[tokio::test]
async fn the_handler_learns_the_signing_node() {
    let (server, handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    client.call("echo", Bytes::new()).await.unwrap();
    assert_eq!(*handler.callers.lock().unwrap(), vec![node("node-a")]);
}
