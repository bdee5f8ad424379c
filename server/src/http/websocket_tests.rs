//! AMQP over WebSockets end to end, wired as the server wires it: the HTTP transport upgrades
//! `/$servicebus/websocket`, the hook hands the stream to the AMQP transport, and an AMQP client
//! (fe2o3-amqp, through a small WebSocket client written here) sends and receives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::auth::Authorizer;
use ironbus_core::{shutdown_signal, Broker, QueueDescription, SystemClock, Transport};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::net::TcpStream;

use super::*;

/// A broker with queue `q`, its AMQP transport and the HTTP transport (plain listener only),
/// wired by [`websocket_hook`]. Returns the plain HTTP address.
async fn serve() -> (SocketAddr, ironbus_core::ShutdownTrigger) {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        ironbus_core::NamespaceLimits::default(),
    )
    .await
    .unwrap();
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let authorizer = Arc::new(Authorizer::development());
    let amqp =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), authorizer.clone()).await.unwrap();
    let args = HttpArgs {
        http_addr: "127.0.0.1:0".into(),
        https_addr: "off".into(),
        tier: super::TierArg::Standard,
        console: super::Switch::On,
    };
    let mut config = HttpConfig::new(authorizer);
    config.websocket = Some(websocket_hook(amqp.stream_sender()));
    let http = bind(&args, None, config).await.unwrap().unwrap();
    let addr = http.plain_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    for transport in [Box::new(amqp) as Box<dyn Transport>, Box::new(http)] {
        tokio::spawn(transport.serve(broker.clone(), shutdown.clone()));
    }
    (addr, trigger)
}

/// Sends the upgrade request; returns the response head and the connection.
async fn handshake(addr: SocketAddr, protocol: &str) -> (String, BufReader<TcpStream>) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(tcp);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line))
            .await
            .expect("a response within 5 s")
            .unwrap();
        if n == 0 || line == "\r\n" {
            return (head, reader);
        }
        head.push_str(&line);
    }
}

/// Pumps bytes between `local` (what the AMQP client uses) and the WebSocket: out as masked
/// binary frames, in from the server's frames' payload.
fn pump(local: DuplexStream, socket: BufReader<TcpStream>) {
    let (mut local_read, mut local_write) = tokio::io::split(local);
    let (mut socket_read, mut socket_write) = tokio::io::split(socket);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 7000];
        let mask = [0x11, 0x22, 0x33, 0x44];
        loop {
            let n = match local_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut frame = vec![0x82, 0x80 | 126];
            frame.extend_from_slice(&(n as u16).to_be_bytes());
            frame.extend_from_slice(&mask);
            frame.extend(buf[..n].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            if socket_write.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        loop {
            let mut head = [0u8; 2];
            if socket_read.read_exact(&mut head).await.is_err() {
                return;
            }
            let len = match head[1] & 0x7F {
                126 => u64::from(socket_read.read_u16().await.unwrap_or(0)),
                127 => socket_read.read_u64().await.unwrap_or(0),
                len => u64::from(len),
            };
            let mut payload = vec![0u8; len as usize];
            if socket_read.read_exact(&mut payload).await.is_err() {
                return;
            }
            if head[0] & 0x0F == 0x2 && local_write.write_all(&payload).await.is_err() {
                return;
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_round_trips_over_a_websocket() {
    let (addr, _trigger) = serve().await;
    let (head, socket) = handshake(addr, "AMQPWSB10").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "{head}");
    assert!(lower.contains("sec-websocket-protocol: amqpwsb10"), "{head}");

    let (client, local) = tokio::io::duplex(64 * 1024);
    pump(local, socket);
    let body: Vec<u8> = (0..150_000u32).map(|i| (i % 249) as u8).collect();
    let received = tokio::time::timeout(Duration::from_secs(30), async {
        let mut connection = Connection::builder()
            .container_id("ws-test")
            .hostname("localhost")
            .sasl_profile(SaslProfile::Plain {
                username: "RootManageSharedAccessKey".to_owned(),
                password: "SAS_KEY_VALUE".to_owned(),
            })
            .open_with_stream(client)
            .await
            .unwrap();
        let mut session = Session::begin(&mut connection).await.unwrap();
        let mut sender = Sender::attach(&mut session, "sender", "q").await.unwrap();
        let message = AmqpMessage::builder().data(Binary::from(body.clone())).build();
        sender.send(message).await.unwrap().accepted_or_else(|o| o).unwrap();
        let mut receiver = Receiver::attach(&mut session, "receiver", "q").await.unwrap();
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        receiver.accept(&delivery).await.unwrap();
        let received: Vec<u8> = match delivery.body() {
            Body::Data(data) => data.iter().flat_map(|d| d.0.iter().copied()).collect(),
            other => panic!("expected a data body, got {other:?}"),
        };
        sender.close().await.unwrap();
        receiver.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        received
    })
    .await
    .expect("the round trip finishes");
    assert_eq!(received, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_the_amqp_subprotocol_is_refused() {
    let (addr, _trigger) = serve().await;
    let (head, _socket) = handshake(addr, "chat").await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}
