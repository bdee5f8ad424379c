//! Receivers: a consumer's credit and its buffer of delivered messages.
//!
//! A receiver registers with every partition of its entity. Partitions deliver to it only
//! against credit: a partition first reserves one unit of credit (`ReceiverShared::try_reserve`),
//! then locks (or, in receive-and-delete mode, deletes) a message, and finally hands it over
//! (`ReceiverShared::deliver`) once its store write is durable. So no message is locked for a
//! receiver that did not ask for it, and a client cannot tell how many partitions served it.
//!
//! Dropping a receiver detaches it and releases the messages it buffered but never handed out
//! (without counting a delivery: the client never saw them); a session receiver's drop also
//! releases its session. A session's receiver is registered with its session's partition only.
//!
//! **Architecture Invariant:** credit, reservations and the buffer change under one mutex, so
//! `drain` sees every message that consumed credit.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};

use crate::broker::EntityHandle;
use crate::message::{Disposition, ReceivedMessage};
use crate::partition::{Command, PartitionHandle};
use crate::types::{PartitionId, ReceiveMode, SubQueue};

#[derive(Debug, Default)]
struct ReceiverState {
    credit: u32,
    reserved: u32,
    buffer: VecDeque<ReceivedMessage>,
    closed: bool,
    /// A session receiver whose session lock expired (or was dropped by a rebuild).
    lost: bool,
    /// Also woken on every arrival (a transport's connection task).
    watcher: Option<Arc<Notify>>,
}

/// The part of a receiver that partitions see.
#[derive(Debug)]
pub(crate) struct ReceiverShared {
    pub(crate) id: u64,
    pub(crate) mode: ReceiveMode,
    pub(crate) queue: SubQueue,
    /// Fed only by the partitions that run on this node (a forwarder: every node forwards
    /// what its own partitions hold); a remote partition ignores it.
    pub(crate) local_only: bool,
    state: Mutex<ReceiverState>,
    /// Woken when a message lands in the buffer, or the receiver closes.
    arrived: Notify,
    /// Woken when a reservation ends (delivered or cancelled).
    settled: Notify,
    /// Woken when credit is added, or the receiver closes (a remote partition's pull waits).
    credited: Notify,
    /// Nudges the receiver's partitions when borrowed credit comes back (`give_back`).
    on_return: OnReturn,
}

/// What a receiver does when credit lent to a remote partition comes back unused.
#[derive(Default)]
struct OnReturn(Mutex<Option<Box<dyn Fn() + Send + Sync>>>);

impl fmt::Debug for OnReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnReturn")
    }
}

impl ReceiverShared {
    pub(crate) fn new(id: u64, mode: ReceiveMode, queue: SubQueue) -> Self {
        ReceiverShared {
            id,
            mode,
            queue,
            local_only: false,
            state: Mutex::new(ReceiverState::default()),
            arrived: Notify::new(),
            settled: Notify::new(),
            credited: Notify::new(),
            on_return: OnReturn::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ReceiverState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes one unit of credit for a delivery about to be made. False if there is none.
    pub(crate) fn try_reserve(&self) -> bool {
        let mut s = self.lock();
        if s.closed || s.credit == 0 {
            return false;
        }
        s.credit -= 1;
        s.reserved += 1;
        true
    }

    /// Hands a reserved delivery to the receiver.
    pub(crate) fn deliver(&self, message: ReceivedMessage) {
        let watcher = {
            let mut s = self.lock();
            s.reserved -= 1;
            s.buffer.push_back(message);
            s.watcher.clone()
        };
        if let Some(watcher) = watcher {
            watcher.notify_one();
        }
        self.arrived.notify_one();
        self.settled.notify_waiters();
    }

    /// Gives back a reservation whose delivery did not happen.
    pub(crate) fn cancel_reservation(&self) {
        {
            let mut s = self.lock();
            s.reserved -= 1;
            s.credit += 1;
        }
        self.settled.notify_waiters();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Reserves up to `max` units of credit at once (a pull from a partition on another node
    /// borrows them); 0 if there is none.
    pub(crate) fn reserve_up_to(&self, max: u32) -> u32 {
        let mut s = self.lock();
        if s.closed {
            return 0;
        }
        let n = s.credit.min(max);
        s.credit -= n;
        s.reserved += n;
        n
    }

    /// Gives back `n` reservations a remote partition borrowed and did not use: they are
    /// credit again, for any partition.
    pub(crate) fn give_back(&self, n: u32) {
        if n == 0 {
            return;
        }
        {
            let mut s = self.lock();
            s.reserved -= n;
            s.credit += n;
        }
        self.settled.notify_waiters();
        self.credited.notify_waiters();
        let on_return = self.on_return.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(nudge) = &*on_return {
            nudge();
        }
    }

    /// Waits until the receiver has credit, or is closed.
    pub(crate) async fn credit_or_close(&self) {
        loop {
            let credited = self.credited.notified();
            {
                let s = self.lock();
                if s.closed || s.credit > 0 {
                    return;
                }
            }
            credited.await;
        }
    }

    /// Lends the receiver `n` units of credit: a stand-in receiver on a partition's owner,
    /// serving a receiver on another node (see `remote.rs`).
    pub(crate) fn lend(&self, n: u32) {
        let mut s = self.lock();
        s.credit = s.credit.saturating_add(n);
    }

    /// Once the receiver is closed, takes what is left in its buffer (its owner's drop took
    /// what was there when it closed; this is what arrived after).
    pub(crate) fn take_unseen_if_closed(&self) -> Vec<ReceivedMessage> {
        let mut s = self.lock();
        if s.closed {
            s.buffer.drain(..).collect()
        } else {
            Vec::new()
        }
    }

    /// Takes back the credit left, waits for the deliveries under way, and takes the buffer.
    pub(crate) async fn reclaim(&self) -> Vec<ReceivedMessage> {
        self.lock().credit = 0;
        loop {
            let settled = self.settled.notified();
            {
                let mut s = self.lock();
                if s.reserved == 0 {
                    return s.buffer.drain(..).collect();
                }
            }
            settled.await;
        }
    }

    pub(crate) fn has_credit(&self) -> bool {
        let s = self.lock();
        !s.closed && s.credit > 0
    }

    /// Allows `n` more deliveries (a test's stand-in for [`Receiver::add_credit`]).
    #[cfg(test)]
    pub(crate) fn grant(&self, n: u32) {
        let mut s = self.lock();
        s.credit = s.credit.saturating_add(n);
    }

    /// Takes every message delivered so far.
    #[cfg(test)]
    pub(crate) fn take_buffered(&self) -> Vec<ReceivedMessage> {
        self.lock().buffer.drain(..).collect()
    }

    /// A session receiver's session lock is gone: it closes, and says so.
    pub(crate) fn lose(&self) {
        self.lock().lost = true;
        self.close();
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lock().lost
    }

    pub(crate) fn close(&self) {
        let watcher = {
            let mut s = self.lock();
            s.closed = true;
            s.watcher.clone()
        };
        if let Some(watcher) = watcher {
            watcher.notify_one();
        }
        self.arrived.notify_waiters();
        self.arrived.notify_one();
        self.credited.notify_waiters();
    }
}

/// A consumer of one entity (or its dead-letter queue), fed by every partition.
///
/// Give it credit with [`Receiver::add_credit`]; messages then arrive in its buffer and are taken
/// with [`Receiver::recv`]. Dropping the receiver detaches it; messages it held locks on stay
/// locked until they are settled or their locks expire.
pub struct Receiver {
    shared: Arc<ReceiverShared>,
    entity: Arc<EntityHandle>,
    /// A session receiver's partition: the only one that feeds it.
    only: Option<PartitionId>,
    /// Whether it is a client's, whose receives use its entity (AutoDeleteOnIdle); a
    /// forwarder's is not.
    client: bool,
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("entity", &self.entity.path)
            .field("queue", &self.shared.queue)
            .field("mode", &self.shared.mode)
            .finish()
    }
}

impl Receiver {
    pub(crate) fn attach(
        entity: Arc<EntityHandle>,
        id: u64,
        mode: ReceiveMode,
        queue: SubQueue,
    ) -> Self {
        Self::attach_with(entity, ReceiverShared::new(id, mode, queue), true)
    }

    /// A receiver fed only by the partitions that run on this node (see
    /// `ReceiverShared::local_only`): a forwarder's, whose receives are no use of the entity.
    pub(crate) fn attach_local(
        entity: Arc<EntityHandle>,
        id: u64,
        mode: ReceiveMode,
        queue: SubQueue,
    ) -> Self {
        let shared = ReceiverShared { local_only: true, ..ReceiverShared::new(id, mode, queue) };
        Self::attach_with(entity, shared, false)
    }

    fn attach_with(entity: Arc<EntityHandle>, shared: ReceiverShared, client: bool) -> Self {
        let queue = shared.queue;
        let shared = Arc::new(shared);
        let weak = Arc::downgrade(&entity);
        let nudge = move || {
            for partition in weak.upgrade().iter().flat_map(|e| e.partitions.iter()) {
                if partition.shared.has_deliverable(queue) {
                    partition.nudge();
                }
            }
        };
        *shared.on_return.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(nudge));
        for partition in &entity.partitions {
            partition.send(Command::Attach(shared.clone()));
        }
        if client {
            entity.activity.receiver_opened();
        }
        Receiver { shared, entity, only: None, client }
    }

    /// A receiver fed by one partition only, which has registered `shared` already (a
    /// session's holder, see `Command::AcceptSession`).
    pub(crate) fn bound(
        entity: Arc<EntityHandle>,
        shared: Arc<ReceiverShared>,
        partition: PartitionId,
    ) -> Self {
        entity.activity.receiver_opened();
        Receiver { shared, entity, only: Some(partition), client: true }
    }

    /// The partitions that feed this receiver.
    fn partitions(&self) -> &[PartitionHandle] {
        let all = &self.entity.partitions[..];
        match self.only {
            Some(p) => all.get(usize::from(p.0)..=usize::from(p.0)).unwrap_or_default(),
            None => all,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<ReceiverShared> {
        &self.shared
    }

    pub fn mode(&self) -> ReceiveMode {
        self.shared.mode
    }

    /// Credit not yet used.
    pub fn credit(&self) -> u32 {
        self.shared.lock().credit
    }

    /// Messages delivered and not yet taken with [`Receiver::recv`].
    pub fn buffered(&self) -> usize {
        self.shared.lock().buffer.len()
    }

    /// Allows `n` more deliveries.
    pub fn add_credit(&self, n: u32) {
        if n == 0 {
            return;
        }
        {
            let mut s = self.shared.lock();
            s.credit = s.credit.saturating_add(n);
        }
        self.credit_added();
    }

    /// Sets how many messages the receiver may hold in all: the buffer, the deliveries under
    /// way and the credit left. This is AMQP's link credit as a client states it in a flow; a
    /// lower value takes back unused credit (deliveries already under way still arrive).
    pub fn set_outstanding(&self, n: u32) {
        let increased = {
            let mut s = self.shared.lock();
            let target = n.saturating_sub(s.reserved + s.buffer.len() as u32);
            let increased = target > s.credit;
            s.credit = target;
            increased
        };
        if increased {
            self.credit_added();
        }
    }

    /// Credit left, deliveries under way and buffered messages, together.
    pub fn outstanding(&self) -> u32 {
        let s = self.shared.lock();
        s.credit + s.reserved + s.buffer.len() as u32
    }

    /// Also wakes `watcher` whenever a message arrives in the buffer or the receiver closes, so
    /// one task can serve many receivers with [`Receiver::try_recv`].
    pub fn watch_with(&self, watcher: Arc<Notify>) {
        self.shared.lock().watcher = Some(watcher);
    }

    /// Whether the receiver was closed by the broker (its entity deleted, shutdown).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    fn credit_added(&self) {
        self.shared.credited.notify_waiters();
        // Pairs with the fence in the partition after it publishes a deliverable message:
        // either the partition sees this credit, or this sees its message and nudges it.
        fence(Ordering::SeqCst);
        let queue = self.shared.queue;
        for partition in self.partitions() {
            if partition.shared.has_deliverable(queue) {
                partition.nudge();
            }
        }
    }

    /// The next delivered message, waiting until one arrives. `None` once the receiver is
    /// closed (its entity was deleted) and its buffer is empty.
    pub async fn recv(&self) -> Option<ReceivedMessage> {
        loop {
            let notified = self.shared.arrived.notified();
            {
                let mut s = self.shared.lock();
                if let Some(m) = s.buffer.pop_front() {
                    drop(s);
                    self.used();
                    return Some(m);
                }
                if s.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The next delivered message, if one is buffered.
    pub fn try_recv(&self) -> Option<ReceivedMessage> {
        let received = self.shared.lock().buffer.pop_front();
        if received.is_some() {
            self.used();
        }
        received
    }

    /// A client's receive uses the entity (AutoDeleteOnIdle).
    fn used(&self) {
        if self.client {
            self.entity.activity.touch();
        }
    }

    /// Delivers what every partition has, up to the credit, then sets the credit to zero.
    /// Returns the credit given up. Every message that used credit is in the buffer when this
    /// returns (AMQP's drain).
    pub async fn drain(&self) -> u32 {
        let mut acks = Vec::with_capacity(self.partitions().len());
        for partition in self.partitions() {
            let (tx, rx) = oneshot::channel();
            partition.send(Command::Drain(tx));
            acks.push(rx);
        }
        for ack in acks {
            let _ = ack.await;
        }
        // Credit lent to a remote partition may come back while this waits: take it too.
        let mut discarded = 0;
        loop {
            let settled = self.shared.settled.notified();
            {
                let mut s = self.shared.lock();
                discarded += std::mem::take(&mut s.credit);
                if s.reserved == 0 {
                    return discarded;
                }
            }
            settled.await;
        }
    }
}

impl Drop for Receiver {
    /// Detaches from every partition. Messages delivered to the buffer but never taken are
    /// released (unlocked without counting a delivery): the client never saw them.
    fn drop(&mut self) {
        self.shared.close();
        if self.client {
            self.entity.activity.receiver_closed();
        }
        let unseen = std::mem::take(&mut self.shared.lock().buffer);
        for message in unseen {
            let Some(lock) = message.lock else { continue };
            if let Some(partition) =
                self.entity.partitions.get(usize::from(lock.token.partition().0))
            {
                let (reply, _) = oneshot::channel();
                partition.send(Command::Settle {
                    queue: self.shared.queue,
                    items: vec![(lock.token, Disposition::Release)],
                    reply,
                });
            }
        }
        // A session receiver's detach also releases its session (without counting a
        // delivery for the messages it had locked).
        for partition in self.partitions() {
            partition.send(Command::Detach(self.shared.id));
        }
    }
}
