//! What the HTTP transport's test files share: a transport serving a broker on a free loopback
//! port, and one raw HTTP/1.1 exchange over a fresh connection.

use std::net::SocketAddr;
use std::time::Duration;

use ironbus_core::{shutdown_signal, Broker, ShutdownTrigger, Transport};
use ironbus_transport_http::{HttpConfig, HttpTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Serves `broker` with `config` over plain HTTP on a free loopback port until the returned
/// trigger is dropped or fired.
pub(crate) async fn serve(broker: Broker, config: HttpConfig) -> (SocketAddr, ShutdownTrigger) {
    let transport =
        HttpTransport::bind(Some("127.0.0.1:0".parse().unwrap()), None, config).await.unwrap();
    let addr = transport.plain_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    tokio::spawn(async move { Box::new(transport).serve(broker, shutdown).await });
    (addr, trigger)
}

/// Writes `request` (head and body, `Connection: close`) to `addr` and reads the whole answer.
#[allow(dead_code, reason = "limits.rs serves but makes its exchanges by hand")]
pub(crate) async fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
        .await
        .expect("the server answers")
        .unwrap();
    out
}
