//! AMQP over TLS (the TLS listener, as Service Bus's port 5671) and over streams handed to the
//! transport by another front end (`StreamSender`, what AMQP over WebSockets uses): the same
//! connection code, the same limits, and a TLS handshake that never finishes does not hold a
//! connection.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::auth::Authorizer;
use ironbus_core::{
    shutdown_signal, Broker, Message, QueueDescription, ShutdownTrigger, Transport,
};
use ironbus_transport_amqp::limits::ConnectionLimits;
use ironbus_transport_amqp::{AmqpOptions, AmqpStats, AmqpTransport, StreamSender};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A CA and a `localhost` certificate it signed: (the server's config, the CA to trust).
fn certificate() -> (Arc<rustls::ServerConfig>, CertificateDer<'static>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), ca.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    (Arc::new(config), ca.der().clone())
}

struct Served {
    tcp: SocketAddr,
    tls: SocketAddr,
    ca: CertificateDer<'static>,
    streams: StreamSender,
    stats: Arc<AmqpStats>,
    _trigger: ShutdownTrigger,
}

async fn serve(broker: Broker, options: AmqpOptions) -> Served {
    let (config, ca) = certificate();
    let localhost: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut transport =
        AmqpTransport::bind_with(localhost, Arc::new(Authorizer::development()), options)
            .await
            .unwrap();
    transport.bind_tls(localhost, config).await.unwrap();
    let served = Served {
        tcp: transport.local_addr().unwrap(),
        tls: transport.tls_addr().unwrap(),
        ca,
        streams: transport.stream_sender(),
        stats: transport.stats(),
        _trigger: {
            let (trigger, shutdown) = shutdown_signal();
            tokio::spawn(Box::new(transport).serve(broker, shutdown));
            trigger
        },
    };
    served
}

async fn tls_connect(addr: SocketAddr, ca: &CertificateDer<'static>) -> TlsStream<TcpStream> {
    tls_connect_over(TcpStream::connect(addr).await.unwrap(), ca).await
}

async fn tls_connect_over(tcp: TcpStream, ca: &CertificateDer<'static>) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
}

/// Sends `body` to `queue` and receives it back, over one AMQP connection on `stream`.
async fn round_trip<S>(stream: S, queue: &str, body: Vec<u8>) -> Vec<u8>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let mut connection = Connection::builder()
        .container_id("tls-test")
        .hostname("localhost")
        .sasl_profile(SaslProfile::Plain {
            username: "RootManageSharedAccessKey".to_owned(),
            password: "SAS_KEY_VALUE".to_owned(),
        })
        .open_with_stream(stream)
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    let mut sender = Sender::attach(&mut session, "sender", queue).await.unwrap();
    let message = AmqpMessage::builder().data(Binary::from(body)).build();
    sender.send(message).await.unwrap().accepted_or_else(|o| o).unwrap();
    let mut receiver = Receiver::attach(&mut session, "receiver", queue).await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    receiver.accept(&delivery).await.unwrap();
    let received = match delivery.body() {
        Body::Data(data) => data.iter().flat_map(|d| d.0.iter().copied()).collect(),
        other => panic!("expected a data body, got {other:?}"),
    };
    sender.close().await.unwrap();
    receiver.close().await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
    received
}

async fn queue_broker() -> Broker {
    let broker = common::memory_broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_round_trips_over_tls() {
    let served = serve(queue_broker().await, AmqpOptions::default()).await;
    // Larger than one TLS record and one frame, so that the writer must flush what the TLS
    // stream holds back.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let stream = tls_connect(served.tls, &served.ca).await;
    let received =
        tokio::time::timeout(Duration::from_secs(30), round_trip(stream, "q", body.clone()))
            .await
            .expect("the round trip finishes");
    assert_eq!(received, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_stream_is_served_as_a_connection() {
    let served = serve(queue_broker().await, AmqpOptions::default()).await;
    let (client, server) = tokio::io::duplex(4096);
    assert!(served.streams.send(server, "127.0.0.1:40000".parse().unwrap()));
    let received = tokio::time::timeout(
        Duration::from_secs(30),
        round_trip(client, "q", b"over a handed-over stream".to_vec()),
    )
    .await
    .expect("the round trip finishes");
    assert_eq!(received, b"over a handed-over stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_that_never_finishes_is_dropped() {
    let options =
        AmqpOptions { tls_handshake_timeout: Duration::from_millis(300), ..AmqpOptions::default() };
    let served = serve(queue_broker().await, options).await;
    let mut silent = TcpStream::connect(served.tls).await.unwrap();
    wait_for_connections(&served.stats, 1).await;
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("the server gives up on the handshake");
    assert!(matches!(read, Ok(0) | Err(_)), "nothing but the end of the stream: {read:?}");
    wait_for_connections(&served.stats, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_handed_over_connections_count_under_the_same_limit() {
    let options = AmqpOptions {
        limits: ConnectionLimits { max_connections: 1, max_connections_per_ip: 0 },
        ..AmqpOptions::default()
    };
    let served = serve(queue_broker().await, options).await;
    // The one slot goes to a plain TCP connection.
    let mut first = TcpStream::connect(served.tcp).await.unwrap();
    first.write_all(common::raw::AMQP_HEADER).await.unwrap();
    first.write_all(&common::raw::open()).await.unwrap();
    wait_for_connections(&served.stats, 1).await;

    // Over TLS: refused in AMQP's terms (an Open, then a Close naming the limit).
    let mut tls = tls_connect(served.tls, &served.ca).await;
    tls.write_all(common::raw::AMQP_HEADER).await.unwrap();
    tls.write_all(&common::raw::open()).await.unwrap();
    let answer = read_to_close(&mut tls).await;
    assert!(answer.starts_with(common::raw::AMQP_HEADER), "{answer:02x?}");
    assert!(common::has_close_with_error(&answer), "a close with an error: {answer:02x?}");
    assert!(String::from_utf8_lossy(&answer).contains("amqp:resource-limit-exceeded"));

    // A handed-over stream: refused the same way.
    let (mut client, server) = tokio::io::duplex(4096);
    assert!(served.streams.send(server, "127.0.0.1:40001".parse().unwrap()));
    client.write_all(common::raw::AMQP_HEADER).await.unwrap();
    client.write_all(&common::raw::open()).await.unwrap();
    let answer = read_to_close(&mut client).await;
    assert!(String::from_utf8_lossy(&answer).contains("amqp:resource-limit-exceeded"));
    assert_eq!(served.stats.refused.load(Ordering::SeqCst), 2);

    // The slot comes back when the first connection goes; TLS is then served.
    drop(first);
    wait_for_connections(&served.stats, 0).await;
    let stream = tls_connect(served.tls, &served.ca).await;
    let received = tokio::time::timeout(
        Duration::from_secs(30),
        round_trip(stream, "q", b"after the slot came back".to_vec()),
    )
    .await
    .expect("the round trip finishes");
    assert_eq!(received, b"after the slot came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_never_reads_is_closed_at_the_write_limit() {
    const LIMIT: usize = 256 * 1024;
    const BODY: usize = 64 * 1024;
    const MESSAGES: usize = 160;
    let broker = queue_broker().await;
    for _ in 0..MESSAGES / 10 {
        let batch = (0..10).map(|_| Message::new(vec![7u8; BODY])).collect();
        broker.send("q", batch).await.unwrap();
    }
    let options = AmqpOptions {
        max_write_buffer: LIMIT,
        write_stall_timeout: Duration::from_millis(300),
        ..AmqpOptions::default()
    };
    let served = serve(broker, options).await;
    // A small receive buffer, so that the kernel holds little of what the broker writes.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(served.tls).await.unwrap();
    let mut stream = tls_connect_over(tcp, &served.ca).await;
    // Everything at once, then never a read: credit for 10 MB.
    let mut hello = common::raw::SASL_HEADER.to_vec();
    hello.extend(common::raw::sasl_init());
    hello.extend(common::raw::AMQP_HEADER);
    hello.extend(common::raw::open());
    hello.extend(common::raw::begin());
    hello.extend(common::raw::attach_receiver("q"));
    hello.extend(common::raw::flow(Some(0), MESSAGES as u32, false));
    stream.write_all(&hello).await.unwrap();
    stream.flush().await.unwrap();

    tokio::time::timeout(Duration::from_secs(10), async {
        while served.stats.slow_reader_closes.load(Ordering::SeqCst) != 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the connection is closed as a slow reader");
    let peak = served.stats.peak_write_buffered.load(Ordering::SeqCst);
    assert!(peak <= LIMIT, "the broker buffered {peak} bytes for the connection, over {LIMIT}");
    assert!(peak >= BODY, "deliveries were written: {peak}");
    wait_for_connections(&served.stats, 0).await;
    assert_eq!(served.stats.write_buffered.load(Ordering::SeqCst), 0);
}

async fn read_to_close(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection open: got {all:02x?}"),
        }
    }
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
