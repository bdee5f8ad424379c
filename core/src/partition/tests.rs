//! A seeded model test of [`PartitionState`]: random commands (sends, scheduled sends, credit,
//! settlements of every kind, lock renewals, deferred receives, peeks, cancels, batch deletes,
//! time passing) are applied to the state as the actor applies them, and to a naive model of
//! Service Bus's rules; after each step the deliveries, the answers and the whole index are
//! compared.
//!
//! `cargo test` runs a few fixed seeds. More: `IRONBUS_MODEL_SEEDS=1..500` (a range, a count
//! such as `200`, or a comma-separated list of both), and `IRONBUS_MODEL_STEPS` for longer runs.
//! A failure names its seed and step.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::bodies::BodyCache;
use super::journal::Journal;
use super::sessions::SessionId;
use super::state::PartitionState;
use super::{Command, PartitionCounts, SendOutcome};
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result, SessionError};
use crate::message::{ApplicationProperties, Disposition, Message, MessageState, ReceivedMessage};
use crate::receiver::ReceiverShared;
use crate::types::{LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

const FIXED_SEEDS: [u64; 4] = [0x1b05, 7, 42, 2026];
const STEPS: usize = 600;
const LOCK: Duration = Duration::from_secs(30);
const MAX_DELIVERIES: u32 = 3;
const P: PartitionId = PartitionId(0);

/// splitmix64: enough randomness for choosing commands, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A message as the model sees it.
#[derive(Debug, Clone)]
struct Msg {
    queue: SubQueue,
    state: MessageState,
    delivery_count: u32,
    expires_at: Timestamp,
    /// When a scheduled message comes due.
    due: Option<Timestamp>,
    lock: Option<(LockToken, Timestamp)>,
}

/// Service Bus's rules, written as plainly as possible.
#[derive(Debug, Default)]
struct Model {
    messages: BTreeMap<SequenceNumber, Msg>,
    counter: u64,
    /// Unused credit of the receiver of each sub-queue (index by `SubQueue::index`).
    credit: [u32; 2],
    dead_letter_on_expiry: bool,
}

impl Model {
    fn seq(counter: u64) -> SequenceNumber {
        SequenceNumber::new(false, P, counter)
    }

    fn locked(&self, queue: SubQueue, token: LockToken) -> Result<SequenceNumber> {
        self.messages
            .iter()
            .find(|(_, m)| m.queue == queue && m.lock.is_some_and(|(t, _)| t == token))
            .map(|(s, _)| *s)
            .ok_or(BrokerError::MessageLockLost)
    }

    fn unlock(&mut self, seq: SequenceNumber) {
        self.messages.get_mut(&seq).expect("locked message exists").lock = None;
    }

    fn dead_letter(&mut self, seq: SequenceNumber) {
        let m = self.messages.get_mut(&seq).expect("dead-lettered message exists");
        m.queue = SubQueue::DeadLetter;
        m.state = MessageState::Active;
        m.lock = None;
    }

    /// What happens to a message whose time ran out: dead-lettered or gone.
    fn expire(&mut self, seq: SequenceNumber) {
        if self.dead_letter_on_expiry {
            self.dead_letter(seq);
        } else {
            self.messages.remove(&seq);
        }
    }

    /// Expires every unlocked, unscheduled message of the main queue whose time has come.
    fn expire_due(&mut self, now: Timestamp) {
        let due: Vec<_> = self
            .messages
            .iter()
            .filter(|(_, m)| {
                m.queue == SubQueue::Main
                    && m.lock.is_none()
                    && m.state != MessageState::Scheduled
                    && m.expires_at <= now
            })
            .map(|(s, _)| *s)
            .collect();
        for seq in due {
            self.expire(seq);
        }
    }

    /// A failed delivery (abandon, lock expiry, deferral): counted (but in the dead-letter
    /// queue), and dead-lettered at the limit.
    fn failed_delivery(&mut self, seq: SequenceNumber) {
        let m = self.messages.get_mut(&seq).expect("message exists");
        m.lock = None;
        if m.queue != SubQueue::DeadLetter {
            m.delivery_count += 1;
        }
        if m.queue == SubQueue::Main && m.delivery_count >= MAX_DELIVERIES {
            self.dead_letter(seq);
        }
    }

    fn process_due(&mut self, now: Timestamp) {
        let expired: Vec<_> = self
            .messages
            .iter()
            .filter(|(_, m)| m.lock.is_some_and(|(_, until)| until <= now))
            .map(|(s, _)| *s)
            .collect();
        for seq in expired {
            self.failed_delivery(seq);
        }
        for m in self.messages.values_mut() {
            if m.state == MessageState::Scheduled && m.due.is_some_and(|due| due <= now) {
                m.state = MessageState::Active;
            }
        }
        self.expire_due(now);
    }

    /// The messages a receiver with credit gets, in order.
    fn deliver(&mut self, queue: SubQueue) -> Vec<SequenceNumber> {
        let mut delivered = Vec::new();
        for (&seq, m) in &self.messages {
            if self.credit[queue.index()] == 0 {
                break;
            }
            if m.queue == queue && m.state == MessageState::Active && m.lock.is_none() {
                self.credit[queue.index()] -= 1;
                delivered.push(seq);
            }
        }
        delivered
    }

    fn counts(&self) -> PartitionCounts {
        let mut c = PartitionCounts::default();
        for m in self.messages.values() {
            match (m.queue, m.state) {
                (SubQueue::DeadLetter, _) => c.dead_lettered += 1,
                (SubQueue::Main, MessageState::Active) => c.active += 1,
                (SubQueue::Main, MessageState::Deferred) => c.deferred += 1,
                (SubQueue::Main, MessageState::Scheduled) => c.scheduled += 1,
                (SubQueue::Transfer, _) => c.transfer += 1,
                (SubQueue::SendVia, _) => {
                    c.transfer += 1;
                    c.send_via += 1;
                }
                (SubQueue::TransferDeadLetter, _) => c.transfer_dead_lettered += 1,
            }
        }
        c
    }
}

/// The state under test, driven as the actor drives it.
struct Harness {
    state: PartitionState,
    receivers: [Arc<ReceiverShared>; 2],
    /// Every body sent, standing in for the store's body records.
    bodies: HashMap<SequenceNumber, Arc<Message>>,
    now: Timestamp,
}

impl Harness {
    fn new(description: QueueDescription, cache_bytes: u64, dlq_mode: ReceiveMode) -> Self {
        let cache = Arc::new(BodyCache::new(cache_bytes));
        let journal = Journal::new(1, P);
        let mut state = PartitionState::new(journal, P, Arc::new(description), cache);
        let receivers = [
            Arc::new(ReceiverShared::new(1, ReceiveMode::PeekLock, SubQueue::Main)),
            Arc::new(ReceiverShared::new(2, dlq_mode, SubQueue::DeadLetter)),
        ];
        for r in &receivers {
            state.attach(r.clone());
        }
        Harness { state, receivers, bodies: HashMap::new(), now: Timestamp::from_millis(1 << 40) }
    }

    /// One cycle as the actor runs it, with a write that succeeds; returns the deliveries.
    fn cycle(&mut self, commands: Vec<Command>) -> [Vec<ReceivedMessage>; 2] {
        let now = self.now;
        self.state.process_due(now);
        for command in commands {
            assert!(self.state.apply(command, now));
        }
        self.state.deliver_available(now);
        self.state.end_cycle();
        if let Some(reads) = self.state.body_reads() {
            let loaded = reads
                .wanted
                .iter()
                .filter_map(|s| Some((*s, self.bodies.get(s)?.clone())))
                .collect();
            self.state.fill_bodies(reads, &loaded).expect("every body needed was sent");
        }
        drop(self.state.fx.journal.take());
        self.state.fx.probe = false;
        self.state.fx.complete(&Ok(()));
        self.state.drop_transient_bodies();
        [self.receivers[0].take_buffered(), self.receivers[1].take_buffered()]
    }

    /// Runs `make`'s command in a cycle and returns its answer and the cycle's deliveries.
    fn ask<T>(
        &mut self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
    ) -> (Result<T>, [Vec<ReceivedMessage>; 2]) {
        let (tx, mut rx) = oneshot::channel();
        let delivered = self.cycle(vec![make(tx)]);
        (rx.try_recv().expect("answered in the cycle"), delivered)
    }
}

fn outcome_kind<T>(r: &Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(BrokerError::MessageNotFound(seq)) => format!("not found {seq}"),
        Err(e) => format!("{e:?}").split(['(', ' ']).next().unwrap_or_default().to_owned(),
    }
}

fn properties() -> ApplicationProperties {
    ApplicationProperties::new()
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let dead_letter_on_expiry = rng.chance(50);
    let description = QueueDescription {
        lock_duration: LOCK,
        max_delivery_count: MAX_DELIVERIES,
        dead_lettering_on_message_expiration: dead_letter_on_expiry,
        ..QueueDescription::default()
    };
    let cache_bytes = if rng.chance(50) { u64::MAX / 2 } else { 0 };
    let dlq_mode =
        if rng.chance(50) { ReceiveMode::PeekLock } else { ReceiveMode::ReceiveAndDelete };
    let mut h = Harness::new(description, cache_bytes, dlq_mode);
    let mut model = Model { dead_letter_on_expiry, ..Model::default() };
    let mut tokens: Vec<(SubQueue, LockToken)> = Vec::new();

    for step in 0..steps {
        let at = format!("seed {seed} step {step}");
        let queue = if rng.chance(75) { SubQueue::Main } else { SubQueue::DeadLetter };
        let delivered = match rng.below(100) {
            // Send one to three messages, some with a TTL, some scheduled.
            0..=24 => {
                let n = 1 + rng.below(3) as usize;
                let mut messages = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut m =
                        Message::new(format!("m{}", model.counter + 1 + messages.len() as u64));
                    let ttl = Duration::from_millis(1000 * rng.below(60) + rng.below(1000));
                    let scheduled = rng.chance(20).then(|| {
                        Timestamp::from_millis(
                            h.now.as_millis() + 1000 * (1 + rng.below(40) as i64),
                        )
                    });
                    m.properties.time_to_live = Some(ttl);
                    m.properties.scheduled_enqueue_time = scheduled;
                    messages.push(Arc::new(m));
                }
                let sent = messages.clone();
                let (outcome, delivered) = h.ask(|reply| Command::Send { messages, reply });
                let outcome = outcome.expect(&at);
                model.process_due(h.now);
                for (message, outcome) in sent.into_iter().zip(outcome) {
                    model.counter += 1;
                    let seq = Model::seq(model.counter);
                    assert_eq!(outcome, SendOutcome::Enqueued(seq), "{at}");
                    let start = message.properties.scheduled_enqueue_time.unwrap_or(h.now);
                    let expires_at =
                        start.saturating_add(message.properties.time_to_live.expect("set"));
                    let due = (start > h.now).then_some(start);
                    let state =
                        if due.is_some() { MessageState::Scheduled } else { MessageState::Active };
                    h.bodies.insert(seq, message);
                    let msg = Msg {
                        queue: SubQueue::Main,
                        state,
                        delivery_count: 0,
                        expires_at,
                        due,
                        lock: None,
                    };
                    model.messages.insert(seq, msg);
                }
                model.expire_due(h.now);
                delivered
            }
            // Credit for a receiver.
            25..=39 => {
                let n = 1 + rng.below(4) as u32;
                h.receivers[queue.index()].grant(n);
                model.credit[queue.index()] += n;
                model.process_due(h.now);
                h.cycle(Vec::new())
            }
            // Settle a lock we were given (maybe settled or expired since), or a made-up one.
            40..=59 => {
                let token = match tokens.len() {
                    0 => LockToken::generate(P),
                    n if rng.chance(90) => tokens[rng.below(n as u64) as usize].1,
                    _ => LockToken::generate(P),
                };
                let disposition = match rng.below(5) {
                    0 | 1 => Disposition::Complete,
                    2 => Disposition::Abandon { properties: properties() },
                    3 => {
                        if rng.chance(50) {
                            Disposition::Release
                        } else {
                            Disposition::Defer { properties: properties() }
                        }
                    }
                    _ => Disposition::DeadLetter {
                        reason: Some("test".into()),
                        description: None,
                        properties: properties(),
                    },
                };
                model.process_due(h.now);
                let expected = model.locked(queue, token).and_then(|seq| {
                    if queue == SubQueue::DeadLetter
                        && matches!(disposition, Disposition::DeadLetter { .. })
                    {
                        return Err(BrokerError::InvalidOperation(String::new()));
                    }
                    Ok(seq)
                });
                let expected_kind = outcome_kind(&expected);
                if let Ok(seq) = expected {
                    match &disposition {
                        Disposition::Complete => {
                            model.messages.remove(&seq);
                        }
                        Disposition::Abandon { .. } => model.failed_delivery(seq),
                        Disposition::Release => model.unlock(seq),
                        Disposition::Defer { .. } => {
                            model.messages.get_mut(&seq).expect("locked").state =
                                MessageState::Deferred;
                            model.failed_delivery(seq);
                        }
                        Disposition::DeadLetter { .. } => model.dead_letter(seq),
                    }
                    model.expire_due(h.now);
                }
                let items = vec![(token, disposition)];
                let (outcome, delivered) = h.ask(|reply| Command::Settle { queue, items, reply });
                let outcome = outcome.expect(&at);
                assert_eq!(outcome.len(), 1, "{at}");
                assert_eq!(outcome_kind(&outcome[0]), expected_kind, "{at}: settle outcome");
                delivered
            }
            // Renew a lock.
            60..=64 => {
                let token = match tokens.len() {
                    0 => LockToken::generate(P),
                    n => tokens[rng.below(n as u64) as usize].1,
                };
                model.process_due(h.now);
                let expected = model.locked(queue, token);
                let expected_until = h.now.saturating_add(LOCK);
                if let Ok(seq) = expected {
                    model.messages.get_mut(&seq).expect("locked").lock =
                        Some((token, expected_until));
                }
                let (outcome, delivered) =
                    h.ask(|reply| Command::RenewLock { queue, token, reply });
                assert_eq!(outcome_kind(&outcome), outcome_kind(&expected), "{at}: renew");
                if let Ok(until) = outcome {
                    assert_eq!(until, expected_until, "{at}");
                }
                delivered
            }
            // Receive deferred messages by sequence number.
            65..=72 => {
                let mode = if rng.chance(70) {
                    ReceiveMode::PeekLock
                } else {
                    ReceiveMode::ReceiveAndDelete
                };
                // Sometimes the same number twice: it is handed out once.
                let mut seqs = Vec::new();
                let mut unique = Vec::new();
                let deferred: Vec<_> = model
                    .messages
                    .iter()
                    .filter(|(_, m)| m.queue == queue && m.state == MessageState::Deferred)
                    .map(|(s, _)| *s)
                    .collect();
                for _ in 0..1 + rng.below(3) {
                    let seq = match deferred.len() {
                        n if n > 0 && rng.chance(80) => deferred[rng.below(n as u64) as usize],
                        _ => Model::seq(1 + rng.below(model.counter.max(1) + 1)),
                    };
                    seqs.push(seq);
                    if !unique.contains(&seq) {
                        unique.push(seq);
                    }
                }
                model.process_due(h.now);
                let missing = seqs.iter().find(|s| {
                    !model.messages.get(s).is_some_and(|m| {
                        m.queue == queue && m.state == MessageState::Deferred && m.lock.is_none()
                    })
                });
                let expected: Result<()> = match missing {
                    Some(&seq) => Err(BrokerError::MessageNotFound(seq)),
                    None => Ok(()),
                };
                let (outcome, delivered) = h.ask(|reply| Command::ReceiveDeferred {
                    queue,
                    sequence_numbers: seqs.clone(),
                    mode,
                    reply,
                });
                assert_eq!(outcome_kind(&outcome), outcome_kind(&expected), "{at}: deferred");
                if let Ok(received) = outcome {
                    let got: Vec<_> = received.iter().map(|m| m.broker.sequence_number).collect();
                    assert_eq!(got, unique, "{at}");
                    for r in received {
                        let seq = r.broker.sequence_number;
                        assert_eq!(r.broker.state, MessageState::Deferred, "{at}");
                        assert_eq!(r.message.body, h.bodies[&seq].body, "{at}");
                        match r.lock {
                            Some(lock) => {
                                tokens.push((queue, lock.token));
                                let m = model.messages.get_mut(&seq).expect("received");
                                m.lock = Some((lock.token, lock.locked_until));
                            }
                            None => {
                                model.messages.remove(&seq);
                            }
                        }
                    }
                }
                delivered
            }
            // Peek.
            73..=79 => {
                let from = Model::seq(rng.below(model.counter + 2));
                let max = 1 + rng.below(5) as usize;
                model.process_due(h.now);
                let (outcome, delivered) = h.ask(|reply| Command::Peek { queue, from, max, reply });
                let peeked = outcome.expect(&at);
                let expected: Vec<_> = model
                    .messages
                    .range(from..)
                    .filter(|(_, m)| m.queue == queue)
                    .take(max)
                    .map(|(s, m)| (*s, m.delivery_count))
                    .collect();
                let got: Vec<_> = peeked
                    .iter()
                    .map(|m| (m.broker.sequence_number, m.broker.delivery_count))
                    .collect();
                assert_eq!(got, expected, "{at}: peek");
                for m in &peeked {
                    assert!(m.lock.is_none(), "{at}: a peek locks nothing");
                    assert_eq!(m.message.body, h.bodies[&m.broker.sequence_number].body, "{at}");
                }
                delivered
            }
            // Cancel scheduled messages (and some that are not).
            80..=84 => {
                let seqs = vec![Model::seq(1 + rng.below(model.counter.max(1)))];
                model.process_due(h.now);
                for seq in &seqs {
                    if model.messages.get(seq).is_some_and(|m| {
                        m.queue == SubQueue::Main && m.state == MessageState::Scheduled
                    }) {
                        model.messages.remove(seq);
                    }
                }
                let (outcome, delivered) =
                    h.ask(|reply| Command::Cancel { sequence_numbers: seqs, reply });
                outcome.expect(&at);
                delivered
            }
            // Batch delete (no cutoff: `state/purge.rs`'s rule on the model's messages).
            88..=89 => {
                let max = 1 + rng.below(4) as usize;
                model.process_due(h.now);
                let doomed: Vec<_> = model
                    .messages
                    .iter()
                    .filter(|(_, m)| {
                        m.queue == queue && m.state != MessageState::Scheduled && m.lock.is_none()
                    })
                    .map(|(s, _)| *s)
                    .take(max)
                    .collect();
                for seq in &doomed {
                    model.messages.remove(seq);
                }
                let (outcome, delivered) = h.ask(|reply| Command::DeleteMessages {
                    queue,
                    max,
                    before: Timestamp::MAX,
                    session: None,
                    reply,
                });
                assert_eq!(outcome.expect(&at), doomed.len() as u64, "{at}: deleted");
                delivered
            }
            // Counts.
            85..=87 => {
                model.process_due(h.now);
                let (outcome, delivered) = h.ask(|reply| Command::Counts { reply });
                let counts = outcome.expect(&at);
                assert_eq!(
                    PartitionCounts {
                        size_bytes: 0,
                        incoming_total: 0,
                        outgoing_total: 0,
                        ..counts
                    },
                    model.counts(),
                    "{at}"
                );
                delivered
            }
            // Time passes: locks, schedules and TTLs come due.
            _ => {
                h.now = h.now.saturating_add(Duration::from_millis(rng.below(20_000)));
                model.process_due(h.now);
                h.cycle(Vec::new())
            }
        };

        // Deliveries: what the model's receivers with credit get, in order (the model has no
        // forwarding: its messages stay in the main and dead-letter queues).
        for queue in [SubQueue::Main, SubQueue::DeadLetter] {
            let expected = model.deliver(queue);
            let got: Vec<_> =
                delivered[queue.index()].iter().map(|m| m.broker.sequence_number).collect();
            assert_eq!(got, expected, "{at}: deliveries from {queue:?}");
            for r in &delivered[queue.index()] {
                let seq = r.broker.sequence_number;
                let m = model.messages.get_mut(&seq).expect("delivered message exists");
                assert_eq!(r.broker.delivery_count, m.delivery_count, "{at}: delivery count");
                assert_eq!(r.message.body, h.bodies[&seq].body, "{at}: body");
                match r.lock {
                    Some(lock) => {
                        assert_eq!(lock.locked_until, h.now.saturating_add(LOCK), "{at}");
                        m.lock = Some((lock.token, lock.locked_until));
                        tokens.push((queue, lock.token));
                    }
                    None => {
                        model.messages.remove(&seq);
                    }
                }
            }
        }
        assert_index_matches(&h.state, &model, &at);
    }
}

/// The whole index against the model: which messages each sub-queue holds, their states,
/// counts and locks.
fn assert_index_matches(state: &PartitionState, model: &Model, at: &str) {
    for queue in SubQueue::ALL {
        let got: Vec<_> = state.index.messages[queue]
            .iter()
            .map(|(s, e)| {
                (*s, e.state, e.delivery_count, e.lock().map(|l| (l.token, l.locked_until)))
            })
            .collect();
        let expected: Vec<_> = model
            .messages
            .iter()
            .filter(|(_, m)| m.queue == queue)
            .map(|(s, m)| (*s, m.state, m.delivery_count, m.lock))
            .collect();
        assert_eq!(got, expected, "{at}: {queue:?}");
    }
    let counts = state.counts();
    assert_eq!(
        PartitionCounts { size_bytes: 0, incoming_total: 0, outgoing_total: 0, ..counts },
        model.counts(),
        "{at}: counts"
    );
}

/// Seeds from `IRONBUS_MODEL_SEEDS`: `N` (seeds 0..N), `A..B`, or a comma-separated list.
fn seeds_from_env() -> Option<Vec<u64>> {
    let spec = std::env::var("IRONBUS_MODEL_SEEDS").ok()?;
    let mut seeds = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u64>(), b.parse::<u64>());
                seeds.extend(a.expect("seed range start")..b.expect("seed range end"));
            }
            None if spec.contains(',') => seeds.push(part.parse().expect("seed")),
            None => seeds.extend(0..part.parse::<u64>().expect("seed count")),
        }
    }
    Some(seeds)
}

#[test]
fn partition_state_follows_the_model() {
    let steps = std::env::var("IRONBUS_MODEL_STEPS")
        .ok()
        .map_or(STEPS, |s| s.parse().expect("IRONBUS_MODEL_STEPS is a number"));
    let seeds = seeds_from_env().unwrap_or_else(|| FIXED_SEEDS.to_vec());
    for seed in seeds {
        run(seed, steps);
    }
}

// ---- sessions ----

/// The sessions the session model sends to.
const SESSIONS: [&str; 3] = ["a", "b", "c"];

/// A message of a session, as the session model sees it.
#[derive(Debug)]
struct SessionMsg {
    session: usize,
    deferred: bool,
    delivery_count: u32,
    lock: Option<LockToken>,
}

/// A session receiver the session model drives.
struct Slot {
    shared: Arc<ReceiverShared>,
    session: usize,
    credit: u32,
}

/// Session rules, written plainly: one holder per session, delivery of a session's lowest
/// available message first, expiry counts a delivery for the held messages, release does not.
#[derive(Debug, Default)]
struct SessionModel {
    messages: BTreeMap<SequenceNumber, SessionMsg>,
    counter: u64,
    /// Each session's holder (receiver id) and lock expiry.
    holders: [Option<(u64, Timestamp)>; 3],
}

impl SessionModel {
    fn first_available(&self, session: usize) -> Option<SequenceNumber> {
        self.messages
            .iter()
            .find(|(_, m)| m.session == session && !m.deferred && m.lock.is_none())
            .map(|(s, _)| *s)
    }

    /// The unlocked session whose first available message is oldest.
    fn next_ready(&self) -> Option<usize> {
        (0..SESSIONS.len())
            .filter(|s| self.holders[*s].is_none())
            .filter_map(|s| Some((self.first_available(s)?, s)))
            .min()
            .map(|(_, s)| s)
    }

    fn release(&mut self, session: usize, expired: bool) {
        self.holders[session] = None;
        for m in self.messages.values_mut().filter(|m| m.session == session) {
            if m.lock.take().is_some() && expired {
                m.delivery_count += 1;
            }
        }
    }
}

/// Sends a session command in a cycle and returns its answer.
fn ask_session<T>(
    h: &mut Harness,
    make: impl FnOnce(oneshot::Sender<Result<T, SessionError>>) -> Command,
) -> Result<T, SessionError> {
    let (tx, mut rx) = oneshot::channel();
    h.cycle(vec![make(tx)]);
    rx.try_recv().expect("answered in the cycle")
}

fn run_sessions(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let description = QueueDescription {
        lock_duration: LOCK,
        max_delivery_count: 1000,
        requires_session: true,
        ..QueueDescription::default()
    };
    // The harness's plain receivers never get credit: a session entity has none.
    let mut h = Harness::new(description, u64::MAX / 2, ReceiveMode::PeekLock);
    let mut model = SessionModel::default();
    let mut slots: Vec<Slot> = Vec::new();
    let mut next_id = 100;
    // Lock tokens handed out, with their message.
    let mut held: Vec<(LockToken, SequenceNumber)> = Vec::new();
    let (mut deliveries, mut expirations) = (0, 0);

    for step in 0..steps {
        let at = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..=29 => {
                let s = rng.below(3) as usize;
                let message = Arc::new(Message::new("x").with_session_id(SESSIONS[s]));
                let messages = vec![message.clone()];
                let (outcome, _) = h.ask(|reply| Command::Send { messages, reply });
                model.counter += 1;
                let seq = Model::seq(model.counter);
                assert_eq!(outcome.expect(&at), vec![SendOutcome::Enqueued(seq)], "{at}");
                h.bodies.insert(seq, message);
                let m = SessionMsg { session: s, deferred: false, delivery_count: 0, lock: None };
                model.messages.insert(seq, m);
            }
            30..=47 => {
                let named = rng.chance(50).then(|| rng.below(3) as usize);
                let shared =
                    Arc::new(ReceiverShared::new(next_id, ReceiveMode::PeekLock, SubQueue::Main));
                next_id += 1;
                let receiver = shared.clone();
                let session = named.map(|s| SessionId::from(SESSIONS[s]));
                let outcome = ask_session(&mut h, |reply| Command::AcceptSession {
                    session,
                    receiver,
                    reply,
                });
                let expected = match named {
                    Some(s) if model.holders[s].is_some() => None,
                    Some(s) => Some(s),
                    None => model.next_ready(),
                };
                match (named, expected, outcome) {
                    (Some(_), None, Err(SessionError::CannotBeLocked { .. })) => {}
                    (None, None, Ok(None)) => {}
                    (_, Some(s), Ok(Some(grant))) => {
                        assert_eq!(&*grant.session, SESSIONS[s], "{at}");
                        assert_eq!(grant.locked_until, h.now.saturating_add(LOCK), "{at}");
                        model.holders[s] = Some((shared.id, grant.locked_until));
                        slots.push(Slot { shared, session: s, credit: 0 });
                    }
                    (named, expected, outcome) => {
                        panic!("{at}: accept {named:?}: expected {expected:?}, got {outcome:?}")
                    }
                }
            }
            48..=62 if !slots.is_empty() => {
                let slot = rng.below(slots.len() as u64) as usize;
                let n = 1 + rng.below(3) as u32;
                slots[slot].shared.grant(n);
                slots[slot].credit += n;
                h.cycle(vec![Command::Deliver]);
            }
            63..=79 if !held.is_empty() => {
                let (token, seq) = held.swap_remove(rng.below(held.len() as u64) as usize);
                let (disposition, kind) = match rng.below(3) {
                    0 => (Disposition::Complete, 0),
                    1 => (Disposition::Abandon { properties: properties() }, 1),
                    _ => (Disposition::Defer { properties: properties() }, 2),
                };
                let items = vec![(token, disposition)];
                let (outcome, _) =
                    h.ask(|reply| Command::Settle { queue: SubQueue::Main, items, reply });
                let outcome = outcome.expect(&at).pop().expect(&at);
                let locked = model.messages.get(&seq).is_some_and(|m| m.lock == Some(token));
                assert_eq!(outcome.is_ok(), locked, "{at}: settle {seq:?}: {outcome:?}");
                if locked {
                    match kind {
                        0 => drop(model.messages.remove(&seq)),
                        _ => {
                            let m = model.messages.get_mut(&seq).expect(&at);
                            m.lock = None;
                            // An abandon and a deferral each count the delivery.
                            m.delivery_count += 1;
                            m.deferred |= kind == 2;
                        }
                    }
                }
            }
            80..=85 if !slots.is_empty() => {
                let slot = slots.remove(rng.below(slots.len() as u64) as usize);
                slot.shared.close();
                model.release(slot.session, false);
                h.cycle(vec![Command::Detach(slot.shared.id)]);
            }
            86..=90 if !slots.is_empty() => {
                let slot = &slots[rng.below(slots.len() as u64) as usize];
                let (holder, session) = (slot.shared.id, slot.session);
                let outcome = ask_session(&mut h, |reply| Command::RenewSession { holder, reply });
                let until = h.now.saturating_add(LOCK);
                assert_eq!(outcome, Ok(until), "{at}");
                model.holders[session] = Some((holder, until));
            }
            _ => {
                h.now = h.now.saturating_add(Duration::from_secs(rng.below(25)));
                // Session locks that expired by now are released first in the cycle, counting
                // a delivery for their messages; their holders lose them.
                let mut lost = Vec::new();
                for s in 0..SESSIONS.len() {
                    if let Some((holder, until)) = model.holders[s] {
                        if until <= h.now {
                            model.release(s, true);
                            let slot = slots.iter().position(|x| x.shared.id == holder);
                            lost.push(slots.remove(slot.expect(&at)));
                        }
                    }
                }
                h.cycle(Vec::new());
                for slot in lost {
                    assert!(slot.shared.is_lost(), "{at}: the holder loses its session");
                    expirations += 1;
                }
            }
        }
        // What each holder got this step: its session's lowest available messages, in order,
        // as far as its credit goes (holders in the order they accepted).
        for slot in &mut slots {
            let got = slot.shared.take_buffered();
            for m in got {
                let expected = model.first_available(slot.session);
                assert_eq!(Some(m.sequence_number()), expected, "{at}: delivery order");
                assert!(slot.credit > 0, "{at}: delivered without credit");
                slot.credit -= 1;
                let token = m.lock.expect("peek-lock").token;
                let until = model.holders[slot.session].expect(&at).1;
                assert_eq!(m.lock.map(|l| l.locked_until), Some(until), "{at}: session lock");
                let entry = model.messages.get_mut(&m.sequence_number()).expect(&at);
                assert_eq!(m.broker.delivery_count, entry.delivery_count, "{at}");
                entry.lock = Some(token);
                held.push((token, m.sequence_number()));
                deliveries += 1;
            }
            if slot.credit > 0 {
                assert_eq!(model.first_available(slot.session), None, "{at}: credit left unused");
            }
        }
        // The index agrees with the model, and so does accept-next's choice.
        let main = &h.state.index.messages[SubQueue::Main];
        assert_eq!(main.len(), model.messages.len(), "{at}");
        for (seq, m) in &model.messages {
            let entry = main.get(seq).expect(&at);
            assert_eq!(entry.delivery_count, m.delivery_count, "{at}: {seq:?}");
            assert_eq!(entry.lock().map(|l| l.token), m.lock, "{at}: {seq:?}");
            assert_eq!(entry.session().map(|s| &**s), Some(SESSIONS[m.session]), "{at}");
        }
        let sessions = h.state.index.sessions.as_deref().expect("a session index");
        assert_eq!(
            sessions.next_ready().map(|s| s.to_string()),
            model.next_ready().map(|s| SESSIONS[s].to_string()),
            "{at}: next ready"
        );
    }
    assert!(
        deliveries > 0 && expirations > 0,
        "seed {seed}: {deliveries} deliveries, {expirations} expirations"
    );
}

#[test]
fn session_state_follows_the_session_model() {
    let steps = std::env::var("IRONBUS_MODEL_STEPS")
        .ok()
        .map_or(STEPS, |s| s.parse().expect("IRONBUS_MODEL_STEPS is a number"));
    let seeds = seeds_from_env().unwrap_or_else(|| FIXED_SEEDS.to_vec());
    for seed in seeds {
        run_sessions(seed, steps);
    }
}
