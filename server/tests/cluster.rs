//! `--cluster`: three default servers in one process, each a node of one cluster on one
//! PostgreSQL database (which the test starts), with real listeners and the real link between
//! them. Clients send through one node and receive through another; a node stopped (as on
//! SIGTERM) hands its partitions over to the others.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::Parser;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus::{Args, ServerError, Started};
use ironbus_core::testing::TempDir;
use ironbus_core::{Broker, PartitionRef};
use ironbus_metrics::PrometheusExporter;
use ironbus_store_postgres::testing::PostgresServer;
use tokio::sync::oneshot;

const PARTITIONS: usize = 8;

fn metrics() -> &'static PrometheusExporter {
    static METRICS: OnceLock<PrometheusExporter> = OnceLock::new();
    METRICS.get_or_init(|| PrometheusExporter::install().expect("the only recorder"))
}

/// A database of the shared test server of its own, so that each test's cluster starts empty.
async fn database() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let postgres = PostgresServer::shared();
    let name = format!("cluster_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let (client, connection) =
        tokio_postgres::connect(&postgres.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    postgres.url().replace("dbname=postgres", &format!("dbname={name}"))
}

/// A running node: its addresses, its broker, and how to stop it (as SIGTERM does).
struct Node {
    amqp: SocketAddr,
    http: SocketAddr,
    broker: Broker,
    stop: Option<oneshot::Sender<()>>,
    stopped: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start(url: &str, id: &str, dir: &TempDir) -> Result<Node, ServerError> {
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"UserConfig": {{"Namespaces": [{{"Name": "testns", "Queues": [
                {{"Name": "q", "Properties": {{"EnablePartitioning": true,
                  "PartitionCount": {PARTITIONS}}}}}]}}]}}}}"#
            ),
        )
        .unwrap();
        let flags = [
            "ironbus",
            "--amqp-addr",
            "127.0.0.1:0",
            "--amqps-addr",
            "off",
            "--http-addr",
            "127.0.0.1:0",
            "--https-addr",
            "off",
            "--store",
            "postgres",
            "--postgres-url",
            url,
            "--cluster",
            "--node-id",
            id,
            "--link-addr",
            "127.0.0.1:0",
            "--lease-ms",
            "1500",
            "--config",
            config.to_str().unwrap(),
        ];
        let started: Started = ironbus::start(Args::parse_from(flags), metrics()).await?;
        let (amqp, broker) = (started.amqp_addr, started.server.broker().clone());
        let http = started.http_addr.expect("the plain HTTP listener is on");
        let (stop, stopping) = oneshot::channel::<()>();
        let stopped = tokio::spawn(async move {
            let until = async move {
                let _ = stopping.await;
                Ok::<(), ServerError>(())
            };
            started.server.serve_until(until).await.unwrap();
        });
        Ok(Node { amqp, http, broker, stop: Some(stop), stopped })
    }

    /// Stops the node as SIGTERM does: it hands its partitions over, then stops.
    async fn terminate(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), &mut self.stopped)
            .await
            .expect("a node stops within 20 s")
            .unwrap();
    }
}

/// Waits until every partition of `q` runs on exactly one of `nodes`; returns how many on
/// each.
async fn every_partition_owned(nodes: &[&Node]) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let refs: Vec<PartitionRef> = nodes[0].broker.partition_refs();
        let per_node: Vec<usize> =
            nodes.iter().map(|n| refs.iter().filter(|p| n.broker.runs_here(**p)).count()).collect();
        let owners = |p: &PartitionRef| nodes.iter().filter(|n| n.broker.runs_here(*p)).count();
        if refs.len() == PARTITIONS && refs.iter().all(|p| owners(p) == 1) {
            return per_node;
        }
        assert!(Instant::now() < deadline, "partitions never settled: {per_node:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /health`'s JSON.
async fn health(addr: SocketAddr) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

async fn session(
    addr: SocketAddr,
) -> (fe2o3_amqp::connection::ConnectionHandle<()>, fe2o3_amqp::session::SessionHandle<()>) {
    let mut connection = Connection::builder()
        .container_id(format!("cluster-test-{}", addr.port()))
        .hostname("localhost")
        .sasl_profile(SaslProfile::Plain {
            username: "RootManageSharedAccessKey".to_owned(),
            password: "SAS_KEY_VALUE".to_owned(),
        })
        .open(format!("amqp://{addr}").as_str())
        .await
        .unwrap();
    let session = Session::begin(&mut connection).await.unwrap();
    (connection, session)
}

/// Sends `count` messages to `q` through `node`, retrying each until accepted.
async fn send(node: SocketAddr, count: usize) {
    let (_connection, mut session) = session(node).await;
    let mut sender = Sender::attach(&mut session, "sender", "q").await.unwrap();
    for i in 0..count {
        let message =
            AmqpMessage::builder().data(Binary::from(format!("m{i}").into_bytes())).build();
        sender.send(message).await.unwrap().accepted_or("refused").unwrap();
    }
}

/// Receives (peek-lock, then accept) through `node` until `count` messages or 10 s of silence.
async fn receive(node: SocketAddr, count: usize) -> Vec<String> {
    let (_connection, mut session) = session(node).await;
    let mut receiver = Receiver::attach(&mut session, "receiver", "q").await.unwrap();
    let mut got = Vec::new();
    while got.len() < count {
        let Ok(delivery) =
            tokio::time::timeout(Duration::from_secs(10), receiver.recv::<Body<Value>>()).await
        else {
            break;
        };
        let delivery = delivery.unwrap();
        let body = match delivery.body() {
            Body::Data(batch) => {
                String::from_utf8(batch.iter().flat_map(|d| d.0.to_vec()).collect()).unwrap()
            }
            other => format!("{other:?}"),
        };
        receiver.accept(&delivery).await.unwrap();
        got.push(body);
    }
    got.sort();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_the_partitions_and_serve_any_client() {
    let url = database().await;
    let dirs: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("cluster-{i}"))).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(Node::start(&url, &format!("n{i}"), dir).await.expect("a node starts"));
    }
    let shares = every_partition_owned(&nodes.iter().collect::<Vec<_>>()).await;
    assert!(shares.iter().all(|n| *n >= 1), "each node runs some partitions: {shares:?}");

    // /health through any node says where every partition runs.
    let health = health(nodes[2].http).await;
    assert_eq!(health["node"], "n2", "{health}");
    let partitions = health["partitions"].as_array().expect("a cluster view");
    assert_eq!(partitions.len(), PARTITIONS, "{health}");
    for p in partitions {
        assert_eq!(p["entity"], "q");
        assert!(["n0", "n1", "n2"].contains(&p["owner"].as_str().unwrap_or("")), "{p}");
        assert_eq!(p["available"], true, "{p}");
    }

    // An entity created through one node is known to the others by the time it answers.
    let description = ironbus_core::QueueDescription::default();
    nodes[0].broker.create_queue("fresh", description).await.expect("create through node 0");
    for node in &nodes[1..] {
        node.broker.get_queue("fresh").await.expect("known at every node once created");
    }
    nodes[1].broker.delete_queue("fresh").await.expect("delete through node 1");
    assert!(nodes[0].broker.get_queue("fresh").await.is_err(), "gone at every node once deleted");

    send(nodes[0].amqp, 40).await;
    let got = receive(nodes[2].amqp, 40).await;
    let mut expected: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(got, expected, "sent through one node, received through another, each once");

    // A node stopped as on SIGTERM hands its partitions over: the others run them all, at
    // once (no lease to wait for), and nothing sent before is lost.
    send(nodes[1].amqp, 20).await;
    let handing_over = Instant::now();
    nodes[1].terminate().await;
    let rest = [&nodes[0], &nodes[2]];
    let shares = every_partition_owned(&rest).await;
    assert_eq!(shares.iter().sum::<usize>(), PARTITIONS);
    assert!(
        handing_over.elapsed() < Duration::from_millis(1500) + Duration::from_secs(3),
        "a hand-over waits for no lease: {:?}",
        handing_over.elapsed()
    );
    let got = receive(nodes[0].amqp, 20).await;
    assert_eq!(got.len(), 20, "every message sent before the hand-over: {got:?}");
    nodes[0].terminate().await;
    nodes[2].terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reachable_beyond_loopback_needs_the_clusters_secret() {
    let url = database().await;
    let dir = TempDir::new("cluster-secret");
    let flags = [
        "ironbus",
        "--amqp-addr",
        "127.0.0.1:0",
        "--amqps-addr",
        "off",
        "--http-addr",
        "off",
        "--https-addr",
        "off",
        "--store",
        "postgres",
        "--postgres-url",
        url.as_str(),
        "--cluster",
        "--node-id",
        "n0",
        "--link-addr",
        "0.0.0.0:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ];
    let error = ironbus::start(Args::parse_from(flags), metrics()).await.unwrap_err();
    assert!(matches!(error, ServerError::Cluster(_)), "{error}");
    assert!(error.to_string().contains("--cluster-secret"), "{error}");

    let rocks = ["ironbus", "--store", "memory", "--cluster", "--node-id", "n0"];
    let error = ironbus::start(Args::parse_from(rocks), metrics()).await.unwrap_err();
    assert!(error.to_string().contains("--store postgres"), "{error}");
}
