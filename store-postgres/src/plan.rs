//! A batch's operations as the few statements that have the same effect.
//!
//! A key's final state after a batch depends only on the last operation that touches it: a
//! put leaves its value, a delete or a range covering the key leaves it absent. So the batch is
//! applied as: every range delete, one `DELETE … WHERE key = ANY(…)` of the keys whose last
//! operation is a delete, then one multi-row upsert of the keys whose last operation is a put,
//! each key once (PostgreSQL refuses an `ON CONFLICT DO UPDATE` that touches a row twice).
//! Deletions commute with each other, and nothing deleted after a put survives in the upsert,
//! so the order of these statements gives the batch's effect in its own order.

use std::collections::HashSet;

use bytes::Bytes;
use ironbus_core::store::BatchOp;

/// The statements of one batch.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `start <= key < end`, or `start <= key` with `end` `None`; never an empty range.
    pub(crate) ranges: Vec<(Bytes, Option<Bytes>)>,
    /// Keys whose last operation is a delete, sorted.
    pub(crate) deletes: Vec<Bytes>,
    /// Keys whose last operation is a put, sorted (concurrent batches lock rows in one order),
    /// with their values in `values`.
    pub(crate) keys: Vec<Bytes>,
    pub(crate) values: Vec<Bytes>,
}

impl Plan {
    pub(crate) fn new(ops: Vec<BatchOp>) -> Self {
        let mut ranges: Vec<(Bytes, Option<Bytes>)> = Vec::new();
        let mut seen: HashSet<Bytes> = HashSet::new();
        let mut deletes = Vec::new();
        let mut puts = Vec::new();
        let covered = |ranges: &[(Bytes, Option<Bytes>)], key: &Bytes| {
            ranges.iter().any(|(start, end)| {
                key >= start && end.as_ref().is_none_or(|end| key.as_ref() < end.as_ref())
            })
        };
        for op in ops.into_iter().rev() {
            match op {
                BatchOp::Put { key, value } => {
                    if !covered(&ranges, &key) && seen.insert(key.clone()) {
                        puts.push((key, value));
                    }
                }
                BatchOp::Delete { key } => {
                    if !covered(&ranges, &key) && seen.insert(key.clone()) {
                        deletes.push(key);
                    }
                }
                BatchOp::DeleteRange { start, end } => {
                    if end.is_empty() {
                        ranges.push((start, None));
                    } else if start < end {
                        ranges.push((start, Some(end)));
                    }
                }
            }
        }
        ranges.reverse();
        deletes.sort_unstable();
        puts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let (keys, values) = puts.into_iter().unzip();
        Self { ranges, deletes, keys, values }
    }

    /// Also deletes `key` unless the batch puts it: the placeholder row a create-only guard
    /// inserted to lock an absent key goes before the commit.
    pub(crate) fn remove_unless_put(&mut self, key: &Bytes) {
        if self.keys.binary_search(key).is_err() {
            if let Err(at) = self.deletes.binary_search(key) {
                self.deletes.insert(at, key.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ironbus_core::store::{range_bounds, WriteBatch};
    use proptest::prelude::*;

    use super::*;

    fn model_apply(model: &mut BTreeMap<Bytes, Bytes>, ops: &[BatchOp]) {
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    model.insert(key.clone(), value.clone());
                }
                BatchOp::Delete { key } => {
                    model.remove(key);
                }
                BatchOp::DeleteRange { start, end } => {
                    if let Some(bounds) = range_bounds(start, end) {
                        let doomed: Vec<Bytes> =
                            model.range::<[u8], _>(bounds).map(|(k, _)| k.clone()).collect();
                        for key in doomed {
                            model.remove(&key);
                        }
                    }
                }
            }
        }
    }

    /// What the statements do, in the order the store sends them.
    fn plan_apply(model: &mut BTreeMap<Bytes, Bytes>, plan: &Plan) {
        for (start, end) in &plan.ranges {
            let end = end.clone().unwrap_or_default();
            model_apply(model, &[BatchOp::DeleteRange { start: start.clone(), end }]);
        }
        for key in &plan.deletes {
            model.remove(key);
        }
        let mut unique = HashSet::new();
        for (key, value) in plan.keys.iter().zip(&plan.values) {
            assert!(unique.insert(key.clone()), "key {key:?} twice in one upsert");
            model.insert(key.clone(), value.clone());
        }
    }

    fn key() -> impl Strategy<Value = Bytes> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..3)
            .prop_map(Bytes::from)
    }

    fn op() -> impl Strategy<Value = BatchOp> {
        prop_oneof![
            (key(), key()).prop_map(|(key, value)| BatchOp::Put { key, value }),
            key().prop_map(|key| BatchOp::Delete { key }),
            (key(), key()).prop_map(|(start, end)| BatchOp::DeleteRange { start, end }),
        ]
    }

    proptest! {
        #[test]
        fn plan_has_the_effect_of_the_ops_in_order(
            before in prop::collection::btree_map(key(), key(), 0..8),
            ops in prop::collection::vec(op(), 0..12),
        ) {
            let mut expected = before.clone();
            model_apply(&mut expected, &ops);
            let mut planned = before;
            plan_apply(&mut planned, &Plan::new(ops));
            prop_assert_eq!(planned, expected);
        }
    }

    #[test]
    fn a_key_put_twice_is_upserted_once_with_its_last_value() {
        let mut batch = WriteBatch::new();
        batch.put(&b"k"[..], &b"1"[..]);
        batch.delete(&b"k"[..]);
        batch.put(&b"k"[..], &b"2"[..]);
        batch.put(&b"j"[..], &b"3"[..]);
        let plan = Plan::new(batch.into_parts().1);
        assert_eq!(plan.keys, vec![Bytes::from_static(b"j"), Bytes::from_static(b"k")]);
        assert_eq!(plan.values, vec![Bytes::from_static(b"3"), Bytes::from_static(b"2")]);
        assert!(plan.deletes.is_empty());
    }

    #[test]
    fn inverted_and_empty_ranges_are_dropped_and_an_empty_end_is_unbounded() {
        let mut batch = WriteBatch::new();
        batch.delete_range(&b"b"[..], &b"a"[..]);
        batch.delete_range(&b"b"[..], &b"b"[..]);
        batch.delete_range(&b"c"[..], &b""[..]);
        let plan = Plan::new(batch.into_parts().1);
        assert_eq!(plan.ranges, vec![(Bytes::from_static(b"c"), None)]);
    }

    #[test]
    fn a_placeholder_is_removed_unless_the_batch_puts_its_key() {
        let mut batch = WriteBatch::new();
        batch.put(&b"created"[..], &b"v"[..]);
        let mut plan = Plan::new(batch.into_parts().1);
        plan.remove_unless_put(&Bytes::from_static(b"created"));
        plan.remove_unless_put(&Bytes::from_static(b"checked"));
        plan.remove_unless_put(&Bytes::from_static(b"checked"));
        assert_eq!(plan.deletes, vec![Bytes::from_static(b"checked")]);
    }
}
