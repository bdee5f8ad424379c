//! What the socket tests share: a broker on the memory store served by the AMQP transport on a
//! free loopback port, with the development SAS policy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::auth::Authorizer;
use ironbus_core::{
    shutdown_signal, Broker, ManualClock, NamespaceLimits, ShutdownTrigger, Transport,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A broker on a fresh memory store with a manual clock.
pub async fn memory_broker() -> Broker {
    Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::default()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap()
}

/// Serves `broker` over AMQP until the trigger is dropped; returns the address it listens on.
pub async fn serve(broker: Broker) -> (SocketAddr, ShutdownTrigger) {
    let transport =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), Arc::new(Authorizer::development()))
            .await
            .unwrap();
    let addr = transport.local_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    tokio::spawn(Box::new(transport).serve(broker, shutdown));
    (addr, trigger)
}

/// Reads until the peer closes, returning everything received; fails the test (naming `what`)
/// if the server keeps the connection open for 10 s.
#[allow(dead_code, reason = "used by the malformed-input tests, not by every test binary")]
pub async fn read_to_close(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("{what}: the server kept the connection open: got {all:02x?}"),
        }
    }
}

/// Whether `bytes` hold a Close performative carrying an error.
#[allow(dead_code, reason = "used by the malformed-input tests, not by every test binary")]
pub fn has_close_with_error(bytes: &[u8]) -> bool {
    bytes.windows(3).any(|w| w == [0x00, 0x53, 0x18])
        && bytes.windows(3).any(|w| w == [0x00, 0x53, 0x1d])
}
