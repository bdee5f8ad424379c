//! Transfers: what auto-forwarding moves from a source's transfer queue into a destination,
//! and the destination's ledger that makes a transfer land exactly once.
//!
//! A message that becomes active in a forwarding entity is put in its transfer queue
//! ([`SubQueue::Transfer`](crate::types::SubQueue::Transfer)) in the same write that would
//! have made it available; the forwarder (`broker/forwarding.rs`) takes it from there like a
//! receiver, sends it to the destination and completes it at the source. A crash or a failed
//! write between the destination's write and the source's completion makes the forwarder send
//! it again: the destination partition recognises the [`TransferId`] in its ledger and answers
//! "duplicate" without storing a second copy. The forwarder tells the destination to forget
//! an id once the source's completion is durable (after that, the transfer can never come
//! again).
//!
//! **Architecture Invariant:** a forwarding entity's messages never become available in its
//! main queue: what would (a send, a forwarded message, a scheduled message coming due, a
//! topic's copy) goes to its transfer queue in the same write, as dead letters do with
//! ForwardDeadLetteredMessagesTo; a rule set or removed by an update (or found changed at a
//! rebuild) moves the messages between the sub-queues. Transfer-queue messages never expire
//! and never dead-letter by delivery count.
//!
//! **Architecture Invariant:** a transfer is recorded in the destination's ledger in the same
//! write that stores the message, and in the one partition the transfer's routing key always
//! picks (SessionId, PartitionKey, MessageId, else the transfer id), so a re-sent transfer
//! meets its own record.

use std::collections::HashSet;

use crate::keys::EntityId;
use crate::types::SequenceNumber;

/// A transfer: the source entity (a queue or subscription) and the message's sequence number
/// in its transfer queue. Unique for ever: entity ids and sequence numbers are never reused,
/// and a message leaves a transfer queue once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TransferId {
    pub source: EntityId,
    pub sequence_number: SequenceNumber,
}

impl TransferId {
    /// A key for routing a transfer that carries no partition key of its own.
    pub(crate) fn routing_key(&self) -> String {
        format!("$transfer/{}/{}", self.source, self.sequence_number.0)
    }
}

/// The transfers a destination partition stored and whose sources have not yet confirmed
/// their completion.
#[derive(Debug, Default)]
pub(crate) struct TransferLedger {
    ids: HashSet<TransferId>,
}

impl TransferLedger {
    pub(crate) fn contains(&self, id: &TransferId) -> bool {
        self.ids.contains(id)
    }

    /// Records a transfer; false if it was recorded already.
    pub(crate) fn insert(&mut self, id: TransferId) -> bool {
        self.ids.insert(id)
    }

    /// Forgets a transfer; false if it was not recorded.
    pub(crate) fn remove(&mut self, id: &TransferId) -> bool {
        self.ids.remove(id)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_recorded_once_until_forgotten() {
        let mut ledger = TransferLedger::default();
        let id = TransferId { source: 7, sequence_number: SequenceNumber(3) };
        let other = TransferId { source: 8, sequence_number: SequenceNumber(3) };
        assert!(ledger.insert(id));
        assert!(!ledger.insert(id));
        assert!(ledger.contains(&id) && !ledger.contains(&other));
        assert!(ledger.remove(&id));
        assert!(!ledger.remove(&id));
        assert_eq!(ledger.len(), 0);
    }

    #[test]
    fn routing_keys_differ_per_transfer() {
        let a = TransferId { source: 1, sequence_number: SequenceNumber(2) };
        let b = TransferId { source: 2, sequence_number: SequenceNumber(1) };
        assert_ne!(a.routing_key(), b.routing_key());
    }
}
