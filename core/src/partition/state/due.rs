//! What time makes due, applied at a `now` the actor gives: expired session locks (their
//! messages count a delivery; under a store's write limits what a cycle could not count waits
//! in `lapsed` for the next), expired message locks, scheduled messages coming due, expired
//! messages, and the end of duplicate-detection windows, in that order.
//!
//! Under a store's write limits each loop stops at the cycle's share of the journal
//! (`fx.stop_at`, see `partition/budget.rs`); what is left stays due, and the next cycle goes on.
//!
//! Invariants kept here: nothing reads a clock; a locked message is never expired while
//! locked (it is checked again when its lock ends); a scheduled message is never expired; an
//! expired message is dead-lettered only with DeadLetteringOnMessageExpiration, else removed.

use super::PartitionState;
use crate::message::{dead_letter_reason, ApplicationProperties, MessageState};
use crate::metrics as m;
use crate::types::{SequenceNumber, SubQueue, Timestamp};

impl PartitionState {
    /// Applies what time made due at `now`. Each loop stops once the journal reaches
    /// `fx.stop_at` (never, unless the store has write limits): what is left is due still, so
    /// the next cycle runs at once and goes on from there.
    pub(crate) fn process_due(&mut self, now: Timestamp) {
        if self.forwarding_pending {
            self.reconcile_forwarding(now);
        }
        while let Some(&seq) = self.lapsed.last() {
            if self.fx.full() {
                self.fx.more = true;
                break;
            }
            self.lapsed.pop();
            self.after_failed_delivery(SubQueue::Main, seq, ApplicationProperties::new(), now);
        }
        while !self.fx.full() {
            let Some(expired) = self.index.sessions.as_deref_mut().and_then(|s| s.pop_expired(now))
            else {
                break;
            };
            if let Some(holder) = expired {
                self.release_session(holder, now, true);
            }
        }
        while !self.fx.full() {
            let Some(expired) = self.locks.pop_expired(now) else { break };
            if let Some((queue, seq)) = expired {
                metrics::counter!(m::LOCK_EXPIRATIONS_TOTAL).increment(1);
                if let Some(entry) = self.index.entry_mut(queue, seq) {
                    entry.take_lock();
                }
                self.after_failed_delivery(queue, seq, ApplicationProperties::new(), now);
            }
        }
        while !self.fx.full() {
            let Some(&(at, seq)) = self.index.scheduled.first() else { break };
            if at > now {
                break;
            }
            self.index.scheduled.pop_first();
            if let Some(entry) = self.index.entry_mut(SubQueue::Main, seq) {
                entry.state = MessageState::Active;
                entry.enqueued_time = at;
                if self.forwards() {
                    // It becomes active in a forwarding entity: it is the forwarder's now.
                    self.relocate(SubQueue::Main, SubQueue::Transfer, seq, now);
                } else {
                    self.persist(SubQueue::Main, seq);
                    self.make_available(SubQueue::Main, seq, now);
                }
            }
        }
        while !self.fx.full() {
            let Some(&(at, seq)) = self.index.expiring.first() else { break };
            if at > now {
                break;
            }
            self.index.expiring.pop_first();
            let locked = self.index.entry(SubQueue::Main, seq).is_some_and(|e| e.lock().is_some());
            if !locked {
                self.expire(seq);
            }
            // A locked message is checked again when its lock ends.
        }
        while !self.fx.full() {
            let Some(key) = self.dedup.evict_one(now) else { break };
            self.fx.journal.delete_dedup(&key);
        }
    }

    pub(super) fn expire(&mut self, seq: SequenceNumber) {
        let Some(entry) = self.index.entry(SubQueue::Main, seq) else { return };
        if entry.state == MessageState::Scheduled {
            return;
        }
        if self.description.dead_lettering_on_message_expiration {
            self.move_to_dead_letter(
                seq,
                dead_letter_reason::TTL_EXPIRED,
                "The message expired and was dead lettered.".to_owned(),
                ApplicationProperties::new(),
            );
        } else {
            metrics::counter!(m::MESSAGES_EXPIRED_TOTAL).increment(1);
            self.remove(SubQueue::Main, seq);
        }
    }
}
