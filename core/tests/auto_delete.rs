//! AutoDeleteOnIdle on the broker's clock: an entity unused for its AutoDeleteOnIdle is
//! deleted; sends, receives and management reset the timer; ForwardTo keeps an entity; a
//! subscription's idleness is its own and a topic's includes its subscriptions'; the timer
//! survives a restart without restarting.

use std::sync::Arc;
use std::time::Duration;

use ironbus_core::broker::IDLE_TICK;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{addr, guard, path};

const MINUTE: Duration = Duration::from_secs(60);

struct Namespace {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
}

async fn namespace() -> Namespace {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let broker =
        Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()).await.unwrap();
    Namespace { broker, clock, store }
}

fn idle_queue(minutes: u32) -> QueueDescription {
    QueueDescription { auto_delete_on_idle: MINUTE * minutes, ..Default::default() }
}

impl Namespace {
    fn exists(&self, p: &str) -> bool {
        match self.broker.get_entity(&path(p)).now_or_never() {
            Some(Ok(_)) => true,
            Some(Err(BrokerError::EntityNotFound { .. })) => false,
            other => panic!("{p}: {other:?}"),
        }
    }

    /// Moves the clock on and runs a sweep at the new time.
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
        guard(self.broker.sweep_idle()).await;
    }
}

/// `get_entity` answers from memory; this avoids a runtime of its own for the check.
trait NowOrNever: std::future::Future + Sized {
    fn now_or_never(self) -> Option<Self::Output> {
        let mut future = std::pin::pin!(self);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
impl<F: std::future::Future> NowOrNever for F {}

#[tokio::test]
async fn an_idle_queue_is_deleted_after_its_auto_delete_on_idle_on_the_broker_clock() {
    let ns = namespace().await;
    ns.broker.create_queue("idle", idle_queue(5)).await.unwrap();
    ns.broker.create_queue("kept", QueueDescription::default()).await.unwrap();
    ns.broker.send("idle", vec![Message::new("left in it")]).await.unwrap();
    ns.advance(5 * MINUTE - Duration::from_secs(1)).await;
    assert!(ns.exists("idle"), "idle for less than its AutoDeleteOnIdle");
    ns.advance(Duration::from_secs(1)).await;
    assert!(!ns.exists("idle"), "idle for its AutoDeleteOnIdle, messages and all");
    assert!(ns.exists("kept"), "no AutoDeleteOnIdle: never deleted");

    // The broker's own sweep does it too, every tick of its clock.
    ns.broker.create_queue("idle", idle_queue(5)).await.unwrap();
    for _ in 0..12 {
        ns.clock.advance(IDLE_TICK);
        tokio::task::yield_now().await;
    }
    guard(async {
        while ns.exists("idle") {
            ns.clock.advance(IDLE_TICK);
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(ns.exists("kept"));
}

#[tokio::test]
async fn sends_receives_peeks_and_management_reset_the_idle_timer() {
    let ns = namespace().await;
    let broker = &ns.broker;
    broker.create_queue("q", idle_queue(5)).await.unwrap();

    // A send at 4 minutes: idle from then.
    ns.advance(4 * MINUTE).await;
    broker.send("q", vec![Message::new("a")]).await.unwrap();
    ns.advance(4 * MINUTE).await;
    assert!(ns.exists("q"), "used 4 minutes ago");

    // A receive (a receiver opened, a message taken, the receiver closed).
    let receiver = broker.open_receiver("q", ReceiveMode::ReceiveAndDelete).await.unwrap();
    receiver.add_credit(1);
    guard(receiver.recv()).await.unwrap();
    drop(receiver);
    ns.advance(4 * MINUTE).await;
    assert!(ns.exists("q"), "received from 4 minutes ago");

    // A peek.
    broker.peek("q", Default::default(), 1).await.unwrap();
    ns.advance(4 * MINUTE).await;
    assert!(ns.exists("q"), "peeked 4 minutes ago");

    // An update.
    broker.update_queue("q", idle_queue(5)).await.unwrap();
    ns.advance(4 * MINUTE).await;
    assert!(ns.exists("q"), "updated 4 minutes ago");

    // A receiver open all along is a receive all along.
    let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    ns.advance(30 * MINUTE).await;
    assert!(ns.exists("q"), "a receiver is open");
    drop(receiver);
    ns.advance(4 * MINUTE).await;
    assert!(ns.exists("q"));
    ns.advance(MINUTE).await;
    assert!(!ns.exists("q"), "idle for 5 minutes since the receiver closed");
}

#[tokio::test]
async fn forward_to_keeps_an_entity_and_its_topic() {
    let ns = namespace().await;
    let broker = &ns.broker;
    broker.create_queue("dest", QueueDescription::default()).await.unwrap();
    let forwarding = QueueDescription { forward_to: Some("dest".into()), ..idle_queue(5) };
    broker.create_queue("forwarding", forwarding).await.unwrap();
    broker.create_queue("plain", idle_queue(5)).await.unwrap();
    let topic = TopicDescription { auto_delete_on_idle: 5 * MINUTE, ..Default::default() };
    broker.create_entity(&path("t"), EntityDescription::Topic(topic)).await.unwrap();
    let sub = SubscriptionDescription {
        forward_to: Some("dest".into()),
        auto_delete_on_idle: 5 * MINUTE,
        ..Default::default()
    };
    broker
        .create_entity(&path("t/Subscriptions/s"), EntityDescription::Subscription(sub))
        .await
        .unwrap();

    ns.advance(60 * MINUTE).await;
    assert!(!ns.exists("plain"));
    assert!(ns.exists("forwarding"), "auto-forwarding is a receiver always receiving");
    assert!(ns.exists("t/Subscriptions/s"));
    assert!(ns.exists("t"), "its subscription is in use");

    // Without ForwardTo the timer runs from the update that took it away.
    broker.update_queue("forwarding", idle_queue(5)).await.unwrap();
    ns.advance(5 * MINUTE).await;
    assert!(!ns.exists("forwarding"));
}

#[tokio::test]
async fn a_subscription_is_idle_on_its_own_and_keeps_its_topic_in_use() {
    let ns = namespace().await;
    let broker = &ns.broker;
    let topic = TopicDescription { auto_delete_on_idle: 10 * MINUTE, ..Default::default() };
    broker.create_entity(&path("t"), EntityDescription::Topic(topic)).await.unwrap();
    let idle_sub =
        SubscriptionDescription { auto_delete_on_idle: 5 * MINUTE, ..Default::default() };
    broker
        .create_entity(&path("t/Subscriptions/idle"), EntityDescription::Subscription(idle_sub))
        .await
        .unwrap();
    broker
        .create_entity(
            &path("t/Subscriptions/used"),
            EntityDescription::Subscription(SubscriptionDescription::default()),
        )
        .await
        .unwrap();

    // Sends to the topic every 2 minutes: the topic is in use, the subscriptions are not.
    for _ in 0..3 {
        ns.advance(2 * MINUTE).await;
        broker.send("t", vec![Message::new("m")]).await.unwrap();
    }
    assert!(!ns.exists("t/Subscriptions/idle"), "a publish to its topic is no use of it");
    assert!(ns.exists("t/Subscriptions/used"), "no AutoDeleteOnIdle of its own");

    // No more sends; receives on a subscription keep the topic in use.
    for _ in 0..6 {
        ns.advance(3 * MINUTE).await;
        broker.peek(addr("t/Subscriptions/used"), Default::default(), 1).await.unwrap();
    }
    assert!(ns.exists("t"), "its subscription was used 3 minutes ago");
    ns.advance(10 * MINUTE).await;
    assert!(!ns.exists("t"));
    assert!(!ns.exists("t/Subscriptions/used"), "a topic's delete takes its subscriptions");
}

#[tokio::test]
async fn scheduled_messages_keep_a_queue_in_use() {
    let ns = namespace().await;
    ns.broker.create_queue("q", idle_queue(5)).await.unwrap();
    let at = ns.clock.now().saturating_add(20 * MINUTE);
    let later = Message::new("later").with_scheduled_enqueue_time(at);
    ns.broker.schedule("q", vec![later]).await.unwrap();
    ns.advance(10 * MINUTE).await;
    assert!(ns.exists("q"), "a scheduled message is waiting");
    ns.advance(9 * MINUTE).await;
    assert!(ns.exists("q"), "a scheduled message is still waiting");
    ns.advance(7 * MINUTE).await;
    assert!(!ns.exists("q"), "nothing scheduled any more, nor used");
}

#[tokio::test]
async fn the_idle_timer_survives_a_restart_neither_reset_nor_cut_short() {
    let ns = namespace().await;
    let t0 = ns.clock.now();
    ns.broker.create_queue("q", idle_queue(10)).await.unwrap();
    ns.advance(3 * MINUTE).await;
    ns.broker.send("q", vec![Message::new("a")]).await.unwrap();
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    ns.advance(5 * MINUTE).await;
    ns.broker.shutdown();
    drop(ns.broker);

    // Back at 8 minutes, on the same store and clock: the last use (3 minutes) still counts.
    let broker =
        Broker::open(ns.store.clone(), ns.clock.clone(), NamespaceLimits::default()).await.unwrap();
    let ns = Namespace { broker, clock: ns.clock, store: ns.store };
    ns.clock.set(t0.saturating_add(12 * MINUTE));
    guard(ns.broker.sweep_idle()).await;
    assert!(ns.exists("q"), "used at 3 minutes: not idle for 10 minutes at 12");
    ns.clock.set(t0.saturating_add(15 * MINUTE));
    guard(ns.broker.sweep_idle()).await;
    assert!(!ns.exists("q"), "a restart at 8 minutes does not restart the timer");
}

#[tokio::test]
async fn a_receiver_open_on_a_subscription_keeps_its_topic() {
    let ns = namespace().await;
    let broker = &ns.broker;
    let topic = TopicDescription { auto_delete_on_idle: 5 * MINUTE, ..Default::default() };
    broker.create_entity(&path("t"), EntityDescription::Topic(topic)).await.unwrap();
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    broker.create_entity(&path("t/Subscriptions/s"), sub).await.unwrap();
    let receiver =
        broker.open_receiver(addr("t/Subscriptions/s"), ReceiveMode::PeekLock).await.unwrap();
    ns.advance(30 * MINUTE).await;
    assert!(ns.exists("t"), "a receiver waits on its subscription");
    drop(receiver);
    ns.advance(5 * MINUTE).await;
    assert!(!ns.exists("t"));
    assert!(!ns.exists("t/Subscriptions/s"));
}
