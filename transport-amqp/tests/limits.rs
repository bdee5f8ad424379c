//! Connection limits (`--max-connections`, `--max-connections-per-ip`): a connection over a
//! limit is answered in AMQP's terms — our header, an Open and at once a Close with
//! `amqp:resource-limit-exceeded` naming the limit — and a closed connection gives its slot
//! back.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use ironbus_transport_amqp::limits::ConnectionLimits;
use ironbus_transport_amqp::{AmqpOptions, AmqpStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use common::raw;

fn options(max_connections: usize, max_connections_per_ip: usize) -> AmqpOptions {
    AmqpOptions {
        limits: ConnectionLimits { max_connections, max_connections_per_ip },
        ..AmqpOptions::default()
    }
}

/// Connects from `from` (any loopback address) and sends our header and an Open.
async fn connect_from(addr: SocketAddr, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(raw::AMQP_HEADER).await.unwrap();
    stream.write_all(&raw::open()).await.unwrap();
    stream
}

/// A served connection: the header and an Open come back, and nothing after them.
async fn assert_served(stream: &mut TcpStream, what: &str) {
    let mut header = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut header))
        .await
        .unwrap_or_else(|_| panic!("{what}: no header"))
        .unwrap();
    assert_eq!(&header, raw::AMQP_HEADER, "{what}");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize - 4];
    stream.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest[4..7], &[0x00, 0x53, 0x10], "{what}: an open performative");
    let mut more = [0u8; 64];
    match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut more)).await {
        Err(_) => {}
        Ok(r) => panic!("{what}: a served connection got more than its Open: {r:?} {more:02x?}"),
    }
}

/// A refused connection: closed by the server after a Close with
/// `amqp:resource-limit-exceeded` and a description containing `names`.
async fn assert_refused(stream: &mut TcpStream, names: &str, what: &str) {
    let bytes = common::read_to_close(stream, what).await;
    assert!(bytes.starts_with(raw::AMQP_HEADER), "{what}: {bytes:02x?}");
    assert!(common::has_close_with_error(&bytes), "{what}: no close with an error");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("amqp:resource-limit-exceeded"), "{what}: {text}");
    assert!(text.contains(names), "{what}: the description names {names}: {text}");
}

async fn wait_for_connections(stats: &Arc<AmqpStats>, n: usize) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while stats.connections.load(Ordering::SeqCst) != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {n} connections"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_connection_over_a_limit_of_two_is_refused_and_a_closed_one_frees_its_slot() {
    let (addr, _trigger, stats) =
        common::serve_with(common::memory_broker().await, options(2, 0)).await;
    let mut first = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut first, "first").await;
    let mut second = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut second, "second").await;

    let mut third = connect_from(addr, "127.0.0.1").await;
    assert_refused(&mut third, "--max-connections", "third").await;
    assert_eq!(stats.refused.load(Ordering::SeqCst), 1);
    assert_eq!(stats.connections.load(Ordering::SeqCst), 2);

    // An SDK (fe2o3, through SASL PLAIN) sees the refusal as the remote closing with the
    // condition: the Open exchange completes, then the Close arrives.
    let url = format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}");
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        match fe2o3_amqp::Connection::open("refused", url.as_str()).await {
            Ok(mut connection) => connection.on_close().await.err(),
            Err(OpenError::RemoteClosedWithError(error)) => {
                Some(fe2o3_amqp::connection::Error::RemoteClosedWithError(error))
            }
            Err(other) => panic!("open failed otherwise: {other:?}"),
        }
    })
    .await
    .expect("hung");
    match closed {
        Some(fe2o3_amqp::connection::Error::RemoteClosedWithError(error)) => {
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded),
                "{error:?}"
            );
            assert!(error.description.is_some_and(|d| d.contains("--max-connections")));
        }
        other => panic!("expected the remote's close with an error, got {other:?}"),
    }

    // Closing one gives its slot back.
    drop(first);
    wait_for_connections(&stats, 1).await;
    let mut fourth = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut fourth, "fourth, after the first closed").await;
    let mut fifth = connect_from(addr, "127.0.0.1").await;
    assert_refused(&mut fifth, "--max-connections", "fifth").await;
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_ip_limit_counts_each_address_alone() {
    let (addr, _trigger, stats) =
        common::serve_with(common::memory_broker().await, options(0, 1)).await;
    let mut first = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut first, "first from 127.0.0.1").await;
    let mut second = connect_from(addr, "127.0.0.1").await;
    assert_refused(&mut second, "--max-connections-per-ip", "second from 127.0.0.1").await;
    // Another client address has its own allowance.
    let mut other = connect_from(addr, "127.0.0.2").await;
    assert_served(&mut other, "first from 127.0.0.2").await;
    assert_eq!(stats.connections.load(Ordering::SeqCst), 2);
    drop(first);
    wait_for_connections(&stats, 1).await;
    let mut again = connect_from(addr, "127.0.0.1").await;
    assert_served(&mut again, "127.0.0.1 after its connection closed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_never_exceed_the_limit() {
    let (addr, _trigger, stats) =
        common::serve_with(common::memory_broker().await, options(5, 0)).await;
    let attempts: Vec<_> = (0..40)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = connect_from(addr, "127.0.0.1").await;
                let bytes = {
                    let mut all = Vec::new();
                    let mut buf = [0u8; 1024];
                    // A refusal is closed at once; a served connection stays open.
                    while let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf))
                            .await
                    {
                        if n == 0 {
                            break;
                        }
                        all.extend_from_slice(&buf[..n]);
                    }
                    all
                };
                let refused =
                    String::from_utf8_lossy(&bytes).contains("amqp:resource-limit-exceeded");
                (refused, stream)
            })
        })
        .collect();
    let mut served = Vec::new();
    let mut refused = 0;
    for attempt in attempts {
        let (was_refused, stream) = attempt.await.unwrap();
        if was_refused {
            refused += 1;
        } else {
            served.push(stream);
        }
    }
    assert_eq!(served.len(), 5, "exactly the limit is served");
    assert_eq!(refused, 35);
    assert_eq!(stats.connections.load(Ordering::SeqCst), 5);
    drop(served);
    wait_for_connections(&stats, 0).await;
}
