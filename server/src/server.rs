//! [`Server`]: a broker and the transports that serve it, until shutdown.

use std::future::Future;

use anyhow::{Context, Result};
use ironbus_core::{shutdown_signal, Broker, Transport};

/// A broker and its transports, bound and ready: [`Server::serve_until`] serves them.
pub struct Server {
    broker: Broker,
    transports: Vec<Box<dyn Transport>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.transports.iter().map(|t| t.name()).collect();
        f.debug_struct("Server").field("broker", &self.broker).field("transports", &names).finish()
    }
}

impl Server {
    pub fn new(broker: Broker) -> Self {
        Self { broker, transports: Vec::new() }
    }

    /// Adds a transport (already bound, so its address is known).
    pub fn with(mut self, transport: impl Transport + 'static) -> Self {
        self.transports.push(Box::new(transport));
        self
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Serves every transport until `until` completes (e.g. [`shutdown_requested`]), then
    /// stops them, waits for them to finish and shuts the broker down; returns `until`'s
    /// error, if any, once everything stopped. A transport that fails is logged.
    pub async fn serve_until(self, until: impl Future<Output = Result<()>>) -> Result<()> {
        let (trigger, shutdown) = shutdown_signal();
        let mut serving = tokio::task::JoinSet::new();
        for transport in self.transports {
            let (broker, shutdown) = (self.broker.clone(), shutdown.clone());
            serving.spawn(async move {
                let name = transport.name();
                (name, transport.serve(broker, shutdown).await)
            });
        }
        let stopped = until.await;
        tracing::info!("shutting down");
        trigger.trigger();
        while let Some(done) = serving.join_next().await {
            if let Ok((name, Err(e))) = done {
                tracing::error!(transport = name, error = %e, "transport failed");
            }
        }
        self.broker.shutdown();
        stopped
    }
}

/// Completes on Ctrl-C or (Unix) SIGTERM.
pub async fn shutdown_requested() -> Result<()> {
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
