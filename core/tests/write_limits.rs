//! A store with write limits (PostgreSQL bounds a transaction) is never handed a batch over
//! them: a partition takes commands and works off what time made due over as many cycles as
//! the limits need, each within them, and refuses a request that could never fit.
//!
//! Time comes from a [`ManualClock`]; the limits from a [`LimitedStore`] around the memory
//! store, which records the largest batch it was handed. `tokio::time::timeout` only guards
//! against hangs: no test sleeps.
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use ironbus_core::store::{prefix_end, WriteLimits};
use ironbus_core::testing::{keys, FaultyStore, LimitedStore};
use ironbus_core::{
    Broker, BrokerError, Clock, Disposition, EntityDescription, ManualClock, Message,
    NamespaceLimits, PartitionId, QueueDescription, QueueRuntime, ReceiveMode, SendOutcome,
    SequenceNumber, SubscriptionDescription, TopicDescription,
};
use ironbus_store_memory::MemoryStore;

mod common;
use common::{guard, path};

const LIMITS: WriteLimits = WriteLimits { max_ops: 50, max_bytes: 16 * 1024 };
const MESSAGES: usize = 1000;
/// Messages per send: a send is one atomic write, so it must fit the limits on its own.
const PER_SEND: usize = 10;

struct Fixture {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<LimitedStore>,
}

impl Fixture {
    async fn new(description: QueueDescription) -> Self {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(LimitedStore::new(Arc::new(MemoryStore::new()), LIMITS));
        let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
            .await
            .expect("open broker");
        guard(broker.create_queue("q", description)).await.expect("create queue");
        Fixture { broker, clock, store }
    }

    /// Sends `count` messages made by `make`, `PER_SEND` to a send.
    async fn send_all(&self, count: usize, make: impl Fn(usize) -> Message) {
        for first in (0..count).step_by(PER_SEND) {
            let batch = (first..count.min(first + PER_SEND)).map(&make).collect();
            let outcomes = guard(self.broker.send("q", batch)).await.expect("send");
            assert!(outcomes.iter().all(|o| matches!(o, SendOutcome::Enqueued(_))));
        }
    }

    async fn runtime(&self) -> QueueRuntime {
        self.runtime_of("q").await
    }

    async fn runtime_of(&self, queue: &str) -> QueueRuntime {
        guard(self.broker.get_queue_runtime(queue)).await.expect("queue runtime")
    }

    /// How many messages `address` holds, peeked page by page.
    async fn count(&self, address: &str) -> usize {
        let (mut count, mut from) = (0, SequenceNumber(0));
        loop {
            let page = guard(self.broker.peek(address, from, 100)).await.expect("peek");
            let Some(last) = page.last() else { return count };
            from = SequenceNumber(last.sequence_number().0 + 1);
            count += page.len();
        }
    }

    /// Asks for the queue's counts until `done` holds (each ask is a command, so the
    /// partition's cycles run in between).
    async fn until(&self, done: impl Fn(&QueueRuntime) -> bool) -> QueueRuntime {
        self.until_in("q", done).await
    }

    async fn until_in(&self, queue: &str, done: impl Fn(&QueueRuntime) -> bool) -> QueueRuntime {
        guard(async {
            loop {
                let runtime = self.runtime_of(queue).await;
                if done(&runtime) {
                    return runtime;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
    }

    /// No batch over the limits was handed to the store, and it wrote at least `cycles`.
    fn assert_within_limits(&self, cycles: u64) {
        let (ops, bytes) = (self.store.largest_ops(), self.store.largest_bytes());
        assert!(
            LIMITS.admits(ops, bytes),
            "the store was handed a batch of {ops} operations and {bytes} bytes"
        );
        assert_eq!(self.store.refused(), 0, "no batch was refused");
        assert!(self.store.writes() >= cycles, "only {} writes", self.store.writes());
    }
}

#[tokio::test]
async fn a_burst_of_sends_over_the_write_limits_is_stored_over_several_cycles() {
    let f = Fixture::new(QueueDescription::default()).await;
    let writes_before = f.store.writes();
    // Queued before the partition runs a cycle: far more than one write may hold.
    let sends: Vec<_> = (0..500)
        .map(|i| f.broker.start_send("q", vec![Message::new(format!("m{i}"))]).expect("queued"))
        .collect();
    for send in sends {
        let outcomes = guard(send).await.expect("send");
        assert!(matches!(outcomes[..], [SendOutcome::Enqueued(_)]));
    }
    assert_eq!(f.runtime().await.active_message_count, 500);
    // Two records a message, at most 50 a write.
    f.assert_within_limits(writes_before + 500 * 2 / 50);
}

#[tokio::test]
async fn a_thousand_scheduled_messages_coming_due_at_once_are_enqueued_within_the_limits() {
    let f = Fixture::new(QueueDescription::default()).await;
    let due = f.clock.now().saturating_add(Duration::from_secs(60));
    f.send_all(MESSAGES, |i| Message::new(format!("s{i}")).with_scheduled_enqueue_time(due)).await;
    assert_eq!(f.runtime().await.scheduled_message_count, MESSAGES as u64);
    let writes_before = f.store.writes();

    f.clock.advance(Duration::from_secs(61));
    let runtime = f.until(|r| r.scheduled_message_count == 0).await;
    assert_eq!(runtime.active_message_count, MESSAGES as u64);
    // A meta record a message, at most half a write for what time made due.
    f.assert_within_limits(writes_before + (MESSAGES / 25) as u64);
}

#[tokio::test]
async fn a_thousand_expired_locks_are_released_within_the_limits() {
    let f = Fixture::new(QueueDescription::default()).await;
    f.send_all(MESSAGES, |i| Message::new(format!("l{i}"))).await;
    let first = guard(f.broker.open_receiver("q", ReceiveMode::PeekLock)).await.expect("receiver");
    first.add_credit(MESSAGES as u32);
    let mut counts = Vec::new();
    for _ in 0..MESSAGES {
        counts.push(guard(first.recv()).await.expect("delivered").broker.delivery_count);
    }
    let writes_before = f.store.writes();

    f.clock.advance(Duration::from_secs(61));
    let again = guard(f.broker.open_receiver("q", ReceiveMode::PeekLock)).await.expect("receiver");
    again.add_credit(MESSAGES as u32);
    for _ in 0..MESSAGES {
        let message = guard(again.recv()).await.expect("delivered again");
        assert_eq!(message.broker.delivery_count, counts[0] + 1, "its lock expired once");
    }
    f.assert_within_limits(writes_before + (MESSAGES / 25) as u64);
}

#[tokio::test]
async fn a_thousand_messages_expiring_at_once_are_dead_lettered_within_the_limits() {
    let description =
        QueueDescription { dead_lettering_on_message_expiration: true, ..Default::default() };
    let f = Fixture::new(description).await;
    f.send_all(MESSAGES, |i| {
        Message::new(format!("e{i}")).with_time_to_live(Duration::from_secs(30))
    })
    .await;
    let writes_before = f.store.writes();

    f.clock.advance(Duration::from_secs(31));
    let runtime = f.until(|r| r.dead_letter_message_count == MESSAGES as u64).await;
    assert_eq!(runtime.active_message_count, 0);
    f.assert_within_limits(writes_before + (MESSAGES / 25) as u64);
}

#[tokio::test]
async fn a_send_that_no_write_could_hold_is_refused_and_the_queue_goes_on() {
    let f = Fixture::new(QueueDescription::default()).await;
    let batch = (0..100).map(|i| Message::new(format!("b{i}"))).collect();
    let error = guard(f.broker.send("q", batch)).await.expect_err("over the store's limits");
    assert!(
        matches!(&error, BrokerError::InvalidOperation(text) if text.contains("send fewer")),
        "{error:?}"
    );
    assert_eq!(f.runtime().await.active_message_count, 0, "nothing of it was stored");

    let outcomes = guard(f.broker.send("q", vec![Message::new("fits")])).await.expect("send");
    assert!(matches!(outcomes[..], [SendOutcome::Enqueued(_)]));
    f.assert_within_limits(1);
}

#[tokio::test]
async fn a_drained_thousand_receive_and_delete_deliveries_are_written_within_the_limits() {
    let f = Fixture::new(QueueDescription::default()).await;
    f.send_all(MESSAGES, |i| Message::new(format!("r{i}"))).await;
    let writes_before = f.store.writes();

    let receiver =
        guard(f.broker.open_receiver("q", ReceiveMode::ReceiveAndDelete)).await.expect("receiver");
    receiver.add_credit(MESSAGES as u32);
    // A drain answers only once every delivery it could make is made, over as many cycles.
    assert_eq!(guard(receiver.drain()).await, 0, "no credit given up");
    let mut delivered = 0;
    while receiver.try_recv().is_some() {
        delivered += 1;
    }
    assert_eq!(delivered, MESSAGES);
    assert_eq!(f.runtime().await.active_message_count, 0);
    f.assert_within_limits(writes_before + (MESSAGES / 50) as u64);
}

#[tokio::test]
async fn settling_more_messages_at_once_than_a_write_holds_settles_them_all() {
    let f = Fixture::new(QueueDescription::default()).await;
    f.send_all(200, |i| Message::new(format!("c{i}"))).await;
    let receiver =
        guard(f.broker.open_receiver("q", ReceiveMode::PeekLock)).await.expect("receiver");
    receiver.add_credit(200);
    let mut items = Vec::new();
    for _ in 0..200 {
        let message = guard(receiver.recv()).await.expect("delivered");
        items.push((message.lock_token().expect("peek-lock"), Disposition::Complete));
    }
    let writes_before = f.store.writes();

    let outcomes = guard(f.broker.start_settle_many("q", items)).await;
    assert_eq!(outcomes.len(), 200);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(f.runtime().await.active_message_count, 0);
    f.assert_within_limits(writes_before + 200 / 50);
}

#[tokio::test]
async fn expired_duplicate_detection_records_are_deleted_within_the_limits() {
    let description = QueueDescription {
        requires_duplicate_detection: true,
        duplicate_detection_history_time_window: Duration::from_secs(60),
        ..Default::default()
    };
    let f = Fixture::new(description).await;
    f.send_all(MESSAGES, |i| Message::new("d").with_message_id(format!("id-{i}"))).await;
    let dedup = keys::dedup_prefix(1, PartitionId(0));
    let records = || async {
        let end = prefix_end(&dedup);
        guard(f.store.inner().scan(&dedup, &end, usize::MAX)).await.expect("scan").len()
    };
    assert_eq!(records().await, MESSAGES);
    let writes_before = f.store.writes();

    f.clock.advance(Duration::from_secs(61));
    guard(async {
        while records().await > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    f.assert_within_limits(writes_before + (MESSAGES / 50) as u64);
}

#[tokio::test]
async fn a_topic_fans_out_bursts_and_due_schedules_within_the_limits() {
    let f = Fixture::new(QueueDescription::default()).await;
    let topic = EntityDescription::Topic(TopicDescription::default());
    guard(f.broker.create_entity(&path("t"), topic)).await.expect("topic");
    for s in ["a", "b", "c"] {
        let subscription = EntityDescription::Subscription(SubscriptionDescription::default());
        guard(f.broker.create_entity(&path(&format!("t/Subscriptions/{s}")), subscription))
            .await
            .expect("subscription");
    }
    let writes_before = f.store.writes();
    let sends: Vec<_> = (0..200)
        .map(|i| f.broker.start_send("t", vec![Message::new(format!("p{i}"))]).expect("queued"))
        .collect();
    for send in sends {
        guard(send).await.expect("publish");
    }
    let due = f.clock.now().saturating_add(Duration::from_secs(60));
    for first in (0..300).step_by(5) {
        let batch = (first..first + 5)
            .map(|i| Message::new(format!("s{i}")).with_scheduled_enqueue_time(due))
            .collect();
        guard(f.broker.schedule("t", batch)).await.expect("schedule");
    }
    f.clock.advance(Duration::from_secs(61));
    for s in ["a", "b", "c"] {
        let address = format!("t/Subscriptions/{s}");
        guard(async {
            while f.count(&address).await < 500 {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert_eq!(f.count(&address).await, 500, "{address}");
    }
    // A body and three copies a publish.
    f.assert_within_limits(writes_before + 500 * 4 / 50);
}

#[tokio::test]
async fn turning_forwarding_on_moves_a_backlog_over_several_cycles() {
    let f = Fixture::new(QueueDescription::default()).await;
    guard(f.broker.create_queue("dest", QueueDescription::default())).await.expect("dest");
    f.send_all(300, |i| Message::new(format!("f{i}"))).await;
    let writes_before = f.store.writes();

    let forwarding =
        QueueDescription { forward_to: Some("dest".into()), ..QueueDescription::default() };
    guard(f.broker.update_queue("q", forwarding)).await.expect("forward");
    let dest = f.until_in("dest", |r| r.active_message_count == 300).await;
    assert_eq!(dest.active_message_count, 300);
    let source = f.until(|r| r.active_message_count + r.transfer_message_count == 0).await;
    assert_eq!(source.total_message_count, 0);
    f.assert_within_limits(writes_before + 300 * 2 / 50);
}

#[tokio::test]
async fn a_session_lock_expiring_over_a_hundred_locked_messages_counts_them_within_the_limits() {
    let description = QueueDescription { requires_session: true, ..QueueDescription::default() };
    let f = Fixture::new(description).await;
    f.send_all(100, |i| Message::new(format!("x{i}")).with_session_id("s")).await;
    let held = guard(f.broker.accept_session("q", "s", ReceiveMode::PeekLock))
        .await
        .expect("accept the session");
    held.add_credit(100);
    let mut first = Vec::new();
    for _ in 0..100 {
        first.push(guard(held.recv()).await.expect("delivered").broker.delivery_count);
    }
    let writes_before = f.store.writes();

    f.clock.advance(Duration::from_secs(61));
    let again = guard(async {
        loop {
            match f.broker.accept_session("q", "s", ReceiveMode::PeekLock).await {
                Ok(receiver) => return receiver,
                Err(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await;
    assert!(held.is_lock_lost(), "the first lock expired");
    again.add_credit(100);
    for _ in 0..100 {
        let message = guard(again.recv()).await.expect("delivered again");
        assert_eq!(message.broker.delivery_count, first[0] + 1, "its session lock expired once");
    }
    f.assert_within_limits(writes_before + 100 / 50);
}

#[tokio::test]
async fn a_partition_cut_short_by_the_limits_waits_to_retry_when_its_store_fails() {
    let clock = Arc::new(ManualClock::default());
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let store = Arc::new(LimitedStore::new(faulty.clone(), LIMITS));
    let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
        .await
        .expect("open broker");
    guard(broker.create_queue("q", QueueDescription::default())).await.expect("create queue");
    let f = Fixture { broker, clock, store };
    f.send_all(MESSAGES, |i| Message::new(format!("u{i}"))).await;

    // Deliveries that write, more than a cycle holds, the first cycle of which fails.
    let receiver =
        guard(f.broker.open_receiver("q", ReceiveMode::ReceiveAndDelete)).await.expect("receiver");
    faulty.set_unavailable(true);
    receiver.add_credit(MESSAGES as u32);
    // The failed write, then a rebuild that fails too.
    guard(async {
        while faulty.injected_failures() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let reads = faulty.gets() + faulty.scans();
    for _ in 0..1000 {
        tokio::task::yield_now().await;
    }
    // A spinning partition would try to rebuild on every turn (each store call yields).
    let more_reads = faulty.gets() + faulty.scans() - reads;
    assert!(more_reads <= 2, "{more_reads} reads: no rebuild before the retry interval");

    faulty.set_unavailable(false);
    f.clock.advance(Duration::from_secs(2));
    // A command makes the partition try at once, whenever it last chose its retry deadline.
    f.runtime().await;
    for _ in 0..MESSAGES {
        guard(receiver.recv()).await.expect("delivered after the outage");
    }
    f.assert_within_limits(1);
}

#[tokio::test]
async fn a_batch_delete_over_the_write_limits_deletes_what_one_write_holds_and_no_more() {
    let f = Fixture::new(QueueDescription::default()).await;
    f.send_all(200, |i| Message::new(format!("m{i}"))).await;
    let before = f.clock.now().saturating_add(Duration::from_millis(1));

    // Best effort, as Service Bus's: each call deletes what one write holds; repeated calls
    // (the SDKs' purge) delete the rest.
    let mut deleted = Vec::new();
    loop {
        let n = guard(f.broker.delete_messages("q", 4000, before, None)).await.expect("delete");
        if n == 0 {
            break;
        }
        deleted.push(n);
    }

    assert_eq!(deleted.iter().sum::<u64>(), 200, "{deleted:?}");
    assert!(deleted.len() > 1, "one write cannot hold 200 deletions: {deleted:?}");
    assert_eq!(f.runtime().await.active_message_count, 0);
    f.assert_within_limits(0);
}
