//! Batch delete (`com.microsoft:batch-delete-messages`, the SDKs' `deleteMessages` and
//! `purgeMessages`): deleting messages without receiving them.
//!
//! Which messages: those of the sub-queue asked (the main queue, or a dead-letter queue)
//! enqueued before the cutoff — active and deferred ones; scheduled messages are not enqueued
//! yet and stay. A locked message is never deleted (Service Bus: "locked messages are not
//! eligible for removal and will remain in the entity"). Lowest sequence number first, at
//! most the count asked; with a session, only that session's messages.
//!
//! Invariants kept here: every deletion goes through [`PartitionState::remove`], so counts,
//! sizes, the session table and the body cache stay as a settlement leaves them; all of one
//! call is in the cycle's one write; under a store's write limits it stops at `fx.stop_at`
//! (best effort, as Service Bus's own delete is: the caller learns how many went).

use super::PartitionState;
use crate::message::MessageState;
use crate::partition::index::Entry;
use crate::partition::sessions::SessionId;
use crate::types::{SequenceNumber, SubQueue, Timestamp};

impl PartitionState {
    /// Deletes up to `max` unlocked, enqueued messages of `queue` enqueued before `before`
    /// (only `session`'s, if given); returns how many it deleted.
    pub(crate) fn delete_messages(
        &mut self,
        queue: SubQueue,
        max: usize,
        before: Timestamp,
        session: Option<&SessionId>,
    ) -> u64 {
        let chosen: Vec<SequenceNumber> = self.index.messages[queue]
            .iter()
            .filter(|(_, entry)| deletable(entry, before, session))
            .map(|(seq, _)| *seq)
            .take(max)
            .collect();
        let mut deleted = 0;
        for seq in chosen {
            if self.fx.full() {
                break;
            }
            self.remove(queue, seq);
            deleted += 1;
        }
        deleted
    }
}

/// Whether a batch delete with this cutoff and session takes the message.
fn deletable(entry: &Entry, before: Timestamp, session: Option<&SessionId>) -> bool {
    entry.state != MessageState::Scheduled
        && entry.lock().is_none()
        && entry.enqueued_time < before
        && session.is_none_or(|id| entry.session() == Some(id))
}
