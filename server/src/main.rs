//! `ironbus`: the default server, assembled from the workspace's crates: the broker engine on the
//! chosen store (RocksDB by default, in `--data-dir`), the AMQP and HTTP transports, SAS keys
//! and entities declared in a config file.
//!
//! The only crate that names concrete stores and transports, and the only one that knows the
//! Prometheus exporter. In order:
//!
//! - Flags, each also an `IRONBUS_*` variable.
//! - SAS policies: the root policy, keyed by `--sas-key` or else by the emulator's public
//!   development key (with which only loopback addresses may be served), plus `--policy
//!   name:key:rights` and the config file's `Policies` (`config::authorizer`).
//! - Stores: RocksDB in `--data-dir` by default (`--stores`, `--durability`,
//!   `--body-cache-mb`), or memory; the broker opens on them and the time recovery took is
//!   logged.
//! - Entities from the Microsoft emulator's config format ([`config`]): missing ones are
//!   created, a queue after the queues it forwards to (`ironbus_core::broker::creation_order`).
//! - Transports until SIGTERM or Ctrl-C: AMQP (plain and AMQPS on `--amqps-addr`) and HTTP
//!   (plain and HTTPS). [`tls`] holds the one certificate of every TLS listener. [`http`] holds
//!   the HTTP side: its flags, the Prometheus recorder (explicit buckets for every histogram)
//!   and the hidden `--testing-fault-injection`, which wraps every store in core's
//!   `FaultyStore` and lets the compat suites make one partition unavailable through
//!   `POST /$ironbus/faults`.
//! - AMQP over WebSockets: the HTTP transport's WebSocket hook sends each upgraded stream to
//!   the AMQP transport's `StreamSender`, so neither transport depends on the other.
//!
//! `examples/embedded.rs` shows the engine assembled by hand, without a network.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod config;
mod http;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Parser;
use ironbus_core::auth::{Rights, SasPolicy, DEVELOPMENT_KEY, DEVELOPMENT_POLICY_NAME};
use ironbus_core::{
    shutdown_signal, Broker, BrokerOptions, NamespaceLimits, Store, SystemClock, Transport,
};
use ironbus_metrics::PrometheusExporter;
use ironbus_store_memory::MemoryStore;
use ironbus_store_rocksdb::{Durability, RocksOptions, RocksStore};
use ironbus_transport_amqp::limits::ConnectionLimits as AmqpLimits;
use ironbus_transport_amqp::{AmqpOptions, AmqpTransport};
use ironbus_transport_http::limits::ConnectionLimits as HttpLimits;

/// An Azure Service Bus compatible message broker.
#[derive(Debug, Parser)]
#[command(name = "ironbus", version)]
struct Args {
    /// Where the AMQP listener binds (Service Bus SDKs in emulator mode use port 5672).
    #[arg(long, env = "IRONBUS_AMQP_ADDR", default_value = "127.0.0.1:5672")]
    amqp_addr: SocketAddr,
    /// Where the AMQP-over-TLS listener binds (Service Bus's port 5671, what SDKs use without
    /// UseDevelopmentEmulator), or `off`. Its certificate: see --tls-cert.
    #[arg(long, env = "IRONBUS_AMQPS_ADDR", default_value = "127.0.0.1:5671")]
    amqps_addr: String,
    /// Storage engine: `rocksdb` (durable: a send is acknowledged once synced to disk) or
    /// `memory` (nothing survives a restart).
    #[arg(long, env = "IRONBUS_STORE", value_enum, default_value_t = StoreKind::Rocksdb)]
    store: StoreKind,
    /// Data directory of durable stores (store `i` lives in `<data-dir>/store-<i>`).
    #[arg(long, env = "IRONBUS_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// Number of store instances the partitions are spread over. One store's failure makes
    /// only its partitions unavailable; each has its own write-ahead log (put the directories
    /// on different disks with symlinks). Fixed once the data directory exists.
    #[arg(long, env = "IRONBUS_STORES", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    stores: u16,
    /// `sync`: a write is acknowledged once the write-ahead log is synced (concurrent writes
    /// share one sync). `relaxed`: once it is in the log, unsynced — survives the process being
    /// killed, but not an operating-system crash or power loss.
    #[arg(long, env = "IRONBUS_DURABILITY", value_enum, default_value_t = DurabilityArg::Sync)]
    durability: DurabilityArg,
    /// Message-body bytes (MiB) kept in memory; the rest are read from the store on delivery.
    #[arg(long, env = "IRONBUS_BODY_CACHE_MB", default_value_t = 64)]
    body_cache_mb: u64,
    /// Entities to declare at start-up, in the Service Bus emulator's config.json format.
    #[arg(long, env = "IRONBUS_CONFIG")]
    config: Option<PathBuf>,
    /// The key of the namespace policy RootManageSharedAccessKey. Without it the emulator's
    /// well-known development key is used, and only loopback addresses may be served.
    #[arg(long, env = "IRONBUS_SAS_KEY", hide_env_values = true)]
    sas_key: Option<String>,
    /// A further namespace policy, `name:key:rights` (rights: Manage, Send, Listen, joined by
    /// `,`; Manage implies Send and Listen), e.g. `--policy reader:KEY:Listen`. Repeatable; the
    /// environment variable takes several separated by `;`.
    #[arg(
        long = "policy",
        env = "IRONBUS_POLICIES",
        value_delimiter = ';',
        hide_env_values = true
    )]
    policies: Vec<SasPolicy>,
    /// Most entities (queues and topics) in the namespace.
    #[arg(long, env = "IRONBUS_MAX_ENTITIES", default_value_t = 10_000)]
    max_entities: usize,
    /// Most partitioned entities in the namespace.
    #[arg(long, env = "IRONBUS_MAX_PARTITIONED_ENTITIES", default_value_t = 100)]
    max_partitioned_entities: usize,
    /// Most connections served at once, counted for the AMQP listener and for the HTTP
    /// listeners (plain and TLS together) separately; 0: unlimited. Over it a connection is
    /// refused: AMQP with `amqp:resource-limit-exceeded`, HTTP with 503.
    #[arg(long, env = "IRONBUS_MAX_CONNECTIONS", default_value_t = 0)]
    max_connections: usize,
    /// Most connections served at once from one client IP address, counted like
    /// --max-connections; 0: unlimited.
    #[arg(long, env = "IRONBUS_MAX_CONNECTIONS_PER_IP", default_value_t = 0)]
    max_connections_per_ip: usize,
    /// Record subscriptions' own metrics (`ironbus_broker_subscription_*`), labelled `entity`
    /// with the subscription's path: one series per subscription and metric, up to 2,000
    /// subscriptions per topic. Off: only the namespace-wide totals are recorded.
    #[arg(long, env = "IRONBUS_METRICS_ENTITY_LABELS")]
    metrics_entity_labels: bool,
    #[command(flatten)]
    http: http::HttpArgs,
    #[command(flatten)]
    tls: tls::TlsArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StoreKind {
    Rocksdb,
    Memory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityArg {
    Sync,
    Relaxed,
}

/// Opens the `--stores` store instances.
fn open_stores(args: &Args) -> anyhow::Result<Vec<Arc<dyn Store>>> {
    (0..args.stores)
        .map(|i| -> anyhow::Result<Arc<dyn Store>> {
            match args.store {
                StoreKind::Memory => Ok(Arc::new(MemoryStore::new())),
                StoreKind::Rocksdb => {
                    let dir = args.data_dir.join(format!("store-{i}"));
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    let options = RocksOptions {
                        durability: match args.durability {
                            DurabilityArg::Sync => Durability::Sync,
                            DurabilityArg::Relaxed => Durability::Relaxed,
                        },
                        ..RocksOptions::default()
                    };
                    let store = RocksStore::open(&dir, options).with_context(|| {
                        format!("opening the RocksDB store in {}", dir.display())
                    })?;
                    Ok(Arc::new(store))
                }
            }
        })
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let amqps_addr = http::parse_addr("amqps-addr", &args.amqps_addr)?;
    let metrics = PrometheusExporter::install()?;

    let (root, key) = match &args.sas_key {
        Some(key) => (SasPolicy::new(DEVELOPMENT_POLICY_NAME, key.clone(), Rights::MANAGE), None),
        None => {
            let mut addrs =
                std::iter::once(args.amqp_addr).chain(amqps_addr).chain(args.http.addrs()?);
            if let Some(addr) = addrs.find(|addr| !addr.ip().is_loopback()) {
                bail!(
                    "refusing to listen on {addr} with the public development key: set --sas-key \
                     (or IRONBUS_SAS_KEY) to serve a non-loopback address"
                );
            }
            tracing::warn!(
                "running with the emulator's well-known development key ({DEVELOPMENT_KEY}); \
                 anyone who can reach the port can use it. Set --sas-key for a real key"
            );
            (
                SasPolicy::new(DEVELOPMENT_POLICY_NAME, DEVELOPMENT_KEY, Rights::MANAGE),
                Some(DEVELOPMENT_KEY),
            )
        }
    };
    let authorizer = config::authorizer(root, &args.policies, args.config.as_deref())?;

    let stores = open_stores(&args)?;
    let (stores, faults) = args.http.wrap_stores(stores);
    if args.store == StoreKind::Rocksdb && args.durability == DurabilityArg::Relaxed {
        tracing::warn!(
            "--durability relaxed: acknowledged messages survive a crash of ironbus, but not of \
             the operating system or a power loss"
        );
    }
    let options = BrokerOptions {
        limits: NamespaceLimits {
            max_entities: args.max_entities,
            max_partitioned_entities: args.max_partitioned_entities,
        },
        body_cache_bytes: args.body_cache_mb << 20,
        metrics_entity_labels: args.metrics_entity_labels,
    };
    let started = std::time::Instant::now();
    let broker = Broker::open_with(stores, Arc::new(SystemClock), options)
        .await
        .context("opening the broker")?;
    let recovered = broker.recovered().await;
    tracing::info!(
        messages = recovered,
        seconds = started.elapsed().as_secs_f64(),
        "store opened and partitions recovered"
    );

    // The config's namespace name is what `$namespaceinfo` reports (else "ironbus").
    let mut namespace = None;
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        namespace = config::namespace_name(&text);
        let declared =
            config::parse(&text).with_context(|| format!("config {}", path.display()))?;
        let created = config::apply(&broker, &declared).await?;
        tracing::info!(
            declared = declared.entity_count(),
            created,
            "entities from {}",
            path.display()
        );
    }

    let authorizer = Arc::new(authorizer);
    let amqp_options = AmqpOptions {
        limits: AmqpLimits {
            max_connections: args.max_connections,
            max_connections_per_ip: args.max_connections_per_ip,
        },
        ..AmqpOptions::default()
    };
    // One certificate for every TLS listener, read (or generated) once.
    let certificate = match (amqps_addr, args.http.https_addr()?) {
        (None, None) => None,
        _ => Some(args.tls.load(&args.data_dir)?),
    };
    let mut amqp = AmqpTransport::bind_with(args.amqp_addr, authorizer.clone(), amqp_options)
        .await
        .with_context(|| format!("binding the AMQP listener on {}", args.amqp_addr))?;
    if let (Some(addr), Some(certificate)) = (amqps_addr, &certificate) {
        amqp.bind_tls(addr, certificate.server_config(&[])?)
            .await
            .with_context(|| format!("binding the AMQP TLS listener on {addr}"))?;
    }
    let amqp_addr = amqp.local_addr()?;
    let amqps_bound = amqp.tls_addr();
    metrics.watch_amqp(amqp.stats());
    let websocket = http::websocket_hook(amqp.stream_sender());
    let mut transports: Vec<Box<dyn Transport>> = vec![Box::new(amqp)];
    let http_limits = HttpLimits {
        max_connections: args.max_connections,
        max_connections_per_ip: args.max_connections_per_ip,
    };
    let http = http::bind(
        &args.http,
        certificate.as_ref(),
        authorizer,
        &broker,
        faults,
        metrics.render_fn(),
        namespace,
        http_limits,
        websocket,
    )
    .await?;
    if let Some(http) = http {
        tracing::info!(http = ?http.plain_addr(), https = ?http.tls_addr(), "http listening");
        transports.push(Box::new(http));
    }

    let (trigger, shutdown) = shutdown_signal();
    let mut serving = tokio::task::JoinSet::new();
    for transport in transports {
        let (broker, shutdown) = (broker.clone(), shutdown.clone());
        serving.spawn(async move {
            let name = transport.name();
            (name, transport.serve(broker, shutdown).await)
        });
    }
    let shown_key = key.unwrap_or("<your --sas-key>");
    tracing::info!(amqp = %amqp_addr, amqps = ?amqps_bound, store = ?args.store, stores = args.stores, "ironbus is listening");
    #[allow(clippy::print_stdout, reason = "the connection string is for people to copy")]
    {
        println!(
            "Endpoint=sb://{}:{};SharedAccessKeyName={DEVELOPMENT_POLICY_NAME};SharedAccessKey={shown_key};UseDevelopmentEmulator=true",
            amqp_addr.ip(),
            amqp_addr.port()
        );
        // Over TLS the SDKs verify the certificate's name (localhost) and, without
        // UseDevelopmentEmulator, connect to port 5671.
        if let Some(amqps) = amqps_bound {
            let port =
                if amqps.port() == 5671 { String::new() } else { format!(":{}", amqps.port()) };
            println!(
                "Endpoint=sb://localhost{port}/;SharedAccessKeyName={DEVELOPMENT_POLICY_NAME};SharedAccessKey={shown_key}"
            );
        }
    }
    wait_for_signal().await?;
    tracing::info!("shutting down");
    trigger.trigger();
    while let Some(done) = serving.join_next().await {
        if let Ok((name, Err(e))) = done {
            tracing::error!(transport = name, error = %e, "transport failed");
        }
    }
    broker.shutdown();
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    Ok(())
}
