//! [`PartitionState`]: the rules of one partition, decided without I/O.
//!
//! The state applies what time made due ([`PartitionState::process_due`]), commands
//! ([`PartitionState::apply`]) and deliveries ([`PartitionState::deliver_available`]) at a
//! `now` it is given, and accumulates what follows in its [`Effects`]: the records to write
//! (through the [`Journal`](super::journal::Journal)), deliveries, answers and replies. The
//! actor writes, delivers and replies. Nothing here reads a clock, sleeps or touches the store,
//! which is what lets the model test in `partition/tests.rs` drive it step by step.

use std::sync::Arc;

use bytes::Bytes;

use super::bodies::{BodyCache, Outgoing};
use super::effects::Effects;
use super::index::{Aux, Entry, Index, NEVER_EXPIRES};
use super::journal::{Journal, Recovered};
use super::locks::LockTable;
use super::sessions::SessionId;
use super::sub_queues::SubQueues;
use super::transfer::{TransferId, TransferLedger};
use super::{Command, PartitionCounts, SendOutcome, SessionGrant};
use crate::dedup::{DedupKey, DedupWindow};
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result, SessionError};
use crate::message::{
    dead_letter_reason, ApplicationProperties, Disposition, Message, MessageLock, MessageState,
    PropertyValue,
};
use crate::metrics as m;
use crate::receiver::ReceiverShared;
use crate::store::StoreError;
use crate::types::{LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// How many sequence numbers of bodies left below every message one range delete removes (see
/// [`PartitionState::remove`]). A point delete per body is one more memtable insert per
/// message; a range delete per 1,024 keeps RocksDB's range tombstones few. At most this many
/// bodies of settled messages per partition below its lowest message, and [`DEFERRED_BODIES`]
/// above it, wait on disk (after a crash: until the first sweep).
const BODY_SWEEP: i64 = 1024;
/// How many bodies of messages settled above the partition's lowest (out of order, as a
/// session's are) wait for the sweep that passes them instead of a point delete each; beyond
/// it they are deleted at once. Bounds what a partition whose lowest message stays (a session
/// nobody takes) leaves on disk, and the memory that remembers them.
const DEFERRED_BODIES: usize = 8 * 1024;

/// Service Bus's refusal of a session receiver on an entity without sessions.
pub(crate) const NOT_SESSIONFUL: &str = "A sessionful message receiver cannot be created on an \
    entity that does not require sessions. Ensure RequiresSession is set to true when creating a \
    Queue or Subscription to enable sessionful behavior.";
/// The dead-letter reason and description of a topic message without a SessionId in a
/// session-enabled subscription.
const SESSION_ID_NULL: (&str, &str) = (
    "Session id is null.",
    "Session enabled entity doesn't allow a message whose session identifier is null.",
);

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
    /// [`DEFERRED_BODIES`]).
    deferred_bodies: Vec<SequenceNumber>,
    pub(crate) receivers: SubQueues<Vec<Arc<ReceiverShared>>>,
    next_receiver: SubQueues<usize>,
    /// Receivers holding a session of this partition, each fed only from its session.
    session_receivers: Vec<(SessionId, Arc<ReceiverShared>)>,
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
        self.fx.journal.clear();
        self.fx.transient.clear();
        self.fx.released.clear();
    }

    /// Adds one record read back from the store (see `journal::recover`).
    pub(crate) fn restore(&mut self, record: Recovered) -> Result<(), StoreError> {
        match record {
            Recovered::Counter(counter) => self.last_counter = self.last_counter.max(counter),
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
            Command::Update(description) => self.set_description(description, now),
            Command::Attach(receiver) => self.attach(receiver),
            Command::Detach(id) => {
                self.detach(id);
                self.release_session(id, now, false);
            }
            Command::Deliver => {}
            Command::Drain(ack) => self.fx.drains.push(ack),
            Command::Close => return false,
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

    /// Ends the cycle's decisions: counts go to the metrics, the partition record and the
    /// body sweep join the journal if they are due.
    pub(crate) fn end_cycle(&mut self) {
        self.fx.tally.record(self.entity_kind, self.metric_entity.as_deref());
        if std::mem::take(&mut self.counter_dirty) {
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

    // ---- receivers ----

    pub(crate) fn attach(&mut self, receiver: Arc<ReceiverShared>) {
        self.receivers[receiver.queue].push(receiver);
    }

    pub(crate) fn detach(&mut self, id: u64) {
        for list in self.receivers.values_mut() {
            list.retain(|r| r.id != id);
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

    // ---- time ----

    pub(crate) fn process_due(&mut self, now: Timestamp) {
        while let Some(expired) =
            self.index.sessions.as_deref_mut().and_then(|s| s.pop_expired(now))
        {
            if let Some(holder) = expired {
                self.release_session(holder, now, true);
            }
        }
        while let Some(expired) = self.locks.pop_expired(now) {
            if let Some((queue, seq)) = expired {
                metrics::counter!(m::LOCK_EXPIRATIONS_TOTAL).increment(1);
                if let Some(entry) = self.index.entry_mut(queue, seq) {
                    entry.take_lock();
                }
                self.after_failed_delivery(queue, seq, ApplicationProperties::new(), now);
            }
        }
        while let Some(&(at, seq)) = self.index.scheduled.first() {
            if at > now {
                break;
            }
            self.index.scheduled.pop_first();
            if let Some(entry) = self.index.entry_mut(SubQueue::Main, seq) {
                entry.state = MessageState::Active;
                entry.enqueued_time = at;
                if self.forwards() {
                    // It becomes active in a forwarding entity: it is the forwarder's now.
                    self.relocate(SubQueue::Main, SubQueue::Transfer, seq, now);
                } else {
                    self.persist(SubQueue::Main, seq);
                    self.make_available(SubQueue::Main, seq, now);
                }
            }
        }
        while let Some(&(at, seq)) = self.index.expiring.first() {
            if at > now {
                break;
            }
            self.index.expiring.pop_first();
            let locked = self.index.entry(SubQueue::Main, seq).is_some_and(|e| e.lock().is_some());
            if !locked {
                self.expire(seq);
            }
            // A locked message is checked again when its lock ends.
        }
        for key in self.dedup.evict(now) {
            self.fx.journal.delete_dedup(&key);
        }
    }

    fn expire(&mut self, seq: SequenceNumber) {
        let Some(entry) = self.index.entry(SubQueue::Main, seq) else { return };
        if entry.state == MessageState::Scheduled {
            return;
        }
        if self.description.dead_lettering_on_message_expiration {
            self.move_to_dead_letter(
                seq,
                dead_letter_reason::TTL_EXPIRED,
                "The message expired and was dead lettered.".to_owned(),
                ApplicationProperties::new(),
            );
        } else {
            metrics::counter!(m::MESSAGES_EXPIRED_TOTAL).increment(1);
            self.remove(SubQueue::Main, seq);
        }
    }

    // ---- sending ----

    fn enqueue(&mut self, messages: Vec<Arc<Message>>, now: Timestamp) -> Result<Vec<SendOutcome>> {
        let mut outcomes = Vec::with_capacity(messages.len());
        for message in messages {
            if self.admit(&message, now) {
                outcomes.push(SendOutcome::Enqueued(self.store_new(message, now)));
            } else {
                outcomes.push(SendOutcome::Duplicate);
            }
        }
        // Messages already past their expiry (a TTL shorter than the clock's step) go now.
        self.process_due(now);
        Ok(outcomes)
    }

    /// Whether a duplicate-detection window lets the message in, recording it if so.
    pub(crate) fn admit(&mut self, message: &Message, now: Timestamp) -> bool {
        if self.is_duplicate(message, now) {
            metrics::counter!(m::DUPLICATES_DROPPED_TOTAL).increment(1);
            return false;
        }
        if self.description.requires_duplicate_detection {
            if let Some(key) = DedupKey::of(&message.properties, self.partitioned) {
                let window = self.description.duplicate_detection_history_time_window;
                let until = self.dedup.insert(key.clone(), now, window);
                self.fx.journal.put_dedup(&key, until);
            }
        }
        true
    }

    /// Whether the message is a duplicate within the window (nothing is recorded).
    pub(crate) fn is_duplicate(&self, message: &Message, now: Timestamp) -> bool {
        self.description.requires_duplicate_detection
            && DedupKey::of(&message.properties, self.partitioned)
                .is_some_and(|key| self.dedup.contains(&key, now))
    }

    /// The next sequence number of this partition.
    pub(crate) fn next_seq(&mut self) -> SequenceNumber {
        self.last_counter += 1;
        self.counter_dirty = true;
        SequenceNumber::new(self.partitioned, self.partition, self.last_counter)
    }

    /// Stores a new message (body and meta) under the next sequence number.
    pub(crate) fn store_new(&mut self, message: Arc<Message>, now: Timestamp) -> SequenceNumber {
        let seq = self.next_seq();
        self.store_at(seq, message, now);
        seq
    }

    /// Stores a new message (body and meta) under `seq`, a number this partition gave out.
    pub(crate) fn store_at(&mut self, seq: SequenceNumber, message: Arc<Message>, now: Timestamp) {
        let scheduled = message.properties.scheduled_enqueue_time.filter(|at| *at > now);
        self.fx.journal.put_body(seq, &message);
        let enqueued_time = scheduled.unwrap_or(now);
        self.insert_copy(SubQueue::Main, seq, message, enqueued_time, scheduled.is_some(), None);
    }

    /// Adds a message whose body is (or is being) stored under `seq` to a sub-queue: its entry
    /// and meta record, scheduled for `enqueued_time` or active from then; `aux` carries what
    /// the broker laid over it from the start (a dead-letter reason, a rule action's changes
    /// and the body they share). The TTL is the message's, capped by the entity's default.
    pub(crate) fn insert_copy(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
        message: Arc<Message>,
        enqueued_time: Timestamp,
        scheduled: bool,
        aux: Option<Aux>,
    ) {
        let (mut queue, mut aux) = (queue, aux);
        if queue == SubQueue::Main && self.index.sessions.is_some() {
            let properties = aux.as_ref().and_then(|a| a.system_properties.as_deref());
            match &properties.unwrap_or(&message.properties).session_id {
                Some(id) => {
                    aux.get_or_insert_with(Aux::default).session = Some(SessionId::from(&**id))
                }
                None => {
                    // Only a topic's copy gets here: a send to a session queue without a
                    // SessionId is refused by the broker.
                    metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => "session").increment(1);
                    let (reason, description) = SESSION_ID_NULL;
                    let dead = Aux::dead_lettered(reason.to_owned(), description.to_owned());
                    aux = Some(match aux {
                        Some(mut a) => {
                            a.modified_properties.extend(dead.modified_properties);
                            a.dead_letter_reason = dead.dead_letter_reason;
                            a.dead_letter_error_description = dead.dead_letter_error_description;
                            a
                        }
                        None => dead,
                    });
                    queue = SubQueue::DeadLetter;
                }
            }
        }
        // A forwarding entity's active messages (and dead letters, with
        // ForwardDeadLetteredMessagesTo) go to its transfer queue in this same write.
        if (queue == SubQueue::Main && !scheduled && self.forwards())
            || (queue == SubQueue::DeadLetter && self.forwards_dead_letters())
        {
            queue = SubQueue::Transfer;
        }
        let default_ttl = self.description.default_message_time_to_live;
        let ttl = message.properties.time_to_live.map_or(default_ttl, |t| t.min(default_ttl));
        let size = u32::try_from(message.size()).unwrap_or(u32::MAX);
        let counted = self.cache.try_take(u64::from(size));
        let entry = Entry {
            enqueued_time,
            expires_at: enqueued_time.saturating_add(ttl),
            delivery_count: 0,
            size,
            state: if scheduled { MessageState::Scheduled } else { MessageState::Active },
            counted,
            body: Some(message),
            aux: aux.map(Box::new),
        };
        if counted {
            self.cached_bytes += u64::from(size);
        } else {
            self.fx.transient.push((queue, seq));
        }
        self.fx.journal.put_meta(queue, seq, &entry.meta(seq));
        self.index.insert(queue, seq, entry);
        self.fx.tally.incoming += 1;
    }

    pub(crate) fn cancel(&mut self, sequence_numbers: &[SequenceNumber]) {
        for &seq in sequence_numbers {
            let Some(entry) = self.index.entry(SubQueue::Main, seq) else { continue };
            if entry.state == MessageState::Scheduled {
                self.remove(SubQueue::Main, seq);
            }
        }
    }

    // ---- locks and settlement ----

    fn unlock(&mut self, queue: SubQueue, seq: SequenceNumber) {
        let Some(entry) = self.index.messages[queue].get_mut(&seq) else { return };
        if let Some(lock) = entry.take_lock() {
            self.locks.remove(lock);
            if let (SubQueue::Main, Some(sessions), Some(id)) =
                (queue, self.index.sessions.as_deref_mut(), entry.session())
            {
                sessions.set_locked(id, seq, false);
            }
        }
    }

    pub(crate) fn settle(
        &mut self,
        queue: SubQueue,
        token: LockToken,
        disposition: Disposition,
        now: Timestamp,
    ) -> Result<()> {
        let seq = self.locks.locked(queue, token)?;
        if queue.is_dead_letter() && matches!(disposition, Disposition::DeadLetter { .. }) {
            return Err(BrokerError::InvalidOperation(
                "a message in the dead-letter queue cannot be dead-lettered again".into(),
            ));
        }
        self.fx.tally.settled(&disposition);
        self.unlock(queue, seq);
        match disposition {
            Disposition::Complete => {
                self.remove(queue, seq);
            }
            Disposition::Abandon { properties } => {
                self.after_failed_delivery(queue, seq, properties, now)
            }
            Disposition::Release => self.make_available(queue, seq, now),
            Disposition::Defer { properties } => {
                if let Some(entry) = self.index.entry_mut(queue, seq) {
                    entry.state = MessageState::Deferred;
                    entry.merge_properties(properties);
                }
                self.persist(queue, seq);
                self.make_available(queue, seq, now);
            }
            Disposition::DeadLetter { reason, description, properties } => self
                .move_to_dead_letter_from(
                    queue,
                    seq,
                    reason.as_deref().unwrap_or_default(),
                    description.unwrap_or_default(),
                    properties,
                ),
        }
        Ok(())
    }

    /// An abandon or a lock expiry: count the delivery, then dead-letter the message if it has
    /// used up its deliveries, else make it available again.
    fn after_failed_delivery(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
        properties: ApplicationProperties,
        now: Timestamp,
    ) {
        let max = self.description.max_delivery_count;
        let Some(entry) = self.index.entry_mut(queue, seq) else { return };
        entry.delivery_count += 1;
        entry.merge_properties(properties);
        let exhausted = entry.delivery_count >= max;
        if queue == SubQueue::Main && exhausted {
            self.move_to_dead_letter(
                seq,
                dead_letter_reason::MAX_DELIVERY_COUNT_EXCEEDED,
                format!("Message could not be consumed after {max} delivery attempts."),
                ApplicationProperties::new(),
            );
        } else {
            self.persist(queue, seq);
            self.make_available(queue, seq, now);
        }
    }

    fn renew_lock(
        &mut self,
        queue: SubQueue,
        token: LockToken,
        now: Timestamp,
    ) -> Result<Timestamp> {
        let seq = self.locks.locked(queue, token)?;
        let until = now.saturating_add(self.description.lock_duration);
        let entry = self.index.entry_mut(queue, seq).ok_or(BrokerError::MessageLockLost)?;
        if queue == SubQueue::Main && entry.session().is_some() {
            return Err(BrokerError::InvalidOperation(
                "a message of a session is locked by its session: renew the session lock".into(),
            ));
        }
        let lock =
            entry.aux.as_mut().and_then(|a| a.lock.as_mut()).ok_or(BrokerError::MessageLockLost)?;
        let old = std::mem::replace(&mut lock.locked_until, until);
        self.locks.renew(token, old, until);
        Ok(until)
    }

    fn receive_deferred(
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
        for &seq in sequence_numbers {
            match self.index.entry(queue, seq) {
                Some(e) if e.state == MessageState::Deferred && e.lock().is_none() => {}
                _ => return Err(BrokerError::MessageNotFound(seq)),
            }
        }
        let mut received = Vec::with_capacity(sequence_numbers.len());
        for (i, &seq) in sequence_numbers.iter().enumerate() {
            // A number asked for twice is handed out once: a second hand-out would lock the
            // message twice, or (receive-and-delete) find it gone.
            if !sequence_numbers[..i].contains(&seq) {
                received.push(self.hand_out(queue, seq, mode, now));
            }
        }
        Ok(received)
    }

    /// Locks (peek-lock) or removes (receive-and-delete) a message being handed to a receiver.
    fn hand_out(
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

    fn peek(&self, queue: SubQueue, from: SequenceNumber, max: usize) -> Vec<Outgoing> {
        self.index.messages[queue]
            .range(from..)
            .take(max)
            .map(|(&seq, e)| Outgoing::of(e, seq, self.partition, None))
            .collect()
    }

    pub(crate) fn counts(&self) -> PartitionCounts {
        let mut c = PartitionCounts { size_bytes: self.index.size_bytes, ..Default::default() };
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

    // ---- delivery ----

    /// Hands available messages to receivers with credit, in turn, until one runs out.
    pub(crate) fn deliver_available(&mut self, now: Timestamp) {
        for list in self.receivers.values_mut() {
            list.retain(|r| !r.is_closed());
        }
        for queue in SubQueue::ALL {
            while let Some(&seq) = self.index.available[queue].first() {
                let Some(receiver) = self.reserve_receiver(queue) else { break };
                let outgoing = self.hand_out(queue, seq, receiver.mode, now);
                self.fx.deliveries.push((receiver, outgoing));
            }
        }
        if !self.session_receivers.is_empty() {
            self.deliver_sessions(now);
        }
    }

    // ---- sessions ----

    /// Hands each session holder its session's available messages, in order, while it has
    /// credit.
    fn deliver_sessions(&mut self, now: Timestamp) {
        for i in 0..self.session_receivers.len() {
            let (id, receiver) = self.session_receivers[i].clone();
            while let Some(seq) =
                self.index.sessions.as_deref().and_then(|s| s.first_available(&id))
            {
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
    fn lock_for_session(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Timestamp> {
        if queue != SubQueue::Main {
            return None;
        }
        let sessions = self.index.sessions.as_deref_mut()?;
        let id = self.index.messages[queue].get(&seq)?.session()?;
        let lock = sessions.lock_of(id)?;
        sessions.set_locked(id, seq, true);
        Some(lock.until)
    }

    fn accept_session(
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
    fn release_session(&mut self, holder: u64, now: Timestamp, expired: bool) {
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
                self.after_failed_delivery(SubQueue::Main, seq, ApplicationProperties::new(), now);
            } else {
                self.make_available(SubQueue::Main, seq, now);
            }
        }
    }

    fn renew_session(&mut self, holder: u64, now: Timestamp) -> Result<Timestamp, SessionError> {
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

    fn peek_session(&self, session: &str, from: SequenceNumber, max: usize) -> Vec<Outgoing> {
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

    fn receive_deferred_session(
        &mut self,
        holder: u64,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
        now: Timestamp,
    ) -> Result<Vec<Outgoing>> {
        let sessions = self.index.sessions.as_deref().ok_or(BrokerError::MessageLockLost)?;
        let id = sessions.held_by(holder).ok_or(BrokerError::MessageLockLost)?;
        for &seq in sequence_numbers {
            let deferred = sessions.contains(id, seq)
                && self
                    .index
                    .entry(SubQueue::Main, seq)
                    .is_some_and(|e| e.state == MessageState::Deferred && e.lock().is_none());
            if !deferred {
                return Err(BrokerError::MessageNotFound(seq));
            }
        }
        let mut received = Vec::with_capacity(sequence_numbers.len());
        for (i, &seq) in sequence_numbers.iter().enumerate() {
            if !sequence_numbers[..i].contains(&seq) {
                received.push(self.hand_out(SubQueue::Main, seq, mode, now));
            }
        }
        Ok(received)
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

    // ---- state bookkeeping ----

    /// Takes a message out of a sub-queue's index and deletes its meta record; its body stays.
    pub(crate) fn take(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Entry> {
        self.unlock(queue, seq);
        let entry = self.index.remove(queue, seq)?;
        self.fx.journal.delete_meta(queue, seq);
        Some(entry)
    }

    /// Deletes a message: its meta record, its body, and its share of the body cache. A body
    /// below every message left is not deleted here but by the next sweep (`sweep_bodies`),
    /// with the others below it in one range delete; so is a body above one (settled out of
    /// order, as a session's messages are), up to [`DEFERRED_BODIES`] of them, beyond which it
    /// is deleted now.
    pub(crate) fn remove(&mut self, queue: SubQueue, seq: SequenceNumber) {
        let Some(mut entry) = self.take(queue, seq) else { return };
        self.uncache(&mut entry);
        if self.shared_bodies {
            self.fx.released.push(entry.body_seq(seq));
        } else if seq > self.lowest_live() {
            if self.deferred_bodies.len() < DEFERRED_BODIES {
                self.deferred_bodies.push(seq);
            } else {
                self.fx.journal.delete_body(seq);
            }
        }
    }

    /// The lowest sequence number any message of this partition has, or the next one to be
    /// given if it holds none: no body below it belongs to a message.
    fn lowest_live(&self) -> SequenceNumber {
        let lowest = self.index.lowest().unwrap_or_else(|| {
            SequenceNumber::new(self.partitioned, self.partition, self.last_counter + 1)
        });
        // A number reserved by an open transaction gets its body at the commit.
        self.reserved.first().map_or(lowest, |r| lowest.min(*r))
    }

    /// Deletes, with one range delete, the bodies left below every message (see `remove`) once
    /// they span [`BODY_SWEEP`] sequence numbers — in a cycle that writes anyway, so that a
    /// cycle that only reads stays without a write.
    fn sweep_bodies(&mut self) {
        if self.shared_bodies || self.fx.journal.is_empty() {
            return;
        }
        let lowest = self.lowest_live();
        if lowest.0.saturating_sub(self.swept_to.0) < BODY_SWEEP {
            return;
        }
        self.fx.journal.delete_bodies(self.swept_to, lowest);
        self.swept_to = lowest;
        self.deferred_bodies.retain(|seq| *seq >= lowest);
    }

    /// Writes the entry's current meta record.
    fn persist(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if let Some(entry) = self.index.entry(queue, seq) {
            self.fx.journal.put_meta(queue, seq, &entry.meta(seq));
        }
    }

    /// Puts an unlocked message back where it belongs: available if active, or expired now if
    /// its time has passed while it was locked.
    fn make_available(&mut self, queue: SubQueue, seq: SequenceNumber, now: Timestamp) {
        let Some(entry) = self.index.entry(queue, seq) else { return };
        if queue == SubQueue::Main && entry.expires_at <= now {
            self.expire(seq);
            return;
        }
        let (state, expires_at) = (entry.state, entry.expires_at);
        if queue == SubQueue::Main && expires_at < NEVER_EXPIRES {
            self.index.expiring.insert((expires_at, seq));
        }
        if state == MessageState::Active {
            self.index.put_available(queue, seq);
        }
    }

    fn move_to_dead_letter(
        &mut self,
        seq: SequenceNumber,
        reason: &str,
        description: String,
        properties: ApplicationProperties,
    ) {
        self.move_to_dead_letter_from(SubQueue::Main, seq, reason, description, properties);
    }

    /// Dead-letters a message of the main queue or (the forwarder's verdict) of the transfer
    /// queue. With ForwardDeadLetteredMessagesTo the dead letter goes to the transfer queue to
    /// be forwarded, unless it is a transfer that was already a dead letter (its destination
    /// is the broken one: it stays here) or it exceeded the hop limit.
    fn move_to_dead_letter_from(
        &mut self,
        from: SubQueue,
        seq: SequenceNumber,
        reason: &str,
        description: String,
        properties: ApplicationProperties,
    ) {
        let Some(mut entry) = self.take(from, seq) else { return };
        let was_dead_letter = entry.aux.as_ref().is_some_and(|a| a.dead_letter_reason.is_some());
        let to = if from == SubQueue::SendVia {
            // A send-via transfer its destination refused (Service Bus: the via entity's
            // transfer dead-letter queue).
            SubQueue::TransferDeadLetter
        } else if self.forwards_dead_letters()
            && !(from == SubQueue::Transfer && was_dead_letter)
            && reason != dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED
        {
            SubQueue::Transfer
        } else {
            SubQueue::DeadLetter
        };
        let label = match reason {
            dead_letter_reason::MAX_DELIVERY_COUNT_EXCEEDED
            | dead_letter_reason::TTL_EXPIRED
            | dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED
            | dead_letter_reason::FORWARD_DESTINATION_FULL
            | dead_letter_reason::FORWARD_DESTINATION_DISABLED
            | dead_letter_reason::FORWARD_DESTINATION_REFUSED => reason.to_owned(),
            _ => "client".to_owned(),
        };
        if let Some(entity) = &self.metric_entity {
            let entity = entity.to_string();
            metrics::counter!(m::SUBSCRIPTION_DEAD_LETTERED_TOTAL, "entity" => entity, "reason" => label.clone())
                .increment(1);
        }
        metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => label).increment(1);
        let mut props = properties;
        props.insert("DeadLetterReason".into(), PropertyValue::String(reason.to_owned()));
        props.insert(
            "DeadLetterErrorDescription".into(),
            PropertyValue::String(description.clone()),
        );
        // A dead-lettered message counts its added properties too, and leaves the body cache
        // (it is rarely read soon).
        let added =
            props.iter().map(|(k, v)| k.len() + crate::message::value_size(v)).sum::<usize>();
        self.uncache(&mut entry);
        entry.body = None;
        entry.size = entry.size.saturating_add(u32::try_from(added).unwrap_or(u32::MAX));
        entry.merge_properties(props);
        let aux = entry.aux_mut();
        aux.dead_letter_reason = Some(reason.to_owned());
        aux.dead_letter_error_description = Some(description);
        entry.state = MessageState::Active;
        self.fx.journal.put_meta(to, seq, &entry.meta(seq));
        self.index.insert(to, seq, entry);
    }

    // ---- auto-forwarding ----

    /// Whether the entity forwards its messages (ForwardTo).
    pub(crate) fn forwards(&self) -> bool {
        self.description.forward_to.is_some()
    }

    /// Whether the entity forwards its dead letters (ForwardDeadLetteredMessagesTo).
    pub(crate) fn forwards_dead_letters(&self) -> bool {
        self.description.forward_dead_lettered_messages_to.is_some()
    }

    /// A new description: messages move between the main, dead-letter and transfer queues if
    /// the forwarding rules changed.
    pub(crate) fn set_description(&mut self, description: Arc<QueueDescription>, now: Timestamp) {
        let changed = description.forward_to != self.description.forward_to
            || description.forward_dead_lettered_messages_to
                != self.description.forward_dead_lettered_messages_to;
        self.description = description;
        if changed {
            self.reconcile_forwarding(now);
        }
    }

    /// Puts every message where the forwarding rules want it: with ForwardTo the main queue's
    /// active, unlocked messages go to the transfer queue; without it the transfer queue's
    /// messages come back (dead letters to the dead-letter queue unless those are forwarded).
    pub(crate) fn reconcile_forwarding(&mut self, now: Timestamp) {
        if self.forwards() {
            let active: Vec<SequenceNumber> = self.index.available[SubQueue::Main]
                .iter()
                .copied()
                .filter(|seq| {
                    self.index.entry(SubQueue::Main, *seq).is_some_and(|e| e.lock().is_none())
                })
                .collect();
            for seq in active {
                self.relocate(SubQueue::Main, SubQueue::Transfer, seq, now);
            }
        }
        let (forwards, forwards_dead_letters) = (self.forwards(), self.forwards_dead_letters());
        let back: Vec<(SequenceNumber, SubQueue)> = self.index.messages[SubQueue::Transfer]
            .iter()
            .filter_map(|(&seq, e)| {
                let dead = e.aux.as_ref().is_some_and(|a| a.dead_letter_reason.is_some());
                match (dead, forwards, forwards_dead_letters) {
                    (false, false, _) => Some((seq, SubQueue::Main)),
                    (true, _, false) => Some((seq, SubQueue::DeadLetter)),
                    _ => None,
                }
            })
            .collect();
        for (seq, to) in back {
            self.relocate(SubQueue::Transfer, to, seq, now);
        }
    }

    /// Moves a message from one sub-queue to another (unlocking it): its meta record moves,
    /// its body stays.
    fn relocate(&mut self, from: SubQueue, to: SubQueue, seq: SequenceNumber, now: Timestamp) {
        let Some(entry) = self.take(from, seq) else { return };
        self.fx.journal.put_meta(to, seq, &entry.meta(seq));
        self.index.insert(to, seq, entry);
        if to == SubQueue::Main {
            // Expired while it waited: it goes the way of an expired message.
            if self.index.entry(to, seq).is_some_and(|e| e.expires_at <= now) {
                self.expire(seq);
            }
        }
    }

    /// Stores auto-forwarded messages, each at most once (see `transfer.rs`).
    fn accept_transfers(
        &mut self,
        transfers: Vec<(TransferId, Arc<Message>)>,
        now: Timestamp,
    ) -> Vec<Result<SendOutcome>> {
        let mut outcomes = Vec::with_capacity(transfers.len());
        for (id, message) in transfers {
            if !self.record_transfer(id) {
                outcomes.push(Ok(SendOutcome::Duplicate));
                continue;
            }
            if self.admit(&message, now) {
                outcomes.push(Ok(SendOutcome::Enqueued(self.store_new(message, now))));
            } else {
                outcomes.push(Ok(SendOutcome::Duplicate));
            }
        }
        self.process_due(now);
        outcomes
    }

    /// Records a transfer in the ledger (and the journal); false if it was stored already.
    pub(crate) fn record_transfer(&mut self, id: TransferId) -> bool {
        if !self.transfers.insert(id) {
            metrics::counter!(m::FORWARD_REDELIVERIES_TOTAL).increment(1);
            return false;
        }
        self.fx.journal.put_transfer(id);
        true
    }

    pub(crate) fn forget_transfers(&mut self, ids: &[TransferId]) {
        for id in ids {
            if self.transfers.remove(id) {
                self.fx.journal.delete_transfer(*id);
            }
        }
    }

    /// Adds the change of the transfer queue's depth since the last call to the gauge (all of
    /// it, when the partition stops).
    pub(crate) fn publish_transfer_depth(&self, stopping: bool) {
        let depth = if stopping { 0 } else { self.index.messages[SubQueue::Transfer].len() as u64 };
        let before = self.published_transfers.swap(depth, std::sync::atomic::Ordering::Relaxed);
        if depth != before {
            metrics::gauge!(m::FORWARD_TRANSFER_QUEUE_MESSAGES)
                .increment(depth as f64 - before as f64);
        }
    }
}
