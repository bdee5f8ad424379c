//! Auto-forwarding in a partition: where the forwarding rules (ForwardTo,
//! ForwardDeadLetteredMessagesTo) want each message, moving messages between the main,
//! dead-letter and transfer queues when they change, and the transfer ledger of a destination
//! (see `partition/transfer.rs`).
//!
//! A change of the rules moves messages over as many cycles as the store's write limits need
//! (`partition/budget.rs`); meanwhile new messages already go where the new rules want them.
//!
//! Invariants kept here: with ForwardTo a message becomes active in the transfer queue (the
//! forwarder's), not in the main queue, and a change of the rules moves what waits to where
//! the new rules want it; a destination stores a transfer at most once (a transfer id it
//! recorded is answered as a duplicate until its source confirms it, see `transfer.rs`).

use std::ops::Bound;
use std::sync::Arc;

use super::PartitionState;
use crate::description::QueueDescription;
use crate::error::Result;
use crate::message::Message;
use crate::metrics as m;
use crate::partition::transfer::TransferId;
use crate::partition::SendOutcome;
use crate::types::{SequenceNumber, SubQueue, Timestamp};

impl PartitionState {
    /// Whether the entity forwards its messages (ForwardTo).
    pub(crate) fn forwards(&self) -> bool {
        self.description.forward_to.is_some()
    }

    /// Whether the entity forwards its dead letters (ForwardDeadLetteredMessagesTo).
    pub(crate) fn forwards_dead_letters(&self) -> bool {
        self.description.forward_dead_lettered_messages_to.is_some()
    }

    /// A new description: messages move between the main, dead-letter and transfer queues if
    /// the forwarding rules changed.
    pub(crate) fn set_description(&mut self, description: Arc<QueueDescription>, now: Timestamp) {
        let changed = description.forward_to != self.description.forward_to
            || description.forward_dead_lettered_messages_to
                != self.description.forward_dead_lettered_messages_to;
        self.description = description;
        if changed {
            self.reconcile_forwarding(now);
        }
    }

    /// Puts every message where the forwarding rules want it: with ForwardTo the main queue's
    /// active, unlocked messages go to the transfer queue; without it the transfer queue's
    /// messages come back (dead letters to the dead-letter queue unless those are forwarded).
    /// Stops once the journal reaches `fx.stop_at` (a store's write limits): it is left
    /// pending, and `process_due` goes on with it in the next cycles, which run at once.
    pub(crate) fn reconcile_forwarding(&mut self, now: Timestamp) {
        self.forwarding_pending = true;
        if self.forwards() {
            let mut after = None;
            loop {
                let from = after.map_or(Bound::Unbounded, Bound::Excluded);
                let next = self.index.available[SubQueue::Main]
                    .range((from, Bound::Unbounded))
                    .copied()
                    .find(|seq| {
                        self.index.entry(SubQueue::Main, *seq).is_some_and(|e| e.lock().is_none())
                    });
                let Some(seq) = next else { break };
                if self.fx.full() {
                    self.fx.more = true;
                    return;
                }
                after = Some(seq);
                self.relocate(SubQueue::Main, SubQueue::Transfer, seq, now);
            }
        }
        let (forwards, forwards_dead_letters) = (self.forwards(), self.forwards_dead_letters());
        let mut after = None;
        loop {
            let from = after.map_or(Bound::Unbounded, Bound::Excluded);
            let next = self.index.messages[SubQueue::Transfer]
                .range((from, Bound::Unbounded))
                .find_map(|(&seq, e)| {
                    let dead = e.aux.as_ref().is_some_and(|a| a.dead_letter_reason.is_some());
                    match (dead, forwards, forwards_dead_letters) {
                        (false, false, _) => Some((seq, SubQueue::Main)),
                        (true, _, false) => Some((seq, SubQueue::DeadLetter)),
                        _ => None,
                    }
                });
            let Some((seq, to)) = next else { break };
            if self.fx.full() {
                self.fx.more = true;
                return;
            }
            after = Some(seq);
            self.relocate(SubQueue::Transfer, to, seq, now);
        }
        self.forwarding_pending = false;
    }

    /// Moves a message from one sub-queue to another (unlocking it): its meta record moves,
    /// its body stays.
    pub(super) fn relocate(
        &mut self,
        from: SubQueue,
        to: SubQueue,
        seq: SequenceNumber,
        now: Timestamp,
    ) {
        let Some(entry) = self.take(from, seq) else { return };
        self.fx.journal.put_meta(to, seq, &entry.meta(seq));
        self.index.insert(to, seq, entry);
        if to == SubQueue::Main {
            // Expired while it waited: it goes the way of an expired message.
            if self.index.entry(to, seq).is_some_and(|e| e.expires_at <= now) {
                self.expire(seq);
            }
        }
    }

    /// Stores auto-forwarded messages, each at most once (see `transfer.rs`).
    pub(super) fn accept_transfers(
        &mut self,
        transfers: Vec<(TransferId, Arc<Message>)>,
        now: Timestamp,
    ) -> Vec<Result<SendOutcome>> {
        let mut outcomes = Vec::with_capacity(transfers.len());
        for (id, message) in transfers {
            if !self.record_transfer(id) {
                outcomes.push(Ok(SendOutcome::Duplicate));
                continue;
            }
            if self.admit(&message, now) {
                outcomes.push(Ok(SendOutcome::Enqueued(self.store_new(message, now))));
            } else {
                outcomes.push(Ok(SendOutcome::Duplicate));
            }
        }
        self.process_due(now);
        outcomes
    }

    /// Records a transfer in the ledger (and the journal); false if it was stored already.
    pub(crate) fn record_transfer(&mut self, id: TransferId) -> bool {
        if !self.transfers.insert(id) {
            metrics::counter!(m::FORWARD_REDELIVERIES_TOTAL).increment(1);
            return false;
        }
        self.fx.journal.put_transfer(id);
        true
    }

    pub(crate) fn forget_transfers(&mut self, ids: &[TransferId]) {
        for id in ids {
            if self.transfers.remove(id) {
                self.fx.journal.delete_transfer(*id);
            }
        }
    }

    /// Adds the change of the transfer queue's depth since the last call to the gauge (all of
    /// it, when the partition stops).
    pub(crate) fn publish_transfer_depth(&self, stopping: bool) {
        let depth = if stopping { 0 } else { self.index.messages[SubQueue::Transfer].len() as u64 };
        let before = self.published_transfers.swap(depth, std::sync::atomic::Ordering::Relaxed);
        if depth != before {
            metrics::gauge!(m::FORWARD_TRANSFER_QUEUE_MESSAGES)
                .increment(depth as f64 - before as f64);
        }
    }
}
