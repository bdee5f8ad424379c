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

use ironbus_core::store::WriteLimits;
use ironbus_core::testing::LimitedStore;
use ironbus_core::{
    Broker, BrokerError, Clock, ManualClock, Message, NamespaceLimits, QueueDescription,
    QueueRuntime, ReceiveMode, SendOutcome,
};
use ironbus_store_memory::MemoryStore;

mod common;
use common::guard;

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
        guard(self.broker.get_queue_runtime("q")).await.expect("queue runtime")
    }

    /// Asks for the queue's counts until `done` holds (each ask is a command, so the
    /// partition's cycles run in between).
    async fn until(&self, done: impl Fn(&QueueRuntime) -> bool) -> QueueRuntime {
        guard(async {
            loop {
                let runtime = self.runtime().await;
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
