//! The partition's records in the store: the only code that turns them into keys and values.
//!
//! A cycle's changes are written through a [`Journal`] (one [`WriteBatch`], written once at the
//! end of the cycle by the actor); reading them back (rebuilding the index, loading bodies)
//! goes through the functions here too, so the record layout of a partition (see `keys.rs` and
//! `codec.rs`) is known in this one file.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::budget::Size;
use super::transfer::TransferId;
use crate::codec::{self, MessageMeta};
use crate::dedup::DedupKey;
use crate::keys::{self, EntityId};
use crate::message::Message;
use crate::store::{Store, StoreError, WriteBatch};
use crate::types::{PartitionId, SequenceNumber, SubQueue, Timestamp};

/// Rows per store scan while rebuilding.
const SCAN_PAGE: usize = 1024;

/// The records one cycle writes, as one atomic batch.
#[derive(Debug)]
pub(crate) struct Journal {
    entity_id: EntityId,
    partition: PartitionId,
    batch: WriteBatch,
    /// What [`WriteBatch::bytes`] would count, kept as records are added.
    bytes: usize,
}

impl Journal {
    pub(crate) fn new(entity_id: EntityId, partition: PartitionId) -> Self {
        Journal { entity_id, partition, batch: WriteBatch::new(), bytes: 0 }
    }

    /// The message's meta record (written again on every change).
    pub(crate) fn put_meta(&mut self, queue: SubQueue, seq: SequenceNumber, meta: &MessageMeta) {
        let key = keys::message(self.entity_id, self.partition, queue, seq);
        self.put(key, codec::encode_meta(meta));
    }

    pub(crate) fn delete_meta(&mut self, queue: SubQueue, seq: SequenceNumber) {
        self.delete(keys::message(self.entity_id, self.partition, queue, seq));
    }

    /// The message's body record (written once, at enqueue).
    pub(crate) fn put_body(&mut self, seq: SequenceNumber, message: &Message) {
        self.put(keys::body(self.entity_id, self.partition, seq), codec::encode_body(message));
    }

    pub(crate) fn delete_body(&mut self, seq: SequenceNumber) {
        self.delete(keys::body(self.entity_id, self.partition, seq));
    }

    /// Deletes the body records of sequence numbers `from..to` with one range delete.
    pub(crate) fn delete_bodies(&mut self, from: SequenceNumber, to: SequenceNumber) {
        let (id, p) = (self.entity_id, self.partition);
        self.delete_range(keys::body(id, p, from), keys::body(id, p, to));
    }

    /// The partition's own record: the last sequence counter issued.
    pub(crate) fn put_counter(&mut self, last_counter: u64) {
        let key = keys::partition_record(self.entity_id, self.partition);
        self.put(key, codec::encode_partition(last_counter));
    }

    pub(crate) fn put_dedup(&mut self, key: &DedupKey, until: Timestamp) {
        let key = keys::dedup(self.entity_id, self.partition, key);
        self.put(key, codec::encode_dedup(until));
    }

    pub(crate) fn delete_dedup(&mut self, key: &DedupKey) {
        self.delete(keys::dedup(self.entity_id, self.partition, key));
    }

    /// A session's state, or (None) its removal.
    pub(crate) fn put_session_state(&mut self, session: &str, state: Option<(Timestamp, &[u8])>) {
        let key = keys::session(self.entity_id, self.partition, session);
        match state {
            Some((updated_at, bytes)) => {
                self.put(key, codec::encode_session_state(updated_at, bytes))
            }
            None => self.delete(key),
        }
    }

    /// Records a transfer this partition stored (see `transfer.rs`).
    pub(crate) fn put_transfer(&mut self, id: TransferId) {
        let key =
            keys::transfer_record(self.entity_id, self.partition, id.source, id.sequence_number);
        self.put(key, codec::encode_transfer_record());
    }

    pub(crate) fn delete_transfer(&mut self, id: TransferId) {
        let key =
            keys::transfer_record(self.entity_id, self.partition, id.source, id.sequence_number);
        self.delete(key);
    }

    /// Deletes everything a lane (a subscription) keeps in this partition, with one range
    /// delete.
    pub(crate) fn delete_lane(&mut self, lane: EntityId) {
        let prefix = keys::partition_prefix(lane, self.partition);
        let end = crate::store::prefix_end(&prefix);
        self.delete_range(prefix, end);
    }

    /// Moves what another journal holds to the end of this one.
    pub(crate) fn append(&mut self, other: &mut Journal) {
        self.batch.append(&mut other.batch);
        self.bytes += std::mem::take(&mut other.bytes);
    }

    fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len();
        self.batch.put(key, value);
    }

    fn delete(&mut self, key: impl Into<Bytes>) {
        let key = key.into();
        self.bytes += key.len();
        self.batch.delete(key);
    }

    fn delete_range(&mut self, start: impl Into<Bytes>, end: impl Into<Bytes>) {
        let (start, end) = (start.into(), end.into());
        self.bytes += start.len() + end.len();
        self.batch.delete_range(start, end);
    }

    /// What the batch holds so far, as the store's write limits count it.
    pub(crate) fn size(&self) -> Size {
        Size::new(self.batch.ops_and_guards(), self.bytes)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// The batch to write and its [`WriteBatch::bytes`] (counted as records were added),
    /// leaving the journal empty.
    pub(crate) fn take(&mut self) -> (WriteBatch, usize) {
        debug_assert_eq!(self.bytes, self.batch.bytes(), "the journal counts what its batch does");
        (std::mem::take(&mut self.batch), std::mem::take(&mut self.bytes))
    }

    /// Forgets what was journalled (the state it described is being rebuilt).
    pub(crate) fn clear(&mut self) {
        self.batch = WriteBatch::new();
        self.bytes = 0;
    }
}

/// One record of a partition, as rebuilding reads it.
#[derive(Debug)]
pub(crate) enum Recovered {
    /// The last sequence counter issued.
    Counter(u64),
    Message(SubQueue, SequenceNumber, MessageMeta),
    Dedup(DedupKey, Timestamp),
    /// A session's state: its id, when it was set, the state.
    SessionState(String, Timestamp, bytes::Bytes),
    /// A transfer stored here whose source has not confirmed it yet.
    Transfer(TransferId),
}

/// Reads every record of a partition an index is built from (never bodies), in key order
/// within each kind, and hands each to `f`.
pub(crate) async fn recover(
    store: &dyn Store,
    entity_id: EntityId,
    partition: PartitionId,
    mut f: impl FnMut(Recovered) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    if let Some(value) = store.get(&keys::partition_record(entity_id, partition)).await? {
        f(Recovered::Counter(codec::decode_partition(&value)?))?;
    }
    for queue in SubQueue::ALL {
        let prefix = keys::messages_prefix(entity_id, partition, queue);
        scan_each(store, &prefix, |key, value| {
            let meta = codec::decode_meta(value)?;
            let seq = keys::message_seq(key)
                .ok_or_else(|| StoreError::corrupted("message key without sequence number"))?;
            f(Recovered::Message(queue, seq, meta))
        })
        .await?;
    }
    scan_each(store, &keys::dedup_prefix(entity_id, partition), |key, value| {
        let dedup_key = keys::dedup_key(key)
            .ok_or_else(|| StoreError::corrupted("invalid duplicate-detection key"))?;
        f(Recovered::Dedup(dedup_key, codec::decode_dedup(value)?))
    })
    .await?;
    scan_each(store, &keys::sessions_prefix(entity_id, partition), |key, value| {
        let id =
            keys::session_id(key).ok_or_else(|| StoreError::corrupted("invalid session key"))?;
        let (updated_at, state) = codec::decode_session_state(value)?;
        f(Recovered::SessionState(id, updated_at, state))
    })
    .await?;
    scan_each(store, &keys::transfer_records_prefix(entity_id, partition), |key, value| {
        codec::decode_transfer_record(value)?;
        let (source, sequence_number) =
            keys::transfer_of(key).ok_or_else(|| StoreError::corrupted("invalid transfer key"))?;
        f(Recovered::Transfer(TransferId { source, sequence_number }))
    })
    .await
}

/// Calls `f` on every pair under `prefix`, a page at a time.
async fn scan_each(
    store: &dyn Store,
    prefix: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let end = crate::store::prefix_end(prefix);
    let mut start = prefix.to_vec();
    loop {
        let page = store.scan(&start, &end, SCAN_PAGE).await?;
        for (key, value) in &page {
            f(key, value)?;
        }
        match page.last() {
            Some((last, _)) if page.len() == SCAN_PAGE => {
                start = last.to_vec();
                start.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Reads the partition's own record, only to learn whether its store answers.
pub(crate) async fn probe(
    store: &dyn Store,
    entity_id: EntityId,
    partition: PartitionId,
) -> Result<(), StoreError> {
    store.get(&keys::partition_record(entity_id, partition)).await.map(|_| ())
}

/// Reads the body records of `seqs` (sorted): close runs with one scan, the rest one by one.
pub(crate) async fn read_bodies(
    store: &dyn Store,
    entity_id: EntityId,
    partition: PartitionId,
    seqs: &[SequenceNumber],
) -> Result<HashMap<SequenceNumber, Arc<Message>>, StoreError> {
    let (id, p) = (entity_id, partition);
    let mut loaded = HashMap::with_capacity(seqs.len());
    let mut i = 0;
    while i < seqs.len() {
        // A run: following sequence numbers no further apart than the run is long.
        let mut j = i + 1;
        while j < seqs.len() && seqs[j].0 - seqs[j - 1].0 <= 4 {
            j += 1;
        }
        let (first, last) = (seqs[i], seqs[j - 1]);
        if j - i == 1 {
            if let Some(value) = store.get(&keys::body(id, p, first)).await? {
                loaded.insert(first, Arc::new(codec::decode_body(&value)?));
            }
        } else {
            let start = keys::body(id, p, first);
            let end = keys::body(id, p, SequenceNumber(last.0 + 1));
            let limit = (last.0 - first.0 + 1) as usize;
            for (key, value) in store.scan(&start, &end, limit).await? {
                let seq = keys::message_seq(&key)
                    .ok_or_else(|| StoreError::corrupted("body key without sequence number"))?;
                if seqs[i..j].binary_search(&seq).is_ok() {
                    loaded.insert(seq, Arc::new(codec::decode_body(&value)?));
                }
            }
        }
        i = j;
    }
    Ok(loaded)
}
