//! Auto-forwarding: the configuration rules of ForwardTo and ForwardDeadLetteredMessagesTo,
//! and the **forwarder**, which moves what a source's transfer queue holds into its
//! destination through the destination's normal publish path.
//!
//! The rules (`Broker::check_forwarding`, at create and update): each destination is a queue
//! or topic of the namespace, named plainly or as `sb://host/name` (an entity may name
//! itself); a session-enabled entity forwards to a topic, not to a queue; refusals carry
//! Service Bus's `SubCode=40000` / `SubCode=40400` texts. Receivers, peeks and deferred
//! receives on what an entity forwards are refused.
//!
//! One forwarder task per forwarding entity (a queue or a subscription), fed by every
//! partition of it like a receiver: a [`Receiver`] on the entity's transfer queue
//! (`SubQueue::Transfer`, peek-lock), which a partition fills in the same write that would have
//! made a message available (`PartitionState::insert_copy`, scheduled messages coming due, dead
//! letters with ForwardDeadLetteredMessagesTo). For a batch it received, the forwarder
//!
//! 1. decides per message: the hop limit (a fifth transfer dead-letters it at the source with
//!    `MaxTransferHopCountExceeded`), the destination's status, session rule, size and quota
//!    (a refusal dead-letters it at the source with a stable reason);
//! 2. routes each to a partition of the destination by its partition key (SessionId,
//!    PartitionKey, MessageId, else its transfer id: a re-sent transfer meets the same
//!    partition) and sends one `Command::Transfer` per partition; the destination stores the
//!    message and a ledger record of its transfer id in one write (a topic publishes it: its
//!    rules, duplicate detection and subscriptions apply);
//! 3. settles the batch at the source in one request per partition: complete, dead-letter, or
//!    release what must wait (a missing destination, an unavailable partition);
//! 4. once the completions are durable, tells the destination partitions to forget those
//!    transfer ids.
//!
//! A forwarder starts with its entity (at start-up, on create, on the update that sets a
//! rule), idles while the entity has no rule, and ends when the entity is deleted. What must
//! wait is tried again after 1 s, doubling up to 30 s, measured on the [`Clock`](crate::Clock).
//!
//! The same forwarder drains an entity's **send-via transfer queue** (`SubQueue::SendVia`):
//! what transactions sent *through* the entity to other queues or topics, each message naming
//! its destination. A refusal there dead-letters into the entity's transfer dead-letter queue
//! (`$Transfer/$DeadLetterQueue`) instead of its dead-letter queue. That forwarder starts at
//! the first commit that sends through the entity, and at start-up for entities whose
//! partitions hold such transfers.
//!
//! A crash or a failed write between 2 and 3 leaves the transfer in the source (locks are
//! memory only): it is sent again and the destination answers "duplicate" from its ledger, so
//! the message lands exactly once. No store write spans two partitions.
//!
//! **Architecture Invariant:** a message leaves a transfer queue only after its destination
//! stored it durably (or after it was dead-lettered at the source); a destination stores a
//! transfer at most once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::sending::{requires_session_id, Reservation};
use super::{takes_sends, Broker, EntityHandle};
use crate::address::{EntityAddress, EntityPath};
use crate::description::{QueueDescription, SubscriptionDescription};
use crate::entity::EntityKind;
use crate::error::{BrokerError, Result};
use crate::message::{
    dead_letter_reason, ApplicationProperties, Disposition, Forwarded, Message, ReceivedMessage,
    MAX_TRANSFER_HOPS,
};
use crate::metrics as m;
use crate::partition::{Command, TransferId};
use crate::receiver::Receiver;
use crate::router;
use crate::types::{LockToken, PartitionId, ReceiveMode, SubQueue, Timestamp};

/// Service Bus's refusal of a receiver (or a peek) on an entity that forwards its messages.
pub(crate) const FORWARDING_RECEIVER: &str =
    "Cannot create a message receiver on an entity with auto-forwarding enabled.";
/// Service Bus's answer to a forwarding rule naming no entity of the namespace.
pub(crate) const DESTINATION_MISSING: &str =
    "SubCode=40400. The auto forwarding destination entity does not exist.";
/// Service Bus's answer to ForwardTo from a session-enabled entity to a queue.
pub(crate) const SESSION_TO_QUEUE: &str = "SubCode=40000. Bad Request. A session-enabled \
    entity cannot forward its messages to a queue.";

/// The most messages one forwarding round takes.
const BATCH: u32 = 256;
/// The first wait before a transfer that had to wait is tried again; it doubles up to
/// [`RETRY_MAX`] while transfers keep waiting.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Transfers completed at their source, by destination partition, with when: those partitions
/// may forget them (in a cluster only after [`FORGET_GRACE`]).
type Forgets = HashMap<(EntityPath, PartitionId), Vec<(Timestamp, TransferId)>>;

/// How long a cluster node waits after a transfer's completion before its destination may
/// forget it. A source partition that moved may still have the previous owner's forwarder
/// sending that transfer (a call under way, or waiting on a route for an owner): the
/// destination must still know it then, or it would store it twice. Those waits are bounded
/// (a link call's time-out, a route's wait), far below this.
const FORGET_GRACE: Duration = Duration::from_secs(60);

/// The ids of `list` completed before `due`, taken out of it.
fn take_due(list: &mut Vec<(Timestamp, TransferId)>, due: Timestamp) -> Vec<TransferId> {
    let (ready, wait): (Vec<_>, Vec<_>) = list.drain(..).partition(|(at, _)| *at <= due);
    *list = wait;
    ready.into_iter().map(|(_, id)| id).collect()
}

/// Transfers going one way: their places in the caller's list, and the transfers.
type Group<M> = (Vec<usize>, Vec<(TransferId, M)>);

/// What became of one transfer.
#[derive(Debug, Clone)]
enum Verdict {
    /// Stored in (or found already stored by) this partition of the destination.
    Stored(PartitionId),
    /// The destination refuses it for good: dead-letter it at the source.
    DeadLetter { reason: &'static str, description: String, label: &'static str },
    /// It must wait: try again later.
    Wait { error: BrokerError, label: &'static str },
}

/// The destination a forwarding rule names, as an entity path (an absolute `sb://host/name`
/// URI names `name`).
pub(crate) fn destination_path(target: &str) -> EntityPath {
    EntityPath::parse(target).unwrap_or_else(|_| EntityPath::verbatim(target))
}

/// An order to create queues in (indexes into `queues`, each a name and its description) so
/// that every queue comes after those of the list it forwards to (ForwardTo or
/// ForwardDeadLetteredMessagesTo): a chain declared in any order can be created. Otherwise the
/// order given is kept; queues on a cycle keep it too (an entity naming itself is no cycle).
pub fn creation_order(queues: &[(&str, &QueueDescription)]) -> Vec<usize> {
    let keys: Vec<String> =
        queues.iter().map(|(name, _)| destination_path(name).key().to_owned()).collect();
    let mut placed = vec![false; queues.len()];
    let mut order = Vec::with_capacity(queues.len());
    while order.len() < queues.len() {
        let before = order.len();
        for i in 0..queues.len() {
            if placed[i] {
                continue;
            }
            let d = queues[i].1;
            let targets = [&d.forward_to, &d.forward_dead_lettered_messages_to];
            let ready = targets.into_iter().flatten().all(|target| {
                let key = destination_path(target).key().to_owned();
                key == keys[i] || !keys.iter().zip(&placed).any(|(k, done)| *k == key && !done)
            });
            if ready {
                placed[i] = true;
                order.push(i);
            }
        }
        if order.len() == before {
            // A cycle: what is left, in the order given.
            for (i, done) in placed.iter_mut().enumerate() {
                if !*done {
                    *done = true;
                    order.push(i);
                }
            }
        }
    }
    order
}

/// A description with forwarding rules (a queue's, a subscription's), as
/// [`Broker::check_forwarding`] reads them.
pub(crate) trait Forwards {
    /// ForwardTo, ForwardDeadLetteredMessagesTo, and whether the entity requires sessions.
    fn forwarding(&self) -> (&Option<String>, &Option<String>, bool);
}

impl Forwards for QueueDescription {
    fn forwarding(&self) -> (&Option<String>, &Option<String>, bool) {
        (&self.forward_to, &self.forward_dead_lettered_messages_to, self.requires_session)
    }
}

impl Forwards for SubscriptionDescription {
    fn forwarding(&self) -> (&Option<String>, &Option<String>, bool) {
        (&self.forward_to, &self.forward_dead_lettered_messages_to, self.requires_session)
    }
}

impl Broker {
    /// Checks a queue's or subscription's forwarding rules (at create and update): each
    /// destination must be a queue or topic of the namespace (an entity may name itself: the
    /// hop limit then ends the loop), and a session-enabled entity cannot forward its messages
    /// to a queue (to a topic it can; its dead letters go anywhere).
    ///
    /// Service Bus refused ForwardTo from a session-enabled queue to a queue
    /// (Azure/azure-service-bus issues #317, #660: "not possible", said its maintainers; the
    /// docs said session entities cannot forward at all), but Microsoft's recording of
    /// azure-servicebus's `test_mgmt_queue_create_with_queue_description` (2025) shows a
    /// session-enabled queue created with ForwardTo naming a topic: 201, ForwardTo kept.
    pub(crate) fn check_forwarding(
        &self,
        description: &impl Forwards,
        source: &EntityPath,
    ) -> Result<()> {
        let (forward_to, forward_dead_letters_to, requires_session) = description.forwarding();
        for (field, target) in
            [("ForwardTo", forward_to), ("ForwardDeadLetteredMessagesTo", forward_dead_letters_to)]
        {
            let Some(target) = target else { continue };
            let path = destination_path(target);
            // Itself, when the destination is the source: a queue or a subscription.
            let to_queue = path == *source
                || match self.entities().get(path.key()).map(|e| e.kind) {
                    Some(EntityKind::Queue) => true,
                    Some(EntityKind::Topic) => false,
                    Some(EntityKind::Subscription | EntityKind::Rule) | None => {
                        return Err(BrokerError::invalid(field, DESTINATION_MISSING))
                    }
                };
            if field == "ForwardTo" && requires_session && to_queue {
                return Err(BrokerError::invalid(field, SESSION_TO_QUEUE));
            }
        }
        Ok(())
    }

    /// Refuses a receiver, peek or deferred receive on what an entity forwards (its main
    /// queue with ForwardTo, its dead-letter queue with ForwardDeadLetteredMessagesTo) and on
    /// its transfer queue, which is the forwarder's.
    pub(crate) fn check_not_forwarded(&self, entity: &EntityHandle, queue: SubQueue) -> Result<()> {
        let description = entity.description();
        let forwarded = match queue {
            SubQueue::Main => description.forward_to.is_some(),
            SubQueue::DeadLetter => description.forward_dead_lettered_messages_to.is_some(),
            SubQueue::Transfer | SubQueue::SendVia => true,
            SubQueue::TransferDeadLetter => false,
        };
        if forwarded {
            Err(BrokerError::InvalidOperation(FORWARDING_RECEIVER.into()))
        } else {
            Ok(())
        }
    }

    /// Starts the entity's forwarder if it has a forwarding rule and none runs. A forwarder
    /// runs until its entity is deleted or the broker shuts down; while the entity has no
    /// rule it idles (its transfer queue is empty).
    /// Transfers completed at or before this time may be forgotten by their destinations now.
    fn forget_due(&self) -> Timestamp {
        let now = self.inner.clock.now();
        if self.inner.cluster {
            Timestamp::from_millis(now.as_millis().saturating_sub(FORGET_GRACE.as_millis() as i64))
        } else {
            now
        }
    }

    pub(crate) fn ensure_forwarder(&self, entity: &Arc<EntityHandle>) {
        match entity.kind {
            EntityKind::Queue | EntityKind::Subscription => {}
            EntityKind::Topic | EntityKind::Rule => return,
        }
        let description = entity.description();
        if description.forward_to.is_none()
            && description.forward_dead_lettered_messages_to.is_none()
        {
            return;
        }
        if entity.forwarder.swap(true, Ordering::AcqRel) {
            return;
        }
        self.spawn_forwarder(entity, SubQueue::Transfer);
    }

    /// Starts the forwarder of the entity's send-via transfer queue (what transactions sent
    /// through it to other entities; a topic's holds what was sent through its
    /// subscriptions) if none runs: at a commit that sent through it, and at start-up when
    /// that queue holds transfers.
    pub(crate) fn ensure_send_via_forwarder(&self, entity: &Arc<EntityHandle>) {
        if !has_send_via_queue(entity.kind)
            || entity.send_via_forwarder.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.spawn_forwarder(entity, SubQueue::SendVia);
    }

    fn spawn_forwarder(&self, entity: &Arc<EntityHandle>, queue: SubQueue) {
        let id = self.inner.next_receiver_id.fetch_add(1, Ordering::Relaxed);
        // On a cluster node it forwards what the partitions it runs hold; every node runs one.
        let receiver = Receiver::attach_local(entity.clone(), id, ReceiveMode::PeekLock, queue);
        let forwarder = Forwarder {
            broker: self.clone(),
            entity: entity.clone(),
            receiver,
            queue,
            forget: Forgets::new(),
        };
        tokio::spawn(forwarder.run());
    }

    /// Stores transfers in `destination`, each at most once; one verdict per transfer, in
    /// order.
    async fn deliver_transfers(
        &self,
        destination: &EntityPath,
        transfers: Vec<(TransferId, Message)>,
        forget: &mut Forgets,
    ) -> Vec<Verdict> {
        let count = transfers.len();
        let wait = |error: BrokerError, label| vec![Verdict::Wait { error, label }; count];
        let entity = match self.entity(destination) {
            Ok(e) if takes_sends(e.kind) => e,
            Ok(_) | Err(_) => {
                let error = BrokerError::EntityNotFound { entity: destination.to_string() };
                return wait(error, "destination_missing");
            }
        };
        // A forwarded message is a send to its destination.
        self.note_activity(&entity);
        let description = entity.description();
        if !description.status.can_send() {
            let verdict = Verdict::DeadLetter {
                reason: dead_letter_reason::FORWARD_DESTINATION_DISABLED,
                description: format!(
                    "the forwarding destination {} is {}",
                    entity.path,
                    description.status.as_str()
                ),
                label: "disabled",
            };
            return vec![verdict; count];
        }
        let mut verdicts: Vec<Option<Verdict>> = vec![None; count];
        // Per partition: the transfers' places in `transfers`, and the transfers.
        let mut groups: HashMap<PartitionId, Group<Arc<Message>>> = HashMap::new();
        let mut incoming = 0u64;
        let stored: u64 = entity.partitions.iter().map(|p| p.shared.size_bytes()).sum();
        let limit = description.max_size_bytes();
        let pending = entity.pending_bytes.load(Ordering::Acquire);
        for (place, (id, message)) in transfers.into_iter().enumerate() {
            match admit(&entity, &description, &message, stored + pending + incoming, limit) {
                Err(verdict) => verdicts[place] = Some(verdict),
                Ok(partition) => {
                    let partition = partition.unwrap_or_else(|| {
                        router::partition_for_key(&id.routing_key(), description.partitions())
                    });
                    incoming += message.size() as u64;
                    let group = groups.entry(partition).or_default();
                    group.0.push(place);
                    group.1.push((id, Arc::new(message)));
                }
            }
        }
        entity.pending_bytes.fetch_add(incoming, Ordering::AcqRel);
        let reservation = Reservation { entity: entity.clone(), bytes: incoming };
        let mut asked = Vec::with_capacity(groups.len());
        for (partition, (places, transfers)) in groups {
            let handle = entity.partition(partition).expect("router stays within the entity");
            // What this partition may forget goes with the next transfers to it (usually in
            // the same cycle, so in the same write).
            if let Some(list) = forget.get_mut(&(destination.clone(), partition)) {
                let ids = take_due(list, self.forget_due());
                if !ids.is_empty() {
                    handle.send(Command::ForgetTransfers(ids));
                }
            }
            asked.push((
                partition,
                places,
                handle.ask(|reply| Command::Transfer { transfers, reply }),
            ));
        }
        for (partition, places, answer) in asked {
            match answer.await {
                Ok(outcomes) => {
                    for (place, outcome) in places.into_iter().zip(outcomes) {
                        verdicts[place] = Some(match outcome {
                            Ok(_) => Verdict::Stored(partition),
                            Err(error) => refused(error),
                        });
                    }
                }
                Err(error) => {
                    for place in places {
                        verdicts[place] =
                            Some(Verdict::Wait { error: error.clone(), label: "unavailable" });
                    }
                }
            }
        }
        drop(reservation);
        verdicts
            .into_iter()
            .map(|v| {
                v.unwrap_or(Verdict::Wait {
                    error: BrokerError::ShuttingDown,
                    label: "unavailable",
                })
            })
            .collect()
    }
}

/// Whether an entity of this kind has a send-via transfer queue of its own: a queue or a
/// topic (what is sent through a subscription waits in its topic's); a rule has none.
pub(super) fn has_send_via_queue(kind: EntityKind) -> bool {
    match kind {
        EntityKind::Queue | EntityKind::Topic => true,
        EntityKind::Subscription | EntityKind::Rule => false,
    }
}

/// Whether the destination takes a transfer (its session rule, size and quota) and, if its
/// partition key names one, the partition it goes to.
fn admit(
    entity: &EntityHandle,
    description: &QueueDescription,
    message: &Message,
    used: u64,
    limit: u64,
) -> Result<Option<PartitionId>, Verdict> {
    if requires_session_id(entity, description) && message.properties.session_id.is_none() {
        return Err(Verdict::DeadLetter {
            reason: dead_letter_reason::FORWARD_DESTINATION_REFUSED,
            description: super::sessions::SESSION_ID_NOT_SET.to_owned(),
            label: "refused",
        });
    }
    let (size, max) = (message.size(), description.max_message_size());
    if size > max {
        return Err(refused(BrokerError::MessageSizeExceeded { size, max }));
    }
    if used + size as u64 > limit {
        return Err(Verdict::DeadLetter {
            reason: dead_letter_reason::FORWARD_DESTINATION_FULL,
            description: format!(
                "the forwarding destination {} is full: {used} of {limit} bytes used",
                entity.path
            ),
            label: "full",
        });
    }
    if !description.enable_partitioning {
        return Ok(Some(PartitionId(0)));
    }
    match router::partition_key(&message.properties, true) {
        Ok(key) => Ok(key.map(|k| router::partition_for_key(k, description.partitions()))),
        Err(error) => Err(refused(error)),
    }
}

/// A destination's refusal of one transfer: it waits if a retry can help, else it is
/// dead-lettered at the source with the destination's error as its description.
fn refused(error: BrokerError) -> Verdict {
    match error {
        e if e.is_retriable() => Verdict::Wait { error: e, label: "unavailable" },
        BrokerError::QuotaExceeded(text) => Verdict::DeadLetter {
            reason: dead_letter_reason::FORWARD_DESTINATION_FULL,
            description: text,
            label: "full",
        },
        BrokerError::EntityDisabled { .. } => Verdict::DeadLetter {
            reason: dead_letter_reason::FORWARD_DESTINATION_DISABLED,
            description: error.to_string(),
            label: "disabled",
        },
        e => Verdict::DeadLetter {
            reason: dead_letter_reason::FORWARD_DESTINATION_REFUSED,
            description: e.to_string(),
            label: "refused",
        },
    }
}

/// One forwarding entity's forwarder (see the module docs).
struct Forwarder {
    broker: Broker,
    entity: Arc<EntityHandle>,
    receiver: Receiver,
    /// The queue it drains: the transfer queue (auto-forwarding: the destination is the
    /// entity's rule) or the send-via transfer queue (each message names its destination).
    queue: SubQueue,
    /// Completed transfers whose destinations are not told yet (see [`Forgets`]).
    forget: Forgets,
}

impl Forwarder {
    async fn run(mut self) {
        let mut retry = RETRY_FIRST;
        loop {
            self.receiver.set_outstanding(BATCH);
            let mut first = self.receiver.try_recv();
            if first.is_none() {
                // Under load the next batch is on its way: let it arrive before deciding
                // that the forwarder is idle.
                tokio::task::yield_now().await;
                first = self.receiver.try_recv();
            }
            let first = match first {
                Some(first) => first,
                None => {
                    // Idle: the destinations need not wait for the next transfer to forget.
                    self.flush_forgets();
                    let Some(first) = self.receiver.recv().await else { break };
                    first
                }
            };
            let mut batch = vec![first];
            while batch.len() < BATCH as usize {
                match self.receiver.try_recv() {
                    Some(m) => batch.push(m),
                    None => break,
                }
            }
            if self.forward(batch).await {
                retry = RETRY_FIRST;
                continue;
            }
            // Something must wait: hold no credit meanwhile (what was released would come
            // straight back), then try again after a while.
            let clock = self.broker.clock().clone();
            let deadline = clock.now().saturating_add(retry);
            clock.sleep_until(deadline).await;
            retry = (retry * 2).min(RETRY_MAX);
        }
        match self.queue {
            SubQueue::SendVia => self.entity.send_via_forwarder.store(false, Ordering::Release),
            _ => self.entity.forwarder.store(false, Ordering::Release),
        }
    }

    /// Tells every destination partition what it may forget now.
    fn flush_forgets(&mut self) {
        let due = self.broker.forget_due();
        for ((destination, partition), list) in self.forget.iter_mut() {
            let ids = take_due(list, due);
            if ids.is_empty() {
                continue;
            }
            if let Ok(entity) = self.broker.entity(destination) {
                if let Some(handle) = entity.partition(*partition) {
                    handle.send(Command::ForgetTransfers(ids));
                }
            }
        }
        self.forget.retain(|_, list| !list.is_empty());
    }

    /// Forwards one batch. False if some of it has to wait.
    async fn forward(&mut self, batch: Vec<ReceivedMessage>) -> bool {
        let description = self.entity.description();
        let source = &self.entity.path;
        // Per destination: the messages' places in `batch`, and the transfers.
        let mut by_destination: Vec<(EntityPath, Group<Message>)> = Vec::new();
        let mut settlements: Vec<Option<Disposition>> = vec![None; batch.len()];
        for (place, received) in batch.iter().enumerate() {
            // A dead letter of this entity (not one forwarded in with its dead-letter
            // fields: those name their source).
            let dead = received.broker.dead_letter_reason.is_some()
                && received.broker.dead_letter_source.is_none();
            let via_destination =
                received.message.forwarded.as_ref().and_then(|f| f.destination.as_ref());
            let rule = match self.queue {
                SubQueue::SendVia => via_destination,
                _ if dead => description.forward_dead_lettered_messages_to.as_ref(),
                _ => description.forward_to.as_ref(),
            };
            let Some(target) = rule else {
                // The rule went away under way: the partition takes it back.
                settlements[place] = Some(Disposition::Release);
                continue;
            };
            let hops = received.message.forwarded.as_ref().map_or(0, |f| f.hops);
            if hops >= MAX_TRANSFER_HOPS {
                metrics::counter!(m::FORWARD_FAILURES_TOTAL, "reason" => "hop_limit").increment(1);
                settlements[place] = Some(Disposition::DeadLetter {
                    reason: Some(dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED.into()),
                    description: Some(
                        dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED_DESCRIPTION.into(),
                    ),
                    properties: ApplicationProperties::new(),
                });
                continue;
            }
            let id = TransferId {
                source: self.entity.id,
                sequence_number: received.broker.sequence_number,
            };
            let message = transferred(received, hops, dead.then_some(source));
            let destination = destination_path(target);
            match by_destination.iter_mut().find(|(d, _)| *d == destination) {
                Some((_, (places, transfers))) => {
                    places.push(place);
                    transfers.push((id, message));
                }
                None => by_destination.push((destination, (vec![place], vec![(id, message)]))),
            }
        }

        let mut all_done = true;
        // Transfers stored, by destination and partition, to forget once completed here.
        let mut stored: Vec<(EntityPath, PartitionId, usize, TransferId)> = Vec::new();
        for (destination, (places, transfers)) in by_destination {
            let ids: Vec<TransferId> = transfers.iter().map(|(id, _)| *id).collect();
            let verdicts =
                self.broker.deliver_transfers(&destination, transfers, &mut self.forget).await;
            for ((place, id), verdict) in places.into_iter().zip(ids).zip(verdicts) {
                settlements[place] = Some(match verdict {
                    Verdict::Stored(partition) => {
                        stored.push((destination.clone(), partition, place, id));
                        Disposition::Complete
                    }
                    Verdict::DeadLetter { reason, description, label } => {
                        metrics::counter!(m::FORWARD_FAILURES_TOTAL, "reason" => label)
                            .increment(1);
                        tracing::info!(entity = %source, destination = %destination, reason, "forwarded message dead-lettered at its source");
                        Disposition::DeadLetter {
                            reason: Some(reason.into()),
                            description: Some(description),
                            properties: ApplicationProperties::new(),
                        }
                    }
                    Verdict::Wait { error, label } => {
                        if all_done {
                            tracing::warn!(entity = %source, destination = %destination, error = %error, "cannot forward; messages wait in the transfer queue");
                        }
                        metrics::counter!(m::FORWARD_FAILURES_TOTAL, "reason" => label)
                            .increment(1);
                        all_done = false;
                        Disposition::Release
                    }
                });
            }
        }
        if !all_done {
            // No credit while waiting, before anything is released.
            self.receiver.set_outstanding(0);
        }

        let items: Vec<(LockToken, Disposition)> = batch
            .iter()
            .zip(settlements)
            .filter_map(|(received, disposition)| {
                Some((received.lock_token()?, disposition.unwrap_or(Disposition::Release)))
            })
            .collect();
        let address = EntityAddress { entity: source.clone(), queue: self.queue };
        let outcomes = self.broker.start_settle_many(address, items).await;

        // Completed here for good: the destinations may forget those transfers.
        let mut forwarded = 0u64;
        for (destination, partition, place, id) in stored {
            if outcomes.get(place).is_some_and(|o| o.is_ok()) {
                forwarded += 1;
                let now = self.broker.clock().now();
                self.forget.entry((destination, partition)).or_default().push((now, id));
            }
        }
        metrics::counter!(m::FORWARD_MESSAGES_TOTAL).increment(forwarded);
        all_done
    }
}

/// The message a transfer carries: the received message (with what the broker laid over it)
/// and its journey so far — one hop more, its first sequence number, and for a dead letter
/// of `dead_letter_source` its dead-letter fields.
fn transferred(
    received: &ReceivedMessage,
    hops: u8,
    dead_letter_source: Option<&EntityPath>,
) -> Message {
    let mut message = (*received.message).clone();
    let before = message.forwarded.take().map(|f| *f).unwrap_or_default();
    let broker = &received.broker;
    let forwarded = match dead_letter_source {
        Some(source) => Forwarded {
            hops: hops + 1,
            enqueued_sequence_number: broker.enqueued_sequence_number,
            dead_letter_source: Some(source.to_string()),
            dead_letter_reason: broker.dead_letter_reason.clone(),
            dead_letter_error_description: broker.dead_letter_error_description.clone(),
            destination: None,
        },
        None => Forwarded {
            hops: hops + 1,
            enqueued_sequence_number: broker.enqueued_sequence_number,
            destination: None,
            ..before
        },
    };
    message.forwarded = Some(Box::new(forwarded));
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(target: Option<&str>) -> QueueDescription {
        QueueDescription { forward_to: target.map(str::to_owned), ..QueueDescription::default() }
    }

    #[test]
    fn queues_are_created_after_the_queues_they_forward_to() {
        let (a, b, c, d) = (to(Some("B")), to(Some("sb://host/c")), to(None), to(Some("topic")));
        let queues = [("a", &a), ("b", &b), ("c", &c), ("d", &d)];
        assert_eq!(creation_order(&queues), [2, 3, 1, 0]);
        let dead_letters = QueueDescription {
            forward_dead_lettered_messages_to: Some("c".into()),
            ..QueueDescription::default()
        };
        let queues = [("x", &dead_letters), ("c", &c)];
        assert_eq!(creation_order(&queues), [1, 0]);
    }

    #[test]
    fn cycles_and_self_forwarding_keep_the_order_given() {
        let (a, b, s) = (to(Some("b")), to(Some("a")), to(Some("s")));
        assert_eq!(creation_order(&[("s", &s), ("a", &a), ("b", &b)]), [0, 1, 2]);
    }
}
