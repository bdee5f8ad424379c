//! `/metrics` end to end: the exporter installed as the process's recorder (one test in this
//! binary, as a process has one), a broker on the memory store, the AMQP and HTTP transports on
//! `127.0.0.1:0`, and the exposition text read over a real socket.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::auth::Authorizer;
use ironbus_core::metrics::STORE_WRITE_DURATION_SECONDS;
use ironbus_core::{
    shutdown_signal, Broker, Message, NamespaceLimits, QueueDescription, SystemClock, Transport,
};
use ironbus_metrics::{amqp, catalogue, PrometheusExporter};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;
use ironbus_transport_http::{HttpConfig, HttpTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_amqp_connections_and_histograms_with_the_catalogues_buckets() {
    let exporter = PrometheusExporter::install().unwrap();
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    broker.send("q", vec![Message::new("x")]).await.unwrap();

    let authorizer = Arc::new(Authorizer::development());
    let amqp =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), authorizer.clone()).await.unwrap();
    let amqp_addr = amqp.local_addr().unwrap();
    let stats = amqp.stats();
    exporter.watch_amqp(stats.clone());
    let mut config = HttpConfig::new(authorizer);
    config.metrics = Some(exporter.render_fn());
    let http =
        HttpTransport::bind(Some("127.0.0.1:0".parse().unwrap()), None, config).await.unwrap();
    let http_addr = http.plain_addr().unwrap();
    let (_trigger, shutdown) = shutdown_signal();
    for transport in [Box::new(amqp) as Box<dyn Transport>, Box::new(http)] {
        tokio::spawn(transport.serve(broker.clone(), shutdown.clone()));
    }

    // An AMQP connection counts from its accept.
    let _connection = TcpStream::connect(amqp_addr).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while stats.connections.load(Ordering::SeqCst) != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the connection is accepted");

    let text = get(http_addr, "/metrics").await;
    let open = amqp::CONNECTIONS_OPEN;
    assert!(text.contains(&format!("# TYPE {open} gauge\n")), "{text}");
    assert!(text.contains(&format!("# HELP {open} AMQP connections served now")), "{text}");
    assert!(text.contains(&format!("\n{open} 1\n")), "{text}");
    assert!(text.contains(&format!("\n{} 0\n", amqp::CONNECTIONS_REFUSED_TOTAL)), "{text}");

    let store_write = catalogue::find(STORE_WRITE_DURATION_SECONDS).unwrap();
    assert!(text.contains(&format!("# TYPE {STORE_WRITE_DURATION_SECONDS} histogram\n")), "{text}");
    for bound in store_write.buckets {
        let line = format!("{STORE_WRITE_DURATION_SECONDS}_bucket{{le=\"{bound}\"}} ");
        assert!(text.contains(&line), "no bucket {bound}:\n{text}");
    }
    assert_eq!(
        text.matches(&format!("{STORE_WRITE_DURATION_SECONDS}_bucket{{")).count(),
        store_write.buckets.len() + 1,
        "the catalogue's buckets and +Inf:\n{text}"
    );

    // The first request is recorded once answered: the second render shows it, with the
    // HTTP histogram's own buckets.
    let text = get(http_addr, "/metrics").await;
    let request =
        catalogue::find(ironbus_transport_http::metrics::REQUEST_DURATION_SECONDS).unwrap();
    for bound in request.buckets {
        let line = format!("{}_bucket{{operation=\"metrics\",le=\"{bound}\"}} ", request.name);
        assert!(text.contains(&line), "no bucket {bound}:\n{text}");
    }
}
