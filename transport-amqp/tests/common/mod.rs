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
#[allow(dead_code, reason = "not every test binary uses it")]
pub(crate) async fn memory_broker() -> Broker {
    Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::default()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap()
}

/// Serves `broker` over AMQP until the trigger is dropped; returns the address it listens on.
#[allow(dead_code, reason = "not every test binary uses it")]
pub(crate) async fn serve(broker: Broker) -> (SocketAddr, ShutdownTrigger) {
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
pub(crate) async fn read_to_close(stream: &mut TcpStream, what: &str) -> Vec<u8> {
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
pub(crate) fn has_close_with_error(bytes: &[u8]) -> bool {
    bytes.windows(3).any(|w| w == [0x00, 0x53, 0x18])
        && bytes.windows(3).any(|w| w == [0x00, 0x53, 0x1d])
}

/// Serves `broker` over AMQP with `options`; returns the address, the trigger and the
/// listener's counters.
#[allow(dead_code, reason = "used by the limit tests, not by every test binary")]
pub(crate) async fn serve_with(
    broker: Broker,
    options: ironbus_transport_amqp::AmqpOptions,
) -> (SocketAddr, ShutdownTrigger, Arc<ironbus_transport_amqp::AmqpStats>) {
    let transport = AmqpTransport::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Authorizer::development()),
        options,
    )
    .await
    .unwrap();
    let addr = transport.local_addr().unwrap();
    let stats = transport.stats();
    let (trigger, shutdown) = shutdown_signal();
    tokio::spawn(Box::new(transport).serve(broker, shutdown));
    (addr, trigger, stats)
}

/// A hand-driven AMQP client on a raw socket: it writes what a test tells it and reads only
/// when asked, so a test can play a client that stops reading.
#[allow(dead_code, reason = "used by the limit tests, not by every test binary")]
pub(crate) mod raw {
    use bytes::BytesMut;
    use fe2o3_amqp::frames::sasl;
    use fe2o3_amqp_types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
    use fe2o3_amqp_types::messaging::Source;
    use fe2o3_amqp_types::performatives::{Attach, Begin, Flow, Open, Performative};
    use fe2o3_amqp_types::primitives::{Binary, Symbol};
    use fe2o3_amqp_types::sasl::SaslInit;
    use ironbus_transport_amqp::frame;

    pub(crate) const SASL_HEADER: &[u8] = b"AMQP\x03\x01\x00\x00";
    pub(crate) const AMQP_HEADER: &[u8] = b"AMQP\x00\x01\x00\x00";

    /// SASL PLAIN with the development policy's key.
    pub(crate) fn sasl_init() -> Vec<u8> {
        let mut out = BytesMut::new();
        let response = b"\0RootManageSharedAccessKey\0SAS_KEY_VALUE".to_vec();
        let init = SaslInit {
            mechanism: Symbol::from("PLAIN"),
            initial_response: Some(Binary::from(response)),
            hostname: None,
        };
        frame::write_sasl(&mut out, &sasl::Frame::Init(init));
        out.to_vec()
    }

    pub(crate) fn performative(channel: u16, performative: Performative) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame::write_performative(&mut out, channel, &performative);
        out.to_vec()
    }

    pub(crate) fn open() -> Vec<u8> {
        performative(
            0,
            Performative::Open(Open {
                container_id: "raw".to_owned(),
                hostname: None,
                max_frame_size: 65536.into(),
                channel_max: 16.into(),
                idle_time_out: None,
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
        )
    }

    pub(crate) fn begin() -> Vec<u8> {
        performative(
            0,
            Performative::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 0,
                incoming_window: u32::MAX,
                outgoing_window: u32::MAX,
                handle_max: Handle(255),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
        )
    }

    /// A receiver link (handle 0) on `address`, peek-lock.
    pub(crate) fn attach_receiver(address: &str) -> Vec<u8> {
        performative(
            0,
            Performative::Attach(Attach {
                name: "raw-receiver".to_owned(),
                handle: Handle(0),
                role: Role::Receiver,
                snd_settle_mode: SenderSettleMode::Unsettled,
                rcv_settle_mode: ReceiverSettleMode::First,
                source: Some(Box::new(Source::builder().address(address.to_owned()).build())),
                target: None,
                unsettled: None,
                incomplete_unsettled: false,
                initial_delivery_count: None,
                max_message_size: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
        )
    }

    /// A flow: on link `handle` with `credit`, or (without a handle) the session's, asking for
    /// the broker's flow in return when `echo`.
    pub(crate) fn flow(handle: Option<u32>, credit: u32, echo: bool) -> Vec<u8> {
        performative(
            0,
            Performative::Flow(Flow {
                next_incoming_id: Some(0),
                incoming_window: u32::MAX,
                next_outgoing_id: 0,
                outgoing_window: u32::MAX,
                handle: handle.map(Handle),
                delivery_count: handle.map(|_| 0),
                link_credit: handle.map(|_| credit),
                available: None,
                drain: false,
                echo,
                properties: None,
            }),
        )
    }
}

#[allow(dead_code, reason = "used by the raw-frame tests, not by every test binary")]
pub(crate) mod raw_client;
