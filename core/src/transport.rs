//! The front-end plug-in: a transport serves clients with a [`Broker`] until told to stop.
//! Protocol knowledge (AMQP, HTTP) lives in transport crates; the server runs several side by
//! side on one broker.
//!
//! Beside the trait: [`limits`], protocol-neutral connection limits (in all and per client IP
//! address) that every transport re-exports and answers in its own protocol, and
//! [`authorization`], what both transports ask the broker while checking a token (the entity
//! an audience names, the authorization rules of the queue or topic a path is in).

pub mod authorization;
pub mod limits;

use std::error::Error;
use std::fmt;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::broker::Broker;

/// Why a transport stopped serving other than by shutdown.
pub type TransportError = Box<dyn Error + Send + Sync>;

/// A protocol front end.
#[async_trait]
pub trait Transport: Send + fmt::Debug + 'static {
    /// A short name for logs and metrics labels (`amqp`, `http`).
    fn name(&self) -> &'static str;

    /// Serves clients until `shutdown` fires, then closes its connections and returns.
    ///
    /// # Behavior
    /// Returns `Ok` after a requested shutdown, `Err` if it could not serve (for example its
    /// address is taken). Must not return before shutdown otherwise.
    async fn serve(
        self: Box<Self>,
        broker: Broker,
        shutdown: Shutdown,
    ) -> Result<(), TransportError>;
}

/// Tells transports to stop. Dropping it also stops them.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// What a transport waits on to know it should stop. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new trigger and the signal it fires.
pub fn shutdown_signal() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Completes once shutdown is requested (or the trigger is gone).
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_fires_on_trigger_and_on_drop() {
        let (trigger, mut shutdown) = shutdown_signal();
        assert!(!shutdown.is_triggered());
        trigger.trigger();
        shutdown.wait().await;
        assert!(shutdown.is_triggered());

        let (trigger, mut shutdown) = shutdown_signal();
        drop(trigger);
        shutdown.wait().await;
    }
}
