//! Deleting an entity's data: stopping its partitions before its records go, and reclaiming
//! what other stores hold of it afterwards (`broker/queues.rs` and `broker/topics.rs` decide
//! what goes; this file how).
//!
//! **Architecture Invariant:** no write of a deleted entity's partition lands after the delete
//! that removes its records. Partitions running here are stopped first — each finishes the
//! commands queued before its stop, whose writes the delete then removes — and what comes
//! after waits on the route and fails with `EntityNotFound` once the delete is committed (or
//! goes to a restarted actor if the delete fails). A partition running on another node writes
//! under its fence, which the delete removes with the rest: its later writes are refused.

use tokio::sync::oneshot;

use super::{Broker, EntityHandle};
use crate::keys::{self, EntityId};
use crate::partition::Command;
use crate::store::{prefix_end, WriteBatch};

/// Partitions stopped for a delete: their index and fence token, to restart them with if the
/// delete fails.
#[derive(Debug, Default)]
pub(super) struct Halted(Vec<(usize, Option<u64>)>);

impl Broker {
    /// Stops every partition of `entity` that runs here, once it has carried out the commands
    /// queued before; commands sent from now on wait on its route.
    pub(super) async fn halt(&self, entity: &EntityHandle) -> Halted {
        let mut halted = Vec::new();
        for (index, partition) in entity.partitions.iter().enumerate() {
            let Some((tx, token)) = partition.route.hold_local() else { continue };
            let (ack, stopped) = oneshot::channel();
            if tx.send((partition.lane, Command::Stop(ack))).is_ok() {
                let _ = stopped.await;
            }
            halted.push((index, token));
        }
        Halted(halted)
    }

    /// Runs the partitions [`Broker::halt`] stopped again (the delete failed): each rebuilds
    /// from the store and then serves what waited on its route.
    pub(super) fn resume(&self, entity: &EntityHandle, halted: Halted) {
        let name = entity.path.as_str();
        for (index, token) in halted.0 {
            let Some(partition) = entity.partitions.get(index) else { continue };
            let started = partition
                .route
                .switch(|spec| self.start_local(entity.id, name, partition.id, spec, token));
            if let Err(e) = started {
                tracing::warn!(entity = %entity.path, error = %e, "could not restart a partition");
            }
        }
    }

    /// Removes what the stores but the namespace's hold under the entity ids `ids` (deleted
    /// entities': unreachable, as ids are never reused); only logs if a store cannot.
    pub(super) async fn reclaim(&self, entity: &EntityHandle, ids: &[EntityId]) {
        for store in self.inner.stores.iter().skip(1) {
            let mut batch = WriteBatch::new();
            for &id in ids {
                let prefix = keys::entity_prefix(id);
                let end = prefix_end(&prefix);
                batch.delete_range(prefix, end);
            }
            if let Err(e) = store.write(batch).await {
                tracing::warn!(entity = %entity.path, error = %e, "could not delete a deleted entity's messages from a store");
            }
        }
    }
}
