//! ironbus-store-memory: a [`Store`] on an in-memory ordered map.
//!
//! [`MemoryStore`] keeps every key and value in a `BTreeMap<Bytes, Bytes>` behind one
//! read-write lock. It is the store for tests, for development and for brokers whose messages
//! may be lost.
//!
//! **Promise:** a [`Store::write`] that returns `Ok` is visible to every later read, and each
//! batch is applied all-or-nothing under the write lock, so no read sees it half-applied. Its
//! guards are checked under the same lock, before any of its operations, so no other write
//! comes between the check and the batch: a guard that does not hold fails the write with
//! `Conflict` and nothing is applied. It has no write limits ([`Store::limits`] is unlimited).
//! Nothing is durable: all data is lost when the store is dropped or the process exits.
//! [`Store::health`] always reports [`StoreHealth::Healthy`]; no operation fails but a guarded
//! write whose guard does not hold.
//!
//! Ranges follow [`Store::scan`]: an empty `end` means "no upper bound", and `start >= end`
//! (with a non-empty `end`) is an empty range. A [`BatchOp::DeleteRange`] removes exactly the
//! keys a scan of the same range would return.
//!
//! Its tests run the core's conformance suite on it directly, behind a fault-free
//! `FaultyStore` (which must be indistinguishable from the store it wraps) and behind one that
//! imposes write limits, and check with a toy snapshotting store that the suite's durability
//! cases catch a store that forgets.
//! **Architecture Invariant:** like every store, it depends on no workspace crate but
//! `ironbus-core`.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{
    range_bounds, BatchOp, KeyValue, Store, StoreError, StoreHealth, WriteBatch,
};

/// An in-memory, non-durable [`Store`]. Cheap to create; share it as `Arc<MemoryStore>`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: RwLock<BTreeMap<Bytes, Bytes>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        // No code panics while holding the lock (see `write`), so a poisoned lock still guards a
        // consistent map.
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(key).cloned())
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let Some(bounds) = range_bounds(start, end) else {
            return Ok(Vec::new());
        };
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        Ok(map.range::<[u8], _>(bounds).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        let (guards, ops) = batch.into_parts();
        if let Some(failed) = guards.iter().find(|g| !g.holds(map.get(&g.key).map(|v| &v[..]))) {
            return Err(failed.conflict());
        }
        // Atomicity rests on this loop not panicking half-way: `range_bounds` never yields an
        // inverted range (which would make `BTreeMap::range` panic).
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    map.insert(key, value);
                }
                BatchOp::Delete { key } => {
                    map.remove(&key);
                }
                BatchOp::DeleteRange { start, end } => {
                    if let Some(bounds) = range_bounds(&start, &end) {
                        let doomed: Vec<Bytes> =
                            map.range::<[u8], _>(bounds).map(|(k, _)| k.clone()).collect();
                        for key in doomed {
                            map.remove(&key);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn health(&self) -> StoreHealth {
        StoreHealth::Healthy
    }
}
