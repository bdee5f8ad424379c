//! The fence (`CLUSTER.md` §2, core's half): two brokers on one store, each opened with a fence
//! token ([`BrokerOptions::fence_token`]), as two nodes that own the same partitions one after
//! the other. The later owner's claim stops the earlier one: its writes are refused and apply
//! nothing, and the later owner sees exactly what the earlier one had acknowledged.
//!
//! Time comes from a [`ManualClock`] both brokers share.
#![cfg(feature = "testing")]

use std::sync::Arc;

use ironbus_core::fence::Fence;
use ironbus_core::store::WriteLimits;
use ironbus_core::testing::{partition_key_prefix, LimitedStore};
use ironbus_core::{
    Broker, BrokerError, BrokerOptions, Clock, EntityDescription, ManualClock, Message,
    PartitionId, QueueDescription, ReceiveMode, ReceivedMessage, SequenceNumber, Store,
    StoreErrorKind, SubscriptionDescription, TopicDescription,
};
use ironbus_store_memory::MemoryStore;

mod common;
use common::{addr, guard, path};

async fn open<S: Store>(store: &Arc<S>, clock: &Arc<ManualClock>, token: Option<u64>) -> Broker {
    let options = BrokerOptions { fence_token: token, ..Default::default() };
    let clock: Arc<dyn Clock> = clock.clone();
    let broker = guard(Broker::open_with(vec![store.clone() as Arc<dyn Store>], clock, options))
        .await
        .expect("open broker");
    guard(broker.recovered()).await;
    broker
}

/// Every key and value in the store.
async fn everything(store: &MemoryStore) -> Vec<(bytes::Bytes, bytes::Bytes)> {
    guard(store.scan(b"", b"", usize::MAX)).await.expect("scan")
}

/// The fence of partition `partition` of queue `name`, from the partition's key prefix.
fn fence_of(broker: &Broker, name: &str, partition: PartitionId) -> Fence {
    let prefix = partition_key_prefix(broker, name, partition).expect("partition prefix");
    let id = u64::from_be_bytes(prefix[1..9].try_into().expect("an entity id"));
    Fence::new(id, partition)
}

async fn send(broker: &Broker, queue: &str, body: &str) -> Result<(), BrokerError> {
    guard(broker.send(queue, vec![Message::new(body.to_owned())])).await.map(|_| ())
}

async fn receive(broker: &Broker, queue: &str, n: u32) -> Vec<ReceivedMessage> {
    let receiver =
        guard(broker.open_receiver(queue, ReceiveMode::PeekLock)).await.expect("receiver");
    receiver.add_credit(n);
    guard(receiver.drain()).await;
    std::iter::from_fn(|| receiver.try_recv()).collect()
}

async fn bodies(broker: &Broker, queue: &str) -> Vec<String> {
    let peeked = guard(broker.peek(addr(queue), SequenceNumber(0), 100)).await.expect("peek");
    peeked.iter().map(|m| String::from_utf8_lossy(&m.message.body).into_owned()).collect()
}

fn is_unavailable(result: Result<(), BrokerError>) -> bool {
    matches!(result, Err(ref e @ BrokerError::PartitionUnavailable { .. }) if e.is_retriable())
}

#[tokio::test]
async fn a_later_owners_claim_stops_the_earlier_owner_and_keeps_what_it_acknowledged() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let a = open(&store, &clock, Some(1)).await;
    guard(a.create_queue("q", QueueDescription::default())).await.expect("create");
    for body in ["a0", "a1", "a2", "a3"] {
        send(&a, "q", body).await.expect("send before the claim");
    }
    let received = receive(&a, "q", 3).await;
    assert_eq!(received.len(), 3);
    guard(a.complete("q", received[0].lock_token().expect("locked"))).await.expect("complete");
    let fence = fence_of(&a, "q", PartitionId(0));
    assert_eq!(guard(fence.token(&*store)).await.expect("read"), Some(1));

    let b = open(&store, &clock, Some(2)).await;
    assert_eq!(guard(fence.token(&*store)).await.expect("read"), Some(2), "B claimed");

    let before = everything(&store).await;
    assert!(is_unavailable(send(&a, "q", "late").await), "A's send after the claim");
    let late_complete = guard(a.complete("q", received[1].lock_token().expect("locked"))).await;
    assert!(is_unavailable(late_complete), "A's complete after the claim");
    assert!(is_unavailable(send(&a, "q", "later").await), "A stays stopped");
    clock.advance(std::time::Duration::from_secs(5));
    assert!(is_unavailable(send(&a, "q", "much later").await), "A does not rebuild");
    assert_eq!(everything(&store).await, before, "A applied nothing after the claim");

    assert_eq!(bodies(&b, "q").await, ["a1", "a2", "a3"], "what A acknowledged, no more");
    send(&b, "q", "b0").await.expect("B serves");
    assert_eq!(bodies(&b, "q").await, ["a1", "a2", "a3", "b0"]);
    a.shutdown();
    b.shutdown();
}

#[tokio::test]
async fn a_claim_with_a_token_not_greater_than_the_fences_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let b = open(&store, &clock, Some(5)).await;
    guard(b.create_queue("q", QueueDescription::default())).await.expect("create");
    send(&b, "q", "m").await.expect("send");
    let fence = fence_of(&b, "q", PartitionId(0));
    for token in [4, 5] {
        let refused = guard(fence.claim(&*store, token)).await.expect_err("not greater");
        assert_eq!(refused.kind, StoreErrorKind::Conflict);
    }
    assert_eq!(guard(fence.token(&*store)).await.expect("read"), Some(5));

    // A broker whose token is below the fence's serves nothing and moves nothing.
    let before = everything(&store).await;
    let stale = open(&store, &clock, Some(3)).await;
    assert!(is_unavailable(send(&stale, "q", "stale").await));
    assert_eq!(everything(&store).await, before);
    send(&b, "q", "still b").await.expect("B keeps the partition");
    assert_eq!(bodies(&b, "q").await, ["m", "still b"]);

    guard(fence.claim(&*store, 6)).await.expect("a greater token moves the fence");
    assert_eq!(guard(fence.token(&*store)).await.expect("read"), Some(6));
    assert!(is_unavailable(send(&b, "q", "after 6").await));
    stale.shutdown();
    b.shutdown();
}

#[tokio::test]
async fn an_unfenced_broker_writes_no_fence() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let broker = open(&store, &clock, None).await;
    let partitioned = QueueDescription { enable_partitioning: true, ..Default::default() };
    guard(broker.create_queue("q", partitioned)).await.expect("create");
    for i in 0..20 {
        send(&broker, "q", &format!("m{i}")).await.expect("send");
    }
    let keys: Vec<_> = everything(&store).await.into_iter().map(|(k, _)| k).collect();
    let mut count = 0;
    for p in (0..16).map(PartitionId) {
        let Ok(prefix) = partition_key_prefix(&broker, "q", p) else { break };
        count += 1;
        let fence = fence_of(&broker, "q", p);
        assert!(fence.key().starts_with(&prefix));
        assert!(!keys.contains(fence.key()), "no fence record in partition {p}");
        assert_eq!(guard(fence.token(&*store)).await.expect("read"), None);
    }
    assert!(count > 1, "a partitioned queue");
    broker.shutdown();
}

#[tokio::test]
async fn a_topics_subscriptions_move_with_its_partition() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let a = open(&store, &clock, Some(1)).await;
    let topic = EntityDescription::Topic(TopicDescription::default());
    guard(a.create_entity(&path("t"), topic)).await.expect("topic");
    let subscription = EntityDescription::Subscription(SubscriptionDescription::default());
    guard(a.create_entity(&path("t/Subscriptions/s"), subscription)).await.expect("subscription");
    send(&a, "t", "p0").await.expect("publish before the claim");

    let b = open(&store, &clock, Some(2)).await;
    let before = everything(&store).await;
    assert!(is_unavailable(send(&a, "t", "late").await), "A's publish after the claim");
    assert_eq!(everything(&store).await, before, "A applied nothing after the claim");
    assert_eq!(bodies(&b, "t/Subscriptions/s").await, ["p0"]);
    send(&b, "t", "p1").await.expect("B publishes");
    assert_eq!(bodies(&b, "t/Subscriptions/s").await, ["p0", "p1"]);
    a.shutdown();
    b.shutdown();
}

#[tokio::test]
async fn a_fenced_partition_keeps_its_writes_and_their_guard_within_the_stores_limits() {
    let limits = WriteLimits { max_ops: 50, max_bytes: 16 * 1024 };
    let store = Arc::new(LimitedStore::new(Arc::new(MemoryStore::new()), limits));
    let clock = Arc::new(ManualClock::default());
    let broker = open(&store, &clock, Some(1)).await;
    guard(broker.create_queue("q", QueueDescription::default())).await.expect("create");
    // Queued before the partition runs a cycle: far more than one write may hold.
    let sends: Vec<_> = (0..500)
        .map(|i| broker.start_send("q", vec![Message::new(format!("m{i}"))]).expect("queued"))
        .collect();
    for send in sends {
        guard(send).await.expect("send");
    }
    assert_eq!(store.refused(), 0, "no batch over the limits");
    assert!(store.largest_ops() > 10, "sends share writes: {}", store.largest_ops());
    assert!(store.largest_ops() <= limits.max_ops);
    assert!(store.largest_bytes() <= limits.max_bytes);
    assert_eq!(bodies(&broker, "q").await.len(), 100, "a peek's worth");
    broker.shutdown();
}
