//! [`PartitionState`]: the rules of one partition, decided without I/O.
//!
//! The state applies what time made due ([`PartitionState::process_due`]), commands
//! ([`PartitionState::apply`]) and deliveries ([`PartitionState::deliver_available`]) at a
//! `now` it is given, and accumulates what follows in its [`Effects`]: the records to write
//! (through the [`Journal`]), deliveries, answers and replies. The actor writes, delivers and
//! replies. Nothing here reads a clock, sleeps or touches the store, which is what lets the
//! model test in `partition/tests.rs` drive it step by step.
//!
//! This file holds the state itself, its rebuild from the store and the dispatch of commands
//! to the rules, which are `impl PartitionState` blocks in one file per concern:
//!
//! - `state/sending.rs` — storing new messages: duplicate detection, sequence numbers, the
//!   entry a message (or a topic's copy) starts with; cancelling scheduled messages.
//! - `state/due.rs` — what time makes due: lock and session-lock expiries, scheduled
//!   messages, message expiry, the end of duplicate-detection windows.
//! - `state/delivery.rs` — receivers, handing messages to them in turn, deferred receives and
//!   peeks.
//! - `state/settlement.rs` — message locks and how they end: settle, abandon, renewal, and
//!   putting an unlocked message back where it belongs.
//! - `state/dead_letter.rs` — moving a message to the dead-letter (or transfer) queue.
//! - `state/removal.rs` — taking messages out, and when their bodies are deleted;
//!   `state/purge.rs` — batch delete (`com.microsoft:batch-delete-messages`).
//! - `state/forwarding.rs` — auto-forwarding: the transfer queue and the transfer ledger.
//! - `partition/sessions.rs` — the session rules, beside the session table they act on.
//!
//! A rule only the state's own files call is `pub(super)`; one the rest of the partition (the
//! actor, `sessions.rs`, `topic.rs`, `transaction.rs`) calls is `pub(crate)`.

mod dead_letter;
mod delivery;
mod due;
mod forwarding;
mod purge;
mod removal;
mod sending;
mod settlement;

use std::sync::Arc;

use super::bodies::BodyCache;
use super::effects::Effects;
use super::index::{Entry, Index};
use super::journal::{Journal, Recovered};
use super::locks::LockTable;
use super::sessions::SessionId;
pub(crate) use super::sessions::NOT_SESSIONFUL;
use super::sub_queues::SubQueues;
use super::tally::Totals;
use super::transfer::TransferLedger;
use super::{Command, PartitionCounts};
use crate::dedup::DedupWindow;
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result};
use crate::message::MessageState;
use crate::metrics as m;
use crate::receiver::ReceiverShared;
use crate::store::StoreError;
use crate::types::{PartitionId, SequenceNumber, SubQueue, Timestamp};

/// The partition's in-memory state: an index of what its store holds, locks, the
/// duplicate-detection window and the receivers attached, plus the effects of the cycle under
/// way.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub(crate) partition: PartitionId,
    pub(crate) partitioned: bool,
    pub(crate) description: Arc<QueueDescription>,
    pub(crate) cache: Arc<BodyCache>,
    pub(crate) index: Index,
    pub(crate) locks: LockTable,
    pub(crate) dedup: DedupWindow,
    pub(crate) last_counter: u64,
    /// Whether `last_counter` changed this cycle (the partition record is written once).
    counter_dirty: bool,
    /// Body bytes this partition holds counted in the [`BodyCache`].
    pub(crate) cached_bytes: u64,
    /// Bodies below this sequence number have been range-deleted since the partition was
    /// (re)built; above it, up to the lowest message, bodies may be left for the next sweep.
    swept_to: SequenceNumber,
    /// Bodies of settled messages above the lowest message, left for the sweep (at most
    /// `DEFERRED_BODIES`, see `state/removal.rs`).
    deferred_bodies: Vec<SequenceNumber>,
    pub(crate) receivers: SubQueues<Vec<Arc<ReceiverShared>>>,
    next_receiver: SubQueues<usize>,
    /// Receivers holding a session of this partition, each fed only from its session.
    pub(super) session_receivers: Vec<(SessionId, Arc<ReceiverShared>)>,
    /// Whether bodies belong to the partition rather than to this state: a topic partition's
    /// lanes (the topic's scheduled messages, each subscription's copies) share one body per
    /// publish, so a removal reports the body in `fx.released` instead of deleting it, and the
    /// body sweep is the actor's.
    pub(crate) shared_bodies: bool,
    /// The kind of entity whose lane this is, as the metrics label it.
    pub(crate) entity_kind: &'static str,
    /// A subscription's path: its lane also counts its own messages, by this `entity` label.
    pub(crate) metric_entity: Option<Arc<str>>,
    /// Transfers this partition stored whose sources have not confirmed them (see
    /// `transfer.rs`).
    pub(crate) transfers: TransferLedger,
    /// Sequence numbers reserved for the scheduled messages of open transactions: used at
    /// their commit, given up at their rollback (see `transaction.rs`); memory only.
    pub(crate) reserved: std::collections::BTreeSet<SequenceNumber>,
    /// The transfer-queue depth last added to the metrics gauge.
    published_transfers: std::sync::atomic::AtomicU64,
    /// Whether messages may still wait where forwarding rules that changed (or a rebuild)
    /// no longer want them: `process_due` goes on moving them (see `state/forwarding.rs`).
    pub(crate) forwarding_pending: bool,
    /// Messages of a session whose lock expired that are still to count their failed
    /// delivery: what a store's write limits left over from the cycle the lock expired in
    /// (`process_due` goes on with them). Always empty without limits.
    pub(crate) lapsed: Vec<SequenceNumber>,
    /// Messages in and out since this state was built, counted once their cycle's write
    /// succeeded (see [`PartitionCounts::incoming_total`]).
    pub(crate) totals: Totals,
    /// What the cycle under way decided; the actor carries it out.
    pub(crate) fx: Effects,
}

impl PartitionState {
    pub(crate) fn new(
        journal: Journal,
        partition: PartitionId,
        description: Arc<QueueDescription>,
        cache: Arc<BodyCache>,
    ) -> Self {
        PartitionState {
            partition,
            partitioned: description.enable_partitioning,
            index: Index::new(description.requires_session),
            description,
            cache,
            locks: LockTable::default(),
            dedup: DedupWindow::default(),
            last_counter: 0,
            counter_dirty: false,
            cached_bytes: 0,
            swept_to: SequenceNumber::default(),
            deferred_bodies: Vec::new(),
            receivers: SubQueues::default(),
            next_receiver: SubQueues::default(),
            session_receivers: Vec::new(),
            shared_bodies: false,
            entity_kind: "queue",
            metric_entity: None,
            transfers: TransferLedger::default(),
            reserved: Default::default(),
            published_transfers: std::sync::atomic::AtomicU64::new(0),
            forwarding_pending: false,
            lapsed: Vec::new(),
            totals: Totals::default(),
            fx: Effects::new(journal),
        }
    }

    /// Forgets every message, lock and pending record (receivers stay), before the state is
    /// rebuilt from the store.
    pub(crate) fn reset(&mut self) {
        self.release_cache();
        self.index = Index::new(self.description.requires_session);
        // Session locks are memory only, like message locks: their holders lose them.
        let lost = self.session_receivers.len();
        if lost > 0 {
            metrics::gauge!(m::SESSIONS_LOCKED).decrement(lost as f64);
            metrics::counter!(m::SESSION_LOCK_LOSSES_TOTAL).increment(lost as u64);
        }
        for (_, receiver) in self.session_receivers.drain(..) {
            receiver.lose();
        }
        self.locks = LockTable::default();
        self.dedup = DedupWindow::default();
        self.transfers = TransferLedger::default();
        self.reserved.clear();
        self.last_counter = 0;
        self.counter_dirty = false;
        self.swept_to = SequenceNumber::default();
        // Left on disk: the first sweep after the rebuild deletes from the start.
        self.deferred_bodies.clear();
        self.forwarding_pending = false;
        // Recovered unlocked, without the delivery they were to count, as after any failure.
        self.lapsed.clear();
        self.fx.more = false;
        self.fx.journal.clear();
        self.fx.transient.clear();
        self.fx.released.clear();
    }

    /// Adds one record read back from the store (see `journal::recover`).
    pub(crate) fn restore(&mut self, record: Recovered) -> Result<(), StoreError> {
        match record {
            Recovered::Partition { counter, main_floor } => {
                self.last_counter = self.last_counter.max(counter);
                self.fx.journal.restore_floor(main_floor);
            }
            Recovered::Message(queue, seq, meta) => {
                self.last_counter = self.last_counter.max(seq.counter(self.partitioned));
                self.index.insert(queue, seq, Entry::from_meta(seq, meta));
            }
            Recovered::Dedup(key, until) => self.dedup.restore(key, until),
            Recovered::Transfer(id) => {
                self.transfers.insert(id);
            }
            Recovered::SessionState(id, at, state) => {
                if let Some(sessions) = self.index.sessions.as_deref_mut() {
                    self.index.size_bytes += state.len() as u64;
                    sessions.set_state(&SessionId::from(id), Some((at, state)));
                }
            }
        }
        Ok(())
    }

    /// Applies one command at `now`. False when the partition should stop.
    pub(crate) fn apply(&mut self, command: Command, now: Timestamp) -> bool {
        match command {
            Command::Send { messages, reply } => {
                let outcomes = self.enqueue(messages, now);
                self.fx.reply(reply, outcomes);
            }
            Command::Transfer { transfers, reply } => {
                let outcomes = self.accept_transfers(transfers, now);
                self.fx.reply(reply, Ok(outcomes));
            }
            Command::ForgetTransfers(ids) => self.forget_transfers(&ids),
            Command::Commit { work, reply } => {
                let outcome = self.commit(work, now);
                self.fx.reply(reply, outcome);
            }
            Command::Reserve { count, reply } => {
                let seqs = self.reserve(count);
                self.fx.reply(reply, Ok(seqs));
            }
            Command::Unreserve(seqs) => self.unreserve(&seqs),
            Command::Cancel { sequence_numbers, reply } => {
                self.cancel(&sequence_numbers);
                self.fx.reply(reply, Ok(()));
            }
            Command::Settle { queue, items, reply } => {
                let outcomes = items
                    .into_iter()
                    .map(|(token, disposition)| self.settle(queue, token, disposition, now))
                    .collect();
                self.fx.reply(reply, Ok(outcomes));
            }
            Command::RenewLock { queue, token, reply } => {
                let outcome = self.renew_lock(queue, token, now);
                self.fx.reply(reply, outcome);
            }
            Command::ReceiveDeferred { queue, sequence_numbers, mode, reply } => {
                let outcome = self.receive_deferred(queue, &sequence_numbers, mode, now);
                self.fx.lists.push((reply, outcome));
            }
            Command::Peek { queue, from, max, reply } => {
                let peeked = self.peek(queue, from, max);
                self.fx.lists.push((reply, Ok(peeked)));
            }
            Command::Counts { reply } => {
                self.fx.probe = true;
                let counts = self.counts();
                self.fx.reply(reply, Ok(counts));
            }
            Command::DeleteMessages { queue, max, before, session, reply } => {
                let deleted = self.delete_messages(queue, max, before, session.as_ref());
                self.fx.reply(reply, Ok(deleted));
            }
            Command::Update(description) => self.set_description(description, now),
            Command::Attach(receiver) => self.attach(receiver),
            Command::Detach(id) => {
                self.detach(id);
                self.release_session(id, now, false);
            }
            Command::Deliver => {}
            Command::Drain(ack) => self.fx.drains.push(ack),
            Command::Close | Command::Stop(_) => return false,
            // Lanes are the topic partition's business (see `topic.rs`); a queue has none.
            Command::AddLane(_)
            | Command::Configure(_)
            | Command::RemoveLane(_)
            | Command::Filtering(_) => {}
            Command::AcceptSession { session, receiver, reply } => {
                let outcome = self.accept_session(session, receiver, now);
                self.fx.reply(reply, outcome);
            }
            Command::RenewSession { holder, reply } => {
                let outcome = self.renew_session(holder, now);
                self.fx.reply(reply, outcome);
            }
            Command::SessionState { session, holder, set, reply } => {
                let outcome = self.session_state(&session, holder, set, now);
                self.fx.reply(reply, outcome);
            }
            Command::ListSessions { updated_after, after, max, reply } => {
                let outcome = match self.index.sessions.as_deref() {
                    Some(sessions) => Ok(sessions.list(updated_after, after.as_deref(), max)),
                    None => Err(BrokerError::InvalidOperation(NOT_SESSIONFUL.into())),
                };
                self.fx.reply(reply, outcome);
            }
            Command::PeekSession { session, from, max, reply } => {
                let peeked = self.peek_session(&session, from, max);
                self.fx.lists.push((reply, Ok(peeked)));
            }
            Command::ReceiveDeferredSession { holder, sequence_numbers, mode, reply } => {
                let outcome = self.receive_deferred_session(holder, &sequence_numbers, mode, now);
                self.fx.lists.push((reply, outcome));
            }
        }
        true
    }

    /// Ends the cycle's decisions: counts go to the metrics, the main queue's floor settles
    /// (see `journal.rs`), the partition record and the sweeps join the journal if they are due.
    pub(crate) fn end_cycle(&mut self) {
        self.fx.tally.record(self.entity_kind, self.metric_entity.as_deref());
        let floor_moved = self.fx.journal.close_floor(self.lowest_live_main());
        if std::mem::take(&mut self.counter_dirty) || floor_moved {
            self.fx.journal.put_counter(self.last_counter);
        }
        self.sweep_bodies();
    }

    /// When something next comes due on its own (a scheduled message, an expiry, a lock, the
    /// end of a duplicate-detection window).
    pub(crate) fn next_deadline(&self) -> Timestamp {
        [
            self.index.scheduled.first().map(|(t, _)| *t),
            self.index.expiring.first().map(|(t, _)| *t),
            self.locks.next_expiry(),
            self.dedup.next_expiry(),
            self.index.sessions.as_deref().and_then(|s| s.next_expiry()),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Timestamp::MAX)
    }

    pub(crate) fn counts(&self) -> PartitionCounts {
        let mut c = PartitionCounts {
            size_bytes: self.index.size_bytes,
            incoming_total: self.totals.incoming,
            outgoing_total: self.totals.outgoing,
            ..Default::default()
        };
        for entry in self.index.messages[SubQueue::Main].values() {
            match entry.state {
                MessageState::Active => c.active += 1,
                MessageState::Deferred => c.deferred += 1,
                MessageState::Scheduled => c.scheduled += 1,
            }
        }
        c.dead_lettered = self.index.messages[SubQueue::DeadLetter].len() as u64;
        c.transfer = (self.index.messages[SubQueue::Transfer].len()
            + self.index.messages[SubQueue::SendVia].len()) as u64;
        c.send_via = self.index.messages[SubQueue::SendVia].len() as u64;
        c.transfer_dead_lettered = self.index.messages[SubQueue::TransferDeadLetter].len() as u64;
        c
    }
}
