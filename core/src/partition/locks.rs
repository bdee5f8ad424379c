//! [`LockTable`]: the peek-locks a partition holds, by token and by expiry.
//!
//! Locks live in memory only: a rebuild or a restart releases them (the messages are delivered
//! again). The lock itself is also kept in its message's index entry, which delivery reads.

use std::collections::BTreeSet;

use foldhash::HashMap;

use crate::error::{BrokerError, Result};
use crate::message::MessageLock;
use crate::types::{LockToken, SequenceNumber, SubQueue, Timestamp};

#[derive(Debug, Default)]
pub(crate) struct LockTable {
    by_token: HashMap<LockToken, (SubQueue, SequenceNumber)>,
    by_expiry: BTreeSet<(Timestamp, LockToken)>,
}

impl LockTable {
    pub(crate) fn insert(&mut self, queue: SubQueue, seq: SequenceNumber, lock: MessageLock) {
        self.by_token.insert(lock.token, (queue, seq));
        self.by_expiry.insert((lock.locked_until, lock.token));
    }

    /// The message `token` locks in `queue`, or [`BrokerError::MessageLockLost`].
    pub(crate) fn locked(&self, queue: SubQueue, token: LockToken) -> Result<SequenceNumber> {
        match self.by_token.get(&token) {
            Some(&(q, seq)) if q == queue => Ok(seq),
            _ => Err(BrokerError::MessageLockLost),
        }
    }

    pub(crate) fn remove(&mut self, lock: MessageLock) {
        self.by_token.remove(&lock.token);
        self.by_expiry.remove(&(lock.locked_until, lock.token));
    }

    /// Moves a lock's expiry from `old` to `until`.
    pub(crate) fn renew(&mut self, token: LockToken, old: Timestamp, until: Timestamp) {
        self.by_expiry.remove(&(old, token));
        self.by_expiry.insert((until, token));
    }

    /// Takes out the next lock that has expired at `now`: `Some(None)` if its message was
    /// released already (nothing to do), `None` when no lock is due.
    pub(crate) fn pop_expired(
        &mut self,
        now: Timestamp,
    ) -> Option<Option<(SubQueue, SequenceNumber)>> {
        let &(until, token) = self.by_expiry.first()?;
        if until > now {
            return None;
        }
        self.by_expiry.pop_first();
        Some(self.by_token.remove(&token))
    }

    /// When the next lock expires.
    pub(crate) fn next_expiry(&self) -> Option<Timestamp> {
        self.by_expiry.first().map(|(t, _)| *t)
    }
}
