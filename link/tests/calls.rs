//! Calls over real sockets: bytes round-trip, handler errors arrive typed, bounds hold, and
//! the client survives a peer that is down or restarts.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{config, localhost, serve, serve_at};
use hyper::header::HeaderMap;
use hyper::StatusCode;
use ironbus_link::wire::{self, Credentials};
use ironbus_link::{CallError, LinkClient, LinkError, LinkTls, PeerId};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn calls_round_trip_their_bytes() {
    let (server, handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    let megabyte: Bytes = (0..1024 * 1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    let bodies = [Bytes::new(), Bytes::from_static(b"\0\xffbytes"), megabyte];
    for body in bodies {
        assert_eq!(client.call("echo", body.clone()).await.unwrap(), body);
    }
    assert_eq!(handler.calls(), 3);
    assert_eq!(server.open_connections(), 1, "every call went over one connection");
}

#[tokio::test]
async fn a_handler_error_arrives_as_remote() {
    let (server, _handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    let error = client.call("fail", Bytes::new()).await.unwrap_err();
    assert_eq!(
        error,
        LinkError::Remote {
            code: "partition.unavailable".to_owned(),
            message: "partition 3 is moving".to_owned()
        }
    );
    assert!(!error.is_retriable());
}

#[tokio::test]
async fn a_handler_panic_arrives_as_remote_and_the_connection_lives_on() {
    let (server, _handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    let error = client.call("panic", Bytes::new()).await.unwrap_err();
    assert!(
        matches!(&error, LinkError::Remote { code, .. } if code == CallError::HANDLER_PANICKED),
        "{error:?}"
    );
    assert_eq!(client.call("echo", Bytes::from_static(b"still")).await.unwrap(), "still");
    assert_eq!(server.open_connections(), 1);
}

#[tokio::test]
async fn an_oversize_request_is_refused_without_the_handler() {
    let mut small = config("node-b");
    small.max_request_bytes = 64 * 1024;
    let (server, handler) = serve(small).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    let body = Bytes::from(vec![7; 1024 * 1024]);
    let error = client.call("echo", body.clone()).await.unwrap_err();
    assert_eq!(error, LinkError::TooLarge { limit: None }, "refused by the server");
    assert!(!error.is_retriable());
    // Without a declared length the server counts while reading, and stops at the limit.
    let credentials = Credentials::new(PeerId::new("node-a").unwrap(), &body);
    let mut headers = HeaderMap::new();
    credentials.write(&common::secret(common::SECRET), "echo", &mut headers);
    let path = format!("{}echo", wire::PATH_PREFIX);
    let (status, _) = common::send_raw(server.local_addr(), &path, headers, body, false).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(handler.calls(), 0);
    // The limit itself is allowed.
    let at_limit = Bytes::from(vec![7; 64 * 1024]);
    assert_eq!(client.call("echo", at_limit.clone()).await.unwrap(), at_limit);
}

#[tokio::test]
async fn a_client_refuses_to_send_over_its_own_limit() {
    let (server, handler) = serve(config("node-b")).await;
    let mut small = config("node-a");
    small.max_request_bytes = 10;
    let client = LinkClient::new(server.local_addr(), small);
    let error = client.call("echo", Bytes::from(vec![0; 11])).await.unwrap_err();
    assert_eq!(error, LinkError::TooLarge { limit: Some(10) });
    assert_eq!(server.open_connections(), 0, "nothing was sent");
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn a_reply_over_the_clients_limit_is_a_protocol_error() {
    let (server, _handler) = serve(config("node-b")).await;
    let mut small = config("node-a");
    small.max_reply_bytes = 1000;
    let client = LinkClient::new(server.local_addr(), small);
    let error = client.call("echo", Bytes::from(vec![0; 1001])).await.unwrap_err();
    assert!(matches!(error, LinkError::Protocol { .. }), "{error:?}");
}

#[tokio::test]
async fn a_peer_with_nothing_listening_is_unreachable_at_once() {
    let port = tokio::net::TcpListener::bind(localhost()).await.unwrap().local_addr().unwrap();
    // The listener is gone: nothing listens on `port` now.
    let client = LinkClient::new(port, config("node-a"));
    let started = Instant::now();
    let error = client.call("echo", Bytes::new()).await.unwrap_err();
    assert!(matches!(error, LinkError::Unreachable { .. }), "{error:?}");
    assert!(error.is_retriable());
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_slow_handler_times_the_call_out_and_the_client_goes_on() {
    let (server, _handler) = serve(config("node-b")).await;
    let mut impatient = config("node-a");
    impatient.call_timeout = Duration::from_millis(200);
    let client = LinkClient::new(server.local_addr(), impatient);
    let started = Instant::now();
    let error = client.call("sleep", Bytes::from_static(b"5000")).await.unwrap_err();
    assert_eq!(error, LinkError::Timeout);
    assert!(error.is_retriable());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(client.call("sleep", Bytes::from_static(b"1")).await.unwrap(), "1");
}

#[tokio::test]
async fn the_client_recovers_after_the_peer_restarts() {
    let (server, _handler) = serve(config("node-b")).await;
    let addr = server.local_addr();
    let client = LinkClient::new(addr, config("node-a"));
    assert_eq!(client.call("echo", Bytes::from_static(b"1")).await.unwrap(), "1");

    server.shutdown().await;
    let error = client.call("echo", Bytes::from_static(b"2")).await.unwrap_err();
    assert!(error.is_retriable(), "{error:?}");

    let (server, handler) = serve_at(addr, config("node-b")).await;
    assert_eq!(client.call("echo", Bytes::from_static(b"3")).await.unwrap(), "3");
    assert_eq!(handler.calls(), 1);
    assert_eq!(server.open_connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_share_one_connection_within_its_stream_limit() {
    let mut narrow = config("node-b");
    narrow.max_concurrent_streams = 8;
    let (server, handler) = serve(narrow).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..200_u32 {
        let client = client.clone();
        calls.spawn(async move {
            let body = Bytes::from(i.to_be_bytes().to_vec());
            (client.call("wide", body.clone()).await, body)
        });
    }
    while let Some(joined) = calls.join_next().await {
        let (reply, body) = joined.unwrap();
        assert_eq!(reply.unwrap(), body);
    }
    assert_eq!(handler.calls(), 200);
    let widest = handler.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=8).contains(&widest), "{widest} calls at once");
    assert_eq!(server.open_connections(), 1);
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_at_once() {
    let mut one = config("node-b");
    one.max_connections = 1;
    let (server, _handler) = serve(one).await;
    let first = LinkClient::new(server.local_addr(), config("node-a"));
    first.call("echo", Bytes::new()).await.unwrap();
    assert_eq!(server.open_connections(), 1);

    let mut extra = tokio::net::TcpStream::connect(server.local_addr()).await.unwrap();
    let mut byte = [0; 1];
    let read = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the extra connection stayed open");

    let second = LinkClient::new(server.local_addr(), config("node-c"));
    let error = second.call("echo", Bytes::new()).await.unwrap_err();
    assert!(error.is_retriable(), "{error:?}");
    // The first connection is untouched.
    first.call("echo", Bytes::new()).await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_a_call_under_way_finish() {
    let (server, _handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    client.call("echo", Bytes::new()).await.unwrap();
    let slow = tokio::spawn({
        let client = client.clone();
        async move { client.call("sleep", Bytes::from_static(b"300")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.shutdown().await;
    assert_eq!(slow.await.unwrap().unwrap(), "300");
}

#[tokio::test]
async fn invalid_method_names_never_leave_the_client() {
    let (server, handler) = serve(config("node-b")).await;
    let client = LinkClient::new(server.local_addr(), config("node-a"));
    for method in ["", "a/b", "a b", "../echo", &"m".repeat(65)] {
        let error = client.call(method, Bytes::new()).await.unwrap_err();
        assert!(matches!(error, LinkError::Protocol { .. }), "{method:?}: {error:?}");
    }
    assert_eq!(handler.calls(), 0);
}

/// TLS for every node: a CA, one `ironbus-link` certificate it signed, and client
/// certificates required (mutual TLS).
fn cluster_tls() -> (LinkTls, rustls::ClientConfig) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["ironbus-link".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone(), ca.der().clone()];
    let private = || PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), private())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_client_auth_cert(chain, private())
        .unwrap();
    let anonymous = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = LinkTls {
        server: Arc::new(server),
        client: Arc::new(client),
        server_name: ServerName::try_from("ironbus-link").unwrap(),
    };
    (tls, anonymous)
}

#[tokio::test]
async fn calls_go_over_mutual_tls() {
    let (tls, anonymous) = cluster_tls();
    let mut server_config = config("node-b");
    server_config.tls = Some(tls.clone());
    let (server, handler) = serve(server_config).await;
    let mut client_config = config("node-a");
    client_config.tls = Some(tls.clone());
    let client = LinkClient::new(server.local_addr(), client_config);
    let body = Bytes::from(vec![5; 300 * 1024]);
    assert_eq!(client.call("echo", body.clone()).await.unwrap(), body);

    // Without a client certificate the handshake fails: unreachable, no handler call.
    let mut no_certificate = config("node-c");
    no_certificate.tls = Some(LinkTls { client: Arc::new(anonymous), ..tls });
    let stranger = LinkClient::new(server.local_addr(), no_certificate);
    let error = stranger.call("echo", Bytes::new()).await.unwrap_err();
    assert!(
        matches!(error, LinkError::Unreachable { .. } | LinkError::ConnectionLost { .. }),
        "{error:?}"
    );
    // A plain-TCP client does not get through either.
    let plain = LinkClient::new(server.local_addr(), config("node-d"));
    assert!(plain.call("echo", Bytes::new()).await.is_err());
    assert_eq!(handler.calls(), 1);
}
