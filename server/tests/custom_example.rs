//! `examples/custom.rs` runs: its `start` (compiled here as a module; the example's `main` only
//! adds fixed ports and Ctrl-C) on free ports and a scratch RocksDB directory, then AMQP and
//! `/metrics` over real sockets.

#[allow(dead_code, unreachable_pub, reason = "its main is the example's; its start is pub there")]
#[path = "../examples/custom.rs"]
mod custom;

use std::net::SocketAddr;
use std::time::Duration;

use ironbus_core::testing::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_custom_example_serves_amqp_and_metrics_on_rocksdb() {
    let dir = TempDir::new("custom-example");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (server, amqp, http) = custom::start(dir.path(), any, any).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_until(async move {
        let _ = stopped.await;
        Ok::<_, ironbus::ServerError>(())
    }));

    let health = get(http, "/health").await;
    assert!(health.contains(r#""entities":1"#), "the declared queue: {health}");
    let _connection = TcpStream::connect(amqp).await.unwrap();
    let open = format!("\n{} 1\n", ironbus_metrics::amqp::CONNECTIONS_OPEN);
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = get(http, "/metrics").await;
        if metrics.contains(&open) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metrics.contains(&open), "{metrics}");
    // The earlier requests were recorded, in the catalogue's buckets.
    let bucket = r#"ironbus_http_request_duration_seconds_bucket{operation="health",le="0.0005"}"#;
    assert!(metrics.contains(bucket), "{metrics}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}
