//! Receiving: opening receivers, settling locked messages (one, or many grouped by the
//! partition that locked them), renewing message locks, receiving deferred messages and
//! peeking. A lock token names the partition that locked its message, and a sequence number
//! the partition that issued it, so each request goes straight to its partition.
//!
//! Invariants kept here: a receiver is opened on a queue or a subscription only, never on what
//! the entity forwards, and a plain receiver never on a session-enabled entity's main queue;
//! settling many answers one outcome per item in the order given; a token naming a partition
//! the entity does not have answers "lock lost"; deferred messages come back in the order
//! asked.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;

use super::{by_partition, sessions, Broker, EntityHandle};
use crate::address::EntityAddress;
use crate::entity::EntityKind;
use crate::error::{BrokerError, Result};
use crate::message::{Disposition, ReceivedMessage};
use crate::partition::{Command, PartitionHandle};
use crate::receiver::Receiver;
use crate::types::{
    LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp, MAX_SEQUENCE_NUMBERS,
};

impl Broker {
    /// Opens a receiver on a queue or its dead-letter queue.
    pub async fn open_receiver(
        &self,
        address: impl Into<EntityAddress>,
        mode: ReceiveMode,
    ) -> Result<Receiver> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        if address.queue == SubQueue::Main && entity.description().requires_session {
            return Err(BrokerError::InvalidOperation(sessions::SESSION_REQUIRED.into()));
        }
        let id = self.inner.next_receiver_id.fetch_add(1, Ordering::Relaxed);
        self.note_activity(&entity);
        // Receivers on partitions of a queue or a subscription.
        Ok(Receiver::attach(entity, id, mode, address.queue))
    }

    pub(super) fn check_receive(&self, entity: &EntityHandle) -> Result<()> {
        match entity.kind {
            EntityKind::Queue | EntityKind::Subscription => {}
            EntityKind::Topic => {
                return Err(BrokerError::InvalidOperation(format!(
                    "topic {} cannot be received from: receive from one of its subscriptions",
                    entity.path
                )))
            }
            EntityKind::Rule => {
                return Err(BrokerError::EntityNotFound { entity: entity.path.to_string() })
            }
        }
        let status = entity.description().status;
        if status.can_receive() {
            Ok(())
        } else {
            Err(BrokerError::EntityDisabled {
                entity: entity.path.to_string(),
                status: status.as_str(),
            })
        }
    }

    /// Settles a locked message.
    pub async fn settle(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
        disposition: Disposition,
    ) -> Result<()> {
        let mut outcomes = self.start_settle_many(address, vec![(token, disposition)]).await;
        outcomes.pop().unwrap_or(Err(BrokerError::MessageLockLost))
    }

    /// Settles several locked messages of one entity: one request per partition they are
    /// locked on, queued before this returns (like [`Broker::start_send`]); the future yields
    /// one outcome per item, in the order given.
    pub fn start_settle_many(
        &self,
        address: impl Into<EntityAddress>,
        items: Vec<(LockToken, Disposition)>,
    ) -> impl Future<Output = Vec<Result<()>>> + Send + 'static {
        let address = address.into();
        let count = items.len();
        // Per partition: the items' places in `items` (`None`: all of them, in order), and the
        // request's answer.
        let mut asked: Vec<(Option<Vec<usize>>, _)> = Vec::new();
        let mut failed = None;
        match self.entity(&address.entity) {
            Err(error) => failed = Some(error),
            Ok(entity) => {
                self.note_activity(&entity);
                let queue = address.queue;
                let ask = |handle: &PartitionHandle, items| {
                    handle.ask(move |reply| Command::Settle { queue, items, reply })
                };
                // A token naming a partition the entity does not have stays "lock lost".
                let first = items.first().map(|(token, _)| token.partition());
                if items.iter().all(|(token, _)| Some(token.partition()) == first) {
                    // The usual case: one partition, asked without regrouping.
                    if let Some(handle) = first.and_then(|p| entity.partition(p)) {
                        asked.push((None, ask(handle, items)));
                    }
                } else {
                    let mut groups: Vec<SettleGroup> = Vec::new();
                    for (place, (token, disposition)) in items.into_iter().enumerate() {
                        let partition = token.partition();
                        match groups.iter_mut().find(|group| group.0 == partition) {
                            Some(group) => {
                                group.1.push(place);
                                group.2.push((token, disposition));
                            }
                            None => {
                                groups.push((partition, vec![place], vec![(token, disposition)]))
                            }
                        }
                    }
                    for (partition, places, items) in groups {
                        if let Some(handle) = entity.partition(partition) {
                            asked.push((Some(places), ask(handle, items)));
                        }
                    }
                }
            }
        }
        async move {
            let error = failed.unwrap_or(BrokerError::MessageLockLost);
            let mut outcomes: Vec<Result<()>> = std::iter::repeat_n(Err(error), count).collect();
            for (places, answer) in asked {
                let places = places.unwrap_or_else(|| (0..count).collect());
                match answer.await {
                    Ok(answers) => {
                        for (place, outcome) in places.into_iter().zip(answers) {
                            outcomes[place] = outcome;
                        }
                    }
                    Err(error) => {
                        for place in places {
                            outcomes[place] = Err(error.clone());
                        }
                    }
                }
            }
            outcomes
        }
    }

    /// Completes a locked message.
    pub async fn complete(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
    ) -> Result<()> {
        self.settle(address, token, Disposition::Complete).await
    }

    /// Extends a message's lock by the entity's lock duration from now. Returns the new expiry.
    pub async fn renew_lock(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
    ) -> Result<Timestamp> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.note_activity(&entity);
        let partition = entity.partition(token.partition()).ok_or(BrokerError::MessageLockLost)?;
        let queue = address.queue;
        partition.ask(|reply| Command::RenewLock { queue, token, reply }).await
    }

    /// Receives deferred messages by sequence number, in the order asked (a number named
    /// twice is received once, where it was first named). Fails with
    /// [`BrokerError::MessageNotFound`] if one is not deferred (or is locked), and with
    /// [`BrokerError::InvalidArgument`] if more than [`MAX_SEQUENCE_NUMBERS`] are named.
    pub async fn receive_deferred(
        &self,
        address: impl Into<EntityAddress>,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
    ) -> Result<Vec<ReceivedMessage>> {
        check_sequence_numbers(sequence_numbers)?;
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        self.note_activity(&entity);
        let partitioned = entity.partitioned();
        if let Some(&seq) =
            sequence_numbers.iter().find(|s| entity.partition(s.partition(partitioned)).is_none())
        {
            return Err(BrokerError::MessageNotFound(seq));
        }
        // A number named twice is received once, where it was first named.
        let sequence_numbers = SequenceNumber::distinct(sequence_numbers);
        let mut received = Vec::with_capacity(sequence_numbers.len());
        for (partition, seqs) in by_partition(&entity, &sequence_numbers) {
            let queue = address.queue;
            received.extend(
                partition
                    .ask(|reply| Command::ReceiveDeferred {
                        queue,
                        sequence_numbers: seqs,
                        mode,
                        reply,
                    })
                    .await?,
            );
        }
        sort_as_asked(&mut received, &sequence_numbers);
        Ok(received)
    }

    /// Up to `max` messages from sequence number `from` on, without locking them. On a
    /// partitioned entity the answer comes from one partition: the one `from` names, or the
    /// next one that has messages; asking again from the last number plus one enumerates every
    /// message exactly once.
    pub async fn peek(
        &self,
        address: impl Into<EntityAddress>,
        from: SequenceNumber,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        self.note_activity(&entity);
        let partitioned = entity.partitioned();
        let mut partition = from.partition(partitioned);
        let mut start = from;
        while let Some(handle) = entity.partition(partition) {
            let queue = address.queue;
            let found =
                handle.ask(|reply| Command::Peek { queue, from: start, max, reply }).await?;
            if !found.is_empty() || !partitioned {
                return Ok(found);
            }
            partition = PartitionId(partition.0 + 1);
            start = SequenceNumber::new(true, partition, 0);
        }
        Ok(Vec::new())
    }
}

/// Settlements bound for one partition: the partition, the items' places in the caller's
/// list, and the items.
type SettleGroup = (PartitionId, Vec<usize>, Vec<(LockToken, Disposition)>);

/// Refuses a request naming more than [`MAX_SEQUENCE_NUMBERS`] sequence numbers, before any
/// partition is asked.
pub(super) fn check_sequence_numbers(sequence_numbers: &[SequenceNumber]) -> Result<()> {
    if sequence_numbers.len() > MAX_SEQUENCE_NUMBERS {
        return Err(BrokerError::invalid(
            "sequence-numbers",
            format!(
                "{} sequence numbers; one request may name at most {MAX_SEQUENCE_NUMBERS}",
                sequence_numbers.len()
            ),
        ));
    }
    Ok(())
}

/// Puts received messages in the order their numbers were asked in (`asked` holds no
/// repetitions).
pub(super) fn sort_as_asked(received: &mut [ReceivedMessage], asked: &[SequenceNumber]) {
    let order: HashMap<SequenceNumber, usize> =
        asked.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    received.sort_by_key(|m| order.get(&m.broker.sequence_number).copied().unwrap_or(usize::MAX));
}
