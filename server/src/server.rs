//! [`Server`]: a broker and the transports that serve it, until shutdown.

use std::future::Future;

use ironbus_core::{shutdown_signal, Broker, Namespaces, Transport};

use crate::ServerError;

/// A broker and its transports, bound and ready: [`Server::serve_until`] serves them.
pub struct Server {
    broker: Broker,
    /// The namespaces served beside the broker's (shut down with it).
    namespaces: Option<Namespaces>,
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
        Self { broker, namespaces: None, transports: Vec::new() }
    }

    /// Also shuts `namespaces`' brokers down at the end (the broker's own is the default one).
    pub fn with_namespaces(mut self, namespaces: Namespaces) -> Self {
        self.namespaces = Some(namespaces);
        self
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
    /// error (whatever its type: [`ServerError`] for [`shutdown_requested`]), if any, once
    /// everything stopped. A transport that fails is logged.
    pub async fn serve_until<E>(self, until: impl Future<Output = Result<(), E>>) -> Result<(), E> {
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
        match &self.namespaces {
            Some(namespaces) => namespaces.shutdown(),
            None => self.broker.shutdown(),
        }
        stopped
    }
}

/// Completes on Ctrl-C or (Unix) SIGTERM.
pub async fn shutdown_requested() -> Result<(), ServerError> {
    let failed = |action| move |source| ServerError::Signal { action, source };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term =
            signal(SignalKind::terminate()).map_err(failed("installing SIGTERM handler"))?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(failed("waiting for Ctrl-C"))?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await.map_err(failed("waiting for Ctrl-C"))?;
    Ok(())
}
