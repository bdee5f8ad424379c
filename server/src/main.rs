//! `ironbus`: the default server, assembled from the workspace's crates.
//!
//! This version runs the broker engine on the in-memory store; the AMQP and HTTP transports,
//! RocksDB and entity configuration arrive with their own issues.

use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Parser;
use ironbus_core::{shutdown_signal, Broker, NamespaceLimits, Store, SystemClock, Transport};
use ironbus_store_memory::MemoryStore;

/// An Azure Service Bus compatible message broker.
#[derive(Debug, Parser)]
#[command(name = "ironbus", version)]
struct Args {
    /// Storage engine: `memory` (not durable).
    #[arg(long, env = "IRONBUS_STORE", default_value = "memory")]
    store: String,
    /// Most entities (queues and topics) in the namespace.
    #[arg(long, env = "IRONBUS_MAX_ENTITIES", default_value_t = 10_000)]
    max_entities: usize,
    /// Most partitioned entities in the namespace.
    #[arg(long, env = "IRONBUS_MAX_PARTITIONED_ENTITIES", default_value_t = 100)]
    max_partitioned_entities: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let store: Arc<dyn Store> = match args.store.as_str() {
        "memory" => Arc::new(MemoryStore::new()),
        other => bail!("unknown store {other:?}: this build supports `memory`"),
    };
    let limits = NamespaceLimits {
        max_entities: args.max_entities,
        max_partitioned_entities: args.max_partitioned_entities,
    };
    let broker =
        Broker::open(store, Arc::new(SystemClock), limits).await.context("opening the broker")?;

    // Transports join here as their crates land (AMQP, HTTP).
    let transports: Vec<Box<dyn Transport>> = Vec::new();
    if transports.is_empty() {
        tracing::warn!("no transport is built into this version: clients cannot connect yet");
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
    tracing::info!(store = %args.store, "ironbus started; Ctrl-C or SIGTERM stops it");
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
