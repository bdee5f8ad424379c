//! One partition of an entity: an actor task that owns the partition's state and writes it
//! through to the store.
//!
//! The actor works in cycles. A cycle takes every queued command (up to [`MAX_BATCH`]), first
//! applies what time has made due (scheduled messages, expired messages and locks, the end of
//! duplicate-detection windows), then the commands, then deliveries to receivers with credit;
//! everything it changed goes into **one** store write; only when that write is durable are
//! replies sent and deliveries handed over. Many concurrent sends therefore share one write.
//!
//! **Architecture Invariant:** the store is the truth, the in-memory state a cache of it. If a
//! write fails, every reply of the cycle is an error, the partition is marked unavailable, and
//! its state is rebuilt from the store before it serves again (the same path that loads it at
//! start-up). Locks are memory only: a rebuild releases them, as a restart does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::codec::{self, MessageRecord};
use crate::dedup::{DedupKey, DedupWindow};
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result};
use crate::keys::{self, EntityId};
use crate::message::{
    dead_letter_reason, ApplicationProperties, BrokerProperties, Disposition, Message, MessageLock,
    MessageState, PropertyValue, ReceivedMessage,
};
use crate::metrics as m;
use crate::receiver::ReceiverShared;
use crate::store::{Store, StoreError, WriteBatch};
use crate::types::{LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// The most commands one cycle takes.
const MAX_BATCH: usize = 512;
/// How often an unavailable partition tries to rebuild itself from the store.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Rows per store scan while rebuilding.
const SCAN_PAGE: usize = 1024;

/// What one sent message came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Stored under this sequence number (scheduled or not).
    Enqueued(SequenceNumber),
    /// Dropped as a duplicate within the duplicate-detection window (the send still succeeds).
    Duplicate,
}

/// Counts of one partition, summed by the broker over an entity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    pub active: u64,
    pub deferred: u64,
    pub scheduled: u64,
    pub dead_lettered: u64,
    pub size_bytes: u64,
}

/// A request to a partition actor.
pub(crate) enum Command {
    Send {
        messages: Vec<Arc<Message>>,
        reply: oneshot::Sender<Result<Vec<SendOutcome>>>,
    },
    Cancel {
        sequence_numbers: Vec<SequenceNumber>,
        reply: oneshot::Sender<Result<()>>,
    },
    Settle {
        queue: SubQueue,
        token: LockToken,
        disposition: Disposition,
        reply: oneshot::Sender<Result<()>>,
    },
    RenewLock {
        queue: SubQueue,
        token: LockToken,
        reply: oneshot::Sender<Result<Timestamp>>,
    },
    ReceiveDeferred {
        queue: SubQueue,
        sequence_numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
    Peek {
        queue: SubQueue,
        from: SequenceNumber,
        max: usize,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
    Counts {
        reply: oneshot::Sender<Result<PartitionCounts>>,
    },
    Update(Arc<QueueDescription>),
    Attach(Arc<ReceiverShared>),
    Detach(u64),
    /// Try to deliver (credit arrived).
    Deliver,
    /// Deliver what is possible, then acknowledge.
    Drain(oneshot::Sender<()>),
    /// Stop: the entity is deleted. Receivers are closed.
    Close,
}

/// What the rest of the broker can see of a partition without asking it.
#[derive(Debug)]
pub(crate) struct PartitionShared {
    available: AtomicBool,
    deliverable: [AtomicU64; 2],
    nudge_pending: AtomicBool,
    size_bytes: AtomicU64,
}

impl PartitionShared {
    pub(crate) fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    pub(crate) fn has_deliverable(&self, queue: SubQueue) -> bool {
        self.deliverable[queue.index()].load(Ordering::SeqCst) > 0
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Relaxed)
    }
}

/// The broker's handle on a partition actor.
#[derive(Debug, Clone)]
pub(crate) struct PartitionHandle {
    pub(crate) id: PartitionId,
    tx: mpsc::UnboundedSender<Command>,
    pub(crate) shared: Arc<PartitionShared>,
}

impl PartitionHandle {
    /// Queues a command, without waiting. The queue is unbounded: transports bound what they
    /// submit by the credit they grant their clients. If the actor is gone the command (and its
    /// reply channel) is dropped, which the caller sees as [`BrokerError::ShuttingDown`].
    pub(crate) fn send(&self, command: Command) {
        let _ = self.tx.send(command);
    }

    /// Asks the actor to deliver, unless such a request is already queued.
    pub(crate) fn nudge(&self) {
        if !self.shared.nudge_pending.swap(true, Ordering::AcqRel) {
            self.send(Command::Deliver);
        }
    }

    /// Sends a request now; the returned future waits for its answer.
    pub(crate) fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
    ) -> impl std::future::Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx));
        async move { rx.await.unwrap_or(Err(BrokerError::ShuttingDown)) }
    }
}

/// Where a partition lives and what it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct PartitionContext {
    pub(crate) entity_id: EntityId,
    pub(crate) entity_name: String,
    pub(crate) partition: PartitionId,
    pub(crate) description: Arc<QueueDescription>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Starts the actor of one partition on the current tokio runtime.
pub(crate) fn spawn(context: PartitionContext) -> PartitionHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(PartitionShared {
        available: AtomicBool::new(true),
        deliverable: [AtomicU64::new(0), AtomicU64::new(0)],
        nudge_pending: AtomicBool::new(false),
        size_bytes: AtomicU64::new(0),
    });
    let handle = PartitionHandle { id: context.partition, tx, shared: shared.clone() };
    let actor = Partition::new(context, shared);
    tokio::spawn(actor.run(rx));
    // Load the partition's state now rather than at its first request, so that scheduled
    // messages and expiries recovered from the store come due on time.
    handle.nudge();
    handle
}

#[derive(Debug)]
struct Entry {
    message: Arc<Message>,
    broker: BrokerProperties,
    lock: Option<MessageLock>,
    size: u64,
}

impl Entry {
    fn received(&self, lock: Option<MessageLock>) -> ReceivedMessage {
        ReceivedMessage { message: self.message.clone(), broker: self.broker.clone(), lock }
    }

    fn record(&self) -> MessageRecord {
        MessageRecord { message: (*self.message).clone(), broker: self.broker.clone() }
    }
}

/// The partition's in-memory state: a cache of what its store holds, plus locks.
#[derive(Debug, Default)]
struct State {
    last_counter: u64,
    messages: [BTreeMap<SequenceNumber, Entry>; 2],
    /// Unlocked active messages, per sub-queue, in sequence order.
    available: [BTreeSet<SequenceNumber>; 2],
    /// Scheduled messages of the main queue by due time.
    scheduled: BTreeSet<(Timestamp, SequenceNumber)>,
    /// Messages of the main queue that expire, by expiry time.
    expiring: BTreeSet<(Timestamp, SequenceNumber)>,
    locks: HashMap<LockToken, (SubQueue, SequenceNumber)>,
    lock_expiry: BTreeSet<(Timestamp, LockToken)>,
    dedup: DedupWindow,
    size_bytes: u64,
}

type Reply = Box<dyn FnOnce(&Result<(), BrokerError>) + Send + Sync>;

struct Partition {
    cx: PartitionContext,
    partitioned: bool,
    shared: Arc<PartitionShared>,
    state: State,
    needs_rebuild: bool,
    receivers: [Vec<Arc<ReceiverShared>>; 2],
    next_receiver: [usize; 2],
    // Per cycle:
    batch: WriteBatch,
    counter_dirty: bool,
    probe: bool,
    deliveries: Vec<(Arc<ReceiverShared>, ReceivedMessage)>,
    replies: Vec<Reply>,
    drains: Vec<oneshot::Sender<()>>,
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("entity", &self.cx.entity_name)
            .field("partition", &self.cx.partition)
            .finish_non_exhaustive()
    }
}

impl Partition {
    fn new(cx: PartitionContext, shared: Arc<PartitionShared>) -> Self {
        Partition {
            partitioned: cx.description.enable_partitioning,
            cx,
            shared,
            state: State::default(),
            needs_rebuild: true,
            receivers: Default::default(),
            next_receiver: [0; 2],
            batch: WriteBatch::new(),
            counter_dirty: false,
            probe: false,
            deliveries: Vec::new(),
            replies: Vec::new(),
            drains: Vec::new(),
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut commands = Vec::with_capacity(MAX_BATCH);
        loop {
            let deadline = self.next_deadline();
            let sleep = self.cx.clock.sleep_until(deadline);
            tokio::select! {
                received = rx.recv_many(&mut commands, MAX_BATCH) => {
                    if received == 0 {
                        break;
                    }
                }
                () = sleep => {}
            }
            if !self.cycle(&mut commands).await {
                break;
            }
        }
        self.close_receivers();
    }

    fn unavailable(&self) -> BrokerError {
        BrokerError::PartitionUnavailable {
            entity: self.cx.entity_name.clone(),
            partition: self.cx.partition,
        }
    }

    /// One cycle. Returns false when the actor should stop.
    async fn cycle(&mut self, commands: &mut Vec<Command>) -> bool {
        self.shared.nudge_pending.store(false, Ordering::Release);
        if self.needs_rebuild {
            if let Err(e) = self.rebuild().await {
                tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, error = %e, "partition unavailable");
                self.set_available(false);
                let error = self.unavailable();
                for command in commands.drain(..) {
                    if !self.handle_while_unavailable(command, &error) {
                        return false;
                    }
                }
                return true;
            }
            self.set_available(true);
        }

        let now = self.cx.clock.now();
        self.process_due(now);
        let mut keep_running = true;
        for command in commands.drain(..) {
            keep_running &= self.handle(command, now);
        }
        self.deliver(now);

        if self.counter_dirty {
            self.batch.put(
                keys::partition_record(self.cx.entity_id, self.cx.partition),
                codec::encode_partition(self.state.last_counter),
            );
            self.counter_dirty = false;
        }
        let mut result = Ok(());
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            let started = std::time::Instant::now();
            result = self.cx.store.write(batch).await;
            metrics::histogram!(m::STORE_WRITE_DURATION_SECONDS)
                .record(started.elapsed().as_secs_f64());
        }
        if result.is_ok() && std::mem::take(&mut self.probe) {
            let key = keys::partition_record(self.cx.entity_id, self.cx.partition);
            result = self.cx.store.get(&key).await.map(|_| ());
        }
        let result = result.map_err(|e: StoreError| {
            tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, error = %e, "store write failed; rebuilding partition");
            self.needs_rebuild = true;
            self.set_available(false);
            if e.is_retriable() {
                self.unavailable()
            } else {
                BrokerError::Store(e)
            }
        });

        for (receiver, message) in self.deliveries.drain(..) {
            if result.is_ok() {
                receiver.deliver(message);
            } else {
                receiver.cancel_reservation();
            }
        }
        for reply in self.replies.drain(..) {
            reply(&result);
        }
        for drain in self.drains.drain(..) {
            let _ = drain.send(());
        }
        self.publish();
        keep_running
    }

    /// Serves what can be served without state while the partition cannot reach its store.
    fn handle_while_unavailable(&mut self, command: Command, error: &BrokerError) -> bool {
        fn fail<T>(reply: oneshot::Sender<Result<T>>, error: &BrokerError) {
            let _ = reply.send(Err(error.clone()));
        }
        match command {
            Command::Send { reply, .. } => fail(reply, error),
            Command::Cancel { reply, .. } => fail(reply, error),
            Command::Settle { reply, .. } => fail(reply, error),
            Command::RenewLock { reply, .. } => fail(reply, error),
            Command::ReceiveDeferred { reply, .. } => fail(reply, error),
            Command::Peek { reply, .. } => fail(reply, error),
            Command::Counts { reply } => fail(reply, error),
            Command::Update(description) => self.cx.description = description,
            Command::Attach(receiver) => self.attach(receiver),
            Command::Detach(id) => self.detach(id),
            Command::Deliver => {}
            Command::Drain(ack) => drop(ack.send(())),
            Command::Close => return false,
        }
        true
    }

    fn handle(&mut self, command: Command, now: Timestamp) -> bool {
        match command {
            Command::Send { messages, reply } => {
                let outcomes = self.enqueue(messages, now);
                self.reply(reply, outcomes);
            }
            Command::Cancel { sequence_numbers, reply } => {
                self.cancel(&sequence_numbers);
                self.reply(reply, Ok(()));
            }
            Command::Settle { queue, token, disposition, reply } => {
                let outcome = self.settle(queue, token, disposition, now);
                self.reply(reply, outcome);
            }
            Command::RenewLock { queue, token, reply } => {
                let outcome = self.renew_lock(queue, token, now);
                self.reply(reply, outcome);
            }
            Command::ReceiveDeferred { queue, sequence_numbers, mode, reply } => {
                let outcome = self.receive_deferred(queue, &sequence_numbers, mode, now);
                self.reply(reply, outcome);
            }
            Command::Peek { queue, from, max, reply } => {
                let peeked = self.peek(queue, from, max);
                self.reply(reply, Ok(peeked));
            }
            Command::Counts { reply } => {
                self.probe = true;
                let counts = self.counts();
                self.reply(reply, Ok(counts));
            }
            Command::Update(description) => self.cx.description = description,
            Command::Attach(receiver) => self.attach(receiver),
            Command::Detach(id) => self.detach(id),
            Command::Deliver => {}
            Command::Drain(ack) => self.drains.push(ack),
            Command::Close => return false,
        }
        true
    }

    /// Queues a reply to be sent after the cycle's write: `answer` if the write succeeded,
    /// the write's error otherwise.
    fn reply<T: Send + Sync + 'static>(
        &mut self,
        tx: oneshot::Sender<Result<T>>,
        answer: Result<T>,
    ) {
        self.replies.push(Box::new(move |written: &Result<(), BrokerError>| {
            let _ = tx.send(match written {
                Ok(()) => answer,
                Err(e) => Err(e.clone()),
            });
        }));
    }

    fn attach(&mut self, receiver: Arc<ReceiverShared>) {
        self.receivers[receiver.queue.index()].push(receiver);
    }

    fn detach(&mut self, id: u64) {
        for list in &mut self.receivers {
            list.retain(|r| r.id != id);
        }
    }

    fn close_receivers(&mut self) {
        for list in &mut self.receivers {
            for r in list.drain(..) {
                r.close();
            }
        }
    }

    fn set_available(&self, available: bool) {
        let was = self.shared.available.swap(available, Ordering::AcqRel);
        if was != available {
            metrics::gauge!(m::PARTITIONS_UNAVAILABLE).increment(if available {
                -1.0
            } else {
                1.0
            });
        }
    }

    /// Publishes what other tasks read without asking (deliverable counts, size).
    fn publish(&self) {
        for queue in SubQueue::ALL {
            let n = self.state.available[queue.index()].len() as u64;
            self.shared.deliverable[queue.index()].store(n, Ordering::SeqCst);
        }
        self.shared.size_bytes.store(self.state.size_bytes, Ordering::Relaxed);
    }

    fn next_deadline(&self) -> Timestamp {
        if self.needs_rebuild {
            return self.cx.clock.now().saturating_add(RETRY_INTERVAL);
        }
        let s = &self.state;
        [
            s.scheduled.first().map(|(t, _)| *t),
            s.expiring.first().map(|(t, _)| *t),
            s.lock_expiry.first().map(|(t, _)| *t),
            s.dedup.next_expiry(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Timestamp::MAX)
    }

    // ---- rebuilding from the store ----

    async fn rebuild(&mut self) -> Result<(), StoreError> {
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        let mut state = State::default();
        if let Some(value) = self.cx.store.get(&keys::partition_record(id, p)).await? {
            state.last_counter = codec::decode_partition(&value)?;
        }
        for queue in SubQueue::ALL {
            let prefix = keys::messages_prefix(id, p, queue);
            for (key, value) in self.scan_all(&prefix).await? {
                let record = codec::decode_message(&value)?;
                let seq = keys::message_seq(&key)
                    .ok_or_else(|| StoreError::corrupted("message key without sequence number"))?;
                state.last_counter = state.last_counter.max(seq.counter(self.partitioned));
                let size = record.message.size() as u64;
                state.size_bytes += size;
                let entry = Entry {
                    message: Arc::new(record.message),
                    broker: record.broker,
                    lock: None,
                    size,
                };
                index_entry(&mut state, queue, seq, &entry);
                state.messages[queue.index()].insert(seq, entry);
            }
        }
        for (key, value) in self.scan_all(&keys::dedup_prefix(id, p)).await? {
            let dedup_key = keys::dedup_key(&key)
                .ok_or_else(|| StoreError::corrupted("invalid duplicate-detection key"))?;
            state.dedup.restore(dedup_key, codec::decode_dedup(&value)?);
        }
        self.state = state;
        self.needs_rebuild = false;
        self.batch = WriteBatch::new();
        self.counter_dirty = false;
        Ok(())
    }

    async fn scan_all(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let end = crate::store::prefix_end(prefix);
        let mut start = prefix.to_vec();
        let mut all = Vec::new();
        loop {
            let page = self.cx.store.scan(&start, &end, SCAN_PAGE).await?;
            let done = page.len() < SCAN_PAGE;
            if let Some((last, _)) = page.last() {
                start = last.to_vec();
                start.push(0);
            }
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    // ---- time ----

    fn process_due(&mut self, now: Timestamp) {
        while let Some(&(until, token)) = self.state.lock_expiry.first() {
            if until > now {
                break;
            }
            self.state.lock_expiry.pop_first();
            if let Some((queue, seq)) = self.state.locks.remove(&token) {
                metrics::counter!(m::LOCK_EXPIRATIONS_TOTAL).increment(1);
                if let Some(entry) = self.entry_mut(queue, seq) {
                    entry.lock = None;
                }
                self.after_failed_delivery(queue, seq, ApplicationProperties::new(), now);
            }
        }
        while let Some(&(at, seq)) = self.state.scheduled.first() {
            if at > now {
                break;
            }
            self.state.scheduled.pop_first();
            if let Some(entry) = self.entry_mut(SubQueue::Main, seq) {
                entry.broker.state = MessageState::Active;
                entry.broker.enqueued_time = at;
                self.persist(SubQueue::Main, seq);
                self.make_available(SubQueue::Main, seq, now);
            }
        }
        while let Some(&(at, seq)) = self.state.expiring.first() {
            if at > now {
                break;
            }
            self.state.expiring.pop_first();
            let locked = self.entry(SubQueue::Main, seq).is_some_and(|e| e.lock.is_some());
            if !locked {
                self.expire(seq);
            }
            // A locked message is checked again when its lock ends.
        }
        for key in self.state.dedup.evict(now) {
            self.batch.delete(keys::dedup(self.cx.entity_id, self.cx.partition, &key));
        }
    }

    fn expire(&mut self, seq: SequenceNumber) {
        let Some(entry) = self.entry(SubQueue::Main, seq) else { return };
        if entry.broker.state == MessageState::Scheduled {
            return;
        }
        if self.cx.description.dead_lettering_on_message_expiration {
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
        let desc = self.cx.description.clone();
        let mut outcomes = Vec::with_capacity(messages.len());
        for message in messages {
            if desc.requires_duplicate_detection {
                if let Some(key) = DedupKey::of(&message.properties, self.partitioned) {
                    if self.state.dedup.contains(&key, now) {
                        metrics::counter!(m::DUPLICATES_DROPPED_TOTAL).increment(1);
                        outcomes.push(SendOutcome::Duplicate);
                        continue;
                    }
                    let until = self.state.dedup.insert(
                        key.clone(),
                        now,
                        desc.duplicate_detection_history_time_window,
                    );
                    self.batch.put(
                        keys::dedup(self.cx.entity_id, self.cx.partition, &key),
                        codec::encode_dedup(until),
                    );
                }
            }
            self.state.last_counter += 1;
            self.counter_dirty = true;
            let seq =
                SequenceNumber::new(self.partitioned, self.cx.partition, self.state.last_counter);
            let scheduled = message.properties.scheduled_enqueue_time.filter(|at| *at > now);
            let enqueued_time = scheduled.unwrap_or(now);
            let ttl =
                message.properties.time_to_live.map_or(desc.default_message_time_to_live, |t| {
                    t.min(desc.default_message_time_to_live)
                });
            let broker = BrokerProperties {
                sequence_number: seq,
                enqueued_sequence_number: seq,
                enqueued_time,
                partition_id: self.cx.partition,
                delivery_count: 0,
                state: if scheduled.is_some() {
                    MessageState::Scheduled
                } else {
                    MessageState::Active
                },
                expires_at: enqueued_time.saturating_add(ttl),
                dead_letter_source: None,
                dead_letter_reason: None,
                dead_letter_error_description: None,
            };
            let size = message.size() as u64;
            let entry = Entry { message, broker, lock: None, size };
            self.batch.put(
                keys::message(self.cx.entity_id, self.cx.partition, SubQueue::Main, seq),
                codec::encode_message(&entry.record()),
            );
            self.insert(SubQueue::Main, seq, entry);
            metrics::counter!(m::MESSAGES_INCOMING_TOTAL, "entity_kind" => "queue").increment(1);
            outcomes.push(SendOutcome::Enqueued(seq));
        }
        // Messages already past their expiry (a TTL shorter than the clock's step) go now.
        self.process_due(now);
        Ok(outcomes)
    }

    fn cancel(&mut self, sequence_numbers: &[SequenceNumber]) {
        for &seq in sequence_numbers {
            let Some(entry) = self.entry(SubQueue::Main, seq) else { continue };
            if entry.broker.state == MessageState::Scheduled {
                self.remove(SubQueue::Main, seq);
            }
        }
    }

    // ---- locks and settlement ----

    fn locked(&self, queue: SubQueue, token: LockToken) -> Result<SequenceNumber> {
        match self.state.locks.get(&token) {
            Some(&(q, seq)) if q == queue => Ok(seq),
            _ => Err(BrokerError::MessageLockLost),
        }
    }

    fn unlock(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if let Some(lock) = self.entry_mut(queue, seq).and_then(|e| e.lock.take()) {
            self.state.locks.remove(&lock.token);
            self.state.lock_expiry.remove(&(lock.locked_until, lock.token));
        }
    }

    fn settle(
        &mut self,
        queue: SubQueue,
        token: LockToken,
        disposition: Disposition,
        now: Timestamp,
    ) -> Result<()> {
        let seq = self.locked(queue, token)?;
        if queue == SubQueue::DeadLetter && matches!(disposition, Disposition::DeadLetter { .. }) {
            return Err(BrokerError::InvalidOperation(
                "a message in the dead-letter queue cannot be dead-lettered again".into(),
            ));
        }
        metrics::counter!(m::SETTLEMENTS_TOTAL, "outcome" => disposition.outcome()).increment(1);
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
                if let Some(entry) = self.entry_mut(queue, seq) {
                    entry.broker.state = MessageState::Deferred;
                    merge_properties(entry, properties);
                }
                self.persist(queue, seq);
                self.make_available(queue, seq, now);
            }
            Disposition::DeadLetter { reason, description, properties } => self
                .move_to_dead_letter(
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
        let max = self.cx.description.max_delivery_count;
        let Some(entry) = self.entry_mut(queue, seq) else { return };
        entry.broker.delivery_count += 1;
        merge_properties(entry, properties);
        let exhausted = entry.broker.delivery_count >= max;
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
        let seq = self.locked(queue, token)?;
        let until = now.saturating_add(self.cx.description.lock_duration);
        let entry = self.entry_mut(queue, seq).ok_or(BrokerError::MessageLockLost)?;
        let lock = entry.lock.as_mut().ok_or(BrokerError::MessageLockLost)?;
        let old = std::mem::replace(&mut lock.locked_until, until);
        self.state.lock_expiry.remove(&(old, token));
        self.state.lock_expiry.insert((until, token));
        Ok(until)
    }

    fn receive_deferred(
        &mut self,
        queue: SubQueue,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
        now: Timestamp,
    ) -> Result<Vec<ReceivedMessage>> {
        for &seq in sequence_numbers {
            match self.entry(queue, seq) {
                Some(e) if e.broker.state == MessageState::Deferred && e.lock.is_none() => {}
                _ => return Err(BrokerError::MessageNotFound(seq)),
            }
        }
        let mut received = Vec::with_capacity(sequence_numbers.len());
        for &seq in sequence_numbers {
            received.push(self.hand_out(queue, seq, mode, now));
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
    ) -> ReceivedMessage {
        self.state.available[queue.index()].remove(&seq);
        metrics::counter!(m::MESSAGES_OUTGOING_TOTAL, "entity_kind" => "queue").increment(1);
        match mode {
            ReceiveMode::PeekLock => {
                let lock = MessageLock {
                    token: LockToken::generate(self.cx.partition),
                    locked_until: now.saturating_add(self.cx.description.lock_duration),
                };
                self.state.locks.insert(lock.token, (queue, seq));
                self.state.lock_expiry.insert((lock.locked_until, lock.token));
                let entry = self.entry_mut(queue, seq).expect("handed-out message exists");
                entry.lock = Some(lock);
                entry.received(Some(lock))
            }
            ReceiveMode::ReceiveAndDelete => {
                let received =
                    self.entry(queue, seq).expect("handed-out message exists").received(None);
                self.remove(queue, seq);
                received
            }
        }
    }

    fn peek(&self, queue: SubQueue, from: SequenceNumber, max: usize) -> Vec<ReceivedMessage> {
        self.state.messages[queue.index()]
            .range(from..)
            .take(max)
            .map(|(_, e)| e.received(None))
            .collect()
    }

    fn counts(&self) -> PartitionCounts {
        let mut c = PartitionCounts { size_bytes: self.state.size_bytes, ..Default::default() };
        for entry in self.state.messages[SubQueue::Main.index()].values() {
            match entry.broker.state {
                MessageState::Active => c.active += 1,
                MessageState::Deferred => c.deferred += 1,
                MessageState::Scheduled => c.scheduled += 1,
            }
        }
        c.dead_lettered = self.state.messages[SubQueue::DeadLetter.index()].len() as u64;
        c
    }

    // ---- delivery ----

    fn deliver(&mut self, now: Timestamp) {
        for list in &mut self.receivers {
            list.retain(|r| !r.is_closed());
        }
        self.deliver_available(now);
        // Publish what is left before looking at credit once more. Pairs with the fence in
        // `Receiver::add_credit`: a receiver that added credit after the pass above either sees
        // these counts and nudges, or its credit is seen here.
        self.publish();
        fence(Ordering::SeqCst);
        let credit_arrived = SubQueue::ALL.iter().any(|q| {
            !self.state.available[q.index()].is_empty()
                && self.receivers[q.index()].iter().any(|r| r.has_credit())
        });
        if credit_arrived {
            self.deliver_available(now);
        }
    }

    /// Hands available messages to receivers with credit, in turn, until one runs out.
    fn deliver_available(&mut self, now: Timestamp) {
        for queue in SubQueue::ALL {
            let q = queue.index();
            while let Some(&seq) = self.state.available[q].first() {
                let Some(receiver) = self.reserve_receiver(queue) else { break };
                let received = self.hand_out(queue, seq, receiver.mode, now);
                self.deliveries.push((receiver, received));
            }
        }
    }

    /// The next receiver in turn that has credit, with one unit reserved.
    fn reserve_receiver(&mut self, queue: SubQueue) -> Option<Arc<ReceiverShared>> {
        let q = queue.index();
        let n = self.receivers[q].len();
        for i in 0..n {
            let index = (self.next_receiver[q] + i) % n;
            if self.receivers[q][index].try_reserve() {
                self.next_receiver[q] = (index + 1) % n;
                return Some(self.receivers[q][index].clone());
            }
        }
        None
    }

    // ---- state bookkeeping ----

    fn entry(&self, queue: SubQueue, seq: SequenceNumber) -> Option<&Entry> {
        self.state.messages[queue.index()].get(&seq)
    }

    fn entry_mut(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<&mut Entry> {
        self.state.messages[queue.index()].get_mut(&seq)
    }

    fn insert(&mut self, queue: SubQueue, seq: SequenceNumber, entry: Entry) {
        self.state.size_bytes += entry.size;
        index_entry(&mut self.state, queue, seq, &entry);
        self.state.messages[queue.index()].insert(seq, entry);
    }

    fn remove(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Entry> {
        self.unlock(queue, seq);
        let entry = self.state.messages[queue.index()].remove(&seq)?;
        self.state.size_bytes -= entry.size;
        self.state.available[queue.index()].remove(&seq);
        if queue == SubQueue::Main {
            self.state.expiring.remove(&(entry.broker.expires_at, seq));
            if let Some(at) = scheduled_at(&entry) {
                self.state.scheduled.remove(&(at, seq));
            }
        }
        self.batch.delete(keys::message(self.cx.entity_id, self.cx.partition, queue, seq));
        Some(entry)
    }

    /// Writes the entry's current record.
    fn persist(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if let Some(entry) = self.entry(queue, seq) {
            let value = codec::encode_message(&entry.record());
            self.batch.put(keys::message(self.cx.entity_id, self.cx.partition, queue, seq), value);
        }
    }

    /// Puts an unlocked message back where it belongs: available if active, or expired now if
    /// its time has passed while it was locked.
    fn make_available(&mut self, queue: SubQueue, seq: SequenceNumber, now: Timestamp) {
        let Some(entry) = self.entry(queue, seq) else { return };
        if queue == SubQueue::Main && entry.broker.expires_at <= now {
            self.expire(seq);
            return;
        }
        let (state, expires_at) = (entry.broker.state, entry.broker.expires_at);
        if queue == SubQueue::Main && expires_at < Timestamp::MAX {
            self.state.expiring.insert((expires_at, seq));
        }
        if state == MessageState::Active {
            self.state.available[queue.index()].insert(seq);
        }
    }

    fn move_to_dead_letter(
        &mut self,
        seq: SequenceNumber,
        reason: &str,
        description: String,
        properties: ApplicationProperties,
    ) {
        let Some(mut entry) = self.remove(SubQueue::Main, seq) else { return };
        let label = match reason {
            dead_letter_reason::MAX_DELIVERY_COUNT_EXCEEDED | dead_letter_reason::TTL_EXPIRED => {
                reason.to_owned()
            }
            _ => "client".to_owned(),
        };
        metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => label).increment(1);
        let mut props = properties;
        props.insert("DeadLetterReason".into(), PropertyValue::String(reason.to_owned()));
        props.insert(
            "DeadLetterErrorDescription".into(),
            PropertyValue::String(description.clone()),
        );
        merge_properties(&mut entry, props);
        entry.broker.dead_letter_reason = Some(reason.to_owned());
        entry.broker.dead_letter_error_description = Some(description);
        entry.broker.state = MessageState::Active;
        entry.size = entry.message.size() as u64;
        self.batch.put(
            keys::message(self.cx.entity_id, self.cx.partition, SubQueue::DeadLetter, seq),
            codec::encode_message(&entry.record()),
        );
        self.insert(SubQueue::DeadLetter, seq, entry);
    }
}

/// Adds a stored (unlocked) entry to the indexes for its state.
fn index_entry(state: &mut State, queue: SubQueue, seq: SequenceNumber, entry: &Entry) {
    if queue == SubQueue::Main {
        if let Some(at) = scheduled_at(entry) {
            state.scheduled.insert((at, seq));
        }
        if entry.broker.expires_at < Timestamp::MAX {
            state.expiring.insert((entry.broker.expires_at, seq));
        }
    }
    if entry.broker.state == MessageState::Active {
        state.available[queue.index()].insert(seq);
    }
}

fn scheduled_at(entry: &Entry) -> Option<Timestamp> {
    (entry.broker.state == MessageState::Scheduled).then_some(entry.broker.enqueued_time)
}

/// Merges "properties to modify" into a message's application properties, and marks them
/// modified so a transport re-encodes that section rather than reuse the client's.
fn merge_properties(entry: &mut Entry, properties: ApplicationProperties) {
    if properties.is_empty() {
        return;
    }
    let message = Arc::make_mut(&mut entry.message);
    message.application_properties.extend(properties);
    message.application_properties_modified = true;
}
