//! The key layout. The core owns it; a store sees opaque, byte-ordered keys.
//!
//! ```text
//! n e <entity path key>                   entity record (id, kind, description) of a queue, topic,
//!                                         subscription (`t/subscriptions/s`) or rule (`…/rules/r`)
//! n i                                     next entity id (u64 big-endian)
//! n c                                     number of stores the namespace was created with
//! n v                                     namespace version: moves with every management write
//! n a <entity id u64>                     the entity's last activity as stored (ms, i64
//!                                         big-endian; AutoDeleteOnIdle, `broker/idle.rs`)
//! p <entity id u64> <partition u16> s     partition record (sequence counter, main-queue floor)
//! p <entity id u64> <partition u16> b <seq u64>   message body (what the sender sent; written once)
//! p <entity id u64> <partition u16> m <seq u64>   meta record of a message in the main queue
//! p <entity id u64> <partition u16> d <seq u64>   meta record of a message in the dead-letter queue
//! p <entity id u64> <partition u16> t <seq u64>   … in the transfer queue (auto-forwarding)
//! p <entity id u64> <partition u16> y <seq u64>   … in the transfer dead-letter queue
//! p <entity id u64> <partition u16> v <seq u64>   … in the send-via transfer queue
//! p <entity id u64> <partition u16> f <source entity id u64> <seq u64>
//!                                                 transfer ledger record of a destination
//!                                                 (a version byte; see `partition/transfer.rs`)
//! p <entity id u64> <partition u16> u <dedup key> duplicate-detection entry (expiry)
//! p <entity id u64> <partition u16> x <session id>  session state (updated-at, state bytes)
//! p <entity id u64> <partition u16> o     fence: the owner's token (u64 big-endian; `fence.rs`)
//! ```
//!
//! A session's state lives in the partition its SessionId routes to, under the entity (or
//! subscription lane) id.
//!
//! A topic's partition *i* keeps its published bodies (and its scheduled messages' meta
//! records) under the topic's id; each subscription's copies are meta records under the
//! subscription's id and the same partition *i*, written to the topic partition's store.
//!
//! **Architecture Invariant:** integers in keys are big-endian so byte order is numeric order;
//! everything of one partition shares the prefix [`partition_prefix`], and everything of one
//! entity the prefix [`entity_prefix`], so deleting either is one range delete. A message has
//! exactly one live meta record (in one sub-queue) exactly as long as it has a body record; a
//! main-queue meta record below the partition record's floor is not live (it is a settled
//! message's, left for a sweep: `partition/journal.rs`); bodies sort by sequence number, so the
//! head of a backlog is one contiguous range. Entity ids are
//! never reused, so a queue deleted and created again never sees the old one's records. A
//! rebuild scans each tag's prefix, never the whole partition, so it never reads the fence.

use bytes::{BufMut, Bytes, BytesMut};

use crate::dedup::DedupKey;
use crate::types::{PartitionId, SequenceNumber, SubQueue};

const NAMESPACE: u8 = b'n';
const ENTITY: u8 = b'e';
const NEXT_ENTITY_ID: u8 = b'i';
const STORE_COUNT: u8 = b'c';
const NAMESPACE_VERSION: u8 = b'v';
const ACTIVITY: u8 = b'a';
const PARTITION: u8 = b'p';
const PARTITION_RECORD: u8 = b's';
const DEDUP: u8 = b'u';
const BODY: u8 = b'b';
const SESSION: u8 = b'x';
const TRANSFER_LEDGER: u8 = b'f';
const FENCE: u8 = b'o';

/// Identifies an entity in the store; assigned at creation, never reused.
pub type EntityId = u64;

/// The key of an entity's record: its path's key ([`crate::address::EntityPath::key`]), so
/// the records of a topic's subscriptions (and of their rules) share one prefix
/// (`n e t/subscriptions/`), which one scan or range delete covers.
pub fn entity(name_key: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + name_key.len());
    k.put_u8(NAMESPACE);
    k.put_u8(ENTITY);
    k.put_slice(name_key.as_bytes());
    k.freeze()
}

/// The prefix of every entity record.
pub fn entities_prefix() -> Bytes {
    Bytes::from_static(&[NAMESPACE, ENTITY])
}

pub fn next_entity_id() -> Bytes {
    Bytes::from_static(&[NAMESPACE, NEXT_ENTITY_ID])
}

/// The namespace's version (u64 big-endian), which every management write moves by
/// compare-and-set: cluster nodes write the namespace one at a time and learn of each other's
/// changes by reading it (`broker/namespace.rs`).
pub fn namespace_version() -> Bytes {
    Bytes::from_static(&[NAMESPACE, NAMESPACE_VERSION])
}

/// The key of an entity's stored last activity (see `broker/idle.rs`), in the namespace store.
pub fn activity(id: EntityId) -> Bytes {
    let mut k = BytesMut::with_capacity(10);
    k.put_u8(NAMESPACE);
    k.put_u8(ACTIVITY);
    k.put_u64(id);
    k.freeze()
}

pub fn store_count() -> Bytes {
    Bytes::from_static(&[NAMESPACE, STORE_COUNT])
}

pub fn entity_prefix(id: EntityId) -> Bytes {
    let mut k = BytesMut::with_capacity(9);
    k.put_u8(PARTITION);
    k.put_u64(id);
    k.freeze()
}

pub fn partition_prefix(id: EntityId, partition: PartitionId) -> Bytes {
    let mut k = BytesMut::with_capacity(11);
    k.put_u8(PARTITION);
    k.put_u64(id);
    k.put_u16(partition.0);
    k.freeze()
}

fn partition_key(id: EntityId, partition: PartitionId, tag: u8, extra: usize) -> BytesMut {
    let mut k = BytesMut::with_capacity(12 + extra);
    k.put_u8(PARTITION);
    k.put_u64(id);
    k.put_u16(partition.0);
    k.put_u8(tag);
    k
}

pub fn partition_record(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, PARTITION_RECORD, 0).freeze()
}

pub fn message(
    id: EntityId,
    partition: PartitionId,
    queue: SubQueue,
    seq: SequenceNumber,
) -> Bytes {
    let mut k = partition_key(id, partition, queue.tag(), 8);
    k.put_u64(seq.0 as u64);
    k.freeze()
}

/// The key of a message's body record.
pub fn body(id: EntityId, partition: PartitionId, seq: SequenceNumber) -> Bytes {
    let mut k = partition_key(id, partition, BODY, 8);
    k.put_u64(seq.0 as u64);
    k.freeze()
}

/// The prefix of every body record of a partition.
#[cfg(feature = "testing")]
pub fn body_prefix(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, BODY, 0).freeze()
}

/// The prefix of every message of one sub-queue of a partition.
pub fn messages_prefix(id: EntityId, partition: PartitionId, queue: SubQueue) -> Bytes {
    partition_key(id, partition, queue.tag(), 0).freeze()
}

pub fn dedup(id: EntityId, partition: PartitionId, key: &DedupKey) -> Bytes {
    let mut k = partition_key(id, partition, DEDUP, key.0.len());
    k.put_slice(key.0.as_bytes());
    k.freeze()
}

pub fn dedup_prefix(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, DEDUP, 0).freeze()
}

/// The key of a session's state record.
pub fn session(id: EntityId, partition: PartitionId, session_id: &str) -> Bytes {
    let mut k = partition_key(id, partition, SESSION, session_id.len());
    k.put_slice(session_id.as_bytes());
    k.freeze()
}

pub fn sessions_prefix(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, SESSION, 0).freeze()
}

/// The session id at the end of a session state key.
pub fn session_id(key: &[u8]) -> Option<String> {
    String::from_utf8(key.get(12..)?.to_vec()).ok()
}

/// The key of a destination partition's record of a transfer it stored (see
/// `partition/transfer.rs`): the source entity's id and the transfer's sequence number.
pub fn transfer_record(
    id: EntityId,
    partition: PartitionId,
    source: EntityId,
    seq: SequenceNumber,
) -> Bytes {
    let mut k = partition_key(id, partition, TRANSFER_LEDGER, 16);
    k.put_u64(source);
    k.put_u64(seq.0 as u64);
    k.freeze()
}

/// The key of a partition's fence record (see `fence.rs`), under the partition's prefix.
pub fn fence(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, FENCE, 0).freeze()
}

pub fn transfer_records_prefix(id: EntityId, partition: PartitionId) -> Bytes {
    partition_key(id, partition, TRANSFER_LEDGER, 0).freeze()
}

/// The source entity and sequence number at the end of a transfer record's key.
pub fn transfer_of(key: &[u8]) -> Option<(EntityId, SequenceNumber)> {
    let tail: [u8; 16] = key.get(key.len().checked_sub(16)?..)?.try_into().ok()?;
    let source = u64::from_be_bytes(tail[..8].try_into().ok()?);
    let seq = u64::from_be_bytes(tail[8..].try_into().ok()?) as i64;
    Some((source, SequenceNumber(seq)))
}

/// The sequence number at the end of a message key.
pub fn message_seq(key: &[u8]) -> Option<SequenceNumber> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(SequenceNumber(u64::from_be_bytes(tail) as i64))
}

/// The dedup key at the end of a dedup entry's key.
pub fn dedup_key(key: &[u8]) -> Option<DedupKey> {
    let tail = key.get(12..)?;
    Some(DedupKey(String::from_utf8(tail.to_vec()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_keys_sort_by_sequence_number() {
        let a = message(7, PartitionId(1), SubQueue::Main, SequenceNumber(2));
        let b = message(7, PartitionId(1), SubQueue::Main, SequenceNumber(10));
        let c = message(7, PartitionId(1), SubQueue::Main, SequenceNumber(256));
        assert!(a < b && b < c);
        assert_eq!(message_seq(&c), Some(SequenceNumber(256)));
    }

    #[test]
    fn every_partition_key_shares_the_partition_and_entity_prefix() {
        let p = partition_prefix(9, PartitionId(3));
        let keys = [
            partition_record(9, PartitionId(3)),
            message(9, PartitionId(3), SubQueue::DeadLetter, SequenceNumber(1)),
            dedup(9, PartitionId(3), &DedupKey("m".into())),
            session(9, PartitionId(3), "s"),
            transfer_record(9, PartitionId(3), 4, SequenceNumber(5)),
            message(9, PartitionId(3), SubQueue::Transfer, SequenceNumber(1)),
        ];
        for k in keys {
            assert!(k.starts_with(&p));
            assert!(k.starts_with(&entity_prefix(9)));
            assert!(!k.starts_with(&entity_prefix(10)));
        }
        assert_eq!(
            dedup_key(&dedup(9, PartitionId(3), &DedupKey("id\u{0}pk".into()))),
            Some(DedupKey("id\u{0}pk".into()))
        );
        assert_eq!(session_id(&session(9, PartitionId(3), "a/b")), Some("a/b".into()));
        assert_eq!(
            transfer_of(&transfer_record(9, PartitionId(3), 4, SequenceNumber(5))),
            Some((4, SequenceNumber(5)))
        );
    }

    #[test]
    fn the_fence_is_one_key_of_its_partition_and_under_no_records_prefix() {
        let (id, p) = (9, PartitionId(3));
        let fence = fence(id, p);
        assert!(fence.starts_with(&partition_prefix(id, p)));
        assert!(!fence.starts_with(&partition_prefix(id, PartitionId(4))));
        assert!(!fence.starts_with(&partition_prefix(10, p)));
        assert_eq!(fence.len(), partition_prefix(id, p).len() + 1, "no suffix");
        let prefixes = [
            partition_key(id, p, BODY, 0).freeze(),
            dedup_prefix(id, p),
            sessions_prefix(id, p),
            transfer_records_prefix(id, p),
            partition_record(id, p),
        ];
        let queues = [
            SubQueue::Main,
            SubQueue::DeadLetter,
            SubQueue::Transfer,
            SubQueue::TransferDeadLetter,
            SubQueue::SendVia,
        ];
        let prefixes = prefixes.into_iter().chain(queues.map(|q| messages_prefix(id, p, q)));
        for prefix in prefixes {
            assert_ne!(fence, prefix);
            assert!(!fence.starts_with(&prefix) && !prefix.starts_with(&fence), "{prefix:?}");
        }
        let records = [
            body(id, p, SequenceNumber(1)),
            message(id, p, SubQueue::Main, SequenceNumber(1)),
            dedup(id, p, &DedupKey("o".into())),
            session(id, p, "o"),
        ];
        for record in records {
            assert!(!record.starts_with(&fence), "{record:?}");
        }
    }
}
