//! Connection limits on the HTTP listeners: a connection over `--max-connections` or
//! `--max-connections-per-ip` is answered 503 with Service Bus's error body naming the limit
//! and closed; a closed connection gives its slot back.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::auth::Authorizer;
use ironbus_core::{Broker, ManualClock, NamespaceLimits, ShutdownTrigger};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_http::limits::ConnectionLimits;
use ironbus_transport_http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn start(limits: ConnectionLimits) -> (SocketAddr, ShutdownTrigger) {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::default()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let mut config = HttpConfig::new(Arc::new(Authorizer::development()));
    config.limits = limits;
    common::serve(broker, config).await
}

async fn connect_from(addr: SocketAddr, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Sends `GET /health` and reads one response (by its Content-Length); returns the status line
/// and body, and whether the server closed the connection after it.
async fn health(stream: &mut TcpStream) -> (String, String, bool) {
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: ironbus\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Duration::from_secs(5);
    let (head_end, length) = loop {
        let n = tokio::time::timeout(deadline, stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before a response: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while got.len() < head_end + length {
        let n = tokio::time::timeout(deadline, stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let status = text.lines().next().unwrap().to_owned();
    let body = text[head_end..].to_owned();
    // Closed: the next read is the end (or a reset); open: nothing comes.
    let closed = matches!(
        tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    );
    (status, body, closed)
}

async fn assert_served(stream: &mut TcpStream, what: &str) {
    let (status, body, closed) = health(stream).await;
    assert!(status.contains(" 200 "), "{what}: {status} {body}");
    assert!(!closed, "{what}: a served connection stays open");
}

async fn assert_refused(stream: &mut TcpStream, names: &str, what: &str) {
    let (status, body, closed) = health(stream).await;
    assert!(status.contains(" 503 "), "{what}: {status} {body}");
    assert!(body.contains("<Code>503</Code>"), "{what}: {body}");
    assert!(body.contains(names), "{what}: the body names {names}: {body}");
    assert!(closed, "{what}: a refused connection is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_connection_over_a_limit_of_two_gets_503_and_a_closed_one_frees_its_slot() {
    let (addr, _trigger) =
        start(ConnectionLimits { max_connections: 2, max_connections_per_ip: 0 }).await;
    let mut first = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut first, "first").await;
    let mut second = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut second, "second").await;
    let mut third = connect_from(addr, "127.0.0.1").await;
    assert_refused(&mut third, "--max-connections", "third").await;
    drop(first);
    // The slot comes back once the server saw the close.
    let mut served = false;
    for _ in 0..100 {
        let mut next = connect_from(addr, "127.0.0.1").await;
        let (status, _, _) = health(&mut next).await;
        if status.contains(" 200 ") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the closed connection's slot never came back");
    assert_served(&mut second, "second, still open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_ip_limit_counts_each_address_alone() {
    let (addr, _trigger) =
        start(ConnectionLimits { max_connections: 0, max_connections_per_ip: 1 }).await;
    let mut first = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut first, "first from 127.0.0.1").await;
    let mut second = connect_from(addr, "127.0.0.1").await;
    assert_refused(&mut second, "--max-connections-per-ip", "second from 127.0.0.1").await;
    let mut other = connect_from(addr, "127.0.0.2").await;
    assert_served(&mut other, "first from 127.0.0.2").await;
}
