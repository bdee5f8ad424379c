//! Guards checked by the writer thread, against the database and the earlier batches of a group.
//!
//! A group is one RocksDB write, so when the writer decides on a request the database does not
//! yet hold the requests before it in the same group. Their effect is kept in an [`Overlay`]:
//! what the accepted batches so far did to each key they touched. A guard reads the overlay
//! first and the database only for keys the group has not touched.
//!
//! **Architecture Invariant:** only the writer thread reads for a guard, and it is the only
//! writer, so nothing changes between a request's check and its group's write. The overlay is
//! built only for groups with a guarded request, and only from the requests before the last
//! guarded one: a group without guards costs nothing more than before.

use std::collections::BTreeMap;

use ironbus_core::store::{range_bounds, BatchOp, Guard, StoreError, WriteBatch};
use rocksdb::DB;

use crate::error::store_error;
use crate::format::data_key;

/// What the accepted batches of a group so far left in the keys they touched, in the core's
/// keys (not yet under the data tag).
#[derive(Debug, Default)]
pub(crate) struct Overlay<'a> {
    /// The last point write to each key: `Some(value)` for a put, `None` for a delete or a later
    /// range deletion covering it.
    points: BTreeMap<&'a [u8], Option<&'a [u8]>>,
    /// Every non-empty range deleted, as `[start, end)` with an empty `end` unbounded.
    ranges: Vec<(&'a [u8], &'a [u8])>,
}

/// A key as the overlay sees it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen<'a> {
    /// The group set the key to this value (`None`: removed it).
    Written(Option<&'a [u8]>),
    /// The group did not touch the key: the database holds its value.
    Untouched,
}

impl<'a> Overlay<'a> {
    /// Applies `ops`, in order, on top of what the overlay holds.
    pub(crate) fn apply(&mut self, ops: &'a [BatchOp]) {
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.points.insert(key, Some(value));
                }
                BatchOp::Delete { key } => {
                    self.points.insert(key, None);
                }
                BatchOp::DeleteRange { start, end } => {
                    let Some(bounds) = range_bounds(start, end) else { continue };
                    for (_, value) in self.points.range_mut::<[u8], _>(bounds) {
                        *value = None;
                    }
                    self.ranges.push((start, end));
                }
            }
        }
    }

    /// What the group left in `key`. A key with no point write since the last range deletion
    /// covering it is in `points` as `None`, so a key absent from `points` but inside a range
    /// was removed by it.
    pub(crate) fn seen(&self, key: &[u8]) -> Seen<'a> {
        if let Some(value) = self.points.get(key) {
            return Seen::Written(*value);
        }
        let in_range =
            |(start, end): &(&[u8], &[u8])| *start <= key && (end.is_empty() || key < *end);
        if self.ranges.iter().any(in_range) {
            Seen::Written(None)
        } else {
            Seen::Untouched
        }
    }

    /// Whether `guard` holds after the group so far, reading the database for a key the group
    /// has not touched.
    fn holds(&self, db: &DB, guard: &Guard) -> Result<bool, StoreError> {
        match self.seen(&guard.key) {
            Seen::Written(value) => Ok(guard.holds(value)),
            Seen::Untouched => {
                let stored = db
                    .get_pinned(data_key(&guard.key))
                    .map_err(|e| store_error("write: guard", e))?;
                Ok(guard.holds(stored.as_deref()))
            }
        }
    }
}

/// The verdict on each batch of a group, in order: `Ok` when every guard holds against the
/// database and the batches accepted before it, else the guard's `Conflict` (or the error of
/// reading the database). Batches after `last_guarded` (the index of the last guarded batch)
/// are accepted without being added to the overlay: no guard reads after them.
pub(crate) fn check<'a>(
    db: &DB,
    batches: impl Iterator<Item = &'a WriteBatch>,
    last_guarded: usize,
) -> Vec<Result<(), StoreError>> {
    let mut overlay = Overlay::default();
    let mut verdicts = Vec::new();
    for (index, batch) in batches.enumerate() {
        let verdict = batch.guards().iter().try_for_each(|guard| {
            if overlay.holds(db, guard)? {
                Ok(())
            } else {
                Err(guard.conflict())
            }
        });
        if verdict.is_ok() && index < last_guarded {
            overlay.apply(batch.ops());
        }
        verdicts.push(verdict);
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn batch(build: impl FnOnce(&mut WriteBatch)) -> WriteBatch {
        let mut batch = WriteBatch::new();
        build(&mut batch);
        batch
    }

    #[test]
    fn overlay_follows_puts_deletes_and_ranges_in_order() {
        let first = batch(|b| {
            b.put(&b"a"[..], &b"1"[..]);
            b.put(&b"r/1"[..], &b"1"[..]);
            b.delete(&b"gone"[..]);
        });
        let second = batch(|b| {
            b.delete_range(&b"r/"[..], &b"r0"[..]);
            b.put(&b"r/2"[..], &b"2"[..]);
            b.delete_range(&b"z"[..], Bytes::new());
            b.delete_range(&b"c"[..], &b"a"[..]);
        });
        let mut overlay = Overlay::default();
        overlay.apply(first.ops());
        overlay.apply(second.ops());
        assert_eq!(overlay.seen(b"a"), Seen::Written(Some(&b"1"[..])));
        assert_eq!(overlay.seen(b"gone"), Seen::Written(None));
        assert_eq!(overlay.seen(b"r/1"), Seen::Written(None), "put, then covered by a range");
        assert_eq!(overlay.seen(b"r/2"), Seen::Written(Some(&b"2"[..])), "put after the range");
        assert_eq!(overlay.seen(b"r/3"), Seen::Written(None), "inside a range, never put");
        assert_eq!(overlay.seen(b"r0"), Seen::Untouched, "a range's end is excluded");
        assert_eq!(overlay.seen(b"zzz\xff"), Seen::Written(None), "an unbounded range");
        assert_eq!(overlay.seen(b"b"), Seen::Untouched, "an inverted range removes nothing");
        assert_eq!(overlay.seen(b""), Seen::Untouched);
    }
}
