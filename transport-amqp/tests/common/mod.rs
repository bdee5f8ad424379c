//! What the socket tests share: a broker on the memory store served by the AMQP transport on a
//! free loopback port, with the development SAS policy.

use std::net::SocketAddr;
use std::sync::Arc;

use ironbus_core::auth::Authorizer;
use ironbus_core::{
    shutdown_signal, Broker, ManualClock, NamespaceLimits, ShutdownTrigger, Transport,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;

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
