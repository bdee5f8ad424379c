//! Batch delete (`com.microsoft:batch-delete-messages`): deleting up to a count of messages
//! enqueued before a cutoff from a queue's or subscription's main queue or one of its
//! dead-letter queues, without receiving them. What a partition deletes is decided in
//! `partition/state/purge.rs` (active and deferred messages, never scheduled or locked ones).
//!
//! Invariants kept here: the count is checked (1 to [`MAX_DELETE_MESSAGES`]) before any
//! partition is asked; a partitioned entity's partitions are asked in turn, each for what is
//! still wanted, so no more than the count asked is deleted in all; with a session only the
//! partition the SessionId routes to is asked; each partition deletes in one cycle (one
//! write).

use super::Broker;
use crate::address::EntityAddress;
use crate::error::{BrokerError, Result};
use crate::partition::{Command, SessionId, NOT_SESSIONFUL};
use crate::types::{SubQueue, Timestamp, MAX_DELETE_MESSAGES};

impl Broker {
    /// Deletes up to `max` messages of `address` (a queue or subscription, or its dead-letter
    /// queue) enqueued before `before`; with `session`, only that session's (a session-enabled
    /// entity's main queue). Locked and scheduled messages stay. Returns how many were
    /// deleted, which may be fewer than were eligible (a store's write limits bound one
    /// partition's share of a call, as Service Bus's own delete is best effort).
    pub async fn delete_messages(
        &self,
        address: impl Into<EntityAddress>,
        max: usize,
        before: Timestamp,
        session: Option<&str>,
    ) -> Result<u64> {
        if max == 0 || max > MAX_DELETE_MESSAGES {
            return Err(BrokerError::invalid(
                "message-count",
                format!("{max}: one batch delete deletes 1 to {MAX_DELETE_MESSAGES} messages"),
            ));
        }
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        let partitions = match session {
            Some(id) => {
                if address.queue != SubQueue::Main || !entity.description().requires_session {
                    return Err(BrokerError::InvalidOperation(NOT_SESSIONFUL.into()));
                }
                vec![Self::session_partition(&entity, id)]
            }
            None => entity.partitions.iter().collect(),
        };
        self.note_activity(&entity);
        let session = session.map(SessionId::from);
        let queue = address.queue;
        let mut deleted: u64 = 0;
        for partition in partitions {
            let wanted = (max as u64).saturating_sub(deleted) as usize;
            if wanted == 0 {
                break;
            }
            let session = session.clone();
            let count = partition
                .ask(|reply| Command::DeleteMessages { queue, max: wanted, before, session, reply })
                .await?;
            deleted = deleted.saturating_add(count.min(wanted as u64));
        }
        Ok(deleted)
    }
}
