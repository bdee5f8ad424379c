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

/// The bytes of a message's meta-record key (every one is as long).
const META_KEY_BYTES: usize = 20;

/// The records one cycle writes, as one atomic batch.
#[derive(Debug)]
pub(crate) struct Journal {
    entity_id: EntityId,
    partition: PartitionId,
    batch: WriteBatch,
    /// What [`WriteBatch::bytes`] would count, kept as records are added.
    bytes: usize,
    floor: Floor,
}

/// The main queue's floor: no main-queue message below it is live, and the partition record
/// says so, so a message settled below it needs no delete of its own (one record fewer per
/// message: its meta record, left behind, is ignored by a rebuild and swept later).
///
/// Invariants: the floor in the store never rises above a live main-queue message; it falls
/// only in a write that first range-deletes every meta record below it (none of them is live),
/// so no dead record comes back; a main-queue message taken out at or above the cycle's final
/// floor gets its delete in that cycle's write. Below `swept`, no dead record is left.
#[derive(Debug, Default)]
struct Floor {
    /// Whether this journal keeps a floor: a queue's partition does; a topic's lanes do not
    /// (their copies may arrive below their lowest message as scheduled publishes come due).
    kept: bool,
    /// The floor as the store has it, or will once this cycle's write succeeds.
    at: SequenceNumber,
    /// Whether `at` changed this cycle (the partition record is written again).
    moved: bool,
    /// Whether this cycle's batch already range-deleted the records below the floor it began
    /// with (before the first record put below it).
    cleared: bool,
    /// Below this, no meta record of a main-queue message taken out is left in the store.
    swept: SequenceNumber,
    /// Main-queue messages taken out this cycle, and the highest of them: each gets its delete
    /// at the end of the cycle, unless the floor then passed it.
    taken: Vec<SequenceNumber>,
    taken_max: SequenceNumber,
}

impl Journal {
    pub(crate) fn new(entity_id: EntityId, partition: PartitionId) -> Self {
        let floor = Floor { kept: true, ..Floor::default() };
        Journal { entity_id, partition, batch: WriteBatch::new(), bytes: 0, floor }
    }

    /// A journal without a main-queue floor (a topic's lane: see [`Floor::kept`]); its
    /// main-queue meta records are deleted one by one.
    pub(crate) fn keep_no_floor(&mut self) {
        self.floor.kept = false;
    }

    /// The message's meta record (written again on every change).
    pub(crate) fn put_meta(&mut self, queue: SubQueue, seq: SequenceNumber, meta: &MessageMeta) {
        if queue == SubQueue::Main && self.floor.kept {
            self.before_main_put(seq);
        }
        let key = keys::message(self.entity_id, self.partition, queue, seq);
        self.put(key, codec::encode_meta(meta));
    }

    /// A message is taken out of `queue`: its meta record is deleted, in the main queue at the
    /// end of the cycle unless the floor passes it (see [`Floor`]).
    pub(crate) fn delete_meta(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if queue == SubQueue::Main && self.floor.kept {
            self.floor.taken.push(seq);
            self.floor.taken_max = self.floor.taken_max.max(seq);
            return;
        }
        self.delete(keys::message(self.entity_id, self.partition, queue, seq));
    }

    /// Before a main-queue record is put: a message taken out earlier in the cycle and back
    /// now keeps its record; a record below the floor lowers it, after the first such record of
    /// the cycle range-deleted the dead ones below the floor the cycle began with.
    fn before_main_put(&mut self, seq: SequenceNumber) {
        let floor = &mut self.floor;
        if !floor.taken.is_empty() && seq <= floor.taken_max {
            floor.taken.retain(|taken| *taken != seq);
        }
        if seq >= floor.at {
            return;
        }
        let clear = !std::mem::replace(&mut floor.cleared, true);
        let below = floor.at;
        floor.at = seq;
        floor.moved = true;
        if clear {
            floor.swept = SequenceNumber::default();
            let (id, p) = (self.entity_id, self.partition);
            self.delete_range(
                keys::message(id, p, SubQueue::Main, SequenceNumber::default()),
                keys::message(id, p, SubQueue::Main, below),
            );
        }
    }

    /// Ends the cycle's main-queue floor: it rises to `lowest` (the lowest live main-queue
    /// message, or the number the next one will have) when that is above it and the cycle
    /// writes, and the messages
    /// taken out at or above it get their deletes. Whether the floor moved: the partition
    /// record must then be written ([`Journal::put_counter`]).
    pub(crate) fn close_floor(&mut self, lowest: SequenceNumber) -> bool {
        if !self.floor.kept {
            return false;
        }
        // It rises only in a cycle that writes anyway: a cycle that only reads stays without a
        // write.
        if lowest > self.floor.at && !self.is_empty() {
            self.floor.at = lowest;
            self.floor.moved = true;
        }
        let at = self.floor.at;
        for seq in std::mem::take(&mut self.floor.taken) {
            if seq >= at {
                self.delete(keys::message(self.entity_id, self.partition, SubQueue::Main, seq));
            }
        }
        self.floor.taken_max = SequenceNumber::default();
        self.floor.cleared = false;
        debug_assert!(at <= lowest, "the floor ({at:?}) never passes a live message ({lowest:?})");
        std::mem::take(&mut self.floor.moved)
    }

    /// Range-deletes the main queue's meta records left below the floor once they span
    /// `every` sequence numbers (called only in a cycle that writes anyway).
    pub(crate) fn sweep_floor(&mut self, every: i64) {
        let (swept, at) = (self.floor.swept, self.floor.at);
        if !self.floor.kept || at.0.saturating_sub(swept.0) < every {
            return;
        }
        let (id, p) = (self.entity_id, self.partition);
        self.delete_range(
            keys::message(id, p, SubQueue::Main, swept),
            keys::message(id, p, SubQueue::Main, at),
        );
        self.floor.swept = at;
    }

    /// The floor read back from the partition record, by a rebuild.
    pub(crate) fn restore_floor(&mut self, at: SequenceNumber) {
        if self.floor.kept {
            self.floor.at = at;
        }
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

    /// The partition's own record: the last sequence counter issued, and the main queue's
    /// floor.
    pub(crate) fn put_counter(&mut self, last_counter: u64) {
        let key = keys::partition_record(self.entity_id, self.partition);
        self.put(key, codec::encode_partition_record(last_counter, self.floor.at.0 as u64));
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

    /// What the batch holds so far, as the store's write limits count it, with a delete for
    /// every main-queue message taken out (the most the end of the cycle adds for them).
    pub(crate) fn size(&self) -> Size {
        let taken = self.floor.taken.len();
        Size::new(self.batch.ops_and_guards() + taken, self.bytes + taken * META_KEY_BYTES)
    }

    /// Nothing to write, main-queue messages taken out included.
    pub(crate) fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.floor.taken.is_empty()
    }

    /// The batch to write and its [`WriteBatch::bytes`] (counted as records were added),
    /// leaving the journal empty.
    pub(crate) fn take(&mut self) -> (WriteBatch, usize) {
        debug_assert_eq!(self.bytes, self.batch.bytes(), "the journal counts what its batch does");
        debug_assert!(self.floor.taken.is_empty(), "the cycle's end closed the floor");
        (std::mem::take(&mut self.batch), std::mem::take(&mut self.bytes))
    }

    /// Forgets what was journalled (the state it described is being rebuilt; the rebuild
    /// restores the floor).
    pub(crate) fn clear(&mut self) {
        self.batch = WriteBatch::new();
        self.bytes = 0;
        self.floor = Floor { kept: self.floor.kept, ..Floor::default() };
    }
}

/// One record of a partition, as rebuilding reads it.
#[derive(Debug)]
pub(crate) enum Recovered {
    /// The partition record: the last sequence counter issued, and the main queue's floor.
    Partition {
        counter: u64,
        main_floor: SequenceNumber,
    },
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
    let mut main_floor = SequenceNumber::default();
    if let Some(value) = store.get(&keys::partition_record(entity_id, partition)).await? {
        let (counter, floor) = codec::decode_partition_record(&value)?;
        main_floor = SequenceNumber(i64::try_from(floor).map_err(|_| {
            StoreError::corrupted("partition record: main-queue floor out of range")
        })?);
        f(Recovered::Partition { counter, main_floor })?;
    }
    for queue in SubQueue::ALL {
        let prefix = keys::messages_prefix(entity_id, partition, queue);
        // Main-queue records below the floor are of messages taken out (see `Floor`).
        let start = match queue {
            SubQueue::Main => keys::message(entity_id, partition, queue, main_floor),
            _ => prefix.clone(),
        };
        scan_each(store, &start, &prefix, |key, value| {
            let meta = codec::decode_meta(value)?;
            let seq = keys::message_seq(key)
                .ok_or_else(|| StoreError::corrupted("message key without sequence number"))?;
            f(Recovered::Message(queue, seq, meta))
        })
        .await?;
    }
    let prefix = keys::dedup_prefix(entity_id, partition);
    scan_each(store, &prefix, &prefix, |key, value| {
        let dedup_key = keys::dedup_key(key)
            .ok_or_else(|| StoreError::corrupted("invalid duplicate-detection key"))?;
        f(Recovered::Dedup(dedup_key, codec::decode_dedup(value)?))
    })
    .await?;
    let prefix = keys::sessions_prefix(entity_id, partition);
    scan_each(store, &prefix, &prefix, |key, value| {
        let id =
            keys::session_id(key).ok_or_else(|| StoreError::corrupted("invalid session key"))?;
        let (updated_at, state) = codec::decode_session_state(value)?;
        f(Recovered::SessionState(id, updated_at, state))
    })
    .await?;
    let prefix = keys::transfer_records_prefix(entity_id, partition);
    scan_each(store, &prefix, &prefix, |key, value| {
        codec::decode_transfer_record(value)?;
        let (source, sequence_number) =
            keys::transfer_of(key).ok_or_else(|| StoreError::corrupted("invalid transfer key"))?;
        f(Recovered::Transfer(TransferId { source, sequence_number }))
    })
    .await
}

/// Calls `f` on every pair under `prefix` from `start` on, a page at a time.
async fn scan_each(
    store: &dyn Store,
    start: &[u8],
    prefix: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let end = crate::store::prefix_end(prefix);
    let mut start = start.to_vec();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::BatchOp;

    const P: PartitionId = PartitionId(3);

    fn main_key(seq: i64) -> Bytes {
        keys::message(1, P, SubQueue::Main, SequenceNumber(seq))
    }

    /// The journal's operations: puts and deletes by key, ranges by their ends.
    fn ops(journal: &mut Journal) -> Vec<BatchOp> {
        journal.take().0.into_parts().1
    }

    fn floor_written(op: &BatchOp) -> Option<u64> {
        match op {
            BatchOp::Put { key, value } if *key == keys::partition_record(1, P) => {
                Some(codec::decode_partition_record(value).expect("partition record").1)
            }
            _ => None,
        }
    }

    #[test]
    fn main_queue_messages_taken_below_the_new_floor_need_no_delete() {
        let mut journal = Journal::new(1, P);
        journal.restore_floor(SequenceNumber(10));
        for seq in [10, 11, 14] {
            journal.delete_meta(SubQueue::Main, SequenceNumber(seq));
        }
        journal.delete_meta(SubQueue::DeadLetter, SequenceNumber(12));
        assert_eq!(journal.size(), Size::new(4, 4 * META_KEY_BYTES), "counted as deletes");
        // 13 is still live: the floor rises to it; 14, above it, is deleted.
        assert!(journal.close_floor(SequenceNumber(13)));
        journal.put_counter(20);
        let ops = ops(&mut journal);
        let deleted: Vec<&Bytes> = ops
            .iter()
            .filter_map(|op| match op {
                BatchOp::Delete { key } => Some(key),
                _ => None,
            })
            .collect();
        let dead_letter = keys::message(1, P, SubQueue::DeadLetter, SequenceNumber(12));
        assert_eq!(deleted, vec![&dead_letter, &main_key(14)]);
        assert_eq!(ops.iter().find_map(floor_written), Some(13));
    }

    #[test]
    fn a_main_queue_record_put_below_the_floor_lowers_it_after_clearing_what_is_below() {
        let mut journal = Journal::new(1, P);
        journal.restore_floor(SequenceNumber(100));
        let meta = MessageMeta::default();
        journal.put_meta(SubQueue::Main, SequenceNumber(40), &meta);
        journal.put_meta(SubQueue::Main, SequenceNumber(30), &meta);
        // The floor does not rise past the records put below it.
        assert!(journal.close_floor(SequenceNumber(30)));
        journal.put_counter(120);
        let ops = ops(&mut journal);
        assert_eq!(
            ops[0],
            BatchOp::DeleteRange { start: main_key(0), end: main_key(100) },
            "one clearing, before the first record put below the floor"
        );
        assert!(matches!(&ops[1], BatchOp::Put { key, .. } if *key == main_key(40)));
        assert!(matches!(&ops[2], BatchOp::Put { key, .. } if *key == main_key(30)));
        assert_eq!(ops.len(), 4);
        assert_eq!(floor_written(&ops[3]), Some(30));
    }

    #[test]
    fn a_message_taken_out_and_put_back_in_one_cycle_keeps_its_record() {
        let mut journal = Journal::new(1, P);
        journal.restore_floor(SequenceNumber(5));
        journal.delete_meta(SubQueue::Main, SequenceNumber(7));
        journal.put_meta(SubQueue::Main, SequenceNumber(7), &MessageMeta::default());
        assert!(journal.close_floor(SequenceNumber(7)));
        let ops = ops(&mut journal);
        assert!(!ops.iter().any(|op| matches!(op, BatchOp::Delete { .. })), "{ops:?}");
    }

    #[test]
    fn the_floor_rises_only_in_a_cycle_that_writes_and_never_in_a_topic_lane() {
        let mut journal = Journal::new(1, P);
        assert!(!journal.close_floor(SequenceNumber(50)), "nothing to write");
        assert!(journal.is_empty());
        let mut lane = Journal::new(1, P);
        lane.keep_no_floor();
        lane.delete_meta(SubQueue::Main, SequenceNumber(3));
        assert!(!lane.close_floor(SequenceNumber(50)));
        assert_eq!(ops(&mut lane), vec![BatchOp::Delete { key: main_key(3) }]);
    }

    #[test]
    fn the_sweep_clears_below_the_floor_once_it_spans_enough() {
        let mut journal = Journal::new(1, P);
        journal.restore_floor(SequenceNumber(1000));
        journal.sweep_floor(1024);
        assert!(journal.is_empty(), "not yet");
        journal.restore_floor(SequenceNumber(1024));
        journal.sweep_floor(1024);
        journal.restore_floor(SequenceNumber(2000));
        journal.sweep_floor(1024);
        assert_eq!(
            ops(&mut journal),
            vec![BatchOp::DeleteRange { start: main_key(0), end: main_key(1024) }]
        );
        assert_eq!(main_key(0).len(), META_KEY_BYTES);
    }
}
