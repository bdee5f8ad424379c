//! A transaction's commit in its via partition: the work checked first, then applied in one
//! cycle, so it lands in the cycle's one store write or not at all (see
//! `broker/transactions.rs`). Sequence numbers of scheduled messages are reserved when the
//! transaction schedules them and used at commit.

use std::sync::Arc;

use bytes::Bytes;

use super::sessions::{SessionId, NOT_SESSIONFUL};
use super::state::PartitionState;
use crate::error::{BrokerError, Result};
use crate::message::{Disposition, Message};
use crate::types::{LockToken, SequenceNumber, SubQueue, Timestamp};

/// One thing a transaction does in its via partition.
#[derive(Debug)]
pub(crate) enum Work {
    /// A message sent to the via entity.
    Send(Arc<Message>),
    /// A message sent through the via entity to another one (its `forwarded.destination`):
    /// it goes to the send-via transfer queue.
    Transfer(Arc<Message>),
    /// A scheduled message, under the sequence number reserved for it.
    Schedule(SequenceNumber, Arc<Message>),
    Cancel(Vec<SequenceNumber>),
    Settle {
        queue: SubQueue,
        token: LockToken,
        disposition: Disposition,
    },
    SessionState {
        session: SessionId,
        state: Option<Bytes>,
    },
}

impl PartitionState {
    /// Reserves `count` sequence numbers for a transaction's scheduled messages.
    pub(crate) fn reserve(&mut self, count: usize) -> Vec<SequenceNumber> {
        let seqs: Vec<SequenceNumber> = (0..count).map(|_| self.next_seq()).collect();
        self.reserved.extend(seqs.iter().copied());
        seqs
    }

    /// Gives reserved sequence numbers up (the transaction rolled back).
    pub(crate) fn unreserve(&mut self, seqs: &[SequenceNumber]) {
        for seq in seqs {
            self.reserved.remove(seq);
        }
    }

    /// Applies a transaction's work, all of it or (with the reason) none.
    pub(crate) fn commit(&mut self, work: Vec<Work>, now: Timestamp) -> Result<()> {
        self.check_commit(&work)?;
        self.apply_work(work, now);
        Ok(())
    }

    /// Applies work [`PartitionState::check_commit`] passed.
    pub(crate) fn apply_work(&mut self, work: Vec<Work>, now: Timestamp) {
        for item in work {
            match item {
                Work::Send(message) => {
                    if self.admit(&message, now) {
                        self.store_new(message, now);
                    }
                }
                Work::Transfer(message) => {
                    // Duplicate detection is the destination's (Service Bus: send-via bypasses
                    // the via entity's).
                    let seq = self.next_seq();
                    self.fx.journal.put_body(seq, &message);
                    self.insert_copy(SubQueue::SendVia, seq, message, now, false, None);
                }
                Work::Schedule(seq, message) => {
                    self.reserved.remove(&seq);
                    if self.admit(&message, now) {
                        self.store_at(seq, message, now);
                    }
                }
                Work::Cancel(seqs) => self.cancel(&seqs),
                Work::Settle { queue, token, disposition } => {
                    // Checked above: it cannot fail now.
                    let _ = self.settle(queue, token, disposition, now);
                }
                Work::SessionState { session, state } => {
                    let _ = self.session_state(&session, None, Some(state), now);
                }
            }
        }
        self.process_due(now);
    }

    /// Whether every part of the work can be applied now.
    pub(crate) fn check_commit(&self, work: &[Work]) -> Result<()> {
        for item in work {
            match item {
                Work::Settle { queue, token, disposition } => {
                    self.locks.locked(*queue, *token).map_err(|_| {
                        BrokerError::TransactionRolledBack(
                            "the lock of a message the transaction settles was lost: it \
                             expired, or the message was settled otherwise"
                                .into(),
                        )
                    })?;
                    if queue.is_dead_letter()
                        && matches!(disposition, Disposition::DeadLetter { .. })
                    {
                        return Err(BrokerError::InvalidOperation(
                            "a message in the dead-letter queue cannot be dead-lettered again"
                                .into(),
                        ));
                    }
                }
                Work::Schedule(seq, _) if !self.reserved.contains(seq) => {
                    return Err(BrokerError::TransactionRolledBack(
                        "the partition restarted since the transaction scheduled its messages"
                            .into(),
                    ));
                }
                Work::SessionState { state, .. } => {
                    if self.index.sessions.is_none() {
                        return Err(BrokerError::InvalidOperation(NOT_SESSIONFUL.into()));
                    }
                    let max = self.description.max_message_size();
                    if let Some(size) = state.as_ref().map(Bytes::len).filter(|n| *n > max) {
                        return Err(BrokerError::MessageSizeExceeded { size, max });
                    }
                }
                Work::Send(_) | Work::Transfer(_) | Work::Schedule(..) | Work::Cancel(_) => {}
            }
        }
        Ok(())
    }
}
