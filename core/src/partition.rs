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
//!
//! **Architecture Invariant:** memory holds an index, not the messages: per message a small
//! [`Entry`] (times, counts, state). A body is kept only while the broker-wide [`BodyCache`]
//! has room; deliveries, peeks and deferred receives read missing bodies from the store before
//! the cycle's write (so even a message deleted in that cycle is still readable), prefetching
//! ahead of the head of a backlog.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::codec::{self, MessageMeta};
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
    /// Settles each locked message in turn; one outcome per item, in order.
    Settle {
        queue: SubQueue,
        items: Vec<(LockToken, Disposition)>,
        reply: oneshot::Sender<Result<Vec<Result<()>>>>,
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
    pub(crate) cache: Arc<BodyCache>,
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

/// How many body bytes the partitions of one broker keep in memory, together.
///
/// A message's body is stored once, in its body record; a partition keeps it in memory only
/// while the cache has room (new messages first take what is free; deliveries from a backlog
/// read bodies back from the store, prefetching ahead). What is cached is counted here, so a
/// backlog of any length costs memory only for its index.
#[derive(Debug)]
pub(crate) struct BodyCache {
    budget: u64,
    used: AtomicU64,
}

impl BodyCache {
    pub(crate) fn new(budget: u64) -> Self {
        Self { budget, used: AtomicU64::new(0) }
    }

    /// Takes `n` bytes of the budget, if that many are free.
    fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + n <= self.budget).then_some(used + n)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes cached now, by every partition.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// Expiry times at or after this (year 10000) mean "never" for indexing: Service Bus's default
/// time to live (`TimeSpan.MaxValue`) ends far beyond it.
const NEVER_EXPIRES: Timestamp = Timestamp::from_millis(253_402_300_800_000);

/// A message in the partition's index. Kept small: a backlog of a million messages costs a
/// million of these, while bodies stay in the store (see [`BodyCache`]).
#[derive(Debug)]
struct Entry {
    enqueued_time: Timestamp,
    expires_at: Timestamp,
    delivery_count: u32,
    size: u32,
    state: MessageState,
    /// Whether `body` is counted in the [`BodyCache`] (else it is held only until the end of
    /// the cycle that stored it).
    counted: bool,
    body: Option<Arc<Message>>,
    /// The lock and the rarely set parts of the meta record.
    aux: Option<Box<Aux>>,
}

#[derive(Debug, Default)]
struct Aux {
    lock: Option<MessageLock>,
    enqueued_sequence_number: Option<SequenceNumber>,
    dead_letter_source: Option<String>,
    dead_letter_reason: Option<String>,
    dead_letter_error_description: Option<String>,
    modified_properties: ApplicationProperties,
}

impl Aux {
    fn is_empty(&self) -> bool {
        self.lock.is_none()
            && self.enqueued_sequence_number.is_none()
            && self.dead_letter_source.is_none()
            && self.dead_letter_reason.is_none()
            && self.dead_letter_error_description.is_none()
            && self.modified_properties.is_empty()
    }
}

impl Entry {
    fn from_meta(seq: SequenceNumber, meta: MessageMeta) -> Entry {
        let mut entry = Entry {
            enqueued_time: meta.enqueued_time,
            expires_at: meta.expires_at,
            delivery_count: meta.delivery_count,
            size: meta.size,
            state: meta.state,
            counted: false,
            body: None,
            aux: None,
        };
        let aux = Aux {
            lock: None,
            enqueued_sequence_number: (meta.enqueued_sequence_number != seq)
                .then_some(meta.enqueued_sequence_number),
            dead_letter_source: meta.dead_letter_source,
            dead_letter_reason: meta.dead_letter_reason,
            dead_letter_error_description: meta.dead_letter_error_description,
            modified_properties: meta.modified_properties,
        };
        if !aux.is_empty() {
            entry.aux = Some(Box::new(aux));
        }
        entry
    }

    fn meta(&self, seq: SequenceNumber) -> MessageMeta {
        let aux = self.aux.as_deref();
        MessageMeta {
            enqueued_sequence_number: aux.and_then(|a| a.enqueued_sequence_number).unwrap_or(seq),
            enqueued_time: self.enqueued_time,
            size: self.size,
            delivery_count: self.delivery_count,
            state: self.state,
            expires_at: self.expires_at,
            dead_letter_source: aux.and_then(|a| a.dead_letter_source.clone()),
            dead_letter_reason: aux.and_then(|a| a.dead_letter_reason.clone()),
            dead_letter_error_description: aux
                .and_then(|a| a.dead_letter_error_description.clone()),
            modified_properties: aux.map(|a| a.modified_properties.clone()).unwrap_or_default(),
        }
    }

    fn aux_mut(&mut self) -> &mut Aux {
        self.aux.get_or_insert_with(Box::default)
    }

    fn lock(&self) -> Option<MessageLock> {
        self.aux.as_ref().and_then(|a| a.lock)
    }

    fn take_lock(&mut self) -> Option<MessageLock> {
        let aux = self.aux.as_mut()?;
        let lock = aux.lock.take();
        if aux.is_empty() {
            self.aux = None;
        }
        lock
    }

    /// What goes out for this message; its body may still have to be read from the store.
    fn outgoing(
        &self,
        seq: SequenceNumber,
        partition: PartitionId,
        lock: Option<MessageLock>,
    ) -> Outgoing {
        let meta = self.meta(seq);
        Outgoing {
            broker: BrokerProperties {
                sequence_number: seq,
                enqueued_sequence_number: meta.enqueued_sequence_number,
                enqueued_time: meta.enqueued_time,
                partition_id: partition,
                delivery_count: meta.delivery_count,
                state: meta.state,
                expires_at: meta.expires_at,
                dead_letter_source: meta.dead_letter_source,
                dead_letter_reason: meta.dead_letter_reason,
                dead_letter_error_description: meta.dead_letter_error_description,
            },
            lock,
            body: self.body.clone(),
            modified_properties: Some(meta.modified_properties).filter(|p| !p.is_empty()),
        }
    }
}

/// A message on its way out (a delivery, a peek, a deferred receive) before its body is known.
#[derive(Debug)]
struct Outgoing {
    broker: BrokerProperties,
    lock: Option<MessageLock>,
    body: Option<Arc<Message>>,
    modified_properties: Option<ApplicationProperties>,
}

impl Outgoing {
    /// The received message, once the body is there (`load_bodies` made sure of that).
    fn finish(self) -> ReceivedMessage {
        let body = self.body.expect("bodies are loaded before a cycle ends well");
        let message = match self.modified_properties {
            None => body,
            Some(props) => {
                let mut message = (*body).clone();
                message.application_properties.extend(props);
                message.application_properties_modified = true;
                Arc::new(message)
            }
        };
        ReceivedMessage { message, broker: self.broker, lock: self.lock }
    }
}

/// The partition's in-memory state: an index of what its store holds, plus locks.
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
    /// Body bytes this partition holds counted in the [`BodyCache`].
    cached_bytes: u64,
    /// Bodies below this sequence number have been range-deleted since the partition was
    /// (re)built; above it, up to the lowest message, bodies may be left for the next sweep.
    swept_to: SequenceNumber,
}

type Reply = Box<dyn FnOnce(&Result<(), BrokerError>) + Send + Sync>;
type ListReply = oneshot::Sender<Result<Vec<ReceivedMessage>>>;

/// Bodies read ahead of the head of a backlog, when a delivery needs one from the store.
const PREFETCH: usize = 256;

/// How many sequence numbers of bodies left below every message one range delete removes (see
/// `Partition::remove`). A point delete per body is one more memtable insert per message; a
/// range delete per 1,024 keeps RocksDB's range tombstones few. At most this many bodies of
/// settled messages per partition wait on disk (after a crash: until the first sweep).
const BODY_SWEEP: i64 = 1024;

/// Per-message counters of one cycle, added to the metrics at its end.
#[derive(Debug, Default)]
struct Tally {
    incoming: u64,
    outgoing: u64,
    /// By [`Disposition::outcome`], in the order of [`SETTLEMENT_OUTCOMES`].
    settlements: [u64; SETTLEMENT_OUTCOMES.len()],
}

const SETTLEMENT_OUTCOMES: [&str; 5] = ["complete", "abandon", "release", "defer", "dead_letter"];

impl Tally {
    fn settled(&mut self, disposition: &Disposition) {
        let outcome = disposition.outcome();
        if let Some(i) = SETTLEMENT_OUTCOMES.iter().position(|o| *o == outcome) {
            self.settlements[i] += 1;
        }
    }

    /// Adds the cycle's counts to the metrics and starts again from zero.
    fn record(&mut self) {
        let tally = std::mem::take(self);
        if tally.incoming > 0 {
            metrics::counter!(m::MESSAGES_INCOMING_TOTAL, "entity_kind" => "queue")
                .increment(tally.incoming);
        }
        if tally.outgoing > 0 {
            metrics::counter!(m::MESSAGES_OUTGOING_TOTAL, "entity_kind" => "queue")
                .increment(tally.outgoing);
        }
        for (outcome, count) in SETTLEMENT_OUTCOMES.iter().zip(tally.settlements) {
            if count > 0 {
                metrics::counter!(m::SETTLEMENTS_TOTAL, "outcome" => *outcome).increment(count);
            }
        }
    }
}

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
    /// Messages in, out and settled this cycle: recorded once per cycle, not per message.
    tally: Tally,
    deliveries: Vec<(Arc<ReceiverShared>, Outgoing)>,
    /// Peeks and deferred receives, answered after their bodies are loaded.
    lists: Vec<(ListReply, Result<Vec<Outgoing>>)>,
    replies: Vec<Reply>,
    drains: Vec<oneshot::Sender<()>>,
    /// Messages stored this cycle whose bodies did not fit the cache: dropped after the write.
    transient: Vec<(SubQueue, SequenceNumber)>,
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
            tally: Tally::default(),
            deliveries: Vec::new(),
            lists: Vec::new(),
            replies: Vec::new(),
            drains: Vec::new(),
            transient: Vec::new(),
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
        self.release_cache();
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
        self.tally.record();

        if self.counter_dirty {
            self.batch.put(
                keys::partition_record(self.cx.entity_id, self.cx.partition),
                codec::encode_partition(self.state.last_counter),
            );
            self.counter_dirty = false;
        }
        self.sweep_bodies();
        // Bodies first: what this cycle deletes is still in the store until the write.
        let mut result = self.load_bodies().await;
        if result.is_ok() && !self.batch.is_empty() {
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
            tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, error = %e, "store failed; rebuilding partition");
            self.needs_rebuild = true;
            self.set_available(false);
            if e.is_retriable() {
                self.unavailable()
            } else {
                BrokerError::Store(e)
            }
        });

        for (receiver, outgoing) in self.deliveries.drain(..) {
            if result.is_ok() {
                receiver.deliver(outgoing.finish());
            } else {
                receiver.cancel_reservation();
            }
        }
        for (reply, answer) in self.lists.drain(..) {
            let answer = match &result {
                Ok(()) => answer.map(|list| list.into_iter().map(Outgoing::finish).collect()),
                Err(e) => Err(e.clone()),
            };
            let _ = reply.send(answer);
        }
        for reply in self.replies.drain(..) {
            reply(&result);
        }
        for drain in self.drains.drain(..) {
            let _ = drain.send(());
        }
        if result.is_ok() {
            self.drop_transient_bodies();
        } else {
            self.transient.clear();
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
            Command::Settle { queue, items, reply } => {
                let outcomes = items
                    .into_iter()
                    .map(|(token, disposition)| self.settle(queue, token, disposition, now))
                    .collect();
                self.reply(reply, Ok(outcomes));
            }
            Command::RenewLock { queue, token, reply } => {
                let outcome = self.renew_lock(queue, token, now);
                self.reply(reply, outcome);
            }
            Command::ReceiveDeferred { queue, sequence_numbers, mode, reply } => {
                let outcome = self.receive_deferred(queue, &sequence_numbers, mode, now);
                self.lists.push((reply, outcome));
            }
            Command::Peek { queue, from, max, reply } => {
                let peeked = self.peek(queue, from, max);
                self.lists.push((reply, Ok(peeked)));
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

    // ---- bodies ----

    /// Gives the partition's share of the body cache back (the state holding it is going).
    fn release_cache(&mut self) {
        self.cx.cache.give_back(std::mem::take(&mut self.state.cached_bytes));
    }

    /// Caches `body` in the entry if the budget allows. True if it did.
    fn try_cache(&mut self, queue: SubQueue, seq: SequenceNumber, body: &Arc<Message>) -> bool {
        let Some(entry) = self.state.messages[queue.index()].get_mut(&seq) else { return false };
        if entry.body.is_some() || !self.cx.cache.try_take(u64::from(entry.size)) {
            return false;
        }
        entry.body = Some(body.clone());
        entry.counted = true;
        self.state.cached_bytes += u64::from(entry.size);
        true
    }

    fn drop_transient_bodies(&mut self) {
        for (queue, seq) in std::mem::take(&mut self.transient) {
            if let Some(entry) = self.state.messages[queue.index()].get_mut(&seq) {
                if !entry.counted {
                    entry.body = None;
                }
            }
        }
    }

    /// Reads from the store the bodies that this cycle's deliveries, peeks and deferred
    /// receives need and the cache did not hold, and, for a backlog being delivered, the bodies
    /// of the next available messages while the cache has room.
    async fn load_bodies(&mut self) -> Result<(), StoreError> {
        let mut needed: Vec<SequenceNumber> = self
            .deliveries
            .iter()
            .map(|(_, o)| o)
            .chain(self.lists.iter().filter_map(|(_, l)| l.as_ref().ok()).flatten())
            .filter(|o| o.body.is_none())
            .map(|o| o.broker.sequence_number)
            .collect();
        if needed.is_empty() {
            return Ok(());
        }
        let delivering = self.deliveries.iter().any(|(_, o)| o.body.is_none());
        let mut ahead = Vec::new();
        if delivering {
            for queue in SubQueue::ALL {
                let q = queue.index();
                for &seq in self.state.available[q].iter().take(PREFETCH) {
                    if self.state.messages[q].get(&seq).is_some_and(|e| e.body.is_none()) {
                        ahead.push((queue, seq));
                    }
                }
            }
        }
        let mut wanted: Vec<SequenceNumber> =
            needed.iter().copied().chain(ahead.iter().map(|&(_, s)| s)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        needed.sort_unstable();
        needed.dedup();

        let loaded = self.read_bodies(&wanted).await?;
        for &seq in &needed {
            if !loaded.contains_key(&seq) {
                return Err(StoreError::corrupted(format!("the body of message {seq} is missing")));
            }
        }
        metrics::counter!(m::BODIES_READ_TOTAL).increment(loaded.len() as u64);
        let fill = |o: &mut Outgoing| {
            if o.body.is_none() {
                o.body = loaded.get(&o.broker.sequence_number).cloned();
            }
        };
        self.deliveries.iter_mut().for_each(|(_, o)| fill(o));
        self.lists.iter_mut().filter_map(|(_, l)| l.as_mut().ok()).flatten().for_each(fill);
        for (queue, seq) in ahead {
            if let Some(body) = loaded.get(&seq) {
                if !self.try_cache(queue, seq, body) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Reads the body records of `seqs` (sorted): close runs with one scan, the rest one by one.
    async fn read_bodies(
        &self,
        seqs: &[SequenceNumber],
    ) -> Result<HashMap<SequenceNumber, Arc<Message>>, StoreError> {
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        let mut loaded = HashMap::with_capacity(seqs.len());
        let mut i = 0;
        while i < seqs.len() {
            // A run: following sequence numbers no further apart than the run is long.
            let mut j = i + 1;
            while j < seqs.len() && seqs[j].0 - seqs[j - 1].0 <= 4 {
                j += 1;
            }
            let (first, last) = (seqs[i], seqs[j - 1]);
            if j - i == 1 {
                if let Some(value) = self.cx.store.get(&keys::body(id, p, first)).await? {
                    loaded.insert(first, Arc::new(codec::decode_body(&value)?));
                }
            } else {
                let start = keys::body(id, p, first);
                let end = keys::body(id, p, SequenceNumber(last.0 + 1));
                let limit = (last.0 - first.0 + 1) as usize;
                for (key, value) in self.cx.store.scan(&start, &end, limit).await? {
                    let seq = keys::message_seq(&key)
                        .ok_or_else(|| StoreError::corrupted("body key without sequence number"))?;
                    if seqs[i..j].binary_search(&seq).is_ok() {
                        loaded.insert(seq, Arc::new(codec::decode_body(&value)?));
                    }
                }
            }
            i = j;
        }
        Ok(loaded)
    }

    // ---- rebuilding from the store ----

    async fn rebuild(&mut self) -> Result<(), StoreError> {
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        self.release_cache();
        self.state = State::default();
        let mut state = State::default();
        if let Some(value) = self.cx.store.get(&keys::partition_record(id, p)).await? {
            state.last_counter = codec::decode_partition(&value)?;
        }
        for queue in SubQueue::ALL {
            let prefix = keys::messages_prefix(id, p, queue);
            let partitioned = self.partitioned;
            self.scan_each(&prefix, |key, value| {
                let meta = codec::decode_meta(value)?;
                let seq = keys::message_seq(key)
                    .ok_or_else(|| StoreError::corrupted("message key without sequence number"))?;
                state.last_counter = state.last_counter.max(seq.counter(partitioned));
                state.size_bytes += u64::from(meta.size);
                let entry = Entry::from_meta(seq, meta);
                index_entry(&mut state, queue, seq, &entry);
                state.messages[queue.index()].insert(seq, entry);
                Ok(())
            })
            .await?;
        }
        self.scan_each(&keys::dedup_prefix(id, p), |key, value| {
            let dedup_key = keys::dedup_key(key)
                .ok_or_else(|| StoreError::corrupted("invalid duplicate-detection key"))?;
            state.dedup.restore(dedup_key, codec::decode_dedup(value)?);
            Ok(())
        })
        .await?;
        self.state = state;
        self.needs_rebuild = false;
        self.batch = WriteBatch::new();
        self.counter_dirty = false;
        self.transient.clear();
        Ok(())
    }

    /// Calls `f` on every pair under `prefix`, a page at a time.
    async fn scan_each(
        &self,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let end = crate::store::prefix_end(prefix);
        let mut start = prefix.to_vec();
        loop {
            let page = self.cx.store.scan(&start, &end, SCAN_PAGE).await?;
            for (key, value) in &page {
                f(key, value)?;
            }
            match page.last() {
                Some((last, _)) if page.len() == SCAN_PAGE => {
                    start = last.to_vec();
                    start.push(0);
                }
                _ => return Ok(()),
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
                    entry.take_lock();
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
                entry.state = MessageState::Active;
                entry.enqueued_time = at;
                self.persist(SubQueue::Main, seq);
                self.make_available(SubQueue::Main, seq, now);
            }
        }
        while let Some(&(at, seq)) = self.state.expiring.first() {
            if at > now {
                break;
            }
            self.state.expiring.pop_first();
            let locked = self.entry(SubQueue::Main, seq).is_some_and(|e| e.lock().is_some());
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
        if entry.state == MessageState::Scheduled {
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
        let (id, p) = (self.cx.entity_id, self.cx.partition);
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
                    self.batch.put(keys::dedup(id, p, &key), codec::encode_dedup(until));
                }
            }
            self.state.last_counter += 1;
            self.counter_dirty = true;
            let seq = SequenceNumber::new(self.partitioned, p, self.state.last_counter);
            let scheduled = message.properties.scheduled_enqueue_time.filter(|at| *at > now);
            let enqueued_time = scheduled.unwrap_or(now);
            let ttl =
                message.properties.time_to_live.map_or(desc.default_message_time_to_live, |t| {
                    t.min(desc.default_message_time_to_live)
                });
            let size = u32::try_from(message.size()).unwrap_or(u32::MAX);
            let counted = self.cx.cache.try_take(u64::from(size));
            let entry = Entry {
                enqueued_time,
                expires_at: enqueued_time.saturating_add(ttl),
                delivery_count: 0,
                size,
                state: if scheduled.is_some() {
                    MessageState::Scheduled
                } else {
                    MessageState::Active
                },
                counted,
                body: Some(message.clone()),
                aux: None,
            };
            if counted {
                self.state.cached_bytes += u64::from(size);
            } else {
                self.transient.push((SubQueue::Main, seq));
            }
            self.batch.put(keys::body(id, p, seq), codec::encode_body(&message));
            self.batch.put(
                keys::message(id, p, SubQueue::Main, seq),
                codec::encode_meta(&entry.meta(seq)),
            );
            self.insert(SubQueue::Main, seq, entry);
            self.tally.incoming += 1;
            outcomes.push(SendOutcome::Enqueued(seq));
        }
        // Messages already past their expiry (a TTL shorter than the clock's step) go now.
        self.process_due(now);
        Ok(outcomes)
    }

    fn cancel(&mut self, sequence_numbers: &[SequenceNumber]) {
        for &seq in sequence_numbers {
            let Some(entry) = self.entry(SubQueue::Main, seq) else { continue };
            if entry.state == MessageState::Scheduled {
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
        if let Some(lock) = self.entry_mut(queue, seq).and_then(Entry::take_lock) {
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
        self.tally.settled(&disposition);
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
                    entry.state = MessageState::Deferred;
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
        entry.delivery_count += 1;
        merge_properties(entry, properties);
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
        let seq = self.locked(queue, token)?;
        let until = now.saturating_add(self.cx.description.lock_duration);
        let entry = self.entry_mut(queue, seq).ok_or(BrokerError::MessageLockLost)?;
        let lock =
            entry.aux.as_mut().and_then(|a| a.lock.as_mut()).ok_or(BrokerError::MessageLockLost)?;
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
    ) -> Result<Vec<Outgoing>> {
        for &seq in sequence_numbers {
            match self.entry(queue, seq) {
                Some(e) if e.state == MessageState::Deferred && e.lock().is_none() => {}
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
    ) -> Outgoing {
        self.state.available[queue.index()].remove(&seq);
        self.tally.outgoing += 1;
        let partition = self.cx.partition;
        match mode {
            ReceiveMode::PeekLock => {
                let lock = MessageLock {
                    token: LockToken::generate(partition),
                    locked_until: now.saturating_add(self.cx.description.lock_duration),
                };
                self.state.locks.insert(lock.token, (queue, seq));
                self.state.lock_expiry.insert((lock.locked_until, lock.token));
                let entry = self.entry_mut(queue, seq).expect("handed-out message exists");
                entry.aux_mut().lock = Some(lock);
                entry.outgoing(seq, partition, Some(lock))
            }
            ReceiveMode::ReceiveAndDelete => {
                let entry = self.entry(queue, seq).expect("handed-out message exists");
                let outgoing = entry.outgoing(seq, partition, None);
                self.remove(queue, seq);
                outgoing
            }
        }
    }

    fn peek(&self, queue: SubQueue, from: SequenceNumber, max: usize) -> Vec<Outgoing> {
        self.state.messages[queue.index()]
            .range(from..)
            .take(max)
            .map(|(&seq, e)| e.outgoing(seq, self.cx.partition, None))
            .collect()
    }

    fn counts(&self) -> PartitionCounts {
        let mut c = PartitionCounts { size_bytes: self.state.size_bytes, ..Default::default() };
        for entry in self.state.messages[SubQueue::Main.index()].values() {
            match entry.state {
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
                let outgoing = self.hand_out(queue, seq, receiver.mode, now);
                self.deliveries.push((receiver, outgoing));
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
        self.state.size_bytes += u64::from(entry.size);
        index_entry(&mut self.state, queue, seq, &entry);
        self.state.messages[queue.index()].insert(seq, entry);
    }

    /// Takes a message out of a sub-queue's index and deletes its meta record; its body stays.
    fn take(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Entry> {
        self.unlock(queue, seq);
        let entry = self.state.messages[queue.index()].remove(&seq)?;
        self.state.size_bytes -= u64::from(entry.size);
        self.state.available[queue.index()].remove(&seq);
        if queue == SubQueue::Main {
            self.state.expiring.remove(&(entry.expires_at, seq));
            if let Some(at) = scheduled_at(&entry) {
                self.state.scheduled.remove(&(at, seq));
            }
        }
        self.batch.delete(keys::message(self.cx.entity_id, self.cx.partition, queue, seq));
        Some(entry)
    }

    /// Deletes a message: its meta record, its body, and its share of the body cache. A body
    /// below every message left is not deleted here but by the next sweep (`sweep_bodies`),
    /// with the others below it in one range delete; a body above one is deleted now.
    fn remove(&mut self, queue: SubQueue, seq: SequenceNumber) {
        let Some(entry) = self.take(queue, seq) else { return };
        if entry.counted {
            self.cx.cache.give_back(u64::from(entry.size));
            self.state.cached_bytes -= u64::from(entry.size);
        }
        if seq > self.lowest_live() {
            self.batch.delete(keys::body(self.cx.entity_id, self.cx.partition, seq));
        }
    }

    /// The lowest sequence number any message of this partition has, or the next one to be
    /// given if it holds none: no body below it belongs to a message.
    fn lowest_live(&self) -> SequenceNumber {
        let lowest =
            self.state.messages.iter().filter_map(|m| m.first_key_value()).map(|(s, _)| *s);
        lowest.min().unwrap_or_else(|| {
            SequenceNumber::new(self.partitioned, self.cx.partition, self.state.last_counter + 1)
        })
    }

    /// Deletes, with one range delete, the bodies left below every message (see `remove`) once
    /// they span [`BODY_SWEEP`] sequence numbers — in a cycle that writes anyway, so that a
    /// cycle that only reads stays without a write.
    fn sweep_bodies(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let lowest = self.lowest_live();
        if lowest.0.saturating_sub(self.state.swept_to.0) < BODY_SWEEP {
            return;
        }
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        self.batch.delete_range(keys::body(id, p, self.state.swept_to), keys::body(id, p, lowest));
        self.state.swept_to = lowest;
    }

    /// Writes the entry's current meta record.
    fn persist(&mut self, queue: SubQueue, seq: SequenceNumber) {
        if let Some(entry) = self.entry(queue, seq) {
            let value = codec::encode_meta(&entry.meta(seq));
            self.batch.put(keys::message(self.cx.entity_id, self.cx.partition, queue, seq), value);
        }
    }

    /// Puts an unlocked message back where it belongs: available if active, or expired now if
    /// its time has passed while it was locked.
    fn make_available(&mut self, queue: SubQueue, seq: SequenceNumber, now: Timestamp) {
        let Some(entry) = self.entry(queue, seq) else { return };
        if queue == SubQueue::Main && entry.expires_at <= now {
            self.expire(seq);
            return;
        }
        let (state, expires_at) = (entry.state, entry.expires_at);
        if queue == SubQueue::Main && expires_at < NEVER_EXPIRES {
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
        let Some(mut entry) = self.take(SubQueue::Main, seq) else { return };
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
        // A dead-lettered message counts its added properties too, and leaves the body cache
        // (it is rarely read soon).
        let added =
            props.iter().map(|(k, v)| k.len() + crate::message::value_size(v)).sum::<usize>();
        if std::mem::take(&mut entry.counted) {
            self.cx.cache.give_back(u64::from(entry.size));
            self.state.cached_bytes -= u64::from(entry.size);
        }
        entry.body = None;
        entry.size = entry.size.saturating_add(u32::try_from(added).unwrap_or(u32::MAX));
        merge_properties(&mut entry, props);
        let aux = entry.aux_mut();
        aux.dead_letter_reason = Some(reason.to_owned());
        aux.dead_letter_error_description = Some(description);
        entry.state = MessageState::Active;
        self.batch.put(
            keys::message(self.cx.entity_id, self.cx.partition, SubQueue::DeadLetter, seq),
            codec::encode_meta(&entry.meta(seq)),
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
        if entry.expires_at < NEVER_EXPIRES {
            state.expiring.insert((entry.expires_at, seq));
        }
    }
    if entry.state == MessageState::Active {
        state.available[queue.index()].insert(seq);
    }
}

fn scheduled_at(entry: &Entry) -> Option<Timestamp> {
    (entry.state == MessageState::Scheduled).then_some(entry.enqueued_time)
}

/// Merges "properties to modify" into the properties the broker lays over the message's own.
fn merge_properties(entry: &mut Entry, properties: ApplicationProperties) {
    if properties.is_empty() {
        return;
    }
    entry.aux_mut().modified_properties.extend(properties);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_settlement_outcome_has_a_tally_slot() {
        let properties = ApplicationProperties::default;
        let dispositions = [
            Disposition::Complete,
            Disposition::Abandon { properties: properties() },
            Disposition::Release,
            Disposition::Defer { properties: properties() },
            Disposition::DeadLetter { reason: None, description: None, properties: properties() },
        ];
        let mut tally = Tally::default();
        for d in &dispositions {
            tally.settled(d);
        }
        assert_eq!(tally.settlements, [1; SETTLEMENT_OUTCOMES.len()]);
    }
}
