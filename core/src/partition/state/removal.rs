//! Removal: taking a message out of the index with its meta record, and deleting its body —
//! now, or later with many others in one range delete.
//!
//! Invariants kept here: a message's meta record is deleted in the cycle that takes it out, or,
//! in a queue's main queue, left below the floor that cycle writes (`partition/journal.rs`); no
//! body below the lowest live message (or reserved sequence number) belongs to a message, so
//! a range delete up to it is safe; the sweep joins only a cycle that writes anyway, so a
//! cycle that only reads stays without a write; in a topic partition bodies are shared by the
//! lanes and a removal only reports its body in `fx.released` (`partition/topic.rs` counts
//! the uses).

use super::PartitionState;
use crate::partition::index::Entry;
use crate::types::{SequenceNumber, SubQueue};

/// How many sequence numbers of bodies left below every message one range delete removes (see
/// [`PartitionState::remove`]). A point delete per body is one more memtable insert per
/// message; a range delete per 1,024 keeps RocksDB's range tombstones few. At most this many
/// bodies of settled messages per partition below its lowest message, and [`DEFERRED_BODIES`]
/// above it, wait on disk (after a crash: until the first sweep).
const BODY_SWEEP: i64 = 1024;
/// How many bodies of messages settled above the partition's lowest (out of order, as a
/// session's are) wait for the sweep that passes them instead of a point delete each; beyond
/// it they are deleted at once. Bounds what a partition whose lowest message stays (a session
/// nobody takes) leaves on disk, and the memory that remembers them.
const DEFERRED_BODIES: usize = 8 * 1024;

impl PartitionState {
    /// Takes a message out of a sub-queue's index and deletes its meta record (in the main
    /// queue, at the end of the cycle unless the floor passes it); its body stays.
    pub(crate) fn take(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Entry> {
        self.unlock(queue, seq);
        let entry = self.index.remove(queue, seq)?;
        self.fx.journal.delete_meta(queue, seq);
        Some(entry)
    }

    /// Deletes a message: its meta record, its body, and its share of the body cache. A body
    /// below every message left is not deleted here but by the next sweep (`sweep_bodies`),
    /// with the others below it in one range delete; so is a body above one (settled out of
    /// order, as a session's messages are), up to [`DEFERRED_BODIES`] of them, beyond which it
    /// is deleted now.
    pub(crate) fn remove(&mut self, queue: SubQueue, seq: SequenceNumber) {
        let Some(mut entry) = self.take(queue, seq) else { return };
        self.uncache(&mut entry);
        if self.shared_bodies {
            self.fx.released.push(entry.body_seq(seq));
        } else if seq > self.lowest_live() {
            if self.deferred_bodies.len() < DEFERRED_BODIES {
                self.deferred_bodies.push(seq);
            } else {
                self.fx.journal.delete_body(seq);
            }
        }
    }

    /// The lowest sequence number any message of this partition has, or the next one to be
    /// given if it holds none: no body below it belongs to a message.
    fn lowest_live(&self) -> SequenceNumber {
        self.lowest_of(self.index.lowest())
    }

    /// The same for the main queue alone: the floor of its meta records (see `journal.rs`).
    pub(super) fn lowest_live_main(&self) -> SequenceNumber {
        self.lowest_of(self.index.messages[SubQueue::Main].keys().next().copied())
    }

    fn lowest_of(&self, lowest: Option<SequenceNumber>) -> SequenceNumber {
        let lowest = lowest.unwrap_or_else(|| {
            SequenceNumber::new(self.partitioned, self.partition, self.last_counter + 1)
        });
        // A number reserved by an open transaction gets its body at the commit.
        self.reserved.first().map_or(lowest, |r| lowest.min(*r))
    }

    /// Deletes, with one range delete, the bodies left below every message (see `remove`) once
    /// they span [`BODY_SWEEP`] sequence numbers, and likewise the main queue's meta records left
    /// below its floor — in a cycle that writes anyway, so that a cycle that only reads stays
    /// without a write.
    pub(super) fn sweep_bodies(&mut self) {
        if self.fx.journal.is_empty() {
            return;
        }
        self.fx.journal.sweep_floor(BODY_SWEEP);
        if self.shared_bodies {
            return;
        }
        let lowest = self.lowest_live();
        if lowest.0.saturating_sub(self.swept_to.0) < BODY_SWEEP {
            return;
        }
        self.fx.journal.delete_bodies(self.swept_to, lowest);
        self.swept_to = lowest;
        self.deferred_bodies.retain(|seq| *seq >= lowest);
    }
}
