//! A partition's fence: the core half of ownership in a cluster (`CLUSTER.md` §2).
//!
//! Each partition may have a **fence record**, a key beside its records (`keys::fence`: the
//! partition's prefix and the tag `o`) holding the token of the partition's owner (a `u64`,
//! big-endian). Tokens come from outside the core (in a cluster, a sequence that only grows,
//! one token per claim). A node that takes a partition [claims](Fence::claim) it, moving the
//! fence to its token by compare-and-set, and only then rebuilds the partition from the store;
//! every write of its partition carries the [guard](Fence::guard) "the fence still holds my
//! token". A stale owner's write therefore either committed before the fence moved, and the
//! new owner's rebuild reads it, or is refused with [`StoreErrorKind::Conflict`] and applies
//! nothing.
//!
//! A partition actor runs fenced when its broker was opened with
//! [`BrokerOptions::fence_token`](crate::BrokerOptions::fence_token): it claims before its first
//! rebuild (a fence already at its token is its own claim whose answer was lost: tokens are
//! one per claim), and a `Conflict` (from the claim or a write) stops it for good — every
//! command is answered with the retriable
//! [`PartitionUnavailable`](crate::BrokerError::PartitionUnavailable), no rebuild follows: the
//! partition has moved. An unfenced partition (one node) writes no fence record and no guard.
//!
//! **Architecture Invariant:** the fence only moves forward: a claim applies only if its token
//! is greater than the fence's and the fence still holds what the claim read. A fenced
//! partition's every write is guarded by its own token, so once the fence has moved no write of
//! the old owner applies.

use bytes::Bytes;

use crate::keys;
use crate::store::{Store, StoreError, StoreErrorKind, WriteBatch};
use crate::types::PartitionId;

/// The fence of one partition of an entity (a queue or topic, by its store id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    key: Bytes,
}

impl Fence {
    /// The fence of partition `partition` of the entity whose store id is `entity`.
    pub fn new(entity: u64, partition: PartitionId) -> Self {
        Fence { key: keys::fence(entity, partition) }
    }

    /// The store key of the fence record.
    pub fn key(&self) -> &Bytes {
        &self.key
    }

    /// The token the fence holds, `None` when no owner ever claimed the partition.
    pub async fn token(&self, store: &dyn Store) -> Result<Option<u64>, StoreError> {
        store.get(&self.key).await?.map(|v| decode(&v)).transpose()
    }

    /// Moves the fence to `token`, by compare-and-set: refused with
    /// [`StoreErrorKind::Conflict`] when the fence holds `token` or a greater one, or when
    /// another claim moved it between this claim's read and its write.
    pub async fn claim(&self, store: &dyn Store, token: u64) -> Result<(), StoreError> {
        let current = store.get(&self.key).await?;
        if let Some(held) = current.as_deref().map(decode).transpose()? {
            if held >= token {
                return Err(StoreError::new(
                    StoreErrorKind::Conflict,
                    format!("fence: a claim with token {token} while the fence holds {held}"),
                ));
            }
        }
        let mut batch = WriteBatch::new();
        batch.require(self.key.clone(), current);
        batch.put(self.key.clone(), encode(token));
        store.write(batch).await
    }

    /// Guards `batch`: it applies only while the fence holds `token`.
    pub fn guard(&self, batch: &mut WriteBatch, token: u64) {
        batch.require(self.key.clone(), Some(encode(token)));
    }

    /// What [`Fence::guard`] adds to a batch: one guard of this many bytes.
    pub(crate) fn guard_bytes(&self) -> usize {
        self.key.len() + 8
    }
}

fn encode(token: u64) -> Bytes {
    Bytes::copy_from_slice(&token.to_be_bytes())
}

fn decode(value: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| StoreError::corrupted(format!("fence: a token of {} bytes", value.len())))?;
    Ok(u64::from_be_bytes(bytes))
}
