//! [`PrefixedStore`]: one store seen through a key prefix, so that several brokers (one per
//! namespace) share a store without seeing each other's keys.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::{
    prefix_end, BatchOp, KeyValue, Store, StoreError, StoreHealth, WriteBatch, WriteLimits,
};

/// A view of `inner` in which every key is stored under `prefix`.
///
/// # Behavior
/// - A key `k` is `prefix + k` in the inner store; scans return keys with the prefix removed, and
///   an unbounded scan or range delete (empty `end`) stops at the end of the prefix: nothing
///   outside the prefix is ever read, written or deleted.
/// - Write limits are the inner store's, less what the prefix adds to a batch's bytes (at most
///   two prefixed keys per operation or guard, with the operations bounded so that prefixes take
///   at most half the bytes), so a batch the core sized for this view still fits the inner store.
///
/// The namespaces of one server use prefixes that begin with `0xff`, above every key the core
/// writes (whose first byte is an ASCII letter), and end with a zero byte after the namespace's
/// name, so that no prefix is the start of another.
pub struct PrefixedStore {
    inner: Arc<dyn Store>,
    prefix: Bytes,
    end: Bytes,
}

impl PrefixedStore {
    /// `inner` seen through `prefix`, which must not be empty or all `0xff` bytes (it would
    /// have no end).
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<Bytes>) -> Self {
        let prefix = prefix.into();
        let end = Bytes::from(prefix_end(&prefix));
        assert!(!end.is_empty(), "a store prefix needs an end: not empty, not all 0xff");
        PrefixedStore { inner, prefix, end }
    }

    /// The prefix of a namespace's keys in the stores it shares: `ff 'ns' 00 <name> 00`.
    pub fn namespace_prefix(name: &str) -> Bytes {
        let mut prefix = BytesMut::with_capacity(name.len() + 5);
        prefix.extend_from_slice(b"\xffns\x00");
        prefix.extend_from_slice(name.as_bytes());
        prefix.extend_from_slice(b"\x00");
        prefix.freeze()
    }

    fn key(&self, key: &[u8]) -> Bytes {
        let mut out = BytesMut::with_capacity(self.prefix.len() + key.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(key);
        out.freeze()
    }

    /// A range's end: an empty end is the end of the prefix.
    fn end_key(&self, end: &[u8]) -> Bytes {
        if end.is_empty() {
            self.end.clone()
        } else {
            self.key(end)
        }
    }
}

impl fmt::Debug for PrefixedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefixedStore")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("inner", &self.inner)
            .finish()
    }
}

#[async_trait]
impl Store for PrefixedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.inner.get(&self.key(key)).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let page = self.inner.scan(&self.key(start), &self.end_key(end), limit).await?;
        let strip = self.prefix.len();
        page.into_iter()
            .map(|(key, value)| match key.get(..strip) {
                Some(p) if p == self.prefix => Ok((key.slice(strip..), value)),
                _ => {
                    Err(StoreError::corrupted("a prefixed scan returned a key outside its prefix"))
                }
            })
            .collect()
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let limits = self.limits();
        if !limits.admits_batch(&batch) {
            return Err(limits.exceeded(&batch));
        }
        let (guards, ops) = batch.into_parts();
        let mut prefixed = WriteBatch::new();
        for guard in guards {
            prefixed.require(self.key(&guard.key), guard.expected);
        }
        for op in ops {
            match op {
                BatchOp::Put { key, value } => prefixed.put(self.key(&key), value),
                BatchOp::Delete { key } => prefixed.delete(self.key(&key)),
                BatchOp::DeleteRange { start, end } => {
                    prefixed.delete_range(self.key(&start), self.end_key(&end))
                }
            }
        }
        self.inner.write(prefixed).await
    }

    fn limits(&self) -> WriteLimits {
        let inner = self.inner.limits();
        if inner.max_bytes == usize::MAX {
            return inner;
        }
        // At most two prefixed keys per operation or guard; the operations are bounded so that
        // the prefixes take at most half the inner store's bytes.
        let per_op = 2 * self.prefix.len();
        let max_ops = inner.max_ops.min(inner.max_bytes / (2 * per_op));
        WriteLimits { max_ops, max_bytes: inner.max_bytes - max_ops * per_op }
    }

    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
}
