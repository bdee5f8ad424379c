//! The storage plug-in: an ordered key-value store with atomic write batches.
//!
//! The trait is deliberately small so that any ordered key-value store can carry the broker (an
//! in-memory map, RocksDB, later a distributed transactional KV). The core owns the key layout
//! (`keys`) and the record encodings (`codec`); a store sees opaque bytes.
//!
//! **Architecture Invariant:** a store never interprets keys or values. It orders keys
//! lexicographically by their bytes, applies a [`WriteBatch`] all-or-nothing, and when
//! [`Store::write`] returns `Ok` the batch is durable to the store's promise (a memory store
//! promises nothing across restarts; RocksDB promises the WAL was synced).
//!
//! A batch may carry **guards** ([`WriteBatch::require`]): it applies only if each guarded key
//! holds the expected value when the batch applies (checked atomically with it), and otherwise
//! applies nothing and fails with [`StoreErrorKind::Conflict`]. A store may have **write
//! limits** ([`Store::limits`]): the core never hands it a batch over them, and a store refuses
//! one with [`StoreErrorKind::InvalidInput`].
//!
//! A failure is a [`StoreError`] with a [`StoreErrorKind`] to branch on: `Unavailable` is
//! retriable, every other kind is not. [`Store::health`] says whether a store can serve; the
//! core does not consult it: a partition becomes unavailable when its write or its rebuild
//! fails. Every store implementation runs the conformance suite of the `testing` module
//! (feature `testing`).

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

mod prefixed;
pub use prefixed::PrefixedStore;

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Sets `key` to `value`, replacing any previous value.
    Put { key: Bytes, value: Bytes },
    /// Removes `key`; removing a missing key is not an error.
    Delete { key: Bytes },
    /// Removes every key `k` with `start <= k < end`: exactly the keys [`Store::scan`] would
    /// return for the same bounds (an empty `end` means no upper bound; an inverted range
    /// removes nothing).
    DeleteRange { start: Bytes, end: Bytes },
}

/// A condition of a [`WriteBatch`]: when the batch applies, `key` holds `expected` (`None`: the
/// key is absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub key: Bytes,
    pub expected: Option<Bytes>,
}

impl Guard {
    /// Whether `current`, the key's value when the batch applies, satisfies this guard.
    pub fn holds(&self, current: Option<&[u8]>) -> bool {
        self.expected.as_deref() == current
    }

    /// The error of a batch refused because this guard did not hold.
    pub fn conflict(&self) -> StoreError {
        StoreError::new(
            StoreErrorKind::Conflict,
            format!(
                "write: guarded key {:?} no longer holds the expected value",
                String::from_utf8_lossy(&self.key)
            ),
        )
    }
}

/// Puts and deletes applied atomically, in order: a later operation on the same key wins. With
/// guards, only if every guard holds when the batch applies; otherwise nothing is applied and
/// the write fails with [`StoreErrorKind::Conflict`]. Guards see the state before the batch's
/// own operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    guards: Vec<Guard>,
    ops: Vec<BatchOp>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        self.ops.push(BatchOp::Put { key: key.into(), value: value.into() });
    }

    pub fn delete(&mut self, key: impl Into<Bytes>) {
        self.ops.push(BatchOp::Delete { key: key.into() });
    }

    pub fn delete_range(&mut self, start: impl Into<Bytes>, end: impl Into<Bytes>) {
        self.ops.push(BatchOp::DeleteRange { start: start.into(), end: end.into() });
    }

    /// Applies the batch only if `key` holds `expected` (`None`: only if it is absent).
    pub fn require(&mut self, key: impl Into<Bytes>, expected: Option<Bytes>) {
        self.guards.push(Guard { key: key.into(), expected });
    }

    /// Moves every guard and operation of `other` to the end of this batch.
    pub fn append(&mut self, other: &mut WriteBatch) {
        self.guards.append(&mut other.guards);
        self.ops.append(&mut other.ops);
    }

    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// The bytes this batch writes: keys and values of puts, keys of deletes, both ends of
    /// ranges, and the keys and expected values of guards. What metrics report and what store
    /// writers bound their groups by.
    pub fn bytes(&self) -> usize {
        let ops: usize = self
            .ops
            .iter()
            .map(|op| match op {
                BatchOp::Put { key, value } => key.len() + value.len(),
                BatchOp::Delete { key } => key.len(),
                BatchOp::DeleteRange { start, end } => start.len() + end.len(),
            })
            .sum();
        let guards: usize = self
            .guards
            .iter()
            .map(|g| g.key.len() + g.expected.as_ref().map_or(0, Bytes::len))
            .sum();
        ops + guards
    }

    /// The guards and the operations. A store checks the guards before it applies anything.
    pub fn into_parts(self) -> (Vec<Guard>, Vec<BatchOp>) {
        (self.guards, self.ops)
    }

    /// How many operations (guards not counted).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Operations and guards together: what [`WriteLimits::max_ops`] counts.
    pub fn ops_and_guards(&self) -> usize {
        self.ops.len() + self.guards.len()
    }

    /// No guard and no operation: writing it does nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.guards.is_empty()
    }
}

/// The most one [`WriteBatch`] may hold for a store (PostgreSQL, say, bounds a transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteLimits {
    /// Operations and guards together.
    pub max_ops: usize,
    /// What [`WriteBatch::bytes`] counts.
    pub max_bytes: usize,
}

impl WriteLimits {
    /// No limit: what a store has unless it says otherwise.
    pub const UNLIMITED: WriteLimits = WriteLimits { max_ops: usize::MAX, max_bytes: usize::MAX };

    /// Whether a batch of `ops` operations and guards and `bytes` bytes fits.
    pub fn admits(&self, ops: usize, bytes: usize) -> bool {
        ops <= self.max_ops && bytes <= self.max_bytes
    }

    /// Whether `batch` fits.
    pub fn admits_batch(&self, batch: &WriteBatch) -> bool {
        self.admits(batch.ops_and_guards(), batch.bytes())
    }

    /// The error a store answers a batch over its limits with.
    pub fn exceeded(&self, batch: &WriteBatch) -> StoreError {
        StoreError::new(
            StoreErrorKind::InvalidInput,
            format!(
                "write: a batch of {} operations and {} bytes is over this store's limits \
                 ({} operations, {} bytes)",
                batch.ops_and_guards(),
                batch.bytes(),
                self.max_ops,
                self.max_bytes
            ),
        )
    }
}

impl Default for WriteLimits {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// A key and its value, as returned by [`Store::scan`].
pub type KeyValue = (Bytes, Bytes);

/// Whether a store can serve requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreHealth {
    Healthy,
    /// The store cannot serve requests now; the core treats its partitions as unavailable and
    /// retries later.
    Unavailable,
}

/// What went wrong, as something a caller can branch on. New kinds may be added: a match on it
/// needs a catch-all arm (treat an unknown kind as not retriable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store (or the part of it holding the key) cannot serve now. Retriable.
    Unavailable,
    /// Stored data is damaged. Not retriable.
    Corrupted,
    /// The request itself is invalid (for example a batch over the store's limits). Not
    /// retriable.
    InvalidInput,
    /// A guard of the batch did not hold ([`WriteBatch::require`]); nothing was applied. Not
    /// retriable: the guarded state has moved on (in a cluster, the partition has a new owner).
    Conflict,
    /// Anything else the store reports. Not retriable.
    Other,
}

/// A store failure: a kind to branch on, a message for people, and the engine's own error
/// when there is one (`std::error::Error::source`).
#[derive(Debug, Clone)]
pub struct StoreError {
    pub kind: StoreErrorKind,
    pub message: String,
    /// What the store's engine reported, when the failure came from it.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {}: {}", self.kind, self.message)
    }
}

/// The source is the engine's own error (downcast it to the engine's type), not the `Arc`.
impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Two store errors are equal when their kind and message are: the engine's error is context.
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for StoreError {}

impl StoreError {
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }

    /// The same error, caused by `source`.
    pub fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Unavailable, message)
    }

    pub fn corrupted(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Corrupted, message)
    }

    pub fn is_retriable(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Corrupted => "corrupted",
            StoreErrorKind::InvalidInput => "invalid input",
            StoreErrorKind::Conflict => "conflict",
            StoreErrorKind::Other => "error",
        })
    }
}

/// An ordered key-value store with atomic write batches.
///
/// Object-safe, so a binary can choose its store at run time (`Arc<dyn Store>`).
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Returns the value stored under `key`, or `None`.
    ///
    /// # Behavior
    /// Sees every batch whose `write` has returned `Ok` (read-your-writes).
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError>;

    /// Returns up to `limit` pairs with `start <= key < end`, in ascending key order.
    ///
    /// # Behavior
    /// An empty `end` means "no upper bound". `start > end` (with a non-empty `end`) returns an
    /// empty result. The result is a consistent view: no batch is seen half-applied. Callers
    /// page through large ranges by calling again from the last key returned plus a zero byte.
    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError>;

    /// Applies every operation of `batch`, in order, atomically, if every guard of the batch
    /// holds.
    ///
    /// # Behavior
    /// All-or-nothing: on `Err` no operation is visible, on `Ok` all are. Durable when it
    /// returns `Ok`, to the store's promise (see the module docs). Concurrent writers may be
    /// grouped into one sync (group commit); that is the store's business. A guard is checked
    /// against every batch whose `write` returned `Ok` (and, in a group, the batches before it);
    /// when one does not hold the batch fails with [`StoreErrorKind::Conflict`]. A batch over
    /// [`Store::limits`] fails with [`StoreErrorKind::InvalidInput`]. An empty batch succeeds.
    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError>;

    /// The most one batch may hold. Unlimited unless the store says otherwise.
    fn limits(&self) -> WriteLimits {
        WriteLimits::UNLIMITED
    }

    /// Whether the store can serve requests now. Cheap; called on hot paths.
    fn health(&self) -> StoreHealth;
}

/// The bounds of a range of keys, as `BTreeMap::range` takes them.
pub type KeyRange<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The bounds of the range `start <= key < end` that [`Store::scan`] and
/// [`BatchOp::DeleteRange`] cover: an empty `end` means no upper bound; `None` when the range
/// is empty (`start >= end`, `end` non-empty). Never an inverted pair of bounds (on which
/// `BTreeMap::range` panics).
pub fn range_bounds<'a>(start: &'a [u8], end: &'a [u8]) -> Option<KeyRange<'a>> {
    if end.is_empty() {
        Some((Bound::Included(start), Bound::Unbounded))
    } else if start < end {
        Some((Bound::Included(start), Bound::Excluded(end)))
    } else {
        None
    }
}

/// The smallest key greater than every key that starts with `prefix`, for use as a scan's `end`.
/// Returns an empty vector (no upper bound) when the prefix is all `0xff` bytes.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use bytes::Bytes;

    use super::{prefix_end, range_bounds, Guard, StoreErrorKind, WriteBatch, WriteLimits};

    #[test]
    fn range_bounds_treat_an_empty_end_as_unbounded_and_drop_empty_ranges() {
        assert_eq!(range_bounds(b"m", b""), Some((Bound::Included(&b"m"[..]), Bound::Unbounded)));
        assert_eq!(
            range_bounds(b"a", b"b"),
            Some((Bound::Included(&b"a"[..]), Bound::Excluded(&b"b"[..])))
        );
        assert_eq!(range_bounds(b"", b""), Some((Bound::Included(&b""[..]), Bound::Unbounded)));
        assert_eq!(range_bounds(b"b", b"b"), None);
        assert_eq!(range_bounds(b"c", b"a"), None);
    }

    #[test]
    fn guards_count_toward_a_batchs_size_and_its_limits() {
        let mut batch = WriteBatch::new();
        batch.put(&b"k"[..], &b"vv"[..]);
        assert!(!batch.is_empty());
        let mut guarded = WriteBatch::new();
        guarded.require(&b"fence"[..], Some(Bytes::from_static(b"7")));
        assert!(!guarded.is_empty(), "a guard-only batch still checks its guard");
        batch.append(&mut guarded);
        assert_eq!((batch.len(), batch.guards().len(), batch.bytes()), (1, 1, 3 + 6));
        let limits = WriteLimits { max_ops: 2, max_bytes: 9 };
        assert!(limits.admits_batch(&batch));
        batch.delete(&b"x"[..]);
        assert!(!limits.admits_batch(&batch), "three operations and guards");
        assert_eq!(limits.exceeded(&batch).kind, StoreErrorKind::InvalidInput);
        assert!(WriteLimits::UNLIMITED.admits_batch(&batch));
    }

    #[test]
    fn a_guard_holds_only_for_its_expected_value_or_absence() {
        let present =
            Guard { key: Bytes::from_static(b"k"), expected: Some(Bytes::from_static(b"1")) };
        assert!(present.holds(Some(b"1")));
        assert!(!present.holds(Some(b"2")));
        assert!(!present.holds(None));
        let absent = Guard { key: Bytes::from_static(b"k"), expected: None };
        assert!(absent.holds(None));
        assert!(!absent.holds(Some(b"")));
        assert_eq!(present.conflict().kind, StoreErrorKind::Conflict);
        assert!(!present.conflict().is_retriable());
    }

    #[test]
    fn prefix_end_increments_last_byte_and_drops_trailing_ff() {
        assert_eq!(prefix_end(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), vec![2]);
        assert_eq!(prefix_end(&[0xff]), Vec::<u8>::new());
        assert_eq!(prefix_end(&[]), Vec::<u8>::new());
    }
}
