//! Sessions of a session-enabled entity: [`SessionIndex`], the session table of one partition
//! (or subscription lane) — its sessions' messages, locks and state, kept beside the
//! [`Index`](super::index::Index) — and the session rules of
//! [`PartitionState`] that act on it: accepting a session (a
//! named one, or the next ready one), renewing and releasing its lock, its state, delivering
//! its messages to its holder only, and peeking and receiving its deferred messages.
//!
//! A session exists while it has a message in the main queue, a state, or a lock holder (a
//! receiver that accepted it, even with no messages). Sessions that have an available message
//! and no holder are kept in `ready`, ordered by their first available sequence number, so
//! accepting the next session takes the oldest without looking at the others.
//!
//! **Architecture Invariant:** an entity without sessions has no `SessionIndex` (the index's
//! `sessions` is `None`) and its meta records no SessionId: sessions cost a plain entity
//! nothing. A session has one holder; its messages are delivered only to the holder, in
//! sequence order (an abandoned one is next again). A session message's lock in the lock table
//! never expires by itself; the session lock is its expiry (what a delivery reports as
//! locked-until), and the session lock's expiry releases (and counts a delivery for) every
//! message it had locked, while a release (the holder dropped) counts none. Session locks are
//! memory only, like message locks: a rebuild loses them and their holders see the lock lost.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use super::bodies::Outgoing;
use super::state::PartitionState;
use super::SessionGrant;
use crate::error::{BrokerError, Result, SessionError};
use crate::message::{ApplicationProperties, MessageState};
use crate::metrics as m;
use crate::receiver::ReceiverShared;
use crate::types::{ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// Service Bus's refusal of a session receiver on an entity without sessions.
pub(crate) const NOT_SESSIONFUL: &str = "A sessionful message receiver cannot be created on an \
    entity that does not require sessions. Ensure RequiresSession is set to true when creating a \
    Queue or Subscription to enable sessionful behavior.";

/// A session's id as the partition keeps it (shared by its messages' index entries).
pub(crate) type SessionId = Arc<str>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionLock {
    /// The receiver holding the session.
    pub(crate) holder: u64,
    pub(crate) until: Timestamp,
}

#[derive(Debug, Default)]
pub(crate) struct Session {
    /// Every message of the session in the main queue, whatever its state.
    messages: BTreeSet<SequenceNumber>,
    /// Its active, unlocked messages: what its holder is delivered next, in order.
    available: BTreeSet<SequenceNumber>,
    /// Its messages locked by the holder.
    locked: BTreeSet<SequenceNumber>,
    lock: Option<SessionLock>,
    state: Option<(Timestamp, Bytes)>,
}

impl Session {
    fn ready_key(&self) -> Option<SequenceNumber> {
        if self.lock.is_some() {
            None
        } else {
            self.available.first().copied()
        }
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.lock.is_none() && self.state.is_none()
    }
}

#[derive(Debug, Default)]
pub(crate) struct SessionIndex {
    /// Every session, by id: a hash lookup per message operation (no string comparisons down a
    /// tree of ids).
    sessions: HashMap<SessionId, Session>,
    /// The same ids in order, for listing; changes only when a session starts or ends.
    names: BTreeSet<SessionId>,
    /// Unlocked sessions with an available message, by their first available message.
    ready: BTreeSet<(SequenceNumber, SessionId)>,
    /// Session locks by expiry.
    expiring: BTreeSet<(Timestamp, SessionId)>,
    /// The session each holder (receiver id) has locked.
    holders: HashMap<u64, SessionId>,
}

impl SessionIndex {
    /// Changes one session (created if missing), keeping `ready` in step and dropping the
    /// session once nothing keeps it.
    fn update<R>(&mut self, id: &SessionId, f: impl FnOnce(&mut Session) -> R) -> R {
        if !self.sessions.contains_key(id) {
            self.sessions.insert(id.clone(), Session::default());
            self.names.insert(id.clone());
        }
        let session = self.sessions.get_mut(id).expect("inserted above");
        let before = session.ready_key();
        let result = f(session);
        let after = session.ready_key();
        let empty = session.is_empty();
        if before != after {
            if let Some(seq) = before {
                self.ready.remove(&(seq, id.clone()));
            }
            if let Some(seq) = after {
                self.ready.insert((seq, id.clone()));
            }
        }
        if empty {
            self.sessions.remove(id);
            self.names.remove(id);
        }
        result
    }

    pub(crate) fn add_message(&mut self, id: &SessionId, seq: SequenceNumber, available: bool) {
        self.update(id, |s| {
            s.messages.insert(seq);
            if available {
                s.available.insert(seq);
            }
        });
    }

    pub(crate) fn remove_message(&mut self, id: &SessionId, seq: SequenceNumber) {
        if !self.sessions.contains_key(id) {
            return;
        }
        self.update(id, |s| {
            s.messages.remove(&seq);
            s.available.remove(&seq);
            s.locked.remove(&seq);
        });
    }

    pub(crate) fn set_available(&mut self, id: &SessionId, seq: SequenceNumber, available: bool) {
        if !self.sessions.contains_key(id) {
            return;
        }
        self.update(id, |s| {
            if available {
                s.available.insert(seq);
            } else {
                s.available.remove(&seq);
            }
        });
    }

    pub(crate) fn set_locked(&mut self, id: &SessionId, seq: SequenceNumber, locked: bool) {
        if let Some(s) = self.sessions.get_mut(id) {
            if locked {
                s.locked.insert(seq);
            } else {
                s.locked.remove(&seq);
            }
        }
    }

    /// The oldest unlocked session with an available message.
    pub(crate) fn next_ready(&self) -> Option<SessionId> {
        self.ready.first().map(|(_, id)| id.clone())
    }

    /// How many sessions accept-next could lock now.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The session's lock, if it is held.
    pub(crate) fn lock_of(&self, id: &str) -> Option<SessionLock> {
        self.sessions.get(id).and_then(|s| s.lock)
    }

    /// The session `holder` holds.
    pub(crate) fn held_by(&self, holder: u64) -> Option<&SessionId> {
        self.holders.get(&holder)
    }

    /// Locks a session (created if it has nothing yet) for `holder` until `until`. The caller
    /// checked that it is not locked.
    pub(crate) fn lock(&mut self, id: &SessionId, holder: u64, until: Timestamp) {
        self.update(id, |s| s.lock = Some(SessionLock { holder, until }));
        self.expiring.insert((until, id.clone()));
        self.holders.insert(holder, id.clone());
    }

    /// Moves the lock `holder` has on `id` to `until`; false if it does not hold it.
    pub(crate) fn renew(&mut self, id: &str, holder: u64, until: Timestamp) -> bool {
        let Some((key, session)) = self.sessions.get_key_value(id) else { return false };
        let key = key.clone();
        let Some(lock) = session.lock.filter(|l| l.holder == holder) else { return false };
        self.expiring.remove(&(lock.until, key.clone()));
        self.expiring.insert((until, key.clone()));
        if let Some(s) = self.sessions.get_mut(id) {
            s.lock = Some(SessionLock { holder, until });
        }
        true
    }

    /// Takes away the lock `holder` holds: the session and the messages it had locked (which
    /// the caller unlocks).
    pub(crate) fn unlock_holder(
        &mut self,
        holder: u64,
    ) -> Option<(SessionId, Vec<SequenceNumber>)> {
        let id = self.holders.remove(&holder)?;
        let lock = self.sessions.get(&id).and_then(|s| s.lock)?;
        self.expiring.remove(&(lock.until, id.clone()));
        let locked = self.update(&id, |s| {
            s.lock = None;
            std::mem::take(&mut s.locked).into_iter().collect()
        });
        Some((id, locked))
    }

    /// Takes out the next session lock that has expired at `now` and names its holder (the
    /// caller releases it with [`SessionIndex::unlock_holder`]): `Some(None)` for a stale
    /// entry; `None` when no lock is due.
    pub(crate) fn pop_expired(&mut self, now: Timestamp) -> Option<Option<u64>> {
        let (until, id) = self.expiring.first()?.clone();
        if until > now {
            return None;
        }
        self.expiring.pop_first();
        match self.sessions.get(&id).and_then(|s| s.lock) {
            Some(lock) if lock.until == until => Some(Some(lock.holder)),
            _ => Some(None),
        }
    }

    pub(crate) fn next_expiry(&self) -> Option<Timestamp> {
        self.expiring.first().map(|(t, _)| *t)
    }

    /// The session's first available message.
    pub(crate) fn first_available(&self, id: &str) -> Option<SequenceNumber> {
        self.sessions.get(id).and_then(|s| s.available.first().copied())
    }

    /// The session's available messages, in order.
    pub(crate) fn available_of(&self, id: &str) -> impl Iterator<Item = SequenceNumber> + '_ {
        self.sessions.get(id).into_iter().flat_map(|s| s.available.iter().copied())
    }

    /// The session's messages in the main queue from `from` on, in order.
    pub(crate) fn messages_from(
        &self,
        id: &str,
        from: SequenceNumber,
    ) -> impl Iterator<Item = SequenceNumber> + '_ {
        self.sessions.get(id).into_iter().flat_map(move |s| s.messages.range(from..).copied())
    }

    /// Whether `seq` is a message of the session.
    pub(crate) fn contains(&self, id: &str, seq: SequenceNumber) -> bool {
        self.sessions.get(id).is_some_and(|s| s.messages.contains(&seq))
    }

    pub(crate) fn state(&self, id: &str) -> Option<Bytes> {
        self.sessions.get(id).and_then(|s| s.state.as_ref()).map(|(_, b)| b.clone())
    }

    /// Sets (or clears) a session's state; returns the size of the state it replaced.
    pub(crate) fn set_state(&mut self, id: &SessionId, state: Option<(Timestamp, Bytes)>) -> u64 {
        if state.is_none() && !self.sessions.contains_key(id) {
            return 0;
        }
        self.update(id, |s| {
            let old = std::mem::replace(&mut s.state, state);
            old.map_or(0, |(_, b)| b.len() as u64)
        })
    }

    /// Up to `max` session ids after `after`, in id order: those with a message or a state
    /// (`updated_after` None), or those whose state was set after `updated_after`.
    pub(crate) fn list(
        &self,
        updated_after: Option<Timestamp>,
        after: Option<&str>,
        max: usize,
    ) -> Vec<String> {
        use std::ops::Bound;
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        self.names
            .range::<str, _>((start, Bound::Unbounded))
            .filter(|id| {
                let Some(s) = self.sessions.get(*id) else { return false };
                match updated_after {
                    None => !s.messages.is_empty() || s.state.is_some(),
                    Some(t) => s.state.as_ref().is_some_and(|(at, _)| *at > t),
                }
            })
            .take(max)
            .map(|id| id.to_string())
            .collect()
    }
}

// ---- the session rules of a partition ----

impl PartitionState {
    /// Hands each session holder its session's available messages, in order, while it has
    /// credit.
    pub(super) fn deliver_sessions(&mut self, now: Timestamp) {
        for i in 0..self.session_receivers.len() {
            let (id, receiver) = self.session_receivers[i].clone();
            while let Some(seq) =
                self.index.sessions.as_deref().and_then(|s| s.first_available(&id))
            {
                if self.fx.full() {
                    self.fx.more = true;
                    return;
                }
                if !receiver.try_reserve() {
                    break;
                }
                let outgoing = self.hand_out(SubQueue::Main, seq, receiver.mode, now);
                self.fx.deliveries.push((receiver.clone(), outgoing));
            }
        }
    }

    /// If `seq` belongs to a held session: records it as locked by the session and returns
    /// the session lock's expiry.
    pub(super) fn lock_for_session(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
    ) -> Option<Timestamp> {
        if queue != SubQueue::Main {
            return None;
        }
        let sessions = self.index.sessions.as_deref_mut()?;
        let id = self.index.messages[queue].get(&seq)?.session()?;
        let lock = sessions.lock_of(id)?;
        sessions.set_locked(id, seq, true);
        Some(lock.until)
    }

    pub(super) fn accept_session(
        &mut self,
        session: Option<SessionId>,
        receiver: Arc<ReceiverShared>,
        now: Timestamp,
    ) -> Result<Option<SessionGrant>, SessionError> {
        let until = now.saturating_add(self.description.lock_duration);
        let Some(sessions) = self.index.sessions.as_deref_mut() else {
            return Err(BrokerError::InvalidOperation(NOT_SESSIONFUL.into()).into());
        };
        // A waiter that gave up before its turn came gets nothing.
        if receiver.is_closed() {
            return Ok(None);
        }
        let session = match session {
            Some(id) if sessions.lock_of(&id).is_some() => {
                return Err(SessionError::CannotBeLocked { session: id.to_string() })
            }
            Some(id) => id,
            None => match sessions.next_ready() {
                Some(id) => id,
                None => return Ok(None),
            },
        };
        sessions.lock(&session, receiver.id, until);
        self.session_receivers.push((session.clone(), receiver));
        metrics::counter!(m::SESSIONS_ACCEPTED_TOTAL).increment(1);
        metrics::gauge!(m::SESSIONS_LOCKED).increment(1.0);
        Ok(Some(SessionGrant { session, locked_until: until }))
    }

    /// Ends the lock `holder` has on a session: on expiry its locked messages count a delivery
    /// and the holder loses the session; on release (the holder closed) they are just
    /// unlocked.
    pub(super) fn release_session(&mut self, holder: u64, now: Timestamp, expired: bool) {
        if self.index.sessions.is_none() {
            return;
        }
        let held = self.session_receivers.len();
        self.session_receivers.retain(|(_, r)| {
            if r.id != holder {
                return true;
            }
            if expired {
                r.lose();
            }
            false
        });
        let ended = held - self.session_receivers.len();
        if ended > 0 {
            metrics::gauge!(m::SESSIONS_LOCKED).decrement(ended as f64);
            if expired {
                metrics::counter!(m::SESSION_LOCK_LOSSES_TOTAL).increment(ended as u64);
            }
        }
        let Some((_, locked)) =
            self.index.sessions.as_deref_mut().and_then(|s| s.unlock_holder(holder))
        else {
            return;
        };
        for seq in locked {
            self.unlock(SubQueue::Main, seq);
            if expired {
                metrics::counter!(m::LOCK_EXPIRATIONS_TOTAL).increment(1);
                if self.fx.full() {
                    // A store's write limits: counted in the next cycle (see `state/due.rs`).
                    self.lapsed.push(seq);
                    self.fx.more = true;
                } else {
                    let props = ApplicationProperties::new();
                    self.after_failed_delivery(SubQueue::Main, seq, props, now);
                }
            } else {
                self.make_available(SubQueue::Main, seq, now);
            }
        }
    }

    pub(super) fn renew_session(
        &mut self,
        holder: u64,
        now: Timestamp,
    ) -> Result<Timestamp, SessionError> {
        let until = now.saturating_add(self.description.lock_duration);
        let sessions = self.index.sessions.as_deref_mut().ok_or(SessionError::LockLost)?;
        let id = sessions.held_by(holder).cloned().ok_or(SessionError::LockLost)?;
        if sessions.renew(&id, holder, until) {
            Ok(until)
        } else {
            Err(SessionError::LockLost)
        }
    }

    /// Reads (`set` None) or sets a session's state. A state is at most the entity's maximum
    /// message size, counts in the entity's size, and `None` clears it.
    pub(crate) fn session_state(
        &mut self,
        session: &SessionId,
        holder: Option<u64>,
        set: Option<Option<Bytes>>,
        now: Timestamp,
    ) -> Result<Option<Bytes>, SessionError> {
        let max = self.description.max_message_size();
        let Some(sessions) = self.index.sessions.as_deref_mut() else {
            return Err(BrokerError::InvalidOperation(NOT_SESSIONFUL.into()).into());
        };
        if let Some(holder) = holder {
            if sessions.lock_of(session).is_none_or(|l| l.holder != holder) {
                return Err(SessionError::LockLost);
            }
        }
        let Some(state) = set else { return Ok(sessions.state(session)) };
        if let Some(bytes) = &state {
            if bytes.len() > max {
                return Err(BrokerError::MessageSizeExceeded { size: bytes.len(), max }.into());
            }
        }
        let new = state.as_ref().map_or(0, |b| b.len() as u64);
        let old = sessions.set_state(session, state.clone().map(|b| (now, b)));
        self.index.size_bytes = self.index.size_bytes - old + new;
        self.fx.journal.put_session_state(session, state.as_ref().map(|b| (now, &b[..])));
        Ok(None)
    }

    pub(super) fn peek_session(
        &self,
        session: &str,
        from: SequenceNumber,
        max: usize,
    ) -> Vec<Outgoing> {
        let Some(sessions) = self.index.sessions.as_deref() else { return Vec::new() };
        sessions
            .messages_from(session, from)
            .take(max)
            .filter_map(|seq| {
                let entry = self.index.entry(SubQueue::Main, seq)?;
                Some(Outgoing::of(entry, seq, self.partition, None))
            })
            .collect()
    }

    pub(super) fn receive_deferred_session(
        &mut self,
        holder: u64,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
        now: Timestamp,
    ) -> Result<Vec<Outgoing>> {
        let sessions = self.index.sessions.as_deref().ok_or(BrokerError::MessageLockLost)?;
        let id = sessions.held_by(holder).ok_or(BrokerError::MessageLockLost)?;
        // A number asked for twice is handed out once (see `state/delivery.rs`).
        let sequence_numbers = SequenceNumber::distinct(sequence_numbers);
        for &seq in &sequence_numbers {
            let deferred = sessions.contains(id, seq)
                && self
                    .index
                    .entry(SubQueue::Main, seq)
                    .is_some_and(|e| e.state == MessageState::Deferred && e.lock().is_none());
            if !deferred {
                return Err(BrokerError::MessageNotFound(seq));
            }
        }
        Ok(sequence_numbers
            .into_iter()
            .map(|seq| self.hand_out(SubQueue::Main, seq, mode, now))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SessionId {
        Arc::from(s)
    }

    #[test]
    fn next_ready_is_the_unlocked_session_with_the_oldest_available_message() {
        let mut x = SessionIndex::default();
        x.add_message(&id("b"), SequenceNumber(1), true);
        x.add_message(&id("a"), SequenceNumber(2), true);
        assert_eq!(x.next_ready().as_deref(), Some("b"));
        x.lock(&id("b"), 7, Timestamp::from_millis(10));
        assert_eq!(x.next_ready().as_deref(), Some("a"));
        assert_eq!(x.ready_len(), 1);
        assert_eq!(x.unlock_holder(7).map(|(s, _)| s.to_string()), Some("b".into()));
        assert_eq!(x.next_ready().as_deref(), Some("b"));
    }

    #[test]
    fn a_session_is_gone_when_nothing_keeps_it() {
        let mut x = SessionIndex::default();
        x.lock(&id("s"), 1, Timestamp::from_millis(10));
        assert!(x.lock_of("s").is_some());
        x.unlock_holder(1);
        assert!(x.sessions.is_empty() && x.names.is_empty());
        x.set_state(&id("s"), Some((Timestamp::from_millis(1), Bytes::from_static(b"x"))));
        assert_eq!(x.list(None, None, 10), vec!["s".to_string()]);
        x.set_state(&id("s"), None);
        assert!(x.sessions.is_empty() && x.names.is_empty());
    }
}
