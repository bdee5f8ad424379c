//! A [`Store`] wrapper that injects outages, for testing how the core copes with a failing store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{
    prefix_end, BatchOp, KeyValue, Store, StoreError, StoreHealth, WriteBatch, WriteLimits,
};

/// Wraps a store and makes chosen operations fail with [`StoreErrorKind::Unavailable`].
///
/// Share it as `Arc<FaultyStore>`: hand a clone to the code under test as `Arc<dyn Store>` and
/// switch faults on and off through the other. With no fault active it behaves exactly like the
/// inner store (the conformance suite checks that).
///
/// A failed operation never reaches the inner store, so a failed write applies nothing. An
/// operation fails when any of these holds, checked in this order:
/// 1. the whole store is unavailable ([`set_unavailable`](Self::set_unavailable)); `health()`
///    then reports [`StoreHealth::Unavailable`];
/// 2. it touches a failed prefix ([`fail_prefix`](Self::fail_prefix)): a `get` of a key with
///    that prefix, a `scan` whose range overlaps the prefix's range (whatever the limit), or a
///    `write` with any operation or guard on such a key or any operation over such a range;
///    `health()` stays as the inner store reports it, as a store with one unreachable region
///    would;
/// 3. it is a write and pending write failures are left
///    ([`fail_next_writes`](Self::fail_next_writes)); only writes that pass 1 and 2 use one up.
///
/// Guards pass through to the inner store, which checks them: a write whose guard does not hold
/// fails with the inner store's [`StoreErrorKind::Conflict`]. Its write limits are the inner
/// store's (a [`LimitedStore`](super::LimitedStore) imposes limits).
///
/// [`StoreErrorKind::Unavailable`]: crate::store::StoreErrorKind::Unavailable
/// [`StoreErrorKind::Conflict`]: crate::store::StoreErrorKind::Conflict
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Mutex<Faults>,
    gets: AtomicU64,
    scans: AtomicU64,
    writes: AtomicU64,
    injected: AtomicU64,
}

#[derive(Debug, Default)]
struct Faults {
    unavailable: bool,
    /// Each failed prefix with its [`prefix_end`].
    prefixes: Vec<(Vec<u8>, Vec<u8>)>,
    failing_writes: usize,
}

impl Faults {
    fn key_fails(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|(prefix, _)| key.starts_with(prefix))
    }

    fn range_fails(&self, start: &[u8], end: &[u8]) -> bool {
        self.prefixes.iter().any(|(prefix, prefix_end)| overlaps(start, end, prefix, prefix_end))
    }

    fn op_fails(&self, op: &BatchOp) -> bool {
        match op {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => self.key_fails(key),
            BatchOp::DeleteRange { start, end } => self.range_fails(start, end),
        }
    }
}

/// Whether the ranges `[a_start, a_end)` and `[b_start, b_end)` share a key; an empty end means
/// "no upper bound", as in [`Store::scan`].
fn overlaps(a_start: &[u8], a_end: &[u8], b_start: &[u8], b_end: &[u8]) -> bool {
    // Both `[max(starts), min(ends))` must be non-empty, and a range `[x, y)` is non-empty
    // exactly when `x < y`, as `x` itself is in it.
    let below = |x: &[u8], end: &[u8]| end.is_empty() || x < end;
    below(a_start, a_end) && below(b_start, b_end) && below(a_start, b_end) && below(b_start, a_end)
}

impl FaultyStore {
    /// Wraps `inner` with no fault active.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            faults: Mutex::default(),
            gets: AtomicU64::new(0),
            scans: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// The wrapped store, to inspect its contents behind the faults' back.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Makes every call fail (and `health()` report unavailable) until called with `false`.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.faults().unavailable = unavailable;
    }

    /// Makes every operation touching a key that starts with `prefix` fail, until healed.
    /// An empty prefix covers every key.
    pub fn fail_prefix(&self, prefix: impl Into<Vec<u8>>) {
        let prefix = prefix.into();
        let mut faults = self.faults();
        if !faults.prefixes.iter().any(|(p, _)| *p == prefix) {
            let end = prefix_end(&prefix);
            faults.prefixes.push((prefix, end));
        }
    }

    /// Ends the failure of exactly this prefix (other failed prefixes stay failed).
    pub fn heal_prefix(&self, prefix: impl AsRef<[u8]>) {
        self.faults().prefixes.retain(|(p, _)| p != prefix.as_ref());
    }

    /// Makes the next `n` writes that would otherwise reach the inner store fail, replacing any
    /// count still pending. `0` cancels pending failures.
    pub fn fail_next_writes(&self, n: usize) {
        self.faults().failing_writes = n;
    }

    /// Ends every fault: whole-store outage, failed prefixes and pending write failures.
    pub fn heal_all(&self) {
        *self.faults() = Faults::default();
    }

    /// Calls of [`Store::get`] so far, failed ones included.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// Calls of [`Store::scan`] so far, failed ones included.
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }

    /// Calls of [`Store::write`] so far, failed ones included.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Calls failed by an injected fault so far.
    pub fn injected_failures(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        // The guarded code cannot panic half-way, so a poisoned lock still holds sane faults.
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail(&self, message: &'static str) -> StoreError {
        self.injected.fetch_add(1, Ordering::Relaxed);
        StoreError::unavailable(message)
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        {
            let faults = self.faults();
            if faults.unavailable {
                return Err(self.fail("injected fault: store unavailable"));
            }
            if faults.key_fails(key) {
                return Err(self.fail("injected fault: key prefix unavailable"));
            }
        }
        self.inner.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        {
            let faults = self.faults();
            if faults.unavailable {
                return Err(self.fail("injected fault: store unavailable"));
            }
            if faults.range_fails(start, end) {
                return Err(self.fail("injected fault: key prefix unavailable"));
            }
        }
        self.inner.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        {
            let mut faults = self.faults();
            if faults.unavailable {
                return Err(self.fail("injected fault: store unavailable"));
            }
            if batch.ops().iter().any(|op| faults.op_fails(op))
                || batch.guards().iter().any(|guard| faults.key_fails(&guard.key))
            {
                return Err(self.fail("injected fault: key prefix unavailable"));
            }
            if faults.failing_writes > 0 {
                faults.failing_writes -= 1;
                return Err(self.fail("injected fault: write failure"));
            }
        }
        self.inner.write(batch).await
    }

    fn limits(&self) -> WriteLimits {
        self.inner.limits()
    }

    fn health(&self) -> StoreHealth {
        if self.faults().unavailable {
            StoreHealth::Unavailable
        } else {
            self.inner.health()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::overlaps;

    #[test]
    fn overlaps_treats_ranges_as_half_open_with_empty_end_unbounded() {
        // [a, c) and [b, d) share b.
        assert!(overlaps(b"a", b"c", b"b", b"d"));
        // [a, b) and [b, c) touch but share nothing.
        assert!(!overlaps(b"a", b"b", b"b", b"c"));
        assert!(!overlaps(b"b", b"c", b"a", b"b"));
        // Unbounded ranges.
        assert!(overlaps(b"a", b"", b"z", b"zz"));
        assert!(overlaps(b"z", b"", b"a", b""));
        assert!(!overlaps(b"z", b"", b"a", b"b"));
        // An empty (inverted or zero-width) range overlaps nothing.
        assert!(!overlaps(b"c", b"a", b"a", b""));
        assert!(!overlaps(b"b", b"b", b"a", b""));
        // [a, a\0) holds exactly "a".
        assert!(overlaps(b"a", b"a\0", b"a", b"b"));
        assert!(!overlaps(b"a", b"a\0", b"a\0", b"b"));
    }
}
