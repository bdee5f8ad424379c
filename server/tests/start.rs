//! The default server assembled by the library's `start` from its flags, on free ports and the
//! memory store (or PostgreSQL, which the test starts), talked to over real sockets.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser;
use ironbus::{Args, ServerError, Started};
use ironbus_core::testing::TempDir;
use ironbus_metrics::PrometheusExporter;
use ironbus_store_postgres::testing::PostgresServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The process's recorder, shared by the servers of this binary's tests.
fn metrics() -> &'static PrometheusExporter {
    static METRICS: OnceLock<PrometheusExporter> = OnceLock::new();
    METRICS.get_or_init(|| PrometheusExporter::install().expect("the only recorder"))
}

/// Starts the default server with a config declaring the partitioned queue `p`, and `extra`
/// flags; it serves until the test ends.
async fn start(extra: &[&str]) -> (Started, TempDir) {
    start_on(&["--store", "memory"], extra).await.unwrap()
}

/// [`start`] on the store of the `store` flags.
async fn start_on(store: &[&str], extra: &[&str]) -> Result<(Started, TempDir), ServerError> {
    let dir = TempDir::new("server-start");
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"UserConfig": {"Namespaces": [{"Name": "testns", "Queues": [
            {"Name": "p", "Properties": {"EnablePartitioning": true, "PartitionCount": 2}}]}]}}"#,
    )
    .unwrap();
    let mut flags = vec!["ironbus", "--amqp-addr", "127.0.0.1:0"];
    flags.extend(store);
    flags.extend(["--amqps-addr", "off", "--http-addr", "127.0.0.1:0", "--https-addr", "off"]);
    flags.extend(["--config", config.to_str().unwrap()]);
    flags.extend(extra);
    let started = ironbus::start(Args::parse_from(flags), metrics()).await?;
    Ok((started, dir))
}

fn serve(started: Started) -> (SocketAddr, SocketAddr) {
    let addrs = (started.amqp_addr, started.http_addr.expect("the plain listener is on"));
    let forever = std::future::pending::<Result<(), ironbus::ServerError>>();
    tokio::spawn(started.server.serve_until(forever));
    addrs
}

/// A request over a fresh connection: the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_server_starts_on_free_ports_and_reports_its_amqp_connections() {
    let (started, _dir) = start(&[]).await;
    let strings = started.connection_strings();
    assert_eq!(strings.len(), 1, "AMQPS is off: {strings:?}");
    assert!(strings[0].contains(&format!(":{};", started.amqp_addr.port())), "{strings:?}");
    assert!(strings[0].contains("SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"));
    let (amqp, http) = serve(started);

    let (status, health) = request(http, "GET", "/health").await;
    assert_eq!(status, 200, "{health}");
    assert!(health.contains(r#""entities":1"#), "the config's queue: {health}");

    let _connection = TcpStream::connect(amqp).await.unwrap();
    let open = ironbus_metrics::amqp::CONNECTIONS_OPEN;
    let mut text = String::new();
    for _ in 0..100 {
        text = request(http, "GET", "/metrics").await.1;
        if text.lines().any(|line| line.starts_with(open) && !line.ends_with(" 0")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no open AMQP connection in /metrics:\n{text}");
}

#[cfg(not(feature = "fault-injection"))]
#[test]
fn fault_injection_is_not_a_flag_of_the_default_build() {
    let flags = ["ironbus", "--testing-fault-injection"];
    assert!(Args::try_parse_from(flags).is_err());
}

#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_makes_one_partition_unavailable_and_heals_it() {
    let (started, _dir) = start(&["--testing-fault-injection"]).await;
    let (_, http) = serve(started);
    let faults = ironbus::faults::PATH;

    let (status, body) =
        request(http, "POST", &format!("{faults}?entity=p&partition=1&available=false")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""available":false"#), "{body}");
    let (status, health) = request(http, "GET", "/health").await;
    assert_eq!(status, 503, "{health}");
    assert!(health.contains(r#""unavailable_partitions":[1]"#), "{health}");

    let (status, body) =
        request(http, "POST", &format!("{faults}?entity=p&partition=9&available=false")).await;
    assert_eq!(status, 400, "no partition 9: {body}");
    let (status, _) = request(http, "POST", &format!("{faults}?entity=p&partition=1")).await;
    assert_eq!(status, 400, "available is required");
    let (status, _) =
        request(http, "GET", &format!("{faults}?entity=p&partition=1&available=true")).await;
    assert_eq!(status, 405);

    let (status, body) =
        request(http, "POST", &format!("{faults}?entity=p&partition=1&available=true")).await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..100 {
        if request(http, "GET", "/health").await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the partition never became available again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_each_store_is_a_table_of_the_database() {
    let postgres = PostgresServer::shared();
    let url = postgres.url();
    let store = ["--store", "postgres", "--postgres-url", url.as_str(), "--stores", "2"];
    let (started, _dir) = start_on(&store, &[]).await.unwrap();
    let (_, http) = serve(started);
    let (status, health) = request(http, "GET", "/health").await;
    assert_eq!(status, 200, "{health}");
    assert!(health.contains(r#""entities":1"#), "the config's queue: {health}");

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    for table in ["ironbus_store_0", "ironbus_store_1"] {
        let sql = format!("SELECT count(*) FROM {table}");
        let rows: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
        assert!(rows > 0, "{table} holds the records of the queue's partitions");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_is_a_clear_start_up_error() {
    assert!(Args::try_parse_from(["ironbus", "--store", "postgres"]).is_err(), "needs the url");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("host=127.0.0.1 port={dead} user=ironbus dbname=postgres");
    let store = ["--store", "postgres", "--postgres-url", url.as_str()];
    let Err(error) = start_on(&store, &[]).await else { panic!("started without a database") };
    assert_eq!(
        error.to_string(),
        "opening the PostgreSQL store (table ironbus_store_0); check --postgres-url"
    );
    let source = std::error::Error::source(&error).expect("the store's error").to_string();
    assert!(source.contains(&format!("127.0.0.1:{dead}")), "{source}");
}
