//! A broker binary of your own, from ironbus's crates: RocksDB in `./custom-data`, AMQP for the
//! SDKs on 5672 (the emulator's well-known key, so loopback only), `/metrics` and `/health` on
//! 5300, and a queue `orders` declared in the emulator's config.json format.
//!
//! `cargo run -p ironbus --example custom`

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use ironbus::Server;
use ironbus_core::auth::Authorizer;
use ironbus_core::{Broker, NamespaceLimits, SystemClock};
use ironbus_metrics::PrometheusExporter;
use ironbus_store_rocksdb::{RocksOptions, RocksStore};
use ironbus_transport_amqp::AmqpTransport;
use ironbus_transport_http::{HttpConfig, HttpTransport};

const ENTITIES: &str = r#"{"UserConfig": {"Namespaces": [{"Name": "custom",
    "Queues": [{"Name": "orders", "Properties": {"MaxDeliveryCount": 5}}]}]}}"#;

/// Opens the broker and binds its listeners; returns them with their AMQP and HTTP addresses.
pub async fn start(
    data: &Path,
    amqp: SocketAddr,
    http: SocketAddr,
) -> anyhow::Result<(Server, SocketAddr, SocketAddr)> {
    // First: what is recorded before a recorder is installed is lost.
    let metrics = PrometheusExporter::install()?;
    std::fs::create_dir_all(data)?;
    let store = Arc::new(RocksStore::open(data, RocksOptions::default())?);
    let broker = Broker::open(store, Arc::new(SystemClock), NamespaceLimits::default()).await?;
    ironbus::config::apply(&broker, &ironbus::config::parse(ENTITIES)?).await?;

    let authorizer = Arc::new(Authorizer::development());
    let amqp = AmqpTransport::bind(amqp, authorizer.clone()).await?;
    metrics.watch_amqp(amqp.stats());
    let mut config = HttpConfig::new(authorizer);
    config.metrics = Some(metrics.render_fn());
    let http = HttpTransport::bind(Some(http), None, config).await?;
    let (amqp_addr, http_addr) = (amqp.local_addr()?, http.plain_addr().expect("bound"));
    Ok((Server::new(broker).with(amqp).with(http), amqp_addr, http_addr))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt::init();
    let (server, amqp, http) =
        start(Path::new("./custom-data"), "127.0.0.1:5672".parse()?, "127.0.0.1:5300".parse()?)
            .await?;
    #[allow(clippy::print_stdout, reason = "where to connect, for people")]
    {
        println!("AMQP on {amqp}, queue `orders`; metrics on http://{http}/metrics");
    }
    Ok(server.serve_until(ironbus::shutdown_requested()).await?)
}
