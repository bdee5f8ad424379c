//! Message sessions, as the broker offers them: accepting a session (a named one, or the next
//! available with a wait measured on the [`Clock`](crate::Clock)), the [`SessionReceiver`] that
//! holds it, session state and the listing of sessions.
//!
//! The rules (one holder per session, the session lock and its expiry, delivery in order) are
//! the partition's (`partition/sessions.rs`); this file decides *where*: a session lives in
//! the partition its SessionId routes to ([`router::partition_for_key`]), and accepting the
//! next session looks at every partition of the entity.
//!
//! Accepting the next session takes, in one partition, the unlocked session whose first
//! available message is oldest, and the partitions take turns — deliberately not the oldest
//! over all partitions: Service Bus documents no order across partitions, taking turns costs
//! one partition per accept instead of asking all of them, and it spreads concurrent accepts
//! over the partitions' actors. Without a ready session it waits for the partitions'
//! notifications until a time-out measured on the clock, then fails with
//! [`SessionError::Timeout`]. [`Broker::list_sessions`] merges every partition's sessions in
//! id order. A send without SessionId to a session entity, a plain receiver on a session
//! entity and a session receiver on a plain one are refused with Service Bus's wording.
//!
//! **Architecture Invariant:** an accept that is given up (its future dropped) leaves nothing
//! locked: its receiver is closed and detached from the partition, which releases whatever it
//! was granted, in the partition's command order.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{receiving, Broker, EntityHandle};
use crate::address::EntityAddress;
use crate::error::{BrokerError, Result, SessionError};
use crate::message::ReceivedMessage;
use crate::partition::{Command, PartitionHandle, SessionGrant, SessionId};
use crate::receiver::{Receiver, ReceiverShared};
use crate::router;
use crate::types::{PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// Service Bus's refusal of a send without SessionId to a session-enabled queue.
pub(crate) const SESSION_ID_NOT_SET: &str = "The SessionId was not set on a message, and it \
    cannot be sent to the entity. Entities that have session support enabled can only receive \
    messages that have the SessionId set to a valid value.";
/// Service Bus's refusal of a plain receiver on a session-enabled entity.
pub(crate) const SESSION_REQUIRED: &str = "It is not possible for an entity that requires \
    sessions to create a non-sessionful message receiver.";

/// A receiver holding one session of a queue or subscription: it is delivered that session's
/// messages only, in sequence order, from the one partition the session lives in.
///
/// Use it as a [`Receiver`] (credit, `recv`, `drain`); settle its messages with
/// [`Broker::settle`] and their lock tokens. Their locks end with the session lock
/// ([`SessionReceiver::locked_until`]), which [`SessionReceiver::renew_lock`] extends. When
/// the session lock expires the receiver closes, [`SessionReceiver::is_lock_lost`] turns true
/// and every message it had locked counts a delivery; dropping the receiver releases the
/// session without counting one.
pub struct SessionReceiver {
    receiver: Receiver,
    entity: Arc<EntityHandle>,
    session: SessionId,
    partition: PartitionHandle,
    locked_until: Mutex<Timestamp>,
}

impl std::fmt::Debug for SessionReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionReceiver")
            .field("session", &self.session)
            .field("partition", &self.partition.id)
            .field("receiver", &self.receiver)
            .finish()
    }
}

impl Deref for SessionReceiver {
    type Target = Receiver;

    fn deref(&self) -> &Receiver {
        &self.receiver
    }
}

impl SessionReceiver {
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// The partition the session lives in.
    pub fn partition(&self) -> PartitionId {
        self.partition.id
    }

    /// When the session lock expires, as of the accept or the last renewal.
    pub fn locked_until(&self) -> Timestamp {
        *self.locked_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session lock expired (or was lost to a partition rebuild): the receiver is
    /// closed and its operations fail with [`SessionError::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        self.receiver.shared().is_lost()
    }

    fn holder(&self) -> u64 {
        self.receiver.shared().id
    }

    /// Extends the session lock by the entity's lock duration from now; returns the new
    /// expiry. The messages the receiver holds keep their locks as long.
    pub async fn renew_lock(&self) -> Result<Timestamp, SessionError> {
        let holder = self.holder();
        let until = ask(&self.partition, |reply| Command::RenewSession { holder, reply }).await?;
        *self.locked_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
        Ok(until)
    }

    /// The session's state; `None` if it has none.
    pub async fn state(&self) -> Result<Option<Bytes>, SessionError> {
        let (session, holder) = (self.session.clone(), Some(self.holder()));
        ask(&self.partition, |reply| Command::SessionState { session, holder, set: None, reply })
            .await
    }

    /// Sets the session's state (at most the entity's maximum message size, else
    /// [`BrokerError::MessageSizeExceeded`]; within the entity's size quota, else
    /// [`BrokerError::QuotaExceeded`]); `None` clears it. Durable once this returns.
    pub async fn set_state(&self, state: Option<Bytes>) -> Result<(), SessionError> {
        check_quota(&self.entity, state.as_ref())?;
        let (session, holder) = (self.session.clone(), Some(self.holder()));
        let set = Some(state);
        ask(&self.partition, |reply| Command::SessionState { session, holder, set, reply })
            .await
            .map(drop)
    }

    /// Up to `max` of the session's messages from sequence number `from` on, without locking
    /// them (any state: active, deferred, scheduled, locked).
    pub async fn peek(&self, from: SequenceNumber, max: usize) -> Result<Vec<ReceivedMessage>> {
        peek_session(&self.partition, self.session.clone(), from, max).await
    }

    /// Receives deferred messages of the session by sequence number, in the order asked; with
    /// peek-lock they are locked under the session lock. A number that is not a deferred
    /// message of this session fails with [`BrokerError::MessageNotFound`].
    pub async fn receive_deferred(
        &self,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
    ) -> Result<Vec<ReceivedMessage>, SessionError> {
        receiving::check_sequence_numbers(sequence_numbers)?;
        let holder = self.holder();
        // A number named twice is received once, where it was first named.
        let sequence_numbers = SequenceNumber::distinct(sequence_numbers);
        let order = sequence_numbers.clone();
        let (tx, rx) = oneshot::channel();
        self.partition.send(Command::ReceiveDeferredSession {
            holder,
            sequence_numbers,
            mode,
            reply: tx,
        });
        match rx.await.unwrap_or(Err(BrokerError::ShuttingDown)) {
            Ok(mut received) => {
                receiving::sort_as_asked(&mut received, &order);
                Ok(received)
            }
            Err(BrokerError::MessageLockLost) => Err(SessionError::LockLost),
            Err(e) => Err(e.into()),
        }
    }
}

/// Refuses a session state the entity has no room for (as a send of its size would be).
fn check_quota(entity: &EntityHandle, state: Option<&Bytes>) -> Result<()> {
    let Some(state) = state else { return Ok(()) };
    let used: u64 = entity.partitions.iter().map(|p| p.shared.size_bytes()).sum();
    let limit = entity.description().max_size_bytes();
    if used + state.len() as u64 > limit {
        return Err(BrokerError::QuotaExceeded(format!(
            "{} is full: {used} of {limit} bytes used",
            entity.path
        )));
    }
    Ok(())
}

/// Sends a session command and waits for its answer.
async fn ask<T>(
    partition: &PartitionHandle,
    make: impl FnOnce(oneshot::Sender<Result<T, SessionError>>) -> Command,
) -> Result<T, SessionError> {
    let (tx, rx) = oneshot::channel();
    partition.send(make(tx));
    rx.await.unwrap_or(Err(SessionError::Broker(BrokerError::ShuttingDown)))
}

async fn peek_session(
    partition: &PartitionHandle,
    session: SessionId,
    from: SequenceNumber,
    max: usize,
) -> Result<Vec<ReceivedMessage>> {
    let (tx, rx) = oneshot::channel();
    partition.send(Command::PeekSession { session, from, max, reply: tx });
    rx.await.unwrap_or(Err(BrokerError::ShuttingDown))
}

/// An accept under way: if it is given up before its answer, the receiver it offered is
/// closed and detached, so the partition grants it nothing or releases what it granted.
struct PendingAccept<'a> {
    partition: &'a PartitionHandle,
    shared: Arc<ReceiverShared>,
    answered: bool,
}

impl Drop for PendingAccept<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.close();
            self.partition.send(Command::Detach(self.shared.id));
        }
    }
}

impl Broker {
    /// The queue or subscription `address` names, if it requires sessions; a session receiver
    /// anywhere else is refused as Service Bus refuses it.
    fn session_entity(&self, address: &EntityAddress) -> Result<Arc<EntityHandle>> {
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        if address.queue != SubQueue::Main || !entity.description().requires_session {
            return Err(BrokerError::InvalidOperation(crate::partition::NOT_SESSIONFUL.into()));
        }
        self.note_activity(&entity);
        Ok(entity)
    }

    /// The partition a session lives in: where its SessionId routes.
    pub(super) fn session_partition<'a>(
        entity: &'a EntityHandle,
        session: &str,
    ) -> &'a PartitionHandle {
        let description = entity.description();
        let partition = if description.enable_partitioning {
            router::partition_for_key(session, description.partitions())
        } else {
            PartitionId(0)
        };
        entity.partition(partition).expect("router stays within the entity")
    }

    /// Offers a new receiver to one partition for a session (`None`: its oldest ready one).
    async fn try_accept(
        &self,
        entity: &Arc<EntityHandle>,
        partition: &PartitionHandle,
        session: Option<SessionId>,
        mode: ReceiveMode,
    ) -> Result<Option<SessionReceiver>, SessionError> {
        let id = self.inner.next_receiver_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(ReceiverShared::new(id, mode, SubQueue::Main));
        let mut pending = PendingAccept { partition, shared: shared.clone(), answered: false };
        let (tx, rx) = oneshot::channel();
        partition.send(Command::AcceptSession { session, receiver: shared.clone(), reply: tx });
        let answer = rx.await.unwrap_or(Err(SessionError::Broker(BrokerError::ShuttingDown)));
        pending.answered = true;
        let Some(SessionGrant { session, locked_until }) = answer? else { return Ok(None) };
        Ok(Some(SessionReceiver {
            receiver: Receiver::bound(entity.clone(), shared, partition.id),
            entity: entity.clone(),
            session,
            partition: partition.clone(),
            locked_until: Mutex::new(locked_until),
        }))
    }

    /// Accepts (locks) the session `session_id` of a session-enabled queue or subscription,
    /// whether or not it has messages. Fails with [`SessionError::CannotBeLocked`] while
    /// another receiver holds it.
    pub async fn accept_session(
        &self,
        address: impl Into<EntityAddress>,
        session_id: &str,
        mode: ReceiveMode,
    ) -> Result<SessionReceiver, SessionError> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        // An empty id is a session like any other: Service Bus takes it on send and on accept.
        let partition = Self::session_partition(&entity, session_id);
        let granted =
            self.try_accept(&entity, partition, Some(SessionId::from(session_id)), mode).await?;
        // A named accept is answered with a grant or an error, never with nothing.
        granted.ok_or(SessionError::Broker(BrokerError::ShuttingDown))
    }

    /// Accepts the next available session: an unlocked one with a receivable message (per
    /// partition the one whose first such message is oldest; partitions take turns). If there
    /// is none, waits until one becomes available or `timeout` has passed on the broker's
    /// clock, then fails with [`SessionError::Timeout`]. Dropping the future leaves nothing
    /// locked.
    pub async fn accept_next_session(
        &self,
        address: impl Into<EntityAddress>,
        mode: ReceiveMode,
        timeout: Duration,
    ) -> Result<SessionReceiver, SessionError> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        let clock = self.inner.clock.clone();
        let deadline = clock.now().saturating_add(timeout);
        let count = entity.partitions.len() as u16;
        loop {
            // Listen before looking, so that a session made ready meanwhile wakes us.
            let mut waits: Vec<_> = entity
                .partitions
                .iter()
                .map(|p| Box::pin(p.shared.session_ready.notified()))
                .collect();
            for wait in &mut waits {
                wait.as_mut().enable();
            }
            for p in entity.round_robin.order(count) {
                let partition = entity.partition(p).expect("order stays within the entity");
                if partition.shared.ready_sessions() == 0 {
                    continue;
                }
                match self.try_accept(&entity, partition, None, mode).await {
                    Ok(Some(receiver)) => return Ok(receiver),
                    Ok(None) => {}
                    // An unavailable partition: the others may have a session.
                    Err(SessionError::Broker(e)) if e.is_retriable() => {}
                    Err(e) => return Err(e),
                }
            }
            if clock.now() >= deadline {
                return Err(SessionError::Timeout(timeout));
            }
            let any_ready = std::future::poll_fn(|cx| {
                if waits.iter_mut().any(|w| w.as_mut().poll(cx).is_ready()) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            let sleep: Pin<Box<dyn Future<Output = ()> + Send>> = clock.sleep_until(deadline);
            tokio::select! {
                () = any_ready => {}
                () = sleep => {}
            }
        }
    }

    /// A session's state, whoever holds the session (`None` if it has none). Transports that
    /// require the caller to hold the lock use [`SessionReceiver::state`].
    pub async fn session_state(
        &self,
        address: impl Into<EntityAddress>,
        session_id: &str,
    ) -> Result<Option<Bytes>, SessionError> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        let partition = Self::session_partition(&entity, session_id);
        let session = SessionId::from(session_id);
        ask(partition, |reply| Command::SessionState { session, holder: None, set: None, reply })
            .await
    }

    /// Sets (or, with `None`, clears) a session's state, whoever holds the session.
    pub async fn set_session_state(
        &self,
        address: impl Into<EntityAddress>,
        session_id: &str,
        state: Option<Bytes>,
    ) -> Result<(), SessionError> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        check_quota(&entity, state.as_ref())?;
        let partition = Self::session_partition(&entity, session_id);
        let (session, set) = (SessionId::from(session_id), Some(state));
        ask(partition, |reply| Command::SessionState { session, holder: None, set, reply })
            .await
            .map(drop)
    }

    /// Up to `max` messages of one session from sequence number `from` on, without locking
    /// them.
    pub async fn peek_session(
        &self,
        address: impl Into<EntityAddress>,
        session_id: &str,
        from: SequenceNumber,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        let partition = Self::session_partition(&entity, session_id);
        peek_session(partition, SessionId::from(session_id), from, max).await
    }

    /// The sessions of a session-enabled queue or subscription, ordered by id (ordinal) over
    /// all its partitions: with `updated_after` None, those that have a message or a state;
    /// otherwise those whose state was set after that time. `after` (the last id of the
    /// previous page) starts the list after that id; then `skip` ids are skipped and at most
    /// `top` returned.
    pub async fn list_sessions(
        &self,
        address: impl Into<EntityAddress>,
        updated_after: Option<Timestamp>,
        after: Option<&str>,
        skip: usize,
        top: usize,
    ) -> Result<Vec<String>> {
        let address = address.into();
        let entity = self.session_entity(&address)?;
        let max = skip.saturating_add(top);
        let after = after.map(str::to_owned);
        let answers = super::ask_all(&entity, |reply| Command::ListSessions {
            updated_after,
            after: after.clone(),
            max,
            reply,
        })
        .await;
        let mut ids = Vec::new();
        for answer in answers {
            ids.extend(answer?);
        }
        ids.sort_unstable();
        Ok(ids.into_iter().skip(skip).take(top).collect())
    }
}
