//! The task that runs a [`Member`] round after round, and the handle that stops it.

use std::sync::Arc;

use ironbus_core::{Clock, Store, StoreError};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::config::{Config, ConfigError};
use crate::host::Host;
use crate::member::Member;

/// A node's ownership, running: a task on the caller's tokio runtime that calls
/// [`Member::round`] once per renew interval (measured on the node's [`Clock`]).
///
/// Dropping the handle stops the task after its current round, leaving the cluster the way a
/// crash does (the others take the partitions after the lease); [`Ownership::leave`] leaves
/// gracefully.
#[derive(Debug)]
pub struct Ownership {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Member>,
    poke: Poke,
}

/// Runs a node's next round at once rather than at its interval (the namespace changed: an
/// entity's partitions wait to be claimed). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Poke(Arc<Notify>);

impl Poke {
    pub fn poke(&self) {
        self.0.notify_one();
    }
}

/// Why [`Ownership::leave`] did not finish cleanly.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaveError {
    /// The round task panicked or was cancelled: nothing was handed over.
    #[error("the ownership task ended abnormally: {0}")]
    Task(String),
    /// A write of the hand-over failed; what was served is released locally all the same.
    #[error("leaving: {0}")]
    Store(#[from] StoreError),
}

impl Ownership {
    /// Starts taking part in ownership as `config` says, on the namespace store `store`.
    pub fn start(
        config: Config,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        host: Arc<dyn Host>,
    ) -> Result<Ownership, ConfigError> {
        Ok(Ownership::run(Member::new(config, store, clock, host)?))
    }

    /// Runs `member` round after round until stopped.
    pub fn run(mut member: Member) -> Ownership {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let poke = Poke::default();
        let poked = poke.0.clone();
        let task = tokio::spawn(async move {
            loop {
                let clock = Arc::clone(member.clock());
                let next = clock.now().saturating_add(member.config().renew_interval);
                member.round().await;
                tokio::select! {
                    () = clock.sleep_until(next) => {}
                    () = poked.notified() => {}
                    _ = &mut stopped => break,
                }
            }
            member
        });
        Ownership { stop, task, poke }
    }

    /// The handle that runs the next round at once.
    pub fn poke(&self) -> Poke {
        self.poke.clone()
    }

    /// Stops the rounds (after the one in flight) and leaves the cluster: see
    /// [`Member::leave`]. Call it on SIGTERM.
    pub async fn leave(self) -> Result<(), LeaveError> {
        let Ownership { stop, task, .. } = self;
        // A receiver gone means the task has ended already; its result says how.
        let _ = stop.send(());
        let member = task.await.map_err(|error| LeaveError::Task(error.to_string()))?;
        Ok(member.leave().await?)
    }
}
