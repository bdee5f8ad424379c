//! Garbage, truncated and oversized input closes the offending connection with an AMQP error
//! (or, before the protocol is agreed, by closing the socket), never panics the server, and
//! never disturbs other connections.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use ironbus_core::ShutdownTrigger;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start() -> (SocketAddr, ShutdownTrigger) {
    common::serve(common::memory_broker().await).await
}

/// An Open performative frame (container id "t"), hand-encoded.
fn open_frame() -> Vec<u8> {
    // open = described(0x10) list [container-id "t"]
    let body = [0x00, 0x53, 0x10, 0xc0, 0x04, 0x01, 0xa1, 0x01, b't'];
    let size = 8 + body.len() as u32;
    let mut frame = size.to_be_bytes().to_vec();
    frame.extend_from_slice(&[2, 0, 0, 0]);
    frame.extend_from_slice(&body);
    frame
}

/// A well-behaved handshake: our header and Open are answered with a header and an Open.
async fn handshake_works(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    stream.write_all(&open_frame()).await.unwrap();
    let mut header = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut header))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize - 4];
    stream.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest[4..7], &[0x00, 0x53, 0x10], "an open performative");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_the_connection_with_an_error() {
    let (addr, _trigger) = start().await;
    let mut healthy = TcpStream::connect(addr).await.unwrap();
    healthy.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    healthy.write_all(&open_frame()).await.unwrap();

    let after_open: Vec<(&str, Vec<u8>)> = vec![
        ("garbage frame body", vec![0, 0, 0, 12, 2, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]),
        ("frame size below 8", vec![0, 0, 0, 5, 2, 0, 0, 0]),
        ("data offset past the frame", vec![0, 0, 0, 8, 9, 0, 0, 0]),
        ("oversized frame", vec![0x7f, 0, 0, 0, 2, 0, 0, 0]),
        ("unknown frame type", vec![0, 0, 0, 9, 2, 9, 0, 0, 1]),
        ("truncated performative", vec![0, 0, 0, 11, 2, 0, 0, 0, 0x00, 0x53, 0x11]),
    ];
    for (name, bytes) in after_open {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        stream.write_all(&open_frame()).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let received = common::read_to_close(&mut stream, name).await;
        assert!(
            common::has_close_with_error(&received),
            "{name}: expected close(error), got {received:02x?}"
        );
        handshake_works(addr).await;
    }

    let before_open: Vec<(&str, Vec<u8>)> = vec![
        ("http request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("wrong protocol version", b"AMQP\x00\x02\x00\x00".to_vec()),
        ("tls header", b"AMQP\x02\x01\x00\x00".to_vec()),
        ("truncated header", b"AMQ".to_vec()),
        (
            "sasl garbage",
            b"AMQP\x03\x01\x00\x00\x00\x00\x00\x0c\x02\x01\x00\x00\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (name, bytes) in before_open {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let _ = stream.shutdown().await;
        let received = common::read_to_close(&mut stream, name).await;
        // Either nothing, or our own protocol header (AMQP 1.0 §2.2), then the close.
        assert!(received.is_empty() || received.starts_with(b"AMQP"), "{name}: {received:02x?}");
        handshake_works(addr).await;
    }

    // Random bytes after a valid handshake never take the server down.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..50 {
        let len = 1 + (seed % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        stream.write_all(&open_frame()).await.unwrap();
        let _ = stream.write_all(&bytes).await;
        let _ = stream.shutdown().await;
        let _ = common::read_to_close(&mut stream, "random bytes").await;
    }
    handshake_works(addr).await;

    // The first connection was never disturbed: it still answers.
    let mut header = [0u8; 8];
    healthy.read_exact(&mut header).await.unwrap();
    assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
}
