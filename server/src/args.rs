//! [`Args`]: every flag of the default server (each also an `IRONBUS_*` environment variable).
//! A binary of your own can parse them as they are, or flatten parts of them (`StoreArgs`,
//! `HttpArgs`, `TlsArgs`) into its own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use ironbus_core::auth::SasPolicy;

use crate::cluster::ClusterArgs;
use crate::http::HttpArgs;
use crate::output::LogFormat;
use crate::stores::StoreArgs;
use crate::tls::TlsArgs;

/// An Azure Service Bus compatible message broker.
#[derive(Debug, Parser)]
#[command(name = "ironbus", version)]
pub struct Args {
    /// Where the AMQP listener binds (Service Bus SDKs in emulator mode use port 5672).
    #[arg(long, env = "IRONBUS_AMQP_ADDR", default_value = "127.0.0.1:5672")]
    pub amqp_addr: SocketAddr,
    /// Where the AMQP-over-TLS listener binds (Service Bus's port 5671, what SDKs use without
    /// UseDevelopmentEmulator), or `off`. Its certificate: see --tls-cert.
    #[arg(long, env = "IRONBUS_AMQPS_ADDR", default_value = "127.0.0.1:5671")]
    pub amqps_addr: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Message-body bytes (MiB) kept in memory; the rest are read from the store on delivery.
    #[arg(long, env = "IRONBUS_BODY_CACHE_MB", default_value_t = 64)]
    pub body_cache_mb: u64,
    /// Entities to declare at start-up, in the Service Bus emulator's config.json format. Its
    /// first namespace is the default one (served for every host); each further namespace is
    /// served to clients that address `<name>.<any domain>` (e.g. `sb://test-1.localhost`).
    #[arg(long, env = "IRONBUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Create a namespace the first time a client addresses it by host name: `sb://<name>.localhost`
    /// gets namespace `<name>`, with its own entities, quotas and counts, kept in the same stores
    /// (for test suites that want a fresh namespace per test). Not with `--cluster`.
    #[arg(long, env = "IRONBUS_NAMESPACES_ON_DEMAND")]
    pub namespaces_on_demand: bool,
    /// The key of the namespace policy RootManageSharedAccessKey. Without it the emulator's
    /// well-known development key is used, and only loopback addresses may be served.
    #[arg(long, env = "IRONBUS_SAS_KEY", hide_env_values = true)]
    pub sas_key: Option<String>,
    /// A further namespace policy, `name:key:rights` (rights: Manage, Send, Listen, joined by
    /// `,`; Manage implies Send and Listen), e.g. `--policy reader:KEY:Listen`. Repeatable; the
    /// environment variable takes several separated by `;`.
    #[arg(
        long = "policy",
        env = "IRONBUS_POLICIES",
        value_delimiter = ';',
        hide_env_values = true
    )]
    pub policies: Vec<SasPolicy>,
    /// Most entities (queues and topics) in the namespace.
    #[arg(long, env = "IRONBUS_MAX_ENTITIES", default_value_t = 10_000)]
    pub max_entities: usize,
    /// Most partitioned entities in the namespace.
    #[arg(long, env = "IRONBUS_MAX_PARTITIONED_ENTITIES", default_value_t = 100)]
    pub max_partitioned_entities: usize,
    /// Most connections served at once, counted for the AMQP listener and for the HTTP
    /// listeners (plain and TLS together) separately; 0: unlimited. Over it a connection is
    /// refused: AMQP with `amqp:resource-limit-exceeded`, HTTP with 503.
    #[arg(long, env = "IRONBUS_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Most connections served at once from one client IP address, counted like
    /// --max-connections; 0: unlimited.
    #[arg(long, env = "IRONBUS_MAX_CONNECTIONS_PER_IP", default_value_t = 0)]
    pub max_connections_per_ip: usize,
    /// Record subscriptions' own metrics (`ironbus_broker_subscription_*`), labelled `entity`
    /// with the subscription's path: one series per subscription and metric, up to 2,000
    /// subscriptions per topic. Off: only the namespace-wide totals are recorded.
    #[arg(long, env = "IRONBUS_METRICS_ENTITY_LABELS")]
    pub metrics_entity_labels: bool,
    /// How the log is written to standard output: `text` (colours only on a terminal without
    /// NO_COLOR) or `json` (one object per line, the start-up banner included, for log
    /// shippers). RUST_LOG filters it (default `info`).
    #[arg(long, env = "IRONBUS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Testing only (built with the `fault-injection` feature): wraps every store in a fault
    /// injector and serves `POST /$ironbus/faults?entity=..&partition=..&available=..` on the
    /// plain HTTP listener.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "IRONBUS_TESTING_FAULT_INJECTION", hide = true)]
    pub testing_fault_injection: bool,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}
