//! Receivers and delivery: the receivers attached to each sub-queue, handing available
//! messages to them in turn while they have credit, and the requests that hand messages out
//! on demand (deferred receives) or only show them (peeks).
//!
//! Invariants kept here: a delivery is made only against a unit of credit reserved first;
//! receivers of a sub-queue take turns (round robin); a peek-lock hand-out locks the
//! message (a session's message until its session lock ends), a receive-and-delete hand-out
//! removes it; a sequence number asked for twice in one deferred receive is handed out once.

use std::sync::Arc;

use super::PartitionState;
use crate::error::{BrokerError, Result};
use crate::message::{MessageLock, MessageState};
use crate::metrics as m;
use crate::partition::bodies::Outgoing;
use crate::receiver::ReceiverShared;
use crate::types::{LockToken, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

impl PartitionState {
    pub(crate) fn attach(&mut self, receiver: Arc<ReceiverShared>) {
        self.receivers[receiver.queue].push(receiver);
    }

    pub(crate) fn detach(&mut self, id: u64) {
        for list in self.receivers.values_mut() {
            list.retain(|r| r.id != id);
        }
    }

    /// The partition moves to another owner: receivers stay open (their routes register them
    /// there), but a session's holder has lost its session lock.
    pub(crate) fn leave_receivers(&mut self) {
        for list in self.receivers.values_mut() {
            list.clear();
        }
        if !self.session_receivers.is_empty() {
            metrics::gauge!(m::SESSIONS_LOCKED).decrement(self.session_receivers.len() as f64);
        }
        for (_, r) in self.session_receivers.drain(..) {
            r.lose();
        }
    }

    pub(crate) fn close_receivers(&mut self) {
        for list in self.receivers.values_mut() {
            for r in list.drain(..) {
                r.close();
            }
        }
        if !self.session_receivers.is_empty() {
            metrics::gauge!(m::SESSIONS_LOCKED).decrement(self.session_receivers.len() as f64);
        }
        for (_, r) in self.session_receivers.drain(..) {
            r.close();
        }
    }

    /// Hands available messages to receivers with credit, in turn, until one runs out — or
    /// until the journal reaches `fx.stop_at` (a store's write limits: a receive-and-delete
    /// hand-out writes), leaving the rest to the next cycle, which runs at once.
    pub(crate) fn deliver_available(&mut self, now: Timestamp) {
        for list in self.receivers.values_mut() {
            list.retain(|r| !r.is_closed());
        }
        for queue in SubQueue::ALL {
            while let Some(&seq) = self.index.available[queue].first() {
                if self.fx.full() {
                    self.fx.more = true;
                    return;
                }
                let Some(receiver) = self.reserve_receiver(queue) else { break };
                let outgoing = self.hand_out(queue, seq, receiver.mode, now);
                self.fx.deliveries.push((receiver, outgoing));
            }
        }
        if !self.session_receivers.is_empty() {
            self.deliver_sessions(now);
        }
    }

    /// Whether a sub-queue (or a held session) has both an available message and a receiver
    /// with credit.
    pub(crate) fn can_deliver(&self) -> bool {
        self.index.available.iter().any(|(queue, available)| {
            !available.is_empty() && self.receivers[queue].iter().any(|r| r.has_credit())
        }) || self.session_receivers.iter().any(|(id, r)| {
            r.has_credit()
                && self.index.sessions.as_deref().is_some_and(|s| s.first_available(id).is_some())
        })
    }

    /// The next receiver in turn that has credit, with one unit reserved.
    fn reserve_receiver(&mut self, queue: SubQueue) -> Option<Arc<ReceiverShared>> {
        let receivers = &self.receivers[queue];
        let n = receivers.len();
        for i in 0..n {
            let index = (self.next_receiver[queue] + i) % n;
            if receivers[index].try_reserve() {
                self.next_receiver[queue] = (index + 1) % n;
                return Some(receivers[index].clone());
            }
        }
        None
    }

    /// Locks (peek-lock) or removes (receive-and-delete) a message being handed to a receiver.
    pub(crate) fn hand_out(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
        mode: ReceiveMode,
        now: Timestamp,
    ) -> Outgoing {
        self.index.take_available(queue, seq);
        self.fx.tally.outgoing += 1;
        let partition = self.partition;
        match mode {
            ReceiveMode::PeekLock => {
                let token = LockToken::generate(partition);
                // A session message's lock ends with its session's (it has no expiry of its own).
                let session_until = self.lock_for_session(queue, seq);
                let lock = MessageLock {
                    token,
                    locked_until: match session_until {
                        Some(_) => Timestamp::MAX,
                        None => now.saturating_add(self.description.lock_duration),
                    },
                };
                self.locks.insert(queue, seq, lock);
                let entry = self.index.entry_mut(queue, seq).expect("handed-out message exists");
                entry.aux_mut().lock = Some(lock);
                let shown =
                    MessageLock { token, locked_until: session_until.unwrap_or(lock.locked_until) };
                Outgoing::of(entry, seq, partition, Some(shown))
            }
            ReceiveMode::ReceiveAndDelete => {
                let entry = self.index.entry(queue, seq).expect("handed-out message exists");
                let outgoing = Outgoing::of(entry, seq, partition, None);
                self.remove(queue, seq);
                outgoing
            }
        }
    }

    pub(super) fn receive_deferred(
        &mut self,
        queue: SubQueue,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
        now: Timestamp,
    ) -> Result<Vec<Outgoing>> {
        if queue == SubQueue::Main && self.index.sessions.is_some() {
            return Err(BrokerError::InvalidOperation(
                "deferred messages of a session-enabled entity are received through their session"
                    .into(),
            ));
        }
        // A number asked for twice is handed out once: a second hand-out would lock the
        // message twice, or (receive-and-delete) find it gone.
        let sequence_numbers = SequenceNumber::distinct(sequence_numbers);
        for &seq in &sequence_numbers {
            match self.index.entry(queue, seq) {
                Some(e) if e.state == MessageState::Deferred && e.lock().is_none() => {}
                _ => return Err(BrokerError::MessageNotFound(seq)),
            }
        }
        Ok(sequence_numbers.into_iter().map(|seq| self.hand_out(queue, seq, mode, now)).collect())
    }

    pub(super) fn peek(&self, queue: SubQueue, from: SequenceNumber, max: usize) -> Vec<Outgoing> {
        self.index.messages[queue]
            .range(from..)
            .take(max)
            .map(|(&seq, e)| Outgoing::of(e, seq, self.partition, None))
            .collect()
    }
}
