//! [`TopicPart`]: what a topic's partition holds beyond a queue's — one lane per subscription,
//! and the bodies they share.
//!
//! Partitions mirror: partition *i* of a topic holds partition *i* of every subscription, so a
//! publish is one partition's cycle and one store write, whatever the number of subscriptions.
//! The topic's own lane (the partition's [`PartitionState`]) keeps the sequence counter, the
//! duplicate-detection window and scheduled messages; each subscription's lane is a
//! `PartitionState` of its own (index, locks, receivers) whose records live under the
//! subscription's entity id. A publish checks duplicates and takes its sequence number in the
//! topic's lane; each lane's compiled rules decide its copies; a scheduled message waits in the
//! topic's lane and fans out when it comes due.
//!
//! **Architecture Invariant:** a published message's body is stored once, under the topic, at
//! the sequence number of the publish; every plain copy (one per subscription that takes it)
//! is a meta record under that same number in its subscription's lane. A copy changed by a
//! rule action has a number of its own and a meta record holding what the action changed and
//! where the body it shares is (a meta record of version 2 or later: the body's number, what
//! the action set and removed, laid over the body on delivery). `refs` counts the copies (and
//! the scheduled entry) that use each body: a body is deleted when its count reaches zero, and
//! counts are rebuilt from the lanes' records on recovery.

use std::collections::HashMap;
use std::sync::Arc;

use super::budget::Size;
use super::index::Aux;
use super::journal::read_bodies;
use super::state::PartitionState;
use super::{Lane, LaneConfig, LaneId, PartitionContext, PartitionShared, SendOutcome};
use crate::error::{BrokerError, Result};
use crate::filter::PublishInfo;
use crate::keys::EntityId;
use crate::message::{Message, MessageState};
use crate::metrics as m;
use crate::rules::Route;
use crate::store::{Store, StoreError};
use crate::types::{PartitionId, SequenceNumber, SubQueue, Timestamp};

/// A subscription's lane in a topic partition.
#[derive(Debug)]
pub(crate) struct SubLane {
    pub(crate) id: LaneId,
    pub(crate) shared: Arc<PartitionShared>,
    pub(crate) config: Arc<LaneConfig>,
    pub(crate) state: PartitionState,
}

#[derive(Debug)]
pub(crate) struct TopicPart {
    /// Sorted by id.
    pub(crate) lanes: Vec<SubLane>,
    /// Copies (and scheduled entries) using each body.
    refs: HashMap<SequenceNumber, u32>,
    /// Bodies of the topic's scheduled messages, kept in memory: their filters are evaluated
    /// when they come due.
    pinned: HashMap<SequenceNumber, Arc<Message>>,
    /// FilteringMessagesBeforePublishing: refuse a message no subscription takes.
    pub(crate) filtering: bool,
    /// The topic's name, for errors.
    name: String,
    /// Whether each subscription's lane records its own metrics, labelled with its path.
    metrics_entity_labels: bool,
}

impl TopicPart {
    pub(crate) fn new(name: String, filtering: bool, metrics_entity_labels: bool) -> Self {
        TopicPart {
            lanes: Vec::new(),
            refs: HashMap::new(),
            pinned: HashMap::new(),
            filtering,
            name,
            metrics_entity_labels,
        }
    }

    /// The `entity` label of a lane's own metrics, `None` when they are off.
    fn metric_entity(&self, config: &LaneConfig) -> Option<Arc<str>> {
        self.metrics_entity_labels.then(|| config.name.clone())
    }

    pub(crate) fn add_lane(&mut self, cx: &PartitionContext, lane: Lane) {
        let journal = super::journal::Journal::new(lane.id, cx.partition);
        let mut state = PartitionState::new(
            journal,
            cx.partition,
            lane.config.description.clone(),
            cx.cache.clone(),
        );
        state.shared_bodies = true;
        state.fx.journal.keep_no_floor();
        state.entity_kind = "subscription";
        state.metric_entity = self.metric_entity(&lane.config);
        let sub = SubLane { id: lane.id, shared: lane.shared, config: lane.config, state };
        match self.lanes.binary_search_by_key(&lane.id, |l| l.id) {
            Ok(i) => self.lanes[i] = sub,
            Err(i) => self.lanes.insert(i, sub),
        }
    }

    pub(crate) fn lane_mut(&mut self, id: LaneId) -> Option<&mut PartitionState> {
        let i = self.lanes.binary_search_by_key(&id, |l| l.id).ok()?;
        Some(&mut self.lanes[i].state)
    }

    pub(crate) fn configure(&mut self, id: LaneId, config: Arc<LaneConfig>, now: Timestamp) {
        let entity = self.metric_entity(&config);
        if let Ok(i) = self.lanes.binary_search_by_key(&id, |l| l.id) {
            let lane = &mut self.lanes[i];
            lane.state.set_description(config.description.clone(), now);
            lane.state.metric_entity = entity;
            lane.config = config;
        }
    }

    /// [`TopicPart::configure`] while the partition cannot write: messages move between
    /// sub-queues when it is rebuilt.
    pub(crate) fn configure_later(&mut self, id: LaneId, config: Arc<LaneConfig>) {
        let entity = self.metric_entity(&config);
        if let Ok(i) = self.lanes.binary_search_by_key(&id, |l| l.id) {
            let lane = &mut self.lanes[i];
            lane.state.description = config.description.clone();
            lane.state.metric_entity = entity;
            lane.config = config;
        }
    }

    /// Deletes a subscription's lane: its records (one range delete in this cycle's write, with
    /// what the lane journalled before), its receivers, and its uses of bodies.
    pub(crate) fn remove_lane(&mut self, id: LaneId, topic: &mut PartitionState) {
        let Ok(i) = self.lanes.binary_search_by_key(&id, |l| l.id) else { return };
        let mut lane = self.lanes.remove(i);
        topic.fx.journal.append(&mut lane.state.fx.journal);
        topic.fx.journal.delete_lane(id);
        for (_, messages) in lane.state.index.messages.iter() {
            topic.fx.released.extend(messages.iter().map(|(&seq, e)| e.body_seq(seq)));
        }
        lane.state.close_receivers();
        lane.state.release_cache();
        lane.state.publish_transfer_depth(true);
        // Its cycle's answers fail as if the subscription had gone first.
        lane.state.fx.complete(&Err(BrokerError::EntityNotFound { entity: "subscription".into() }));
    }

    /// A transaction's commit on a subscription's lane: its settlements (and anything else
    /// but sends) in the lane, and its sends through the subscription to other entities as
    /// send-via transfers in the topic's own lane (lanes hold copies of the topic's bodies and
    /// no sequence numbers of their own) — one cycle, so one write.
    pub(crate) fn commit_in_lane(
        &mut self,
        lane: LaneId,
        topic: &mut PartitionState,
        work: Vec<super::Work>,
        now: Timestamp,
    ) -> Result<()> {
        let (transfers, rest): (Vec<_>, Vec<_>) =
            work.into_iter().partition(|w| matches!(w, super::Work::Transfer(_)));
        let Some(state) = self.lane_mut(lane) else {
            return Err(BrokerError::EntityNotFound {
                entity: format!("{}/Subscriptions/?", self.name),
            });
        };
        state.check_commit(&rest)?;
        state.apply_work(rest, now);
        for item in transfers {
            if let super::Work::Transfer(message) = item {
                let seq = topic.next_seq();
                topic.fx.journal.put_body(seq, &message);
                self.refs.insert(seq, 1);
                topic.insert_copy(SubQueue::SendVia, seq, message, now, false, None);
            }
        }
        Ok(())
    }

    /// A transaction's commit on the topic: its sends, published together (a topic takes
    /// nothing else in a transaction: the broker refuses the rest).
    pub(crate) fn commit(
        &mut self,
        topic: &mut PartitionState,
        work: Vec<super::Work>,
        now: Timestamp,
    ) -> Result<()> {
        let mut messages = Vec::with_capacity(work.len());
        for item in work {
            match item {
                super::Work::Send(message) => messages.push(message),
                _ => {
                    return Err(BrokerError::Unimplemented(
                        "this operation on a topic in a transaction",
                    ))
                }
            }
        }
        self.publish(topic, messages, now).map(drop)
    }

    /// Publishes messages sent to the topic: scheduled ones wait in the topic's lane; the
    /// others are handed to every subscription whose rules take them, all in this cycle.
    /// With FilteringMessagesBeforePublishing, a message no subscription takes refuses the
    /// whole batch before anything changes.
    pub(crate) fn publish(
        &mut self,
        topic: &mut PartitionState,
        messages: Vec<Arc<Message>>,
        now: Timestamp,
    ) -> Result<Vec<SendOutcome>> {
        // Routes first, without changing anything: a refused batch leaves no trace.
        let mut routes: Vec<Option<Vec<(usize, Route)>>> = Vec::with_capacity(messages.len());
        for message in &messages {
            let scheduled = message.properties.scheduled_enqueue_time.is_some_and(|at| at > now);
            if scheduled || topic.is_duplicate(message, now) {
                routes.push(None);
                continue;
            }
            let size = message.size() as u64;
            let forwarded = message.forwarded.as_deref();
            let published = PublishInfo {
                enqueued_time: now,
                sequence_number: SequenceNumber(0),
                size,
                // An auto-forwarded message: what `sys.` shows of its journey.
                enqueued_sequence_number: forwarded
                    .map_or(SequenceNumber(0), |f| f.enqueued_sequence_number),
                dead_letter_source: forwarded.and_then(|f| f.dead_letter_source.as_deref()),
                ..PublishInfo::default()
            };
            let route = self.route(message, published);
            if self.filtering && route.is_empty() {
                return Err(BrokerError::NoMatchingSubscription { entity: self.name.clone() });
            }
            routes.push(Some(route));
        }
        let mut outcomes = Vec::with_capacity(messages.len());
        for (message, route) in messages.into_iter().zip(routes) {
            if !topic.admit(&message, now) {
                outcomes.push(SendOutcome::Duplicate);
                continue;
            }
            let seq = topic.next_seq();
            match route {
                None => {
                    // Scheduled: the topic holds it until it comes due.
                    let at = message.properties.scheduled_enqueue_time.unwrap_or(now);
                    topic.fx.journal.put_body(seq, &message);
                    topic.insert_copy(SubQueue::Main, seq, message.clone(), at, true, None);
                    self.pinned.insert(seq, message);
                    self.refs.insert(seq, 1);
                }
                Some(route) => {
                    topic.fx.tally.published += 1;
                    self.fan_out(topic, seq, &message, route, now);
                }
            }
            outcomes.push(SendOutcome::Enqueued(seq));
        }
        Ok(outcomes)
    }

    /// Publishes auto-forwarded messages, each on its own (one refused message does not
    /// refuse the others) and each at most once: the topic's own lane keeps the ledger of the
    /// transfers it published (see `transfer.rs`).
    pub(crate) fn publish_transfers(
        &mut self,
        topic: &mut PartitionState,
        transfers: Vec<(super::TransferId, Arc<Message>)>,
        now: Timestamp,
    ) -> Vec<Result<SendOutcome>> {
        let mut outcomes = Vec::with_capacity(transfers.len());
        for (id, message) in transfers {
            if topic.transfers.contains(&id) {
                topic.record_transfer(id);
                outcomes.push(Ok(SendOutcome::Duplicate));
                continue;
            }
            let outcome = self.publish(topic, vec![message], now).map(|mut o| o.remove(0));
            if outcome.is_ok() {
                topic.record_transfer(id);
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    /// The routes of the subscriptions that take something of a message, by lane index, in
    /// lane order (the others are not kept: with many subscriptions, most take nothing).
    fn route(&self, message: &Message, published: PublishInfo<'_>) -> Vec<(usize, Route)> {
        let mut routes = Vec::new();
        for (i, lane) in self.lanes.iter().enumerate() {
            if lane.config.takes_messages {
                let route = lane.config.rules.route(message, published);
                if route.takes_any() {
                    routes.push((i, route));
                }
            }
        }
        routes
    }

    /// Stores the copies of a message published under `seq`: one plain copy (or a
    /// dead-letter copy) per subscription sharing the body stored here, and one message of
    /// its own per action copy.
    fn fan_out(
        &mut self,
        topic: &mut PartitionState,
        seq: SequenceNumber,
        message: &Arc<Message>,
        routes: Vec<(usize, Route)>,
        enqueued_time: Timestamp,
    ) {
        let mut uses = 0u32;
        let filtered_out = (self.lanes.len() - routes.len()) as u64;
        // Every lane not routed filtered the message out (counted per subscription at the end
        // of the cycle, in its tally).
        let mut next = 0;
        for &(i, _) in &routes {
            for lane in &mut self.lanes[next..i] {
                lane.state.fx.tally.filtered_out += 1;
            }
            next = i + 1;
        }
        for lane in &mut self.lanes[next..] {
            lane.state.fx.tally.filtered_out += 1;
        }
        for (i, route) in routes {
            let lane = &mut self.lanes[i];
            if let Some(failure) = route.failure {
                if lane.config.dead_letter_filter_errors {
                    metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => "filter").increment(1);
                    lane.state.fx.tally.dead_lettered_filter += 1;
                    lane.state.insert_copy(
                        SubQueue::DeadLetter,
                        seq,
                        message.clone(),
                        enqueued_time,
                        false,
                        Some(Aux::dead_lettered(failure.0, failure.1)),
                    );
                    uses += 1;
                }
                continue;
            }
            if route.plain {
                lane.state.insert_copy(
                    SubQueue::Main,
                    seq,
                    message.clone(),
                    enqueued_time,
                    false,
                    None,
                );
                uses += 1;
            }
            for copy in route.actions {
                // Its own number; the body it shares, and only what the action changed.
                let copy_seq = topic.next_seq();
                let changes = Aux::changed_copy(message, &copy, seq);
                lane.state.insert_copy(
                    SubQueue::Main,
                    copy_seq,
                    message.clone(),
                    enqueued_time,
                    false,
                    Some(changes),
                );
                uses += 1;
            }
        }
        if filtered_out > 0 {
            metrics::counter!(m::MESSAGES_FILTERED_OUT_TOTAL).increment(filtered_out);
        }
        if uses > 0 {
            topic.fx.journal.put_body(seq, message);
            *self.refs.entry(seq).or_default() += uses;
        } else if !self.refs.contains_key(&seq) {
            metrics::counter!(m::MESSAGES_UNMATCHED_TOTAL).increment(1);
        }
    }

    /// Publishes the topic's scheduled messages that came due (made active in the topic's
    /// lane by `process_due`). With `stop_at` (a store's write limits, see `budget.rs`) it
    /// stops, after one publish at least, before the lanes' journals together would pass it;
    /// the rest stay active in the topic's lane for the next cycle, which runs at once.
    pub(crate) fn publish_due(&mut self, topic: &mut PartitionState, stop_at: Option<Size>) {
        let due: Vec<SequenceNumber> =
            topic.index.available[SubQueue::Main].iter().copied().collect();
        let per_publish = Size::new(2 + self.lanes.len(), 256 * (2 + self.lanes.len()));
        for (i, seq) in due.into_iter().enumerate() {
            if let Some(stop_at) = stop_at {
                let size =
                    self.lanes.iter().fold(topic.fx.size(), |s, l| s.plus(l.state.fx.size()));
                if i > 0 && !size.plus(per_publish).fits(stop_at) {
                    topic.fx.more = true;
                    break;
                }
            }
            let Some(entry) = topic.take(SubQueue::Main, seq) else { continue };
            let mut entry = entry;
            topic.uncache(&mut entry);
            debug_assert_eq!(entry.state, MessageState::Active);
            let Some(message) = self.pinned.remove(&seq) else {
                tracing::warn!(%seq, "a scheduled topic message has no body in memory; dropped");
                topic.fx.released.push(seq);
                continue;
            };
            let size = message.size() as u64;
            let published = PublishInfo {
                enqueued_time: entry.enqueued_time,
                sequence_number: seq,
                size,
                ..PublishInfo::default()
            };
            let routes = self.route(&message, published);
            // The scheduled entry's use of the body ends; the copies' begin.
            topic.fx.released.push(seq);
            self.fan_out(topic, seq, &message, routes, entry.enqueued_time);
        }
    }

    /// Counts down the bodies this cycle's removals let go of, in every lane, and deletes
    /// those no copy uses any more.
    pub(crate) fn release_bodies(&mut self, topic: &mut PartitionState) {
        let mut released = std::mem::take(&mut topic.fx.released);
        for lane in &mut self.lanes {
            released.append(&mut lane.state.fx.released);
        }
        for seq in released {
            let Some(count) = self.refs.get_mut(&seq) else { continue };
            *count -= 1;
            if *count == 0 {
                self.refs.remove(&seq);
                self.pinned.remove(&seq);
                topic.fx.journal.delete_body(seq);
            }
        }
    }

    /// Rebuilds the body counts from the recovered lanes, and reads the scheduled messages'
    /// bodies back into memory.
    pub(crate) async fn recover(
        &mut self,
        topic: &PartitionState,
        store: &dyn Store,
        topic_id: EntityId,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        self.refs.clear();
        self.pinned.clear();
        let lanes = std::iter::once(topic).chain(self.lanes.iter().map(|l| &l.state));
        for state in lanes {
            for (_, messages) in state.index.messages.iter() {
                for (&seq, entry) in messages {
                    *self.refs.entry(entry.body_seq(seq)).or_default() += 1;
                }
            }
        }
        let scheduled: Vec<SequenceNumber> =
            topic.index.messages[SubQueue::Main].keys().copied().collect();
        if !scheduled.is_empty() {
            let loaded = read_bodies(store, topic_id, partition, &scheduled).await?;
            for seq in scheduled {
                let body = loaded.get(&seq).ok_or_else(|| {
                    StoreError::corrupted(format!("the body of scheduled message {seq} is missing"))
                })?;
                self.pinned.insert(seq, body.clone());
            }
        }
        Ok(())
    }
}
