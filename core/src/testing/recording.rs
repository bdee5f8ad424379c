//! A [`Store`] wrapper that records every write it applied, in order, for tests that check
//! what the core wrote and when (that nothing lands under a deleted entity, say).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{BatchOp, KeyValue, Store, StoreError, StoreHealth, WriteBatch, WriteLimits};

/// Wraps a store and records the operations of every batch it applied (a refused batch
/// applied nothing and is not recorded), in the order they were applied. After a batch that
/// holds a range delete it yields to other tasks a few times before it answers, as a store
/// over a network lets others run while its answer travels — which gives a test's concurrent
/// tasks the chance to write right behind that delete.
#[derive(Debug)]
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    writes: Mutex<Vec<Vec<BatchOp>>>,
}

impl RecordingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self { inner, writes: Mutex::new(Vec::new()) }
    }

    /// The operations of every batch applied so far, one list per batch, in order.
    pub fn writes(&self) -> Vec<Vec<BatchOp>> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The keys under `prefix` that a put wrote after the last range delete covering all of
    /// `prefix`, and that no later delete removed (none if no such delete happened): what a
    /// delete of everything under `prefix` left behind, or let in after it.
    pub fn written_after_range_delete(&self, prefix: &[u8]) -> Vec<Bytes> {
        let writes = self.writes();
        let ops: Vec<&BatchOp> = writes.iter().flatten().collect();
        let covers = |op: &&BatchOp| match op {
            BatchOp::DeleteRange { start, end } => {
                start.as_ref() <= prefix && (end.is_empty() || end.as_ref() > prefix)
            }
            BatchOp::Put { .. } | BatchOp::Delete { .. } => false,
        };
        let Some(last) = ops.iter().rposition(covers) else { return Vec::new() };
        let mut left: Vec<Bytes> = Vec::new();
        for op in &ops[last + 1..] {
            match op {
                BatchOp::Put { key, .. } if key.starts_with(prefix) => {
                    if !left.contains(key) {
                        left.push(key.clone());
                    }
                }
                BatchOp::Delete { key } => left.retain(|k| k != key),
                BatchOp::DeleteRange { start, end } => left.retain(|k| {
                    !(k.as_ref() >= start.as_ref() && (end.is_empty() || k.as_ref() < end.as_ref()))
                }),
                BatchOp::Put { .. } => {}
            }
        }
        left
    }
}

#[async_trait]
impl Store for RecordingStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.inner.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.inner.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let ops = batch.ops().to_vec();
        let ranges = ops.iter().any(|op| matches!(op, BatchOp::DeleteRange { .. }));
        {
            // Recorded in the order applied: the lock is held across the inner write, which a
            // memory store completes without waiting.
            let mut writes = self.writes.lock().unwrap_or_else(|e| e.into_inner());
            let applied = futures_ready(self.inner.write(batch));
            match applied {
                Some(Ok(())) => writes.push(ops),
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(StoreError::unavailable(
                        "RecordingStore wraps stores that write without waiting",
                    ))
                }
            }
        }
        if ranges {
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    fn limits(&self) -> WriteLimits {
        self.inner.limits()
    }

    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
}

/// Polls `future` once: its output if it is ready at once.
fn futures_ready<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}
