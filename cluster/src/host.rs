//! What the cluster asks of the broker it runs beside: the [`Host`] trait.

use std::fmt;

use async_trait::async_trait;
use ironbus_core::PartitionId;

use crate::config::NodeId;

/// One partition of a top-level entity (a queue or topic, by its store id): the unit of
/// ownership.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionRef {
    pub entity: u64,
    pub partition: PartitionId,
}

impl PartitionRef {
    pub fn new(entity: u64, partition: PartitionId) -> Self {
        PartitionRef { entity, partition }
    }
}

impl fmt::Display for PartitionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.entity, self.partition)
    }
}

/// Where a partition is served, as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Here: this node holds the partition with its current token.
    Local,
    /// On another live node, reachable over the internal link at `link_addr`.
    Remote { node_id: NodeId, link_addr: String },
    /// Nowhere known: unclaimed, being handed over, or its owner is not alive (commands wait or
    /// fail with the retriable "partition unavailable").
    Unknown,
}

/// Why [`Host::acquire`] did not take a partition. Either way the partition is not served; the
/// cluster claims it again with a new token in a later round while this node is its desired
/// owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The partition's fence holds the claim's token or a greater one: another claim came
    /// later.
    #[error("the fence holds a token at or above the claim's")]
    Fenced,
    /// The partition's store could not serve the claim or the rebuild. Retriable.
    #[error("partition unavailable: {0}")]
    Unavailable(String),
}

/// The broker beside the cluster: it lists the partitions that exist and serves the ones this
/// node owns. The cluster calls it from one task, one call at a time.
#[async_trait]
pub trait Host: Send + Sync + fmt::Debug + 'static {
    /// Every partition that exists now, of every top-level entity.
    ///
    /// # Behavior
    /// Changes as entities are created and deleted; the cluster reads it once per round. A
    /// partition missing from it is neither claimed nor routed, and its owner row is deleted.
    fn partitions(&self) -> Vec<PartitionRef>;

    /// Starts serving `p` under `token`: moves the partition's fence to `token` by
    /// compare-and-set, rebuilds the partition from the store, then serves it, every write
    /// guarded by the token.
    ///
    /// # Behavior
    /// Called only after this node's claim of `p` with `token` committed; tokens of one
    /// partition only grow. On `Err` the host does not serve `p`.
    async fn acquire(&self, p: PartitionRef, token: u64) -> Result<(), HostError>;

    /// Stops serving `p`: finishes the cycle in flight, then stops the partition's actor
    /// without writing anything more.
    ///
    /// # Behavior
    /// Returns once nothing of `p` is served here; the cluster marks its owner row released
    /// only then. Releasing a partition not served is not an error.
    async fn release(&self, p: PartitionRef);

    /// Where `p` is served now, for forwarding commands for partitions this node does not own.
    ///
    /// # Behavior
    /// Called whenever `p`'s route changes (and once for each partition when first seen); must
    /// not block.
    fn route(&self, p: PartitionRef, route: Route);

    /// The other live nodes and their link addresses, once per round (for calls that go to
    /// every node, not to a partition's owner).
    ///
    /// # Behavior
    /// Must not block. The default does nothing.
    fn members(&self, others: &[(NodeId, String)]) {
        let _ = others;
    }
}
