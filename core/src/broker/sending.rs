//! Sending: what every send is checked for (the entity takes messages, the session rule,
//! each message's size), routing it to one partition (by its partition key, else to the next
//! available partition in turn), holding its bytes against the entity's size until it is
//! answered, and scheduling and cancelling scheduled messages.
//!
//! Invariants kept here: one call is one atomic write to one partition — all its messages are
//! stored or none, and all keyed messages of a call on a partitioned entity share one
//! partition key; a send is queued on its partition before `start_send` returns, so sends
//! started one after another on a partition are stored in that order; an entity's size
//! counts what is stored plus what started sends have queued ([`Reservation`]), so pipelined
//! sends cannot overrun MaxSizeInMegabytes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{by_partition, sessions, takes_sends, Broker, EntityHandle};
use crate::address::EntityAddress;
use crate::description::QueueDescription;
use crate::entity::EntityKind;
use crate::error::{BrokerError, Result};
use crate::message::Message;
use crate::partition::{Command, SendOutcome};
use crate::router;
use crate::types::{PartitionId, SequenceNumber, SubQueue};

/// The answer to a send started with [`Broker::start_send`].
pub type SendFuture = Pin<Box<dyn Future<Output = Result<Vec<SendOutcome>>> + Send>>;

impl Broker {
    /// Sends messages to a queue, atomically: all are stored or none. On a partitioned entity
    /// the router picks the partition from the messages' partition key, which all keyed messages
    /// of one call must share; a call without any key goes to the next available partition in
    /// turn.
    ///
    /// Returns, per message, its sequence number or that it was dropped as a duplicate.
    pub async fn send(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<Vec<SendOutcome>> {
        self.start_send(address, messages)?.await
    }

    /// [`Broker::send`] in two steps: the messages are checked, routed and queued on their
    /// partition before this returns; the future then waits for them to be stored. Sends
    /// started one after another on the same partition are stored in that order, so a
    /// transport can pipeline a link's sends and keep their order.
    pub fn start_send(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<SendFuture> {
        let address = address.into();
        let (entity, incoming) = self.check_send(&address, &messages)?;
        let description = entity.description();
        let reservation = Reservation::take(&entity, incoming)?;

        // One call is one atomic write to one partition. On a partitioned entity every message
        // that names a partition key (SessionId or PartitionKey) must name the same one, as in a
        // Service Bus transaction; messages without one travel with them. A batch without an
        // explicit key is routed like Service Bus routes a batch envelope: by the first
        // message's MessageId when duplicate detection is on, else to the next partition in turn.
        let partition = if description.enable_partitioning {
            let mut batch_key: Option<&str> = None;
            for message in &messages {
                let Some(key) = router::partition_key(&message.properties, false)? else {
                    continue;
                };
                match batch_key {
                    Some(first) if first != key => {
                        return Err(BrokerError::InvalidOperation(format!(
                            "the messages of one batch sent to partitioned entity {} must share \
                             one partition key; found {first:?} and {key:?}",
                            entity.path
                        )))
                    }
                    _ => batch_key = Some(key),
                }
            }
            let key = match (batch_key, messages.first()) {
                (Some(key), _) => Some(key),
                (None, Some(first)) => router::partition_key(
                    &first.properties,
                    description.requires_duplicate_detection,
                )?,
                (None, None) => None,
            };
            key.map(|key| router::partition_for_key(key, description.partitions()))
        } else {
            Some(PartitionId(0))
        };
        let messages: Vec<Arc<Message>> = messages.into_iter().map(Arc::new).collect();
        let sent = match partition {
            Some(partition) => {
                let handle = entity.partition(partition).expect("router stays within the entity");
                Box::pin(handle.ask(|reply| Command::Send { messages, reply })) as SendFuture
            }
            None => send_round_robin(entity, messages),
        };
        Ok(Box::pin(async move {
            let outcome = sent.await;
            drop(reservation);
            outcome
        }))
    }

    /// What every send is checked for before it is routed: the entity takes messages (a queue
    /// or topic, sendable, the main queue), the session rule, each message's size. Returns the
    /// entity and the bytes the messages add.
    pub(crate) fn check_send(
        &self,
        address: &EntityAddress,
        messages: &[Message],
    ) -> Result<(Arc<EntityHandle>, u64)> {
        let entity = self.entity(&address.entity)?;
        if !takes_sends(entity.kind) {
            return Err(BrokerError::InvalidOperation(format!(
                "messages cannot be sent to {} {}: send to its topic",
                entity.kind.as_str(),
                entity.path
            )));
        }
        let description = entity.description();
        if address.queue != SubQueue::Main {
            return Err(BrokerError::InvalidOperation(
                "messages cannot be sent to a dead-letter queue".into(),
            ));
        }
        if !description.status.can_send() {
            return Err(BrokerError::EntityDisabled {
                entity: entity.path.to_string(),
                status: description.status.as_str(),
            });
        }
        if requires_session_id(&entity, &description)
            && messages.iter().any(|m| m.properties.session_id.is_none())
        {
            return Err(BrokerError::InvalidOperation(sessions::SESSION_ID_NOT_SET.into()));
        }
        let max = description.max_message_size();
        let mut incoming = 0u64;
        for m in messages {
            let size = m.size();
            if size > max {
                return Err(BrokerError::MessageSizeExceeded { size, max });
            }
            incoming += size as u64;
        }
        self.note_activity(&entity);
        Ok((entity, incoming))
    }

    /// Schedules messages for later: each must carry a scheduled enqueue time. Returns their
    /// sequence numbers (for cancellation); a duplicate is reported as such.
    pub async fn schedule(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<Vec<SendOutcome>> {
        if messages.iter().any(|m| m.properties.scheduled_enqueue_time.is_none()) {
            return Err(BrokerError::invalid(
                "ScheduledEnqueueTime",
                "every scheduled message needs a scheduled enqueue time",
            ));
        }
        self.send(address, messages).await
    }

    /// Cancels scheduled messages. Numbers that name no scheduled message are ignored.
    pub async fn cancel_scheduled(
        &self,
        address: impl Into<EntityAddress>,
        sequence_numbers: &[SequenceNumber],
    ) -> Result<()> {
        super::receiving::check_sequence_numbers(sequence_numbers)?;
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.note_activity(&entity);
        let sequence_numbers = SequenceNumber::distinct(sequence_numbers);
        for (partition, seqs) in by_partition(&entity, &sequence_numbers) {
            partition.ask(|reply| Command::Cancel { sequence_numbers: seqs, reply }).await?;
        }
        Ok(())
    }
}

/// Bytes a started send counts against its entity's size until it is answered (or dropped).
pub(super) struct Reservation {
    pub(super) entity: Arc<EntityHandle>,
    pub(super) bytes: u64,
}

impl Reservation {
    /// Reserves `incoming` bytes of `entity`'s size, or refuses them with QuotaExceeded: what
    /// is stored, plus what earlier sends have queued and not yet stored (a transport pipelines
    /// a link's sends), must leave room. The bytes stay reserved until the reservation drops.
    pub(super) fn take(entity: &Arc<EntityHandle>, incoming: u64) -> Result<Reservation> {
        let stored: u64 = entity.partitions.iter().map(|p| p.shared.size_bytes()).sum();
        let limit = entity.description().max_size_bytes();
        let pending = entity.pending_bytes.fetch_add(incoming, Ordering::AcqRel);
        let reservation = Reservation { entity: entity.clone(), bytes: incoming };
        if stored + pending + incoming > limit {
            let used = stored + pending;
            return Err(BrokerError::QuotaExceeded(format!(
                "{} is full: {used} of {limit} bytes used",
                entity.path
            )));
        }
        Ok(reservation)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.entity.pending_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Stores keyless messages in the next partition in turn, skipping unavailable ones: those
/// known to be unavailable last, and those that turn out to be so on the way. The first
/// attempt is queued before this returns.
fn send_round_robin(entity: Arc<EntityHandle>, messages: Vec<Arc<Message>>) -> SendFuture {
    let rotation = entity.round_robin.order(entity.partitions.len() as u16);
    // The usual case, without collecting the order: the first partition in turn that is
    // available, or the first in turn when none is.
    let first =
        rotation.clone().find(|p| available(&entity, *p)).or_else(|| rotation.clone().next());
    let first = first.expect("an entity has at least one partition");
    let first_try = entity
        .partition(first)
        .expect("order stays within the entity")
        .ask(|reply| Command::Send { messages: messages.clone(), reply });
    Box::pin(async move {
        let mut outcome = first_try.await;
        if !matches!(outcome, Err(BrokerError::PartitionUnavailable { .. })) {
            return outcome;
        }
        // The rest, as they are now: the available ones in turn, then the others.
        let (up, down): (Vec<_>, Vec<_>) =
            rotation.filter(|p| *p != first).partition(|p| available(&entity, *p));
        for partition in up.into_iter().chain(down) {
            let handle = entity.partition(partition).expect("order stays within the entity");
            outcome = handle.ask(|reply| Command::Send { messages: messages.clone(), reply }).await;
            if !matches!(outcome, Err(BrokerError::PartitionUnavailable { .. })) {
                break;
            }
        }
        outcome
    })
}

fn available(entity: &EntityHandle, partition: PartitionId) -> bool {
    entity.partition(partition).is_some_and(|h| h.shared.is_available())
}

/// Whether the entity refuses a message without a SessionId: a session-enabled queue does; a
/// topic takes it (its session-enabled subscriptions dead-letter their copy).
pub(super) fn requires_session_id(entity: &EntityHandle, description: &QueueDescription) -> bool {
    match entity.kind {
        EntityKind::Queue => description.requires_session,
        EntityKind::Topic | EntityKind::Subscription | EntityKind::Rule => false,
    }
}
