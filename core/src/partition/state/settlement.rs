//! Message locks and how they end: settlement (complete, abandon, release, defer,
//! dead-letter), a failed delivery (an abandon or a lock expiry), lock renewal; and putting an
//! unlocked message back where it belongs.
//!
//! Invariants kept here: a message is settled only through the lock token it was handed out
//! with, on the sub-queue it was locked on; a dead letter cannot be dead-lettered again; a
//! main-queue message that used up MaxDeliveryCount deliveries is dead-lettered; a message
//! whose expiry passed while it was locked expires when it is unlocked instead of coming back;
//! a session's message is renewed with its session lock, never on its own.
//!
//! The delivery count is what Service Bus's header carries: the deliveries before this one.
//! Service Bus counts a delivery when it locks a message and takes the count back on a
//! release; here a delivery is counted when it ends other than by completion or release — an
//! abandon, a lock expiry, or a deferral (the deferred message's next delivery, by sequence
//! number, shows 1; .NET `ServiceBusReceivedMessage.DeliveryCount` 2) — which shows the same
//! numbers. A dead-letter sub-queue counts no deliveries (Service Bus leaves a dead letter's
//! count where it was), so nothing there reaches MaxDeliveryCount.

use super::PartitionState;
use crate::error::{BrokerError, Result};
use crate::message::{dead_letter_reason, ApplicationProperties, Disposition, MessageState};
use crate::partition::index::NEVER_EXPIRES;
use crate::types::{LockToken, SequenceNumber, SubQueue, Timestamp};

impl PartitionState {
    pub(crate) fn unlock(&mut self, queue: SubQueue, seq: SequenceNumber) {
        let Some(entry) = self.index.messages[queue].get_mut(&seq) else { return };
        if let Some(lock) = entry.take_lock() {
            self.locks.remove(lock);
            if let (SubQueue::Main, Some(sessions), Some(id)) =
                (queue, self.index.sessions.as_deref_mut(), entry.session())
            {
                sessions.set_locked(id, seq, false);
            }
        }
    }

    pub(crate) fn settle(
        &mut self,
        queue: SubQueue,
        token: LockToken,
        disposition: Disposition,
        now: Timestamp,
    ) -> Result<()> {
        let seq = self.locks.locked(queue, token)?;
        if queue.is_dead_letter() && matches!(disposition, Disposition::DeadLetter { .. }) {
            return Err(BrokerError::InvalidOperation(
                "a message in the dead-letter queue cannot be dead-lettered again".into(),
            ));
        }
        self.fx.tally.settled(&disposition);
        self.unlock(queue, seq);
        match disposition {
            Disposition::Complete => {
                self.remove(queue, seq);
            }
            Disposition::Abandon { properties } => {
                self.after_failed_delivery(queue, seq, properties, now)
            }
            Disposition::Release => self.make_available(queue, seq, now),
            Disposition::Defer { properties } => {
                if let Some(entry) = self.index.entry_mut(queue, seq) {
                    entry.state = MessageState::Deferred;
                }
                // The delivery that ends in a deferral counted, as any other (Service Bus:
                // at MaxDeliveryCount even a deferral dead-letters the message).
                self.after_failed_delivery(queue, seq, properties, now);
            }
            Disposition::DeadLetter { reason, description, properties } => self
                .move_to_dead_letter_from(
                    queue,
                    seq,
                    reason.as_deref().unwrap_or_default(),
                    description.unwrap_or_default(),
                    properties,
                ),
        }
        Ok(())
    }

    /// An abandon, a lock expiry or a deferral: count the delivery (but in a dead-letter
    /// sub-queue), then dead-letter the message if it has used up its deliveries, else put it
    /// back (available, or deferred).
    pub(crate) fn after_failed_delivery(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
        properties: ApplicationProperties,
        now: Timestamp,
    ) {
        let max = self.description.max_delivery_count;
        let Some(entry) = self.index.entry_mut(queue, seq) else { return };
        if !queue.is_dead_letter() {
            entry.delivery_count = entry.delivery_count.saturating_add(1);
        }
        entry.merge_properties(properties);
        let exhausted = entry.delivery_count >= max;
        if queue == SubQueue::Main && exhausted {
            self.move_to_dead_letter(
                seq,
                dead_letter_reason::MAX_DELIVERY_COUNT_EXCEEDED,
                format!("Message could not be consumed after {max} delivery attempts."),
                ApplicationProperties::new(),
            );
        } else {
            self.persist(queue, seq);
            self.make_available(queue, seq, now);
        }
    }

    pub(super) fn renew_lock(
        &mut self,
        queue: SubQueue,
        token: LockToken,
        now: Timestamp,
    ) -> Result<Timestamp> {
        let seq = self.locks.locked(queue, token)?;
        let until = now.saturating_add(self.description.lock_duration);
        let entry = self.index.entry_mut(queue, seq).ok_or(BrokerError::MessageLockLost)?;
        if queue == SubQueue::Main && entry.session().is_some() {
            return Err(BrokerError::InvalidOperation(
                "a message of a session is locked by its session: renew the session lock".into(),
            ));
        }
        let lock =
            entry.aux.as_mut().and_then(|a| a.lock.as_mut()).ok_or(BrokerError::MessageLockLost)?;
        let old = std::mem::replace(&mut lock.locked_until, until);
        self.locks.renew(token, old, until);
        Ok(until)
    }

    /// Writes the entry's current meta record.
    pub(super) fn persist(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if let Some(entry) = self.index.entry(queue, seq) {
            self.fx.journal.put_meta(queue, seq, &entry.meta(seq));
        }
    }

    /// Puts an unlocked message back where it belongs: available if active, or expired now if
    /// its time has passed while it was locked.
    pub(crate) fn make_available(&mut self, queue: SubQueue, seq: SequenceNumber, now: Timestamp) {
        let Some(entry) = self.index.entry(queue, seq) else { return };
        if queue == SubQueue::Main && entry.expires_at <= now {
            self.expire(seq);
            return;
        }
        let (state, expires_at) = (entry.state, entry.expires_at);
        if queue == SubQueue::Main && expires_at < NEVER_EXPIRES {
            self.index.expiring.insert((expires_at, seq));
        }
        if state == MessageState::Active {
            self.index.put_available(queue, seq);
        }
    }
}
