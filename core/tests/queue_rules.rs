//! Service Bus queue rules, through the public [`Broker`] API, on a queue without partitioning
//! and a [`ManualClock`]: peek-lock, lock expiry and delivery counts, settlement, deferral,
//! dead-lettering, receive-and-delete, TTL, scheduling, peek, duplicate detection, credit,
//! entity status, size limits, management, and recovery from the store.
//!
//! Time only moves when a test advances the clock. A real-time timeout guards every wait for a
//! delivery, so a bug fails the test instead of hanging it. "Nothing is delivered" is checked
//! with credit and a drain: when `drain` returns, every message that used credit is buffered.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

const QUEUE: &str = "q";
const DLQ: &str = "q/$DeadLetterQueue";
/// A hang guard only: no rule waits for real time.
const WAIT: Duration = Duration::from_secs(5);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn text(s: &str) -> PropertyValue {
    PropertyValue::String(s.to_owned())
}

fn props(pairs: &[(&str, PropertyValue)]) -> ApplicationProperties {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn queue_with(f: impl FnOnce(&mut QueueDescription)) -> QueueDescription {
    let mut d = QueueDescription::default();
    f(&mut d);
    d
}

/// The counts of a queue that the rules move messages between.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    active: u64,
    deferred: u64,
    scheduled: u64,
    dead_lettered: u64,
}

impl Counts {
    fn active(n: u64) -> Self {
        Counts { active: n, ..Counts::default() }
    }

    fn dead_lettered(n: u64) -> Self {
        Counts { dead_lettered: n, ..Counts::default() }
    }
}

struct Fixture {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
}

impl Fixture {
    async fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::default());
        let broker = Broker::open(store.clone(), clock.clone(), NamespaceLimits::default())
            .await
            .expect("broker opens");
        Fixture { broker, clock, store }
    }

    /// A broker with the queue [`QUEUE`] described by `description`.
    async fn with_queue(description: QueueDescription) -> Self {
        let f = Fixture::new().await;
        f.broker.create_queue(QUEUE, description).await.expect("queue is created");
        f
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Sends to [`QUEUE`]; every message must be enqueued.
    async fn send(&self, messages: Vec<Message>) -> Vec<SequenceNumber> {
        let outcomes = self.broker.send(QUEUE, messages).await.expect("send succeeds");
        outcomes
            .into_iter()
            .map(|o| match o {
                SendOutcome::Enqueued(seq) => seq,
                SendOutcome::Duplicate => panic!("unexpected duplicate"),
            })
            .collect()
    }

    async fn send_one(&self, message: Message) -> SequenceNumber {
        self.send(vec![message]).await[0]
    }

    async fn receiver(&self, mode: ReceiveMode) -> Receiver {
        self.broker.open_receiver(QUEUE, mode).await.expect("receiver opens")
    }

    async fn dlq_receiver(&self) -> Receiver {
        self.broker.open_receiver(DLQ, ReceiveMode::PeekLock).await.expect("DLQ receiver opens")
    }

    async fn runtime(&self) -> QueueRuntime {
        self.broker.get_queue_runtime(QUEUE).await.expect("runtime of the queue")
    }

    async fn counts(&self) -> Counts {
        let rt = self.runtime().await;
        Counts {
            active: rt.active_message_count,
            deferred: rt.deferred_message_count,
            scheduled: rt.scheduled_message_count,
            dead_lettered: rt.dead_letter_message_count,
        }
    }

    async fn settle(&self, m: &ReceivedMessage, disposition: Disposition) -> Result<()> {
        self.broker.settle(QUEUE, token(m), disposition).await
    }

    async fn abandon(&self, m: &ReceivedMessage, properties: ApplicationProperties) -> Result<()> {
        self.settle(m, Disposition::Abandon { properties }).await
    }

    /// Abandons a message received from the dead-letter queue.
    async fn abandon_dead(&self, m: &ReceivedMessage) {
        let abandon = Disposition::Abandon { properties: ApplicationProperties::new() };
        self.broker.settle(DLQ, token(m), abandon).await.expect("abandon in the DLQ");
    }

    async fn defer(&self, m: &ReceivedMessage) -> Result<()> {
        self.settle(m, Disposition::Defer { properties: ApplicationProperties::new() }).await
    }

    async fn peek_all(&self, address: &str) -> Vec<ReceivedMessage> {
        self.broker.peek(address, SequenceNumber(0), 1000).await.expect("peek succeeds")
    }
}

fn token(m: &ReceivedMessage) -> LockToken {
    m.lock_token().expect("peek-lock delivery has a lock token")
}

/// The next delivered message, waiting (with a hang guard) until it arrives.
async fn next(r: &Receiver) -> ReceivedMessage {
    tokio::time::timeout(WAIT, r.recv())
        .await
        .expect("a message should have been delivered")
        .expect("receiver closed")
}

/// Gives one credit and waits for the delivery.
async fn take_one(r: &Receiver) -> ReceivedMessage {
    r.add_credit(1);
    next(r).await
}

/// Gives `credit`, drains, and returns everything delivered against it.
async fn take_up_to(r: &Receiver, credit: u32) -> Vec<ReceivedMessage> {
    r.add_credit(credit);
    r.drain().await;
    std::iter::from_fn(|| r.try_recv()).collect()
}

/// Asserts that the receiver gets nothing even with credit to spare.
async fn assert_nothing_delivered(r: &Receiver) {
    let got: Vec<SequenceNumber> =
        take_up_to(r, 100).await.iter().map(|m| m.sequence_number()).collect();
    assert!(got.is_empty(), "expected no delivery, got {got:?}");
}

fn seqs(messages: &[ReceivedMessage]) -> Vec<SequenceNumber> {
    messages.iter().map(|m| m.sequence_number()).collect()
}

fn assert_lock_lost<T: std::fmt::Debug>(result: Result<T>) {
    match result {
        Err(BrokerError::MessageLockLost) => {}
        other => panic!("expected MessageLockLost, got {other:?}"),
    }
}

fn assert_invalid_argument<T: std::fmt::Debug>(result: Result<T>, want: &str, case: &str) {
    match result {
        Err(BrokerError::InvalidArgument { field, .. }) => assert_eq!(field, want, "{case}"),
        other => panic!("{case}: expected InvalidArgument on {want}, got {other:?}"),
    }
}

fn assert_disabled<T: std::fmt::Debug>(result: Result<T>, status: &str) {
    match result {
        Err(BrokerError::EntityDisabled { status: got, .. }) => assert_eq!(got, status),
        other => panic!("expected EntityDisabled ({status}), got {other:?}"),
    }
}

fn assert_dead_letter_reason(m: &ReceivedMessage, reason: &str) {
    assert_eq!(m.broker.dead_letter_reason.as_deref(), Some(reason));
    assert_eq!(m.message.application_properties.get("DeadLetterReason"), Some(&text(reason)));
}

// ---- peek-lock ----

#[tokio::test]
async fn peek_lock_delivery_is_locked_for_the_lock_duration() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    let sent = Message::new("abc").with_message_id("id-1");
    let seq = f.send_one(sent.clone()).await;
    assert_eq!(seq, SequenceNumber(1), "a new queue numbers its messages from 1");
    assert_eq!(f.runtime().await.size_in_bytes, sent.size() as u64);
    let r = f.receiver(ReceiveMode::PeekLock).await;

    let m = take_one(&r).await;

    assert_eq!(m.sequence_number(), seq);
    assert_eq!(&m.message.body[..], b"abc");
    assert_eq!(m.message.properties.message_id.as_deref(), Some("id-1"));
    assert_eq!(m.broker.enqueued_time, f.now());
    assert_eq!(m.broker.state, MessageState::Active);
    assert_eq!(m.broker.delivery_count, 0, "no earlier failed delivery");
    let lock = m.lock.expect("peek-lock delivery has a lock");
    assert_eq!(lock.locked_until, f.now().saturating_add(secs(30)));
    assert_eq!(f.counts().await, Counts::active(1), "a locked message is still active");
}

#[tokio::test]
async fn complete_removes_the_message() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.broker.complete(QUEUE, token(&m)).await.expect("complete succeeds");

    let rt = f.runtime().await;
    assert_eq!(rt.active_message_count, 0);
    assert_eq!(rt.total_message_count, 0);
    assert_eq!(rt.size_in_bytes, 0);
    assert_nothing_delivered(&r).await;
    assert_lock_lost(f.broker.complete(QUEUE, token(&m)).await);
}

#[tokio::test]
async fn settling_with_an_unknown_lock_token_fails_with_lock_lost() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send_one(Message::new("a")).await;
    let unknown = LockToken::generate(PartitionId(0));
    let dispositions = [
        Disposition::Complete,
        Disposition::Abandon { properties: ApplicationProperties::new() },
        Disposition::Release,
        Disposition::Defer { properties: ApplicationProperties::new() },
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() },
    ];
    for disposition in dispositions {
        assert_lock_lost(f.broker.settle(QUEUE, unknown, disposition).await);
    }
    assert_lock_lost(f.broker.renew_lock(QUEUE, unknown).await);
    assert_eq!(f.counts().await, Counts::active(1), "the message is untouched");
}

// ---- lock expiry and delivery counts ----

#[tokio::test]
async fn expired_lock_redelivers_with_incremented_delivery_count() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(10))).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let first = take_one(&r).await;
    assert_eq!(first.broker.delivery_count, 0);

    f.advance(secs(11));

    let second = take_one(&r).await;
    assert_eq!(second.sequence_number(), seq);
    assert_eq!(second.broker.delivery_count, 1);
    assert_ne!(token(&second), token(&first), "a redelivery gets a new lock");
    assert_lock_lost(f.broker.complete(QUEUE, token(&first)).await);
    f.broker.complete(QUEUE, token(&second)).await.expect("the new lock settles");
}

#[tokio::test]
async fn settling_after_the_lock_expired_fails_with_lock_lost() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(10))).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.advance(secs(10));

    assert_lock_lost(f.broker.complete(QUEUE, token(&m)).await);
    assert_lock_lost(f.abandon(&m, ApplicationProperties::new()).await);
    assert_lock_lost(f.broker.renew_lock(QUEUE, token(&m)).await);
    assert_eq!(f.counts().await, Counts::active(1), "the message is back, not settled");
}

#[tokio::test]
async fn lock_expiring_max_delivery_count_times_dead_letters_the_message() {
    let f = Fixture::with_queue(queue_with(|d| {
        d.lock_duration = secs(10);
        d.max_delivery_count = 3;
    }))
    .await;
    let seq = f.send_one(Message::new("poison")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    for attempt in 0..3 {
        let m = take_one(&r).await;
        assert_eq!(m.sequence_number(), seq);
        assert_eq!(m.broker.delivery_count, attempt, "earlier failed deliveries");
        f.advance(secs(11));
    }

    assert_nothing_delivered(&r).await;
    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    let dlq = f.dlq_receiver().await;
    let dead = take_one(&dlq).await;
    assert_eq!(dead.sequence_number(), seq);
    assert_eq!(&dead.message.body[..], b"poison");
    assert_dead_letter_reason(&dead, "MaxDeliveryCountExceeded");
    assert!(dead.broker.dead_letter_error_description.is_some());
}

#[tokio::test]
async fn expired_lock_redelivers_to_a_waiting_receiver() {
    // The receiver already has credit: the clock alone must bring the message back.
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(10))).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    r.add_credit(2);
    let first = next(&r).await;

    f.advance(secs(10));

    let again = next(&r).await;
    assert_eq!(again.sequence_number(), seq);
    assert_eq!(again.broker.delivery_count, 1);
    assert_lock_lost(f.broker.complete(QUEUE, token(&first)).await);
}

// ---- renew lock ----

#[tokio::test]
async fn renewed_lock_does_not_expire_at_the_old_time() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    let old_until = m.lock.expect("locked").locked_until;

    f.advance(secs(20));
    let renewed = f.broker.renew_lock(QUEUE, token(&m)).await.expect("renew succeeds");
    assert_eq!(renewed, f.now().saturating_add(secs(30)));
    assert!(renewed > old_until);

    // Past the old expiry, before the new one: still locked.
    f.advance(secs(20));
    let other = f.receiver(ReceiveMode::PeekLock).await;
    assert_nothing_delivered(&other).await;
    assert_eq!(f.counts().await, Counts::active(1));

    // Past the new expiry: redelivered.
    f.advance(secs(11));
    let again = take_one(&other).await;
    assert_eq!(again.sequence_number(), m.sequence_number());
    assert_eq!(again.broker.delivery_count, 1);
    assert_lock_lost(f.broker.complete(QUEUE, token(&m)).await);
}

#[tokio::test]
async fn renewed_lock_can_still_settle_after_the_old_expiry() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.advance(secs(25));
    f.broker.renew_lock(QUEUE, token(&m)).await.expect("renew succeeds");
    f.advance(secs(25));

    f.broker.complete(QUEUE, token(&m)).await.expect("the renewed lock is held");
    assert_eq!(f.counts().await, Counts::default());
}

// ---- abandon and release ----

#[tokio::test]
async fn abandon_redelivers_with_modified_properties_and_incremented_count() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f
        .send_one(
            Message::new("a")
                .with_property("kept", PropertyValue::Int(1))
                .with_property("changed", text("before")),
        )
        .await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.abandon(&m, props(&[("changed", text("after")), ("added", PropertyValue::Long(7))]))
        .await
        .expect("abandon succeeds");

    let again = take_one(&r).await;
    assert_eq!(again.sequence_number(), seq);
    assert_eq!(again.broker.delivery_count, 1);
    let app = &again.message.application_properties;
    assert_eq!(app.get("kept"), Some(&PropertyValue::Int(1)));
    assert_eq!(app.get("changed"), Some(&text("after")));
    assert_eq!(app.get("added"), Some(&PropertyValue::Long(7)));
    assert_lock_lost(f.broker.complete(QUEUE, token(&m)).await);
}

#[tokio::test]
async fn abandoning_max_delivery_count_times_dead_letters_the_message() {
    let f = Fixture::with_queue(queue_with(|d| d.max_delivery_count = 3)).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    for attempt in 0..3 {
        let m = take_one(&r).await;
        assert_eq!(m.broker.delivery_count, attempt);
        f.abandon(&m, ApplicationProperties::new()).await.expect("abandon succeeds");
    }

    assert_nothing_delivered(&r).await;
    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!(dead.sequence_number(), seq);
    assert_dead_letter_reason(&dead, "MaxDeliveryCountExceeded");
}

#[tokio::test]
async fn a_dead_letter_abandoned_or_expired_keeps_its_delivery_count() {
    let f = Fixture::with_queue(queue_with(|d| {
        d.lock_duration = secs(10);
        d.max_delivery_count = 2;
    }))
    .await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    for _ in 0..2 {
        f.abandon(&take_one(&r).await, ApplicationProperties::new()).await.expect("abandon");
    }
    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    let dlq = f.dlq_receiver().await;

    // Far more failed deliveries than MaxDeliveryCount, by abandon and by lock expiry: the
    // count stays, and the dead letter stays where it is.
    for attempt in 0..6 {
        let dead = take_one(&dlq).await;
        assert_eq!((dead.sequence_number(), dead.broker.delivery_count), (seq, 2), "{attempt}");
        if attempt % 2 == 0 {
            f.abandon_dead(&dead).await;
        } else {
            f.advance(secs(11));
        }
        assert_eq!(f.counts().await, Counts::dead_lettered(1), "{attempt}");
    }
    assert_eq!(f.peek_all(DLQ).await[0].broker.delivery_count, 2);
}

#[tokio::test]
async fn release_does_not_count_a_delivery() {
    let f = Fixture::with_queue(queue_with(|d| d.max_delivery_count = 2)).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    // More releases than MaxDeliveryCount: none of them counts.
    for _ in 0..4 {
        let m = take_one(&r).await;
        assert_eq!(m.sequence_number(), seq);
        assert_eq!(m.broker.delivery_count, 0);
        f.settle(&m, Disposition::Release).await.expect("release succeeds");
    }

    assert_eq!(f.counts().await, Counts::active(1));
}

// ---- defer ----

#[tokio::test]
async fn deferred_message_is_not_delivered_to_receivers() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send(vec![Message::new("deferred"), Message::new("next")]).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    assert_eq!(m.sequence_number(), seq[0]);

    f.defer(&m).await.expect("defer succeeds");

    assert_eq!(f.counts().await, Counts { active: 1, deferred: 1, ..Counts::default() });
    let rest = take_up_to(&r, 10).await;
    assert_eq!(seqs(&rest), vec![seq[1]], "only the active message is delivered");
    assert_lock_lost(f.broker.complete(QUEUE, token(&m)).await);
}

#[tokio::test]
async fn deferred_message_is_received_by_sequence_number_and_completed() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.settle(&m, Disposition::Defer { properties: props(&[("why", text("later"))]) })
        .await
        .expect("defer succeeds");

    let got = f
        .broker
        .receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock)
        .await
        .expect("deferred message is found");

    assert_eq!(seqs(&got), vec![seq]);
    let d = &got[0];
    assert_eq!(d.broker.state, MessageState::Deferred);
    assert_eq!(d.message.application_properties.get("why"), Some(&text("later")));
    let lock = d.lock.expect("peek-lock receive of a deferred message locks it");
    assert_eq!(lock.locked_until, f.now().saturating_add(secs(30)));
    f.broker.complete(QUEUE, lock.token).await.expect("complete succeeds");
    assert_eq!(f.runtime().await.total_message_count, 0);
}

#[tokio::test]
async fn receive_deferred_of_a_message_not_deferred_fails_with_not_found() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send(vec![Message::new("deferred"), Message::new("active")]).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");
    let unknown = SequenceNumber(seq[1].0 + 100);

    for (case, asked) in [("active", seq[1]), ("unknown", unknown)] {
        match f.broker.receive_deferred(QUEUE, &[asked], ReceiveMode::PeekLock).await {
            Err(BrokerError::MessageNotFound(got)) => assert_eq!(got, asked, "{case}"),
            other => panic!("{case}: expected MessageNotFound, got {other:?}"),
        }
    }

    // A deferred message locked by an earlier receive is not available either.
    f.broker.receive_deferred(QUEUE, &[seq[0]], ReceiveMode::PeekLock).await.expect("first");
    match f.broker.receive_deferred(QUEUE, &[seq[0]], ReceiveMode::PeekLock).await {
        Err(BrokerError::MessageNotFound(got)) => assert_eq!(got, seq[0]),
        other => panic!("locked deferred: expected MessageNotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn receive_deferred_naming_a_message_twice_hands_it_out_once() {
    for mode in [ReceiveMode::PeekLock, ReceiveMode::ReceiveAndDelete] {
        let f = Fixture::with_queue(QueueDescription::default()).await;
        let seq = f.send(vec![Message::new("a"), Message::new("b")]).await;
        let r = f.receiver(ReceiveMode::PeekLock).await;
        let m = take_one(&r).await;
        f.defer(&m).await.expect("defer succeeds");
        drop(r);

        let got = f
            .broker
            .receive_deferred(QUEUE, &[seq[0], seq[0]], mode)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e:?}"));

        assert_eq!(seqs(&got), vec![seq[0]], "{mode:?}");
        if let Some(lock) = got[0].lock {
            f.broker.complete(QUEUE, lock.token).await.expect("the one lock settles");
        }
        // The partition still serves.
        f.send_one(Message::new("c")).await;
        assert_eq!(f.counts().await, Counts { active: 2, ..Counts::default() }, "{mode:?}");
    }
}

#[tokio::test]
async fn abandoned_deferred_message_stays_deferred() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");
    let got = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();

    f.abandon(&got[0], props(&[("tries", PropertyValue::Int(1))])).await.expect("abandon");

    assert_eq!(f.counts().await, Counts { deferred: 1, ..Counts::default() });
    assert_nothing_delivered(&r).await;
    let peeked = f.peek_all(QUEUE).await;
    assert_eq!(seqs(&peeked), vec![seq]);
    assert_eq!(peeked[0].broker.state, MessageState::Deferred);
    let again = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();
    // The delivery that ended in the deferral and the one that ended in the abandon
    // (Service Bus: 2; .NET's DeliveryCount 3).
    assert_eq!(again[0].broker.delivery_count, 2, "the abandon counted");
    assert_eq!(again[0].message.application_properties.get("tries"), Some(&PropertyValue::Int(1)));
}

#[tokio::test]
async fn deferred_message_stays_deferred_when_its_lock_expires() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(10))).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");
    let got = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();

    f.advance(secs(11));

    assert_lock_lost(f.broker.complete(QUEUE, token(&got[0])).await);
    assert_eq!(f.counts().await, Counts { deferred: 1, ..Counts::default() });
    assert_nothing_delivered(&r).await;
    let again = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();
    assert_eq!(again[0].broker.delivery_count, 2, "the deferral and the lock expiry counted");
}

#[tokio::test]
async fn a_deferred_message_received_by_sequence_number_counts_its_earlier_deliveries() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    assert_eq!(m.broker.delivery_count, 0, "a first delivery");
    f.defer(&m).await.expect("defer succeeds");

    // Service Bus counts the delivery that ended in the deferral (js: deliveryCount 1).
    let peeked = f.peek_all(QUEUE).await;
    assert_eq!(peeked[0].broker.delivery_count, 1, "peek");
    let got = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();
    assert_eq!(got[0].broker.delivery_count, 1, "received by sequence number");

    // And each delivery by sequence number after it, deferred again.
    f.defer(&got[0]).await.expect("defer again");
    let got = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::ReceiveAndDelete).await;
    assert_eq!(got.unwrap()[0].broker.delivery_count, 2, "received again");
}

#[tokio::test]
async fn deferring_a_message_at_max_delivery_count_dead_letters_it() {
    let f = Fixture::with_queue(queue_with(|d| d.max_delivery_count = 2)).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    f.defer(&take_one(&r).await).await.expect("defer succeeds");
    let got = f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await.unwrap();

    f.defer(&got[0]).await.expect("the second deferral succeeds");

    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!((dead.sequence_number(), dead.broker.delivery_count), (seq, 2));
    assert_dead_letter_reason(&dead, "MaxDeliveryCountExceeded");
}

#[tokio::test]
async fn receive_deferred_returns_messages_in_the_order_asked() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send((0..3).map(|i| Message::new(format!("m{i}"))).collect()).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    for m in take_up_to(&r, 3).await {
        f.defer(&m).await.expect("defer succeeds");
    }

    let asked = [sent[2], sent[0], sent[1]];
    let got = f.broker.receive_deferred(QUEUE, &asked, ReceiveMode::PeekLock).await.unwrap();

    assert_eq!(seqs(&got), asked.to_vec());
    assert!(got.iter().all(|m| m.lock.is_some()));
}

#[tokio::test]
async fn deferred_message_expires_like_any_other() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = true)).await;
    let seq = f.send_one(Message::new("a").with_time_to_live(secs(30))).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");

    f.advance(secs(31));

    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    assert!(matches!(
        f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await,
        Err(BrokerError::MessageNotFound(_))
    ));
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!(dead.sequence_number(), seq);
    assert_dead_letter_reason(&dead, "TTLExpiredException");
}

#[tokio::test]
async fn receive_and_delete_of_a_deferred_message_removes_it() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");

    let got = f
        .broker
        .receive_deferred(QUEUE, &[seq], ReceiveMode::ReceiveAndDelete)
        .await
        .expect("deferred message is found");

    assert_eq!(seqs(&got), vec![seq]);
    assert!(got[0].lock.is_none(), "receive-and-delete takes no lock");
    assert_eq!(f.counts().await, Counts::default());
    assert_eq!(f.runtime().await.total_message_count, 0);
    assert!(matches!(
        f.broker.receive_deferred(QUEUE, &[seq], ReceiveMode::PeekLock).await,
        Err(BrokerError::MessageNotFound(_))
    ));
}

// ---- dead-lettering ----

#[tokio::test]
async fn dead_lettered_message_carries_reason_and_description() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("a").with_property("kept", PropertyValue::Int(1))).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.settle(
        &m,
        Disposition::DeadLetter {
            reason: Some("BadOrder".into()),
            description: Some("the order has no lines".into()),
            properties: props(&[("extra", text("x"))]),
        },
    )
    .await
    .expect("dead-letter succeeds");

    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    assert_nothing_delivered(&r).await;
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!(dead.sequence_number(), seq);
    assert_dead_letter_reason(&dead, "BadOrder");
    assert_eq!(
        dead.broker.dead_letter_error_description.as_deref(),
        Some("the order has no lines")
    );
    let app = &dead.message.application_properties;
    assert_eq!(app.get("DeadLetterErrorDescription"), Some(&text("the order has no lines")));
    assert_eq!(app.get("kept"), Some(&PropertyValue::Int(1)));
    assert_eq!(app.get("extra"), Some(&text("x")));
    let peeked = f.peek_all(DLQ).await;
    assert_eq!(seqs(&peeked), vec![seq], "peek reads the dead-letter queue too");
}

#[tokio::test]
async fn dead_lettering_a_message_in_the_dead_letter_queue_is_invalid() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.settle(
        &m,
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() },
    )
    .await
    .expect("dead-letter succeeds");
    let dead = take_one(&f.dlq_receiver().await).await;

    let again = f
        .broker
        .settle(
            DLQ,
            token(&dead),
            Disposition::DeadLetter {
                reason: Some("again".into()),
                description: None,
                properties: Default::default(),
            },
        )
        .await;

    assert!(matches!(again, Err(BrokerError::InvalidOperation(_))), "{again:?}");
    assert_eq!(f.counts().await, Counts::dead_lettered(1));
}

#[tokio::test]
async fn dead_lettered_message_can_be_completed() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.settle(
        &m,
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() },
    )
    .await
    .expect("dead-letter succeeds");
    let dlq = f.dlq_receiver().await;
    let dead = take_one(&dlq).await;

    f.broker.complete(DLQ, token(&dead)).await.expect("complete in the DLQ succeeds");

    assert_eq!(f.counts().await, Counts::default());
    assert_eq!(f.runtime().await.total_message_count, 0);
    assert_nothing_delivered(&dlq).await;
}

#[tokio::test]
async fn dead_lettered_message_is_never_dead_lettered_again_by_delivery_count() {
    let f = Fixture::with_queue(queue_with(|d| {
        d.max_delivery_count = 2;
        d.lock_duration = secs(10);
    }))
    .await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.settle(
        &m,
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() },
    )
    .await
    .expect("dead-letter succeeds");
    let dlq = f.dlq_receiver().await;

    // More failed deliveries than MaxDeliveryCount, by abandon and by lock expiry.
    for attempt in 0..4 {
        let dead = take_one(&dlq).await;
        assert_eq!(dead.sequence_number(), seq);
        // A dead-letter queue counts no deliveries (Service Bus).
        assert_eq!(dead.broker.delivery_count, 0, "{attempt}");
        if attempt % 2 == 0 {
            f.broker
                .settle(DLQ, token(&dead), Disposition::Abandon { properties: Default::default() })
                .await
                .expect("abandon in the DLQ succeeds");
        } else {
            f.advance(secs(11));
        }
    }

    assert_eq!(f.counts().await, Counts::dead_lettered(1));
}

#[tokio::test]
async fn dead_lettered_message_does_not_expire() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = true)).await;
    let sent = f
        .send(vec![
            Message::new("expires").with_time_to_live(secs(10)),
            Message::new("client").with_time_to_live(secs(10)),
        ])
        .await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    r.add_credit(1);
    let m = next(&r).await;
    assert_eq!(m.sequence_number(), sent[0]);
    let _ = r.drain().await;
    // The first is dead-lettered by the client, the second by expiry.
    f.settle(
        &m,
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() },
    )
    .await
    .expect("dead-letter succeeds");
    f.advance(secs(11));
    assert_eq!(f.counts().await, Counts::dead_lettered(2));

    f.advance(secs(24 * 3600));

    assert_eq!(f.counts().await, Counts::dead_lettered(2));
    let dead = take_up_to(&f.dlq_receiver().await, 10).await;
    assert_eq!(seqs(&dead), sent);
}

#[tokio::test]
async fn sending_to_the_dead_letter_queue_is_invalid() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.broker.send(DLQ, vec![Message::new("a")]).await;
    assert!(matches!(sent, Err(BrokerError::InvalidOperation(_))), "{sent:?}");
    assert_eq!(f.counts().await, Counts::default());
}

// ---- receive-and-delete ----

#[tokio::test]
async fn receive_and_delete_delivers_without_a_lock_and_removes_the_message() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("a")).await;
    let r = f.receiver(ReceiveMode::ReceiveAndDelete).await;

    let m = take_one(&r).await;

    assert_eq!(m.sequence_number(), seq);
    assert!(m.lock.is_none(), "receive-and-delete takes no lock");
    let rt = f.runtime().await;
    assert_eq!(rt.active_message_count, 0);
    assert_eq!(rt.total_message_count, 0);
    assert_eq!(rt.size_in_bytes, 0);
    let other = f.receiver(ReceiveMode::PeekLock).await;
    assert_nothing_delivered(&other).await;
}

// ---- TTL ----

#[tokio::test]
async fn effective_ttl_is_the_shorter_of_message_and_entity_ttl() {
    // (entity default, message TTL, effective)
    let cases = [
        ("message ttl shorter", secs(60), Some(secs(10)), secs(10)),
        ("entity default shorter", secs(30), Some(secs(120)), secs(30)),
        ("message without ttl", secs(30), None, secs(30)),
    ];
    for (case, entity_ttl, message_ttl, effective) in cases {
        let f = Fixture::with_queue(queue_with(|d| {
            d.default_message_time_to_live = entity_ttl;
            d.dead_lettering_on_message_expiration = true;
        }))
        .await;
        let mut message = Message::new("a");
        message.properties.time_to_live = message_ttl;
        let sent_at = f.now();
        f.send_one(message).await;

        let peeked = f.peek_all(QUEUE).await;
        assert_eq!(peeked[0].broker.expires_at, sent_at.saturating_add(effective), "{case}");

        f.advance(effective - Duration::from_millis(1));
        assert_eq!(f.counts().await, Counts::active(1), "{case}: not yet expired");
        f.advance(Duration::from_millis(1));
        assert_eq!(f.counts().await, Counts::dead_lettered(1), "{case}: expired");
    }
}

#[tokio::test]
async fn expired_message_is_never_delivered() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    f.send_one(Message::new("a").with_time_to_live(secs(10))).await;

    f.advance(secs(11));

    assert_nothing_delivered(&r).await;
}

#[tokio::test]
async fn expired_message_is_dead_lettered_when_dead_lettering_on_expiration() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = true)).await;
    let seq = f.send_one(Message::new("a").with_time_to_live(secs(10))).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    f.advance(secs(11));

    assert_nothing_delivered(&r).await;
    assert_eq!(f.counts().await, Counts::dead_lettered(1));
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!(dead.sequence_number(), seq);
    assert_dead_letter_reason(&dead, "TTLExpiredException");
}

#[tokio::test]
async fn expired_message_is_dropped_without_dead_lettering_on_expiration() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = false)).await;
    f.send_one(Message::new("a").with_time_to_live(secs(10))).await;

    f.advance(secs(11));

    assert_eq!(f.counts().await, Counts::default());
    assert_eq!(f.runtime().await.total_message_count, 0);
    let r = f.receiver(ReceiveMode::PeekLock).await;
    assert_nothing_delivered(&r).await;
    assert_nothing_delivered(&f.dlq_receiver().await).await;
}

#[tokio::test]
async fn message_whose_ttl_passes_while_locked_is_not_expired_while_locked() {
    let f = Fixture::with_queue(queue_with(|d| {
        d.lock_duration = secs(60);
        d.dead_lettering_on_message_expiration = true;
    }))
    .await;
    f.send_one(Message::new("a").with_time_to_live(secs(30))).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;

    f.advance(secs(40));

    assert_eq!(f.counts().await, Counts::active(1), "still locked, not expired");
    f.broker.complete(QUEUE, token(&m)).await.expect("the lock is still held");
    assert_eq!(f.counts().await, Counts::default());
}

/// How a lock on a message whose TTL passed ends.
#[derive(Debug, Clone, Copy)]
enum LockEnd {
    Abandon,
    Expiry,
}

#[tokio::test]
async fn message_whose_ttl_passed_while_locked_expires_when_unlocked() {
    for end in [LockEnd::Abandon, LockEnd::Expiry] {
        for dead_letter in [true, false] {
            let case = format!("{end:?}, dead-lettering on expiration {dead_letter}");
            let f = Fixture::with_queue(queue_with(|d| {
                d.lock_duration = secs(60);
                d.dead_lettering_on_message_expiration = dead_letter;
            }))
            .await;
            let seq = f.send_one(Message::new("a").with_time_to_live(secs(30))).await;
            let r = f.receiver(ReceiveMode::PeekLock).await;
            let m = take_one(&r).await;
            // Waiting with credit: a redelivery would reach this receiver at once.
            r.add_credit(5);

            f.advance(secs(40));
            match end {
                LockEnd::Abandon => {
                    f.abandon(&m, ApplicationProperties::new()).await.expect("abandon");
                }
                LockEnd::Expiry => f.advance(secs(21)),
            }

            let r2 = f.receiver(ReceiveMode::PeekLock).await;
            assert_nothing_delivered(&r2).await;
            assert_nothing_delivered(&r).await;
            if dead_letter {
                assert_eq!(f.counts().await, Counts::dead_lettered(1), "{case}");
                let dead = take_one(&f.dlq_receiver().await).await;
                assert_eq!(dead.sequence_number(), seq, "{case}");
                assert_dead_letter_reason(&dead, "TTLExpiredException");
            } else {
                assert_eq!(f.counts().await, Counts::default(), "{case}");
            }
        }
    }
}

// ---- scheduled messages ----

#[tokio::test]
async fn scheduled_message_is_not_delivered_before_its_time() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let at = f.now().saturating_add(secs(60));
    let seq = f.send_one(Message::new("later").with_scheduled_enqueue_time(at)).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    assert_eq!(f.counts().await, Counts { scheduled: 1, ..Counts::default() });
    let peeked = f.peek_all(QUEUE).await;
    assert_eq!(seqs(&peeked), vec![seq]);
    assert_eq!(peeked[0].broker.state, MessageState::Scheduled);
    assert!(peeked[0].lock.is_none());
    assert_nothing_delivered(&r).await;

    f.advance(secs(59));
    assert_nothing_delivered(&r).await;

    f.advance(secs(1));
    let m = take_one(&r).await;
    assert_eq!(m.sequence_number(), seq);
    assert_eq!(m.broker.state, MessageState::Active);
    assert_eq!(m.broker.enqueued_time, at);
    assert_eq!(f.counts().await, Counts::active(1));
}

#[tokio::test]
async fn scheduled_message_arrives_at_a_waiting_receiver() {
    // The receiver already has credit: the clock alone must make the message available.
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    r.add_credit(1);
    let at = f.now().saturating_add(secs(10));
    let seq = f.send_one(Message::new("a").with_scheduled_enqueue_time(at)).await;
    assert!(r.try_recv().is_none());

    f.advance(secs(10));

    assert_eq!(next(&r).await.sequence_number(), seq);
}

#[tokio::test]
async fn scheduled_message_ttl_counts_from_its_enqueue_time() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = true)).await;
    let at = f.now().saturating_add(secs(60));
    f.send_one(Message::new("a").with_scheduled_enqueue_time(at).with_time_to_live(secs(30))).await;

    f.advance(secs(70));
    assert_eq!(f.counts().await, Counts::active(1), "alive 10 s after its enqueue time");
    f.advance(secs(20));
    assert_eq!(f.counts().await, Counts::dead_lettered(1), "expired 30 s after it");
}

#[tokio::test]
async fn schedule_returns_sequence_numbers_and_delivers_at_the_time() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let at = f.now().saturating_add(secs(30));
    let outcomes = f
        .broker
        .schedule(
            QUEUE,
            vec![
                Message::new("a").with_scheduled_enqueue_time(at),
                Message::new("b").with_scheduled_enqueue_time(at),
            ],
        )
        .await
        .expect("schedule succeeds");
    let scheduled: Vec<SequenceNumber> = outcomes
        .into_iter()
        .map(|o| match o {
            SendOutcome::Enqueued(seq) => seq,
            SendOutcome::Duplicate => panic!("unexpected duplicate"),
        })
        .collect();
    assert_eq!(scheduled.len(), 2);
    assert!(scheduled[0] < scheduled[1]);
    assert_eq!(f.counts().await, Counts { scheduled: 2, ..Counts::default() });
    let r = f.receiver(ReceiveMode::PeekLock).await;
    assert_nothing_delivered(&r).await;

    f.advance(secs(31));

    let mut got = vec![take_one(&r).await, take_one(&r).await];
    got.sort_by_key(|m| m.sequence_number());
    assert_eq!(seqs(&got), scheduled);
}

#[tokio::test]
async fn schedule_without_an_enqueue_time_is_invalid() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    assert_invalid_argument(
        f.broker.schedule(QUEUE, vec![Message::new("a")]).await,
        "ScheduledEnqueueTime",
        "schedule without time",
    );
    assert_eq!(f.counts().await, Counts::default());
}

#[tokio::test]
async fn scheduled_enqueue_time_in_the_past_is_delivered_at_once() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let past = Timestamp::from_millis(f.now().as_millis() - 1000);
    let seq = f.send_one(Message::new("a").with_scheduled_enqueue_time(past)).await;
    assert_eq!(f.counts().await, Counts::active(1));
    let r = f.receiver(ReceiveMode::PeekLock).await;
    assert_eq!(take_one(&r).await.sequence_number(), seq);
}

#[tokio::test]
async fn cancelled_scheduled_message_is_never_delivered() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let at = f.now().saturating_add(secs(60));
    let seqs_sent = f
        .send(vec![
            Message::new("cancelled").with_scheduled_enqueue_time(at),
            Message::new("kept").with_scheduled_enqueue_time(at),
        ])
        .await;

    f.broker.cancel_scheduled(QUEUE, &[seqs_sent[0]]).await.expect("cancel succeeds");

    assert_eq!(f.counts().await, Counts { scheduled: 1, ..Counts::default() });
    assert_eq!(seqs(&f.peek_all(QUEUE).await), vec![seqs_sent[1]]);
    f.advance(secs(61));
    let r = f.receiver(ReceiveMode::PeekLock).await;
    assert_eq!(seqs(&take_up_to(&r, 10).await), vec![seqs_sent[1]]);
}

#[tokio::test]
async fn cancelling_unknown_or_unscheduled_sequence_numbers_is_ok() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let active = f.send_one(Message::new("active")).await;
    let at = f.now().saturating_add(secs(60));
    let scheduled = f.send_one(Message::new("s").with_scheduled_enqueue_time(at)).await;

    f.broker.cancel_scheduled(QUEUE, &[SequenceNumber(9999)]).await.expect("unknown is ignored");
    f.broker.cancel_scheduled(QUEUE, &[active]).await.expect("an active message is ignored");
    f.broker.cancel_scheduled(QUEUE, &[scheduled]).await.expect("cancel succeeds");
    f.broker.cancel_scheduled(QUEUE, &[scheduled]).await.expect("cancel again is idempotent");

    assert_eq!(f.counts().await, Counts::active(1), "the active message stays");
}

// ---- peek ----

#[tokio::test]
async fn peek_returns_messages_in_order_without_locking_them() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send(vec![Message::new("a"), Message::new("b"), Message::new("c")]).await;

    let peeked = f.broker.peek(QUEUE, sent[0], 10).await.expect("peek succeeds");

    assert_eq!(seqs(&peeked), sent);
    let bodies: Vec<&[u8]> = peeked.iter().map(|m| &m.message.body[..]).collect();
    assert_eq!(bodies, vec![&b"a"[..], b"b", b"c"]);
    assert!(peeked.iter().all(|m| m.lock.is_none()), "peek takes no lock");
    assert!(peeked.iter().all(|m| m.broker.state == MessageState::Active));
    let r = f.receiver(ReceiveMode::PeekLock).await;
    assert_eq!(seqs(&take_up_to(&r, 10).await), sent, "peeked messages are still deliverable");
    assert_eq!(f.broker.peek(QUEUE, sent[0], 10).await.unwrap().len(), 3, "locked ones too");
}

#[tokio::test]
async fn peek_starts_at_the_given_sequence_number_and_honours_max() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send((0..5).map(|i| Message::new(format!("m{i}"))).collect()).await;

    let middle = f.broker.peek(QUEUE, sent[1], 2).await.expect("peek succeeds");
    assert_eq!(seqs(&middle), sent[1..3].to_vec());
    let rest = f.broker.peek(QUEUE, SequenceNumber(sent[2].0 + 1), 10).await.unwrap();
    assert_eq!(seqs(&rest), sent[3..].to_vec());
    let beyond = f.broker.peek(QUEUE, SequenceNumber(sent[4].0 + 1), 10).await.unwrap();
    assert!(beyond.is_empty());
}

#[tokio::test]
async fn peek_includes_deferred_messages_with_state_deferred() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send(vec![Message::new("a"), Message::new("b")]).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    f.defer(&m).await.expect("defer succeeds");

    let peeked = f.broker.peek(QUEUE, sent[0], 10).await.expect("peek succeeds");

    assert_eq!(seqs(&peeked), sent);
    assert_eq!(peeked[0].broker.state, MessageState::Deferred);
    assert_eq!(peeked[1].broker.state, MessageState::Active);
}

// ---- duplicate detection ----

fn dedup_queue() -> QueueDescription {
    queue_with(|d| {
        d.requires_duplicate_detection = true;
        d.duplicate_detection_history_time_window = secs(60);
    })
}

#[tokio::test]
async fn duplicate_within_window_is_dropped() {
    let f = Fixture::with_queue(dedup_queue()).await;
    let first = f.broker.send(QUEUE, vec![Message::new("1").with_message_id("m")]).await.unwrap();
    assert!(matches!(first[..], [SendOutcome::Enqueued(_)]), "{first:?}");

    f.advance(secs(59));
    let again = f.broker.send(QUEUE, vec![Message::new("2").with_message_id("m")]).await.unwrap();

    assert_eq!(again, vec![SendOutcome::Duplicate]);
    assert_eq!(f.counts().await, Counts::active(1));
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let got = take_up_to(&r, 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].message.body[..], b"1", "the first one is kept");
}

#[tokio::test]
async fn duplicate_within_one_batch_is_dropped() {
    let f = Fixture::with_queue(dedup_queue()).await;
    let outcomes = f
        .broker
        .send(
            QUEUE,
            vec![
                Message::new("1").with_message_id("m"),
                Message::new("2").with_message_id("other"),
                Message::new("3").with_message_id("m"),
            ],
        )
        .await
        .unwrap();
    assert!(
        matches!(
            outcomes[..],
            [SendOutcome::Enqueued(_), SendOutcome::Enqueued(_), SendOutcome::Duplicate]
        ),
        "{outcomes:?}"
    );
    assert_eq!(f.counts().await, Counts::active(2));
}

#[tokio::test]
async fn message_id_is_accepted_again_after_the_window() {
    let f = Fixture::with_queue(dedup_queue()).await;
    let m = || vec![Message::new("x").with_message_id("m")];
    assert!(matches!(f.broker.send(QUEUE, m()).await.unwrap()[..], [SendOutcome::Enqueued(_)]));

    // A duplicate does not extend the window: it still ends 60 s after the first send.
    f.advance(secs(30));
    assert_eq!(f.broker.send(QUEUE, m()).await.unwrap(), vec![SendOutcome::Duplicate]);
    f.advance(secs(30));

    let later = f.broker.send(QUEUE, m()).await.unwrap();
    assert!(matches!(later[..], [SendOutcome::Enqueued(_)]), "{later:?}");
    assert_eq!(f.counts().await, Counts::active(2));
    // The new send opens a new window.
    assert_eq!(f.broker.send(QUEUE, m()).await.unwrap(), vec![SendOutcome::Duplicate]);
}

#[tokio::test]
async fn scheduled_message_id_counts_for_duplicate_detection() {
    let f = Fixture::with_queue(dedup_queue()).await;
    let at = f.now().saturating_add(secs(3600));
    let scheduled = f
        .broker
        .schedule(
            QUEUE,
            vec![Message::new("s").with_message_id("m").with_scheduled_enqueue_time(at)],
        )
        .await
        .unwrap();
    assert!(matches!(scheduled[..], [SendOutcome::Enqueued(_)]), "{scheduled:?}");

    let sent = f.broker.send(QUEUE, vec![Message::new("now").with_message_id("m")]).await.unwrap();
    assert_eq!(sent, vec![SendOutcome::Duplicate]);
    let rescheduled = f
        .broker
        .schedule(
            QUEUE,
            vec![Message::new("s2").with_message_id("m").with_scheduled_enqueue_time(at)],
        )
        .await
        .unwrap();
    assert_eq!(rescheduled, vec![SendOutcome::Duplicate]);
    assert_eq!(f.counts().await, Counts { scheduled: 1, ..Counts::default() });
}

#[tokio::test]
async fn entity_without_duplicate_detection_accepts_repeated_message_ids() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let outcomes = f
        .broker
        .send(
            QUEUE,
            vec![Message::new("1").with_message_id("m"), Message::new("2").with_message_id("m")],
        )
        .await
        .unwrap();
    assert!(
        matches!(outcomes[..], [SendOutcome::Enqueued(_), SendOutcome::Enqueued(_)]),
        "{outcomes:?}"
    );
    let again = f.broker.send(QUEUE, vec![Message::new("3").with_message_id("m")]).await.unwrap();
    assert!(matches!(again[..], [SendOutcome::Enqueued(_)]), "{again:?}");
    assert_eq!(f.counts().await, Counts::active(3));
}

#[tokio::test]
async fn messages_without_message_id_are_never_duplicates() {
    let f = Fixture::with_queue(dedup_queue()).await;
    f.send(vec![Message::new("a"), Message::new("a")]).await;
    assert_eq!(f.counts().await, Counts::active(2));
}

// ---- consumers and credit ----

#[tokio::test]
async fn credit_limits_how_many_messages_are_locked() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send((0..5).map(|i| Message::new(format!("m{i}"))).collect()).await;
    let first = f.receiver(ReceiveMode::PeekLock).await;

    first.add_credit(2);
    let got = vec![next(&first).await, next(&first).await];
    assert_eq!(first.drain().await, 0, "both credits were used");
    assert!(first.try_recv().is_none(), "exactly two deliveries");

    assert_eq!(seqs(&got), sent[..2].to_vec());
    assert_eq!(f.counts().await, Counts::active(5), "locked messages stay active");
    let second = f.receiver(ReceiveMode::PeekLock).await;
    let rest = take_up_to(&second, 10).await;
    assert_eq!(seqs(&rest), sent[2..].to_vec(), "the other three were never locked");
}

#[tokio::test]
async fn competing_receivers_share_messages_without_overlap() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let a = f.receiver(ReceiveMode::PeekLock).await;
    let b = f.receiver(ReceiveMode::PeekLock).await;
    a.add_credit(10);
    b.add_credit(10);

    let sent = f.send((0..10).map(|i| Message::new(format!("m{i}"))).collect()).await;

    a.drain().await;
    b.drain().await;
    let got_a = seqs(&std::iter::from_fn(|| a.try_recv()).collect::<Vec<_>>());
    let got_b = seqs(&std::iter::from_fn(|| b.try_recv()).collect::<Vec<_>>());
    assert!(!got_a.is_empty() && !got_b.is_empty(), "both get some: {got_a:?} / {got_b:?}");
    assert!(got_a.len().abs_diff(got_b.len()) <= 1, "fair share: {got_a:?} / {got_b:?}");
    let set_a: BTreeSet<_> = got_a.iter().copied().collect();
    let set_b: BTreeSet<_> = got_b.iter().copied().collect();
    assert_eq!(set_a.len(), got_a.len(), "no message twice to one receiver");
    assert!(set_a.is_disjoint(&set_b), "no message to both receivers");
    let all: BTreeSet<_> = set_a.union(&set_b).copied().collect();
    assert_eq!(all, sent.into_iter().collect(), "every message delivered");
}

#[tokio::test]
async fn drain_returns_unused_credit() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send(vec![Message::new("a"), Message::new("b")]).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;

    r.add_credit(5);
    let unused = r.drain().await;

    assert_eq!(unused, 3);
    assert_eq!(r.credit(), 0);
    assert_eq!(r.buffered(), 2);
    f.send_one(Message::new("c")).await;
    assert_eq!(r.buffered(), 2, "no credit, no delivery");
    assert_eq!(r.drain().await, 0);
    assert_eq!(r.buffered(), 2);
}

// ---- entity status ----

#[tokio::test]
async fn send_disabled_queue_rejects_sends_but_allows_receives() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let seq = f.send_one(Message::new("before")).await;
    f.broker
        .update_queue(QUEUE, queue_with(|d| d.status = EntityStatus::SendDisabled))
        .await
        .expect("update succeeds");

    assert_disabled(f.broker.send(QUEUE, vec![Message::new("a")]).await, "SendDisabled");
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    assert_eq!(m.sequence_number(), seq);
    f.broker.complete(QUEUE, token(&m)).await.expect("settling works");
}

#[tokio::test]
async fn receive_disabled_queue_rejects_receivers_but_allows_sends() {
    let f = Fixture::with_queue(queue_with(|d| d.status = EntityStatus::ReceiveDisabled)).await;

    f.send_one(Message::new("a")).await;

    assert_disabled(f.broker.open_receiver(QUEUE, ReceiveMode::PeekLock).await, "ReceiveDisabled");
    assert_disabled(
        f.broker.open_receiver(QUEUE, ReceiveMode::ReceiveAndDelete).await,
        "ReceiveDisabled",
    );
    assert_disabled(
        f.broker.receive_deferred(QUEUE, &[SequenceNumber(1)], ReceiveMode::PeekLock).await,
        "ReceiveDisabled",
    );
    assert_eq!(f.counts().await, Counts::active(1));
}

#[tokio::test]
async fn disabled_queue_rejects_sends_and_receivers() {
    let f = Fixture::with_queue(queue_with(|d| d.status = EntityStatus::Disabled)).await;

    assert_disabled(f.broker.send(QUEUE, vec![Message::new("a")]).await, "Disabled");
    assert_disabled(f.broker.open_receiver(QUEUE, ReceiveMode::PeekLock).await, "Disabled");
    assert_eq!(f.counts().await, Counts::default());
}

#[tokio::test]
async fn update_queue_changes_status() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let cases = [
        (EntityStatus::Disabled, false, false),
        (EntityStatus::SendDisabled, false, true),
        (EntityStatus::ReceiveDisabled, true, false),
        (EntityStatus::Active, true, true),
    ];
    for (status, can_send, can_receive) in cases {
        let info = f
            .broker
            .update_queue(QUEUE, queue_with(|d| d.status = status))
            .await
            .expect("update succeeds");
        assert_eq!(info.description.status, status);
        assert_eq!(f.broker.get_queue(QUEUE).await.unwrap().description.status, status);
        let sent = f.broker.send(QUEUE, vec![Message::new("a")]).await;
        assert_eq!(sent.is_ok(), can_send, "{status:?} send: {sent:?}");
        let opened = f.broker.open_receiver(QUEUE, ReceiveMode::PeekLock).await;
        assert_eq!(opened.is_ok(), can_receive, "{status:?} receive: {opened:?}");
    }
}

// ---- size limits ----

#[tokio::test]
async fn message_larger_than_max_message_size_is_rejected() {
    let f = Fixture::with_queue(queue_with(|d| d.max_message_size_in_kilobytes = 1)).await;

    f.send_one(Message::new(vec![0u8; 1024])).await;
    let too_big =
        f.broker.send(QUEUE, vec![Message::new("ok"), Message::new(vec![0u8; 1025])]).await;

    match too_big {
        Err(BrokerError::MessageSizeExceeded { size, max }) => {
            assert_eq!((size, max), (1025, 1024));
        }
        other => panic!("expected MessageSizeExceeded, got {other:?}"),
    }
    assert_eq!(f.counts().await, Counts::active(1), "nothing of the rejected batch is stored");
}

#[tokio::test]
async fn full_queue_rejects_sends_with_quota_exceeded() {
    let f = Fixture::with_queue(queue_with(|d| d.max_size_in_megabytes = 1)).await;
    let body = || Message::new(vec![0u8; 200 * 1024]);
    for _ in 0..5 {
        f.send_one(body()).await;
    }

    let full = f.broker.send(QUEUE, vec![body()]).await;

    assert!(matches!(full, Err(BrokerError::QuotaExceeded(_))), "{full:?}");
    assert_eq!(f.counts().await, Counts::active(5));
    // Taking a message out makes room again.
    let r = f.receiver(ReceiveMode::ReceiveAndDelete).await;
    take_one(&r).await;
    f.send_one(body()).await;
    assert_eq!(f.counts().await, Counts::active(5));
}

// ---- management ----

#[tokio::test]
async fn creating_an_existing_name_in_any_case_fails() {
    let f = Fixture::new().await;
    f.broker.create_queue("Orders", QueueDescription::default()).await.expect("created");

    for name in ["Orders", "orders", "ORDERS"] {
        match f.broker.create_queue(name, QueueDescription::default()).await {
            Err(BrokerError::EntityAlreadyExists { .. }) => {}
            other => panic!("{name}: expected EntityAlreadyExists, got {other:?}"),
        }
    }
    let info = f.broker.get_queue("oRdErS").await.expect("lookup is case-insensitive");
    assert_eq!(info.name, "Orders", "the name keeps its spelling");
    assert_eq!(f.broker.list_queues(0, 100).await.unwrap().len(), 1);
}

#[tokio::test]
async fn invalid_entity_names_are_rejected() {
    let f = Fixture::new().await;
    let long = "x".repeat(261);
    for name in ["", "a b", "$queue", "/a", "a/", "a//b", "é", "q?", long.as_str()] {
        assert_invalid_argument(
            f.broker.create_queue(name, QueueDescription::default()).await,
            "EntityName",
            name,
        );
    }
    assert!(f.broker.list_queues(0, 100).await.unwrap().is_empty());
}

#[tokio::test]
async fn invalid_description_fields_are_rejected_by_name() {
    type Mutate = fn(&mut QueueDescription);
    let cases: [(&str, Mutate); 10] = [
        ("LockDuration", |d| d.lock_duration = secs(4)),
        ("LockDuration", |d| d.lock_duration = secs(301)),
        ("MaxDeliveryCount", |d| d.max_delivery_count = 0),
        ("DefaultMessageTimeToLive", |d| d.default_message_time_to_live = Duration::ZERO),
        ("DuplicateDetectionHistoryTimeWindow", |d| {
            d.duplicate_detection_history_time_window = secs(19)
        }),
        ("DuplicateDetectionHistoryTimeWindow", |d| {
            d.duplicate_detection_history_time_window = secs(7 * 24 * 3600 + 1)
        }),
        ("MaxSizeInMegabytes", |d| d.max_size_in_megabytes = 0),
        ("MaxMessageSizeInKilobytes", |d| d.max_message_size_in_kilobytes = 0),
        ("ForwardTo", |d| d.forward_to = Some("not a name".into())),
        ("UserMetadata", |d| d.user_metadata = Some("m".repeat(1025))),
    ];
    let f = Fixture::with_queue(QueueDescription::default()).await;
    for (field, mutate) in cases {
        let mut description = QueueDescription::default();
        mutate(&mut description);
        assert_invalid_argument(
            f.broker.create_queue("new", description.clone()).await,
            field,
            &format!("create {description:?}"),
        );
        assert_invalid_argument(
            f.broker.update_queue(QUEUE, description.clone()).await,
            field,
            &format!("update {description:?}"),
        );
    }
    assert!(matches!(f.broker.get_queue("new").await, Err(BrokerError::EntityNotFound { .. })));
    assert_eq!(f.broker.get_queue(QUEUE).await.unwrap().description, QueueDescription::default());
}

#[tokio::test]
async fn get_and_list_return_queues_by_name() {
    let f = Fixture::new().await;
    let description = queue_with(|d| {
        d.lock_duration = secs(45);
        d.max_delivery_count = 4;
        d.user_metadata = Some("meta".into());
    });
    for name in ["b", "A", "c"] {
        f.broker.create_queue(name, description.clone()).await.expect("created");
    }

    let info = f.broker.get_queue("b").await.expect("get succeeds");
    assert_eq!(info.name, "b");
    assert_eq!(info.description, description);
    assert_eq!(info.created_at, f.now());
    let names = |list: Vec<QueueInfo>| list.into_iter().map(|q| q.name).collect::<Vec<_>>();
    assert_eq!(names(f.broker.list_queues(0, 100).await.unwrap()), ["A", "b", "c"]);
    assert_eq!(names(f.broker.list_queues(1, 1).await.unwrap()), ["b"]);
    assert!(f.broker.list_queues(3, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn unknown_queue_is_not_found() {
    let f = Fixture::new().await;
    let not_found = |r: &Result<(), BrokerError>| matches!(r, Err(BrokerError::EntityNotFound { entity }) if entity == "nope");
    assert!(not_found(&f.broker.get_queue("nope").await.map(drop)));
    assert!(not_found(&f.broker.get_queue_runtime("nope").await.map(drop)));
    assert!(not_found(&f.broker.update_queue("nope", QueueDescription::default()).await.map(drop)));
    assert!(not_found(&f.broker.delete_queue("nope").await));
    assert!(not_found(&f.broker.send("nope", vec![Message::new("a")]).await.map(drop)));
    assert!(not_found(&f.broker.open_receiver("nope", ReceiveMode::PeekLock).await.map(drop)));
}

#[tokio::test]
async fn deleted_queue_is_gone_with_its_messages() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    f.send(vec![Message::new("a"), Message::new("b")]).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let locked = take_one(&r).await;

    f.broker.delete_queue(QUEUE).await.expect("delete succeeds");

    assert!(matches!(f.broker.get_queue(QUEUE).await, Err(BrokerError::EntityNotFound { .. })));
    assert!(matches!(
        f.broker.get_queue_runtime(QUEUE).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert!(matches!(
        f.broker.send(QUEUE, vec![Message::new("c")]).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert!(matches!(
        f.broker.complete(QUEUE, token(&locked)).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert!(f.broker.list_queues(0, 100).await.unwrap().is_empty());
    let closed = tokio::time::timeout(WAIT, r.recv()).await.expect("receiver sees the end");
    assert!(closed.is_none(), "the receiver of a deleted queue is closed");
}

#[tokio::test]
async fn recreated_queue_starts_empty() {
    let f =
        Fixture::with_queue(queue_with(|d| d.dead_lettering_on_message_expiration = true)).await;
    f.send(vec![Message::new("a"), Message::new("b").with_time_to_live(secs(1))]).await;
    f.advance(secs(2));
    let at = f.now().saturating_add(secs(60));
    f.send_one(Message::new("s").with_scheduled_enqueue_time(at)).await;
    assert_eq!(
        f.counts().await,
        Counts { active: 1, scheduled: 1, dead_lettered: 1, ..Counts::default() }
    );
    f.broker.delete_queue(QUEUE).await.expect("delete succeeds");

    f.broker.create_queue("Q", QueueDescription::default()).await.expect("re-created");

    assert_eq!(f.counts().await, Counts::default());
    let rt = f.runtime().await;
    assert_eq!((rt.total_message_count, rt.size_in_bytes), (0, 0));
    assert!(f.peek_all(QUEUE).await.is_empty());
    assert!(f.peek_all(DLQ).await.is_empty());
    f.advance(secs(61));
    assert_nothing_delivered(&f.receiver(ReceiveMode::PeekLock).await).await;
    assert_nothing_delivered(&f.dlq_receiver().await).await;
}

#[tokio::test]
async fn update_keeps_messages_and_applies_new_settings() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    let sent = f.send(vec![Message::new("a"), Message::new("b")]).await;
    f.advance(secs(1));

    let updated = queue_with(|d| {
        d.lock_duration = secs(20);
        d.max_delivery_count = 1;
    });
    let info = f.broker.update_queue(QUEUE, updated.clone()).await.expect("update succeeds");

    assert_eq!(info.description, updated);
    assert!(info.updated_at > info.created_at);
    assert_eq!(f.broker.get_queue(QUEUE).await.unwrap().description, updated);
    assert_eq!(f.counts().await, Counts::active(2));
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let m = take_one(&r).await;
    assert_eq!(m.sequence_number(), sent[0]);
    assert_eq!(m.lock.unwrap().locked_until, f.now().saturating_add(secs(20)));
    // MaxDeliveryCount 1: one failed delivery dead-letters.
    f.abandon(&m, ApplicationProperties::new()).await.expect("abandon");
    assert_eq!(f.counts().await, Counts { active: 1, dead_lettered: 1, ..Counts::default() });
}

#[tokio::test]
async fn update_cannot_change_properties_fixed_at_creation() {
    let f = Fixture::with_queue(QueueDescription::default()).await;
    for (case, updated) in [
        ("RequiresDuplicateDetection", queue_with(|d| d.requires_duplicate_detection = true)),
        ("RequiresSession", queue_with(|d| d.requires_session = true)),
    ] {
        let result = f.broker.update_queue(QUEUE, updated).await;
        assert!(matches!(result, Err(BrokerError::InvalidOperation(_))), "{case}: {result:?}");
    }
    assert_eq!(f.broker.get_queue(QUEUE).await.unwrap().description, QueueDescription::default());
}

#[tokio::test]
async fn forwarding_to_a_missing_entity_is_rejected() {
    let f = Fixture::new().await;
    assert_invalid_argument(
        f.broker.create_queue(QUEUE, queue_with(|d| d.forward_to = Some("missing".into()))).await,
        "ForwardTo",
        "create ForwardTo missing",
    );
    assert_invalid_argument(
        f.broker
            .create_queue(
                QUEUE,
                queue_with(|d| d.forward_dead_lettered_messages_to = Some("missing".into())),
            )
            .await,
        "ForwardDeadLetteredMessagesTo",
        "create ForwardDeadLetteredMessagesTo missing",
    );
    // Service Bus accepts an entity forwarding to itself: the hop limit ends the loop.
    f.broker
        .create_queue(QUEUE, queue_with(|d| d.forward_to = Some("Q".into())))
        .await
        .expect("an entity may forward to itself");
    f.broker.delete_queue(QUEUE).await.expect("delete");
    assert!(matches!(f.broker.get_queue(QUEUE).await, Err(BrokerError::EntityNotFound { .. })));

    f.broker.create_queue("target", QueueDescription::default()).await.expect("target created");
    let forwarding = queue_with(|d| d.forward_to = Some("TARGET".into()));
    f.broker.create_queue(QUEUE, forwarding.clone()).await.expect("forward to an existing queue");
    assert_eq!(f.broker.get_queue(QUEUE).await.unwrap().description, forwarding);
    assert_invalid_argument(
        f.broker.update_queue(QUEUE, queue_with(|d| d.forward_to = Some("gone".into()))).await,
        "ForwardTo",
        "update ForwardTo missing",
    );
}

// ---- recovery ----

/// What [`crash_and_reopen`] left behind.
struct Recovered {
    f: Fixture,
    /// Locked at the crash.
    locked: SequenceNumber,
    locked_token: LockToken,
    deferred: SequenceNumber,
    dead_lettered: SequenceNumber,
    /// Active and unlocked at the crash.
    active: SequenceNumber,
    scheduled: SequenceNumber,
    scheduled_at: Timestamp,
    description: QueueDescription,
    /// Peeks of the queue and its dead-letter queue, and the runtime, just before the crash.
    peeked_before: Vec<ReceivedMessage>,
    dead_peeked_before: Vec<ReceivedMessage>,
    runtime_before: QueueRuntime,
}

/// A message with every property a sender can set.
fn rich_message(body: &str, id: &str) -> Message {
    let mut m = Message::new(body.to_owned())
        .with_message_id(id)
        .with_time_to_live(secs(7 * 24 * 3600))
        .with_property("s", text("v"))
        .with_property("i", PropertyValue::Int(-3))
        .with_property("l", PropertyValue::ULong(u64::MAX))
        .with_property("d", PropertyValue::Double(1.5))
        .with_property("b", PropertyValue::Bool(true))
        .with_property("t", PropertyValue::Timestamp(Timestamp::from_millis(1234)))
        .with_property("bin", PropertyValue::Binary(vec![1u8, 2, 3].into()))
        .with_property("n", PropertyValue::Null);
    let p = &mut m.properties;
    p.correlation_id = Some("corr".into());
    p.subject = Some("subject".into());
    p.to = Some("to".into());
    p.reply_to = Some("reply".into());
    p.reply_to_session_id = Some("reply-session".into());
    p.content_type = Some("application/json".into());
    m
}

/// Builds a queue with a message in every state, shuts the broker down and opens a new one on
/// the same store.
async fn crash_and_reopen() -> Recovered {
    let description = queue_with(|d| {
        d.lock_duration = secs(30);
        d.requires_duplicate_detection = true;
        d.duplicate_detection_history_time_window = secs(600);
    });
    let old = Fixture::with_queue(description.clone()).await;
    let sent = old
        .send(vec![
            Message::new("locked").with_message_id("m1"),
            Message::new("deferred").with_message_id("m2"),
            Message::new("dead").with_message_id("m3"),
            rich_message("active", "m4"),
        ])
        .await;
    let scheduled_at = old.now().saturating_add(secs(3600));
    let scheduled = old
        .send_one(
            Message::new("scheduled")
                .with_message_id("m5")
                .with_scheduled_enqueue_time(scheduled_at),
        )
        .await;
    let r = old.receiver(ReceiveMode::PeekLock).await;
    r.add_credit(3);
    let (locked, deferred, dead) = (next(&r).await, next(&r).await, next(&r).await);
    assert_eq!(seqs(&[locked.clone(), deferred.clone(), dead.clone()]), sent[..3].to_vec());
    old.defer(&deferred).await.expect("defer succeeds");
    old.settle(
        &dead,
        Disposition::DeadLetter {
            reason: Some("Bad".into()),
            description: Some("bad message".into()),
            properties: Default::default(),
        },
    )
    .await
    .expect("dead-letter succeeds");
    let before = Counts { active: 2, deferred: 1, scheduled: 1, dead_lettered: 1 };
    assert_eq!(old.counts().await, before);
    let peeked_before = old.peek_all(QUEUE).await;
    let dead_peeked_before = old.peek_all(DLQ).await;
    let runtime_before = old.runtime().await;

    // The old partitions have stopped once they close their receivers.
    let f = restart(old, r).await;
    Recovered {
        f,
        locked: sent[0],
        locked_token: token(&locked),
        deferred: sent[1],
        dead_lettered: sent[2],
        active: sent[3],
        scheduled,
        scheduled_at,
        description,
        peeked_before,
        dead_peeked_before,
        runtime_before,
    }
}

/// What a peek shows of a message, for comparing before and after a restart.
fn snapshot(messages: &[ReceivedMessage]) -> Vec<(Message, BrokerProperties)> {
    messages.iter().map(|m| ((*m.message).clone(), m.broker.clone())).collect()
}

#[tokio::test]
async fn reopened_broker_has_the_queue_and_message_states() {
    let rec = crash_and_reopen().await;
    let f = &rec.f;

    let info = f.broker.get_queue(QUEUE).await.expect("the queue survives");
    assert_eq!(info.description, rec.description);
    // The message totals (what rates are computed from) start again from zero.
    let before = QueueRuntime {
        incoming_messages_total: 0,
        outgoing_messages_total: 0,
        ..rec.runtime_before.clone()
    };
    assert!(rec.runtime_before.incoming_messages_total > 0);
    assert_eq!(f.runtime().await, before, "same counts and size");
    assert_eq!(
        snapshot(&f.peek_all(QUEUE).await),
        snapshot(&rec.peeked_before),
        "every message and its broker properties survive"
    );
    assert_eq!(snapshot(&f.peek_all(DLQ).await), snapshot(&rec.dead_peeked_before));
    assert_eq!(f.counts().await, Counts { active: 2, deferred: 1, scheduled: 1, dead_lettered: 1 });
    let states: Vec<(SequenceNumber, MessageState)> =
        f.peek_all(QUEUE).await.iter().map(|m| (m.sequence_number(), m.broker.state)).collect();
    assert_eq!(
        states,
        vec![
            (rec.locked, MessageState::Active),
            (rec.deferred, MessageState::Deferred),
            (rec.active, MessageState::Active),
            (rec.scheduled, MessageState::Scheduled),
        ]
    );

    let deferred = f
        .broker
        .receive_deferred(QUEUE, &[rec.deferred], ReceiveMode::PeekLock)
        .await
        .expect("the deferred message is still deferred");
    assert_eq!(&deferred[0].message.body[..], b"deferred");
    let dead = take_one(&f.dlq_receiver().await).await;
    assert_eq!(dead.sequence_number(), rec.dead_lettered);
    assert_dead_letter_reason(&dead, "Bad");
    assert_eq!(dead.broker.dead_letter_error_description.as_deref(), Some("bad message"));
}

#[tokio::test]
async fn message_locked_at_the_crash_is_delivered_again() {
    let rec = crash_and_reopen().await;
    let f = &rec.f;

    assert_lock_lost(f.broker.complete(QUEUE, rec.locked_token).await);
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let got = take_up_to(&r, 10).await;

    assert_eq!(seqs(&got), vec![rec.locked, rec.active]);
    assert_eq!(&got[0].message.body[..], b"locked");
    for m in &got {
        f.broker.complete(QUEUE, token(m)).await.expect("new locks settle");
    }
}

#[tokio::test]
async fn reopened_broker_continues_sequence_numbers() {
    let rec = crash_and_reopen().await;

    let seq = rec.f.send_one(Message::new("new").with_message_id("m6")).await;

    assert!(seq > rec.scheduled, "{seq} after {}", rec.scheduled);
}

#[tokio::test]
async fn reopened_broker_keeps_the_duplicate_detection_window() {
    let rec = crash_and_reopen().await;
    let f = &rec.f;

    let again = f.broker.send(QUEUE, vec![Message::new("again").with_message_id("m1")]).await;
    assert_eq!(again.unwrap(), vec![SendOutcome::Duplicate]);
    let scheduled_again =
        f.broker.send(QUEUE, vec![Message::new("again").with_message_id("m5")]).await;
    assert_eq!(scheduled_again.unwrap(), vec![SendOutcome::Duplicate]);

    f.advance(secs(599));
    let within = f.broker.send(QUEUE, vec![Message::new("again").with_message_id("m1")]).await;
    assert_eq!(within.unwrap(), vec![SendOutcome::Duplicate], "the window keeps its start");
    f.advance(secs(1));
    let after = f.broker.send(QUEUE, vec![Message::new("again").with_message_id("m1")]).await;
    assert!(matches!(after.unwrap()[..], [SendOutcome::Enqueued(_)]));
}

#[tokio::test]
async fn reopened_broker_delivers_the_scheduled_message_at_its_time() {
    let rec = crash_and_reopen().await;
    let f = &rec.f;
    // Receive-and-delete, so that no lock expires while the clock jumps.
    let r = f.receiver(ReceiveMode::ReceiveAndDelete).await;
    let before: Vec<SequenceNumber> = seqs(&take_up_to(&r, 10).await);
    assert!(!before.contains(&rec.scheduled));

    f.advance(rec.scheduled_at.saturating_since(f.now()));

    let m = take_one(&r).await;
    assert_eq!(m.sequence_number(), rec.scheduled);
    assert_eq!(m.broker.enqueued_time, rec.scheduled_at);
}

/// Stops `old`'s broker (waiting until `receiver`, its last, closes) and opens another on the
/// same store and clock, as a restart does.
async fn restart(old: Fixture, receiver: Receiver) -> Fixture {
    old.broker.shutdown();
    let end = tokio::time::timeout(WAIT, receiver.recv()).await.expect("old receiver closes");
    assert!(end.is_none());
    let broker = Broker::open(old.store.clone(), old.clock.clone(), NamespaceLimits::default())
        .await
        .expect("broker reopens");
    Fixture { broker, ..old }
}

/// How many main-queue meta records the queue's store holds, live ones and those of settled
/// messages left below the main queue's floor.
async fn main_meta_records(f: &Fixture) -> usize {
    let prefix = testing::partition_key_prefix(&f.broker, QUEUE, PartitionId(0)).expect("queue");
    let (mut start, mut end) = (prefix.to_vec(), prefix.to_vec());
    start.push(b'm');
    end.push(b'm' + 1);
    f.store.scan(&start, &end, usize::MAX).await.expect("scan").len()
}

#[tokio::test]
async fn messages_completed_in_order_stay_completed_after_a_restart_and_their_records_are_swept() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    let mut sent = Vec::new();
    for batch in 0..21 {
        let messages = (0..100).map(|i| Message::new(format!("m{}", batch * 100 + i))).collect();
        sent.extend(f.send(messages).await);
    }
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let mut completed = 0;
    while completed < sent.len() {
        let got = take_up_to(&r, 100).await;
        assert!(!got.is_empty(), "every message is delivered");
        for m in got {
            assert_eq!(m.sequence_number(), sent[completed], "in order");
            f.settle(&m, Disposition::Complete).await.expect("complete");
            completed += 1;
        }
    }
    // Completed in order, each message's meta record is left for the floor's sweep: what is left
    // spans less than one sweep (1,024 sequence numbers), not the 2,100 written.
    let left = main_meta_records(&f).await;
    assert!(left <= 1024, "{left} main-queue records left");

    let f = restart(f, r).await;
    assert_eq!(f.counts().await, Counts::default(), "nothing completed comes back");
    assert!(f.peek_all(QUEUE).await.is_empty());
    let next = f.send_one(Message::new("after")).await;
    assert!(next > *sent.last().expect("sent"), "numbering goes on");
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let got = take_up_to(&r, 10).await;
    assert_eq!(seqs(&got), vec![next]);
    assert_eq!(&got[0].message.body[..], b"after");
}

#[tokio::test]
async fn a_message_completed_above_a_live_one_stays_completed_after_a_restart() {
    let f = Fixture::with_queue(queue_with(|d| d.lock_duration = secs(30))).await;
    let sent = f.send(["a", "b", "c"].map(Message::new).to_vec()).await;
    let r = f.receiver(ReceiveMode::PeekLock).await;
    let got = take_up_to(&r, 3).await;
    assert_eq!(seqs(&got), sent);
    // b settles while a, below it, is still locked: the floor stays at a.
    f.settle(&got[1], Disposition::Complete).await.expect("complete b");

    let f = restart(f, r).await;
    let left: Vec<SequenceNumber> = seqs(&f.peek_all(QUEUE).await);
    assert_eq!(left, vec![sent[0], sent[2]], "a and c, unsettled at the restart, are back");
    assert_eq!(main_meta_records(&f).await, 2);

    let r = f.receiver(ReceiveMode::PeekLock).await;
    let got = take_up_to(&r, 10).await;
    assert_eq!(seqs(&got), vec![sent[0], sent[2]]);
    for m in &got {
        f.settle(m, Disposition::Complete).await.expect("complete");
    }
    let f = restart(f, r).await;
    assert_eq!(f.counts().await, Counts::default());
}
