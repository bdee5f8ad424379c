//! A [`Store`] wrapper with write limits, for testing that the core keeps within them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{KeyValue, Store, StoreError, StoreHealth, WriteBatch, WriteLimits};

/// Wraps a store and gives it [`WriteLimits`] (the smaller of these and the inner store's, of
/// each), as a store bounded per transaction (PostgreSQL, say) has: a batch over them is
/// refused with
/// [`StoreErrorKind::InvalidInput`](crate::store::StoreErrorKind::InvalidInput) and never
/// reaches the inner store. It records the largest batch it was handed (refused or not), how
/// many batches it wrote and how many it refused. Each operation yields to other tasks first,
/// as one over a network does (so that a task that never waits shows in a test as one that
/// starves the others).
#[derive(Debug)]
pub struct LimitedStore {
    inner: Arc<dyn Store>,
    limits: WriteLimits,
    largest_ops: AtomicUsize,
    largest_bytes: AtomicUsize,
    writes: AtomicU64,
    refused: AtomicU64,
}

impl LimitedStore {
    /// Wraps `inner` with `limits`.
    pub fn new(inner: Arc<dyn Store>, limits: WriteLimits) -> Self {
        let own = inner.limits();
        let limits = WriteLimits {
            max_ops: limits.max_ops.min(own.max_ops),
            max_bytes: limits.max_bytes.min(own.max_bytes),
        };
        Self {
            inner,
            limits,
            largest_ops: AtomicUsize::new(0),
            largest_bytes: AtomicUsize::new(0),
            writes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The most operations and guards one batch handed to this store held.
    pub fn largest_ops(&self) -> usize {
        self.largest_ops.load(Ordering::SeqCst)
    }

    /// The most bytes ([`WriteBatch::bytes`]) one batch handed to this store held.
    pub fn largest_bytes(&self) -> usize {
        self.largest_bytes.load(Ordering::SeqCst)
    }

    /// Batches written (not counting refused ones).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Batches refused for being over the limits.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

#[async_trait]
impl Store for LimitedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        tokio::task::yield_now().await;
        self.inner.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        tokio::task::yield_now().await;
        self.inner.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        self.largest_ops.fetch_max(batch.ops_and_guards(), Ordering::SeqCst);
        self.largest_bytes.fetch_max(batch.bytes(), Ordering::SeqCst);
        if !self.limits.admits_batch(&batch) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(self.limits.exceeded(&batch));
        }
        self.inner.write(batch).await?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn limits(&self) -> WriteLimits {
        self.limits
    }

    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
}
