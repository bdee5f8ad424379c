//! A cluster node's side of the broker (`CLUSTER.md` §2–3): the partitions it runs, and the
//! routes to the owners of the rest.
//!
//! A broker opened with [`BrokerOptions::cluster`](super::BrokerOptions::cluster) starts every
//! partition *nowhere*: its commands are refused with the retriable `PartitionUnavailable`
//! until the cluster's ownership either [acquires](Broker::acquire) it here, under a token
//! that fences every write, or [routes](Broker::route_remote) it to its owner. A partition
//! handed over is [released](Broker::release): its actor finishes its cycle and stops, leaving
//! the records to the next owner's rebuild.
//!
//! **Architecture Invariant:** a node runs a partition only under a token the ownership gave
//! it, and stops it before it routes it anywhere else; the route switches before the actor
//! stops, so no command is left in a stopped actor's queue.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Broker, EntityHandle};
use crate::error::{BrokerError, Result};
use crate::keys::EntityId;
use crate::partition::{
    self, Command, Owner, PartitionContext, PartitionHandle, StartSpec, Target,
};
use crate::remote::{LinkedPartition, Peer};
use crate::types::PartitionId;

/// How long a creation waits for its partitions to be claimed (see `wait_placed`).
const PLACEMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const PLACEMENT_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Where one partition runs (see [`Broker::placement`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub entity: String,
    pub partition: u16,
    pub owner: Owner,
    pub available: bool,
}

/// A partition of a queue or topic, as the cluster's ownership names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionRef {
    /// The entity's store id (never reused).
    pub entity: u64,
    pub partition: u16,
}

impl Broker {
    /// Starts the actor of a partition on this node, from what its route keeps.
    pub(super) fn start_local(
        &self,
        entity: EntityId,
        name: &str,
        partition: PartitionId,
        spec: &StartSpec,
        fence_token: Option<u64>,
    ) -> Target {
        let context = PartitionContext {
            entity_id: entity,
            entity_name: name.to_owned(),
            partition,
            description: spec.description.clone(),
            store: self.store_for(entity, partition).clone(),
            clock: self.inner.clock.clone(),
            cache: self.inner.cache.clone(),
            metrics_entity_labels: self.inner.metrics_entity_labels,
            topic: spec.topic.clone(),
            fence_token,
        };
        Target::Local(partition::spawn(context, spec.shared.clone()), fence_token)
    }

    /// Every partition of every queue and topic: what a cluster's ownership shares out.
    pub fn partition_refs(&self) -> Vec<PartitionRef> {
        let mut refs: Vec<PartitionRef> = self
            .entities()
            .values()
            .filter(|e| e.path.parent().is_none())
            .flat_map(|e| {
                e.partitions.iter().map(|p| PartitionRef { entity: e.id, partition: p.id.0 })
            })
            .collect();
        refs.sort_unstable();
        refs
    }

    /// The top-level entity whose store id is `entity`, with its partition `partition`.
    pub(crate) fn partition_of(&self, at: PartitionRef) -> Result<(Arc<EntityHandle>, usize)> {
        let entity = self
            .entities()
            .values()
            .find(|e| e.id == at.entity && e.path.parent().is_none())
            .cloned()
            .ok_or_else(|| BrokerError::EntityNotFound { entity: format!("#{}", at.entity) })?;
        let index = usize::from(at.partition);
        if index >= entity.partitions.len() {
            return Err(BrokerError::invalid(
                "PartitionId",
                format!("{} has no partition {}", entity.path, at.partition),
            ));
        }
        Ok((entity, index))
    }

    /// Runs partition `at` on this node, fenced with `token` (which must be greater than any
    /// token before it): the actor moves the partition's fence to it, rebuilds from the store
    /// and serves. Returns once it has loaded, or the error that stopped it (a `Conflict` from
    /// the store when a greater token holds the fence), in which case it runs nowhere.
    pub async fn acquire(&self, at: PartitionRef, token: u64) -> Result<()> {
        let (entity, index) = self.partition_of(at)?;
        let handle = &entity.partitions[index];
        handle.shared.mark_available(true);
        let (id, name) = (entity.id, entity.path.as_str().to_owned());
        let old = handle
            .route
            .switch(|spec| self.start_local(id, &name, handle.id, spec, Some(token)))?;
        stop(handle, old).await;
        match handle.ask(|reply| Command::Counts { reply }).await {
            Ok(counts) => {
                // Send-via transfers left by the previous owner are forwarded from here now.
                if counts.send_via > 0 {
                    self.ensure_send_via_forwarder(&entity);
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.release(at).await;
                Err(e)
            }
        }
    }

    /// Stops running partition `at` here, if it does: its actor finishes the cycle under way
    /// and stops; its records stay for the next owner. Until a route is set its commands are
    /// refused with the retriable `PartitionUnavailable`.
    pub async fn release(&self, at: PartitionRef) -> Result<()> {
        let (entity, index) = self.partition_of(at)?;
        let handle = &entity.partitions[index];
        let old = handle.route.switch(|_| Target::Elsewhere)?;
        stop(handle, old).await;
        handle.shared.mark_available(false);
        Ok(())
    }

    /// Sends partition `at`'s commands to its owner through `peer` (stopping it here first if
    /// it ran here).
    pub async fn route_remote(&self, at: PartitionRef, peer: Arc<dyn Peer>) -> Result<()> {
        let (entity, index) = self.partition_of(at)?;
        let handle = &entity.partitions[index];
        let remote = LinkedPartition::new(peer, at, entity.path.as_str(), self.inner.clock.clone());
        let old = handle.route.switch(|_| Target::Remote(Arc::new(remote)))?;
        stop(handle, old).await;
        handle.shared.mark_available(true);
        Ok(())
    }

    /// Where every partition of every queue and topic runs, as this node knows it, and whether
    /// it is available: `/health`'s cluster view.
    pub fn placement(&self) -> Vec<Placement> {
        let mut placement: Vec<Placement> = self
            .entities()
            .values()
            .filter(|e| e.path.parent().is_none())
            .flat_map(|e| {
                e.partitions.iter().map(|p| Placement {
                    entity: e.path.to_string(),
                    partition: p.id.0,
                    owner: p.route.owner(),
                    available: p.shared.is_available(),
                })
            })
            .collect();
        placement.sort_by(|a, b| (&a.entity, a.partition).cmp(&(&b.entity, b.partition)));
        placement
    }

    /// In a cluster whose nodes hear of management writes (a namespace listener), waits a
    /// little for a new entity's partitions to be claimed, so that a client may use the entity
    /// as soon as its creation answers. Gives up quietly after a few seconds: the partitions
    /// are then unavailable, retriably, until claimed.
    pub(super) async fn wait_placed(&self, entity: &EntityHandle) {
        let listening =
            self.inner.namespace_listener.read().unwrap_or_else(|e| e.into_inner()).is_some();
        if !self.inner.cluster || !listening {
            return;
        }
        let clock = &self.inner.clock;
        let deadline = clock.now().saturating_add(PLACEMENT_WAIT);
        while entity.partitions.iter().any(|p| p.route.owner() == Owner::Unknown) {
            if clock.now() >= deadline {
                tracing::info!(entity = %entity.path, "created; partitions not yet claimed");
                return;
            }
            clock.sleep_until(clock.now().saturating_add(PLACEMENT_POLL)).await;
        }
    }

    /// A receiver id unique on this node.
    pub(crate) fn new_receiver_id(&self) -> u64 {
        self.inner.next_receiver_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The stand-ins holding sessions here for receivers on other nodes (`remote/sessions.rs`).
    pub(crate) fn remote_holders(&self) -> &crate::remote::RemoteHolders {
        &self.inner.remote_holders
    }

    /// Whether partition `at` runs on this node.
    pub fn runs_here(&self, at: PartitionRef) -> bool {
        self.partition_of(at)
            .map(|(entity, index)| entity.partitions[index].route.is_local())
            .unwrap_or(false)
    }
}

/// Stops the actor a route sent commands to before a switch, if it ran here, and waits until it
/// has.
async fn stop(handle: &PartitionHandle, old: Target) {
    if let Target::Local(tx, _) = old {
        let (ack, stopped) = oneshot::channel();
        if tx.send((handle.lane, Command::Stop(ack))).is_ok() {
            let _ = stopped.await;
        }
    }
}
