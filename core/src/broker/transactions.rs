//! Local transactions: work buffered in a [`Transaction`] until it is discharged, then
//! committed as **one atomic store write** on the transaction's *via* partition.
//!
//! The via entity is the first entity the transaction touches (or, for a send-via link or a
//! cross-entity session, the entity the transport names as `via`); the via partition is the
//! partition its first keyed operation routes to (always partition 0 without partitioning).
//! What the transaction does to the via entity (sends, schedules, cancels, settlements,
//! session state) is applied there at commit; a send to another entity becomes a record in the
//! via partition's send-via transfer queue (`SubQueue::SendVia`) in the same write, which the
//! via entity's forwarder then moves to its destination exactly once (see `forwarding.rs`).
//!
//! Nothing of a transaction is visible before its commit: its sends are not stored, its
//! settlements leave the messages locked by their receivers. A rollback, a timeout or a
//! failed commit leaves everything as it was (locks included: the same lock token settles
//! again). Receiving is not transactional.
//!
//! The rules (part C of `shared/protocol/topics-sessions-transactions.md`):
//! - without a `via`, all work is on one entity: a second one is refused with Service Bus's
//!   text ([`SPAN_ENTITIES`]); with a `via`, sends may go elsewhere, settlements may not;
//! - on a partitioned via entity every message sent carries a partition key (SessionId,
//!   PartitionKey, or MessageId with duplicate detection), all the same one, and every
//!   settlement is of a message of that partition ([`SPAN_PARTITIONS`]);
//! - at most [`MAX_OPERATIONS`] operations; [`TIMEOUT`] after the first one the transaction is
//!   gone (its work discarded, the next operation or the commit fails with
//!   [`BrokerError::TransactionTimedOut`]);
//! - an operation that failed dooms the transaction: its commit is refused
//!   ([`BrokerError::TransactionRolledBack`]) and nothing of it is applied.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;

use super::sending::Reservation;
use super::{Broker, EntityHandle};
use crate::address::{EntityAddress, EntityPath};
use crate::entity::EntityKind;
use crate::error::{BrokerError, Result};
use crate::message::{Disposition, Message};
use crate::metrics as m;
use crate::partition::{Command, SessionId, Work};
use crate::router;
use crate::types::{LockToken, PartitionId, SequenceNumber, Timestamp};

/// How long a transaction lives after its first operation.
pub const TIMEOUT: Duration = Duration::from_secs(120);
/// The most operations (messages sent or scheduled, settlements, cancels) in one transaction.
pub const MAX_OPERATIONS: usize = 100;
/// Service Bus's refusal of a second entity in a transaction.
pub const SPAN_ENTITIES: &str =
    "Local transactions cannot span multiple top-level entities such as queue or topic.";
/// Service Bus's refusal of a second partition (or partition key) in a transaction.
pub const SPAN_PARTITIONS: &str = "Local transactions cannot span multiple entities or partitions.";
/// Service Bus's refusal of more than [`MAX_OPERATIONS`] operations.
const TOO_MANY: &str = "Can't send more than 100 messages in a single transaction.";

/// A local transaction: a handle shared by everything that adds work to it (clones are the
/// same transaction). Created by the transport at declare; ended by [`Broker::commit`] or
/// [`Broker::rollback`].
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    via: Option<Via>,
    work: Vec<Work>,
    operations: usize,
    /// When the first operation came: the timeout runs from it.
    started: Option<Timestamp>,
    /// Why the commit will be refused (an operation failed).
    doomed: Option<String>,
    /// Lock tokens settled so far: a settlement retried with the same transaction is a no-op.
    settled: HashSet<LockToken>,
    /// Sequence numbers reserved in the via partition for scheduled messages.
    reserved: Vec<SequenceNumber>,
    /// Committed, rolled back or timed out: no more work.
    ended: bool,
}

/// The entity (and, once known, the partition and partition key) a transaction commits on.
#[derive(Debug)]
struct Via {
    entity: Arc<EntityHandle>,
    partition: Option<PartitionId>,
    key: Option<String>,
}

impl Transaction {
    pub fn new() -> Transaction {
        Transaction::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether an operation of the transaction failed: its commit will be refused.
    pub fn is_doomed(&self) -> bool {
        self.lock().doomed.is_some()
    }

    /// Whether the transaction ran past [`TIMEOUT`] after its first operation at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.lock().started.is_some_and(|at| at.saturating_add(TIMEOUT) <= now)
    }
}

impl State {
    /// Checks that the transaction can take `operations` more at `now` (not ended, not timed
    /// out, within the limit), starting its timeout at its first operation.
    fn begin(&mut self, operations: usize, now: Timestamp) -> Result<()> {
        if self.ended {
            return Err(BrokerError::TransactionTimedOut);
        }
        if self.started.is_some_and(|at| at.saturating_add(TIMEOUT) <= now) {
            return Err(BrokerError::TransactionTimedOut);
        }
        self.started.get_or_insert(now);
        if self.operations + operations > MAX_OPERATIONS {
            return Err(BrokerError::QuotaExceeded(TOO_MANY.into()));
        }
        self.operations += operations;
        Ok(())
    }

    /// The via entity, fixed by the first operation: `via` if the link names one, else the
    /// entity worked on.
    fn via(&mut self, entity: Arc<EntityHandle>) -> Result<&mut Via> {
        match &self.via {
            Some(v) if v.entity.id != entity.id => {
                Err(BrokerError::InvalidOperation(SPAN_ENTITIES.into()))
            }
            Some(_) => Ok(self.via.as_mut().expect("checked")),
            None => Ok(self.via.insert(Via { entity, partition: None, key: None })),
        }
    }

    /// A failed operation dooms the transaction (its commit is refused).
    fn fail<T>(&mut self, error: BrokerError) -> Result<T> {
        if !matches!(error, BrokerError::TransactionTimedOut) {
            self.doomed.get_or_insert_with(|| error.to_string());
        }
        Err(error)
    }
}

impl Via {
    /// Pins the transaction to `partition` (reached by `key`, if keyed): every operation of a
    /// transaction is in one partition, and on a partitioned entity every message sent in it
    /// carries the same key.
    fn pin(&mut self, partition: PartitionId, key: Option<&str>) -> Result<()> {
        if let (Some(key), Some(first)) = (key, &self.key) {
            if key != first {
                return Err(BrokerError::InvalidOperation(SPAN_PARTITIONS.into()));
            }
        }
        if self.partition.is_some_and(|p| p != partition) {
            return Err(BrokerError::InvalidOperation(SPAN_PARTITIONS.into()));
        }
        self.partition = Some(partition);
        if self.key.is_none() {
            self.key = key.map(str::to_owned);
        }
        Ok(())
    }

    /// Pins the transaction to the partition a message sent in it routes to.
    fn pin_message(&mut self, message: &Message) -> Result<()> {
        let description = self.entity.description();
        if !description.enable_partitioning {
            return self.pin(PartitionId(0), None);
        }
        let key =
            router::partition_key(&message.properties, description.requires_duplicate_detection)?;
        let Some(key) = key else {
            return Err(BrokerError::InvalidOperation(format!(
                "a message sent in a transaction through partitioned entity {} needs a \
                 partition key: a SessionId, a PartitionKey, or a MessageId with duplicate \
                 detection",
                self.entity.path
            )));
        };
        let partition = router::partition_for_key(key, description.partitions());
        let key = key.to_owned();
        self.pin(partition, Some(&key))
    }
}

impl Broker {
    /// Adds sends to `address` (a queue or topic) to the transaction. `via` is the via entity
    /// the transport's link names (a send-via link's target, the via entity of a cross-entity
    /// session), `None` otherwise. Checked now (entity, status, size, session and partition-key
    /// rules); stored at commit.
    pub fn send_in_transaction(
        &self,
        txn: &Transaction,
        address: &EntityAddress,
        via: Option<&EntityPath>,
        messages: Vec<Message>,
    ) -> Result<()> {
        let now = self.clock().now();
        let mut state = txn.lock();
        state.begin(messages.len(), now)?;
        match self.add_sends(&mut state, address, via, messages) {
            Ok(()) => Ok(()),
            Err(e) => state.fail(e),
        }
    }

    fn add_sends(
        &self,
        state: &mut State,
        address: &EntityAddress,
        via: Option<&EntityPath>,
        messages: Vec<Message>,
    ) -> Result<()> {
        let (destination, _) = self.check_send(address, &messages)?;
        let via_entity = match via {
            Some(path) => self.entity(path)?,
            None => destination.clone(),
        };
        let through = via_entity.id != destination.id;
        if through {
            match via_entity.kind {
                EntityKind::Queue | EntityKind::Subscription => {}
                EntityKind::Topic | EntityKind::Rule => {
                    return Err(BrokerError::InvalidOperation(SPAN_ENTITIES.into()))
                }
            }
        }
        let v = state.via(via_entity)?;
        for message in &messages {
            v.pin_message(message)?;
        }
        for mut message in messages {
            if through {
                let mut forwarded = message.forwarded.take().map(|f| *f).unwrap_or_default();
                forwarded.destination = Some(destination.path.to_string());
                message.forwarded = Some(Box::new(forwarded));
                state.work.push(Work::Transfer(Arc::new(message)));
            } else {
                state.work.push(Work::Send(Arc::new(message)));
            }
        }
        Ok(())
    }

    /// Adds scheduled messages to the transaction: their sequence numbers are given now
    /// (reserved in the via partition) and they are stored at commit.
    pub async fn schedule_in_transaction(
        &self,
        txn: &Transaction,
        address: &EntityAddress,
        messages: Vec<Message>,
    ) -> Result<Vec<SequenceNumber>> {
        if messages.is_empty() {
            // Nothing to pin the transaction's partition on, and nothing to schedule.
            return Err(BrokerError::invalid(
                "messages",
                "a schedule-message request needs at least one message",
            ));
        }
        if messages.iter().any(|m| m.properties.scheduled_enqueue_time.is_none()) {
            return Err(BrokerError::invalid(
                "ScheduledEnqueueTime",
                "every scheduled message needs a scheduled enqueue time",
            ));
        }
        let now = self.clock().now();
        let handle = {
            let mut state = txn.lock();
            state.begin(messages.len(), now)?;
            let pinned = (|| {
                let (entity, _) = self.check_send(address, &messages)?;
                match entity.kind {
                    EntityKind::Topic => {
                        return Err(BrokerError::Unimplemented(
                            "scheduling on a topic in a transaction",
                        ))
                    }
                    EntityKind::Queue | EntityKind::Subscription | EntityKind::Rule => {}
                }
                let v = state.via(entity)?;
                for message in &messages {
                    v.pin_message(message)?;
                }
                let handle = v.partition.and_then(|p| v.entity.partition(p).cloned());
                handle
                    .ok_or_else(|| BrokerError::invalid("messages", "no partition to schedule on"))
            })();
            match pinned {
                Ok(handle) => handle,
                Err(e) => return state.fail(e),
            }
        };
        let count = messages.len();
        let seqs = match handle.ask(|reply| Command::Reserve { count, reply }).await {
            Ok(seqs) => seqs,
            Err(e) => return txn.lock().fail(e),
        };
        let mut state = txn.lock();
        if state.ended {
            // Rolled back meanwhile.
            handle.send(Command::Unreserve(seqs));
            return Err(BrokerError::TransactionTimedOut);
        }
        state.reserved.extend(seqs.iter().copied());
        for (seq, message) in seqs.iter().zip(messages) {
            state.work.push(Work::Schedule(*seq, Arc::new(message)));
        }
        Ok(seqs)
    }

    /// Adds the cancellation of scheduled messages to the transaction.
    pub fn cancel_in_transaction(
        &self,
        txn: &Transaction,
        address: &EntityAddress,
        sequence_numbers: &[SequenceNumber],
    ) -> Result<()> {
        let now = self.clock().now();
        let mut state = txn.lock();
        state.begin(sequence_numbers.len(), now)?;
        let added = (|| {
            let entity = self.entity(&address.entity)?;
            self.note_activity(&entity);
            let partitioned = entity.partitioned();
            let v = state.via(entity)?;
            for seq in sequence_numbers {
                v.pin(seq.partition(partitioned), None)?;
            }
            Ok(())
        })();
        match added {
            Ok(()) => {
                state.work.push(Work::Cancel(sequence_numbers.to_vec()));
                Ok(())
            }
            Err(e) => state.fail(e),
        }
    }

    /// Adds a settlement (complete, abandon, defer, dead-letter) to the transaction. The
    /// message stays locked by its receiver until the commit applies it; settling the same
    /// token again in the same transaction is a no-op (a retried request).
    pub fn settle_in_transaction(
        &self,
        txn: &Transaction,
        address: &EntityAddress,
        via: Option<&EntityPath>,
        token: LockToken,
        disposition: Disposition,
    ) -> Result<()> {
        let now = self.clock().now();
        let mut state = txn.lock();
        if state.settled.contains(&token) && !state.ended {
            return Ok(());
        }
        state.begin(1, now)?;
        let added = (|| {
            let entity = self.entity(&address.entity)?;
            self.note_activity(&entity);
            if let Some(via) = via {
                // A cross-entity transaction settles on its via entity only.
                if via.key() != entity.path.key() {
                    return Err(BrokerError::InvalidOperation(SPAN_ENTITIES.into()));
                }
            }
            let v = state.via(entity)?;
            v.pin(token.partition(), None)
        })();
        match added {
            Ok(()) => {
                state.settled.insert(token);
                state.work.push(Work::Settle { queue: address.queue, token, disposition });
                Ok(())
            }
            Err(e) => state.fail(e),
        }
    }

    /// Adds setting a session's state to the transaction.
    pub fn set_session_state_in_transaction(
        &self,
        txn: &Transaction,
        address: &EntityAddress,
        session: &str,
        session_state: Option<Bytes>,
    ) -> Result<()> {
        let now = self.clock().now();
        let mut state = txn.lock();
        state.begin(1, now)?;
        let added = (|| {
            let entity = self.entity(&address.entity)?;
            self.note_activity(&entity);
            let description = entity.description();
            let partition = if description.enable_partitioning {
                router::partition_for_key(session, description.partitions())
            } else {
                PartitionId(0)
            };
            let key = description.enable_partitioning.then_some(session);
            state.via(entity)?.pin(partition, key)
        })();
        match added {
            Ok(()) => {
                let session = SessionId::from(session);
                state.work.push(Work::SessionState { session, state: session_state });
                Ok(())
            }
            Err(e) => state.fail(e),
        }
    }

    /// Commits: everything the transaction did, in one write on its via partition, or nothing
    /// (then the error says why: timed out, doomed, a lock lost meanwhile, the store failed).
    pub async fn commit(&self, txn: &Transaction) -> Result<()> {
        let now = self.clock().now();
        let (via, work, reserved, doomed, expired) = {
            let mut state = txn.lock();
            if state.ended {
                return Err(BrokerError::TransactionTimedOut);
            }
            state.ended = true;
            let expired = state.started.is_some_and(|at| at.saturating_add(TIMEOUT) <= now);
            (
                state.via.take(),
                std::mem::take(&mut state.work),
                std::mem::take(&mut state.reserved),
                state.doomed.take(),
                expired,
            )
        };
        let refusal = if expired {
            Some(("timeout", BrokerError::TransactionTimedOut))
        } else {
            doomed.map(|why| ("failed", BrokerError::TransactionRolledBack(why)))
        };
        if let Some((outcome, error)) = refusal {
            release(via.as_ref(), reserved);
            metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => outcome).increment(1);
            return Err(error);
        }
        let Some(via) = via.filter(|_| !work.is_empty()) else {
            metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => "commit").increment(1);
            return Ok(());
        };
        let partition = via.partition.unwrap_or(PartitionId(0));
        let handle = via.entity.partition(partition).cloned().expect("pinned within the entity");
        // The messages count against the via entity's size until they are stored.
        let incoming: u64 = work
            .iter()
            .map(|w| match w {
                Work::Send(m) | Work::Transfer(m) | Work::Schedule(_, m) => m.size() as u64,
                _ => 0,
            })
            .sum();
        let reservation = match Reservation::take(&via.entity, incoming) {
            Ok(reservation) => reservation,
            Err(full) => {
                release(Some(&via), reserved);
                metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => "failed").increment(1);
                return Err(full);
            }
        };
        let transfers = work.iter().any(|w| matches!(w, Work::Transfer(_)));
        let outcome = handle.ask(|reply| Command::Commit { work, reply }).await;
        drop(reservation);
        match &outcome {
            Ok(()) => {
                metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => "commit").increment(1);
                if transfers {
                    // A subscription's send-via transfers wait in its topic's partitions.
                    let holder = match via.entity.kind {
                        EntityKind::Subscription => {
                            via.entity.path.parent().and_then(|topic| self.entity(&topic).ok())
                        }
                        EntityKind::Queue | EntityKind::Topic | EntityKind::Rule => {
                            Some(via.entity.clone())
                        }
                    };
                    if let Some(holder) = holder {
                        self.ensure_send_via_forwarder(&holder);
                    }
                }
            }
            Err(_) => {
                release(Some(&via), reserved);
                metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => "failed").increment(1);
            }
        }
        outcome
    }

    /// Rolls back: the transaction's work is discarded.
    pub async fn rollback(&self, txn: &Transaction) {
        let now = self.clock().now();
        let (via, reserved, expired) = {
            let mut state = txn.lock();
            if state.ended {
                return;
            }
            state.ended = true;
            state.work.clear();
            let expired = state.started.is_some_and(|at| at.saturating_add(TIMEOUT) <= now);
            (state.via.take(), std::mem::take(&mut state.reserved), expired)
        };
        release(via.as_ref(), reserved);
        let outcome = if expired { "timeout" } else { "rollback" };
        metrics::counter!(m::TRANSACTIONS_TOTAL, "outcome" => outcome).increment(1);
    }

    /// A send outside any transaction on a send-via link: to `destination` through `via`'s
    /// send-via transfer queue (one write in the via partition; the forwarder delivers it).
    pub async fn send_via(
        &self,
        via: &EntityPath,
        destination: &EntityAddress,
        messages: Vec<Message>,
    ) -> Result<()> {
        let txn = Transaction::new();
        self.send_in_transaction(&txn, destination, Some(via), messages)?;
        self.commit(&txn).await
    }
}

/// Gives the via partition back the sequence numbers a transaction reserved.
fn release(via: Option<&Via>, reserved: Vec<SequenceNumber>) {
    if reserved.is_empty() {
        return;
    }
    let Some(via) = via else { return };
    let partition = via.partition.unwrap_or(PartitionId(0));
    if let Some(handle) = via.entity.partition(partition) {
        handle.send(Command::Unreserve(reserved));
    }
}
