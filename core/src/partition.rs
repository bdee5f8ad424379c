//! One partition of an entity: an actor task that owns the partition's state and writes it
//! through to the store.
//!
//! The actor works in cycles. A cycle takes every queued command (up to [`MAX_BATCH`]), first
//! applies what time has made due (scheduled messages, expired messages and locks, the end of
//! duplicate-detection windows), then the commands, then deliveries to receivers with credit;
//! everything it changed goes into **one** store write; only when that write is durable are
//! replies sent and deliveries handed over. Many concurrent sends therefore share one write.
//!
//! A store may bound what one write holds ([`Store::limits`]). Then a cycle takes commands
//! only while their writes fit, and bounds what time made due and its deliveries likewise;
//! what is left waits for the next cycle, which runs at once (`budget.rs`). A store without
//! limits never takes that path.
//!
//! The partition state decides, the actor acts: [`state::PartitionState`] applies time,
//! commands and deliveries at a given `now` and accumulates their [`effects::Effects`] (the
//! records to write, deliveries, replies); this file's actor reads the clock, loads the bodies
//! the effects need, writes the journal and then carries the effects out. By concern:
//!
//! - `command.rs` — [`Command`]: every request the broker sends a partition.
//! - `budget.rs` — keeping each cycle's write within the store's write limits.
//! - `state.rs` — [`state::PartitionState`]: the rules (send, settle, locks, expiry,
//!   scheduling, dead-lettering, delivery) without I/O.
//! - `index.rs` — the in-memory index: an entry per message and sub-queue, and the available,
//!   scheduled and expiring sets.
//! - `locks.rs` — the lock table, by token and by expiry.
//! - `sessions.rs` — the sessions of a session-enabled entity: messages, locks, state.
//! - `bodies.rs` — the broker-wide [`BodyCache`], outgoing messages, which bodies a cycle reads.
//! - `journal.rs` — the only code that turns records into store keys and values, both ways.
//! - `effects.rs` — what a cycle decided, carried out after its write.
//! - `shared.rs` — what others see of a partition without asking it (and send other nodes).
//! - `sub_queues.rs` — [`sub_queues::SubQueues`], one value per sub-queue.
//! - `tally.rs` — per-cycle message counters for the metrics.
//! - `transfer.rs` — auto-forwarding's transfer ids and the ledger of transfers a destination
//!   stored (exactly once across crashes).
//! - `transaction.rs` — a transaction's work and its commit, checked whole, then applied.
//! - `topic.rs` — what a topic's partition holds beyond a queue's: a lane per subscription.
//! - `tests.rs` — the seeded model test of the state (`IRONBUS_MODEL_SEEDS=1..500` runs more).
//!
//! **Architecture Invariant:** the state reads no clock, never sleeps and touches no store;
//! `journal.rs` is the only code that turns a partition's records into keys and values (its
//! write batch, its rebuild scans, its body reads).
//!
//! **Architecture Invariant:** the store is the truth, the in-memory state a cache of it. If a
//! write fails, every reply of the cycle is an error, the partition is marked unavailable, and
//! its state is rebuilt from the store before it serves again (the same path that loads it at
//! start-up). Locks are memory only: a rebuild releases them, as a restart does.
//!
//! **Architecture Invariant:** a fenced partition (`PartitionContext::fence_token`, see
//! `fence.rs`) claims its fence before its first rebuild and guards every write with its token;
//! a `Conflict` stops it for good (every command answered `PartitionUnavailable`, no rebuild:
//! the partition has moved). An unfenced one writes neither fence nor guard.
//!
//! **Architecture Invariant:** memory holds an index, not the messages: per message a small
//! entry (times, counts, state). A body is kept only while the broker-wide [`BodyCache`]
//! has room; deliveries, peeks and deferred receives read missing bodies from the store before
//! the cycle's write (so even a message deleted in that cycle is still readable), prefetching
//! ahead of the head of a backlog.
//!
//! A message is two records: its body, written once, and a small meta record (state, delivery
//! count, dead-letter fields, properties the broker laid over the sender's) that every change
//! rewrites. Settling deletes the meta record at once and the body in a **body sweep**: one
//! range delete per 1,024 sequence numbers once the partition's lowest message has moved past
//! them, which saves a store operation per message. A body settled above the lowest message
//! (out of order, as session messages are) waits for that sweep too, remembered in memory, up
//! to 8,192 per partition; beyond that it is deleted at once. Topic partitions share bodies
//! between copies and do not sweep: a body goes with its last copy.
//!
//! **Architecture Invariant:** a body is deleted only once its message is gone: a swept range
//! ends at the lowest message. A body left behind (awaiting a sweep, or forgotten by a restart)
//! is never read again — sequence numbers are not reused and a rebuild reads meta records only
//! — and the first sweep after a rebuild starts from the partition's beginning.
//!
//! **Architecture Invariant:** a partition never delivers without first reserving a unit of the
//! receiver's credit.
//!
//! **Architecture Invariant:** a store is never handed a batch over its write limits: a cycle
//! stops taking commands and doing time's work before them. A send or a commit stays one
//! atomic write: one that no write could hold is refused with an error; a request of
//! independent items (transfers, settlements) is split over cycles instead.

mod bodies;
mod budget;
mod command;
mod effects;
mod index;
mod journal;
mod locks;
mod route;
mod sessions;
mod shared;
mod state;
mod sub_queues;
mod tally;
#[cfg(test)]
mod tests;
mod topic;
mod transaction;
mod transfer;

use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

pub(crate) use self::bodies::BodyCache;
use self::budget::Budget;
pub(crate) use self::command::Command;
use self::journal::Journal;
pub use self::route::Owner;
pub(crate) use self::route::{PartitionHandle, RemotePartition, Route, StartSpec, Target};
pub(crate) use self::sessions::SessionId;
pub(crate) use self::shared::{LaneStats, PartitionShared};
use self::state::PartitionState;
pub(crate) use self::state::NOT_SESSIONFUL;
use self::topic::TopicPart;
pub(crate) use self::transaction::Work;
pub(crate) use self::transfer::TransferId;
use crate::clock::Clock;
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result};
use crate::fence::Fence;
use crate::keys::EntityId;
use crate::metrics as m;
use crate::rules::RuleSet;
use crate::store::{Store, StoreError, StoreErrorKind, WriteLimits};
use crate::types::{PartitionId, SequenceNumber, Timestamp};

/// The most commands one cycle takes.
const MAX_BATCH: usize = 512;
/// How often an unavailable partition tries to rebuild itself from the store.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

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
pub(crate) struct PartitionCounts {
    pub active: u64,
    pub deferred: u64,
    pub scheduled: u64,
    pub dead_lettered: u64,
    /// Messages waiting in the transfer queue (auto-forwarding).
    pub transfer: u64,
    pub transfer_dead_lettered: u64,
    /// Of `transfer`: send-via transfers (transactions' sends through this entity).
    pub send_via: u64,
    pub size_bytes: u64,
    /// Messages accepted since the partition's state was last built (a restart or a rebuild
    /// starts again from zero): with `outgoing_total`, what message rates are computed from.
    pub incoming_total: u64,
    /// Messages handed to receivers (locked or received-and-deleted) since then.
    pub outgoing_total: u64,
}

/// A session lock granted to a receiver.
#[derive(Debug, Clone)]
pub(crate) struct SessionGrant {
    pub(crate) session: SessionId,
    pub(crate) locked_until: Timestamp,
}

/// Identifies a lane of a partition: the queue's, topic's or subscription's entity id.
pub(crate) type LaneId = EntityId;

/// How a subscription's lane takes the topic's messages.
#[derive(Debug)]
pub(crate) struct LaneConfig {
    /// The subscription's path, the `entity` label of its metrics.
    pub(crate) name: Arc<str>,
    /// The queue the subscription behaves as (see `SubscriptionDescription::effective`).
    pub(crate) description: Arc<QueueDescription>,
    pub(crate) rules: Arc<RuleSet>,
    /// Whether the subscription's status lets it take new messages.
    pub(crate) takes_messages: bool,
    /// Whether a copy whose rules fail to evaluate is dead-lettered (else dropped).
    pub(crate) dead_letter_filter_errors: bool,
}

/// A subscription's lane in a topic partition, as the broker starts it.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    pub(crate) id: LaneId,
    pub(crate) shared: Arc<PartitionShared>,
    pub(crate) config: Arc<LaneConfig>,
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
    /// Whether subscriptions' lanes record their own metrics, labelled with their path
    /// (`BrokerOptions::metrics_entity_labels`).
    pub(crate) metrics_entity_labels: bool,
    /// For a topic: its subscriptions' lanes when the partition starts (their records are
    /// recovered with the topic's), and whether unmatched messages are refused.
    pub(crate) topic: Option<(Vec<Lane>, bool)>,
    /// The owner's token when the partition runs fenced (`BrokerOptions::fence_token`).
    pub(crate) fence_token: Option<u64>,
}

/// Starts the actor of one partition on the current tokio runtime, publishing to `shared` (the
/// partition's own lane; a topic's lanes publish to theirs), and returns its channel.
pub(crate) fn spawn(
    context: PartitionContext,
    shared: Arc<PartitionShared>,
) -> mpsc::UnboundedSender<(LaneId, Command)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let lane = context.entity_id;
    let actor = Partition::new(context, shared.clone());
    tokio::spawn(actor.run(rx));
    // Load the partition's state now rather than at its first request, so that scheduled
    // messages and expiries recovered from the store come due on time.
    shared.nudge_pending.store(true, Ordering::Release);
    let _ = tx.send((lane, Command::Deliver));
    tx
}

/// The actor: reads the clock, writes what the state journalled, and carries out its effects.
/// A queue's partition has one lane (its state); a topic's has the topic's own lane (its
/// scheduled messages, duplicate window and sequence counter) and one per subscription.
struct Partition {
    cx: PartitionContext,
    shared: Arc<PartitionShared>,
    state: PartitionState,
    topic: Option<TopicPart>,
    needs_rebuild: bool,
    /// How much of the store's write limits a cycle may fill (see `budget.rs`).
    budget: Budget,
    /// When fenced: the fence, this owner's token, and whether it has claimed the fence.
    fence: Option<(Fence, u64, bool)>,
    /// A fenced claim or write met `Conflict`: the partition has moved, for good.
    deposed: bool,
    /// Told to stop (`Command::Stop`): acknowledged once stopped.
    stopped: Option<oneshot::Sender<()>>,
    /// The store-write metrics, registered at the first write and kept.
    meters: Option<(metrics::Counter, metrics::Histogram)>,
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
    fn new(mut cx: PartitionContext, shared: Arc<PartitionShared>) -> Self {
        let journal = Journal::new(cx.entity_id, cx.partition);
        let mut state =
            PartitionState::new(journal, cx.partition, cx.description.clone(), cx.cache.clone());
        let topic = cx.topic.take().map(|(lanes, filtering)| {
            state.shared_bodies = true;
            state.fx.journal.keep_no_floor();
            state.entity_kind = "topic";
            let mut topic =
                TopicPart::new(cx.entity_name.clone(), filtering, cx.metrics_entity_labels);
            for lane in lanes {
                topic.add_lane(&cx, lane);
            }
            topic
        });
        let fence = cx.fence_token.map(|t| (Fence::new(cx.entity_id, cx.partition), t, false));
        let mut limits = cx.store.limits();
        if let (Some((fence, ..)), true) = (&fence, limits != WriteLimits::UNLIMITED) {
            // Room for the guard every write carries.
            limits.max_ops = limits.max_ops.saturating_sub(1);
            limits.max_bytes = limits.max_bytes.saturating_sub(fence.guard_bytes());
        }
        let budget = Budget::new(limits);
        let stopped = None;
        Partition {
            cx,
            shared,
            state,
            topic,
            needs_rebuild: true,
            budget,
            fence,
            deposed: false,
            stopped,
            meters: None,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<(LaneId, Command)>) {
        let mut commands = Vec::with_capacity(MAX_BATCH);
        loop {
            if commands.is_empty() && !self.has_more() {
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
            } else {
                // The last cycle stopped short of the store's write limits with work left: go on
                // at once, with what has queued since.
                while commands.len() < MAX_BATCH {
                    let Ok(command) = rx.try_recv() else { break };
                    commands.push(command);
                }
            }
            if !self.cycle(&mut commands).await {
                break;
            }
        }
        let moving = self.stopped.is_some();
        for state in self.states_mut() {
            if moving {
                state.leave_receivers();
            } else {
                state.close_receivers();
            }
            state.release_cache();
            state.publish_transfer_depth(true);
        }
        if let Some(ack) = self.stopped.take() {
            if !self.shared.is_available() {
                // No longer this node's partition, nor its unavailable one.
                metrics::gauge!(m::PARTITIONS_UNAVAILABLE).decrement(1.0);
            }
            let _ = ack.send(());
        }
    }

    /// Every lane's state: the partition's own, then its subscriptions'.
    fn states_mut(&mut self) -> impl Iterator<Item = &mut PartitionState> {
        let subs = self.topic.iter_mut().flat_map(|t| t.lanes.iter_mut().map(|l| &mut l.state));
        std::iter::once(&mut self.state).chain(subs)
    }

    fn states(&self) -> impl Iterator<Item = &PartitionState> {
        let subs = self.topic.iter().flat_map(|t| t.lanes.iter().map(|l| &l.state));
        std::iter::once(&self.state).chain(subs)
    }

    fn unavailable(&self) -> BrokerError {
        BrokerError::PartitionUnavailable {
            entity: self.cx.entity_name.clone(),
            partition: self.cx.partition,
        }
    }

    /// One cycle. Returns false when the actor should stop.
    async fn cycle(&mut self, commands: &mut Vec<(LaneId, Command)>) -> bool {
        self.shared.nudge_pending.store(false, Ordering::Release);
        if let Some(topic) = &self.topic {
            // A subscription's receivers nudge through their lane's own shared view.
            for lane in &topic.lanes {
                lane.shared.nudge_pending.store(false, Ordering::Release);
            }
        }
        if self.needs_rebuild && !self.deposed {
            if let Err(e) = self.rebuild().await {
                tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, error = %e, "partition unavailable");
                self.depose_on(&e);
                self.set_available(false);
                return self.refuse_all(commands);
            }
            self.set_available(true);
            // Messages recovered into the wrong place for the entity's forwarding rules (they
            // changed while the partition could not write) move now, before what is due.
            for state in self.states_mut() {
                state.forwarding_pending = true;
            }
        }

        if self.deposed {
            return self.refuse_all(commands);
        }

        let now = self.cx.clock.now();
        let mut keep_running = true;
        if self.budget.is_limited() {
            for state in self.states_mut() {
                state.fx.more = false;
            }
            let first = self.first_estimate(commands);
            self.process_due_within(now, first);
            keep_running = self.apply_within(commands, now);
            self.deliver_within(now);
        } else {
            for state in self.states_mut() {
                state.process_due(now);
            }
            if let Some(topic) = &mut self.topic {
                topic.publish_due(&mut self.state, None);
            }
            for (lane, command) in commands.drain(..) {
                keep_running &= self.apply(lane, command, now);
            }
            self.deliver(now);
        }
        if let Some(topic) = &mut self.topic {
            topic.release_bodies(&mut self.state);
        }
        for state in self.states_mut() {
            state.end_cycle();
        }

        // Bodies first: what this cycle deletes is still in the store until the write.
        let mut result = self.load_bodies().await;
        let (mut batch, mut bytes) = self.state.fx.journal.take();
        for lane in self.topic.iter_mut().flat_map(|topic| topic.lanes.iter_mut()) {
            let (mut more, more_bytes) = lane.state.fx.journal.take();
            batch.append(&mut more);
            bytes += more_bytes;
        }
        if result.is_ok() && !self.budget.admits(&batch) {
            // An estimate fell short (see `budget.rs`): the store is never handed the batch.
            result = Err(self.budget.limits().exceeded(&batch));
        }
        if result.is_ok() && !batch.is_empty() {
            if let Some((fence, token, _)) = &self.fence {
                fence.guard(&mut batch, *token);
                bytes += fence.guard_bytes();
            }
            debug_assert_eq!(bytes, batch.bytes(), "the journals count what their batches do");
            let (written, duration) = self.meters.get_or_insert_with(|| {
                let written = metrics::counter!(m::STORE_WRITTEN_BYTES_TOTAL);
                (written, metrics::histogram!(m::STORE_WRITE_DURATION_SECONDS))
            });
            written.increment(bytes as u64);
            let stopwatch = m::Stopwatch::start();
            result = self.cx.store.write(batch).await;
            duration.record(stopwatch.seconds());
        }
        let probe = self.states_mut().fold(false, |p, s| std::mem::take(&mut s.fx.probe) | p);
        if result.is_ok() && probe {
            result = journal::probe(&*self.cx.store, self.cx.entity_id, self.cx.partition).await;
        }
        let result = result.map_err(|e: StoreError| {
            tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, error = %e, "store failed; rebuilding partition");
            self.needs_rebuild = true;
            self.set_available(false);
            if e.is_retriable() || self.depose_on(&e) {
                self.unavailable()
            } else {
                BrokerError::Store(e)
            }
        });

        for state in self.states_mut() {
            // Counted only once written: a failed write's commands are answered with errors
            // and come again.
            state.fx.tally.written(result.is_ok(), &mut state.totals);
            state.fx.complete(&result);
            if result.is_ok() {
                state.drop_transient_bodies();
            } else {
                state.fx.transient.clear();
            }
        }
        self.publish();
        keep_running
    }

    /// Answers every command as the partition being unavailable. False when it should stop.
    fn refuse_all(&mut self, commands: &mut Vec<(LaneId, Command)>) -> bool {
        let error = self.unavailable();
        for (lane, command) in commands.drain(..) {
            if !self.handle_while_unavailable(lane, command, &error) {
                return false;
            }
        }
        true
    }

    /// Whether the partition is deposed, as it is once a fenced one meets `Conflict`.
    fn depose_on(&mut self, e: &StoreError) -> bool {
        if self.fence.is_some() && e.kind == StoreErrorKind::Conflict && !self.deposed {
            tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, "fence moved; partition stopped");
            self.deposed = true;
        }
        self.deposed
    }

    /// Applies one command to its lane. False when the partition should stop.
    fn apply(&mut self, lane: LaneId, command: Command, now: Timestamp) -> bool {
        if let Command::Stop(ack) = command {
            self.stopped = Some(ack);
            return false;
        }
        if lane == self.cx.entity_id {
            match (&mut self.topic, command) {
                (Some(topic), Command::Send { messages, reply }) => {
                    let outcome = topic.publish(&mut self.state, messages, now);
                    self.state.fx.reply(reply, outcome);
                    true
                }
                (Some(topic), Command::Transfer { transfers, reply }) => {
                    let outcomes = topic.publish_transfers(&mut self.state, transfers, now);
                    self.state.fx.reply(reply, Ok(outcomes));
                    true
                }
                (Some(topic), Command::Commit { work, reply }) => {
                    let outcome = topic.commit(&mut self.state, work, now);
                    self.state.fx.reply(reply, outcome);
                    true
                }
                (Some(topic), Command::Filtering(on)) => {
                    topic.filtering = on;
                    true
                }
                // A new subscription's lane is added through the topic's own handle.
                (Some(topic), Command::AddLane(spec)) => {
                    topic.add_lane(&self.cx, *spec);
                    true
                }
                (_, command) => self.state.apply(command, now),
            }
        } else if let Some(topic) = &mut self.topic {
            match command {
                Command::AddLane(spec) => topic.add_lane(&self.cx, *spec),
                Command::RemoveLane(reply) => {
                    topic.remove_lane(lane, &mut self.state);
                    self.state.fx.reply(reply, Ok(()));
                }
                Command::Configure(config) => topic.configure(lane, config, now),
                Command::Commit { work, reply } => {
                    let outcome = topic.commit_in_lane(lane, &mut self.state, work, now);
                    self.state.fx.reply(reply, outcome);
                }
                command => {
                    if let Some(state) = topic.lane_mut(lane) {
                        state.apply(command, now);
                    }
                }
            }
            true
        } else {
            // No such lane: the command (and its reply channel) is dropped.
            true
        }
    }

    /// Serves what can be served without state while the partition cannot reach its store.
    fn handle_while_unavailable(
        &mut self,
        lane: LaneId,
        command: Command,
        error: &BrokerError,
    ) -> bool {
        let state = if lane == self.cx.entity_id {
            if let (Some(topic), Command::AddLane(spec)) = (&mut self.topic, &command) {
                topic.add_lane(&self.cx, (**spec).clone());
                return true;
            }
            &mut self.state
        } else {
            let Some(topic) = &mut self.topic else { return true };
            match command {
                Command::AddLane(spec) => {
                    topic.add_lane(&self.cx, *spec);
                    return true;
                }
                Command::Configure(config) => {
                    // Forwarding changes are applied when the partition is rebuilt.
                    topic.configure_later(lane, config);
                    return true;
                }
                _ => {}
            }
            match topic.lane_mut(lane) {
                Some(state) => state,
                None => return true,
            }
        };
        match command {
            // Forwarding changes are applied when the partition is rebuilt.
            Command::Update(description) => state.description = description,
            Command::Attach(receiver) => state.attach(receiver),
            Command::Detach(id) => state.detach(id),
            Command::Deliver | Command::AddLane(_) | Command::Configure(_) => {}
            Command::Filtering(on) => {
                if let Some(topic) = &mut self.topic {
                    topic.filtering = on;
                }
            }
            Command::Close => return false,
            Command::Stop(ack) => {
                self.stopped = Some(ack);
                return false;
            }
            command => command.refuse(error),
        }
        true
    }

    /// Delivers to receivers with credit, publishing what is left in between.
    fn deliver(&mut self, now: Timestamp) {
        for state in self.states_mut() {
            state.deliver_available(now);
        }
        // Publish what is left before looking at credit once more. Pairs with the fence in
        // `Receiver::add_credit`: a receiver that added credit after the pass above either sees
        // these counts and nudges, or its credit is seen here.
        self.publish();
        fence(Ordering::SeqCst);
        for state in self.states_mut() {
            if state.can_deliver() {
                state.deliver_available(now);
            }
        }
    }

    fn set_available(&self, available: bool) {
        let lanes = self.topic.iter().flat_map(|t| t.lanes.iter().map(|l| &l.shared));
        for shared in lanes {
            shared.available.store(available, Ordering::Release);
        }
        let was = self.shared.available.swap(available, Ordering::AcqRel);
        if was != available {
            metrics::gauge!(m::PARTITIONS_UNAVAILABLE).increment(if available {
                -1.0
            } else {
                1.0
            });
        }
    }

    /// Publishes what other tasks read without asking (deliverable counts, size). A topic's
    /// size is what all its subscriptions hold.
    fn publish(&self) {
        publish_state(&self.state, &self.shared);
        if let Some(topic) = &self.topic {
            let mut size = self.state.index.size_bytes;
            for lane in &topic.lanes {
                publish_state(&lane.state, &lane.shared);
                size += lane.state.index.size_bytes;
            }
            self.shared.size_bytes.store(size, Ordering::Relaxed);
        }
    }

    fn next_deadline(&self) -> Timestamp {
        if self.deposed {
            return Timestamp::MAX;
        }
        if self.needs_rebuild {
            return self.cx.clock.now().saturating_add(RETRY_INTERVAL);
        }
        self.states().map(PartitionState::next_deadline).min().unwrap_or(Timestamp::MAX)
    }

    /// Reads the bodies the cycle's effects need from the store (see `bodies.rs`). Every lane
    /// reads its bodies under the partition's entity (a topic keeps one body per publish).
    async fn load_bodies(&mut self) -> Result<(), StoreError> {
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        let store = self.cx.store.clone();
        for state in self.states_mut() {
            let Some(reads) = state.body_reads() else { continue };
            let loaded = journal::read_bodies(&*store, id, p, &reads.wanted).await?;
            state.fill_bodies(reads, &loaded)?;
        }
        Ok(())
    }

    /// Rebuilds the state from the store: at start-up and after a failed write.
    async fn rebuild(&mut self) -> Result<(), StoreError> {
        if let Some((fence, token, claimed @ false)) = &mut self.fence {
            // Tokens are one per claim: a fence at ours is our claim, whose answer was lost.
            if fence.token(&*self.cx.store).await? != Some(*token) {
                fence.claim(&*self.cx.store, *token).await?;
            }
            *claimed = true;
        }
        let recovered = self.recover_all().await;
        if recovered.is_err() {
            for state in self.states_mut() {
                state.reset();
            }
        }
        recovered?;
        self.needs_rebuild = false;
        Ok(())
    }

    async fn recover_all(&mut self) -> Result<(), StoreError> {
        let (id, p) = (self.cx.entity_id, self.cx.partition);
        let store = self.cx.store.clone();
        self.state.reset();
        let state = &mut self.state;
        journal::recover(&*store, id, p, |r| state.restore(r)).await?;
        if let Some(topic) = &mut self.topic {
            for lane in &mut topic.lanes {
                lane.state.reset();
                let state = &mut lane.state;
                journal::recover(&*store, lane.id, p, |r| state.restore(r)).await?;
            }
            topic.recover(&self.state, &*store, id, p).await?;
        }
        Ok(())
    }
}

/// Publishes one lane's deliverable counts and size to its shared view.
fn publish_state(state: &PartitionState, shared: &PartitionShared) {
    state.publish_transfer_depth(false);
    for (queue, available) in state.index.available.iter() {
        shared.deliverable[queue].store(available.len() as u64, Ordering::SeqCst);
    }
    shared.size_bytes.store(state.index.size_bytes, Ordering::Relaxed);
    if let Some(sessions) = &state.index.sessions {
        let ready = sessions.ready_len() as u64;
        let before = shared.ready_sessions.swap(ready, Ordering::SeqCst);
        if ready > before {
            shared.session_ready.notify_waiters();
        }
    }
}
