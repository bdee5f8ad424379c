//! Heartbeats: the broker sends empty frames on a silent connection.

mod common;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::raw;

/// A client that asked for no idle time-out still hears from the broker after 10 s of silence:
/// the Python SDK's keep-alive thread holds its socket lock while it waits to read, and a send
/// on the same connection waits for the next frame. Virtual time: the runtime's clock jumps to
/// each timer while every task waits.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_silent_connection_gets_an_empty_frame_within_ten_seconds() {
    let (addr, _trigger) = common::serve(common::memory_broker().await).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw::SASL_HEADER).await.unwrap();
    stream.write_all(&raw::sasl_init()).await.unwrap();
    stream.write_all(raw::AMQP_HEADER).await.unwrap();
    stream.write_all(&raw::open()).await.unwrap();
    // SASL header, mechanisms, outcome, AMQP header, open: everything before the silence.
    let started = tokio::time::Instant::now();
    let mut frames = Vec::new();
    let mut buffer = [0u8; 4096];
    let empty_frame = [0u8, 0, 0, 8, 2, 0, 0, 0];
    while !frames.windows(8).any(|w| w == empty_frame) {
        let n = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut buffer))
            .await
            .expect("no empty frame within 60 s")
            .unwrap();
        assert!(n > 0, "closed");
        frames.extend_from_slice(&buffer[..n]);
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(5) && waited <= Duration::from_secs(15), "{waited:?}");
}
