//! Partitioned queues end to end, through the public [`Broker`] API: the partition router,
//! round-robin failover around an unavailable partition, the sequence-number layout, duplicate
//! detection with partition keys, peek enumeration, receiving across partitions, quotas,
//! management on every partition, and the limited availability status.
//!
//! Time comes from a [`ManualClock`]; outages from a [`FaultyStore`] around the memory store.
//! `tokio::time::timeout` only guards against hangs: no test sleeps.
#![cfg(feature = "testing")]

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::router::partition_for_key;
use ironbus_core::testing::keys::{self, EntityId};
use ironbus_core::testing::FaultyStore;
use ironbus_core::{
    Availability, Broker, BrokerError, Clock, Disposition, LockToken, ManualClock, Message,
    NamespaceLimits, PartitionId, QueueDescription, QueueRuntime, ReceiveMode, ReceivedMessage,
    Receiver, SendOutcome, SequenceNumber,
};
use ironbus_store_memory::MemoryStore;

mod common;
use common::guard;

/// Partitions of a partitioned queue unless a test says otherwise (Service Bus's default).
const PARTITIONS: u16 = 16;
/// Longer than the partition's retry interval (1 s) for rebuilding itself after an outage.
const PAST_RETRY_INTERVAL: Duration = Duration::from_secs(2);

// ---- fixture and helpers ----

/// A broker on a fault-injecting memory store, with a manual clock.
struct Fixture {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<FaultyStore>,
    /// The id the next created entity gets: ids count from 1, one per created entity.
    next_entity_id: Cell<EntityId>,
}

impl Fixture {
    async fn new() -> Self {
        Self::with_limits(NamespaceLimits::default()).await
    }

    async fn with_limits(limits: NamespaceLimits) -> Self {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
        let broker =
            guard(Broker::open(store.clone(), clock.clone(), limits)).await.expect("open broker");
        Fixture { broker, clock, store, next_entity_id: Cell::new(1) }
    }

    /// Creates a queue and returns its entity id, checking that the store holds the queue's
    /// partition records under that id.
    async fn create(&self, name: &str, description: QueueDescription) -> EntityId {
        guard(self.broker.create_queue(name, description)).await.expect("create queue");
        let id = self.next_entity_id.get();
        self.next_entity_id.set(id + 1);
        let record = guard(self.store.inner().get(&keys::partition_record(id, PartitionId(0))))
            .await
            .expect("read the inner store");
        assert!(record.is_some(), "queue {name} should have entity id {id}");
        id
    }

    /// Makes every store operation on one partition of an entity fail.
    fn fail_partition(&self, id: EntityId, partition: u16) {
        self.store.fail_prefix(keys::partition_prefix(id, PartitionId(partition)).to_vec());
    }

    fn heal_partition(&self, id: EntityId, partition: u16) {
        self.store.heal_prefix(keys::partition_prefix(id, PartitionId(partition)));
    }

    /// Sends one message on its own.
    async fn send(&self, queue: &str, message: Message) -> Result<SendOutcome, BrokerError> {
        let outcomes = guard(self.broker.send(queue, vec![message])).await?;
        assert_eq!(outcomes.len(), 1, "one outcome per message");
        Ok(outcomes[0])
    }

    /// Sends one message that must be stored; returns its sequence number.
    async fn enqueue(&self, queue: &str, message: Message) -> SequenceNumber {
        match self.send(queue, message).await {
            Ok(SendOutcome::Enqueued(seq)) => seq,
            other => panic!("expected the message to be enqueued, got {other:?}"),
        }
    }

    async fn runtime(&self, queue: &str) -> QueueRuntime {
        guard(self.broker.get_queue_runtime(queue)).await.expect("queue runtime")
    }

    async fn receiver(&self, queue: &str) -> Receiver {
        guard(self.broker.open_receiver(queue, ReceiveMode::PeekLock)).await.expect("receiver")
    }

    /// Every message a new peek-lock receiver gets with `credit`: drain makes every partition
    /// deliver what it can before it returns, so this is exactly what was deliverable (up to
    /// `credit`). The receiver is returned so that the caller can settle.
    async fn receive_all(&self, queue: &str, credit: u32) -> (Receiver, Vec<ReceivedMessage>) {
        let receiver = self.receiver(queue).await;
        receiver.add_credit(credit);
        guard(receiver.drain()).await;
        let mut received = Vec::new();
        while let Some(message) = receiver.try_recv() {
            received.push(message);
        }
        (receiver, received)
    }

    /// Peeks from `from`, `max` at a time, each time from the last sequence number plus one,
    /// until a peek comes back empty. Returns every peek's answer.
    async fn peek_pages(
        &self,
        queue: &str,
        from: SequenceNumber,
        max: usize,
    ) -> Vec<Vec<ReceivedMessage>> {
        let mut pages = Vec::new();
        let mut from = from;
        loop {
            let page = guard(self.broker.peek(queue, from, max)).await.expect("peek");
            let Some(last) = page.last() else { return pages };
            from = SequenceNumber(last.sequence_number().0 + 1);
            pages.push(page);
            assert!(pages.len() <= 10_000, "peeking never ends");
        }
    }

    /// Every message of `queue` (or a dead-letter queue), by repeated peeks.
    async fn peek_everything(&self, queue: &str) -> Vec<ReceivedMessage> {
        self.peek_pages(queue, SequenceNumber(0), 100).await.into_iter().flatten().collect()
    }
}

async fn recv(receiver: &Receiver) -> ReceivedMessage {
    guard(receiver.recv()).await.expect("receiver closed")
}

fn partitioned() -> QueueDescription {
    QueueDescription { enable_partitioning: true, ..QueueDescription::default() }
}

fn partitioned_with_dedup() -> QueueDescription {
    QueueDescription { requires_duplicate_detection: true, ..partitioned() }
}

/// The partition id in the top 16 bits of a sequence number.
fn partition_of(seq: SequenceNumber) -> u16 {
    ((seq.0 as u64) >> 48) as u16
}

/// The per-partition counter in the low 48 bits of a sequence number.
fn counter_of(seq: SequenceNumber) -> u64 {
    (seq.0 as u64) & ((1 << 48) - 1)
}

/// `n` distinct keys that the router maps to `partition` of a 16-partition entity.
fn keys_in(partition: u16, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("key-{i}"))
        .filter(|key| partition_for_key(key, PARTITIONS) == PartitionId(partition))
        .take(n)
        .collect()
}

fn key_in(partition: u16) -> String {
    keys_in(partition, 1).remove(0)
}

fn seqs(messages: &[ReceivedMessage]) -> BTreeSet<SequenceNumber> {
    messages.iter().map(ReceivedMessage::sequence_number).collect()
}

fn size_of(messages: &[ReceivedMessage]) -> u64 {
    messages.iter().map(|m| m.message.size() as u64).sum()
}

// ---- the router ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_prefers_session_id_then_partition_key_then_message_id() {
    let f = Fixture::new().await;
    f.create("plain", partitioned()).await;
    f.create("dedup", partitioned_with_dedup()).await;
    // Keys of different partitions, so that each case shows which property decided.
    let session = key_in(2);
    let key = key_in(7);
    let ids = keys_in(11, 6);
    let cases: Vec<(&str, &str, Message, &str)> = vec![
        (
            "session id wins over message id",
            "dedup",
            Message::new("a").with_session_id(&session).with_message_id(&ids[0]),
            session.as_str(),
        ),
        (
            "session id equal to partition key",
            "dedup",
            Message::new("b")
                .with_session_id(&session)
                .with_partition_key(&session)
                .with_message_id(&ids[1]),
            session.as_str(),
        ),
        (
            "session id without duplicate detection",
            "plain",
            Message::new("c").with_session_id(&session).with_message_id(&ids[2]),
            session.as_str(),
        ),
        (
            "partition key wins over message id",
            "dedup",
            Message::new("d").with_partition_key(&key).with_message_id(&ids[3]),
            key.as_str(),
        ),
        (
            "partition key without duplicate detection",
            "plain",
            Message::new("e").with_partition_key(&key).with_message_id(&ids[4]),
            key.as_str(),
        ),
        (
            "message id with duplicate detection",
            "dedup",
            Message::new("f").with_message_id(&ids[5]),
            ids[5].as_str(),
        ),
    ];
    for (case, queue, message, deciding_key) in cases {
        let want = partition_for_key(deciding_key, PARTITIONS);
        let seq = f.enqueue(queue, message).await;
        assert_eq!(partition_of(seq), want.0, "{case}: sequence number's partition");
        let peeked = guard(f.broker.peek(queue, seq, 1)).await.expect("peek");
        assert_eq!(peeked.len(), 1, "{case}");
        assert_eq!(peeked[0].sequence_number(), seq, "{case}");
        assert_eq!(peeked[0].broker.partition_id, want, "{case}: message's partition id");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_sends_go_round_robin_over_every_partition() {
    let f = Fixture::new().await;
    f.create("plain", partitioned()).await;
    // With duplicate detection on, a message without a MessageId still has no key.
    f.create("dedup", partitioned_with_dedup()).await;
    for queue in ["plain", "dedup"] {
        let mut used = BTreeSet::new();
        for i in 0..PARTITIONS {
            used.insert(partition_of(f.enqueue(queue, Message::new(format!("m{i}"))).await));
        }
        assert_eq!(used.len(), usize::from(PARTITIONS), "{queue}: {used:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_id_does_not_route_without_duplicate_detection() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut used = BTreeSet::new();
    for i in 0..PARTITIONS {
        let message = Message::new(format!("m{i}")).with_message_id("the-same-id");
        used.insert(partition_of(f.enqueue("q", message).await));
    }
    assert_eq!(used.len(), usize::from(PARTITIONS), "round-robin, not by MessageId: {used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_id_different_from_partition_key_is_invalid_operation() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let bad = || Message::new("bad").with_session_id("session-1").with_partition_key("key-1");
    let err = f.send("q", bad()).await.expect_err("SessionId != PartitionKey");
    assert!(matches!(err, BrokerError::InvalidOperation(_)), "{err:?}");
    assert!(!err.is_retriable());

    // A batch holding such a message is refused as a whole.
    let batch = vec![Message::new("ok"), Message::new("keyed").with_partition_key("key-1"), bad()];
    let err = guard(f.broker.send("q", batch)).await.expect_err("batch with a bad message");
    assert!(matches!(err, BrokerError::InvalidOperation(_)), "{err:?}");
    assert_eq!(f.runtime("q").await.active_message_count, 0, "nothing of a refused send is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_always_lands_in_the_same_partition() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut partitions_used = BTreeSet::new();
    for round in 0..4 {
        for i in 0..20 {
            let key = format!("customer-{i}");
            let want = partition_for_key(&key, PARTITIONS).0;
            partitions_used.insert(want);
            let by_key = Message::new(format!("{round}")).with_partition_key(&key);
            assert_eq!(partition_of(f.enqueue("q", by_key).await), want, "PartitionKey {key}");
            let by_session = Message::new(format!("{round}")).with_session_id(&key);
            assert_eq!(partition_of(f.enqueue("q", by_session).await), want, "SessionId {key}");
            // Keyless sends in between move the round-robin, not the keyed messages.
            f.enqueue("q", Message::new("keyless")).await;
        }
    }
    assert!(partitions_used.len() > 1, "the keys should spread: {partitions_used:?}");
}

// ---- round-robin failover ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_sends_skip_an_unavailable_partition() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    // Every partition has loaded, so the first send to the failed one finds out on the way.
    assert_eq!(f.runtime("q").await.availability, Availability::Available);
    let down = 5;
    f.fail_partition(id, down);
    let mut used = BTreeSet::new();
    for i in 0..32 {
        let seq = f.enqueue("q", Message::new(format!("m{i}"))).await;
        assert_ne!(partition_of(seq), down, "send {i} landed in the unavailable partition");
        used.insert(partition_of(seq));
    }
    assert_eq!(used.len(), usize::from(PARTITIONS) - 1, "every other partition takes its turn");
    // A keyless batch too.
    let batch = (0..5).map(|i| Message::new(format!("b{i}"))).collect();
    for outcome in guard(f.broker.send("q", batch)).await.expect("keyless batch") {
        let SendOutcome::Enqueued(seq) = outcome else { panic!("{outcome:?}") };
        assert_ne!(partition_of(seq), down);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_send_to_unavailable_partition_fails() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    let down = 9;
    let key = key_in(down);
    f.fail_partition(id, down);
    for message in [
        Message::new("by key").with_partition_key(&key),
        Message::new("by session").with_session_id(&key),
    ] {
        let err = f.send("q", message).await.expect_err("its partition is down");
        assert!(
            matches!(err, BrokerError::PartitionUnavailable { partition: PartitionId(9), .. }),
            "{err:?}"
        );
        assert!(err.is_retriable(), "{err:?}");
    }
    // Keys of other partitions are served as usual.
    let seq = f.enqueue("q", Message::new("other").with_partition_key(key_in(10))).await;
    assert_eq!(partition_of(seq), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healed_partition_serves_again_with_its_earlier_messages() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    let down = 3;
    let key = key_in(down);
    let mut earlier = Vec::new();
    for i in 0..3 {
        earlier.push(f.enqueue("q", Message::new(format!("e{i}")).with_partition_key(&key)).await);
    }
    f.fail_partition(id, down);
    f.send("q", Message::new("x").with_partition_key(&key)).await.expect_err("partition is down");

    f.heal_partition(id, down);
    // The next request pinned to the partition finds it serving again.
    let after = f.enqueue("q", Message::new("after").with_partition_key(&key)).await;
    assert_eq!(partition_of(after), down);
    let from = SequenceNumber(i64::from(down) << 48);
    let peeked = guard(f.broker.peek("q", from, 100)).await.expect("peek the healed partition");
    let mut want = earlier.clone();
    want.push(after);
    assert_eq!(peeked.iter().map(|m| m.sequence_number()).collect::<Vec<_>>(), want);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Available);
    assert_eq!(runtime.active_message_count, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healed_partition_rejoins_round_robin_after_the_retry_interval() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    let down = 4;
    f.fail_partition(id, down);
    // Make the partition find out that it is down.
    f.send("q", Message::new("x").with_partition_key(key_in(down))).await.expect_err("down");
    f.heal_partition(id, down);

    // No request is pinned to it now: it must come back on its own once its retry time passes.
    // The partition sets that time from the clock when it finds out, on its own task, which may
    // come after an advance made here: so time moves on with every round, as it would for real.
    // On a loaded machine that may take many rounds; the hang guard bounds the wait.
    let rejoined = async {
        loop {
            f.clock.advance(PAST_RETRY_INTERVAL);
            for i in 0..PARTITIONS {
                let seq = f.enqueue("q", Message::new(format!("m{i}"))).await;
                if partition_of(seq) == down {
                    return;
                }
            }
            tokio::task::yield_now().await;
        }
    };
    // On failure: partition `down` never took a keyless send again after healing.
    guard(rejoined).await;
}

// ---- sequence numbers ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_sequence_numbers_carry_the_partition_and_count_from_one() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    // Partition 0 runs ahead, to show that each partition has its own counter.
    let key0 = key_in(0);
    for _ in 0..5 {
        f.enqueue("q", Message::new("ahead").with_partition_key(&key0)).await;
    }
    for round in 1..=3u64 {
        for p in 1..PARTITIONS {
            let seq = f.enqueue("q", Message::new("m").with_partition_key(key_in(p))).await;
            assert_eq!(partition_of(seq), p, "top 16 bits of {seq:#x?}");
            assert_eq!(counter_of(seq), round, "partition {p}'s counter");
            assert_eq!(seq.0, (i64::from(p) << 48) | round as i64);
        }
    }
    let seq = f.enqueue("q", Message::new("m").with_partition_key(&key0)).await;
    assert_eq!((partition_of(seq), counter_of(seq)), (0, 6));

    // Delivered messages report the same numbers and partitions.
    let (_receiver, received) = f.receive_all("q", 100).await;
    assert_eq!(received.len(), 6 + 3 * 15);
    for m in &received {
        assert_eq!(m.broker.partition_id.0, partition_of(m.sequence_number()));
        assert_eq!(m.broker.enqueued_sequence_number, m.sequence_number());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpartitioned_sequence_numbers_count_from_one() {
    let f = Fixture::new().await;
    f.create("q", QueueDescription::default()).await;
    let mut got = Vec::new();
    for i in 0..5 {
        got.push(f.enqueue("q", Message::new(format!("m{i}")).with_partition_key("k")).await);
    }
    let batch = (0..3).map(|i| Message::new(format!("b{i}"))).collect();
    for outcome in guard(f.broker.send("q", batch)).await.expect("batch") {
        let SendOutcome::Enqueued(seq) = outcome else { panic!("{outcome:?}") };
        got.push(seq);
    }
    assert_eq!(got, (1..=8).map(SequenceNumber).collect::<Vec<_>>());
    for m in f.peek_everything("q").await {
        assert_eq!(m.broker.partition_id, PartitionId(0));
    }
}

// ---- duplicate detection ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_message_id_and_partition_key_is_duplicate() {
    let f = Fixture::new().await;
    f.create("q", partitioned_with_dedup()).await;
    let by_key = || Message::new("a").with_message_id("order-1").with_partition_key("customer-a");
    let by_session = || Message::new("b").with_message_id("order-2").with_session_id("session-a");
    for (case, message) in [("partition key", by_key as fn() -> Message), ("session", by_session)] {
        assert!(
            matches!(f.send("q", message()).await, Ok(SendOutcome::Enqueued(_))),
            "{case}: first"
        );
        assert_eq!(f.send("q", message()).await, Ok(SendOutcome::Duplicate), "{case}: again");
    }
    assert_eq!(f.runtime("q").await.active_message_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_message_id_with_different_partition_keys_is_not_duplicate() {
    let f = Fixture::new().await;
    f.create("q", partitioned_with_dedup()).await;
    // Two keys of one partition (the dedup key holds the partition key, not just the
    // partition), and a key of another partition.
    let same_partition = keys_in(5, 2);
    let keys = [same_partition[0].clone(), same_partition[1].clone(), key_in(9)];
    let message = |key: &str| Message::new("m").with_message_id("order-1").with_partition_key(key);
    let mut stored = BTreeSet::new();
    for key in &keys {
        stored.insert(f.enqueue("q", message(key)).await);
    }
    assert_eq!(stored.len(), 3);
    for key in &keys {
        assert_eq!(f.send("q", message(key)).await, Ok(SendOutcome::Duplicate), "{key}");
    }
    assert_eq!(f.runtime("q").await.active_message_count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_message_id_without_keys_is_duplicate() {
    let f = Fixture::new().await;
    f.create("q", partitioned_with_dedup()).await;
    let seq = f.enqueue("q", Message::new("a").with_message_id("order-1")).await;
    assert_eq!(partition_of(seq), partition_for_key("order-1", PARTITIONS).0);
    assert_eq!(
        f.send("q", Message::new("a again").with_message_id("order-1")).await,
        Ok(SendOutcome::Duplicate)
    );
    // Within one batch too.
    let batch = vec![
        Message::new("b").with_message_id("order-2"),
        Message::new("b again").with_message_id("order-2"),
    ];
    let outcomes = guard(f.broker.send("q", batch)).await.expect("batch");
    assert!(matches!(outcomes[0], SendOutcome::Enqueued(_)), "{outcomes:?}");
    assert_eq!(outcomes[1], SendOutcome::Duplicate);
    assert_eq!(f.runtime("q").await.active_message_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_message_counts_for_duplicate_detection_on_partitioned_queue() {
    let f = Fixture::new().await;
    f.create("q", partitioned_with_dedup()).await;
    let at = f.clock.now().saturating_add(Duration::from_secs(3600));
    let scheduled =
        Message::new("later").with_message_id("order-1").with_scheduled_enqueue_time(at);
    let outcomes = guard(f.broker.schedule("q", vec![scheduled])).await.expect("schedule");
    assert!(matches!(outcomes[0], SendOutcome::Enqueued(_)), "{outcomes:?}");
    assert_eq!(
        f.send("q", Message::new("now").with_message_id("order-1")).await,
        Ok(SendOutcome::Duplicate)
    );
    let runtime = f.runtime("q").await;
    assert_eq!((runtime.scheduled_message_count, runtime.active_message_count), (1, 0));
}

// ---- peek ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_peeks_enumerate_every_message_once() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut sent = BTreeSet::new();
    for i in 0..60 {
        sent.insert(f.enqueue("q", Message::new(format!("keyless-{i}"))).await);
    }
    for i in 0..30 {
        let message = Message::new(format!("keyed-{i}")).with_partition_key(format!("order-{i}"));
        sent.insert(f.enqueue("q", message).await);
    }
    let batch = (0..10).map(|i| Message::new(format!("batch-{i}"))).collect();
    for outcome in guard(f.broker.send("q", batch)).await.expect("batch") {
        let SendOutcome::Enqueued(seq) = outcome else { panic!("{outcome:?}") };
        sent.insert(seq);
    }
    assert_eq!(sent.len(), 100);

    for start in [SequenceNumber(0), SequenceNumber(1)] {
        let pages = f.peek_pages("q", start, 7).await;
        let mut seen = Vec::new();
        let mut partitions = BTreeSet::new();
        for page in &pages {
            assert!(!page.is_empty() && page.len() <= 7, "page of {}", page.len());
            let partition = partition_of(page[0].sequence_number());
            for m in page {
                assert_eq!(partition_of(m.sequence_number()), partition, "one partition per peek");
                assert_eq!(m.broker.partition_id.0, partition);
                assert!(m.lock.is_none(), "peek locks nothing");
            }
            partitions.insert(partition);
            seen.extend(page.iter().map(ReceivedMessage::sequence_number));
        }
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "from {start:?}: no message twice");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), sent, "from {start:?}");
        assert_eq!(partitions.len(), usize::from(PARTITIONS));
    }

    // Peeking locked nothing: a receiver still gets every message.
    let (_receiver, received) = f.receive_all("q", 200).await;
    assert_eq!(seqs(&received), sent);
}

// ---- receiving ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_receiver_gets_messages_from_every_partition() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut sent = BTreeSet::new();
    for p in 0..PARTITIONS {
        for key in keys_in(p, 3) {
            sent.insert(f.enqueue("q", Message::new("m").with_partition_key(key)).await);
        }
    }
    let receiver = f.receiver("q").await;
    receiver.add_credit(100);
    let mut received = Vec::new();
    for _ in 0..sent.len() {
        received.push(recv(&receiver).await);
    }
    let got = seqs(&received);
    assert_eq!(got.len(), received.len(), "no message twice");
    assert_eq!(got, sent);
    for m in &received {
        let token = m.lock_token().expect("peek-lock delivery has a lock");
        guard(f.broker.complete("q", token)).await.expect("complete");
    }
    assert_eq!(f.runtime("q").await.active_message_count, 0);
    assert_eq!(guard(receiver.drain()).await, 100 - 48, "nothing more was delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_many_at_once_answers_each_in_order_across_partitions() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    for p in 0..4 {
        for key in keys_in(p, 2) {
            f.enqueue("q", Message::new("m").with_partition_key(key)).await;
        }
    }
    let (_receiver, received) = f.receive_all("q", 8).await;
    assert_eq!(received.len(), 8);
    let tokens: Vec<_> = received.iter().map(|m| m.lock_token().expect("locked")).collect();
    assert_eq!(
        tokens.iter().map(|t| t.partition()).collect::<BTreeSet<_>>().len(),
        4,
        "the batch spans four partitions"
    );
    // Complete six, abandon one, and mix in tokens that hold no lock: one of a partition
    // the queue has, one of a partition it does not have. A token may also repeat.
    let mut items: Vec<_> = tokens[..6].iter().map(|t| (*t, Disposition::Complete)).collect();
    items.insert(2, (LockToken::generate(PartitionId(1)), Disposition::Complete));
    items.push((tokens[6], Disposition::Abandon { properties: Default::default() }));
    items.push((LockToken::generate(PartitionId(PARTITIONS + 5)), Disposition::Complete));
    items.push((tokens[0], Disposition::Complete));
    let outcomes = guard(f.broker.start_settle_many("q", items)).await;
    let lost = Err(BrokerError::MessageLockLost);
    let expected = [Ok(()), Ok(()), lost.clone(), Ok(()), Ok(()), Ok(()), Ok(()), Ok(())]
        .into_iter()
        .chain([lost.clone(), lost.clone()])
        .collect::<Vec<_>>();
    assert_eq!(outcomes, expected);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.active_message_count, 2, "the abandoned one and the untouched one");
    let outcomes =
        guard(f.broker.start_settle_many("nope", vec![(tokens[7], Disposition::Complete)])).await;
    assert!(
        matches!(outcomes.as_slice(), [Err(BrokerError::EntityNotFound { .. })]),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_receivers_share_messages_without_overlap() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let first = f.receiver("q").await;
    let second = f.receiver("q").await;
    first.add_credit(64);
    second.add_credit(64);
    let mut sent = BTreeSet::new();
    for i in 0..64 {
        sent.insert(f.enqueue("q", Message::new(format!("m{i}"))).await);
    }
    let (mut to_first, mut to_second) = (Vec::new(), Vec::new());
    guard(async {
        while to_first.len() + to_second.len() < sent.len() {
            tokio::select! {
                Some(m) = first.recv() => to_first.push(m.sequence_number()),
                Some(m) = second.recv() => to_second.push(m.sequence_number()),
            }
        }
    })
    .await;
    assert!(!to_first.is_empty() && !to_second.is_empty(), "{to_first:?} / {to_second:?}");
    let first_set: BTreeSet<_> = to_first.iter().copied().collect();
    let second_set: BTreeSet<_> = to_second.iter().copied().collect();
    assert!(first_set.is_disjoint(&second_set), "a message went to both receivers");
    assert_eq!(first_set.union(&second_set).copied().collect::<BTreeSet<_>>(), sent);
    assert!(to_first.len().abs_diff(to_second.len()) <= usize::from(PARTITIONS), "fair share");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_with_credit_one_locks_one_message_at_a_time() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut sent = BTreeSet::new();
    for p in 0..PARTITIONS {
        for key in keys_in(p, 2) {
            sent.insert(f.enqueue("q", Message::new("m").with_partition_key(key)).await);
        }
    }
    let one = f.receiver("q").await;
    one.add_credit(1);
    let taken = recv(&one).await;
    assert_eq!(guard(one.drain()).await, 0, "its one credit was used");
    assert_eq!(one.buffered(), 0, "only one message was delivered");

    // Every other message is still unlocked: another receiver takes them all.
    let (_other, rest) = f.receive_all("q", 100).await;
    assert_eq!(rest.len(), sent.len() - 1);
    assert!(!seqs(&rest).contains(&taken.sequence_number()));
    let mut all = seqs(&rest);
    all.insert(taken.sequence_number());
    assert_eq!(all, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_across_partitions_never_exceed_credit() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let mut sent = BTreeSet::new();
    for p in 0..PARTITIONS {
        for key in keys_in(p, 3) {
            sent.insert(f.enqueue("q", Message::new("m").with_partition_key(key)).await);
        }
    }
    let receiver = f.receiver("q").await;
    let mut taken = BTreeSet::new();
    for credit in [5, 10, 1, 32] {
        receiver.add_credit(credit);
        assert_eq!(guard(receiver.drain()).await, 0, "credit {credit} is used up");
        let mut delivered = 0;
        while let Some(m) = receiver.try_recv() {
            assert!(taken.insert(m.sequence_number()), "{:?} delivered twice", m.sequence_number());
            delivered += 1;
        }
        assert_eq!(delivered, credit, "one delivery per unit of credit");
    }
    assert_eq!(taken, sent);
}

// ---- quotas ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_entity_quota_applies_beside_entity_quota() {
    let f = Fixture::with_limits(NamespaceLimits { max_entities: 3, max_partitioned_entities: 2 })
        .await;
    f.create("p1", partitioned()).await;
    f.create("p2", partitioned()).await;
    let err = guard(f.broker.create_queue("p3", partitioned())).await.expect_err("third");
    assert!(matches!(err, BrokerError::QuotaExceeded(_)), "{err:?}");
    // A queue without partitioning still fits, up to the entity quota.
    f.create("plain1", QueueDescription::default()).await;
    let err = guard(f.broker.create_queue("plain2", QueueDescription::default()))
        .await
        .expect_err("fourth entity");
    assert!(matches!(err, BrokerError::QuotaExceeded(_)), "{err:?}");
    assert!(matches!(
        guard(f.broker.get_queue("p3")).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    // Deleting a partitioned queue frees its place.
    guard(f.broker.delete_queue("p1")).await.expect("delete");
    f.create("p3", partitioned()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_quotas_are_10000_entities_and_100_partitioned() {
    assert_eq!(
        NamespaceLimits::default(),
        NamespaceLimits { max_entities: 10_000, max_partitioned_entities: 100 }
    );
    let f = Fixture::new().await;
    // Two partitions each keeps a hundred queues cheap.
    let small = QueueDescription { partition_count: 2, ..partitioned() };
    for i in 0..100 {
        f.create(&format!("p{i}"), small.clone()).await;
    }
    let err = guard(f.broker.create_queue("p100", small)).await.expect_err("101st partitioned");
    assert!(matches!(err, BrokerError::QuotaExceeded(_)), "{err:?}");
    f.create("plain", QueueDescription::default()).await;
}

// ---- management ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioning_cannot_change_after_creation() {
    let f = Fixture::new().await;
    f.create("part", partitioned()).await;
    f.create("plain", QueueDescription::default()).await;
    for i in 0..5 {
        f.enqueue("part", Message::new(format!("m{i}"))).await;
    }
    let cases = [
        ("disable partitioning", "part", QueueDescription::default()),
        ("fewer partitions", "part", QueueDescription { partition_count: 8, ..partitioned() }),
        ("more partitions", "part", QueueDescription { partition_count: 32, ..partitioned() }),
        ("enable partitioning", "plain", partitioned()),
    ];
    for (case, queue, update) in cases {
        let before = guard(f.broker.get_queue(queue)).await.expect("get");
        let err = guard(f.broker.update_queue(queue, update)).await.expect_err(case);
        assert!(matches!(err, BrokerError::InvalidOperation(_)), "{case}: {err:?}");
        assert_eq!(guard(f.broker.get_queue(queue)).await.expect("get"), before, "{case}");
    }
    assert_eq!(f.runtime("part").await.active_message_count, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_other_properties_keeps_the_messages() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    for i in 0..32 {
        f.enqueue("q", Message::new(format!("m{i}"))).await;
    }
    let before = seqs(&f.peek_everything("q").await);
    let updated = QueueDescription {
        lock_duration: Duration::from_secs(30),
        max_delivery_count: 3,
        default_message_time_to_live: Duration::from_secs(86_400),
        user_metadata: Some("updated".into()),
        ..partitioned()
    };
    let info = guard(f.broker.update_queue("q", updated.clone())).await.expect("update");
    assert_eq!(info.description, updated);
    assert_eq!(guard(f.broker.get_queue("q")).await.expect("get").description, updated);
    assert_eq!(f.runtime("q").await.active_message_count, 32);
    assert_eq!(seqs(&f.peek_everything("q").await), before);

    // Every partition applies the new description: locks now last 30 s.
    let (_receiver, received) = f.receive_all("q", 32).await;
    assert_eq!(seqs(&received), before);
    let until = f.clock.now().saturating_add(Duration::from_secs(30));
    for m in &received {
        assert_eq!(
            m.lock.expect("locked").locked_until,
            until,
            "partition {}",
            m.broker.partition_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_counts_are_summed_over_partitions() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;

    // Four messages in partitions 12..16: two get deferred, two dead-lettered.
    for p in 12..16 {
        f.enqueue("q", Message::new(format!("settle-{p}")).with_partition_key(key_in(p))).await;
    }
    let (_receiver, received) = f.receive_all("q", 4).await;
    assert_eq!(received.len(), 4);
    let mut deferred_size = 0;
    for m in &received {
        let token = m.lock_token().expect("locked");
        let disposition = if m.broker.partition_id.0 < 14 {
            deferred_size += m.message.size() as u64;
            Disposition::Defer { properties: Default::default() }
        } else {
            Disposition::DeadLetter {
                reason: Some("bad".into()),
                description: Some("cannot process".into()),
                properties: Default::default(),
            }
        };
        guard(f.broker.settle("q", token, disposition)).await.expect("settle");
    }

    // Ten active messages in partitions 0..10, and three scheduled ones in partitions 3..6.
    let mut active_size = 0;
    for p in 0..10 {
        let message = Message::new("x".repeat(usize::from(p) + 1)).with_partition_key(key_in(p));
        active_size += message.size() as u64;
        f.enqueue("q", message).await;
    }
    let at = f.clock.now().saturating_add(Duration::from_secs(3600));
    let scheduled: Vec<Message> = (3..6)
        .map(|p| {
            Message::new(format!("scheduled-{p}"))
                .with_partition_key(key_in(p))
                .with_scheduled_enqueue_time(at)
        })
        .collect();
    let scheduled_size: u64 = scheduled.iter().map(|m| m.size() as u64).sum();
    for message in scheduled {
        guard(f.broker.schedule("q", vec![message])).await.expect("schedule");
    }

    let dead_lettered = f.peek_everything("q/$DeadLetterQueue").await;
    assert_eq!(dead_lettered.len(), 2);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.active_message_count, 10);
    assert_eq!(runtime.scheduled_message_count, 3);
    assert_eq!(runtime.deferred_message_count, 2);
    assert_eq!(runtime.dead_letter_message_count, 2);
    assert_eq!(runtime.total_message_count, 17);
    assert_eq!(
        runtime.size_in_bytes,
        active_size + scheduled_size + deferred_size + size_of(&dead_lettered)
    );
    assert_eq!(runtime.availability, Availability::Available);
    assert!(runtime.unavailable_partitions.is_empty());

    // When the scheduled messages come due they count as active.
    f.clock.advance(Duration::from_secs(3600));
    let runtime = f.runtime("q").await;
    assert_eq!((runtime.active_message_count, runtime.scheduled_message_count), (13, 0));
}

// ---- availability ----

/// Sends two keyed messages to every partition; returns the bytes stored per partition.
async fn fill_every_partition(f: &Fixture, queue: &str) -> Vec<u64> {
    let mut sizes = vec![0; usize::from(PARTITIONS)];
    for p in 0..PARTITIONS {
        for (i, key) in keys_in(p, 2).into_iter().enumerate() {
            let message =
                Message::new(format!("p{p}-{i}-{}", "y".repeat(i))).with_partition_key(key);
            sizes[usize::from(p)] += message.size() as u64;
            f.enqueue(queue, message).await;
        }
    }
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_reports_limited_availability_while_a_partition_is_down() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    let sizes = fill_every_partition(&f, "q").await;
    let total: u64 = sizes.iter().sum();
    let down = 6;
    f.fail_partition(id, down);

    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Limited);
    assert_eq!(runtime.unavailable_partitions, vec![PartitionId(down)]);
    assert_eq!(runtime.active_message_count, 30, "the other partitions' counts are summed");
    assert_eq!(runtime.total_message_count, 30);
    assert_eq!(runtime.size_in_bytes, total - sizes[usize::from(down)]);
    // Per partition: the one down has no counts, each other its own two messages.
    let partitions = f.broker.get_partition_runtimes("q").await.unwrap();
    assert_eq!(partitions.len(), usize::from(PARTITIONS));
    for (p, runtime) in partitions.iter().enumerate() {
        assert_eq!(runtime.partition, PartitionId(p as u16));
        let counts = runtime.counts.map(|c| (c.active_message_count, c.size_in_bytes));
        let expected = (p != usize::from(down)).then_some((2, sizes[p]));
        assert_eq!(counts, expected, "partition {p}");
    }

    f.heal_partition(id, down);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Available);
    assert!(runtime.unavailable_partitions.is_empty());
    assert_eq!(runtime.active_message_count, 32);
    assert_eq!(runtime.size_in_bytes, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_and_delete_fail_cleanly_while_a_partition_is_down() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    fill_every_partition(&f, "q").await;
    let down = 6;
    f.fail_partition(id, down);
    let before = guard(f.broker.get_queue("q")).await.expect("get");

    let update = QueueDescription { lock_duration: Duration::from_secs(30), ..partitioned() };
    let err = guard(f.broker.update_queue("q", update.clone())).await.expect_err("update");
    assert!(matches!(err, BrokerError::PartitionUnavailable { .. }), "{err:?}");
    assert!(err.is_retriable());
    assert_eq!(guard(f.broker.get_queue("q")).await.expect("get"), before, "queue unchanged");

    let err = guard(f.broker.delete_queue("q")).await.expect_err("delete");
    assert!(matches!(err, BrokerError::PartitionUnavailable { .. }), "{err:?}");
    assert_eq!(guard(f.broker.get_queue("q")).await.expect("still there"), before);
    // The queue goes on where it can.
    f.enqueue("q", Message::new("more").with_partition_key(key_in(7))).await;

    f.heal_partition(id, down);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Available);
    assert_eq!(runtime.active_message_count, 33, "every message is intact");
    let (_receiver, received) = f.receive_all("q", 100).await;
    assert_eq!(received.len(), 33);

    guard(f.broker.update_queue("q", update.clone())).await.expect("update once healed");
    assert_eq!(guard(f.broker.get_queue("q")).await.expect("get").description, update);
    guard(f.broker.delete_queue("q")).await.expect("delete once healed");
    assert!(matches!(
        guard(f.broker.get_queue("q")).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_gets_the_other_partitions_messages_while_one_is_down() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    fill_every_partition(&f, "q").await;
    let down = 6;
    f.fail_partition(id, down);
    assert_eq!(f.runtime("q").await.availability, Availability::Limited);

    let receiver = f.receiver("q").await;
    receiver.add_credit(100);
    for _ in 0..30 {
        let m = recv(&receiver).await;
        assert_ne!(m.broker.partition_id.0, down);
        let token = m.lock_token().expect("locked");
        guard(f.broker.complete("q", token)).await.expect("complete");
    }

    // Once healed, the partition rebuilds when its retry time comes, with no request pinned
    // to it, and delivers to the receiver still waiting with credit.
    f.heal_partition(id, down);
    f.clock.advance(PAST_RETRY_INTERVAL);
    for _ in 0..2 {
        let m = recv(&receiver).await;
        assert_eq!(m.broker.partition_id.0, down);
        let token = m.lock_token().expect("locked");
        guard(f.broker.complete("q", token)).await.expect("complete");
    }
    assert_eq!(f.runtime("q").await.active_message_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_detection_survives_a_partition_rebuild() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned_with_dedup()).await;
    let key = key_in(2);
    let message = || Message::new("m").with_message_id("order-1").with_partition_key(&key);
    f.enqueue("q", message()).await;
    f.fail_partition(id, 2);
    f.send("q", Message::new("x").with_partition_key(&key)).await.expect_err("partition down");
    f.heal_partition(id, 2);
    assert_eq!(f.send("q", message()).await, Ok(SendOutcome::Duplicate));
    assert_eq!(f.runtime("q").await.active_message_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_are_not_reused_after_a_partition_rebuild() {
    let f = Fixture::new().await;
    let id = f.create("q", partitioned()).await;
    let key = key_in(5);
    for _ in 0..3 {
        f.enqueue("q", Message::new("m").with_partition_key(&key)).await;
    }
    // Complete them all, so only the partition's counter remembers them.
    let (_receiver, received) = f.receive_all("q", 10).await;
    assert_eq!(received.len(), 3);
    for m in &received {
        guard(f.broker.complete("q", m.lock_token().expect("locked"))).await.expect("complete");
    }
    f.fail_partition(id, 5);
    f.send("q", Message::new("x").with_partition_key(&key)).await.expect_err("partition down");
    f.heal_partition(id, 5);
    let next = f.enqueue("q", Message::new("next").with_partition_key(&key)).await;
    assert_eq!((partition_of(next), counter_of(next)), (5, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_fails_cleanly_while_a_partition_is_down() {
    let f = Fixture::new().await;
    // The next entity gets id 1; one of its partitions cannot be written.
    f.fail_partition(1, 3);
    let err = guard(f.broker.create_queue("q", partitioned())).await.expect_err("create");
    assert!(err.is_retriable(), "{err:?}");
    assert!(matches!(
        guard(f.broker.get_queue("q")).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert!(guard(f.broker.list_queues(0, 100)).await.expect("list").is_empty());

    f.heal_partition(1, 3);
    assert_eq!(f.create("q", partitioned()).await, 1);
    f.enqueue("q", Message::new("m").with_partition_key(key_in(3))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_store_outage_fails_sends_retriably_and_loses_nothing() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    f.create("plain", QueueDescription::default()).await;
    let mut acknowledged = BTreeSet::new();
    for i in 0..16 {
        acknowledged.insert(f.enqueue("q", Message::new(format!("keyless-{i}"))).await);
        let keyed = Message::new(format!("keyed-{i}")).with_partition_key(format!("k{i}"));
        acknowledged.insert(f.enqueue("q", keyed).await);
    }
    let plain = f.enqueue("plain", Message::new("plain")).await;

    f.store.set_unavailable(true);
    let attempts = [
        ("q", Message::new("keyless")),
        ("q", Message::new("keyed").with_partition_key("k1")),
        ("q", Message::new("session").with_session_id("s1")),
        ("plain", Message::new("plain")),
    ];
    for (queue, message) in attempts {
        let err = f.send(queue, message).await.expect_err("the store is down");
        assert!(err.is_retriable(), "{queue}: {err:?}");
    }
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Limited);
    assert_eq!(runtime.unavailable_partitions.len(), usize::from(PARTITIONS));

    f.store.set_unavailable(false);
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.availability, Availability::Available);
    assert_eq!(runtime.active_message_count, 32, "exactly what was acknowledged");
    let (_receiver, received) = f.receive_all("q", 100).await;
    assert_eq!(seqs(&received), acknowledged);
    let (_plain_receiver, received) = f.receive_all("plain", 10).await;
    assert_eq!(seqs(&received), BTreeSet::from([plain]));
    // And the queues take messages again.
    f.enqueue("q", Message::new("after")).await;
    f.enqueue("q", Message::new("after").with_partition_key("k1")).await;
    f.enqueue("plain", Message::new("after")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_write_leaves_no_trace_and_the_partition_rebuilds() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let key = key_in(8);
    let first = f.enqueue("q", Message::new("first").with_partition_key(&key)).await;

    f.store.fail_next_writes(1);
    let err = f.send("q", Message::new("lost").with_partition_key(&key)).await.expect_err("write");
    assert!(err.is_retriable(), "{err:?}");
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.active_message_count, 1, "the failed message is not counted");
    assert_eq!(runtime.size_in_bytes, Message::new("first").with_partition_key(&key).size() as u64);
    let peeked = f.peek_everything("q").await;
    assert_eq!(seqs(&peeked), BTreeSet::from([first]), "nor peekable");

    let next = f.enqueue("q", Message::new("next").with_partition_key(&key)).await;
    assert_eq!(partition_of(next), 8);
    let (_receiver, received) = f.receive_all("q", 10).await;
    let bodies: Vec<_> = received.iter().map(|m| m.message.body.clone()).collect();
    assert_eq!(bodies, ["first", "next"], "nor deliverable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_failed_write_is_not_dropped_as_duplicate() {
    let f = Fixture::new().await;
    f.create("q", partitioned_with_dedup()).await;
    let message = || Message::new("order").with_message_id("order-1");
    f.store.fail_next_writes(1);
    f.send("q", message()).await.expect_err("the write fails");
    // The failed send recorded nothing, so the client's retry is stored...
    assert!(matches!(f.send("q", message()).await, Ok(SendOutcome::Enqueued(_))));
    // ...and only a second copy after that is a duplicate.
    assert_eq!(f.send("q", message()).await, Ok(SendOutcome::Duplicate));
    assert_eq!(f.runtime("q").await.active_message_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_send_moves_on_when_a_partition_write_fails() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    f.store.fail_next_writes(1);
    f.enqueue("q", Message::new("keyless")).await;
    let runtime = f.runtime("q").await;
    assert_eq!(runtime.active_message_count, 1, "stored once, in the next partition");
    assert_eq!(runtime.availability, Availability::Available);
    let (_receiver, received) = f.receive_all("q", 10).await;
    assert_eq!(received.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_with_different_partition_keys_is_refused_whole() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let batch = vec![
        Message::new("a").with_partition_key("k1"),
        Message::new("b").with_partition_key("k2"),
        Message::new("c"),
    ];
    let refused = guard(f.broker.send("q", batch)).await;
    assert!(matches!(refused, Err(BrokerError::InvalidOperation(_))), "{refused:?}");
    assert_eq!(f.runtime("q").await.active_message_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_messages_of_a_batch_travel_with_its_partition_key() {
    let f = Fixture::new().await;
    f.create("q", partitioned()).await;
    let batch = vec![
        Message::new("a"),
        Message::new("b").with_session_id("s1"),
        Message::new("c").with_partition_key("s1"),
    ];
    let outcomes = guard(f.broker.send("q", batch)).await.expect("send");
    let want = partition_for_key("s1", 16);
    for outcome in outcomes {
        let SendOutcome::Enqueued(seq) = outcome else { panic!("not enqueued: {outcome:?}") };
        assert_eq!(seq.partition(true), want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_without_explicit_key_follows_first_message_id_with_duplicate_detection() {
    let f = Fixture::new().await;
    let description = QueueDescription { requires_duplicate_detection: true, ..partitioned() };
    f.create("q", description).await;
    let batch: Vec<Message> =
        (0..5).map(|i| Message::new("x").with_message_id(format!("id-{i}"))).collect();
    let outcomes = guard(f.broker.send("q", batch)).await.expect("send");
    let want = partition_for_key("id-0", 16);
    for outcome in outcomes {
        let SendOutcome::Enqueued(seq) = outcome else { panic!("not enqueued: {outcome:?}") };
        assert_eq!(seq.partition(true), want);
    }
}

/// Every partition counts what it accepted and handed out (duplicates and peeks are neither),
/// and the queue's runtime sums them: what message rates are computed from.
#[tokio::test]
async fn partitions_count_messages_in_and_out_and_the_queue_sums_them() {
    let f = Fixture::new().await;
    f.create("q", QueueDescription { requires_duplicate_detection: true, ..partitioned() }).await;
    for i in 0..10 {
        f.enqueue("q", Message::new("m").with_message_id(format!("m{i}"))).await;
    }
    let again = f.send("q", Message::new("m").with_message_id("m0")).await.unwrap();
    assert_eq!(again, SendOutcome::Duplicate);
    assert_eq!(f.peek_everything("q").await.len(), 10);
    let (_receiver, received) = f.receive_all("q", 4).await;
    assert_eq!(received.len(), 4);
    for m in &received {
        guard(f.broker.complete("q", m.lock_token().unwrap())).await.expect("complete");
    }

    let runtime = f.runtime("q").await;
    assert_eq!((runtime.incoming_messages_total, runtime.outgoing_messages_total), (10, 4));
    let partitions = guard(f.broker.get_partition_runtimes("q")).await.unwrap();
    let sum = |pick: fn(&ironbus_core::PartitionCountsView) -> u64| {
        partitions.iter().map(|p| pick(p.counts.as_ref().unwrap())).sum::<u64>()
    };
    assert_eq!(sum(|c| c.incoming_messages_total), 10);
    assert_eq!(sum(|c| c.outgoing_messages_total), 4);
    assert!(
        partitions.iter().filter(|p| p.counts.unwrap().incoming_messages_total > 0).count() > 1
    );
}
