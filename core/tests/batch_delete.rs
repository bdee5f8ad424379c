//! Batch delete (`Broker::delete_messages`, Service Bus's `batch-delete-messages`) through the
//! public API on a virtual clock: the enqueued-time cutoff, the count cap, which messages are
//! taken (active and deferred; never locked or scheduled ones), dead-letter queues,
//! partitioned entities, sessions, subscriptions, the argument checks, and that what it
//! deletes is gone from the store too.

use std::sync::Arc;
use std::time::Duration;

use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{guard, path};

const QUEUE: &str = "q";
const DLQ: &str = "q/$DeadLetterQueue";

struct Fixture {
    broker: Broker,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
}

async fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
        .await
        .unwrap();
    Fixture { broker, store, clock }
}

async fn with_queue(description: QueueDescription) -> Fixture {
    let f = fixture().await;
    guard(f.broker.create_queue(QUEUE, description)).await.unwrap();
    f
}

impl Fixture {
    async fn send(&self, address: &str, messages: Vec<Message>) -> Vec<SequenceNumber> {
        let outcomes = guard(self.broker.send(address, messages)).await.unwrap();
        outcomes
            .into_iter()
            .map(|o| match o {
                SendOutcome::Enqueued(seq) => seq,
                SendOutcome::Duplicate => panic!("unexpected duplicate"),
            })
            .collect()
    }

    async fn send_n(&self, address: &str, n: usize) -> Vec<SequenceNumber> {
        self.send(address, (0..n).map(|i| Message::new(format!("m{i}"))).collect()).await
    }

    async fn delete(&self, address: &str, max: usize, before: Timestamp) -> u64 {
        guard(self.broker.delete_messages(address, max, before, None)).await.unwrap()
    }

    /// Every message `address` holds, peeked, in sequence order.
    async fn peek_all(&self, address: &str) -> Vec<SequenceNumber> {
        let mut all = Vec::new();
        let mut from = SequenceNumber(0);
        loop {
            let page = guard(self.broker.peek(address, from, 100)).await.unwrap();
            let Some(last) = page.last() else { return all };
            from = SequenceNumber(last.sequence_number().0 + 1);
            all.extend(page.iter().map(ReceivedMessage::sequence_number));
        }
    }

    async fn runtime(&self) -> QueueRuntime {
        guard(self.broker.get_queue_runtime(QUEUE)).await.unwrap()
    }

    fn later(&self) -> Timestamp {
        self.clock.now().saturating_add(Duration::from_millis(1))
    }

    async fn receive_locked(&self, receiver: &Receiver) -> ReceivedMessage {
        receiver.add_credit(1);
        guard(receiver.recv()).await.expect("a delivery")
    }
}

#[tokio::test]
async fn only_messages_enqueued_before_the_cutoff_are_deleted() {
    let f = with_queue(QueueDescription::default()).await;
    f.send_n(QUEUE, 3).await;
    f.clock.advance(Duration::from_secs(10));
    let cutoff = f.clock.now();
    let newer = f.send_n(QUEUE, 2).await;

    assert_eq!(f.delete(QUEUE, 100, cutoff).await, 3, "enqueued before the cutoff");
    assert_eq!(f.delete(QUEUE, 100, cutoff).await, 0, "nothing left before it");

    assert_eq!(f.peek_all(QUEUE).await, newer, "enqueued at the cutoff or after: kept");
    let rt = f.runtime().await;
    assert_eq!(rt.active_message_count, 2);
    let kept: u64 = [Message::new("m0"), Message::new("m1")].iter().map(|m| m.size() as u64).sum();
    assert_eq!(rt.size_in_bytes, kept, "the deleted messages' bytes are given back");
}

#[tokio::test]
async fn at_most_the_count_asked_is_deleted_lowest_sequence_numbers_first() {
    let f = with_queue(QueueDescription::default()).await;
    let sent = f.send_n(QUEUE, 10).await;

    assert_eq!(f.delete(QUEUE, 4, f.later()).await, 4);

    assert_eq!(f.peek_all(QUEUE).await, sent[4..].to_vec());
    assert_eq!(f.delete(QUEUE, 4000, f.later()).await, 6);
    let rt = f.runtime().await;
    assert_eq!((rt.active_message_count, rt.size_in_bytes), (0, 0));
}

#[tokio::test]
async fn locked_and_scheduled_messages_stay_while_deferred_ones_go() {
    let f = with_queue(QueueDescription::default()).await;
    let sent = f.send_n(QUEUE, 3).await;
    let at = f.clock.now().saturating_add(Duration::from_secs(60));
    let scheduled = guard(
        f.broker.schedule(QUEUE, vec![Message::new("later").with_scheduled_enqueue_time(at)]),
    )
    .await
    .unwrap();
    let SendOutcome::Enqueued(scheduled) = scheduled[0] else { panic!("{scheduled:?}") };
    let receiver = guard(f.broker.open_receiver(QUEUE, ReceiveMode::PeekLock)).await.unwrap();
    let deferred = f.receive_locked(&receiver).await;
    let defer = Disposition::Defer { properties: ApplicationProperties::new() };
    guard(f.broker.settle(QUEUE, deferred.lock_token().unwrap(), defer)).await.unwrap();
    let locked = f.receive_locked(&receiver).await;
    assert_eq!((deferred.sequence_number(), locked.sequence_number()), (sent[0], sent[1]));

    let far = f.clock.now().saturating_add(Duration::from_secs(3600));
    assert_eq!(f.delete(QUEUE, 100, far).await, 2, "the deferred message and the unlocked one");

    assert_eq!(f.peek_all(QUEUE).await, vec![sent[1], scheduled]);
    let rt = f.runtime().await;
    assert_eq!((rt.active_message_count, rt.scheduled_message_count), (1, 1));
    assert_eq!(rt.deferred_message_count, 0);
    guard(f.broker.complete(QUEUE, locked.lock_token().unwrap())).await.expect("still locked");
}

#[tokio::test]
async fn the_dead_letter_queue_deletes_its_own_messages() {
    let f = with_queue(QueueDescription::default()).await;
    f.send_n(QUEUE, 3).await;
    let receiver = guard(f.broker.open_receiver(QUEUE, ReceiveMode::PeekLock)).await.unwrap();
    for _ in 0..2 {
        let m = f.receive_locked(&receiver).await;
        let dead = Disposition::DeadLetter {
            reason: Some("bad".into()),
            description: None,
            properties: ApplicationProperties::new(),
        };
        guard(f.broker.settle(QUEUE, m.lock_token().unwrap(), dead)).await.unwrap();
    }

    assert_eq!(f.delete(DLQ, 100, f.later()).await, 2);

    let rt = f.runtime().await;
    assert_eq!((rt.active_message_count, rt.dead_letter_message_count), (1, 0));
    assert!(f.peek_all(DLQ).await.is_empty());
}

#[tokio::test]
async fn a_partitioned_queue_deletes_across_partitions_no_more_than_asked() {
    let f = with_queue(QueueDescription {
        enable_partitioning: true,
        partition_count: 4,
        ..Default::default()
    })
    .await;
    let mut sent = Vec::new();
    for i in 0..40 {
        sent.extend(
            f.send(QUEUE, vec![Message::new("x").with_partition_key(format!("k{i}"))]).await,
        );
    }
    let partitions: std::collections::BTreeSet<_> =
        sent.iter().map(|s| s.partition(true)).collect();
    assert!(partitions.len() > 1, "the keys spread over partitions: {partitions:?}");

    assert_eq!(f.delete(QUEUE, 25, f.later()).await, 25, "as many as asked, in all");
    assert_eq!(f.runtime().await.active_message_count, 15);
    assert_eq!(f.delete(QUEUE, 4000, f.later()).await, 15);
    assert_eq!(f.delete(QUEUE, 4000, f.later()).await, 0);
    assert_eq!(f.runtime().await.size_in_bytes, 0);
}

#[tokio::test]
async fn a_session_deletes_only_its_own_messages() {
    let f = with_queue(QueueDescription { requires_session: true, ..Default::default() }).await;
    let s1 = (0..3).map(|i| Message::new(format!("a{i}")).with_session_id("s1")).collect();
    f.send(QUEUE, s1).await;
    let s2 = (0..2).map(|i| Message::new(format!("b{i}")).with_session_id("s2")).collect();
    let kept = f.send(QUEUE, s2).await;

    let deleted = guard(f.broker.delete_messages(QUEUE, 100, f.later(), Some("s1"))).await.unwrap();

    assert_eq!(deleted, 3);
    assert_eq!(f.peek_all(QUEUE).await, kept);
    let held = guard(f.broker.accept_session(QUEUE, "s2", ReceiveMode::PeekLock)).await.unwrap();
    let m = f.receive_locked(&held).await;
    assert_eq!(m.sequence_number(), kept[0]);
    let deleted = guard(f.broker.delete_messages(QUEUE, 100, f.later(), None)).await.unwrap();
    assert_eq!(deleted, 1, "without a session: every session's unlocked messages");
    assert_eq!(f.peek_all(QUEUE).await, vec![kept[0]]);
}

#[tokio::test]
async fn a_session_on_an_entity_without_sessions_is_refused() {
    let f = with_queue(QueueDescription::default()).await;
    f.send_n(QUEUE, 1).await;
    let refused = guard(f.broker.delete_messages(QUEUE, 10, f.later(), Some("s1"))).await;
    assert!(matches!(refused, Err(BrokerError::InvalidOperation(_))), "{refused:?}");
    assert_eq!(f.runtime().await.active_message_count, 1);
}

#[tokio::test]
async fn a_count_out_of_range_is_refused_before_anything_is_deleted() {
    let f = with_queue(QueueDescription::default()).await;
    f.send_n(QUEUE, 1).await;
    for max in [0, MAX_DELETE_MESSAGES + 1, usize::MAX] {
        let refused = guard(f.broker.delete_messages(QUEUE, max, f.later(), None)).await;
        match refused {
            Err(BrokerError::InvalidArgument { field, .. }) => assert_eq!(field, "message-count"),
            other => panic!("{max}: {other:?}"),
        }
    }
    assert_eq!(f.runtime().await.active_message_count, 1);
    let missing = guard(f.broker.delete_messages("nope", 1, f.later(), None)).await;
    assert!(matches!(missing, Err(BrokerError::EntityNotFound { .. })), "{missing:?}");
}

#[tokio::test]
async fn a_subscription_deletes_its_copies_and_leaves_the_others() {
    let f = fixture().await;
    let topic = EntityDescription::Topic(TopicDescription::default());
    guard(f.broker.create_entity(&path("t"), topic)).await.unwrap();
    for name in ["t/Subscriptions/a", "t/Subscriptions/b"] {
        let sub = EntityDescription::Subscription(SubscriptionDescription::default());
        guard(f.broker.create_entity(&path(name), sub)).await.unwrap();
    }
    f.send_n("t", 3).await;

    assert_eq!(f.delete("t/Subscriptions/a", 100, f.later()).await, 3);

    assert!(f.peek_all("t/Subscriptions/a").await.is_empty());
    assert_eq!(f.peek_all("t/Subscriptions/b").await.len(), 3, "the other copies stay");
    let refused = guard(f.broker.delete_messages("t", 1, f.later(), None)).await;
    assert!(matches!(refused, Err(BrokerError::InvalidOperation(_))), "a topic: {refused:?}");
}

#[tokio::test]
async fn what_a_delete_took_is_gone_from_the_store() {
    let f = with_queue(QueueDescription::default()).await;
    let sent = f.send_n(QUEUE, 5).await;
    assert_eq!(f.delete(QUEUE, 3, f.later()).await, 3);

    f.broker.shutdown();
    let broker = guard(Broker::open(f.store.clone(), f.clock.clone(), NamespaceLimits::default()))
        .await
        .unwrap();
    let f = Fixture { broker, store: f.store, clock: f.clock };

    assert_eq!(f.peek_all(QUEUE).await, sent[3..].to_vec());
    assert_eq!(f.runtime().await.active_message_count, 2);
}
