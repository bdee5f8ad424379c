//! The partition router: which partition of an entity a sent message goes to, exactly as
//! Service Bus defines it.
//!
//! 1. `SessionId` set → it is the partition key; a different `PartitionKey` beside it is an
//!    InvalidOperation.
//! 2. else `PartitionKey` set → it is the partition key.
//! 3. else, with duplicate detection on, `MessageId` is the partition key.
//! 4. else no key: round-robin over the partitions, skipping unavailable ones.
//!
//! A keyed message always goes to `hash(key) mod partitions`, with a hash fixed across releases
//! (xxh3-64, seed 0, over the key's UTF-8 bytes): changing it would move keys between
//! partitions of existing entities and break per-key ordering and duplicate detection.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{BrokerError, Result};
use crate::message::MessageProperties;
use crate::types::PartitionId;

/// The partition key of a message sent to a partitioned entity, per the rules above.
pub fn partition_key(props: &MessageProperties, duplicate_detection: bool) -> Result<Option<&str>> {
    match (&props.session_id, &props.partition_key) {
        (Some(session), Some(key)) if session != key => {
            Err(BrokerError::InvalidOperation(format!(
            "the PartitionKey {key:?} is different from the SessionId {session:?}; a message with \
             a SessionId must have no PartitionKey or one equal to the SessionId"
        )))
        }
        (Some(session), _) => Ok(Some(session)),
        (None, Some(key)) => Ok(Some(key)),
        (None, None) if duplicate_detection => Ok(props.message_id.as_deref()),
        (None, None) => Ok(None),
    }
}

/// The stable hash behind keyed routing.
pub fn key_hash(key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes())
}

/// The partition a key maps to among `partitions`.
pub fn partition_for_key(key: &str, partitions: u16) -> PartitionId {
    PartitionId((key_hash(key) % u64::from(partitions.max(1))) as u16)
}

/// Round-robin over partitions for messages without a key.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl RoundRobin {
    /// Partitions to try for the next keyless message, in order: every partition once,
    /// starting with the next one in turn. The caller skips those it knows are unavailable
    /// and moves on when a send fails because a partition turned out to be unavailable.
    pub fn order(&self, partitions: u16) -> impl Iterator<Item = PartitionId> + Clone {
        let n = usize::from(partitions.max(1));
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n).map(move |i| PartitionId(((start + i) % n) as u16))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn props(session: Option<&str>, key: Option<&str>, id: Option<&str>) -> MessageProperties {
        MessageProperties {
            session_id: session.map(Into::into),
            partition_key: key.map(Into::into),
            message_id: id.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn router_precedence() {
        // (name, session, partition key, message id, duplicate detection, expected key)
        type Case<'a> =
            (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>, bool, Option<&'a str>);
        let cases: [Case<'_>; 8] = [
            ("session wins", Some("s"), None, Some("m"), true, Some("s")),
            ("session equal to key", Some("s"), Some("s"), Some("m"), true, Some("s")),
            ("partition key next", None, Some("k"), Some("m"), true, Some("k")),
            ("partition key without dedup", None, Some("k"), Some("m"), false, Some("k")),
            ("message id with dedup", None, None, Some("m"), true, Some("m")),
            ("message id ignored without dedup", None, None, Some("m"), false, None),
            ("nothing", None, None, None, true, None),
            ("nothing without dedup", None, None, None, false, None),
        ];
        for (name, session, key, id, dedup, want) in cases {
            let p = props(session, key, id);
            assert_eq!(partition_key(&p, dedup).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn session_id_different_from_partition_key_is_invalid_operation() {
        let p = props(Some("s1"), Some("k1"), Some("m"));
        assert!(matches!(partition_key(&p, true), Err(BrokerError::InvalidOperation(_))));
    }

    #[test]
    fn hash_is_stable_across_releases() {
        // Pinned values: if these change, keys move between partitions of existing entities.
        assert_eq!(partition_for_key("order-1", 16), partition_for_key("order-1", 16));
        let pinned: Vec<u16> = ["a", "b", "order-1", "session-42", ""]
            .iter()
            .map(|k| partition_for_key(k, 16).0)
            .collect();
        assert_eq!(pinned, PINNED);
        assert_eq!(key_hash("order-1"), 6_900_751_593_513_035_894);
    }

    const PINNED: [u16; 5] = [15, 15, 6, 14, 2];

    #[test]
    fn round_robin_visits_every_partition_once_per_send() {
        let rr = RoundRobin::default();
        let first: Vec<_> = rr.order(4).map(|p| p.0).collect();
        let second: Vec<_> = rr.order(4).map(|p| p.0).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        assert_eq!(second, vec![1, 2, 3, 0]);
    }

    proptest! {
        #[test]
        fn same_key_same_partition(key in ".{0,40}", partitions in 1u16..=128) {
            let a = partition_for_key(&key, partitions);
            let b = partition_for_key(&key.clone(), partitions);
            prop_assert_eq!(a, b);
            prop_assert!(a.0 < partitions);
        }

        #[test]
        fn keyless_sends_use_every_partition(partitions in 1u16..=64, sends in 0usize..200) {
            let rr = RoundRobin::default();
            let mut used = vec![0usize; partitions as usize];
            let total = sends + partitions as usize;
            for _ in 0..total {
                used[rr.order(partitions).next().unwrap().0 as usize] += 1;
            }
            // Every partition is used, and no partition gets more than its fair share + 1.
            let fair = total / partitions as usize;
            for count in used {
                prop_assert!(count >= fair && count <= fair + 1);
            }
        }

        #[test]
        fn many_keys_spread_over_all_partitions(seed in 0u64..1000) {
            let mut used = [false; 16];
            for i in 0..400 {
                used[partition_for_key(&format!("key-{seed}-{i}"), 16).0 as usize] = true;
            }
            prop_assert!(used.iter().all(|u| *u));
        }
    }
}
