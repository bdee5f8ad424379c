//! Local transactions through the public [`Broker`] API on a [`ManualClock`]: nothing is
//! visible before the commit, a rollback leaves everything (locks included) as it was, the
//! commit is one write on the via partition, the limits (100 operations, two minutes), the
//! span and partition-key rules, scheduled messages, send-via through the transfer queue, and
//! a store failure during the commit. Contract: part C of
//! `shared/protocol/topics-sessions-transactions.md`.
#![cfg(feature = "testing")]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ironbus_core::router::partition_for_key;
use ironbus_core::testing::{partition_key_prefix, FaultyStore};
use ironbus_core::transaction::{SPAN_ENTITIES, SPAN_PARTITIONS, TIMEOUT};
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{addr, guard, path, HANG_GUARD};

/// Longer than a partition's rebuild interval and the forwarder's first retry (1 s each).
const PAST_RETRY: Duration = Duration::from_secs(2);

fn msg(body: &'static str) -> Message {
    Message::new(Bytes::from_static(body.as_bytes()))
}

fn keyed(body: &'static str, key: &str) -> Message {
    let mut m = msg(body);
    m.properties.partition_key = Some(key.into());
    m
}

fn partitioned() -> QueueDescription {
    QueueDescription { enable_partitioning: true, ..QueueDescription::default() }
}

struct Fixture {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<FaultyStore>,
    memory: Arc<dyn Store>,
}

impl Fixture {
    async fn new() -> Self {
        Self::over(Arc::new(MemoryStore::new())).await
    }

    async fn over(memory: Arc<dyn Store>) -> Self {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(FaultyStore::new(memory.clone()));
        let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
            .await
            .expect("open broker");
        Fixture { broker, clock, store, memory }
    }

    async fn queue(&self, name: &str, description: QueueDescription) {
        guard(self.broker.create_queue(name, description)).await.expect("create queue");
    }

    async fn runtime(&self, name: &str) -> QueueRuntime {
        guard(self.broker.get_queue_runtime(name)).await.expect("runtime")
    }

    async fn send(&self, name: &str, message: Message) {
        guard(self.broker.send(name, vec![message])).await.expect("send");
    }

    /// Receives one message in peek-lock mode (the receiver stays open, holding the lock).
    async fn receive(&self, name: &str) -> (Receiver, ReceivedMessage) {
        let receiver =
            guard(self.broker.open_receiver(name, ReceiveMode::PeekLock)).await.expect("receiver");
        receiver.add_credit(1);
        let message = guard(receiver.recv()).await.expect("a message");
        (receiver, message)
    }

    async fn peek_bodies(&self, name: &str) -> Vec<Bytes> {
        let page = guard(self.broker.peek(name, SequenceNumber(0), 100)).await.expect("peek");
        page.into_iter().map(|m| m.message.body.clone()).collect()
    }

    async fn until<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let waited = tokio::time::timeout(HANG_GUARD, async {
            while !check().await {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "timed out waiting until {what}");
    }

    async fn settle_down(&self) {
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
    }
}

fn is_invalid(e: &BrokerError, text: &str) -> bool {
    matches!(e, BrokerError::InvalidOperation(t) if t == text)
}

#[tokio::test]
async fn sends_are_invisible_until_the_commit_and_gone_after_a_rollback() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("a"), msg("b")]).unwrap();
    assert!(f.peek_bodies("q").await.is_empty(), "not peekable before the commit");
    assert_eq!(f.runtime("q").await.total_message_count, 0, "not counted before the commit");
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(f.peek_bodies("q").await, ["a", "b"]);

    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("c")]).unwrap();
    guard(f.broker.rollback(&txn)).await;
    f.settle_down().await;
    assert_eq!(f.peek_bodies("q").await, ["a", "b"], "a rolled-back send never appears");
    // An ended transaction takes no more work and cannot commit.
    let e = f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("d")]).unwrap_err();
    assert_eq!(e, BrokerError::TransactionTimedOut);
    assert!(guard(f.broker.commit(&txn)).await.is_err());
    // A transaction without work commits.
    guard(f.broker.commit(&Transaction::new())).await.unwrap();
}

#[tokio::test]
async fn a_settlement_applies_at_commit_and_a_rollback_leaves_the_lock_with_its_receiver() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    f.send("q", msg("work")).await;
    let (_receiver, received) = f.receive("q").await;
    let token = received.lock_token().unwrap();

    let txn = Transaction::new();
    f.broker.settle_in_transaction(&txn, &addr("q"), None, token, Disposition::Complete).unwrap();
    // A retried settlement in the same transaction is no new operation and no error.
    f.broker.settle_in_transaction(&txn, &addr("q"), None, token, Disposition::Complete).unwrap();
    assert_eq!(f.runtime("q").await.active_message_count, 1, "still there until the commit");
    guard(f.broker.rollback(&txn)).await;
    // Still locked by the same receiver: another receiver does not get it...
    let other = guard(f.broker.open_receiver("q", ReceiveMode::PeekLock)).await.unwrap();
    other.add_credit(1);
    f.settle_down().await;
    assert!(other.try_recv().is_none(), "the message stays locked after a rollback");
    // ...and the same lock token settles it again, in a transaction that commits.
    let txn = Transaction::new();
    f.broker.settle_in_transaction(&txn, &addr("q"), None, token, Disposition::Complete).unwrap();
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(f.runtime("q").await.total_message_count, 0);
    let e = guard(f.broker.complete("q", token)).await.unwrap_err();
    assert_eq!(e, BrokerError::MessageLockLost, "settled by the commit");
}

#[tokio::test]
async fn a_commit_whose_lock_expired_applies_nothing() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    f.queue("out", QueueDescription::default()).await;
    f.send("q", msg("work")).await;
    let (receiver, received) = f.receive("q").await;
    drop(receiver);
    let token = received.lock_token().unwrap();
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("derived")]).unwrap();
    f.broker.settle_in_transaction(&txn, &addr("q"), None, token, Disposition::Complete).unwrap();
    f.clock.advance(QueueDescription::default().lock_duration + Duration::from_secs(1));
    let e = guard(f.broker.commit(&txn)).await.unwrap_err();
    assert!(matches!(e, BrokerError::TransactionRolledBack(_)), "{e:?}");
    assert_eq!(f.peek_bodies("q").await, ["work"], "neither the send nor the completion");
}

#[tokio::test]
async fn a_transaction_times_out_two_minutes_after_its_first_operation() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    let txn = Transaction::new();
    // A declared transaction without work does not age.
    f.clock.advance(TIMEOUT * 2);
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("a")]).unwrap();
    f.clock.advance(TIMEOUT - Duration::from_secs(1));
    assert!(!txn.is_expired(f.clock.now()));
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("b")]).unwrap();
    f.clock.advance(Duration::from_secs(1));
    assert!(txn.is_expired(f.clock.now()));
    let e = f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("c")]).unwrap_err();
    assert_eq!(e, BrokerError::TransactionTimedOut);
    assert_eq!(guard(f.broker.commit(&txn)).await.unwrap_err(), BrokerError::TransactionTimedOut);
    f.settle_down().await;
    assert!(f.peek_bodies("q").await.is_empty(), "its sends are gone");
}

#[tokio::test]
async fn at_most_100_operations_and_a_failed_operation_dooms_the_commit() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    let txn = Transaction::new();
    let batch: Vec<Message> = (0..60).map(|_| msg("m")).collect();
    f.broker.send_in_transaction(&txn, &addr("q"), None, batch).unwrap();
    let batch: Vec<Message> = (0..40).map(|_| msg("m")).collect();
    f.broker.send_in_transaction(&txn, &addr("q"), None, batch).unwrap();
    let e = f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("101")]).unwrap_err();
    assert!(matches!(&e, BrokerError::QuotaExceeded(t) if t.contains("100 messages")), "{e:?}");
    // A refused operation: the transaction can only roll back.
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("ok")]).unwrap();
    assert!(f.broker.send_in_transaction(&txn, &addr("missing"), None, vec![msg("x")]).is_err());
    assert!(txn.is_doomed());
    let e = guard(f.broker.commit(&txn)).await.unwrap_err();
    assert!(matches!(e, BrokerError::TransactionRolledBack(_)), "{e:?}");
    f.settle_down().await;
    assert!(f.peek_bodies("q").await.is_empty());
}

#[tokio::test]
async fn without_a_via_entity_a_transaction_stays_on_one_entity() {
    let f = Fixture::new().await;
    f.queue("q1", QueueDescription::default()).await;
    f.queue("q2", QueueDescription::default()).await;
    f.send("q1", msg("in")).await;
    let (_r, received) = f.receive("q1").await;
    let txn = Transaction::new();
    f.broker
        .settle_in_transaction(
            &txn,
            &addr("q1"),
            None,
            received.lock_token().unwrap(),
            Disposition::Complete,
        )
        .unwrap();
    let e = f.broker.send_in_transaction(&txn, &addr("q2"), None, vec![msg("out")]).unwrap_err();
    assert!(is_invalid(&e, SPAN_ENTITIES), "{e:?}");
    // With q1 as the via entity, a settlement on another entity is refused too.
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q2"), Some(&path("q1")), vec![msg("out")]).unwrap();
    let (_r2, other) = {
        f.send("q2", msg("elsewhere")).await;
        f.receive("q2").await
    };
    let e = f
        .broker
        .settle_in_transaction(
            &txn,
            &addr("q2"),
            Some(&path("q1")),
            other.lock_token().unwrap(),
            Disposition::Complete,
        )
        .unwrap_err();
    assert!(is_invalid(&e, SPAN_ENTITIES), "{e:?}");
}

#[tokio::test]
async fn on_a_partitioned_entity_every_send_carries_the_one_partition_key() {
    let f = Fixture::new().await;
    f.queue("p", partitioned()).await;
    // No key: refused, and the transaction can still roll back.
    let txn = Transaction::new();
    let e = f.broker.send_in_transaction(&txn, &addr("p"), None, vec![msg("nokey")]).unwrap_err();
    assert!(matches!(&e, BrokerError::InvalidOperation(t) if t.contains("partition key")), "{e:?}");
    guard(f.broker.rollback(&txn)).await;

    // Two keys: the second operation is refused and the commit with it.
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("p"), None, vec![keyed("a", "k1")]).unwrap();
    let e =
        f.broker.send_in_transaction(&txn, &addr("p"), None, vec![keyed("b", "k2")]).unwrap_err();
    assert!(is_invalid(&e, SPAN_PARTITIONS), "{e:?}");
    assert!(guard(f.broker.commit(&txn)).await.is_err());

    // One key: committed in that key's partition; a session id is a key too.
    let txn = Transaction::new();
    let mut session = msg("s");
    session.properties.session_id = Some("k1".into());
    f.broker.send_in_transaction(&txn, &addr("p"), None, vec![keyed("a", "k1"), session]).unwrap();
    guard(f.broker.commit(&txn)).await.unwrap();
    let peeked = guard(f.broker.peek("p", SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(peeked.len(), 2);
    let partitions = QueueDescription::default().partitions();
    let expected = partition_for_key("k1", partitioned().partitions().max(partitions));
    for m in &peeked {
        assert_eq!(m.sequence_number().partition(true), expected);
    }
    // A settlement of a message in another partition is refused.
    f.send("p", keyed("other", "k-elsewhere")).await;
    let receiver = guard(f.broker.open_receiver("p", ReceiveMode::PeekLock)).await.unwrap();
    receiver.add_credit(3);
    let mut foreign = None;
    for _ in 0..3 {
        let m = guard(receiver.recv()).await.unwrap();
        if m.sequence_number().partition(true) != expected {
            foreign = m.lock_token();
        }
    }
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("p"), None, vec![keyed("x", "k1")]).unwrap();
    let e = f
        .broker
        .settle_in_transaction(&txn, &addr("p"), None, foreign.unwrap(), Disposition::Complete)
        .unwrap_err();
    assert!(is_invalid(&e, SPAN_PARTITIONS), "{e:?}");
}

#[tokio::test]
async fn scheduled_and_cancelled_in_a_transaction() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    let later = f.clock.now().saturating_add(Duration::from_secs(3600));
    let mut scheduled = msg("later");
    scheduled.properties.scheduled_enqueue_time = Some(later);

    let txn = Transaction::new();
    let seqs = guard(f.broker.schedule_in_transaction(&txn, &addr("q"), vec![scheduled.clone()]))
        .await
        .unwrap();
    assert_eq!(f.runtime("q").await.scheduled_message_count, 0, "not before the commit");
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(f.runtime("q").await.scheduled_message_count, 1);
    let peeked = guard(f.broker.peek("q", SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(peeked[0].sequence_number(), seqs[0], "under the number the schedule returned");

    // Rolled back: the reserved number is given up, nothing is scheduled.
    let txn = Transaction::new();
    guard(f.broker.schedule_in_transaction(&txn, &addr("q"), vec![scheduled])).await.unwrap();
    guard(f.broker.rollback(&txn)).await;
    f.settle_down().await;
    assert_eq!(f.runtime("q").await.scheduled_message_count, 1);

    // A cancel takes effect at the commit.
    let txn = Transaction::new();
    f.broker.cancel_in_transaction(&txn, &addr("q"), &seqs).unwrap();
    assert_eq!(f.runtime("q").await.scheduled_message_count, 1);
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(f.runtime("q").await.scheduled_message_count, 0);
}

#[tokio::test]
async fn send_via_moves_the_sends_to_their_destination_after_the_commit_exactly_once() {
    let f = Fixture::new().await;
    f.queue("in", QueueDescription::default()).await;
    f.queue("out", QueueDescription::default()).await;
    f.send("in", msg("order")).await;
    let (_r, received) = f.receive("in").await;

    let txn = Transaction::new();
    let via = path("in");
    f.broker
        .settle_in_transaction(
            &txn,
            &addr("in"),
            Some(&via),
            received.lock_token().unwrap(),
            Disposition::Complete,
        )
        .unwrap();
    f.broker
        .send_in_transaction(&txn, &addr("out"), Some(&via), vec![msg("one"), msg("two")])
        .unwrap();
    assert_eq!(f.runtime("out").await.total_message_count, 0);
    guard(f.broker.commit(&txn)).await.unwrap();
    f.until("the transfers reach out", || async {
        f.runtime("out").await.active_message_count == 2
    })
    .await;
    f.until("in is empty", || async { f.runtime("in").await.transfer_message_count == 0 }).await;
    f.settle_down().await;
    assert_eq!(f.peek_bodies("out").await, ["one", "two"]);
    assert_eq!(f.runtime("in").await.total_message_count, 0);

    // A send-via link's send outside a transaction goes the same way.
    guard(f.broker.send_via(&via, &addr("out"), vec![msg("three")])).await.unwrap();
    f.until("the send-via send arrives", || async {
        f.runtime("out").await.active_message_count == 3
    })
    .await;
}

#[tokio::test]
async fn a_send_via_transfer_its_destination_refuses_goes_to_the_transfer_dead_letter_queue() {
    let f = Fixture::new().await;
    f.queue("in", QueueDescription::default()).await;
    f.queue("out", QueueDescription::default()).await;
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("out"), Some(&path("in")), vec![msg("x")]).unwrap();
    let disabled =
        QueueDescription { status: EntityStatus::SendDisabled, ..QueueDescription::default() };
    guard(f.broker.update_queue("out", disabled)).await.unwrap();
    guard(f.broker.commit(&txn)).await.unwrap();
    f.until("the transfer is dead-lettered", || async {
        f.runtime("in").await.transfer_dead_letter_message_count == 1
    })
    .await;
    let dead =
        guard(f.broker.peek("in/$Transfer/$DeadLetterQueue", SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(&dead[0].message.body[..], b"x");
    assert!(dead[0].broker.dead_letter_reason.is_some());
    assert_eq!(f.runtime("out").await.total_message_count, 0);
}

#[tokio::test]
async fn a_store_failure_during_the_commit_applies_nothing() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    f.send("q", msg("work")).await;
    let (_r, received) = f.receive("q").await;
    let txn = Transaction::new();
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("derived")]).unwrap();
    f.broker
        .settle_in_transaction(
            &txn,
            &addr("q"),
            None,
            received.lock_token().unwrap(),
            Disposition::Complete,
        )
        .unwrap();
    f.store.fail_next_writes(1);
    let e = guard(f.broker.commit(&txn)).await.unwrap_err();
    assert!(e.is_retriable() || matches!(e, BrokerError::Store(_)), "{e:?}");
    // The partition rebuilds from the store: the message is there (unlocked), nothing else.
    f.clock.advance(PAST_RETRY);
    f.until("the partition is back", || async {
        f.runtime("q").await.unavailable_partitions.is_empty()
    })
    .await;
    assert_eq!(f.peek_bodies("q").await, ["work"]);
}

#[tokio::test]
async fn session_state_set_in_a_transaction_appears_at_the_commit() {
    let f = Fixture::new().await;
    let sessions = QueueDescription { requires_session: true, ..QueueDescription::default() };
    f.queue("s", sessions).await;
    let txn = Transaction::new();
    f.broker
        .set_session_state_in_transaction(&txn, &addr("s"), "a", Some(Bytes::from_static(b"st")))
        .unwrap();
    assert_eq!(guard(f.broker.session_state("s", "a")).await.unwrap(), None);
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(guard(f.broker.session_state("s", "a")).await.unwrap().as_deref(), Some(&b"st"[..]));
}

#[tokio::test]
async fn send_via_transfers_left_by_a_restart_are_forwarded_by_the_next_start() {
    let first = Fixture::new().await;
    first.queue("in", QueueDescription::default()).await;
    first.queue("out", QueueDescription::default()).await;
    // The destination's partition cannot write: the transfer waits in `in`.
    let out = partition_key_prefix(&first.broker, "out", PartitionId(0)).unwrap();
    first.store.fail_prefix(out.to_vec());
    let txn = Transaction::new();
    first
        .broker
        .send_in_transaction(&txn, &addr("out"), Some(&path("in")), vec![msg("kept")])
        .unwrap();
    guard(first.broker.commit(&txn)).await.unwrap();
    assert_eq!(first.runtime("in").await.transfer_message_count, 1);
    first.broker.shutdown();
    let memory = first.memory.clone();
    drop(first);

    let second = Fixture::over(memory).await;
    second
        .until("the transfer reaches out", || async {
            second.runtime("out").await.active_message_count == 1
        })
        .await;
    second.settle_down().await;
    assert_eq!(second.peek_bodies("out").await, ["kept"]);
    assert_eq!(second.runtime("in").await.total_message_count, 0);
}

#[tokio::test]
async fn a_subscription_settles_and_sends_through_itself_in_one_transaction() {
    let f = Fixture::new().await;
    guard(f.broker.create_entity(&path("t"), EntityDescription::Topic(Default::default())))
        .await
        .unwrap();
    guard(f.broker.create_entity(
        &path("t/Subscriptions/s"),
        EntityDescription::Subscription(Default::default()),
    ))
    .await
    .unwrap();
    f.queue("out", QueueDescription::default()).await;
    f.send("t", msg("event")).await;
    let (_r, received) = f.receive("t/Subscriptions/s").await;

    let txn = Transaction::new();
    let via = path("t/Subscriptions/s");
    f.broker
        .settle_in_transaction(
            &txn,
            &addr("t/Subscriptions/s"),
            Some(&via),
            received.lock_token().unwrap(),
            Disposition::Complete,
        )
        .unwrap();
    f.broker.send_in_transaction(&txn, &addr("out"), Some(&via), vec![msg("reaction")]).unwrap();
    guard(f.broker.commit(&txn)).await.unwrap();
    f.until("the reaction reaches out", || async {
        f.runtime("out").await.active_message_count == 1
    })
    .await;
    f.settle_down().await;
    assert_eq!(f.peek_bodies("out").await, ["reaction"]);
    let left = guard(f.broker.peek("t/Subscriptions/s", SequenceNumber(0), 10)).await.unwrap();
    assert!(left.is_empty(), "the event was completed with the commit: {left:?}");
}

/// One `$management` or send request inside a transaction, as a client may send it: counts
/// of zero, messages without a scheduled time and unknown sequence numbers included.
#[derive(Debug, Clone)]
enum Request {
    Send { count: usize, key: Option<u8> },
    Schedule { count: usize, timed: bool, key: Option<u8> },
    Cancel { known: bool },
}

fn request() -> impl proptest::strategy::Strategy<Value = Request> {
    use proptest::prelude::*;
    let key = proptest::option::of(0u8..3);
    prop_oneof![
        (0usize..3, key.clone()).prop_map(|(count, key)| Request::Send { count, key }),
        (0usize..3, any::<bool>(), key).prop_map(|(count, timed, key)| Request::Schedule {
            count,
            timed,
            key
        }),
        any::<bool>().prop_map(|known| Request::Cancel { known }),
    ]
}

/// Whatever a client asks inside a transaction, the broker answers (never panics) and the
/// commit applies exactly what was accepted, or nothing; a rollback applies nothing.
async fn drive_transaction(partitioned_queue: bool, requests: Vec<Request>, commit: bool) {
    let f = Fixture::new().await;
    let description = if partitioned_queue { partitioned() } else { QueueDescription::default() };
    f.queue("q", description).await;
    // One message scheduled beforehand, for the cancellations that name a known number.
    let later = f.clock.now().saturating_add(Duration::from_secs(3600));
    let mut earlier = msg("earlier");
    earlier.properties.scheduled_enqueue_time = Some(later);
    let earlier = guard(f.broker.schedule("q", vec![earlier])).await.unwrap();
    let SendOutcome::Enqueued(earlier) = earlier[0] else { panic!("{earlier:?}") };

    let with_key = |mut m: Message, key: Option<u8>| {
        m.properties.partition_key = key.map(|k| format!("k{k}"));
        m
    };
    let txn = Transaction::new();
    let (mut sent, mut scheduled, mut cancelled) = (0u64, 0u64, false);
    for r in requests {
        match r {
            Request::Send { count, key } => {
                let messages = (0..count).map(|_| with_key(msg("s"), key)).collect();
                if f.broker.send_in_transaction(&txn, &addr("q"), None, messages).is_ok() {
                    sent += count as u64;
                }
            }
            Request::Schedule { count, timed, key } => {
                let messages = (0..count)
                    .map(|_| {
                        let mut m = with_key(msg("t"), key);
                        m.properties.scheduled_enqueue_time = timed.then_some(later);
                        m
                    })
                    .collect();
                let q = addr("q");
                let answer = guard(f.broker.schedule_in_transaction(&txn, &q, messages)).await;
                if let Ok(seqs) = answer {
                    assert_eq!(seqs.len(), count, "one number per scheduled message");
                    scheduled += count as u64;
                }
            }
            Request::Cancel { known } => {
                let seqs = [if known { earlier } else { SequenceNumber(1 << 40) }];
                if f.broker.cancel_in_transaction(&txn, &addr("q"), &seqs).is_ok() && known {
                    cancelled = true;
                }
            }
        }
    }
    let applied = if commit {
        guard(f.broker.commit(&txn)).await.is_ok()
    } else {
        guard(f.broker.rollback(&txn)).await;
        false
    };
    f.settle_down().await;
    let runtime = f.runtime("q").await;
    if applied {
        assert_eq!(runtime.active_message_count, sent);
        assert_eq!(runtime.scheduled_message_count, 1 + scheduled - u64::from(cancelled));
    } else {
        assert_eq!(runtime.active_message_count, 0);
        assert_eq!(runtime.scheduled_message_count, 1);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn transactional_requests_never_panic_and_commit_what_was_accepted(
        partitioned_queue in proptest::prelude::any::<bool>(),
        requests in proptest::collection::vec(request(), 0..6),
        commit in proptest::prelude::any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(drive_transaction(partitioned_queue, requests, commit));
    }
}

#[tokio::test]
async fn an_empty_schedule_in_a_fresh_transaction_is_refused() {
    let f = Fixture::new().await;
    f.queue("q", QueueDescription::default()).await;
    let txn = Transaction::new();
    let e = guard(f.broker.schedule_in_transaction(&txn, &addr("q"), vec![])).await.unwrap_err();
    assert!(matches!(e, BrokerError::InvalidArgument { field: "messages", .. }), "{e:?}");
    // The transaction is still usable.
    f.broker.send_in_transaction(&txn, &addr("q"), None, vec![msg("a")]).unwrap();
    guard(f.broker.commit(&txn)).await.unwrap();
    assert_eq!(f.peek_bodies("q").await, ["a"]);
}
